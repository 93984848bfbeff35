//! From the kernel's answer bytes to the snapshot types. Pure: no socket, no files (the owner
//! of a user QP is resolved afterwards, see `owner.rs`). Attributes a newer kernel adds are
//! skipped; values this build does not know become `Unknown(n)`.

use std::io;
use std::sync::Arc;

use super::nldev::*;
use super::wire::{self, Attr, Message, WireError, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP};
use super::{DeviceResources, NetlinkError, PortStatistics, QpState, QpType, QueuePair};

/// A device as `CMD_GET` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    /// The number of ports; they are numbered from 1.
    pub ports: u32,
}

/// Why an answer has no usable messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// `NLMSG_ERROR`, or `NLMSG_DONE` of a dump that failed: the positive errno.
    Errno(i32),
    Wire(WireError),
}

impl From<WireError> for AnswerError {
    fn from(e: WireError) -> AnswerError {
        AnswerError::Wire(e)
    }
}

impl AnswerError {
    pub(crate) fn into_netlink(self, command: &'static str) -> NetlinkError {
        match self {
            AnswerError::Errno(libc::EPERM) | AnswerError::Errno(libc::EACCES) => {
                NetlinkError::PermissionDenied { command }
            }
            // An older kernel refuses a command it does not know with EINVAL
            // (`is_nl_msg_valid` in drivers/infiniband/core/netlink.c); a driver without the
            // operation answers EOPNOTSUPP or EINVAL too.
            AnswerError::Errno(libc::EOPNOTSUPP) | AnswerError::Errno(libc::EINVAL) => {
                NetlinkError::NotSupported { command }
            }
            AnswerError::Errno(errno) => NetlinkError::Io {
                command,
                source: Arc::new(io::Error::from_raw_os_error(errno)),
            },
            AnswerError::Wire(e) => NetlinkError::Malformed {
                command,
                detail: e.to_string(),
            },
        }
    }
}

/// The data messages of one request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    pub messages: Vec<Message<'a>>,
    /// `NLMSG_DONE` or the acknowledgement was seen: nothing more is to come.
    pub complete: bool,
}

/// Splits an answer (datagrams laid end to end) into its data messages, up to the `NLMSG_DONE`
/// or acknowledgement that ends it. With `seq`, messages of other sequence numbers (a late
/// answer to an earlier request) are skipped.
pub fn answer(buf: &[u8], seq: Option<u32>) -> Result<Answer<'_>, AnswerError> {
    let mut messages = Vec::new();
    for message in wire::messages(buf) {
        let message = message?;
        if seq.is_some_and(|s| s != message.header.seq) {
            continue;
        }
        match message.header.kind {
            NLMSG_NOOP => {}
            NLMSG_ERROR => {
                return match message.error_code()? {
                    0 => Ok(Answer {
                        messages,
                        complete: true,
                    }),
                    code => Err(AnswerError::Errno(code.saturating_neg())),
                };
            }
            NLMSG_DONE => {
                // netlink_dump_done puts the dump's final status here; older kernels may send
                // an empty payload.
                if let Ok(code) = message.error_code() {
                    if code < 0 {
                        return Err(AnswerError::Errno(code.saturating_neg()));
                    }
                }
                return Ok(Answer {
                    messages,
                    complete: true,
                });
            }
            _ => messages.push(message),
        }
    }
    Ok(Answer {
        messages,
        complete: false,
    })
}

/// Whether `datagram` holds the end of the answer to `seq` (for the receive loop).
pub fn ends_answer(datagram: &[u8], seq: u32) -> bool {
    wire::messages(datagram).any(|m| match m {
        Ok(m) => m.header.seq == seq && matches!(m.header.kind, NLMSG_DONE | NLMSG_ERROR),
        // Nothing after a framing error can be read: waiting longer would not help.
        Err(_) => true,
    })
}

/// Whether `datagram` answers the doit `seq` that was sent without `NLM_F_ACK`: its one message,
/// or the error that replaces it (errors are acknowledged whatever the flags, `rdma_nl_rcv_skb`
/// in drivers/infiniband/core/netlink.c). One datagram and one `recvfrom` fewer than with the
/// acknowledgement.
pub(crate) fn ends_doit(datagram: &[u8], seq: u32) -> bool {
    wire::messages(datagram).any(|m| match m {
        Ok(m) => m.header.seq == seq,
        Err(_) => true,
    })
}

