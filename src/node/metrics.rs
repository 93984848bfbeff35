//! The one place where node snapshots become metric families: names, help texts and units.

use std::borrow::Cow;
use std::sync::Arc;

use regex::Regex;
use rustc_hash::FxHashSet;

use super::counter_names::{counters_ext_equivalent, CounterNames, Listing, Slot};
use super::counters::Counters;
use super::ethtool_map::{pause_names_show_pfc, TypedStat};
use super::priority_traffic::PriorityTraffic;
use super::reason::ReadErrorReason;
use super::sysfs::{Device, NodeSnapshot, Port};
use crate::exposition::{Families, Kind, Label, LabelBlock, Value};

/// `counters/*`: kernel name, help. Names without an entry still pass through.
/// Sorted by name in byte order (`help_of` searches it).
const PORT_COUNTER_HELP: &[(&str, &str)] = &[
    ("VL15_dropped", "Incoming VL15 (subnet management) packets dropped for lack of buffers."),
    ("excessive_buffer_overrun_errors", "Times that OverrunErrors consecutive flow control update periods occurred with at least one overrun error (saturating 4-bit PMA counter)."),
    ("link_downed", "Times the link failed to recover from an error state and went down (saturating 8-bit PMA counter)."),
    ("link_error_recovery", "Times the link successfully completed the link error recovery process (saturating 8-bit PMA counter)."),
    ("local_link_integrity_errors", "Times the count of local physical errors exceeded the LocalPhyErrors threshold (saturating 4-bit PMA counter)."),
    ("multicast_rcv_packets", "Multicast packets received, including errors."),
    ("multicast_xmit_packets", "Multicast packets transmitted, including errors."),
    ("port_rcv_constraint_errors", "Packets received that were discarded for partition key or raw packet constraints."),
    ("port_rcv_data", "Data octets received on all VLs (the kernel counts 4-octet words; converted to bytes)."),
    ("port_rcv_discards", "Inbound packets discarded by the port because it was down or congested."),
    ("port_rcv_errors", "Packets containing an error received on the port (saturating 16-bit PMA counter)."),
    ("port_rcv_packets", "Packets received on all VLs, including errors."),
    ("port_rcv_remote_physical_errors", "Packets received marked with the EBP delimiter (errored upstream)."),
    ("port_rcv_switch_relay_errors", "Packets received that could not be forwarded by the switch."),
    ("port_xmit_constraint_errors", "Packets not transmitted because of partition key or raw packet constraints."),
    ("port_xmit_data", "Data octets transmitted on all VLs (the kernel counts 4-octet words; converted to bytes)."),
    ("port_xmit_discards", "Outbound packets discarded because the port was down or congested."),
    ("port_xmit_packets", "Packets transmitted on all VLs, including errors."),
    ("port_xmit_wait", "Ticks during which the port had data to transmit but sent none (32-bit PMA counter, often saturated)."),
    ("symbol_error", "Minor link errors detected on one or more physical lanes (saturating 16-bit PMA counter)."),
    ("unicast_rcv_packets", "Unicast packets received, including errors."),
    ("unicast_xmit_packets", "Unicast packets transmitted, including errors."),
];

