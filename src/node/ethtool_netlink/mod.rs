//! The `ethtool` generic netlink family (kernel 5.6+): what `ethtool --show-fec` and `ethtool
//! -m` ask, without any C library. [`EthtoolNetlink`] resolves the family's id once through the
//! generic netlink controller and sends one `doit` request at a time, each with a deadline; a
//! kernel that never answers costs that request its deadline and nothing else. The framing and
//! the socket are `rdma_netlink`'s (`wire.rs`, `socket.rs`), as `dcb` reuses them.
//!
//! The API is small on purpose: [`EthtoolNetlink::request`] takes a command, a netdev, the
//! header flags and the command's other attributes ([`AttrWriter`]), and gives back the
//! answer's attributes ([`Answer`]); decoders of each command live beside it (`fec.rs`).

pub mod fec;
pub(crate) mod genl;
pub mod uapi;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::node::rdma_netlink::wire::{self, NLA_F_NESTED, NLA_HDRLEN};
use crate::node::rdma_netlink::{is_unavailable, NetlinkSocket, Transport};

pub use genl::Answer;
use genl::Genl;
use uapi::*;

/// Why an ethtool netlink request failed. I/O errors are shared so readings can be cloned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EthtoolNlError {
    #[error("no generic netlink here: {0}")]
    Unavailable(Arc<io::Error>),
    /// The controller does not know the family: a kernel before 5.6 or without
    /// CONFIG_ETHTOOL_NETLINK.
    #[error("this kernel has no {family:?} generic netlink family")]
    NoFamily { family: &'static str },
    /// EOPNOTSUPP: the driver has no such operation (veth, loopback, most soft devices).
    #[error("{netdev}: not supported by the driver")]
    NotSupported { netdev: String },
    /// ENODEV: no such netdev in this network namespace.
    #[error("{netdev}: no such device in this network namespace")]
    NoDevice { netdev: String },
    #[error("{netdev}: permission denied")]
    Permission { netdev: String },
    #[error("{netdev:?} is not a name the kernel could hold")]
    BadName { netdev: String },
    /// Another refusal (EINVAL for a flag an older kernel does not know, EBUSY, EIO...).
    #[error("kernel refused: {}", io::Error::from_raw_os_error(*.0))]
    Errno(i32),
    #[error("no answer within {timeout:?}")]
    Timeout { timeout: Duration },
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        source: Arc<io::Error>,
    },
    #[error("malformed answer: {0}")]
    Malformed(String),
}

impl EthtoolNlError {
    /// The `reason` label of the collectors' error counters.
    pub fn reason(&self) -> &'static str {
        match self {
            EthtoolNlError::Unavailable(_) | EthtoolNlError::NoFamily { .. } => "unavailable",
            EthtoolNlError::NotSupported { .. } => "unsupported",
            EthtoolNlError::NoDevice { .. } => "no_device",
            EthtoolNlError::Permission { .. } => "permission",
            EthtoolNlError::BadName { .. } => "bad_name",
            EthtoolNlError::Errno(_) => "kernel",
            EthtoolNlError::Timeout { .. } => "timeout",
            EthtoolNlError::Io { .. } => "io",
            EthtoolNlError::Malformed(_) => "malformed",
        }
    }

    /// Every value of [`EthtoolNlError::reason`], for the docs check.
    pub const REASONS: [&'static str; 9] = [
        "unavailable",
        "unsupported",
        "no_device",
        "permission",
        "bad_name",
        "kernel",
        "timeout",
        "io",
        "malformed",
    ];

    /// Names a kernel refusal of a request about `netdev`.
    fn for_netdev(self, netdev: &str) -> EthtoolNlError {
        let netdev = netdev.to_string();
        match self {
            EthtoolNlError::Errno(libc::EOPNOTSUPP) => EthtoolNlError::NotSupported { netdev },
            EthtoolNlError::Errno(libc::ENODEV) => EthtoolNlError::NoDevice { netdev },
            EthtoolNlError::Errno(libc::EPERM | libc::EACCES) => {
                EthtoolNlError::Permission { netdev }
            }
            EthtoolNlError::Io {
                op: "socket",
                source,
            } if is_unavailable(&source) => EthtoolNlError::Unavailable(source),
            other => other,
        }
    }
}

