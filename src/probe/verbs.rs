//! The probe's UD endpoint on libibverbs ([`Endpoint`]), the only module of `probe` with
//! `unsafe`. The binding is our own (`ffi`): libibverbs.so.1 is `dlopen`ed at the first use and
//! its layouts declared by hand, so a host without rdma-core runs every other collector and
//! [`devices`] says why probing is off ([`TransportError::Unavailable`]), and a build needs no C
//! toolchain beyond the linker.
//!
//! One endpoint is one port's UD queue pair: a protection domain, one memory region over all
//! the send and receive buffers, a completion queue (extended, with device timestamps, where
//! the device stamps completions: in wall-clock ns where it offers them, else in cycles,
//! `stamps`; plain otherwise), and address handles cached per destination and flow.
//! Completions are polled, one per `start_poll`/`end_poll` on an extended CQ (`next_poll`
//! corrupts rxe's extended CQ, rdma-core 44, Debian 12); between polls the loop sleeps on the
//! CQ's completion channel ([`Endpoint::wait_fd`]), armed after each wake-up.
//!
//! A device that goes away (`rdma link delete`, driver unload, unplug) must be closed by its
//! users before the kernel finishes removing it, and rxe sends no async event for it: the
//! endpoint watches its uverbs node (`/sys/class/infiniband_verbs/uverbsN`), closes everything
//! when the node disappears and answers [`TransportError::Gone`] from then on.
//!
//! Layout of the registered buffer: `RECV_SLOTS` receive slots of the port's MTU plus the GRH,
//! then `SEND_SLOTS` send slots of `SEND_SLOT` bytes. A UD receive starts with 40 bytes of GRH
//! (for RoCE v2 over IPv4 the IPv4 header is its last 20), the payload follows. A receive slot
//! holds anything the port can carry: a message longer than the slot would complete with a
//! length error and put the queue pair in the error state, deaf to every probe after it.
//!
//! No packet kills or stalls a port. A queue pair found in the error state all the same (a
//! receive failed, or a send would not post) is rebuilt with buffers for the port's MTU then,
//! and [`Event::Reset`] tells the loop its new QPN. An address handle to a destination outside
//! the peer set ([`SendOptions::peer`]) and not met lately is created on a thread of its own
//! (`Resolver`): the kernel resolves the neighbour inside `ibv_create_ah` and waits seconds for
//! one that does not answer (a forged source's); meanwhile sends to it answer
//! [`TransportError::AddressPending`]. Peers, which answer, get theirs on the loop at once, so
//! no probe between agents is lost to the resolver.
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::path::PathBuf;
use std::ptr::{self, NonNull};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod address;
mod ffi;
mod stamps;

use address::{AhSpec, LinkLayer, PortLink};
use ffi::Verbs;
use stamps::Conversion;

use super::responder::Source;
use super::rtt::{Clock, Timestamps};
use super::transport::{Address, Endpoint, Event, SendOptions, TransportError};

/// Bytes of one send slot: probes and answers are 32 bytes.
const SEND_SLOT: usize = 256;
/// The room a UD receive leaves for the GRH in front of the payload.
const GRH: usize = 40;
/// The largest payload sent.
pub(crate) const MAX_PAYLOAD: usize = SEND_SLOT;
const RECV_SLOTS: usize = 64;
const SEND_SLOTS: usize = 64;
/// The bit that tells a send's work request id from a receive's (the slot index).
const SEND_TAG: u64 = 1 << 63;
/// Address handles kept; past it the oldest one with no send in flight is destroyed.
const AH_CACHE: usize = 1024;
/// Address-handle requests waiting for the resolver thread; past it, sends to new GIDs wait.
const RESOLVER_QUEUE: usize = 64;
/// How long a GID's neighbour counts as known after a handle to it was created.
const NEIGHBOUR_FRESH: Duration = Duration::from_secs(60);
/// GIDs remembered as resolved.
const RESOLVED_KEPT: usize = 8_192;
/// How often `poll` looks whether the device is still there.
const HEALTH_EVERY: Duration = Duration::from_millis(200);
/// The sleep between two empty polls while waiting.
const POLL_SLEEP: Duration = Duration::from_micros(200);
/// GID table entries looked at for a RoCE v2 GID.
const GID_SCAN: i32 = 256;

/// The names of the RDMA devices (`ibv_get_device_list`). `Unavailable` when libibverbs is
/// missing or the kernel has no RDMA support: the one line the log says about probing.
pub fn devices() -> Result<Vec<String>, TransportError> {
    let list = DeviceList::get()?;
    Ok(list.iter().map(|(name, _)| name).collect())
}

/// Opens `device`'s `port` for probing: a UD queue pair with Q_Key `qkey`, ready to send and
/// with every receive posted.
pub fn open(device: &str, port: u8, qkey: u32) -> Result<VerbsEndpoint, TransportError> {
    let list = DeviceList::get()?;
    let Some((_, dev)) = list.iter().find(|(name, _)| name == device) else {
        let have: Vec<String> = list.iter().map(|(name, _)| name).collect();
        return Err(TransportError::Device {
            device: device.to_string(),
            message: format!("no such RDMA device (there are {have:?})"),
        });
    };
    // SAFETY: `dev` is an entry of the live device list; `dev_path` is a NUL-terminated array
    // libibverbs filled.
    let uverbs = unsafe { CStr::from_ptr((*dev).dev_path.as_ptr()) };
    let uverbs = PathBuf::from(uverbs.to_string_lossy().into_owned());
    // SAFETY: `dev` is an entry of the live device list; a device opened before the list is
    // freed stays valid (ibv_get_device_list(3)).
    let ctx = unsafe { (list.verbs.open_device)(dev) };
    if ctx.is_null() {
        return Err(verbs_error("ibv_open_device"));
    }
    let verbs = list.verbs;
    drop(list);
    let mut endpoint = VerbsEndpoint {
        verbs,
        device: device.to_string(),
        port,
        qkey,
        ctx,
        pd: ptr::null_mut(),
        mr: ptr::null_mut(),
        buf: Buffer::new(0),
        recv_slot: 0,
        suspect: false,
        broken: None,
        resets: Vec::new(),
        resolver: None,
        resolved: HashMap::new(),
        cq: Cq::None,
        channel: ptr::null_mut(),
        armed: false,
        cq_busy: false,
        qp: ptr::null_mut(),
        link: PortLink {
            port_num: port,
            link_layer: LinkLayer::Ethernet,
            gid: [0; 16],
            gid_index: 0,
            lid: None,
            grh_required: false,
        },
        qpn: 0,
        ahs: AhCache::default(),
        sends: [None; SEND_SLOTS],
        next_send: 0,
        unposted: Vec::new(),
        uverbs,
        checked: Instant::now(),
        gone: false,
        last_hw_ns: std::cell::Cell::new(0),
    };
    // On failure the partly built endpoint is dropped, which closes what was opened.
    endpoint.set_up()?;
    Ok(endpoint)
}