/// `hw_counters/*` of mlx5 (drivers/infiniband/hw/mlx5/counters.c): name, help; sorted by name.
const HW_COUNTER_HELP: &[(&str, &str)] = &[
    ("duplicate_request", "Duplicate requests received: the peer retransmitted (mlx5 hw counter)."),
    ("implied_nak_seq_err", "Times the requester inferred a NAK sequence error from an ACK with a PSN larger than expected for READ or ATOMIC (mlx5 hw counter)."),
    ("local_ack_timeout_err", "Times the ACK timer expired for RC, XRC or DCT QPs at the sender; recoverable, a symptom of drops or congestion (mlx5 hw counter)."),
    ("np_cnp_sent", "CNP packets sent by the notification point when ECN-marked RoCEv2 packets arrived (mlx5 hw counter)."),
    ("np_ecn_marked_roce_packets", "RoCEv2 packets received with the ECN congestion-experienced mark at the notification point (mlx5 hw counter)."),
    ("out_of_buffer", "Packets dropped because no receive WQE was posted (receive queue empty) (mlx5 hw counter)."),
    ("out_of_sequence", "Out-of-sequence packets received: loss or reordering on the path (mlx5 hw counter)."),
    ("packet_seq_err", "NAK sequence error packets received (mlx5 hw counter)."),
    ("req_cqe_error", "Requester completions with an error (mlx5 hw counter)."),
    ("req_cqe_flush_error", "Requester completions flushed with error (mlx5 hw counter)."),
    ("req_remote_access_errors", "Remote access errors seen by the requester (mlx5 hw counter)."),
    ("req_remote_invalid_request", "Remote invalid request errors seen by the requester (mlx5 hw counter)."),
    ("req_rnr_retries_exceeded", "Times the RNR retry count was exceeded: the QP moved to error (mlx5 hw counter)."),
    ("req_transport_retries_exceeded", "Times the transport retry count was exceeded: the QP moved to error after severe loss (mlx5 hw counter)."),
    ("resp_cqe_error", "Responder completions with an error (mlx5 hw counter)."),
    ("resp_cqe_flush_error", "Responder completions flushed with error (mlx5 hw counter)."),
    ("resp_local_length_error", "Responder local length errors (mlx5 hw counter)."),
    ("resp_remote_access_errors", "Remote access errors seen by the responder (mlx5 hw counter)."),
    ("rnr_nak_retry_err", "RNR NAKs received without exceeding the retry limit (mlx5 hw counter)."),
    ("roce_adp_retrans", "RoCE adaptive retransmissions (mlx5 hw counter)."),
    ("roce_adp_retrans_to", "RoCE adaptive retransmission timeouts (mlx5 hw counter)."),
    ("roce_slow_restart", "Times RoCE slow restart was used (mlx5 hw counter)."),
    ("roce_slow_restart_cnps", "CNPs generated by RoCE slow restart (mlx5 hw counter)."),
    ("roce_slow_restart_trans", "Transitions into the RoCE slow restart state (mlx5 hw counter)."),
    ("rp_cnp_handled", "CNPs handled by the reaction point, which throttled its rate (DCQCN acting) (mlx5 hw counter)."),
    ("rp_cnp_ignored", "CNPs received and ignored by the reaction point: congestion control is not enabled for the priority (mlx5 hw counter)."),
    ("rx_atomic_requests", "ATOMIC requests received by the responder (mlx5 hw counter)."),
    ("rx_dct_connect", "DCT connect requests received (mlx5 hw counter)."),
    ("rx_icrc_encapsulated", "RoCE packets received with an ICRC error (mlx5 hw counter)."),
    ("rx_read_requests", "RDMA READ requests received by the responder (mlx5 hw counter)."),
    ("rx_write_requests", "RDMA WRITE requests received by the responder (mlx5 hw counter)."),
];

const UNKNOWN_PORT_COUNTER_HELP: &str =
    "Port counter from ports/<port>/counters as reported by the kernel (no description known).";
const UNKNOWN_HW_COUNTER_HELP: &str =
    "Driver hardware counter from ports/<port>/hw_counters as reported by the driver (no description known).";
const DEVICE_HW_COUNTER_HELP: &str =
    "Device-level driver hardware counter from <device>/hw_counters as reported by the driver.";

/// `priority` label values, so per-priority series borrow instead of formatting.
const PRIORITIES: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];

/// A counter that could not be exported, for `rdma_exporter_read_errors_total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeIssue {
    pub device: String,
    pub reason: ReadErrorReason,
    pub detail: String,
}

/// A binary search: a scrape looks up hundreds of names in these tables.
fn help_of(table: &'static [(&'static str, &'static str)], name: &str) -> Option<&'static str> {
    let at = table.binary_search_by(|(n, _)| (*n).cmp(name)).ok()?;
    Some(table[at].1)
}

fn port_labels<'a>(device: &'a Device, port: &'a Port) -> [Label<'a>; 2] {
    [
        ("device", Cow::Borrowed(device.name.as_str())),
        ("port", Cow::Borrowed(port.number_text.as_str())),
    ]
}