impl PartialEq for EthtoolNlError {
    fn eq(&self, other: &EthtoolNlError) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Attributes laid end to end as the kernel parses them (`nlattr` headers, 4-byte alignment).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AttrWriter {
    buf: Vec<u8>,
}

impl AttrWriter {
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// An attribute of any value; padded to 4 bytes.
    pub fn raw(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        self.buf
            .extend_from_slice(&((NLA_HDRLEN + value.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(wire::align(self.buf.len()), 0);
        self
    }

    pub fn u8(&mut self, kind: u16, value: u8) -> &mut Self {
        self.raw(kind, &[value])
    }

    pub fn u16(&mut self, kind: u16, value: u16) -> &mut Self {
        self.raw(kind, &value.to_ne_bytes())
    }

    pub fn u32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.raw(kind, &value.to_ne_bytes())
    }

    pub fn u64(&mut self, kind: u16, value: u64) -> &mut Self {
        self.raw(kind, &value.to_ne_bytes())
    }

    /// A NUL-terminated string (`NLA_NUL_STRING`).
    pub fn string(&mut self, kind: u16, value: &str) -> &mut Self {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.raw(kind, &bytes)
    }

    /// A nest (`NLA_F_NESTED` set, as the ethtool policies require) holding what `fill` writes.
    pub fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut AttrWriter)) -> &mut Self {
        let mut inner = AttrWriter::default();
        fill(&mut inner);
        self.raw(kind | NLA_F_NESTED, &inner.buf)
    }
}

/// A name the kernel could hold ([`wire::is_valid_netdev_name`]).
fn check_name(netdev: &str) -> Result<(), EthtoolNlError> {
    if wire::is_valid_netdev_name(netdev) {
        Ok(())
    } else {
        Err(EthtoolNlError::BadName {
            netdev: netdev.to_string(),
        })
    }
}

/// The attributes of an ethtool request about `netdev`: the header nest (`ETHTOOL_A_HEADER_
/// DEV_NAME`, and `ETHTOOL_A_HEADER_FLAGS` when not 0), then `extra`.
pub(crate) fn request_attrs(netdev: &str, flags: u32, extra: &AttrWriter) -> Vec<u8> {
    let mut attrs = AttrWriter::default();
    attrs.nested(ETHTOOL_A_HEADER, |h| {
        h.string(ETHTOOL_A_HEADER_DEV_NAME, netdev);
        if flags != 0 {
            h.u32(ETHTOOL_A_HEADER_FLAGS, flags);
        }
    });
    let mut bytes = attrs.buf;
    bytes.extend_from_slice(extra.bytes());
    bytes
}

/// An ethtool client over any transport: the family id resolved on first use and kept.
pub(crate) struct EthtoolClient<T, F> {
    genl: Genl<T, F>,
    family: Option<u16>,
}

impl<T: Transport, F: FnMut() -> io::Result<T>> EthtoolClient<T, F> {
    pub fn new(open: F, seq: u32) -> Self {
        EthtoolClient {
            genl: Genl::new(open, seq),
            family: None,
        }
    }

    /// One `doit` request about `netdev` and its answer. `reply_cmd` is the command the answer
    /// must carry (the request's `_REPLY`).
    pub fn request(
        &mut self,
        cmd: u8,
        reply_cmd: u8,
        netdev: &str,
        flags: u32,
        extra: &AttrWriter,
        timeout: Duration,
    ) -> Result<Answer, EthtoolNlError> {
        check_name(netdev)?;
        let family = match self.family {
            Some(id) => id,
            None => {
                let id = self
                    .genl
                    .family_id(ETHTOOL_GENL_NAME, timeout)
                    .map_err(|e| e.for_netdev(netdev))?;
                *self.family.insert(id)
            }
        };
        let attrs = request_attrs(netdev, flags, extra);
        let answer = self
            .genl
            .exchange(family, cmd, ETHTOOL_GENL_VERSION, &attrs, timeout)
            .map_err(|e| e.for_netdev(netdev))?;
        if answer.cmd != reply_cmd {
            return Err(EthtoolNlError::Malformed(format!(
                "command {} answered with {} (expected {reply_cmd})",
                cmd, answer.cmd
            )));
        }
        Ok(answer)
    }
}

type KernelOpen = fn() -> io::Result<NetlinkSocket>;

fn open_generic() -> io::Result<NetlinkSocket> {
    NetlinkSocket::open(NETLINK_GENERIC)
}

/// The running kernel's ethtool family, in this process' network namespace. Requests from
/// several threads take turns; each waits at most its own deadline for the kernel.
pub struct EthtoolNetlink {
    timeout: Duration,
    client: Mutex<EthtoolClient<NetlinkSocket, KernelOpen>>,
}

impl std::fmt::Debug for EthtoolNetlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EthtoolNetlink")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl EthtoolNetlink {
    /// `timeout` bounds each request (and the family lookup before the first).
    pub fn new(timeout: Duration) -> EthtoolNetlink {
        EthtoolNetlink {
            timeout,
            client: Mutex::new(EthtoolClient::new(open_generic as KernelOpen, 1)),
        }
    }

