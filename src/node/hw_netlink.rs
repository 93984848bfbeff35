//! Port `hw_counters` at scrape time over RDMA netlink: one `RDMA_NLDEV_CMD_STAT_GET` (a doit
//! with the device index and port, what `rdma statistic show link DEV/PORT` sends, iproute2
//! `rdma/stat.c`, here without `NLM_F_ACK`: the answer is then one datagram) answers every
//! counter of a port, where sysfs costs one `pread` per counter.
//!
//! What the kernel answers (`drivers/infiniband/core/nldev.c`, `nldev_stat_get_doit` ->
//! `stat_get_doit_default_counter`): the device handle (`fill_nldev_handle`: DEV_INDEX,
//! DEV_NAME), PORT_INDEX, and a STAT_HWCOUNTERS nest of ENTRY nests (NAME, VALUE u64), one per
//! counter not disabled, each `stats->value[i] + rdma_counter_get_hwstat_value(...)` right after
//! `get_hw_stats`: what sysfs' `hw_stat_port_show` prints for the same counter. Optional counters
//! (`IB_STAT_FLAG_OPTIONAL`) appear only once enabled and have no sysfs file, so the sysfs
//! listing decides which names are served; `lifespan` is a sysfs setting, not a counter, and is
//! still read from its file. STAT_GET carries no `RDMA_NL_ADMIN_PERM` in `nldev_cb_table`: no
//! capability is needed. A port without hardware statistics answers EINVAL (its sysfs has no
//! `hw_counters/`, so it is never asked); a driver without them EOPNOTSUPP.
//!
//! Each device keeps its own socket between scrapes ([`DeviceLink`]), used only by that
//! device's read (the walk runs at most one read per device), so a request that never answers
//! holds up that device alone, and the read's deadline ([`super::device_reads`]) bounds it.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::counter_filter::CounterFilter;
use super::rdma_netlink::decode::{self, AnswerError};
use super::rdma_netlink::nldev::*;
use super::rdma_netlink::wire::{self, Attr, WireError, NLM_F_DUMP};
use super::rdma_netlink::{is_unavailable, NetlinkError, NetlinkSocket, Session, Transport};
use super::reason::ReadErrorReason;

/// `node.hw_counters_source`, `--collector.sysfs.hw-counters-source`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum HwCountersSource {
    /// Netlink where the sysfs root is `/sys` and the kernel has NETLINK_RDMA, else sysfs.
    Auto,
    /// Always ask RDMA netlink first (each device falls back to sysfs on its own).
    Netlink,
    /// One file per counter: the default, because on the one kernel with RDMA devices we
    /// can measure (soft-RoCE in the VM, 15 counters a port) a request cost 1.6-2.4 times the
    /// files' CPU (BENCHMARKS.md); mlx5 (about 35 counters a port) is still to be measured.
    #[default]
    Sysfs,
}

/// The sysfs file of `hw_counters/` that is a setting (how long the kernel caches its reading),
/// not a counter: no netlink answer has it.
pub const LIFESPAN: &str = "lifespan";

/// The most a STAT_GET answer may take (one message: NLMSG_DEFAULT_SIZE, about a page).
const MAX_ANSWER: usize = 64 << 10;
/// The device list, once per device (and again when its index went stale).
const MAX_DEVICE_LIST: usize = 1 << 20;

type BoxedTransport = Box<dyn Transport + Send>;
/// Opens a transport to the kernel (a fresh `NETLINK_RDMA` socket; a fake in tests).
pub(crate) type Opener = Arc<dyn Fn() -> io::Result<BoxedTransport> + Send + Sync>;
type OpenFn = Box<dyn FnMut() -> io::Result<BoxedTransport> + Send>;

/// The scrape-time netlink reader of a node: one [`DeviceLink`] per listed device.
pub struct NetlinkHwCounters {
    open: Opener,
    /// Each port's answer (the device lookup included) must come within this.
    timeout: Duration,
    links: Mutex<HashMap<String, Arc<Mutex<DeviceLink>>>>,
    /// Each link's sequence numbers start far from the others'.
    next_seq: AtomicU32,
}

impl std::fmt::Debug for NetlinkHwCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetlinkHwCounters")
            .field("timeout", &self.timeout)
            .field("devices", &self.devices())
            .finish()
    }
}

impl NetlinkHwCounters {
    pub fn new(open: Opener, timeout: Duration) -> NetlinkHwCounters {
        NetlinkHwCounters {
            open,
            timeout,
            links: Mutex::default(),
            next_seq: AtomicU32::new(1),
        }
    }

    /// The kernel's NETLINK_RDMA sockets.
    pub fn kernel(timeout: Duration) -> NetlinkHwCounters {
        let open: Opener =
            Arc::new(|| NetlinkSocket::open(NETLINK_RDMA).map(|s| Box::new(s) as BoxedTransport));
        NetlinkHwCounters::new(open, timeout)
    }

