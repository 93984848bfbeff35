//! The probe families, from a copy of the loop's [`Stats`]. Names in docs/metrics.md ("Probes").
//!
//! Per local port: 21 series (an info, up, leaving, sent and lost per path kind, the RTT
//! histogram, its own responder's answer delay), 168 for an 8-NIC node. Per target only for targets that lost a probe
//! lately, or for every target with `per_target` (small fabrics, the real-kernel tests).

use std::borrow::Cow;
use std::time::Instant;

use crate::exposition::{Families, HistogramValue, Label, Value};

use super::stats::{PortStats, Stats, KINDS, RTT_BUCKETS};
use super::transport::gid_text;

fn port_labels(port: &PortStats) -> [Label<'_>; 2] {
    [
        ("device", Cow::Borrowed(port.port.device.as_str())),
        ("port", Cow::Owned(port.port.port.to_string())),
    ]
}

/// Encodes `stats` into `families`; the answer delay is the mean of the 10 seconds up to now.
/// `leaving`: the agent has been asked to stop ([`super::collector::ProbeCollector::leave`]).
pub fn encode<'s>(stats: &'s Stats, per_target: bool, leaving: bool, families: &mut Families<'s>) {
    encode_at(stats, per_target, leaving, Instant::now(), families);
}

/// [`encode`] with the answer delay's window ending at `now`.
pub(crate) fn encode_at<'s>(
    stats: &'s Stats,
    per_target: bool,
    leaving: bool,
    now: Instant,
    families: &mut Families<'s>,
) {
    for port in &stats.ports {
        let labels = port_labels(port);
        families.info(
            "rdma_probe_port_info",
            "A local RDMA port that answers and sends probes: its network device (empty when unknown), its rail, the GID and QPN it answers on, where completion times come from (hardware: the NIC's completion timestamps; software: the host's monotonic clock), how they become nanoseconds (timestamps: cycles of the NIC's free-running clock, the NIC's wall clock, or software), and the GRH traffic class its probes and answers ride (DSCP x 4).",
            labels.iter().cloned().chain([
                ("netdev", Cow::Borrowed(port.netdev.as_str())),
                ("rail", Cow::Owned(port.port.rail.to_string())),
                ("gid", Cow::Owned(gid_text::format(&port.address.gid))),
                ("qpn", Cow::Owned(port.address.qpn.to_string())),
                ("clock", Cow::Borrowed(port.clock.as_str())),
                ("timestamps", Cow::Borrowed(port.timestamps.as_str())),
                ("traffic_class", Cow::Owned(port.traffic_class.to_string())),
            ]),
        );
        families.gauge(
            "rdma_probe_up",
            "1 while the port probes; 0 once its device is gone (removed, rdma link delete, driver unloaded).",
            labels.clone(),
            Value::U64(u64::from(!port.gone)),
        );
        // Per port, as rdma_probe_up, so that the localizer reads both with one join.
        families.gauge(
            "rdma_probe_leaving",
            "1 once the agent has been asked to stop (SIGTERM, a rolling restart): the localizer reads it so that the silence that follows is not called a host down; 0 otherwise.",
            labels.clone(),
            Value::U64(u64::from(leaving)),
        );
        for (i, kind) in KINDS.iter().enumerate() {
            let with_path = || {
                labels
                    .iter()
                    .cloned()
                    .chain([("path", Cow::Borrowed(kind.as_str()))])
            };
            families.counter(
                "rdma_probe_sent_total",
                "Probes this port sent, by path kind (host: the host's other ports; rail: the same rail's ports on other hosts; cross_rail: other rails' ports on other hosts).",
                with_path(),
                Value::U64(port.sent[i]),
            );
            families.counter(
                "rdma_probe_lost_total",
                "Probes this port sent that got no answer within the timeout, by path kind.",
                with_path(),
                Value::U64(port.lost[i]),
            );
            // Only once there are some, as the dropped packets' reasons: a restart is rare.
            if port.restart_unanswered[i] > 0 {
                families.counter(
                    "rdma_probe_restart_unanswered_total",
                    "Probes this port sent that got no answer because their target's agent was restarting (it went wholly silent and came back as a new start or at a new QPN) or left the peer set, by path kind: not counted in rdma_probe_lost_total, nor in localization.",
                    with_path(),
                    Value::U64(port.restart_unanswered[i]),
                );
            }
        }
        let h = &port.network_rtt;
        let mut buckets: Vec<(f64, u64)> = RTT_BUCKETS
            .iter()
            .copied()
            .zip(h.buckets.iter().copied())
            .collect();
        buckets.push((f64::INFINITY, h.buckets[RTT_BUCKETS.len()]));
        families.histogram(
            "rdma_probe_network_rtt_seconds",
            "Network round trip of this port's answered probes, the responder's own delay taken out (R-Pingmesh).",
            labels.clone(),
            HistogramValue {
                buckets,
                sum: h.sum,
                count: h.count,
            },
        );
        families.gauge(
            "rdma_probe_answer_delay_seconds",
            "Mean time this port's responder took from a probe's arrival to its answer's post, over the answers it sent in the last 10 seconds (0 when it sent none): the delay it writes into its answers, which the probers take out of the network RTT. Rising, it says a busy host, not the network.",
            labels.clone(),
            Value::F64(port.answer_delays.mean_seconds(now)),
        );
        for (reason, count) in port.dropped.iter().chain(&port.bad) {
            families.counter(
                "rdma_probe_invalid_packets_total",
                "Packets this port dropped: foreign or broken payloads, probes past the responder's rate bounds, answers to no probe in flight, answers with impossible times; by reason.",
                labels.iter().cloned().chain([("reason", Cow::Borrowed(*reason))]),
                Value::U64(*count),
            );
        }
        for ((endpoint, reason), count) in &port.resets {
            families.counter(
                "rdma_probe_resets_total",
                "Queue pairs of this port rebuilt after they entered the error state (reason qp_error: e.g. a message longer than the receive buffers after the MTU grew), by endpoint (responder: its new QPN is published at once; prober). A port that keeps answering after its resets was not silenced.",
                labels.iter().cloned().chain([
                    ("endpoint", Cow::Borrowed(*endpoint)),
                    ("reason", Cow::Borrowed(*reason)),
                ]),
                Value::U64(*count),
            );
        }
        for (reason, count) in &port.errors {
            families.counter(
                "rdma_probe_errors_total",
                "Verbs calls on this port that failed, by reason.",
                labels
                    .iter()
                    .cloned()
                    .chain([("reason", Cow::Borrowed(*reason))]),
                Value::U64(*count),
            );
        }
    }
    let targets: Vec<_> = if per_target {
        stats.all_targets().collect()
    } else {
        stats.losing_targets().collect()
    };
    for (path, counts) in targets {
        let from = &stats.ports[path.from];
        let labels = || {
            port_labels(from).into_iter().chain([
                ("path", Cow::Borrowed(path.kind.as_str())),
                ("target_host", Cow::Borrowed(path.to.host.as_str())),
                ("target_device", Cow::Borrowed(path.to.device.as_str())),
                ("target_port", Cow::Owned(path.to.port.to_string())),
            ])
        };
        families.counter(
            "rdma_probe_target_sent_total",
            "Probes sent to one target port; served for targets that lost a probe in the last 10 minutes (every target with per_target).",
            labels(),
            Value::U64(counts.sent),
        );
        families.counter(
            "rdma_probe_target_lost_total",
            "Probes to one target port that got no answer within the timeout.",
            labels(),
            Value::U64(counts.lost),
        );
        families.counter(
            "rdma_probe_target_answered_total",
            "Probes to one target port that were answered.",
            labels(),
            Value::U64(counts.answered),
        );
        families.counter(
            "rdma_probe_target_network_rtt_seconds_total",
            "Sum of the network round trips of the answered probes to one target port; divided by rdma_probe_target_answered_total, the path's mean RTT.",
            labels(),
            Value::F64(counts.rtt_sum_ns as f64 / 1e9),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::rtt::{Clock, RoundTrip, Timestamps};
    use crate::probe::stats::{PathKey, PortIdentity};
    use crate::probe::targets::{PathKind, Port};
    use crate::probe::transport::Address;

    fn port(n: u32) -> Port {
        Port {
            host: "gpu-01".into(),
            device: format!("mlx5_{n}"),
            port: 1,
            rail: n,
            leaf: None,
        }
    }

    fn eight_ports() -> Stats {
        Stats::new(
            (0..8)
                .map(|n| {
                    let address = Address {
                        gid: [n as u8; 16],
                        qpn: 100 + n,
                        qkey: 1,
                        lid: None,
                    };
                    PortIdentity {
                        port: port(n),
                        netdev: format!("ens{}f0np0", n + 1),
                        traffic_class: 104,
                        address,
                        clock: Clock::Software,
                        timestamps: Timestamps::Software,
                    }
                })
                .collect(),
        )
    }

    /// Series as a scraper counts them: the lines of the text format that are not comments.
    fn count(stats: &Stats, per_target: bool) -> usize {
        let mut families = Families::default();
        encode(stats, per_target, false, &mut families);
        let text = families.text(crate::exposition::Format::PrometheusText);
        text.lines().filter(|l| !l.starts_with('#')).count()
    }

    #[test]
    fn an_eight_nic_node_costs_168_series_and_targets_only_when_they_lose() {
        let mut stats = eight_ports();
        let path = |to: u32| PathKey {
            from: 0,
            kind: PathKind::Host,
            to: port(to),
        };
        for to in 1..8 {
            stats.sent(&path(to), 0);
            stats.answered(
                &path(to),
                RoundTrip {
                    network_ns: 20_000,
                    responder_delay_ns: 5_000,
                    prober_delay_ns: 0,
                },
            );
        }
        assert_eq!(count(&stats, false), 168);
        assert_eq!(count(&stats, true), 168 + 7 * 4);
        stats.sent(&path(3), 500);
        stats.lost(&path(3), 1_000);
        assert_eq!(count(&stats, false), 168 + 4);
        let mut families = Families::default();
        encode(&stats, false, false, &mut families);
        let lost: Vec<_> = families
            .samples()
            .filter(|(name, _, _)| *name == "rdma_probe_target_lost_total")
            .collect();
        assert_eq!(lost.len(), 1);
        assert!(lost[0]
            .1
            .iter()
            .any(|(k, v)| *k == "target_device" && v == "mlx5_3"));
        // The first port's histogram holds the seven answers, all in the 25 µs bucket.
        let rtt = &stats.ports[0].network_rtt;
        assert_eq!((rtt.count, rtt.buckets[2]), (7, 7));
    }

    /// The answer delay is this port's responder's own, over its answers of the last 10 s;
    /// the info names the port's netdev.
    #[test]
    fn the_answer_delay_is_the_responders_own_and_the_info_names_the_netdev() {
        let mut stats = eight_ports();
        stats.answer_sent(2, 20_000_000);
        stats.answer_sent(2, 22_000_000);
        stats.answer_sent(5, 4_000);
        let gauges = |now: Instant| -> Vec<f64> {
            let mut families = Families::default();
            encode_at(&stats, false, false, now, &mut families);
            families
                .samples()
                .filter(|(name, _, _)| *name == "rdma_probe_answer_delay_seconds")
                .map(|(_, _, value)| match value {
                    Value::F64(v) => v,
                    Value::U64(v) => v as f64,
                })
                .collect()
        };
        let now = gauges(Instant::now());
        assert_eq!(now.len(), 8);
        assert!((now[2] - 0.021).abs() < 1e-9, "{now:?}");
        assert!((now[5] - 4e-6).abs() < 1e-12, "{now:?}");
        assert_eq!(now[0], 0.0);
        let later = gauges(Instant::now() + std::time::Duration::from_secs(11));
        assert_eq!(later, vec![0.0; 8]);
        let mut families = Families::default();
        encode(&stats, false, false, &mut families);
        let netdevs: Vec<String> = families
            .samples()
            .filter(|(name, _, _)| *name == "rdma_probe_port_info")
            .filter_map(|(_, labels, _)| {
                labels
                    .iter()
                    .find(|(k, _)| *k == "netdev")
                    .map(|(_, v)| v.to_string())
            })
            .collect();
        assert_eq!(netdevs.len(), 8);
        assert_eq!(netdevs[3], "ens4f0np0");
    }

    /// Every port says whether the agent is leaving, 0 while it runs and 1 once told to stop.
    #[test]
    fn every_port_says_whether_the_agent_is_leaving() {
        let stats = eight_ports();
        let leaving = |leaving: bool| -> Vec<u64> {
            let mut families = Families::default();
            encode(&stats, false, leaving, &mut families);
            families
                .samples()
                .filter(|(name, _, _)| *name == "rdma_probe_leaving")
                .map(|(_, labels, value)| {
                    assert_eq!(labels.len(), 2, "{labels:?}");
                    match value {
                        Value::U64(v) => v,
                        Value::F64(v) => v as u64,
                    }
                })
                .collect()
        };
        assert_eq!(leaving(false), vec![0; 8]);
        assert_eq!(leaving(true), vec![1; 8]);
    }

    /// The info says which traffic class each port probes on.
    #[test]
    fn the_info_names_the_class_a_port_probes_on() {
        let mut stats = eight_ports();
        stats.ports[1].traffic_class = 96;
        let mut families = Families::default();
        encode(&stats, false, false, &mut families);
        let classes: Vec<String> = families
            .samples()
            .filter(|(name, _, _)| *name == "rdma_probe_port_info")
            .filter_map(|(_, labels, _)| {
                labels
                    .iter()
                    .find(|(k, _)| *k == "traffic_class")
                    .map(|(_, v)| v.to_string())
            })
            .collect();
        assert_eq!(classes[..3], ["104", "96", "104"]);
    }

    /// The info says how each port's completion times become nanoseconds.
    #[test]
    fn the_info_names_the_timestamp_conversion_a_port_uses() {
        let mut stats = eight_ports();
        stats.ports[0].timestamps = Timestamps::Cycles;
        stats.ports[1].timestamps = Timestamps::Wallclock;
        let mut families = Families::default();
        encode(&stats, false, false, &mut families);
        let conversions: Vec<String> = families
            .samples()
            .filter(|(name, _, _)| *name == "rdma_probe_port_info")
            .filter_map(|(_, labels, _)| {
                labels
                    .iter()
                    .find(|(k, _)| *k == "timestamps")
                    .map(|(_, v)| v.to_string())
            })
            .collect();
        assert_eq!(conversions[..3], ["cycles", "wallclock", "software"]);
    }
}