/// Adds every node metric of `snapshot` to `families`, naming counters by the listings kept in
/// `names` (it forgets the listings this scrape did not meet). Returns what had to be dropped.
pub(crate) fn add_node_metrics<'a>(
    families: &mut Families<'a>,
    snapshot: &'a NodeSnapshot,
    ethtool_include: Option<&Regex>,
    names: &mut CounterNames,
) -> Vec<EncodeIssue> {
    let mut issues = Vec::new();
    families.gauge(
        "rdma_devices",
        "RDMA devices found in /sys/class/infiniband after device filtering.",
        vec![],
        Value::U64(snapshot.devices.len() as u64),
    );
    for device in &snapshot.devices {
        // Each port's label pairs are rendered once for its hundred-odd series.
        let device_block = families.block([("device", Cow::Borrowed(device.name.as_str()))]);
        add_driver_counters(
            families,
            device,
            &device.hw_counters,
            CounterScope::Device(device_block),
            names,
            &mut issues,
        );
        for port in &device.ports {
            let port_block = families.block(port_labels(device, port));
            add_port_identity(families, device, port, port_block);
            add_port_counters(families, device, port, port_block, names, &mut issues);
            add_driver_counters(
                families,
                device,
                &port.hw_counters,
                CounterScope::Port(port_block),
                names,
                &mut issues,
            );
            add_ethtool(families, device, port, ethtool_include, &mut issues);
            super::ecn_settings::add_metrics(families, device, port, &mut issues);
        }
    }
    names.forget_unmet();
    issues
}

/// The help text of a counter file, by its listing and kernel name (`counters_ext/` files by
/// the `counters/` name they stand for).
fn counter_help(listing: Listing, name: &str) -> &'static str {
    match listing {
        Listing::PortCounters | Listing::CountersExt => {
            help_of(PORT_COUNTER_HELP, name).unwrap_or(UNKNOWN_PORT_COUNTER_HELP)
        }
        Listing::PortHw => help_of(HW_COUNTER_HELP, name).unwrap_or(UNKNOWN_HW_COUNTER_HELP),
        Listing::DeviceHw => DEVICE_HW_COUNTER_HELP,
    }
}

fn add_port_identity<'a>(
    families: &mut Families<'a>,
    device: &'a Device,
    port: &'a Port,
    block: LabelBlock,
) {
    let text = |v: &'a Option<String>| Cow::Borrowed(v.as_deref().unwrap_or_default());
    let info_labels = [
        ("device", Cow::Borrowed(device.name.as_str())),
        ("port", Cow::Borrowed(port.number_text.as_str())),
        ("link_layer", text(&port.link_layer)),
        ("netdev", text(&port.netdev)),
        ("hca_type", text(&device.hca_type)),
        ("fw_ver", text(&device.fw_ver)),
        ("board_id", text(&device.board_id)),
        ("node_guid", text(&device.node_guid)),
    ];
    // A fact the driver does not give (soft-RoCE has no `hca_type`, `board_id` or firmware) is
    // left out rather than written empty.
    families.info(
        "rdma_port_info",
        "Identity of an RDMA port: link layer, netdev behind it and device facts.",
        info_labels
            .into_iter()
            .filter(|(_, value)| !value.is_empty()),
    );
    if let Some((id, _)) = &port.state {
        families.gauge_in(
            "rdma_port_state",
            "Logical port state id from the kernel (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).",
            block,
            [],
            Value::U64(u64::from(*id)),
        );
    }
    if let Some((id, _)) = &port.phys_state {
        families.gauge_in(
            "rdma_port_phys_state",
            "Physical port state id from the kernel (1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest).",
            block,
            [],
            Value::U64(u64::from(*id)),
        );
    }
    if let Some(rate) = port.rate_bytes_per_second {
        families.gauge_in(
            "rdma_port_rate_bytes_per_second",
            "Current port rate from the kernel's rate attribute, in bytes per second.",
            block,
            [],
            Value::F64(rate),
        );
    }
    if let Some(lid) = port.lid {
        families.gauge_in(
            "rdma_port_lid",
            "InfiniBand local identifier of the port (0 on RoCE ports).",
            block,
            [],
            Value::U64(lid),
        );
    }
}