    /// Whether this kernel has NETLINK_RDMA (`auto` then uses it on the real `/sys`).
    pub fn kernel_answers() -> bool {
        NetlinkSocket::open(NETLINK_RDMA).is_ok()
    }

    /// Keeps the links of the devices in `listed`; the others close their sockets.
    pub fn retain(&self, listed: &[String]) {
        self.lock().retain(|name, _| listed.contains(name));
    }

    /// Device `name`'s link, made on first use.
    pub fn link(&self, name: &str) -> Arc<Mutex<DeviceLink>> {
        let mut links = self.lock();
        if let Some(link) = links.get(name) {
            return link.clone();
        }
        let seq = self.next_seq.fetch_add(1 << 24, Ordering::Relaxed);
        let open = self.open.clone();
        let link = Arc::new(Mutex::new(DeviceLink {
            device: name.to_string(),
            session: Session::unopened(Box::new(move || open()), seq),
            index: None,
            refused: false,
            timeout: self.timeout,
        }));
        links.insert(name.to_string(), link.clone());
        link
    }

    /// Names of the devices with a link (tests).
    pub fn devices(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().keys().cloned().collect();
        names.sort_unstable();
        names
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Mutex<DeviceLink>>>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why a port's counters did not come from netlink in this read; its sysfs files are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// The device was refused earlier: sysfs for good, nothing to count again.
    Off,
    Counted(ReadErrorReason, String),
}

impl Miss {
    fn new(reason: ReadErrorReason, detail: impl Into<String>) -> Miss {
        Miss::Counted(reason, detail.into())
    }
}

/// One device's socket and index, kept between scrapes.
pub struct DeviceLink {
    device: String,
    session: Session<BoxedTransport, OpenFn>,
    /// The kernel's index of the device, looked up by name (`CMD_GET` dump); dropped when an
    /// answer says it went stale (the device was re-created).
    index: Option<u32>,
    /// EPERM, EOPNOTSUPP or no NETLINK_RDMA: sysfs from now on.
    refused: bool,
    timeout: Duration,
}

/// What a request's failure means for the link.
enum Failure {
    Miss(Miss),
    /// EINVAL or ENODEV, or an answer about another device: the index may be stale.
    Stale(String),
}

impl DeviceLink {
    pub(crate) fn is_refused(&self) -> bool {
        self.refused
    }

    /// The values of the counters `names` lists (a port's `hw_counters/` listing, in its
    /// order) from one STAT_GET of `port`: `None` where `keep` leaves a counter out, and for
    /// [`LIFESPAN`] (the caller reads its file). Every other listed counter must be in the answer.
    pub fn port_values(
        &mut self,
        port: u32,
        names: &[Box<str>],
        keep: &CounterFilter,
    ) -> Result<Vec<Option<u64>>, Miss> {
        if self.refused {
            return Err(Miss::Off);
        }
        let deadline = Instant::now() + self.timeout;
        let mut retried = false;
        loop {
            match self.ask_port(port, deadline) {
                Ok(bytes) => return values_of(&bytes, names, keep),
                Err(Failure::Stale(detail)) => {
                    self.index = None;
                    if retried {
                        return Err(Miss::new(ReadErrorReason::NetlinkError, detail));
                    }
                    retried = true;
                }
                Err(Failure::Miss(miss)) => {
                    if let Miss::Counted(ReadErrorReason::NetlinkRefused, detail) = &miss {
                        self.refused = true;
                        tracing::warn!(
                            device = %self.device,
                            %detail,
                            "RDMA netlink refused the port statistics; this device's \
                             hw_counters are read from sysfs from now on"
                        );
                    }
                    return Err(miss);
                }
            }
        }
    }

    /// One port's checked answer bytes, for [`values_of`] (the bench times the decoding alone).
    pub fn port_answer(&mut self, port: u32) -> Result<Vec<u8>, Miss> {
        let deadline = Instant::now() + self.timeout;
        self.ask_port(port, deadline).map_err(|f| match f {
            Failure::Miss(miss) => miss,
            Failure::Stale(detail) => Miss::new(ReadErrorReason::NetlinkError, detail),
        })
    }

