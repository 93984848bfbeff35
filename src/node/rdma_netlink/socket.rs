//! The kernel's side: a `NETLINK_RDMA` socket (`libc`, as `ethtool_ioctl.rs` does; no netlink
//! library), polled with a timeout so that no answer can hold a scrape longer than the limit.
//! [`NetlinkSocket`] itself knows no protocol: `node::dcb` opens a `NETLINK_ROUTE` one.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::nldev::NETLINK_RDMA;
use super::session::{Session, Transport};
use super::{NetlinkError, NetlinkLimits, NetlinkSnapshot, NetlinkSource};

/// A dump datagram is at most 32 KiB plus a page (netlink_dump's allocation); more than that
/// would be cut, which `MSG_TRUNC` reveals.
const RECV_BUFFER: usize = 64 << 10;

/// Reads the node's RDMA resources and counters from the kernel.
#[derive(Debug)]
pub struct KernelNetlink {
    proc_root: PathBuf,
    /// Sequence numbers go on across reads, so a late answer never matches a new request.
    seq: AtomicU32,
}

impl KernelNetlink {
    /// `proc_root` is where the owners' `PID/comm` are read (`/proc`, or the host's proc
    /// mounted elsewhere in a container).
    pub fn new(proc_root: PathBuf) -> KernelNetlink {
        KernelNetlink {
            proc_root,
            seq: AtomicU32::new(1),
        }
    }
}

impl NetlinkSource for KernelNetlink {
    fn read(&self, limits: &NetlinkLimits) -> Result<NetlinkSnapshot, NetlinkError> {
        let first = match NetlinkSocket::open(NETLINK_RDMA) {
            Ok(socket) => socket,
            Err(e) if is_unavailable(&e) => return Err(NetlinkError::Unavailable(Arc::new(e))),
            Err(e) => {
                let mut snapshot = NetlinkSnapshot::default();
                snapshot.failures.push(NetlinkError::Io {
                    command: "socket",
                    source: Arc::new(e),
                });
                return Ok(snapshot);
            }
        };
        // Room for every request of this read: one per device and port at most.
        let seq = self.seq.fetch_add(1 << 16, Ordering::Relaxed);
        let mut session = Session::new(first, || NetlinkSocket::open(NETLINK_RDMA), seq);
        Ok(session.read(limits, &self.proc_root))
    }
}

/// `socket()` refusing the protocol or family: no NETLINK_RDMA in this kernel (ib_core not
/// built or not loaded), or no netlink at all.
pub(crate) fn is_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPROTONOSUPPORT) | Some(libc::EAFNOSUPPORT)
    )
}

/// A netlink socket of one protocol, talking to the kernel only.
pub(crate) struct NetlinkSocket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl NetlinkSocket {
    pub(crate) fn open(protocol: libc::c_int) -> io::Result<NetlinkSocket> {
        // SAFETY: plain syscall; the descriptor is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(NetlinkSocket {
            fd,
            buf: vec![0; RECV_BUFFER],
        })
    }
}

impl NetlinkSocket {
    /// Waits up to `timeout` for a datagram: `false` when none came.
    fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Round up: a 0 ms poll on 0.4 ms left would spin.
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        loop {
            // SAFETY: one valid pollfd.
            match unsafe { libc::poll(&mut pfd, 1, ms) } {
                0 => return Ok(false),
                n if n < 0 => {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                _ => return Ok(true),
            }
        }
    }
}

fn kernel_address() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data; all zeroes is a valid value (pid 0 = the kernel).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr
}

impl Transport for NetlinkSocket {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        let addr = kernel_address();
        // SAFETY: buffer and address are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                request.as_ptr().cast(),
                request.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        match sent {
            n if n < 0 => Err(io::Error::last_os_error()),
            n if n as usize != request.len() => Err(io::Error::other("short send")),
            _ => Ok(()),
        }
    }

    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        loop {
            // The datagram is tried first, the poll only when none is queued: the kernel
            // answers a doit inside our `sendto` (netlink_unicast_kernel runs the handler in
            // the sender's context), so the answer is usually there already and a poll first
            // would be a syscall for nothing.
            let mut from = kernel_address();
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: buffer and address are valid for the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => match self.wait(timeout)? {
                        true => continue,
                        false => return Ok(None),
                    },
                    _ => return Err(e),
                }
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a {n}-byte datagram does not fit {} bytes", self.buf.len()),
                ));
            }
            // Another process may send to our port id; only the kernel (pid 0) answers.
            if from.nl_pid != 0 {
                continue;
            }
            return Ok(Some(self.buf[..n].to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel that runs the tests says, asserted either way: without NETLINK_RDMA the
    /// read is `Unavailable`; with it, the devices are those of /sys/class/infiniband.
    #[test]
    fn the_running_kernel_answers_or_is_unavailable() {
        let probe = NetlinkSocket::open(NETLINK_RDMA);
        let result = KernelNetlink::new("/proc".into()).read(&NetlinkLimits::default());
        match probe {
            Err(e) if is_unavailable(&e) => match result {
                Err(NetlinkError::Unavailable(source)) => {
                    assert_eq!(source.raw_os_error(), e.raw_os_error());
                    assert_eq!(NetlinkError::Unavailable(source).reason(), "unavailable");
                }
                other => panic!("expected Unavailable, got {other:?}"),
            },
            Err(e) => panic!("socket(NETLINK_RDMA) failed otherwise: {e}"),
            Ok(_) => {
                let snapshot = result.expect("NETLINK_RDMA opened: the read must succeed");
                let sysfs = std::fs::read_dir("/sys/class/infiniband")
                    .map(|d| d.count())
                    .unwrap_or(0);
                assert_eq!(snapshot.devices.len(), sysfs, "{:?}", snapshot.failures);
            }
        }
    }
}