fn add_port_counters<'a>(
    families: &mut Families<'a>,
    device: &'a Device,
    port: &'a Port,
    block: LabelBlock,
    names: &mut CounterNames,
    issues: &mut Vec<EncodeIssue>,
) {
    // Kernel names that differ only in case or in a `port_` prefix (`FOO`, `foo`, `port_foo`)
    // land on one metric name: the first keeps it, the others are reported, never exported as
    // duplicate series that Prometheus would silently drop. This port already has a sample
    // under the name exactly when that family's last sample is this port's.
    // Plain counters win; legacy 64-bit files only fill names the plain set lacks (a
    // directory's names are unique: no set of the names seen is needed).
    let plain_slots = names.slots(port.counters.names(), Listing::PortCounters, counter_help);
    let plain = port
        .counters
        .iter_at()
        .map(|(at, name, raw)| (name, raw, &plain_slots[at]));
    // Current kernels have no `counters_ext/`: no listing to keep.
    let ext_slots: Arc<[Slot]> = if port.counters_ext.names().is_empty() {
        Arc::default()
    } else {
        names.slots(
            port.counters_ext.names(),
            Listing::CountersExt,
            counter_help,
        )
    };
    let legacy = port
        .counters_ext
        .iter_at()
        .map(|(at, name, raw)| (counters_ext_equivalent(name), raw, &ext_slots[at]))
        .filter(|(name, _, _)| port.counters.get(name).is_none());
    for (name, raw, slot) in plain.chain(legacy) {
        let Slot::Counter {
            exposed,
            help,
            words,
        } = slot
        else {
            continue;
        };
        let value = if *words {
            raw.checked_mul(4)
                .map_or(Value::F64(raw as f64 * 4.0), Value::U64)
        } else {
            Value::U64(raw)
        };
        if families.last_block(exposed) == Some(block) {
            let detail = format!(
                "port {} counter {name:?} is exported as {exposed}, a name already taken",
                port.number_text
            );
            issues.push(name_collision(device, detail));
            continue;
        }
        families.counter_in(exposed, help, block, [], value);
        if super::saturation::is_saturated(name, raw) {
            families.gauge_in(
                "rdma_port_pma_saturated",
                "1 while a port counter sits at the maximum of its narrow PMA field (8-bit link_downed at 255, 16-bit symbol_error at 65535, ...): it no longer counts, and rules on its increase are blind. Present only while saturated.",
                block,
                [("counter", Cow::Borrowed(name))],
                Value::U64(1),
            );
        }
    }
}

fn add_driver_counters<'a>(
    families: &mut Families<'a>,
    device: &'a Device,
    counters: &'a Counters,
    scope: CounterScope,
    names: &mut CounterNames,
    issues: &mut Vec<EncodeIssue>,
) {
    let (listing, lifespan_name, lifespan_help, block) = match scope {
        CounterScope::Port(block) => (
            Listing::PortHw,
            "rdma_hw_lifespan_seconds",
            "How long the driver caches hw_counters values before refreshing them.",
            block,
        ),
        CounterScope::Device(block) => (
            Listing::DeviceHw,
            "rdma_device_hw_lifespan_seconds",
            "How long the driver caches device-level hw_counters values before refreshing them.",
            block,
        ),
    };
    let slots = names.slots(counters.names(), listing, counter_help);
    for (at, name, value) in counters.iter_at() {
        match &slots[at] {
            // Milliseconds in the kernel; a gauge, not a counter.
            Slot::Lifespan => families.gauge_in(
                lifespan_name,
                lifespan_help,
                block,
                [],
                Value::F64(value as f64 / 1000.0),
            ),
            Slot::Collision => issues.push(name_collision(
                device,
                format!("driver counter {name:?} sanitizes to a name already taken"),
            )),
            Slot::Counter { exposed, help, .. } => {
                let added =
                    families.add_in(exposed, Kind::Counter, *help, block, [], Value::U64(value));
                issues.extend(added.err().map(|e| name_collision(device, e)));
            }
        }
    }
}

/// Where a `hw_counters/` directory sits, with the labels of its series.
#[derive(Clone, Copy)]
enum CounterScope {
    Port(LabelBlock),
    Device(LabelBlock),
}

fn micros_to_seconds(micros: u64) -> Value {
    Value::F64(micros as f64 / 1e6)
}

/// A counter family of typed driver statistics: exposed name, help, and the value of the
/// driver's figure.
type DriverCounter = (&'static str, &'static str, fn(u64) -> Value);

/// The counter families of typed driver statistics, a row a line: name, help, and the value of
/// the driver's figure (per-priority traffic is [`PriorityTraffic`]'s).
#[rustfmt::skip]
mod driver_counters {
    use super::{micros_to_seconds as seconds, DriverCounter, Value::U64};