    /// Every counter of one port's answer, in the kernel's order, without the sysfs listing
    /// (the real-kernel proof compares them with the files; `hw-counters` prints them).
    pub fn port_counters(&mut self, port: u32) -> Result<Vec<(String, u64)>, Miss> {
        let deadline = Instant::now() + self.timeout;
        let bytes = match self.ask_port(port, deadline) {
            Ok(bytes) => bytes,
            Err(Failure::Miss(miss)) => return Err(miss),
            Err(Failure::Stale(detail)) => {
                self.index = None;
                return Err(Miss::new(ReadErrorReason::NetlinkError, detail));
            }
        };
        let pairs = counters_of(&bytes)?;
        Ok(pairs.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
    }

    /// The checked bytes of one port's answer: the message is this device's and port's.
    fn ask_port(&mut self, port: u32, deadline: Instant) -> Result<Vec<u8>, Failure> {
        let index = match self.index {
            Some(index) => index,
            None => {
                let index = self.look_up(deadline)?;
                self.index = Some(index);
                index
            }
        };
        let attrs = [(ATTR_DEV_INDEX, index), (ATTR_PORT_INDEX, port)];
        let left = deadline.saturating_duration_since(Instant::now());
        let (bytes, seq) = self
            .session
            .exchange(CMD_STAT_GET, 0, &attrs, left, MAX_ANSWER)
            .map_err(request_failure)?;
        let (name, answered_port) = handle_of(&bytes, seq).map_err(answer_failure)?;
        match (name, answered_port) {
            (Some(name), _) if name != self.device => Err(Failure::Stale(format!(
                "index {index} now answers for device {name}"
            ))),
            (Some(_), Some(p)) if p == port => Ok(bytes),
            _ => Err(Failure::Miss(Miss::new(
                ReadErrorReason::NetlinkMissing,
                format!("no STAT_GET message for port {port} in the answer"),
            ))),
        }
    }

    /// The device's index, from the kernel's device list.
    fn look_up(&mut self, deadline: Instant) -> Result<u32, Failure> {
        let left = deadline.saturating_duration_since(Instant::now());
        let (bytes, seq) = self
            .session
            .exchange(CMD_GET, NLM_F_DUMP, &[], left, MAX_DEVICE_LIST)
            .map_err(request_failure)?;
        let devices = decode::answer(&bytes, Some(seq))
            .and_then(|a| decode::devices(&a.messages).map_err(AnswerError::Wire))
            .map_err(answer_failure)?;
        devices
            .iter()
            .find(|d| d.name == self.device)
            .map(|d| d.index)
            .ok_or_else(|| {
                Failure::Miss(Miss::new(
                    ReadErrorReason::NetlinkMissing,
                    "the device is not in RDMA netlink's device list",
                ))
            })
    }
}

fn request_failure(e: NetlinkError) -> Failure {
    let reason = match &e {
        NetlinkError::Timeout { .. } => ReadErrorReason::NetlinkTimeout,
        NetlinkError::Malformed { .. } => ReadErrorReason::NetlinkMalformed,
        NetlinkError::Io { source, .. } if is_unavailable(source) => {
            ReadErrorReason::NetlinkRefused
        }
        NetlinkError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
        {
            ReadErrorReason::NetlinkRefused
        }
        NetlinkError::Unavailable(_) => ReadErrorReason::NetlinkRefused,
        _ => ReadErrorReason::NetlinkError,
    };
    Failure::Miss(Miss::new(reason, e.to_string()))
}

fn answer_failure(e: AnswerError) -> Failure {
    match e {
        AnswerError::Errno(errno @ (libc::EPERM | libc::EACCES | libc::EOPNOTSUPP)) => {
            Failure::Miss(Miss::new(
                ReadErrorReason::NetlinkRefused,
                io::Error::from_raw_os_error(errno).to_string(),
            ))
        }
        AnswerError::Errno(errno @ (libc::EINVAL | libc::ENODEV)) => {
            Failure::Stale(io::Error::from_raw_os_error(errno).to_string())
        }
        AnswerError::Errno(errno) => Failure::Miss(Miss::new(
            ReadErrorReason::NetlinkError,
            io::Error::from_raw_os_error(errno).to_string(),
        )),
        AnswerError::Wire(e) => {
            Failure::Miss(Miss::new(ReadErrorReason::NetlinkMalformed, e.to_string()))
        }
    }
}

/// The STAT_GET message of an answer: its device name and port.
fn handle_of(bytes: &[u8], seq: u32) -> Result<(Option<String>, Option<u32>), AnswerError> {
    let answer = decode::answer(bytes, Some(seq))?;
    let Some(message) = stat_message(&answer.messages) else {
        return Ok((None, None));
    };
    let (mut name, mut port) = (None, None);
    for a in wire::attrs(message.payload) {
        let a = a?;
        match a.kind {
            ATTR_DEV_NAME => name = Some(a.string()),
            ATTR_PORT_INDEX => port = Some(a.u32()?),
            _ => {}
        }
    }
    Ok((name, port))
}

fn stat_message<'m, 'a>(messages: &'m [wire::Message<'a>]) -> Option<&'m wire::Message<'a>> {
    messages
        .iter()
        .find(|m| m.header.kind == msg_type(CMD_STAT_GET))
}

/// The (name, value) pairs of a checked answer, borrowed from its bytes, in the kernel's order.
fn counters_of(bytes: &[u8]) -> Result<Vec<(&str, u64)>, Miss> {
    let malformed = |e: WireError| Miss::new(ReadErrorReason::NetlinkMalformed, e.to_string());
    let answer = decode::answer(bytes, None).map_err(|e| match e {
        AnswerError::Wire(e) => malformed(e),
        AnswerError::Errno(errno) => Miss::new(
            ReadErrorReason::NetlinkError,
            io::Error::from_raw_os_error(errno).to_string(),
        ),
    })?;
    let mut pairs = Vec::new();
    let Some(message) = stat_message(&answer.messages) else {
        return Ok(pairs);
    };
    for a in wire::attrs(message.payload) {
        let a = a.map_err(malformed)?;
        if a.kind != ATTR_STAT_HWCOUNTERS {
            continue;
        }
        for entry in a.nested() {
            let entry = entry.map_err(malformed)?;
            if entry.kind == ATTR_STAT_HWCOUNTER_ENTRY {
                pairs.push(entry_of(&entry).map_err(malformed)?);
            }
        }
    }
    Ok(pairs)
}

/// One ENTRY nest: its NAME (a NUL-terminated string) and VALUE; PAD and unknown attributes
/// are skipped.
fn entry_of<'a>(entry: &Attr<'a>) -> Result<(&'a str, u64), WireError> {
    let (mut name, mut value) = (None, None);
    for f in entry.nested() {
        let f = f?;
        match f.kind {
            ATTR_STAT_HWCOUNTER_ENTRY_NAME => {
                let end = f
                    .value
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(f.value.len());
                name = Some(std::str::from_utf8(&f.value[..end]).map_err(|_| {
                    WireError::BadValue {
                        kind: f.kind,
                        len: f.value.len(),
                        expected: "UTF-8 counter name",
                    }
                })?);
            }
            ATTR_STAT_HWCOUNTER_ENTRY_VALUE => value = Some(f.u64()?),
            _ => {}
        }
    }
    match (name, value) {
        (Some(name), Some(value)) => Ok((name, value)),
        (None, _) => Err(WireError::Missing {
            what: "STAT_HWCOUNTER_ENTRY_NAME",
        }),
        (_, None) => Err(WireError::Missing {
            what: "STAT_HWCOUNTER_ENTRY_VALUE",
        }),
    }
}

