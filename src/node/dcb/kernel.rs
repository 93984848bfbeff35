//! The kernel's side: one `RTM_GETDCB` request on a `NETLINK_ROUTE` socket (the netlink socket of
//! `rdma_netlink`, opened for another protocol), its answer awaited until a deadline.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::rdma_netlink::wire::{self, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_REQUEST};
use crate::node::rdma_netlink::{is_unavailable, NetlinkSocket, Transport};

use super::uapi::*;
use super::{decode, DcbAnswer, DcbError, DcbSource};

/// Reads DCB settings from the running kernel, in this process' network namespace.
#[derive(Debug)]
pub struct KernelDcb {
    timeout: Duration,
    /// Numbers go on across requests so that a late answer never matches a new one.
    seq: AtomicU32,
}

impl KernelDcb {
    /// `timeout` bounds each answer: a netdev whose driver hangs in its DCB callback costs
    /// that long, never more.
    pub fn new(timeout: Duration) -> KernelDcb {
        KernelDcb {
            timeout,
            seq: AtomicU32::new(1),
        }
    }
}

impl DcbSource for KernelDcb {
    fn ieee(&self, netdev: &str) -> Result<DcbAnswer, DcbError> {
        check_name(netdev)?;
        let mut socket = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(|e| {
            if is_unavailable(&e) {
                DcbError::Unavailable(Arc::new(e))
            } else {
                io_error("socket", e)
            }
        })?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        socket
            .send(&encode_request(seq, netdev))
            .map_err(|e| io_error("send", e))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DcbError::Timeout(self.timeout));
            }
            let datagram = socket
                .recv(left)
                .map_err(|e| io_error("recv", e))?
                .ok_or(DcbError::Timeout(self.timeout))?;
            if answers(&datagram, seq) {
                return decode::answer(&datagram, Some(seq), netdev);
            }
        }
    }
}

fn io_error(op: &'static str, e: std::io::Error) -> DcbError {
    DcbError::Io {
        op,
        source: Arc::new(e),
    }
}

/// Whether `datagram` holds the answer to `seq` (the kernel sends it in one message), or cannot
/// be framed (waiting longer would not help).
fn answers(datagram: &[u8], seq: u32) -> bool {
    wire::messages(datagram).any(|m| match m {
        Ok(m) => m.header.seq == seq && matches!(m.header.kind, RTM_GETDCB | NLMSG_ERROR),
        Err(_) => true,
    })
}

/// A name the kernel could hold ([`wire::is_valid_netdev_name`]).
pub(super) fn check_name(netdev: &str) -> Result<(), DcbError> {
    if wire::is_valid_netdev_name(netdev) {
        Ok(())
    } else {
        Err(DcbError::BadName {
            netdev: netdev.to_string(),
        })
    }
}

/// The request iproute2's `dcb` sends: `RTM_GETDCB`, `NLM_F_REQUEST`, `struct dcbmsg` with
/// `DCB_CMD_IEEE_GET`, and `DCB_ATTR_IFNAME` as a NUL-terminated string.
pub fn encode_request(seq: u32, netdev: &str) -> Vec<u8> {
    let name_len = netdev.len() + 1;
    let attr_len = wire::NLA_HDRLEN + name_len;
    let len = NLMSG_HDRLEN + DCBMSG_LEN + wire::align(attr_len);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
    out.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // pid 0: the kernel fills in our port id
    out.extend_from_slice(&[libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0]);
    out.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    out.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
    out.extend_from_slice(netdev.as_bytes());
    out.resize(len, 0); // the NUL and the padding
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_what_iproute2_sends() {
        let request = encode_request(7, "lo");
        let messages: Vec<_> = wire::messages(&request).collect::<Result<_, _>>().unwrap();
        assert_eq!(messages.len(), 1);
        let header = messages[0].header;
        assert_eq!(
            (header.len as usize, header.kind, header.flags, header.seq),
            (request.len(), 78, 1, 7)
        );
        let payload = messages[0].payload;
        assert_eq!(&payload[..4], &[0, 21, 0, 0]);
        let attrs: Vec<_> = wire::attrs(&payload[4..])
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(attrs.len(), 1);
        assert_eq!((attrs[0].kind, attrs[0].value), (1, &b"lo\0"[..]));
        assert_eq!(request.len() % 4, 0);
    }

    #[test]
    fn names_the_kernel_could_not_hold_are_refused_before_any_socket() {
        for name in [
            "",
            "a/b",
            ".",
            "..",
            "sixteen-chars-xx",
            "with space",
            "eth0:1",
        ] {
            assert!(
                matches!(check_name(name), Err(DcbError::BadName { .. })),
                "{name:?}"
            );
        }
        assert!(check_name("ens1f0np0").is_ok());
    }

    #[test]
    fn only_our_answer_or_an_unframable_datagram_ends_the_wait() {
        let ours = encode_request(9, "lo");
        // A request-shaped message of type RTM_GETDCB with our number counts as the answer.
        assert!(answers(&ours, 9));
        assert!(!answers(&ours, 10));
        assert!(answers(&[1, 2, 3], 10));
    }

    /// Loopback has no DCB operations: the running kernel must say EOPNOTSUPP (with CONFIG_DCB,
    /// `dcb_doit` finds no `dcbnl_ops`; without it, rtnetlink has no RTM_GETDCB handler),
    /// without privilege. (A timeout or a socket error would be another error.)
    #[test]
    fn the_running_kernel_refuses_loopback_as_not_supported() {
        let result = KernelDcb::new(Duration::from_secs(5)).ieee("lo");
        assert!(
            matches!(result, Err(DcbError::NotSupported { ref netdev }) if netdev == "lo"),
            "{result:?}"
        );
    }
}