    pub(crate) const PFC_PAUSE_FRAMES: DriverCounter = ("rdma_pfc_pause_frames_total", "PFC pause frames per priority: rx = received from the link partner (it pauses us), tx = sent by this NIC (we pause it).", U64);
    pub(crate) const PFC_PAUSE_DURATION: DriverCounter = ("rdma_pfc_pause_duration_seconds_total", "Time spent paused by PFC per priority (driver microseconds, converted to seconds).", seconds);
    pub(crate) const PFC_PAUSE_TRANSITIONS: DriverCounter = ("rdma_pfc_pause_transitions_total", "PFC XOFF to XON transitions per priority.", U64);
    pub(crate) const GLOBAL_PAUSE_FRAMES: DriverCounter = ("rdma_global_pause_frames_total", "IEEE 802.3x global pause frames (all priorities).", U64);
    pub(crate) const GLOBAL_PAUSE_DURATION: DriverCounter = ("rdma_global_pause_duration_seconds_total", "Time spent paused by IEEE 802.3x global pause (driver microseconds, converted to seconds).", seconds);
    pub(crate) const PAUSE_STORM_EVENTS: DriverCounter = ("rdma_pfc_pause_storm_events_total", "NIC pause storm events: warning = the NIC sent pause for a long period; error = pause storm timeout reached and pause transmission disabled.", U64);
    pub(crate) const PHY_DISCARDS: DriverCounter = ("rdma_phy_discards_total", "Packets discarded at the physical port (rx: the adapter ran out of buffers, i.e. it is congested).", U64);
    pub(crate) const RX_OUT_OF_BUFFER: DriverCounter = ("rdma_netdev_rx_out_of_buffer_total", "Packets dropped because a netdev receive queue had no software buffers.", U64);
    pub(crate) const LINK_DOWN_EVENTS: DriverCounter = ("rdma_phy_link_down_events_total", "Times the physical link went down (link flaps).", U64);
    pub(crate) const PHY_SYMBOL_ERRORS: DriverCounter = ("rdma_phy_symbol_errors_total", "Received symbol errors at the physical layer.", U64);
    pub(crate) const PCS_SYMBOL_ERRORS: DriverCounter = ("rdma_phy_pcs_symbol_errors_total", "Symbols the PCS/FEC layer could not correct.", U64);
    pub(crate) const FEC_CORRECTED_BITS: DriverCounter = ("rdma_phy_fec_corrected_bit_errors_total", "Bits corrected by forward error correction (pre-FEC bit errors).", U64);
    pub(crate) const PHY_RECEIVED_BITS: DriverCounter = ("rdma_phy_received_bit_count_total", "Bits received at the physical layer, the denominator of the bit error rate.", U64);
    pub(crate) const PHY_CRC_ERRORS: DriverCounter = ("rdma_phy_crc_errors_total", "Frames received with a CRC error.", U64);
}

/// The labels a typed statistic adds to its netdev's: at most a priority and a direction.
type StatLabels<'a> = [Option<Label<'a>>; 2];

/// Where a typed statistic is written: its family and labels. `None` for per-priority traffic,
/// which [`PriorityTraffic`] writes once every priority's counters are known.
fn driver_counter<'a>(stat: TypedStat) -> Option<(&'static DriverCounter, StatLabels<'a>)> {
    use driver_counters as c;
    use TypedStat as T;
    let prio = |p: u8| Some(("priority", Cow::Borrowed(PRIORITIES[usize::from(p)])));
    let dir = |d: super::ethtool_map::Direction| Some(("direction", Cow::Borrowed(d.as_label())));
    Some(match stat {
        T::PriorityBytes { .. }
        | T::PriorityPackets { .. }
        | T::PriorityDiscards { .. }
        | T::PriorityBufferDiscards { .. }
        | T::PriorityCongestionDiscards { .. }
        | T::PriorityEcnMarked { .. } => return None,
        T::PfcPauseFrames {
            priority,
            direction,
        } => (&c::PFC_PAUSE_FRAMES, [prio(priority), dir(direction)]),
        T::PfcPauseDurationMicros {
            priority,
            direction,
        } => (&c::PFC_PAUSE_DURATION, [prio(priority), dir(direction)]),
        T::PfcPauseTransitions {
            priority,
            direction,
        } => (&c::PFC_PAUSE_TRANSITIONS, [prio(priority), dir(direction)]),
        T::GlobalPauseFrames { direction } => (&c::GLOBAL_PAUSE_FRAMES, [dir(direction), None]),
        T::GlobalPauseDurationMicros { direction } => {
            (&c::GLOBAL_PAUSE_DURATION, [dir(direction), None])
        }
        T::PauseStormEvents { severity } => (
            &c::PAUSE_STORM_EVENTS,
            [Some(("severity", Cow::Borrowed(severity.as_label()))), None],
        ),
        T::PhyDiscards { direction } => (&c::PHY_DISCARDS, [dir(direction), None]),
        T::RxOutOfBuffer => (&c::RX_OUT_OF_BUFFER, [None, None]),
        T::LinkDownEvents => (&c::LINK_DOWN_EVENTS, [None, None]),
        T::PhySymbolErrors => (&c::PHY_SYMBOL_ERRORS, [None, None]),
        T::PcsSymbolErrors => (&c::PCS_SYMBOL_ERRORS, [None, None]),
        T::FecCorrectedBits => (&c::FEC_CORRECTED_BITS, [None, None]),
        T::PhyReceivedBits => (&c::PHY_RECEIVED_BITS, [None, None]),
        T::PhyCrcErrors => (&c::PHY_CRC_ERRORS, [None, None]),
    })
}