/// The values of `names` (in its order) from an answer's pairs.
pub fn values_of(
    bytes: &[u8],
    names: &[Box<str>],
    keep: &CounterFilter,
) -> Result<Vec<Option<u64>>, Miss> {
    let mut pairs = counters_of(bytes)?;
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    names
        .iter()
        .map(|name| {
            if &**name == LIFESPAN || !keep.allows(name) {
                return Ok(None);
            }
            match pairs.binary_search_by(|(n, _)| (*n).cmp(name)) {
                Ok(at) => Ok(Some(pairs[at].1)),
                Err(_) => Err(Miss::new(
                    ReadErrorReason::NetlinkShort,
                    format!(
                        "the answer has {} counters and not {name}, which sysfs lists",
                        pairs.len()
                    ),
                )),
            }
        })
        .collect()
}

/// Answers as the kernel lays them out, for the tests of this module and of the device reads.
#[cfg(test)]
pub(crate) mod fake {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::node::rdma_netlink::wire::{NLMSG_DONE, NLMSG_ERROR, NLM_F_MULTI};

    /// Builds messages attribute by attribute, aligned as `nla_put` aligns them.
    #[derive(Default)]
    pub struct Message {
        buf: Vec<u8>,
        nests: Vec<usize>,
    }

    impl Message {
        pub fn new(kind: u16, flags: u16, seq: u32) -> Message {
            let mut m = Message::default();
            m.buf.extend_from_slice(&0u32.to_ne_bytes());
            m.buf.extend_from_slice(&kind.to_ne_bytes());
            m.buf.extend_from_slice(&flags.to_ne_bytes());
            m.buf.extend_from_slice(&seq.to_ne_bytes());
            m.buf.extend_from_slice(&0u32.to_ne_bytes());
            m
        }

        pub fn attr(&mut self, kind: u16, value: &[u8]) -> &mut Message {
            let len = (wire::NLA_HDRLEN + value.len()) as u16;
            self.buf.extend_from_slice(&len.to_ne_bytes());
            self.buf.extend_from_slice(&kind.to_ne_bytes());
            self.buf.extend_from_slice(value);
            self.pad();
            self
        }

        pub fn u32(&mut self, kind: u16, value: u32) -> &mut Message {
            self.attr(kind, &value.to_ne_bytes())
        }

        pub fn string(&mut self, kind: u16, value: &str) -> &mut Message {
            let mut bytes = value.as_bytes().to_vec();
            bytes.push(0);
            self.attr(kind, &bytes)
        }

        /// `nla_put_u64_64bit`: a PAD attribute first where the value would not be 8-aligned.
        pub fn u64(&mut self, kind: u16, value: u64) -> &mut Message {
            if !(self.buf.len() + wire::NLA_HDRLEN).is_multiple_of(8) {
                self.attr(ATTR_PAD, &[]);
            }
            self.attr(kind, &value.to_ne_bytes())
        }