    /// See [`EthtoolClient::request`].
    pub fn request(
        &self,
        cmd: u8,
        reply_cmd: u8,
        netdev: &str,
        flags: u32,
        extra: &AttrWriter,
    ) -> Result<Answer, EthtoolNlError> {
        let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
        client.request(cmd, reply_cmd, netdev, flags, extra, self.timeout)
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::genl::tests::{error, message, new_family, Scripted};
    use super::*;

    #[test]
    fn the_request_carries_the_header_nest_then_the_extra_attributes() {
        let mut extra = AttrWriter::default();
        extra.u32(9, 0xa0);
        let bytes = request_attrs("ens1f0np0", ETHTOOL_FLAG_STATS, &extra);
        let attrs: Vec<_> = wire::attrs(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].kind, ETHTOOL_A_HEADER);
        // The NESTED flag is on the wire (masked off by the decoder).
        assert_eq!(u16::from_ne_bytes([bytes[2], bytes[3]]), 0x8001);
        let header: Vec<_> = attrs[0].nested().collect::<Result<_, _>>().unwrap();
        assert_eq!(header[0].kind, ETHTOOL_A_HEADER_DEV_NAME);
        assert_eq!(header[0].value, b"ens1f0np0\0");
        assert_eq!((header[1].kind, header[1].u32().unwrap()), (3, 4));
        assert_eq!((attrs[1].kind, attrs[1].u32().unwrap()), (9, 0xa0));
        assert_eq!(bytes.len() % 4, 0);
        // No flags: no FLAGS attribute.
        let bare = request_attrs("lo", 0, &AttrWriter::default());
        let header: Vec<_> = wire::attrs(&bare)
            .next()
            .unwrap()
            .unwrap()
            .nested()
            .collect();
        assert_eq!(header.len(), 1);
    }

    #[test]
    fn the_family_is_resolved_once_and_refusals_are_named() {
        let transport = Scripted::new(|kind, cmd, _, seq| match kind {
            GENL_ID_CTRL => vec![new_family(seq, 27)],
            27 if cmd == ETHTOOL_MSG_FEC_GET => vec![error(seq, libc::EOPNOTSUPP)],
            _ => vec![error(seq, libc::ENODEV)],
        });
        let mut once = Some(transport);
        let mut client =
            EthtoolClient::new(move || once.take().ok_or_else(|| io::Error::other("x")), 0);
        let t = Duration::from_secs(1);
        let none = AttrWriter::default();
        assert_eq!(
            client.request(
                ETHTOOL_MSG_FEC_GET,
                ETHTOOL_MSG_FEC_GET_REPLY,
                "veth0",
                4,
                &none,
                t
            ),
            Err(EthtoolNlError::NotSupported {
                netdev: "veth0".into()
            })
        );
        assert_eq!(
            client.request(31, 32, "gone0", 0, &none, t),
            Err(EthtoolNlError::NoDevice {
                netdev: "gone0".into()
            })
        );
        assert_eq!(
            client.request(31, 32, "a/b", 0, &none, t),
            Err(EthtoolNlError::BadName {
                netdev: "a/b".into()
            })
        );
        let sent = &client.genl_sent();
        let kinds: Vec<u16> = sent.iter().map(|(k, _, _)| *k).collect();
        assert_eq!(
            kinds,
            [GENL_ID_CTRL, 27, 27],
            "one family lookup, no request for a/b"
        );
    }