/// `ibv_get_device_list`'s answer, freed on drop.
struct DeviceList {
    verbs: &'static Verbs,
    list: *mut *mut ffi::ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList, TransportError> {
        let verbs = ffi::verbs().map_err(|why| TransportError::Unavailable(why.into()))?;
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer for the count.
        let list = unsafe { (verbs.get_device_list)(&mut n) };
        if list.is_null() {
            let error = io::Error::last_os_error();
            return Err(match error.raw_os_error() {
                Some(libc::ENOSYS) => {
                    TransportError::Unavailable("the kernel has no RDMA support".into())
                }
                _ => TransportError::Verbs {
                    call: "ibv_get_device_list",
                    source: error,
                },
            });
        }
        Ok(DeviceList {
            verbs,
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn iter(&self) -> impl Iterator<Item = (String, *mut ffi::ibv_device)> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: the list holds `len` entries (a NULL follows them).
            let dev = unsafe { *self.list.add(i) };
            if dev.is_null() {
                return None;
            }
            // SAFETY: `dev` is a live device of the list; its name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((self.verbs.get_device_name)(dev)) };
            Some((name.to_string_lossy().into_owned(), dev))
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { (self.verbs.free_device_list)(self.list) };
    }
}

/// The registered memory: heap bytes that never move while the MR covers them. Read and written
/// through raw pointers only, and a slot only while the NIC does not own it (a receive slot
/// between its completion and its repost, a send slot while no send of it is in flight).
struct Buffer {
    base: NonNull<u8>,
    len: usize,
}

impl Buffer {
    fn new(len: usize) -> Buffer {
        let boxed: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let base = NonNull::new(Box::into_raw(boxed).cast::<u8>()).expect("a Box is never null");
        Buffer { base, len }
    }

    /// The address `offset` bytes in.
    fn at(&self, offset: usize) -> *mut u8 {
        assert!(
            offset < self.len,
            "{offset} past a {}-byte buffer",
            self.len
        );
        // SAFETY: inside the allocation (checked above).
        unsafe { self.base.as_ptr().add(offset) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let slice = ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.len);
        // SAFETY: `base`/`len` came from Box::into_raw of a boxed slice of that length, freed
        // once, after the MR over it is deregistered (the endpoint's drop order).
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// The completion queue.
enum Cq {
    None,
    Plain(*mut ffi::ibv_cq),
    /// Created with the completion-timestamp flag of `conversion` (cycles or wall clock).
    Stamped {
        cq: *mut ffi::ibv_cq_ex,
        conversion: Conversion,
    },
}

impl Cq {
    fn as_cq(&self) -> *mut ffi::ibv_cq {
        match *self {
            Cq::None => ptr::null_mut(),
            Cq::Plain(cq) => cq,
            // The extended CQ begins with the plain one (`ibv_cq_ex_to_cq` is this cast).
            Cq::Stamped { cq, .. } => cq.cast(),
        }
    }
}

/// What one completion says, read out of either kind of CQ.
struct Completion {
    wr_id: u64,
    ok: bool,
    byte_len: u32,
    src_qp: u32,
    /// The source LID (meaningful on InfiniBand only).
    slid: u16,
    grh: bool,
    /// The device's stamp in ns (stamped CQ, successful completion), else `None`.
    stamped_ns: Option<u64>,
}

/// Address handles by destination and flow, with the sends in flight on each.
#[derive(Default)]
struct AhCache {
    entries: HashMap<AhKey, AhEntry>,
    stamp: u64,
}

/// Everything the handle says: destination, LID, GRH, flow, class and service level.
type AhKey = AhSpec;

struct AhEntry {
    ah: *mut ffi::ibv_ah,
    used: u64,
    in_flight: u32,
}

impl AhCache {
    /// Destroys every handle (their sends are over or flushed: the QP is destroyed first).
    fn clear(&mut self, verbs: &Verbs) {
        for (_, entry) in self.entries.drain() {
            // SAFETY: each AH was created by ibv_create_ah and is destroyed once.
            unsafe { (verbs.destroy_ah)(entry.ah) };
        }
    }

    /// Makes room for one more: destroys the least recently used handle with nothing in flight.
    fn evict(&mut self, verbs: &Verbs) {
        if self.entries.len() < AH_CACHE {
            return;
        }
        let oldest = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.in_flight == 0)
            .min_by_key(|(_, entry)| entry.used)
            .map(|(key, _)| *key);
        if let Some(key) = oldest {
            if let Some(entry) = self.entries.remove(&key) {
                // SAFETY: no send in flight uses it; destroyed once.
                unsafe { (verbs.destroy_ah)(entry.ah) };
            }
        }
    }
}

/// An address handle made on the resolver thread.
struct AhPtr(*mut ffi::ibv_ah);

// SAFETY: an address handle may be used and destroyed from any thread (libibverbs locks its own
// state); the pointer moves from the resolver to the loop, which alone uses it from then on.
unsafe impl Send for AhPtr {}

/// The protection domain, lent to the resolver thread, which only creates handles in it.
struct PdPtr(*mut ffi::ibv_pd);

// SAFETY: `ibv_create_ah` may be called on a PD from any thread; the endpoint stops and joins
// the thread before it deallocates the PD.
unsafe impl Send for PdPtr {}

/// Creates address handles on a thread of its own, one at a time: `ibv_create_ah` resolves the
/// neighbour in the kernel and waits for it (seconds, for an address that does not answer).
/// Bounded: at most `RESOLVER_QUEUE` requests wait; the rest are refused until then.
struct Resolver {
    requests: Option<mpsc::SyncSender<AhKey>>,
    results: mpsc::Receiver<(AhKey, Option<AhPtr>)>,
    /// Keys asked and not answered yet.
    asked: std::collections::HashSet<AhKey>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Resolver {
    fn start(verbs: &'static Verbs, pd: *mut ffi::ibv_pd) -> io::Result<Resolver> {
        let (requests, inbox) = mpsc::sync_channel::<AhKey>(RESOLVER_QUEUE);
        let (outbox, results) = mpsc::channel();
        let pd = PdPtr(pd);
        let thread = std::thread::Builder::new()
            .name("rfe-probe-ah".into())
            .spawn(move || {
                let pd = pd;
                for key in inbox {
                    // SAFETY: the PD lives until this thread is joined.
                    let ah = unsafe { create_ah(verbs.create_ah, pd.0, &key) };
                    let ah = (!ah.is_null()).then_some(AhPtr(ah));
                    if let Err(mpsc::SendError((_, Some(ah)))) = outbox.send((key, ah)) {
                        // SAFETY: made above, never handed out; destroyed once.
                        unsafe { (verbs.destroy_ah)(ah.0) };
                    }
                }
            })?;
        Ok(Resolver {
            requests: Some(requests),
            results,
            asked: std::collections::HashSet::new(),
            thread: Some(thread),
        })
    }

    /// Asks for a handle to `key`, unless it is asked already or the queue is full.
    fn ask(&mut self, key: AhKey) {
        if self.asked.contains(&key) || self.asked.len() >= RESOLVER_QUEUE {
            return;
        }
        if let Some(requests) = &self.requests {
            if requests.try_send(key).is_ok() {
                self.asked.insert(key);
            }
        }
    }

    /// The handles made (or not) since the last call.
    fn take(&mut self) -> Vec<(AhKey, Option<AhPtr>)> {
        let done: Vec<_> = self.results.try_iter().collect();
        for (key, _) in &done {
            self.asked.remove(key);
        }
        done
    }

    /// Stops the thread after the request in hand (one neighbour's wait at most) and destroys
    /// the handles it made that nobody took.
    fn stop(mut self, verbs: &Verbs) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for (_, ah) in self.take() {
            if let Some(ah) = ah {
                // SAFETY: made by the resolver, never handed out; destroyed once, before the PD.
                unsafe { (verbs.destroy_ah)(ah.0) };
            }
        }
    }
}

/// A send in flight in a send slot.
#[derive(Clone, Copy)]
struct InFlight {
    wr_id: u64,
    ah: AhKey,
}

/// One port's UD endpoint on libibverbs.
pub struct VerbsEndpoint {
    /// libibverbs' calls (resolved once per process, never unloaded).
    verbs: &'static Verbs,
    device: String,
    port: u8,
    qkey: u32,
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    mr: *mut ffi::ibv_mr,
    buf: Buffer,
    cq: Cq,
    /// The CQ's completion channel (non-blocking), made with the first CQ and kept across
    /// rebuilds; null where the device gave none (the loop then polls on a timer).
    channel: *mut ffi::ibv_comp_channel,
    /// The CQ is asked to signal its next completion on `channel`.
    armed: bool,
    /// The last poll found the CQ busy (a wall-clock CQ's clock update): completions may wait
    /// in it that will signal nothing.
    cq_busy: bool,
    qp: *mut ffi::ibv_qp,
    /// The port as address handles need it: link layer, GID and its index, LID.
    link: PortLink,
    qpn: u32,
    ahs: AhCache,
    sends: [Option<InFlight>; SEND_SLOTS],
    /// Bytes of one receive slot: the port's MTU when the queue pair was built, plus the GRH.
    recv_slot: usize,
    /// A receive failed: the queue pair's state is looked at in the next poll.
    suspect: bool,
    /// Why the queue pair is down and when its rebuild is tried (again: every `HEALTH_EVERY`
    /// while it fails).
    broken: Option<(&'static str, Instant)>,
    /// Rebuilds not yet told to the loop.
    resets: Vec<&'static str>,
    resolver: Option<Resolver>,
    /// GIDs an address handle was created for lately: their neighbour is known, so another
    /// handle to them (another flow label) is created on the loop at once.
    resolved: HashMap<[u8; 16], Instant>,
    next_send: usize,
    /// Receive slots whose repost failed, tried again at the next poll.
    unposted: Vec<usize>,
    /// The device's uverbs node: gone when the device is.
    uverbs: PathBuf,
    checked: Instant,
    gone: bool,
    /// The last device clock read (hardware clock), for a read that fails.
    last_hw_ns: std::cell::Cell<u64>,
}

// SAFETY: the verbs objects behind the raw pointers may be used from any thread (libibverbs
// locks its own state); the endpoint owns them alone and every use goes through `&mut self` or
// reads that libibverbs allows concurrently (ibv_query_rt_values_ex).
unsafe impl Send for VerbsEndpoint {}

fn verbs_error(call: &'static str) -> TransportError {
    TransportError::Verbs {
        call,
        source: io::Error::last_os_error(),
    }
}

/// Verbs calls that return the error number instead of setting errno.
fn verbs_rc(call: &'static str, rc: i32) -> Result<(), TransportError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(TransportError::Verbs {
            call,
            source: io::Error::from_raw_os_error(rc.abs()),
        })
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock`'s reading in nanoseconds (0 before the epoch).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC and CLOCK_REALTIME always exist on
    // Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The device clock's reading, or the last one when the read failed: a failed read repeats
/// the last rather than mixing in another clock. A clock that went back (a NIC reset, a
/// firmware reload) reads as back, so that the stats see the restart and age that port's
/// targets from it (a `max` here once froze such a port at its old peak).
fn device_now(read: Option<u64>, last: u64) -> u64 {
    read.unwrap_or(last)
}

/// `enum ibv_mtu` (1: 256 .. 5: 4096) in bytes; anything else as the largest, 4096.
fn mtu_bytes(mtu: u32) -> usize {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 4096,
    }
}

fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
}

/// The sender's GID from a receive's 40-byte GRH area, as libibverbs' `get_grh_header_version`
/// tells the headers apart: RoCE v2 over IPv4 puts the IPv4 header in the last 20 bytes (its
/// source address becomes the IPv4-mapped GID); an IB GRH or an IPv6 header carries the source
/// GID in bytes 8..24.
fn source_gid(grh: &[u8; GRH]) -> Option<[u8; 16]> {
    let ip6_version = grh[0] >> 4;
    let ip4 = &grh[20..40];
    let ipv4 = if ip6_version != 6 {
        if ip4[0] >> 4 != 4 {
            return None;
        }
        true
    } else {
        ip4[0] == 0x45 && ipv4_checksum_ok(ip4)
    };
    let mut gid = [0u8; 16];
    if ipv4 {
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&ip4[12..16]);
    } else {
        gid.copy_from_slice(&grh[8..24]);
    }
    Some(gid)
}

fn ipv4_checksum_ok(header: &[u8]) -> bool {
    let mut sum: u32 = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// `spec` as libibverbs takes it.
fn ah_attr(spec: &AhSpec) -> ffi::ibv_ah_attr {
    ffi::ibv_ah_attr {
        grh: ffi::ibv_global_route {
            dgid: ffi::ibv_gid { raw: spec.dgid },
            flow_label: spec.flow_label,
            sgid_index: spec.sgid_index,
            hop_limit: spec.hop_limit,
            traffic_class: spec.traffic_class,
        },
        dlid: spec.dlid,
        sl: spec.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: u8::from(spec.is_global),
        port_num: spec.port_num,
    }
}

/// The signature of `ibv_create_ah`.
type CreateAh = unsafe extern "C" fn(*mut ffi::ibv_pd, *mut ffi::ibv_ah_attr) -> *mut ffi::ibv_ah;

/// Creates the address handle `spec` describes through `create` (`Verbs::create_ah`; the
/// tests pass a recorder of what the verbs layer is handed).
///
/// # Safety
/// `pd` is a live protection domain of the library `create` belongs to.
unsafe fn create_ah(create: CreateAh, pd: *mut ffi::ibv_pd, spec: &AhSpec) -> *mut ffi::ibv_ah {
    let mut attr = ah_attr(spec);
    // SAFETY: `pd` as the caller promises; `attr` is a valid attr for the call.
    unsafe { create(pd, &mut attr) }
}

impl VerbsEndpoint {
    /// Everything after `ibv_open_device`: GID, PD, MR, CQ, QP to RTS, receives posted.
    fn set_up(&mut self) -> Result<(), TransportError> {
        let device = self.device.clone();
        let device_error = |message: String| TransportError::Device {
            device: device.clone(),
            message,
        };
        // SAFETY: a zeroed ibv_device_attr_ex is a valid out-buffer (plain integers).
        let mut attr: ffi::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `attr` is a valid out-pointer; no input.
        let rc = unsafe { ffi::query_device_ex(self.verbs, self.ctx, &mut attr) };
        verbs_rc("ibv_query_device_ex", rc)?;
        // SAFETY: a zeroed ibv_port_attr is a valid out-buffer.
        let mut port: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `port` is a valid out-pointer.
        let rc = unsafe { ffi::query_port(self.verbs, self.ctx, self.port, &mut port) };
        verbs_rc("ibv_query_port", rc).map_err(|_| {
            device_error(format!(
                "no port {} ({})",
                self.port,
                io::Error::from_raw_os_error(rc.abs())
            ))
        })?;
        // libibverbs takes an unspecified link layer (old drivers) for InfiniBand.
        let link_layer = if port.link_layer == ffi::IBV_LINK_LAYER_ETHERNET {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        };
        let (gid_index, gid) = if link_layer == LinkLayer::Ethernet {
            self.roce_v2_gid(port.gid_tbl_len)
                .ok_or_else(|| device_error(format!("port {} has no RoCE v2 GID", self.port)))?
        } else {
            // SAFETY: a zeroed GID is a valid out-buffer.
            let mut gid: ffi::ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open; `gid` is a valid out-pointer.
            let rc = unsafe { (self.verbs.query_gid)(self.ctx, self.port, 0, &mut gid) };
            verbs_rc("ibv_query_gid", rc)?;
            (0, gid.raw)
        };
        // InfiniBand: the port GID (index 0) and the LID the subnet manager gave the port,
        // which address handles within the subnet go by (LID 0: none assigned yet).
        self.link = PortLink {
            port_num: self.port,
            link_layer,
            gid,
            gid_index,
            lid: (link_layer == LinkLayer::InfiniBand && port.lid != 0).then_some(port.lid),
            grh_required: port.flags & ffi::IBV_QPF_GRH_REQUIRED != 0,
        };
        // The MTU in force now; a larger one later puts the QP in error at the first message
        // past this slot, and the rebuild sizes the slots anew.
        self.recv_slot = mtu_bytes(port.active_mtu) + GRH;
        self.buf = Buffer::new(RECV_SLOTS * self.recv_slot + SEND_SLOTS * SEND_SLOT);

        // SAFETY: `ctx` is open.
        self.pd = unsafe { (self.verbs.alloc_pd)(self.ctx) };
        if self.pd.is_null() {
            return Err(verbs_error("ibv_alloc_pd"));
        }
        self.resolver =
            Some(
                Resolver::start(self.verbs, self.pd).map_err(|source| TransportError::Verbs {
                    call: "spawn(address resolver)",
                    source,
                })?,
            );
        // SAFETY: the buffer is `len` live bytes that stay put until after the MR is
        // deregistered (drop order); LOCAL_WRITE lets the NIC write receives into it.
        self.mr = unsafe {
            (self.verbs.reg_mr)(
                self.pd,
                self.buf.base.as_ptr().cast(),
                self.buf.len,
                ffi::IBV_ACCESS_LOCAL_WRITE,
            )
        };
        if self.mr.is_null() {
            return Err(verbs_error("ibv_reg_mr"));
        }

        let entries = (2 * (RECV_SLOTS + SEND_SLOTS)) as u32;
        if self.channel.is_null() {
            self.channel = self.completion_channel();
        }
        let candidates = Conversion::candidates(
            attr.completion_timestamp_mask,
            attr.hca_core_clock,
            self.device_cycles().is_some(),
        );
        for conversion in candidates {
            let Some(flag) = conversion.wc_flag() else {
                continue;
            };
            // SAFETY: a zeroed init attr is valid (no channel, vector 0, no comp_mask fields).
            let mut init: ffi::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
            init.cqe = entries;
            init.channel = self.channel;
            init.wc_flags = ffi::IBV_WC_STANDARD_FLAGS | flag;
            // SAFETY: `ctx` is open; `init` is a valid attr.
            let cq = unsafe { ffi::create_cq_ex(self.ctx, &mut init) };
            if cq.is_null() {
                continue; // the provider does not offer this form
            }
            // SAFETY: `cq` is live; its reader table is the provider's.
            let readable = unsafe {
                match conversion {
                    Conversion::Wallclock => (*cq).read_completion_wallclock_ns.is_some(),
                    _ => (*cq).read_completion_ts.is_some(),
                }
            };
            if !readable {
                // Taken without a reader for the stamps: no use.
                // SAFETY: created above, unused, destroyed once.
                unsafe { (self.verbs.destroy_cq)(cq.cast()) };
                continue;
            }
            self.cq = Cq::Stamped { cq, conversion };
            break;
        }
        if matches!(self.cq, Cq::None) {
            // SAFETY: `ctx` is open; `channel` is null or this context's; no context or vector.
            let cq = unsafe {
                (self.verbs.create_cq)(self.ctx, entries as i32, ptr::null_mut(), self.channel, 0)
            };
            if cq.is_null() {
                return Err(verbs_error("ibv_create_cq"));
            }
            self.cq = Cq::Plain(cq);
        }

        // SAFETY: a zeroed init attr is valid (no SRQ, no inline data).
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq.as_cq();
        init.recv_cq = self.cq.as_cq();
        init.qp_type = ffi::IBV_QPT_UD;
        init.sq_sig_all = 1;
        init.cap.max_send_wr = SEND_SLOTS as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: `pd` and the CQ are live; `init` is valid.
        self.qp = unsafe { (self.verbs.create_qp)(self.pd, &mut init) };
        if self.qp.is_null() {
            return Err(verbs_error("ibv_create_qp"));
        }
        // SAFETY: `qp` is live.
        self.qpn = unsafe { (*self.qp).qp_num };

        // SAFETY: a zeroed QP attr is valid; only the masked fields are read.
        let mut qp_attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        qp_attr.qp_state = ffi::IBV_QPS_INIT;
        qp_attr.pkey_index = 0;
        qp_attr.port_num = self.port;
        qp_attr.qkey = self.qkey;
        let mask = ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_QKEY;
        // SAFETY: `qp` is live; `qp_attr` is valid for the mask.
        let rc = unsafe { (self.verbs.modify_qp)(self.qp, &mut qp_attr, mask) };
        verbs_rc("ibv_modify_qp(INIT)", rc)?;
        qp_attr.qp_state = ffi::IBV_QPS_RTR;
        // SAFETY: as above, the state alone.
        let rc = unsafe { (self.verbs.modify_qp)(self.qp, &mut qp_attr, ffi::IBV_QP_STATE) };
        verbs_rc("ibv_modify_qp(RTR)", rc)?;
        qp_attr.qp_state = ffi::IBV_QPS_RTS;
        qp_attr.sq_psn = 0;
        let mask = ffi::IBV_QP_STATE | ffi::IBV_QP_SQ_PSN;
        // SAFETY: as above.
        let rc = unsafe { (self.verbs.modify_qp)(self.qp, &mut qp_attr, mask) };
        verbs_rc("ibv_modify_qp(RTS)", rc)?;

        // Async events are read without blocking (DEVICE_FATAL closes the endpoint).
        // SAFETY: `ctx` is open; fcntl on its async fd changes only that fd's flags.
        unsafe {
            let fd = (*self.ctx).async_fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        for slot in 0..RECV_SLOTS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// The port's RoCE v2 GID, an IPv4-mapped one when there is one.
    fn roce_v2_gid(&self, table_len: i32) -> Option<(u8, [u8; 16])> {
        let mut chosen: Option<(u8, [u8; 16])> = None;
        for index in 0..table_len.clamp(0, GID_SCAN) {
            // SAFETY: a zeroed entry is a valid out-buffer.
            let mut entry: ffi::ibv_gid_entry = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open; `entry` is a valid out-pointer; empty slots answer ENODATA.
            let rc = unsafe {
                ffi::query_gid_ex(
                    self.verbs,
                    self.ctx,
                    u32::from(self.port),
                    index as u32,
                    &mut entry,
                )
            };
            if rc != 0 || entry.gid_type != ffi::IBV_GID_TYPE_ROCE_V2 {
                continue;
            }
            let gid = entry.gid.raw;
            if gid == [0; 16] {
                continue;
            }
            let better = match chosen {
                None => true,
                Some((_, old)) => is_ipv4_mapped(&gid) && !is_ipv4_mapped(&old),
            };
            if better {
                chosen = Some((index as u8, gid));
            }
        }
        chosen
    }

    /// A completion channel with a non-blocking descriptor, or null (said in the debug log)
    /// when the device gives none: the endpoint is then polled on a timer, as before.
    fn completion_channel(&self) -> *mut ffi::ibv_comp_channel {
        // SAFETY: `ctx` is open.
        let channel = unsafe { (self.verbs.create_comp_channel)(self.ctx) };
        if channel.is_null() {
            tracing::debug!(device = %self.device, error = %io::Error::last_os_error(),
                "no completion channel; the probe loop polls this port");
            return channel;
        }
        // SAFETY: a live channel's descriptor is open; F_GETFL/F_SETFL take and give flags.
        let nonblocking = unsafe {
            let fd = (*channel).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !nonblocking {
            // A blocking read of it would stall every port: without it, poll on a timer.
            // SAFETY: made above, no CQ uses it yet.
            unsafe { (self.verbs.destroy_comp_channel)(channel) };
            return ptr::null_mut();
        }
        channel
    }

    /// Reads the completion events waiting on the channel, acking each at once (a CQ with
    /// events not acked cannot be destroyed): the CQ needs arming again after one.
    fn take_cq_events(&mut self) {
        loop {
            let (mut cq, mut context) = (ptr::null_mut(), ptr::null_mut());
            // SAFETY: `channel` is live and non-blocking: -1 (EAGAIN) when nothing waits.
            if unsafe { (self.verbs.get_cq_event)(self.channel, &mut cq, &mut context) } != 0 {
                return;
            }
            // SAFETY: `cq` was just returned by ibv_get_cq_event: live until this ack.
            unsafe { (self.verbs.ack_cq_events)(cq, 1) };
            self.armed = false;
        }
    }

    /// How this endpoint's completion times become ns (`Software` without a stamped CQ).
    fn conversion(&self) -> Conversion {
        match self.cq {
            Cq::Stamped { conversion, .. } => conversion,
            _ => Conversion::Software,
        }
    }

    /// The device's raw clock in cycles, when the device reads it (`ibv_query_rt_values_ex`).
    fn device_cycles(&self) -> Option<u64> {
        let mut values = ffi::ibv_values_ex {
            comp_mask: ffi::IBV_VALUES_MASK_RAW_CLOCK,
            raw_clock: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        if self.ctx.is_null() {
            return None;
        }
        // SAFETY: `ctx` is open; `values` is a valid in/out struct.
        let rc = unsafe { ffi::query_rt_values_ex(self.ctx, &mut values) };
        if rc != 0 || values.comp_mask & ffi::IBV_VALUES_MASK_RAW_CLOCK == 0 {
            return None;
        }
        // The raw clock comes in tv_nsec (the cycle count), per libibverbs' convention.
        let ticks = u64::try_from(values.raw_clock.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(values.raw_clock.tv_nsec).unwrap_or(0);
        Some(ticks)
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), TransportError> {
        let mut sge = ffi::ibv_sge {
            addr: self.recv_ptr(slot) as u64,
            length: self.recv_slot as u32,
            // SAFETY: `mr` is registered while the QP exists.
            lkey: unsafe { (*self.mr).lkey },
        };
        let mut wr = ffi::ibv_recv_wr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: `qp` is live; `wr` and `sge` outlive the call (libibverbs copies them); the
        // slot is ours until its completion (not read or written meanwhile).
        let rc = unsafe { ffi::post_recv(self.qp, &mut wr, &mut bad) };
        verbs_rc("ibv_post_recv", rc)
    }

    /// The GID table index the endpoint sends from.
    pub(crate) fn gid_index(&self) -> u8 {
        self.link.gid_index
    }

    /// Looks whether the device is still there (at most every `HEALTH_EVERY`), closing
    /// everything when it is not.
    fn check_device(&mut self, force: bool) -> Result<(), TransportError> {
        if self.gone {
            return Err(TransportError::Gone);
        }
        if !force && self.checked.elapsed() < HEALTH_EVERY {
            return Ok(());
        }
        self.checked = Instant::now();
        let mut fatal = false;
        loop {
            // SAFETY: a zeroed event is a valid out-buffer (event type 0 exists).
            let mut event: ffi::ibv_async_event = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open and its async fd non-blocking: returns -1 when empty.
            if unsafe { (self.verbs.get_async_event)(self.ctx, &mut event) } != 0 {
                break;
            }
            fatal |= event.event_type == ffi::IBV_EVENT_DEVICE_FATAL;
            // SAFETY: the event was returned by ibv_get_async_event and is acked once.
            unsafe { (self.verbs.ack_async_event)(&mut event) };
        }
        if fatal || !self.uverbs.exists() {
            self.release();
            return Err(TransportError::Gone);
        }
        Ok(())
    }

    /// Destroys everything, QP first, context last; the endpoint is `Gone` from then on.
    fn release(&mut self) {
        self.gone = true;
        self.release_queues();
        if !self.channel.is_null() {
            // SAFETY: made by ibv_create_comp_channel, destroyed once, after its CQ.
            unsafe { (self.verbs.destroy_comp_channel)(self.channel) };
            self.channel = ptr::null_mut();
        }
        if !self.ctx.is_null() {
            // SAFETY: opened by ibv_open_device, closed once, last.
            unsafe { (self.verbs.close_device)(self.ctx) };
            self.ctx = ptr::null_mut();
        }
    }

    /// Destroys what `set_up` built (QP, address handles, CQ, MR, PD), the context stays open.
    fn release_queues(&mut self) {
        if !self.qp.is_null() {
            // SAFETY: created by ibv_create_qp, destroyed once.
            unsafe { (self.verbs.destroy_qp)(self.qp) };
            self.qp = ptr::null_mut();
        }
        if let Some(resolver) = self.resolver.take() {
            resolver.stop(self.verbs);
        }
        self.ahs.clear(self.verbs);
        self.unposted.clear();
        self.suspect = false;
        self.sends = [None; SEND_SLOTS];
        self.armed = false;
        let cq = std::mem::replace(&mut self.cq, Cq::None);
        if !cq.as_cq().is_null() {
            // SAFETY: created by ibv_create_cq(_ex), destroyed once, after the QP using it.
            unsafe { (self.verbs.destroy_cq)(cq.as_cq()) };
        }
        if !self.mr.is_null() {
            // SAFETY: registered by ibv_reg_mr, deregistered once, after the QP.
            unsafe { (self.verbs.dereg_mr)(self.mr) };
            self.mr = ptr::null_mut();
        }
        if !self.pd.is_null() {
            // SAFETY: allocated by ibv_alloc_pd, freed once, after everything in it.
            unsafe { (self.verbs.dealloc_pd)(self.pd) };
            self.pd = ptr::null_mut();
        }
    }

    /// After a failed receive or post: whether the QP is in the error state, and if so a new
    /// one (`Event::Reset` at the next poll). A QP that cannot be rebuilt now is tried again
    /// every `HEALTH_EVERY`.
    fn recover(&mut self) -> Result<(), TransportError> {
        let now = Instant::now();
        let reason = match self.broken {
            Some((reason, retry_at)) if now >= retry_at => reason,
            Some(_) => return Ok(()),
            None if !self.suspect => return Ok(()),
            None => {
                self.suspect = false;
                if self.qp_state() != Some(ffi::IBV_QPS_ERR) {
                    return Ok(()); // a failed completion on a healthy QP: slots are reposted
                }
                "qp_error"
            }
        };
        self.broken = Some((reason, now + HEALTH_EVERY));
        let old_qpn = self.qpn;
        self.release_queues();
        self.set_up()?;
        self.broken = None;
        self.resets.push(reason);
        tracing::debug!(
            device = %self.device,
            port = self.port,
            old_qpn,
            qpn = self.qpn,
            reason,
            "probe queue pair rebuilt"
        );
        Ok(())
    }

    /// The QP's state (`ibv_query_qp`), `None` when it cannot be read.
    fn qp_state(&self) -> Option<u32> {
        if self.qp.is_null() {
            return None;
        }
        // SAFETY: zeroed attrs are valid out-buffers (plain data and null pointers).
        let (mut attr, mut init): (ffi::ibv_qp_attr, ffi::ibv_qp_init_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: `qp` is live; both out-pointers are valid.
        let rc = unsafe { (self.verbs.query_qp)(self.qp, &mut attr, ffi::IBV_QP_STATE, &mut init) };
        (rc == 0).then_some(attr.qp_state)
    }

    /// The receive slot `slot`'s first byte.
    fn recv_ptr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < RECV_SLOTS);
        self.buf.at(slot * self.recv_slot)
    }

    /// The send slot `index`'s first byte.
    fn send_ptr(&self, index: usize) -> *mut u8 {
        debug_assert!(index < SEND_SLOTS);
        self.buf.at(RECV_SLOTS * self.recv_slot + index * SEND_SLOT)
    }

    /// Takes the handles the resolver created into the cache.
    fn take_resolved(&mut self) {
        let Some(resolver) = self.resolver.as_mut() else {
            return;
        };
        let done = resolver.take();
        for (key, ah) in done {
            let Some(ah) = ah else {
                continue; // not resolved: a later send asks again
            };
            self.note_resolved(key.dgid);
            if self.ahs.entries.contains_key(&key) {
                // A peer's send made the same handle on the loop meanwhile, and sends may be in
                // flight on it: the resolver's copy goes.
                // SAFETY: made by the resolver, never handed out; destroyed once.
                unsafe { (self.verbs.destroy_ah)(ah.0) };
                continue;
            }
            self.ahs.evict(self.verbs);
            self.ahs.stamp += 1;
            let entry = AhEntry {
                ah: ah.0,
                used: self.ahs.stamp,
                in_flight: 0,
            };
            self.ahs.entries.insert(key, entry);
        }
    }

    fn note_resolved(&mut self, gid: [u8; 16]) {
        if self.resolved.len() >= RESOLVED_KEPT {
            self.resolved.retain(|_, at| at.elapsed() < NEIGHBOUR_FRESH);
        }
        if self.resolved.len() < RESOLVED_KEPT {
            self.resolved.insert(gid, Instant::now());
        }
    }

    /// A cached or new address handle for `key`.
    fn address_handle(
        &mut self,
        key: AhKey,
        peer: bool,
    ) -> Result<*mut ffi::ibv_ah, TransportError> {
        self.ahs.stamp += 1;
        let stamp = self.ahs.stamp;
        if let Some(entry) = self.ahs.entries.get_mut(&key) {
            entry.used = stamp;
            return Ok(entry.ah);
        }
        // InfiniBand resolves no neighbour: its handles are made at once (mlx5 makes them
        // without the kernel).
        let fresh = peer
            || self.link.infiniband()
            || self
                .resolved
                .get(&key.dgid)
                .is_some_and(|at| at.elapsed() < NEIGHBOUR_FRESH);
        if !fresh {
            // Not a peer, nor met lately: its neighbour may not answer (a forged source), and
            // creating the handle here would stall every port of the loop while the kernel
            // waits for it.
            if let Some(resolver) = self.resolver.as_mut() {
                resolver.ask(key);
            }
            return Err(TransportError::AddressPending);
        }
        self.ahs.evict(self.verbs);
        // SAFETY: `pd` is live and libibverbs' own.
        let ah = unsafe { create_ah(self.verbs.create_ah, self.pd, &key) };
        if ah.is_null() {
            return Err(verbs_error("ibv_create_ah"));
        }
        self.note_resolved(key.dgid);
        self.ahs.entries.insert(
            key,
            AhEntry {
                ah,
                used: stamp,
                in_flight: 0,
            },
        );
        Ok(ah)
    }

    /// Reads up to `budget` completions into `out`.
    fn poll_cq(&mut self, out: &mut Vec<Completion>, budget: usize) {
        match self.cq {
            Cq::None => {}
            Cq::Plain(cq) => {
                // SAFETY: ibv_wc is plain data; zeroed is valid.
                let mut wcs: [ffi::ibv_wc; 16] = unsafe { std::mem::zeroed() };
                while out.len() < budget {
                    // SAFETY: `cq` is live; `wcs` holds 16 entries.
                    let n = unsafe { ffi::poll_cq(cq, wcs.len() as i32, wcs.as_mut_ptr()) };
                    let n = usize::try_from(n).unwrap_or(0).min(wcs.len());
                    for wc in &wcs[..n] {
                        let ok = wc.status == ffi::IBV_WC_SUCCESS;
                        out.push(Completion {
                            wr_id: wc.wr_id,
                            ok,
                            byte_len: if ok { wc.byte_len } else { 0 },
                            src_qp: if ok { wc.src_qp } else { 0 },
                            slid: if ok { wc.slid } else { 0 },
                            grh: ok && wc.wc_flags & ffi::IBV_WC_GRH != 0,
                            stamped_ns: None,
                        });
                    }
                    if n < wcs.len() {
                        break;
                    }
                }
            }
            Cq::Stamped { cq, conversion } => {
                let wallclock = conversion == Conversion::Wallclock;
                while out.len() < budget {
                    // SAFETY: `cq` is a live extended CQ; one completion per start/end pair
                    // (never next_poll, which corrupts rxe's CQ).
                    let mut rc = unsafe { ffi::start_poll(cq) };
                    // A wall-clock CQ answers EBUSY while the kernel updates the clock info
                    // (ibv_create_cq_ex(3)): a moment's retry, not an empty CQ.
                    for _ in 0..3 {
                        if rc != libc::EBUSY {
                            break;
                        }
                        // SAFETY: as above; the failed start_poll left no poll open.
                        rc = unsafe { ffi::start_poll(cq) };
                    }
                    if rc != 0 {
                        // ENOENT: empty. EBUSY still: what waits signals no event, so the
                        // loop looks again soon (`arm`).
                        self.cq_busy |= rc == libc::EBUSY;
                        break;
                    }
                    // SAFETY: between start_poll and end_poll the current completion's fields
                    // may be read; on an error completion only wr_id and status are valid, so
                    // nothing else is read then. The CQ was created with the standard flags and
                    // its conversion's timestamp flag, so those readers exist.
                    let completion = unsafe {
                        let ok = (*cq).status == ffi::IBV_WC_SUCCESS;
                        Completion {
                            wr_id: (*cq).wr_id,
                            ok,
                            byte_len: if ok {
                                ffi::read(cq, |c| c.read_byte_len)
                            } else {
                                0
                            },
                            src_qp: if ok {
                                ffi::read(cq, |c| c.read_src_qp)
                            } else {
                                0
                            },
                            // A 16-bit LID in a u32 (IBV_WC_EX_WITH_SLID, a standard flag).
                            slid: if ok {
                                ffi::read(cq, |c| c.read_slid) as u16
                            } else {
                                0
                            },
                            grh: ok && ffi::read(cq, |c| c.read_wc_flags) & ffi::IBV_WC_GRH != 0,
                            stamped_ns: if !ok {
                                None
                            } else if wallclock {
                                conversion.completion_ns(ffi::read(cq, |c| {
                                    c.read_completion_wallclock_ns
                                }))
                            } else {
                                conversion.completion_ns(ffi::read(cq, |c| c.read_completion_ts))
                            },
                        }
                    };
                    // SAFETY: ends the poll started above.
                    unsafe { ffi::end_poll(cq) };
                    out.push(completion);
                }
            }
        }
    }

    /// Turns completions into events, reposting every receive slot.
    fn handle(&mut self, completions: &mut Vec<Completion>, events: &mut Vec<Event>) {
        for completion in completions.drain(..) {
            let at_ns = completion.stamped_ns.unwrap_or_else(|| self.now_ns());
            if completion.wr_id & SEND_TAG != 0 {
                let slot = (completion.wr_id & !SEND_TAG) as usize;
                if let Some(flight) = self.sends.get_mut(slot).and_then(Option::take) {
                    if let Some(entry) = self.ahs.entries.get_mut(&flight.ah) {
                        entry.in_flight = entry.in_flight.saturating_sub(1);
                    }
                    events.push(Event::Sent {
                        wr_id: flight.wr_id,
                        ok: completion.ok,
                        at_ns,
                    });
                }
                continue;
            }
            let slot = completion.wr_id as usize;
            if slot >= RECV_SLOTS {
                continue; // not one of ours: nothing to repost
            }
            if completion.ok {
                let mut grh = [0u8; GRH];
                let len = (completion.byte_len as usize)
                    .saturating_sub(GRH)
                    .min(self.recv_slot - GRH);
                let mut payload = vec![0u8; len];
                // SAFETY: the slot's receive completed, so the NIC no longer writes it until it
                // is reposted below; both copies stay inside the slot (GRH + len <= recv_slot).
                unsafe {
                    ptr::copy_nonoverlapping(self.recv_ptr(slot), grh.as_mut_ptr(), GRH);
                    ptr::copy_nonoverlapping(
                        self.recv_ptr(slot).add(GRH),
                        payload.as_mut_ptr(),
                        len,
                    );
                }
                let gid = if completion.grh {
                    source_gid(&grh).unwrap_or([0; 16])
                } else {
                    [0; 16]
                };
                // On InfiniBand the answer goes to the completion's source LID: the sender's
                // within the subnet (no GRH then), a router's for a packet from another.
                let source = Source {
                    gid,
                    qpn: completion.src_qp,
                    lid: self.link.infiniband().then_some(completion.slid),
                };
                events.push(Event::Received {
                    payload,
                    source,
                    at_ns,
                });
            } else {
                // On a UD QP a failed receive means the QP is in (or going to) the error state:
                // reposting would only flush again. The next poll looks.
                self.suspect = true;
                self.unposted.push(slot);
                continue;
            }
            if self.post_recv(slot).is_err() {
                self.unposted.push(slot);
            }
        }
    }
}

impl stamps::Clocks for VerbsEndpoint {
    fn device_cycles(&self) -> Option<u64> {
        VerbsEndpoint::device_cycles(self)
    }

    fn realtime_ns(&self) -> u64 {
        clock_ns(libc::CLOCK_REALTIME)
    }

    fn monotonic_ns(&self) -> u64 {
        monotonic_ns()
    }
}

impl Endpoint for VerbsEndpoint {
    fn close(&mut self) {
        self.release();
    }

    fn address(&self) -> Address {
        Address {
            gid: self.link.gid,
            qpn: self.qpn,
            qkey: self.qkey,
            lid: self.link.lid,
        }
    }

    fn clock(&self) -> Clock {
        self.timestamps().clock()
    }

    fn timestamps(&self) -> Timestamps {
        self.conversion().timestamps()
    }

    fn send(
        &mut self,
        to: Address,
        options: SendOptions,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<u64, TransportError> {
        if self.gone {
            return Err(TransportError::Gone);
        }
        if let Some((reason, _)) = self.broken {
            return Err(TransportError::Device {
                device: self.device.clone(),
                message: format!("the queue pair is being rebuilt ({reason})"),
            });
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(TransportError::Verbs {
                call: "ibv_post_send",
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a {}-byte payload (at most {MAX_PAYLOAD})", payload.len()),
                ),
            });
        }
        let Some(index) = (0..SEND_SLOTS)
            .map(|i| (self.next_send + i) % SEND_SLOTS)
            .find(|&i| self.sends[i].is_none())
        else {
            return Err(TransportError::Verbs {
                call: "ibv_post_send",
                source: io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("all {SEND_SLOTS} send slots are in flight"),
                ),
            });
        };
        let key = address::ah_spec(&self.link, &to, &options);
        let ah = self.address_handle(key, options.peer)?;
        let slot = self.send_ptr(index);
        // SAFETY: no send of this slot is in flight, so the NIC does not read it; the payload
        // fits the slot.
        unsafe { ptr::copy_nonoverlapping(payload.as_ptr(), slot, payload.len()) };
        let mut sge = ffi::ibv_sge {
            addr: slot as u64,
            length: payload.len() as u32,
            // SAFETY: `mr` is registered while the QP exists.
            lkey: unsafe { (*self.mr).lkey },
        };
        // SAFETY: a zeroed send WR is valid (no next, no inline, no immediate).
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = SEND_TAG | index as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ffi::IBV_WR_SEND;
        wr.send_flags = ffi::IBV_SEND_SIGNALED;
        wr.wr.ud = ffi::ibv_send_wr_ud {
            ah,
            remote_qpn: to.qpn,
            remote_qkey: to.qkey,
        };
        let mut bad = ptr::null_mut();
        let posted_at = self.now_ns();
        // SAFETY: `qp` is live; `wr`, `sge` and the AH outlive the call, and the AH stays until
        // the send completes (its in-flight count keeps it from eviction).
        let rc = unsafe { ffi::post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            self.check_device(true)?;
            // A QP in the error state refuses every post: the next poll looks and rebuilds it.
            self.suspect = true;
            return verbs_rc("ibv_post_send", rc).map(|()| posted_at);
        }
        self.sends[index] = Some(InFlight { wr_id, ah: key });
        self.next_send = (index + 1) % SEND_SLOTS;
        if let Some(entry) = self.ahs.entries.get_mut(&key) {
            entry.in_flight += 1;
        }
        Ok(posted_at)
    }

    fn poll(&mut self, events: &mut Vec<Event>, wait: Duration) -> Result<(), TransportError> {
        let deadline = Instant::now() + wait;
        let mut completions = Vec::new();
        loop {
            self.check_device(false)?;
            self.recover()?;
            events.extend(self.resets.drain(..).map(|reason| Event::Reset { reason }));
            // Handles the resolver made since: the next send to them finds them cached.
            self.take_resolved();
            for slot in std::mem::take(&mut self.unposted) {
                if self.post_recv(slot).is_err() {
                    self.unposted.push(slot);
                }
            }
            self.poll_cq(&mut completions, RECV_SLOTS + SEND_SLOTS);
            if !completions.is_empty() {
                self.handle(&mut completions, events);
                return self.recover();
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            std::thread::sleep(POLL_SLEEP.min(deadline - now));
        }
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        // Only while armed: a CQ rebuilt since the last `arm` would signal nothing.
        let armed = self.armed && !self.channel.is_null() && !self.gone;
        // SAFETY: a non-null channel is live until `release`, which also sets `gone`.
        armed.then(|| unsafe { (*self.channel).fd })
    }

    fn arm(&mut self, woken: bool) -> Result<Option<Duration>, TransportError> {
        if self.gone {
            return Err(TransportError::Gone);
        }
        let now = Instant::now();
        // The health check, a rebuild to retry and receive slots to repost have their times.
        let mut due = HEALTH_EVERY.saturating_sub(now.duration_since(self.checked));
        if let Some((_, retry_at)) = self.broken {
            due = due.min(retry_at.saturating_duration_since(now));
        }
        if !self.unposted.is_empty() || std::mem::take(&mut self.cq_busy) {
            due = due.min(POLL_SLEEP);
        }
        if self.channel.is_null() || self.cq.as_cq().is_null() {
            return Ok(Some(due.min(POLL_SLEEP)));
        }
        if woken {
            self.take_cq_events();
        }
        if !self.armed {
            // SAFETY: the CQ is live (checked above).
            let rc = unsafe { ffi::req_notify_cq(self.cq.as_cq()) };
            self.armed = rc == 0;
            if !self.armed {
                return Ok(Some(due.min(POLL_SLEEP)));
            }
        }
        Ok(Some(due))
    }

    fn now_ns(&self) -> u64 {
        match self.conversion() {
            Conversion::Software => monotonic_ns(),
            stamped => {
                let ns = device_now(stamped.now_ns(self), self.last_hw_ns.get());
                self.last_hw_ns.set(ns);
                ns
            }
        }
    }
}

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::fmt::Debug for VerbsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsEndpoint")
            .field("device", &self.device)
            .field("port", &self.port)
            .field("gid_index", &self.link.gid_index)
            .field("link_layer", &self.link.link_layer)
            .field("lid", &self.link.lid)
            .field("qpn", &self.qpn)
            .field("clock", &self.clock())
            .field("gone", &self.gone)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host has no RDMA device (and maybe no RDMA kernel or no libibverbs): the calls say
    /// so as errors, never a panic.
    #[test]
    fn without_devices_the_calls_answer_errors() {
        match devices() {
            Ok(names) => assert!(names.iter().all(|name| name != "nonexistent"), "{names:?}"),
            Err(error) => assert_eq!(error.reason(), "unavailable", "{error}"),
        }
        let error = open("nonexistent", 1, 0x1111).unwrap_err();
        assert!(
            matches!(error.reason(), "unavailable" | "device"),
            "{error}"
        );
    }

    #[test]
    fn the_source_gid_comes_from_the_ipv4_header_or_the_grh() {
        // RoCE v2 over IPv4: 20 undefined bytes, then 45 00 ... with 10.0.0.7 -> 10.0.0.9.
        let mut grh = [0u8; GRH];
        let ip4 = [
            0x45, 0x00, 0x00, 0x4c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 0, 0, 7,
            10, 0, 0, 9,
        ];
        grh[20..].copy_from_slice(&ip4);
        let mut sum: u32 = grh[20..]
            .chunks(2)
            .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        grh[30..32].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let gid = source_gid(&grh).unwrap();
        assert_eq!(gid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7]);
        // An IB GRH / IPv6 header: version 6, the source GID in bytes 8..24.
        let mut grh = [0u8; GRH];
        grh[0] = 0x60;
        for (i, byte) in grh[8..24].iter_mut().enumerate() {
            *byte = 0xf0 + i as u8;
        }
        assert_eq!(source_gid(&grh).unwrap()[..2], [0xf0, 0xf1]);
        // Neither: no source.
        assert_eq!(source_gid(&[0u8; GRH]), None);
    }

    thread_local! {
        /// What the fake `ibv_create_ah` was handed, on this test's thread.
        static HANDED: std::cell::RefCell<Vec<ffi::ibv_ah_attr>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// A recording fake of the binding's `ibv_create_ah`: keeps the attributes, returns a
    /// handle that is never used.
    unsafe extern "C" fn recording_create_ah(
        _pd: *mut ffi::ibv_pd,
        attr: *mut ffi::ibv_ah_attr,
    ) -> *mut ffi::ibv_ah {
        // SAFETY: `create_ah` hands a valid attr for the call's duration.
        let attr = unsafe { *attr };
        HANDED.with(|handed| handed.borrow_mut().push(attr));
        NonNull::dangling().as_ptr()
    }

    /// What the verbs layer is handed for `to` from `link`.
    fn handed(link: &PortLink, to: &Address) -> ffi::ibv_ah_attr {
        let options = SendOptions {
            flow_label: 0xab_cdef,
            traffic_class: 104,
            service_level: 5,
            peer: true,
        };
        let spec = address::ah_spec(link, to, &options);
        // SAFETY: the recorder reads only the attr; the PD is never looked at.
        let ah = unsafe { create_ah(recording_create_ah, ptr::null_mut(), &spec) };
        assert!(!ah.is_null());
        HANDED.with(|handed| handed.borrow_mut().pop().expect("create_ah was called"))
    }

    fn ib_gid(prefix: u8, guid: u8) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, prefix]);
        gid[8] = 0x0c;
        gid[15] = guid;
        gid
    }

    /// No soft InfiniBand device exists (rxe and siw are Ethernet), so the proof that IB
    /// handles go by LID is what the binding's `ibv_create_ah` receives: within a subnet the
    /// peer's LID and no GRH; to another subnet the LID and the GRH; RoCE the GRH and no LID;
    /// an answer to a probe that came without a GRH, the LID of its completion.
    #[test]
    fn address_handles_reach_the_verbs_layer_by_lid_on_infiniband() {
        let ib = PortLink {
            port_num: 1,
            link_layer: LinkLayer::InfiniBand,
            gid: ib_gid(0x80, 1),
            gid_index: 0,
            lid: Some(3),
            grh_required: false,
        };
        let peer = |gid, lid| Address {
            gid,
            qpn: 300,
            qkey: 1,
            lid,
        };

        let near = handed(&ib, &peer(ib_gid(0x80, 2), Some(0x2a)));
        assert_eq!((near.dlid, near.is_global, near.port_num), (0x2a, 0, 1));
        assert_eq!(near.sl, 5);

        let far_gid = ib_gid(0x81, 2);
        let far = handed(&ib, &peer(far_gid, Some(0x2b)));
        assert_eq!((far.dlid, far.is_global), (0x2b, 1));
        assert_eq!(far.grh.dgid.raw, far_gid);
        assert_eq!(far.grh.sgid_index, 0);
        assert_eq!(far.grh.flow_label, 0xb_cdef);
        assert_eq!((far.grh.traffic_class, far.grh.hop_limit), (104, 64));

        let lid_only = Source {
            gid: [0; 16],
            qpn: 300,
            lid: Some(9),
        };
        let answer = handed(&ib, &lid_only.address(1));
        assert_eq!((answer.dlid, answer.is_global), (9, 0));

        let roce = PortLink {
            link_layer: LinkLayer::Ethernet,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            gid_index: 3,
            lid: None,
            ..ib
        };
        let dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
        let ethernet = handed(&roce, &peer(dgid, None));
        assert_eq!((ethernet.dlid, ethernet.is_global), (0, 1));
        assert_eq!(ethernet.grh.dgid.raw, dgid);
        assert_eq!(ethernet.grh.sgid_index, 3);
    }

    #[test]
    fn a_device_clock_that_went_back_reads_as_back() {
        assert_eq!(device_now(Some(5_000), 9_000_000), 5_000);
        assert_eq!(device_now(None, 9_000_000), 9_000_000);
    }
}