/// The messages of `op`: other types in an answer are not ours to read.
fn of_command<'m, 'a>(
    messages: &'m [Message<'a>],
    op: u16,
) -> impl Iterator<Item = &'m Message<'a>> + 'm {
    messages
        .iter()
        .filter(move |m| m.header.kind == msg_type(op))
}

/// Device handle (`fill_nldev_handle`): index and name.
#[derive(Default)]
struct Handle {
    index: Option<u32>,
    name: Option<String>,
}

impl Handle {
    /// Takes the attribute if it is part of the handle.
    fn take(&mut self, a: &Attr) -> Result<bool, WireError> {
        match a.kind {
            ATTR_DEV_INDEX => self.index = Some(a.u32()?),
            ATTR_DEV_NAME => self.name = Some(a.string()),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The name, or the index when a kernel left the name out.
    fn name(&self) -> String {
        match (&self.name, self.index) {
            (Some(name), _) => name.clone(),
            (None, Some(index)) => index.to_string(),
            (None, None) => String::new(),
        }
    }
}

/// `CMD_GET` dump: every device and its port count.
pub fn devices(messages: &[Message]) -> Result<Vec<DeviceInfo>, WireError> {
    let mut out = Vec::new();
    for m in of_command(messages, CMD_GET) {
        let mut handle = Handle::default();
        let mut ports = 0;
        for a in wire::attrs(m.payload) {
            let a = a?;
            if !handle.take(&a)? && a.kind == ATTR_PORT_INDEX {
                ports = a.u32()?;
            }
        }
        out.push(DeviceInfo {
            index: handle
                .index
                .ok_or(WireError::Missing { what: "DEV_INDEX" })?,
            name: handle.name(),
            ports,
        });
    }
    Ok(out)
}

/// `CMD_RES_GET` dump: each device's resource summary.
pub fn resources(messages: &[Message]) -> Result<Vec<DeviceResources>, WireError> {
    let mut out = Vec::new();
    for m in of_command(messages, CMD_RES_GET) {
        let mut handle = Handle::default();
        let mut device = DeviceResources::default();
        for a in wire::attrs(m.payload) {
            let a = a?;
            if handle.take(&a)? || a.kind != ATTR_RES_SUMMARY {
                continue;
            }
            for entry in a.nested() {
                let entry = entry?;
                if entry.kind != ATTR_RES_SUMMARY_ENTRY {
                    continue;
                }
                let (mut name, mut curr) = (None, None);
                for f in entry.nested() {
                    let f = f?;
                    match f.kind {
                        ATTR_RES_SUMMARY_ENTRY_NAME => name = Some(f.string()),
                        ATTR_RES_SUMMARY_ENTRY_CURR => curr = Some(f.u64()?),
                        _ => {}
                    }
                }
                if let (Some(name), Some(curr)) = (name, curr) {
                    device.summary.insert(name, curr);
                }
            }
        }
        device.index = handle.index.unwrap_or_default();
        device.name = handle.name();
        out.push(device);
    }
    Ok(out)
}

/// `CMD_RES_QP_GET` dump. `owner` holds the kernel owner's name; for user QPs it is empty
/// until `owner::fill_owners` reads `/proc/PID/comm`.
pub fn queue_pairs(messages: &[Message]) -> Result<Vec<QueuePair>, WireError> {
    let mut out = Vec::new();
    for m in of_command(messages, CMD_RES_QP_GET) {
        let mut handle = Handle::default();
        let mut tables = Vec::new();
        for a in wire::attrs(m.payload) {
            let a = a?;
            if !handle.take(&a)? && a.kind == ATTR_RES_QP {
                tables.push(a);
            }
        }
        let device = handle.name();
        for table in tables {
            for entry in table.nested() {
                let entry = entry?;
                if entry.kind == ATTR_RES_QP_ENTRY {
                    out.push(queue_pair(&device, &entry)?);
                }
            }
        }
    }
    Ok(out)
}

fn queue_pair(device: &str, entry: &Attr) -> Result<QueuePair, WireError> {
    let (mut port, mut lqpn, mut qp_type, mut state, mut pid, mut kern) =
        (None, None, None, None, None, None);
    for f in entry.nested() {
        let f = f?;
        match f.kind {
            ATTR_PORT_INDEX => port = Some(f.u32()?),
            ATTR_RES_LQPN => lqpn = Some(f.u32()?),
            ATTR_RES_TYPE => qp_type = Some(QpType::from_kernel(f.u8()?)),
            ATTR_RES_STATE => state = Some(QpState::from_kernel(f.u8()?)),
            ATTR_RES_PID => pid = Some(f.u32()?),
            ATTR_RES_KERN_NAME => kern = Some(f.string()),
            _ => {}
        }
    }
    Ok(QueuePair {
        device: device.to_owned(),
        port,
        lqpn: lqpn.ok_or(WireError::Missing { what: "RES_LQPN" })?,
        qp_type: qp_type.ok_or(WireError::Missing { what: "RES_TYPE" })?,
        state: state.ok_or(WireError::Missing { what: "RES_STATE" })?,
        pid,
        owner: kern.unwrap_or_default(),
    })
}

/// `CMD_STAT_GET` (one port's default counters): the hardware counters in the kernel's order.
pub fn port_statistics(messages: &[Message]) -> Result<Vec<PortStatistics>, WireError> {
    let mut out = Vec::new();
    for m in of_command(messages, CMD_STAT_GET) {
        let mut handle = Handle::default();
        let mut stats = PortStatistics::default();
        for a in wire::attrs(m.payload) {
            let a = a?;
            if handle.take(&a)? {
                continue;
            }
            match a.kind {
                ATTR_PORT_INDEX => stats.port = a.u32()?,
                ATTR_STAT_HWCOUNTERS => {
                    for entry in a.nested() {
                        let entry = entry?;
                        if entry.kind != ATTR_STAT_HWCOUNTER_ENTRY {
                            continue;
                        }
                        let (mut name, mut value) = (None, None);
                        for f in entry.nested() {
                            let f = f?;
                            match f.kind {
                                ATTR_STAT_HWCOUNTER_ENTRY_NAME => name = Some(f.string()),
                                ATTR_STAT_HWCOUNTER_ENTRY_VALUE => value = Some(f.u64()?),
                                _ => {}
                            }
                        }
                        if let (Some(name), Some(value)) = (name, value) {
                            stats.counters.push((name, value));
                        }
                    }
                }
                _ => {}
            }
        }
        stats.device = handle.name();
        out.push(stats);
    }
    Ok(out)
}

/// One whole answer through `decode`, errors named after the command `op`.
pub fn decode_answer<T>(
    op: u16,
    buf: &[u8],
    seq: Option<u32>,
    decode: fn(&[Message]) -> Result<T, WireError>,
) -> Result<T, NetlinkError> {
    let command = command_name(op);
    let answer = answer(buf, seq).map_err(|e| e.into_netlink(command))?;
    decode(&answer.messages).map_err(|e| AnswerError::Wire(e).into_netlink(command))
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    // Written by scripts/gen-nldev-vectors.py (little-endian, like the hosts they stand for).
    const SEQ: Option<u32> = Some(0x5eed_0001);
    const DEV_GET: &[u8] = include_bytes!("../../../tests/fixtures/netlink/dev_get_dump.bin");
    const RES_GET: &[u8] = include_bytes!("../../../tests/fixtures/netlink/res_get_dump.bin");
    const RES_QP: &[u8] = include_bytes!("../../../tests/fixtures/netlink/res_qp_dump.bin");
    const STAT: &[u8] = include_bytes!("../../../tests/fixtures/netlink/stat_get.bin");
    const STAT_100: &[u8] = include_bytes!("../../../tests/fixtures/netlink/stat_get_100.bin");
    const EPERM: &[u8] = include_bytes!("../../../tests/fixtures/netlink/error_eperm.bin");
    const EOPNOTSUPP: &[u8] =
        include_bytes!("../../../tests/fixtures/netlink/error_eopnotsupp.bin");
    const DONE_EINVAL: &[u8] = include_bytes!("../../../tests/fixtures/netlink/done_einval.bin");
    const TRUNCATED: &[u8] = include_bytes!("../../../tests/fixtures/netlink/truncated.bin");
    const BEYOND: &[u8] = include_bytes!("../../../tests/fixtures/netlink/len_beyond_buffer.bin");
    const OVERRUN: &[u8] = include_bytes!("../../../tests/fixtures/netlink/nest_overrun.bin");

    const ALL: &[&[u8]] = &[
        DEV_GET,
        RES_GET,
        RES_QP,
        STAT,
        STAT_100,
        EPERM,
        EOPNOTSUPP,
        DONE_EINVAL,
        TRUNCATED,
        BEYOND,
        OVERRUN,
    ];

    #[test]
    fn device_list_gives_index_name_and_port_count() {
        let devices = decode_answer(CMD_GET, DEV_GET, SEQ, devices).unwrap();
        assert_eq!(
            devices,
            vec![
                DeviceInfo {
                    index: 0,
                    name: "mlx5_0".into(),
                    ports: 1
                },
                DeviceInfo {
                    index: 1,
                    name: "mlx5_1".into(),
                    ports: 2
                },
            ]
        );
        assert!(answer(DEV_GET, SEQ).unwrap().complete);
    }

    #[test]
    fn resource_summary_of_two_devices_keeps_unknown_names() {
        let devices = decode_answer(CMD_RES_GET, RES_GET, SEQ, resources).unwrap();
        assert_eq!(devices.len(), 2);
        let (d0, d1) = (&devices[0], &devices[1]);
        assert_eq!((d0.index, d0.name.as_str()), (0, "mlx5_0"));
        assert_eq!((d1.index, d1.name.as_str()), (1, "mlx5_1"));
        assert_eq!(d0.summary.len(), 8);
        assert_eq!(d0.summary["qp"], 6);
        assert_eq!(d0.summary["cq"], 5);
        assert_eq!(
            d0.summary["frmr_pool"], 9,
            "a resource a newer kernel counts"
        );
        // mlx5_1's u64 values are preceded by PAD attributes.
        assert_eq!(d1.summary.len(), 7);
        assert_eq!(d1.summary["qp"], 2);
        assert_eq!(d1.summary["cm_id"], 1);
    }

    #[test]
    fn queue_pairs_over_two_messages() {
        let qps = decode_answer(CMD_RES_QP_GET, RES_QP, SEQ, queue_pairs).unwrap();
        let got: Vec<_> = qps
            .iter()
            .map(|q| {
                (
                    q.device.as_str(),
                    q.port,
                    q.lqpn,
                    q.qp_type,
                    q.state,
                    q.pid,
                    q.owner.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "mlx5_0",
                    Some(1),
                    1,
                    QpType::Gsi,
                    QpState::Rts,
                    None,
                    "ib_core"
                ),
                (
                    "mlx5_0",
                    Some(1),
                    0x1a4,
                    QpType::Rc,
                    QpState::Rts,
                    Some(4242),
                    ""
                ),
                (
                    "mlx5_0",
                    Some(1),
                    0x1a5,
                    QpType::Ud,
                    QpState::Rtr,
                    Some(4243),
                    ""
                ),
                (
                    "mlx5_0",
                    Some(2),
                    0x200,
                    QpType::XrcTgt,
                    QpState::Err,
                    Some(4242),
                    ""
                ),
                (
                    "mlx5_0",
                    None,
                    0x201,
                    QpType::Rc,
                    QpState::Reset,
                    Some(4244),
                    ""
                ),
                (
                    "mlx5_0",
                    Some(1),
                    0x202,
                    QpType::Unknown(12),
                    QpState::Unknown(9),
                    None,
                    ""
                ),
            ]
        );
    }

    #[test]
    fn port_counters_in_kernel_order_with_optional_ones() {
        let stats = decode_answer(CMD_STAT_GET, STAT, SEQ, port_statistics).unwrap();
        assert_eq!(stats.len(), 1);
        let s = &stats[0];
        assert_eq!((s.device.as_str(), s.port), ("mlx5_0", 1));
        assert_eq!(s.counters.len(), 15);
        assert_eq!(s.counters[0], ("duplicate_request".to_string(), 1));
        let get = |n: &str| s.counters.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("rx_icrc_encapsulated"), Some((1 << 40) + 5));
        assert_eq!(get("np_ecn_marked_roce_packets"), Some(1200));
        assert_eq!(get("cc_rx_ce_pkts"), Some(55));
        assert_eq!(get("cc_rx_cnp_pkts"), Some(66));
        assert_eq!(get("cc_tx_cnp_pkts"), Some(77));
        // The answer ends with the acknowledgement (NLMSG_ERROR 0).
        assert!(answer(STAT, SEQ).unwrap().complete);
        let hundred = decode_answer(CMD_STAT_GET, STAT_100, SEQ, port_statistics).unwrap();
        assert_eq!(hundred[0].counters.len(), 100);
        assert_eq!(
            hundred[0].counters[99],
            ("hw_counter_099".to_string(), 99_007)
        );
    }

    #[test]
    fn errors_map_to_their_variants() {
        let e = decode_answer(CMD_RES_QP_GET, EPERM, SEQ, queue_pairs).unwrap_err();
        assert!(
            matches!(
                e,
                NetlinkError::PermissionDenied {
                    command: "CMD_RES_QP_GET"
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.reason(), "permission");
        let e = decode_answer(CMD_STAT_GET, EOPNOTSUPP, SEQ, port_statistics).unwrap_err();
        assert!(matches!(e, NetlinkError::NotSupported { .. }), "{e:?}");
        let e = decode_answer(CMD_RES_QP_GET, DONE_EINVAL, SEQ, queue_pairs).unwrap_err();
        assert!(matches!(e, NetlinkError::NotSupported { .. }), "{e:?}");
        assert_eq!(
            answer(EPERM, None).unwrap_err(),
            AnswerError::Errno(libc::EPERM)
        );
        let other = AnswerError::Errno(libc::EBUSY).into_netlink("CMD_GET");
        assert_eq!(other.reason(), "io");
    }

    #[test]
    fn malformed_answers_are_errors() {
        for (buf, op, what) in [
            (TRUNCATED, CMD_RES_QP_GET, "truncated"),
            (BEYOND, CMD_STAT_GET, "beyond"),
            (OVERRUN, CMD_RES_GET, "overrun"),
        ] {
            let e = match op {
                CMD_RES_QP_GET => decode_answer(op, buf, SEQ, queue_pairs).map(|_| ()),
                CMD_STAT_GET => decode_answer(op, buf, SEQ, port_statistics).map(|_| ()),
                _ => decode_answer(op, buf, SEQ, resources).map(|_| ()),
            }
            .unwrap_err();
            assert!(matches!(e, NetlinkError::Malformed { .. }), "{what}: {e:?}");
        }
        // A message cut inside is framed whole: more may follow. A framing error ends the wait:
        // nothing after it can be read.
        assert!(!ends_answer(TRUNCATED, 0x5eed_0001));
        assert!(ends_answer(BEYOND, 1));
    }

    #[test]
    fn other_sequence_numbers_are_skipped() {
        // The same answer read as if another request were waiting: nothing is ours.
        let a = answer(RES_QP, Some(1)).unwrap();
        assert!(a.messages.is_empty() && !a.complete);
        assert!(!ends_answer(RES_QP, 1));
        assert!(ends_answer(RES_QP, 0x5eed_0001));
    }

    fn decode_everything(buf: &[u8]) {
        let _ = decode_answer(CMD_GET, buf, None, devices);
        let _ = decode_answer(CMD_RES_GET, buf, None, resources);
        let _ = decode_answer(CMD_RES_QP_GET, buf, None, queue_pairs);
        let _ = decode_answer(CMD_STAT_GET, buf, None, port_statistics);
        let _ = ends_answer(buf, 0x5eed_0001);
    }

    /// Every prefix of every vector, and every byte of it replaced by a few values: each decode
    /// returns (the loop would abort on a panic).
    #[test]
    fn no_truncation_or_mutation_panics() {
        let mut runs = 0;
        for vector in ALL {
            for cut in 0..=vector.len() {
                decode_everything(&vector[..cut]);
                runs += 1;
            }
            let mut copy = vector.to_vec();
            for at in 0..copy.len() {
                let original = copy[at];
                for value in [0x00, 0x01, 0x03, 0x7f, 0x80, 0xff, original ^ 0x04] {
                    copy[at] = value;
                    decode_everything(&copy);
                    runs += 1;
                }
                copy[at] = original;
            }
        }
        assert!(runs > 45_000, "{runs}");
    }
}
