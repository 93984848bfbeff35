//! Per-priority traffic of a port (bytes and frames per 802.1p priority) and the priorities
//! with PFC enabled, gathered over one read of its driver statistics and exported at the end.
//!
//! A priority gets series only when it carried a frame since the counters started, or has PFC
//! enabled: mlx5 lists all eight priorities, and eight mostly idle priorities of four counters
//! each would take an 8-NIC node over its series budget. The per-priority discard and ECN-mark
//! counters follow the same rule, and are kept wherever they are not zero (a discard is never
//! hidden). A counter only grows, so a priority that has series keeps them until the driver's
//! counters restart.

use std::borrow::Cow;

use super::ethtool_map::{Direction, TypedStat};
use crate::exposition::{Families, LabelBlock, Value};

/// `priority` label values.
const PRIORITIES: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];

/// One priority's traffic counters, as far as the driver has them.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    rx_bytes: Option<u64>,
    tx_bytes: Option<u64>,
    rx_packets: Option<u64>,
    tx_packets: Option<u64>,
}

impl Counters {
    fn carried_traffic(&self) -> bool {
        [
            self.rx_bytes,
            self.tx_bytes,
            self.rx_packets,
            self.tx_packets,
        ]
        .into_iter()
        .any(|v| v.is_some_and(|v| v > 0))
    }
}

/// The per-priority receive-side drop and mark families, in [`DROP_FAMILIES`] order.
#[derive(Debug, Clone, Copy)]
enum DropKind {
    Discards,
    BufferDiscards,
    CongestionDiscards,
    EcnMarked,
}

/// Name and help of each [`DropKind`]'s family.
const DROP_FAMILIES: [(&str, &str); 4] = [
    (
        "rdma_priority_discards_total",
        "Received packets discarded per priority for lack of receive buffers. Only priorities that carried traffic, have PFC enabled, or discarded.",
    ),
    (
        "rdma_priority_buffer_discards_total",
        "Received packets discarded per priority for lack of per-host receive buffer. Only priorities that carried traffic, have PFC enabled, or discarded.",
    ),
    (
        "rdma_priority_congestion_discards_total",
        "Received packets discarded per priority because of per-host congestion (WRED). Only priorities that carried traffic, have PFC enabled, or discarded.",
    ),
    (
        "rdma_priority_ecn_marked_packets_total",
        "Received packets ECN-marked by the NIC per priority because of per-host congestion. Only priorities that carried traffic, have PFC enabled, or were marked.",
    ),
];

/// What one port's statistics say per priority.
#[derive(Debug, Default)]
pub(crate) struct PriorityTraffic {
    counters: [Counters; 8],
    /// Per priority, the drop and mark counters by [`DropKind`].
    drops: [[Option<u64>; 4]; 8],
    /// A per-priority pause statistic was listed for the priority.
    pause_listed: [bool; 8],
}

impl PriorityTraffic {
    /// Takes note of a typed statistic; returns whether it was a traffic counter (which this
    /// collector exports, at [`PriorityTraffic::add_metrics`]).
    pub fn note(&mut self, stat: TypedStat, value: u64) -> bool {
        let slot = |p: u8| usize::from(p).min(7);
        match stat {
            TypedStat::PriorityBytes {
                priority,
                direction,
            } => {
                let c = &mut self.counters[slot(priority)];
                match direction {
                    Direction::Rx => c.rx_bytes = Some(value),
                    Direction::Tx => c.tx_bytes = Some(value),
                }
                true
            }
            TypedStat::PriorityPackets {
                priority,
                direction,
            } => {
                let c = &mut self.counters[slot(priority)];
                match direction {
                    Direction::Rx => c.rx_packets = Some(value),
                    Direction::Tx => c.tx_packets = Some(value),
                }
                true
            }
            TypedStat::PriorityDiscards { priority } => {
                self.note_drop(priority, DropKind::Discards, value)
            }
            TypedStat::PriorityBufferDiscards { priority } => {
                self.note_drop(priority, DropKind::BufferDiscards, value)
            }
            TypedStat::PriorityCongestionDiscards { priority } => {
                self.note_drop(priority, DropKind::CongestionDiscards, value)
            }
            TypedStat::PriorityEcnMarked { priority } => {
                self.note_drop(priority, DropKind::EcnMarked, value)
            }
            TypedStat::PfcPauseFrames { priority, .. }
            | TypedStat::PfcPauseDurationMicros { priority, .. }
            | TypedStat::PfcPauseTransitions { priority, .. } => {
                self.pause_listed[slot(priority)] = true;
                false
            }
            _ => false,
        }
    }

