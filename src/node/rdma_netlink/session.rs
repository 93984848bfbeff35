//! The requests of one read and the order they go in, over any datagram transport (the kernel
//! socket in `socket.rs`, scripted answers in the tests): sequence numbers, the deadline of
//! each answer, the dump size bound, and a fresh transport after an answer left half-read.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::decode::{self, DeviceInfo};
use super::nldev::*;
use super::wire::{self, Message, WireError, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use super::{owner, NetlinkError, NetlinkLimits, NetlinkSnapshot};

/// Datagrams to and from the kernel.
pub trait Transport {
    fn send(&mut self, request: &[u8]) -> io::Result<()>;
    /// The next datagram from the kernel, or `None` once `timeout` has passed without one.
    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>>;
}

/// The bytes of one answer.
struct Collected {
    bytes: Vec<u8>,
    /// Stopped at the byte bound before the end: a prefix of whole datagrams.
    truncated: bool,
}

/// A boxed transport (the scrape-time reader keeps one per device, kernel socket or test fake).
impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        (**self).send(request)
    }

    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        (**self).recv(timeout)
    }
}

pub struct Session<T, F> {
    transport: Option<T>,
    open: F,
    seq: u32,
}

impl<T: Transport, F: FnMut() -> io::Result<T>> Session<T, F> {
    /// `first` is already open; `open` makes another when an answer was abandoned half-read
    /// (its late parts must not be taken for the next answer).
    pub fn new(first: T, open: F, seq: u32) -> Self {
        Session {
            transport: Some(first),
            open,
            seq,
        }
    }

    /// No transport yet: the first request opens one.
    pub(crate) fn unopened(open: F, seq: u32) -> Self {
        Session {
            transport: None,
            open,
            seq,
        }
    }

    /// One request's whole answer, its datagrams laid end to end, and the sequence number it
    /// answers. An answer past `max_bytes` is refused as malformed (a doit answers one
    /// message; only a dump may be long).
    pub fn exchange(
        &mut self,
        op: u16,
        flags: u16,
        attrs: &[(u16, u32)],
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<(Vec<u8>, u32), NetlinkError> {
        let collected = self.request(op, flags, attrs, timeout, max_bytes)?;
        if collected.truncated {
            return Err(NetlinkError::Malformed {
                command: command_name(op),
                detail: format!("no end after {} bytes", collected.bytes.len()),
            });
        }
        Ok((collected.bytes, self.seq))
    }

    fn request(
        &mut self,
        op: u16,
        flags: u16,
        attrs: &[(u16, u32)],
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Collected, NetlinkError> {
        let command = command_name(op);
        let io_error = |e: io::Error| NetlinkError::Io {
            command,
            source: Arc::new(e),
        };
        let transport = match &mut self.transport {
            Some(t) => t,
            None => self.transport.insert((self.open)().map_err(io_error)?),
        };
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        transport
            .send(&wire::encode_request(
                msg_type(op),
                NLM_F_REQUEST | flags,
                seq,
                attrs,
            ))
            .map_err(io_error)?;
        let deadline = Instant::now() + timeout;
        // A doit without NLM_F_ACK ends with its one message; anything else with DONE or the
        // acknowledgement.
        let doit = flags & (NLM_F_DUMP | NLM_F_ACK) == 0;
        let mut bytes = Vec::new();
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(NetlinkError::Timeout { command, timeout });
            }
            match transport.recv(left) {
                Err(e) => break Err(io_error(e)),
                Ok(None) => break Err(NetlinkError::Timeout { command, timeout }),
                Ok(Some(datagram)) => {
                    let ends = match doit {
                        true => decode::ends_doit(&datagram, seq),
                        false => decode::ends_answer(&datagram, seq),
                    };
                    bytes.extend_from_slice(&datagram);
                    if ends {
                        break Ok(Collected {
                            bytes,
                            truncated: false,
                        });
                    }
                    if bytes.len() > max_bytes {
                        break Ok(Collected {
                            bytes,
                            truncated: true,
                        });
                    }
                }
            }
        };
        if !matches!(
            result,
            Ok(Collected {
                truncated: false,
                ..
            })
        ) {
            // The rest of this answer may still come: drop the socket rather than drain it.
            self.transport = None;
        }
        result
    }

    /// One request and its decoded answer; `Ok((value, truncated, answer bytes))`.
    fn ask<V>(
        &mut self,
        op: u16,
        flags: u16,
        attrs: &[(u16, u32)],
        limits: &NetlinkLimits,
        max_bytes: usize,
        decode: fn(&[Message]) -> Result<V, WireError>,
    ) -> Result<(V, bool, usize), NetlinkError> {
        let collected = self.request(op, flags, attrs, limits.timeout, max_bytes)?;
        let seq = Some(self.seq);
        let value = decode::decode_answer(op, &collected.bytes, seq, decode)?;
        Ok((value, collected.truncated, collected.bytes.len()))
    }