    #[test]
    fn an_answer_with_another_command_is_malformed() {
        let transport = Scripted::new(|kind, _, _, seq| match kind {
            GENL_ID_CTRL => vec![new_family(seq, 27)],
            _ => vec![message(
                27,
                seq,
                &[ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY, 1, 0, 0],
            )],
        });
        let mut once = Some(transport);
        let mut client =
            EthtoolClient::new(move || once.take().ok_or_else(|| io::Error::other("x")), 0);
        let result = client.request(
            ETHTOOL_MSG_FEC_GET,
            ETHTOOL_MSG_FEC_GET_REPLY,
            "eth0",
            0,
            &AttrWriter::default(),
            Duration::from_secs(1),
        );
        assert!(
            matches!(result, Err(EthtoolNlError::Malformed(_))),
            "{result:?}"
        );
    }

    impl<F: FnMut() -> io::Result<Scripted>> EthtoolClient<Scripted, F> {
        fn genl_sent(&self) -> Vec<(u16, u8, Vec<u8>)> {
            self.genl
                .transport_for_tests()
                .map(|t| t.sent.clone())
                .unwrap_or_default()
        }
    }

    /// A veth pair made in a network namespace of this thread's own: the real `ethtool` family
    /// answers FEC_GET on it as not supported (veth has no `get_fecparam`), through the FEC
    /// reader too, and a name that is not there as no device. Needs CAP_SYS_ADMIN and `ip`;
    /// without them it says SKIP and passes.
    #[test]
    fn a_veth_in_a_namespace_of_our_own_answers_fec_get_as_not_supported() {
        let outcome = std::thread::spawn(|| {
            // SAFETY: plain syscall; it moves only this thread into a new network namespace
            // (the namespace goes away with the thread and the interfaces in it).
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "unshare(CLONE_NEWNET): {}",
                    io::Error::last_os_error()
                ));
            }
            let ip = std::process::Command::new("ip")
                .args([
                    "link", "add", "rfev0", "type", "veth", "peer", "name", "rfev1",
                ])
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if !ip.status.success() {
                return Err(format!(
                    "ip link add: {}",
                    String::from_utf8_lossy(&ip.stderr)
                ));
            }
            let client = EthtoolNetlink::new(Duration::from_secs(5));
            Ok((
                fec::read(&client, "rfev0"),
                fec::read(&client, "rfe-absent"),
            ))
        })
        .join()
        .expect("the namespace thread panicked");
        match outcome {
            Err(why) => eprintln!("SKIP: no network namespace of our own here: {why}"),
            Ok((veth, absent)) => {
                assert_eq!(
                    veth,
                    Err(EthtoolNlError::NotSupported {
                        netdev: "rfev0".into()
                    })
                );
                assert_eq!(
                    absent,
                    Err(EthtoolNlError::NoDevice {
                        netdev: "rfe-absent".into()
                    })
                );
            }
        }
    }

    /// Loopback has no FEC operation: the running kernel must say EOPNOTSUPP through the real
    /// `ethtool` family, without privilege (FEC_GET has no GENL_ADMIN_PERM flag in
    /// net/ethtool/netlink.c). A kernel without ethtool netlink says NoFamily; anything else
    /// (a timeout, a malformed answer) fails.
    #[test]
    fn the_running_kernel_answers_fec_get_on_loopback_as_not_supported() {
        let client = EthtoolNetlink::new(Duration::from_secs(5));
        let result = client.request(
            ETHTOOL_MSG_FEC_GET,
            ETHTOOL_MSG_FEC_GET_REPLY,
            "lo",
            ETHTOOL_FLAG_STATS,
            &AttrWriter::default(),
        );
        match result {
            Err(EthtoolNlError::NotSupported { netdev }) => assert_eq!(netdev, "lo"),
            Err(EthtoolNlError::NoFamily { .. }) => {
                eprintln!("SKIP: this kernel has no ethtool netlink family")
            }
            other => panic!("expected EOPNOTSUPP for lo, got {other:?}"),
        }
    }
}