    /// The priorities whose congestion-control settings are worth a series
    /// (`ecn_settings`), a bit per priority: those with PFC enabled, the lossless ones RDMA is
    /// meant to run on; where the driver shows PFC on none (a lossy fabric, or a driver that
    /// does not tell), those that carried traffic. Narrower than the traffic series' rule (a
    /// lossless port also carries TCP and CNPs on other priorities): two settings series per
    /// priority, and the series budget allows about two per port.
    pub(crate) fn settings_priorities(&self, pfc_shown: bool) -> u8 {
        let mask =
            |keep: &dyn Fn(usize) -> bool| (0..8).filter(|&p| keep(p)).fold(0u8, |m, p| m | 1 << p);
        let pfc = mask(&|p| pfc_shown && self.pause_listed[p]);
        if pfc != 0 {
            return pfc;
        }
        mask(&|p| self.counters[p].carried_traffic())
    }

    fn note_drop(&mut self, priority: u8, kind: DropKind, value: u64) -> bool {
        self.drops[usize::from(priority).min(7)][kind as usize] = Some(value);
        true
    }

    /// Adds the per-priority series. `pfc_shown`: the driver lists pause statistics only for
    /// priorities with PFC enabled (mlx5), so a listed one means PFC is on there.
    /// The port's series, in `port` (its device, port and netdev labels).
    pub fn add_metrics(&self, families: &mut Families<'_>, port: LabelBlock, pfc_shown: bool) {
        for (priority, counters) in self.counters.iter().enumerate() {
            let pfc_enabled = pfc_shown && self.pause_listed[priority];
            let active = counters.carried_traffic() || pfc_enabled;
            let labels = |direction: Option<Direction>| {
                [("priority", Cow::Borrowed(PRIORITIES[priority]))]
                    .into_iter()
                    .chain(direction.map(|d| ("direction", Cow::Borrowed(d.as_label()))))
            };
            for ((name, help), value) in DROP_FAMILIES.iter().zip(self.drops[priority]) {
                match value {
                    Some(value) if active || value > 0 => {
                        families.counter_in(name, help, port, labels(None), Value::U64(value))
                    }
                    _ => {}
                }
            }
            if !active {
                continue;
            }
            let samples = [
                (counters.rx_bytes, Direction::Rx, true),
                (counters.tx_bytes, Direction::Tx, true),
                (counters.rx_packets, Direction::Rx, false),
                (counters.tx_packets, Direction::Tx, false),
            ];
            for (value, direction, bytes) in samples {
                let Some(value) = value else { continue };
                if bytes {
                    families.counter_in(
                        "rdma_priority_bytes_total",
                        "Octets of the frames of one 802.1p priority on the wire (the NIC's per-priority port counters); rx = received, tx = sent. Only priorities that carried traffic or have PFC enabled.",
                        port,
                        labels(Some(direction)),
                        Value::U64(value),
                    );
                } else {
                    families.counter_in(
                        "rdma_priority_packets_total",
                        "Frames of one 802.1p priority on the wire (the NIC's per-priority port counters); rx = received, tx = sent. Only priorities that carried traffic or have PFC enabled.",
                        port,
                        labels(Some(direction)),
                        Value::U64(value),
                    );
                }
            }
            if pfc_enabled {
                families.gauge_in(
                    "rdma_pfc_enabled",
                    "1 for each priority with PFC enabled (rx or tx), where the driver tells it (mlx5 lists pause statistics only for those priorities); no series: PFC off there, or not known.",
                    port,
                    labels(None),
                    Value::U64(1),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::ethtool::parse_ethtool_text;
    use crate::node::ethtool_map::{classify_for, pause_names_show_pfc};
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The per-priority series of a statistics listing of `driver`, as `name{priority,direction}
    /// value` lines (the port labels left out).
    fn exported(driver: &str, stats: &[(String, u64)]) -> BTreeSet<String> {
        let mut traffic = PriorityTraffic::default();
        for (name, value) in stats {
            if let Some(stat) = classify_for(Some(driver), name) {
                traffic.note(stat, *value);
            }
        }
        let mut families = Families::default();
        let port = families.block([]);
        traffic.add_metrics(&mut families, port, pause_names_show_pfc(Some(driver)));
        families.sample_lines().into_iter().collect()
    }

    #[test]
    fn idle_priorities_are_left_out_and_pfc_ones_kept() {
        let mut list = Vec::new();
        for p in 0..8 {
            let traffic = if p == 0 { 10 } else { 0 };
            list.push((format!("rx_prio{p}_bytes"), traffic));
            list.push((format!("tx_prio{p}_bytes"), traffic));
            list.push((format!("rx_prio{p}_packets"), traffic));
            list.push((format!("tx_prio{p}_packets"), traffic));
        }
        // PFC on 3, which carried nothing (the RoCE traffic runs on 0).
        list.push(("rx_prio3_pause".into(), 0));
        list.push(("tx_prio3_pause".into(), 0));
        let got = exported("mlx5_core", &list);
        let priorities: BTreeSet<&str> = got
            .iter()
            .filter_map(|l| l.split("priority=").nth(1))
            .map(|rest| &rest[..1])
            .collect();
        assert_eq!(priorities, BTreeSet::from(["0", "3"]), "{got:#?}");
        assert!(got.contains("rdma_pfc_enabled{priority=3} 1"), "{got:#?}");
        assert!(got.contains("rdma_priority_bytes_total{priority=3,direction=tx} 0"));
        assert!(got.contains("rdma_priority_bytes_total{priority=0,direction=tx} 10"));
        assert!(!got
            .iter()
            .any(|l| l.starts_with("rdma_pfc_enabled{priority=0")));
    }

    #[test]
    fn drops_follow_active_priorities_or_a_count() {
        let mut list = Vec::new();
        for p in 0..8 {
            let traffic = if p == 0 { 10 } else { 0 };
            list.push((format!("rx_prio{p}_bytes"), traffic));
            list.push((format!("rx_prio{p}_packets"), traffic));
            list.push((format!("rx_prio{p}_discards"), 0));
            list.push((format!("rx_prio{p}_marked"), 0));
        }
        // PFC on 3; an idle priority 5 that discarded all the same.
        list.push(("rx_prio3_pause".into(), 0));
        list.retain(|(name, _)| name != "rx_prio5_discards");
        list.push(("rx_prio5_discards".into(), 7));
        let got = exported("mlx5_core", &list);
        let drops: BTreeSet<&str> = got
            .iter()
            .filter(|l| l.starts_with("rdma_priority_discards_total"))
            .map(String::as_str)
            .collect();
        assert_eq!(
            drops,
            BTreeSet::from([
                "rdma_priority_discards_total{priority=0} 0",
                "rdma_priority_discards_total{priority=3} 0",
                "rdma_priority_discards_total{priority=5} 7",
            ]),
            "{got:#?}"
        );
        let marks = got
            .iter()
            .filter(|l| l.starts_with("rdma_priority_ecn_marked_packets_total"))
            .count();
        assert_eq!(marks, 2, "priorities 0 and 3: {got:#?}");
    }

    /// The priorities of `stats` (an mlx5 listing) whose ECN settings are exported.
    fn settings_priorities(stats: &[(String, u64)]) -> u8 {
        let mut traffic = PriorityTraffic::default();
        for (name, value) in stats {
            if let Some(stat) = classify_for(Some("mlx5_core"), name) {
                traffic.note(stat, *value);
            }
        }
        traffic.settings_priorities(true)
    }

    #[test]
    fn settings_priorities_are_the_pfc_ones_else_those_with_traffic() {
        let mut list: Vec<(String, u64)> = Vec::new();
        for p in 0..8 {
            let traffic = if [0, 3, 6].contains(&p) { 10 } else { 0 };
            list.push((format!("tx_prio{p}_bytes"), traffic));
        }
        assert_eq!(settings_priorities(&list), 0b0100_1001, "lossy: traffic");
        list.push(("rx_prio3_pause".into(), 0));
        assert_eq!(settings_priorities(&list), 0b0000_1000, "PFC on 3 only");
        assert_eq!(settings_priorities(&[]), 0, "no statistics: none");
    }

    #[test]
    fn pause_names_of_other_drivers_say_nothing_about_pfc() {
        // bnxt lists PFC frames for all eight priorities whatever PFC does.
        let list: Vec<(String, u64)> = (0..8)
            .map(|p| (format!("rx_pfc_ena_frames_pri{p}"), 0))
            .collect();
        assert!(exported("bnxt_en", &list).is_empty());
    }

    /// A corpus sample's expected per-priority series: `driver: <name>` then the lines.
    fn expected_of(sample: &Path, text: &str) -> (String, BTreeSet<String>) {
        let mut lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let driver = lines
            .next()
            .and_then(|l| l.strip_prefix("driver: "))
            .unwrap_or_else(|| {
                panic!(
                    "{}: the expectation's first line must be `driver: <name>`",
                    sample.display()
                )
            })
            .to_string();
        (driver, lines.map(str::to_string).collect())
    }

    /// Every real `ethtool -S` sample of the corpus kind `ethtool-priority` gives the
    /// per-priority series its expectation states.
    #[test]
    fn corpus_samples_give_their_expected_series() {
        for (sample, expectation) in crate::corpus::corpus("ethtool-priority").with_expected_files()
        {
            let (driver, expected) = expected_of(&sample, &expectation);
            let bytes = std::fs::read(&sample).unwrap();
            let stats = parse_ethtool_text(&sample, &bytes)
                .unwrap_or_else(|e| panic!("{}: {e}", sample.display()));
            assert!(
                stats.len() > 20,
                "{}: {} statistics",
                sample.display(),
                stats.len()
            );
            // The `.expected` files list the traffic and PFC series; the drop families follow
            // the same priorities (`drops_follow_active_priorities_or_a_count`).
            let traffic: BTreeSet<String> = exported(&driver, &stats)
                .into_iter()
                .filter(|l| !DROP_FAMILIES.iter().any(|(name, _)| l.starts_with(name)))
                .collect();
            assert_eq!(traffic, expected, "{}", sample.display());
        }
    }
}