    /// Every request of one read, failures recorded and the rest still asked.
    pub fn read(&mut self, limits: &NetlinkLimits, proc_root: &Path) -> NetlinkSnapshot {
        let mut snapshot = NetlinkSnapshot::default();
        let max = limits.max_dump_bytes;
        let dump = NLM_F_DUMP;

        let listed = match self.ask(CMD_GET, dump, &[], limits, max, decode::devices) {
            Ok((devices, _, _)) => Some(devices),
            Err(e) => {
                snapshot.failures.push(e);
                None
            }
        };
        match self.ask(CMD_RES_GET, dump, &[], limits, max, decode::resources) {
            Ok((resources, _, _)) => snapshot.devices = resources,
            Err(e) => snapshot.failures.push(e),
        }
        // Without the device list, the summaries still name the devices for the QP dumps (not
        // their ports: no statistics then).
        let devices: Vec<DeviceInfo> = listed.unwrap_or_else(|| {
            snapshot
                .devices
                .iter()
                .map(|d| DeviceInfo {
                    index: d.index,
                    name: d.name.clone(),
                    ports: 0,
                })
                .collect()
        });

        if limits.qps {
            // The kernel dumps QPs of one device per request (DEV_INDEX is required,
            // res_get_common_dumpit); the byte bound is shared by all of them.
            let mut budget = max;
            for device in &devices {
                let attrs = [(ATTR_DEV_INDEX, device.index)];
                match self.ask(
                    CMD_RES_QP_GET,
                    dump,
                    &attrs,
                    limits,
                    budget,
                    decode::queue_pairs,
                ) {
                    Ok((qps, truncated, bytes)) => {
                        snapshot.qps.extend(qps);
                        budget = budget.saturating_sub(bytes);
                        if truncated || budget == 0 {
                            snapshot.qps_truncated = true;
                            break;
                        }
                    }
                    Err(e) => snapshot.failures.push(e),
                }
            }
            owner::fill_owners(&mut snapshot.qps, proc_root);
        }

        if limits.port_stats {
            // One request per port, as `rdma statistic show link` does (stat.c): a doit with
            // DEV_INDEX and PORT_INDEX, acknowledged.
            for device in &devices {
                for port in 1..=device.ports {
                    let attrs = [(ATTR_DEV_INDEX, device.index), (ATTR_PORT_INDEX, port)];
                    match self.ask(
                        CMD_STAT_GET,
                        NLM_F_ACK,
                        &attrs,
                        limits,
                        max,
                        decode::port_statistics,
                    ) {
                        Ok((stats, _, _)) => snapshot.port_stats.extend(stats),
                        Err(e) => snapshot.failures.push(e),
                    }
                }
            }
        }
        snapshot
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::node::rdma_netlink::{QpType, QueuePair};

    const DEV_GET: &[u8] = include_bytes!("../../../tests/fixtures/netlink/dev_get_dump.bin");
    const RES_GET: &[u8] = include_bytes!("../../../tests/fixtures/netlink/res_get_dump.bin");
    const RES_QP: &[u8] = include_bytes!("../../../tests/fixtures/netlink/res_qp_dump.bin");
    const STAT: &[u8] = include_bytes!("../../../tests/fixtures/netlink/stat_get.bin");
    const EPERM: &[u8] = include_bytes!("../../../tests/fixtures/netlink/error_eperm.bin");
    const EOPNOTSUPP: &[u8] =
        include_bytes!("../../../tests/fixtures/netlink/error_eopnotsupp.bin");

    /// Answers each request with a fixture, split into one datagram per message and stamped
    /// with the request's sequence number; `stale` datagrams (another seq) go first.
    #[derive(Default)]
    struct Scripted {
        answers: Vec<(u16, &'static [u8])>,
        queue: VecDeque<Vec<u8>>,
        stale: Vec<u8>,
        sent: Vec<(u16, Vec<(u16, u32)>)>,
    }

    fn restamp(fixture: &[u8], seq: u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        for m in wire::messages(fixture) {
            let len = wire::align(m.unwrap().header.len as usize).min(fixture.len() - at);
            let mut d = fixture[at..at + len].to_vec();
            d[8..12].copy_from_slice(&seq.to_ne_bytes());
            out.push(d);
            at += len;
        }
        out
    }

    impl Transport for Scripted {
        fn send(&mut self, request: &[u8]) -> io::Result<()> {
            let m = wire::messages(request).next().unwrap().unwrap();
            let attrs = wire::attrs(m.payload)
                .map(|a| a.unwrap())
                .map(|a| (a.kind, a.u32().unwrap()))
                .collect();
            let op = op_of(m.header.kind);
            self.sent.push((op, attrs));
            if !self.stale.is_empty() {
                self.queue.push_back(std::mem::take(&mut self.stale));
            }
            if let Some((_, fixture)) = self.answers.iter().find(|(o, _)| *o == op) {
                self.queue.extend(restamp(fixture, m.header.seq));
            }
            Ok(())
        }

        fn recv(&mut self, _timeout: Duration) -> io::Result<Option<Vec<u8>>> {
            Ok(self.queue.pop_front())
        }
    }

    fn never_reopen() -> io::Result<Scripted> {
        Err(io::Error::other("no second socket in this test"))
    }

    fn node() -> Scripted {
        Scripted {
            answers: vec![
                (CMD_GET, DEV_GET),
                (CMD_RES_GET, RES_GET),
                (CMD_RES_QP_GET, RES_QP),
                (CMD_STAT_GET, STAT),
            ],
            ..Scripted::default()
        }
    }

    #[test]
    fn a_read_asks_every_device_and_port() {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("4242")).unwrap();
        std::fs::write(proc.path().join("4242/comm"), "nccl-tests\n").unwrap();
        let mut transport = node();
        // A late answer to an earlier request arrives first: it must be skipped.
        transport.stale = restamp(RES_GET, 1).concat();
        let mut session = Session::new(transport, never_reopen, 100);
        let snapshot = session.read(&NetlinkLimits::default(), proc.path());
        assert!(snapshot.failures.is_empty(), "{:?}", snapshot.failures);
        assert_eq!(snapshot.devices.len(), 2);
        // The fixture QP dump answers for both devices (6 QPs each).
        assert_eq!(snapshot.qps.len(), 12);
        assert!(!snapshot.qps_truncated);
        let rc: Vec<&QueuePair> = snapshot.qps.iter().filter(|q| q.lqpn == 0x1a4).collect();
        assert_eq!(rc[0].owner, "nccl-tests");
        assert_eq!(rc[0].qp_type, QpType::Rc);
        // mlx5_0 has 1 port, mlx5_1 has 2: three STAT_GET requests.
        assert_eq!(snapshot.port_stats.len(), 3);
        let sent = &session.transport.as_ref().unwrap().sent;
        let ops: Vec<u16> = sent.iter().map(|(op, _)| *op).collect();
        assert_eq!(ops, [1, 9, 10, 10, 17, 17, 17]);
        assert_eq!(sent[3].1, [(ATTR_DEV_INDEX, 1)]);
        assert_eq!(sent[6].1, [(ATTR_DEV_INDEX, 1), (ATTR_PORT_INDEX, 2)]);
    }

    #[test]
    fn failures_are_recorded_and_the_rest_still_answers() {
        let mut transport = node();
        transport.answers[2] = (CMD_RES_QP_GET, EPERM);
        transport.answers[3] = (CMD_STAT_GET, EOPNOTSUPP);
        let mut session = Session::new(transport, never_reopen, 0);
        let snapshot = session.read(&NetlinkLimits::default(), Path::new("/nonexistent"));
        assert_eq!(snapshot.devices.len(), 2);
        assert!(snapshot.qps.is_empty() && snapshot.port_stats.is_empty());
        let reasons: Vec<_> = snapshot.failures.iter().map(|f| f.reason()).collect();
        assert_eq!(
            reasons,
            [
                "permission",
                "permission",
                "unsupported",
                "unsupported",
                "unsupported"
            ]
        );
    }

    #[test]
    fn a_dump_past_the_byte_bound_is_truncated_and_the_socket_replaced() {
        let mut reopened = 0;
        let reopen = || {
            reopened += 1;
            Ok(node())
        };
        let mut session = Session::new(node(), reopen, 0);
        let limits = NetlinkLimits {
            // Above the device lists (228 and 504 bytes), below mlx5_0's QP messages (544
            // bytes before their DONE): mlx5_0's dump stops there and mlx5_1 is not asked.
            max_dump_bytes: 520,
            port_stats: false,
            ..NetlinkLimits::default()
        };
        let snapshot = session.read(&limits, Path::new("/nonexistent"));
        assert!(snapshot.qps_truncated);
        assert_eq!(snapshot.qps.len(), 6, "mlx5_0's QPs only");
        assert!(snapshot.qps.iter().all(|q| q.device == "mlx5_0"));
        assert!(snapshot.failures.is_empty(), "{:?}", snapshot.failures);
        assert!(
            session.transport.is_none(),
            "the half-read socket is dropped"
        );
        drop(session);
        assert_eq!(reopened, 0);
    }

    #[test]
    fn no_answer_is_a_timeout_and_a_new_socket_follows() {
        let mut reopened = 0;
        let reopen = || {
            reopened += 1;
            Ok(node())
        };
        let silent = Scripted::default();
        let mut session = Session::new(silent, reopen, 0);
        let limits = NetlinkLimits {
            timeout: Duration::from_millis(50),
            ..NetlinkLimits::default()
        };
        let snapshot = session.read(&limits, Path::new("/nonexistent"));
        // CMD_GET timed out; RES_GET went over a new socket and answered, and its devices had
        // their QPs dumped (no ports known: no statistics).
        assert_eq!(snapshot.failures.len(), 1);
        assert_eq!(snapshot.qps.len(), 12);
        assert!(snapshot.port_stats.is_empty());
        assert!(matches!(
            snapshot.failures[0],
            NetlinkError::Timeout {
                command: "CMD_GET",
                ..
            }
        ));
        assert_eq!(snapshot.devices.len(), 2);
        drop(session);
        assert_eq!(reopened, 1);
    }
}