        pub fn nest(&mut self, kind: u16) -> &mut Message {
            self.nests.push(self.buf.len());
            self.buf.extend_from_slice(&0u16.to_ne_bytes());
            self.buf
                .extend_from_slice(&(kind | wire::NLA_F_NESTED).to_ne_bytes());
            self
        }

        pub fn end(&mut self) -> &mut Message {
            let start = self.nests.pop().expect("a nest to end");
            let len = (self.buf.len() - start) as u16;
            self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
            self
        }

        fn pad(&mut self) {
            while !self.buf.len().is_multiple_of(4) {
                self.buf.push(0);
            }
        }

        pub fn bytes(&mut self) -> Vec<u8> {
            let len = self.buf.len() as u32;
            self.buf[..4].copy_from_slice(&len.to_ne_bytes());
            std::mem::take(&mut self.buf)
        }
    }

    /// `stat_get_doit_default_counter`'s answer: the handle, the port, the counters.
    pub fn stat_answer(
        seq: u32,
        index: u32,
        device: &str,
        port: u32,
        counters: &[(&str, u64)],
    ) -> Vec<u8> {
        let mut m = Message::new(msg_type(CMD_STAT_GET), 0, seq);
        m.u32(ATTR_DEV_INDEX, index)
            .string(ATTR_DEV_NAME, device)
            .u32(ATTR_PORT_INDEX, port)
            .nest(ATTR_STAT_HWCOUNTERS);
        for (name, value) in counters {
            m.nest(ATTR_STAT_HWCOUNTER_ENTRY)
                .string(ATTR_STAT_HWCOUNTER_ENTRY_NAME, name)
                .u64(ATTR_STAT_HWCOUNTER_ENTRY_VALUE, *value)
                .end();
        }
        m.end();
        m.bytes()
    }