/// The issue of a series left out because its name is taken: by another kernel name that
/// sanitizes to it, or by a family of another type.
fn name_collision(device: &Device, detail: impl ToString) -> EncodeIssue {
    EncodeIssue {
        device: device.name.clone(),
        reason: ReadErrorReason::NameCollision,
        detail: detail.to_string(),
    }
}

fn add_ethtool<'a>(
    families: &mut Families<'a>,
    device: &'a Device,
    port: &'a Port,
    include: Option<&Regex>,
    issues: &mut Vec<EncodeIssue>,
) {
    let Some(netdev) = &port.netdev else { return };
    let base_labels = || -> [Label<'a>; 3] {
        [
            ("device", Cow::Borrowed(device.name.as_str())),
            ("port", Cow::Borrowed(port.number_text.as_str())),
            ("netdev", Cow::Borrowed(netdev.as_str())),
        ]
    };
    if port.netdev_in_other_netns {
        families.gauge(
            "rdma_port_netdev_in_other_netns",
            "1: the port's netdev is in another network namespace (an SR-IOV VF in a pod), so its driver statistics (PFC, ECN, discards) are not read here; no series where the netdev is here.",
            base_labels(),
            Value::U64(1),
        );
        return;
    }
    // The netdev's hundreds of series share these three pairs: rendered once.
    let block = families.block(base_labels());
    let mut seen_untyped = FxHashSet::default();
    let mut per_priority = PriorityTraffic::default();
    let types = port.ethtool_types();
    let stats = port.ethtool.names().iter().zip(port.ethtool.values());
    for ((name, raw), stat) in stats.zip(types.iter()) {
        let (name, Some(raw)) = (&**name, *raw) else {
            continue;
        };
        let Some(stat) = *stat else {
            if include.is_some_and(|re| re.is_match(name)) && seen_untyped.insert(name) {
                let added = families.add_in(
                    "rdma_ethtool_stat",
                    Kind::Untyped,
                    "Driver statistic of the port's netdev (ethtool -S) selected by ethtool.include; type and unit are the driver's.",
                    block,
                    [("stat", Cow::Borrowed(name))],
                    Value::U64(raw),
                );
                issues.extend(added.err().map(|e| name_collision(device, e)));
            }
            continue;
        };
        // Per-priority traffic is exported after the loop, once every priority's counters are
        // known (idle priorities are left out).
        if per_priority.note(stat, raw) {
            continue;
        }
        if let Some(((name, help, value), labels)) = driver_counter(stat) {
            families.counter_in(name, help, block, labels.into_iter().flatten(), value(raw));
        }
    }
    let driver = port.netdev_driver.as_deref();
    per_priority.add_metrics(families, block, pause_names_show_pfc(driver));
}