    /// `NLMSG_ERROR` with `errno` (0: the acknowledgement).
    pub fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut m = Message::new(NLMSG_ERROR, 0, seq);
        m.buf.extend_from_slice(&(-errno).to_ne_bytes());
        // The request's header, as the kernel echoes it.
        m.buf.extend_from_slice(&[0; wire::NLMSG_HDRLEN]);
        m.bytes()
    }

    /// A `CMD_GET` dump of `devices` (index, name, ports), then DONE.
    pub(crate) fn device_list(seq: u32, devices: &[(u32, &str, u32)]) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = devices
            .iter()
            .map(|(index, name, ports)| {
                Message::new(msg_type(CMD_GET), NLM_F_MULTI, seq)
                    .u32(ATTR_DEV_INDEX, *index)
                    .string(ATTR_DEV_NAME, name)
                    .u32(ATTR_PORT_INDEX, *ports)
                    .bytes()
            })
            .collect();
        let mut done = Message::new(NLMSG_DONE, NLM_F_MULTI, seq);
        done.buf.extend_from_slice(&0i32.to_ne_bytes());
        out.push(done.bytes());
        out
    }

    /// How a fake kernel answers a STAT_GET of (device name, port).
    pub(crate) type Answerer = dyn Fn(&str, u32, u32) -> Vec<Vec<u8>> + Send + Sync;

    /// A kernel of named devices (index = position) answering STAT_GET through `answer`.
    pub struct Kernel {
        pub devices: Vec<String>,
        pub answer: Box<Answerer>,
        /// Requests sent, over all transports.
        pub requests: AtomicUsize,
        /// Transports opened.
        pub opened: AtomicUsize,
    }

    impl Kernel {
        pub fn new(devices: &[&str], answer: Box<Answerer>) -> Arc<Kernel> {
            Arc::new(Kernel {
                devices: devices.iter().map(|d| d.to_string()).collect(),
                answer,
                requests: AtomicUsize::new(0),
                opened: AtomicUsize::new(0),
            })
        }

        /// Answers with `counters` for every port, acknowledged.
        pub fn serving(devices: &[&str], counters: Vec<(String, u64)>) -> Arc<Kernel> {
            let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
            Kernel::new(
                devices,
                Box::new(move |device, port, seq| {
                    let index = names.iter().position(|n| n == device).unwrap_or(0) as u32;
                    let pairs: Vec<(&str, u64)> =
                        counters.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                    vec![stat_answer(seq, index, device, port, &pairs), error(seq, 0)]
                }),
            )
        }

        pub(crate) fn opener(self: &Arc<Self>) -> Opener {
            let kernel = self.clone();
            Arc::new(move || {
                kernel.opened.fetch_add(1, Ordering::SeqCst);
                Ok(Box::new(FakeSocket {
                    kernel: kernel.clone(),
                    queue: VecDeque::new(),
                }) as BoxedTransport)
            })
        }
    }

    struct FakeSocket {
        kernel: Arc<Kernel>,
        queue: VecDeque<Vec<u8>>,
    }

    impl Transport for FakeSocket {
        fn send(&mut self, request: &[u8]) -> io::Result<()> {
            self.kernel.requests.fetch_add(1, Ordering::SeqCst);
            let m = wire::messages(request)
                .next()
                .and_then(Result::ok)
                .ok_or_else(|| io::Error::other("bad request"))?;
            let seq = m.header.seq;
            let attrs: Vec<(u16, u32)> = wire::attrs(m.payload)
                .filter_map(Result::ok)
                .filter_map(|a| Some((a.kind, a.u32().ok()?)))
                .collect();
            let get = |kind| attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v);
            match op_of(m.header.kind) {
                CMD_GET => {
                    let list: Vec<(u32, &str, u32)> = self
                        .kernel
                        .devices
                        .iter()
                        .enumerate()
                        .map(|(i, n)| (i as u32, n.as_str(), 1))
                        .collect();
                    self.queue.extend(device_list(seq, &list));
                }
                CMD_STAT_GET => {
                    let device = get(ATTR_DEV_INDEX)
                        .and_then(|i| self.kernel.devices.get(i as usize).cloned());
                    // As the kernel: the acknowledgement only when asked for.
                    let asked_ack = m.header.flags & wire::NLM_F_ACK != 0;
                    let is_ack = |d: &Vec<u8>| {
                        wire::messages(d)
                            .next()
                            .and_then(Result::ok)
                            .is_some_and(|m| {
                                m.header.kind == NLMSG_ERROR && m.error_code() == Ok(0)
                            })
                    };
                    match (device, get(ATTR_PORT_INDEX)) {
                        (Some(device), Some(port)) => self.queue.extend(
                            (self.kernel.answer)(&device, port, seq)
                                .into_iter()
                                .filter(|d| asked_ack || !is_ack(d)),
                        ),
                        _ => self.queue.push_back(error(seq, libc::EINVAL)),
                    }
                }
                _ => self.queue.push_back(error(seq, libc::EOPNOTSUPP)),
            }
            Ok(())
        }

        fn recv(&mut self, _timeout: Duration) -> io::Result<Option<Vec<u8>>> {
            Ok(self.queue.pop_front())
        }
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::fake::*;
    use super::*;

    const RXE: &[(&str, u64)] = &[
        ("sent_pkts", 81_234),
        ("rcvd_pkts", 80_001),
        ("duplicate_request", 3),
        ("out_of_seq_request", 0),
        ("rdma_sends", 17),
        ("rdma_recvs", 1 << 40),
    ];

    fn listing(names: &[&str]) -> Vec<Box<str>> {
        let mut names: Vec<Box<str>> = names.iter().map(|n| Box::from(*n)).collect();
        names.sort_unstable();
        names
    }

    fn rxe_listing() -> Vec<Box<str>> {
        let mut names: Vec<&str> = RXE.iter().map(|(n, _)| *n).collect();
        names.push(LIFESPAN);
        listing(&names)
    }

    fn owned(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    fn link_to(kernel: &Arc<Kernel>, device: &str) -> Arc<Mutex<DeviceLink>> {
        NetlinkHwCounters::new(kernel.opener(), Duration::from_millis(200)).link(device)
    }

    #[test]
    fn values_follow_the_sysfs_listing_whatever_the_kernel_order() {
        let kernel = Kernel::serving(&["rxe0", "rxe1"], owned(RXE));
        let link = link_to(&kernel, "rxe1");
        let names = rxe_listing();
        let values = link
            .lock()
            .unwrap()
            .port_values(1, &names, &CounterFilter::ALL)
            .unwrap();
        let got: Vec<(&str, Option<u64>)> = names
            .iter()
            .map(|n| &**n)
            .zip(values.iter().copied())
            .collect();
        assert_eq!(
            got,
            [
                ("duplicate_request", Some(3)),
                ("lifespan", None),
                ("out_of_seq_request", Some(0)),
                ("rcvd_pkts", Some(80_001)),
                ("rdma_recvs", Some(1 << 40)),
                ("rdma_sends", Some(17)),
                ("sent_pkts", Some(81_234)),
            ]
        );
        // One device lookup, then one request per port read; the socket is kept.
        let again = link
            .lock()
            .unwrap()
            .port_values(1, &names, &CounterFilter::ALL)
            .unwrap();
        assert_eq!(again, values);
        assert_eq!(kernel.requests.load(Ordering::SeqCst), 3);
        assert_eq!(kernel.opened.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_counter_filter_leaves_out_what_sysfs_would_not_open() {
        let kernel = Kernel::serving(&["rxe0"], owned(RXE));
        let keep = CounterFilter::from_patterns(Some("r.*|sent_pkts"), Some("rdma_recvs")).unwrap();
        let names = rxe_listing();
        let values = link_to(&kernel, "rxe0")
            .lock()
            .unwrap()
            .port_values(1, &names, &keep)
            .unwrap();
        let kept: Vec<&str> = names
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_some())
            .map(|(n, _)| &**n)
            .collect();
        assert_eq!(kept, ["rcvd_pkts", "rdma_sends", "sent_pkts"]);
    }

    #[test]
    fn optional_counters_sysfs_does_not_list_are_ignored_and_missing_ones_are_short() {
        let mut more = owned(RXE);
        more.push(("cc_rx_ce_pkts".into(), 5));
        let kernel = Kernel::serving(&["mlx5_0"], more);
        let names = rxe_listing();
        let values = link_to(&kernel, "mlx5_0")
            .lock()
            .unwrap()
            .port_values(1, &names, &CounterFilter::ALL)
            .unwrap();
        assert_eq!(values.iter().flatten().count(), RXE.len());

        let kernel = Kernel::serving(&["mlx5_0"], owned(&RXE[1..]));
        let miss = link_to(&kernel, "mlx5_0")
            .lock()
            .unwrap()
            .port_values(1, &names, &CounterFilter::ALL)
            .unwrap_err();
        assert!(
            matches!(&miss, Miss::Counted(ReadErrorReason::NetlinkShort, d) if d.contains("sent_pkts")),
            "{miss:?}"
        );
    }

    fn miss_of(kernel: &Arc<Kernel>) -> (Miss, Arc<Mutex<DeviceLink>>) {
        let link = link_to(kernel, "rxe0");
        let miss = link
            .lock()
            .unwrap()
            .port_values(1, &rxe_listing(), &CounterFilter::ALL)
            .unwrap_err();
        (miss, link)
    }

    fn reason(miss: &Miss) -> Option<ReadErrorReason> {
        match miss {
            Miss::Off => None,
            Miss::Counted(reason, _) => Some(*reason),
        }
    }

    #[test]
    fn refusal_switches_the_device_to_sysfs_for_good() {
        for errno in [libc::EPERM, libc::EOPNOTSUPP] {
            let kernel = Kernel::new(
                &["rxe0"],
                Box::new(move |_, _, seq| vec![error(seq, errno)]),
            );
            let (miss, link) = miss_of(&kernel);
            assert_eq!(reason(&miss), Some(ReadErrorReason::NetlinkRefused));
            assert!(link.lock().unwrap().is_refused());
            let asked = kernel.requests.load(Ordering::SeqCst);
            let again = link
                .lock()
                .unwrap()
                .port_values(1, &rxe_listing(), &CounterFilter::ALL);
            assert_eq!(again, Err(Miss::Off), "counted once, not asked again");
            assert_eq!(kernel.requests.load(Ordering::SeqCst), asked);
        }
        // No NETLINK_RDMA in the kernel: socket() refuses the protocol.
        let open: Opener = Arc::new(|| Err(io::Error::from_raw_os_error(libc::EPROTONOSUPPORT)));
        let link = NetlinkHwCounters::new(open, Duration::from_millis(50)).link("rxe0");
        let miss = link
            .lock()
            .unwrap()
            .port_values(1, &rxe_listing(), &CounterFilter::ALL)
            .unwrap_err();
        assert_eq!(reason(&miss), Some(ReadErrorReason::NetlinkRefused));
    }

    #[test]
    fn other_failures_count_their_reason_and_the_next_read_asks_again() {
        let cases: Vec<(Box<Answerer>, ReadErrorReason)> = vec![
            // A message of another command: none for the port.
            (
                Box::new(|_, _, seq| vec![device_list(seq, &[(0, "rxe0", 1)]).remove(0)]),
                ReadErrorReason::NetlinkMissing,
            ),
            // Another port's message.
            (
                Box::new(|d, _, seq| vec![stat_answer(seq, 0, d, 2, RXE), error(seq, 0)]),
                ReadErrorReason::NetlinkMissing,
            ),
            (
                Box::new(|_, _, seq| vec![error(seq, libc::EBUSY)]),
                ReadErrorReason::NetlinkError,
            ),
            // Silence: the deadline passes.
            (
                Box::new(|_, _, _| Vec::new()),
                ReadErrorReason::NetlinkTimeout,
            ),
            // An entry without its value.
            (
                Box::new(|d, p, seq| {
                    let mut m = Message::new(msg_type(CMD_STAT_GET), 0, seq);
                    m.u32(ATTR_DEV_INDEX, 0)
                        .string(ATTR_DEV_NAME, d)
                        .u32(ATTR_PORT_INDEX, p)
                        .nest(ATTR_STAT_HWCOUNTERS)
                        .nest(ATTR_STAT_HWCOUNTER_ENTRY)
                        .string(ATTR_STAT_HWCOUNTER_ENTRY_NAME, "sent_pkts")
                        .end()
                        .end();
                    vec![m.bytes(), error(seq, 0)]
                }),
                ReadErrorReason::NetlinkMalformed,
            ),
        ];
        for (answer, expected) in cases {
            let kernel = Kernel::new(&["rxe0"], answer);
            let (miss, link) = miss_of(&kernel);
            assert_eq!(reason(&miss), Some(expected), "{miss:?}");
            assert!(!link.lock().unwrap().is_refused());
            let asked = kernel.requests.load(Ordering::SeqCst);
            let again = link
                .lock()
                .unwrap()
                .port_values(1, &rxe_listing(), &CounterFilter::ALL);
            assert!(matches!(again, Err(Miss::Counted(..))), "{again:?}");
            assert!(kernel.requests.load(Ordering::SeqCst) > asked);
        }
    }

    #[test]
    fn a_stale_index_is_looked_up_again() {
        // The device was re-created: its old index answers EINVAL once, the lookup finds it.
        let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let kernel = Kernel::new(
            &["rxe0"],
            Box::new(move |d, p, seq| {
                if first.swap(false, Ordering::SeqCst) {
                    vec![error(seq, libc::EINVAL)]
                } else {
                    vec![stat_answer(seq, 0, d, p, RXE), error(seq, 0)]
                }
            }),
        );
        let link = link_to(&kernel, "rxe0");
        let values = link
            .lock()
            .unwrap()
            .port_values(1, &rxe_listing(), &CounterFilter::ALL)
            .unwrap();
        assert_eq!(values.iter().flatten().count(), RXE.len());
        // Lookup, EINVAL, lookup again, answer.
        assert_eq!(kernel.requests.load(Ordering::SeqCst), 4);
        // Another device's name under the index: looked up again, and then reported.
        let kernel = Kernel::new(
            &["rxe0"],
            Box::new(|_, p, seq| vec![stat_answer(seq, 0, "rxe9", p, RXE), error(seq, 0)]),
        );
        let (miss, _) = miss_of(&kernel);
        assert!(
            matches!(&miss, Miss::Counted(ReadErrorReason::NetlinkError, d) if d.contains("rxe9")),
            "{miss:?}"
        );
    }

    #[test]
    fn a_device_netlink_does_not_list_is_missing() {
        let kernel = Kernel::serving(&["rxe0"], owned(RXE));
        let link = link_to(&kernel, "rxe7");
        let miss = link
            .lock()
            .unwrap()
            .port_values(1, &rxe_listing(), &CounterFilter::ALL)
            .unwrap_err();
        assert_eq!(reason(&miss), Some(ReadErrorReason::NetlinkMissing));
    }

    #[test]
    fn links_follow_the_listed_devices() {
        let kernel = Kernel::serving(&["a", "b"], owned(RXE));
        let hw = NetlinkHwCounters::new(kernel.opener(), Duration::from_millis(50));
        let a = hw.link("a");
        hw.link("b");
        assert!(Arc::ptr_eq(&a, &hw.link("a")), "one link a device");
        hw.retain(&["b".to_string()]);
        assert_eq!(hw.devices(), ["b"]);
    }

    /// Every prefix of a real-shaped answer, and every byte of it replaced by a few values:
    /// an error or values, never a panic; and a cut answer is never taken for a whole one.
    #[test]
    fn truncations_and_corruptions_are_errors_not_panics() {
        let seq = 77;
        let mut answer = stat_answer(seq, 3, "rxe0", 1, RXE);
        answer.extend(error(seq, 0));
        let names = rxe_listing();
        let whole = values_of(&answer, &names, &CounterFilter::ALL).unwrap();
        assert_eq!(whole.iter().flatten().count(), RXE.len());
        let stat_len = stat_answer(seq, 3, "rxe0", 1, RXE).len();
        let mut runs = 0;
        for cut in 0..answer.len() {
            let got = values_of(&answer[..cut], &names, &CounterFilter::ALL);
            if cut < stat_len {
                assert!(got.is_err(), "a {cut}-byte prefix gave {got:?}");
            }
            let _ = handle_of(&answer[..cut], seq);
            runs += 1;
        }
        let mut copy = answer.clone();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for at in 0..copy.len() {
            let original = copy[at];
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff, original ^ 0x04] {
                copy[at] = value;
                let _ = values_of(&copy, &names, &CounterFilter::ALL);
                let _ = handle_of(&copy, seq);
                runs += 1;
            }
            copy[at] = original;
        }
        // Random multi-byte corruptions (a fixed xorshift sequence).
        for _ in 0..5_000 {
            let mut copy = answer.clone();
            for _ in 0..4 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let at = (rng % copy.len() as u64) as usize;
                copy[at] = (rng >> 32) as u8;
            }
            let _ = values_of(&copy, &names, &CounterFilter::ALL);
            let _ = handle_of(&copy, seq);
            runs += 1;
        }
        assert!(runs > 5_000 + answer.len() * 6);
    }
}