/// The fast PFC storm sampler's findings since the previous scrape (its `take_reports`).
pub(crate) fn add_storm_metrics<'a>(
    families: &mut Families<'a>,
    reports: &'a [super::storm::PauseReport],
) {
    for report in reports {
        let key = &report.key;
        let priority = match PRIORITIES.get(usize::from(key.priority)) {
            Some(p) => Cow::Borrowed(*p),
            None => Cow::Owned(key.priority.to_string()),
        };
        let labels = || {
            [
                ("device", Cow::Borrowed(key.device.as_str())),
                ("port", Cow::Borrowed(key.port.as_str())),
                ("netdev", Cow::Borrowed(key.netdev.as_str())),
                ("priority", priority.clone()),
                ("direction", Cow::Borrowed(key.direction.as_label())),
            ]
        };
        families.gauge(
            "rdma_pfc_paused_ratio_peak",
            "Highest share of time the priority was paused over one sampling period (collector.pfc-storm.period) since the previous scrape; rx = the NIC was paused, tx = it paused its switch port.",
            labels(),
            Value::F64(report.peak_paused_ratio),
        );
        families.counter(
            "rdma_pfc_storms_detected_total",
            "PFC storms the agent's sampler detected: the priority stayed paused (at least min_paused_ratio of the time) for the detection time, as a PFC watchdog would judge it.",
            labels(),
            Value::U64(report.storms),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Port 1, with nothing read.
    fn port_one() -> Port {
        Port {
            number: 1,
            number_text: "1".into(),
            ..Port::default()
        }
    }

    /// Ethernet port 1 on `netdev` of `driver`, with its `ethtool -S` statistics.
    fn ethernet_port(netdev: &str, driver: &str, ethtool: Vec<(String, u64)>) -> Port {
        Port {
            link_layer: Some("Ethernet".into()),
            netdev: Some(netdev.into()),
            netdev_driver: Some(driver.into()),
            ethtool: ethtool.into(),
            ..port_one()
        }
    }

    /// Encodes a node of one device, `d0`, with `port`, and hands `check` the families and the
    /// issues.
    fn with_node_metrics<R>(
        port: Port,
        check: impl FnOnce(&Families<'_>, &[EncodeIssue]) -> R,
    ) -> R {
        let snapshot = NodeSnapshot {
            infiniband_present: true,
            devices: vec![Device {
                name: "d0".into(),
                ports: vec![port],
                ..Device::default()
            }],
            errors: vec![],
        };
        let mut families = Families::default();
        let issues = add_node_metrics(&mut families, &snapshot, None, &mut CounterNames::default());
        check(&families, &issues)
    }

    /// Asserts that `issues` are `count` name collisions, each `detail` says what it should.
    #[track_caller]
    fn assert_collisions(issues: &[EncodeIssue], count: usize, detail: impl Fn(&str) -> bool) {
        assert_eq!(issues.len(), count, "{issues:?}");
        assert!(
            issues
                .iter()
                .all(|i| i.reason == ReadErrorReason::NameCollision && detail(&i.detail)),
            "{issues:?}"
        );
    }

    #[test]
    fn colliding_driver_names_keep_the_clean_one() {
        let port = Port {
            hw_counters: vec![
                ("RX-Bytes".into(), 1),
                ("rx_bytes".into(), 2),
                ("rx.bytes".into(), 3),
            ]
            .into(),
            ..port_one()
        };
        with_node_metrics(port, |families, issues| {
            assert_collisions(issues, 2, |d| {
                d.contains("RX-Bytes") || d.contains("rx.bytes")
            });
            assert!(families.contains("rdma_hw_rx_bytes_total"));
            assert_eq!(
                families.len(),
                3,
                "rdma_devices, rdma_port_info, one rx_bytes"
            );
        });
    }

    /// Legacy 64-bit files fill only the names the plain set lacks; an unreadable plain file
    /// counts as lacking.
    #[test]
    fn legacy_counters_fill_only_what_the_plain_ones_lack() {
        let port = Port {
            counters: crate::node::counters::Counters::new(
                vec!["port_rcv_data".into(), "port_xmit_data".into()].into(),
                vec![Some(10), None],
            ),
            counters_ext: vec![
                ("port_rcv_data_64".into(), 7),
                ("port_xmit_data_64".into(), 8),
                ("port_unicast_rcv_packets".into(), 9),
            ]
            .into(),
            ..port_one()
        };
        let (issues, lines) = with_node_metrics(port, |families, issues| {
            (issues.to_vec(), families.sample_lines())
        });
        assert!(issues.is_empty(), "{issues:?}");
        let counter =
            |name: &str| -> Vec<&String> { lines.iter().filter(|l| l.starts_with(name)).collect() };
        assert_eq!(
            counter("rdma_port_rcv_data_bytes_total").len(),
            1,
            "{lines:?}"
        );
        assert!(counter("rdma_port_rcv_data_bytes_total")[0].ends_with(" 40"));
        assert!(counter("rdma_port_xmit_data_bytes_total")[0].ends_with(" 32"));
        assert!(counter("rdma_port_unicast_rcv_packets_total")[0].ends_with(" 9"));
    }

    #[test]
    fn a_saturated_narrow_counter_is_flagged() {
        let flagged = |link_downed: u64| {
            let port = Port {
                counters: vec![
                    ("link_downed".into(), link_downed),
                    ("symbol_error".into(), 12),
                ]
                .into(),
                ..port_one()
            };
            with_node_metrics(port, |families, _| {
                families.contains("rdma_port_pma_saturated")
            })
        };
        assert!(flagged(255), "link_downed stuck at its 8-bit maximum");
        assert!(!flagged(254));
    }

    #[test]
    fn driver_statistics_are_typed_by_the_netdevs_driver() {
        let typed_pfc = |driver: &str| {
            let ethtool = vec![("rx_pfc_ena_frames_pri3".into(), 9)];
            with_node_metrics(
                ethernet_port("ens1f0np0", driver, ethtool),
                |families, _| families.contains("rdma_pfc_pause_frames_total"),
            )
        };
        assert!(typed_pfc("bnxt_en"), "Broadcom's PFC frames are typed");
        assert!(!typed_pfc("mlx5_core"), "an mlx5 netdev has no such name");
    }

    /// ionic's `frames_<dir>_pri_<p>` count PFC pause frames of priority `p` (their sum is the
    /// port's `frames_<dir>_pripause`), not traffic: the statistics as its driver names them.
    #[test]
    fn ionic_per_priority_frames_are_pfc_pause_frames() {
        let mut ethtool: Vec<(String, u64)> = Vec::new();
        for direction in ["rx", "tx"] {
            for priority in 0..8u64 {
                let frames = if priority == 3 { 1200 } else { 0 };
                ethtool.push((format!("frames_{direction}_pri_{priority}"), frames));
            }
            ethtool.push((format!("frames_{direction}_pripause"), 1200));
            ethtool.push((format!("{direction}_pripause_3_1us_count"), 5000));
        }
        let port = ethernet_port("enp9s0", "ionic", ethtool);
        let (pause_frames, priority_packets) = with_node_metrics(port, |families, _| {
            let pause_frames: Vec<(String, String, u64)> = families
                .samples()
                .filter(|(name, _, _)| *name == "rdma_pfc_pause_frames_total")
                .map(|(_, labels, value)| {
                    let label = |key: &str| {
                        labels
                            .iter()
                            .find(|(k, _)| *k == key)
                            .unwrap()
                            .1
                            .to_string()
                    };
                    let Value::U64(value) = value else {
                        panic!("{value:?}")
                    };
                    (label("priority"), label("direction"), value)
                })
                .filter(|(_, _, value)| *value > 0)
                .collect();
            (
                pause_frames,
                families.contains("rdma_priority_packets_total"),
            )
        });
        assert_eq!(
            pause_frames,
            [
                ("3".into(), "rx".into(), 1200),
                ("3".into(), "tx".into(), 1200)
            ]
        );
        assert!(!priority_packets);
    }

    #[test]
    fn port_counters_that_land_on_one_name_are_exported_once() {
        let port = Port {
            counters: vec![
                ("symbol_error".into(), 1),
                ("port_symbol_error".into(), 2),
                ("Symbol_Error".into(), 3),
                ("link_downed".into(), 4),
            ]
            .into(),
            ..port_one()
        };
        with_node_metrics(port, |families, issues| {
            assert_collisions(issues, 2, |d| d.contains("rdma_port_symbol_error"));
            assert_eq!(
                families.len(),
                4,
                "rdma_devices, rdma_port_info, one symbol_error, link_downed"
            );
        });
    }

    #[test]
    fn every_known_name_has_distinct_help() {
        for table in [PORT_COUNTER_HELP, HW_COUNTER_HELP] {
            let names: std::collections::HashSet<_> = table.iter().map(|(n, _)| n).collect();
            assert_eq!(names.len(), table.len());
        }
    }

    #[test]
    fn help_tables_are_sorted_and_every_name_is_found() {
        for table in [PORT_COUNTER_HELP, HW_COUNTER_HELP] {
            assert!(
                table.windows(2).all(|w| w[0].0 < w[1].0),
                "help_of searches a sorted table"
            );
            for (name, help) in table {
                assert_eq!(help_of(table, name), Some(*help));
            }
        }
        assert_eq!(help_of(PORT_COUNTER_HELP, "no_such_counter"), None);
    }
}
