//! The probe families, from a copy of the loop's [`Stats`]. Names in docs/metrics.md ("Probes").
//!
//! Per local port: 20 series (an info, up, sent and lost per path kind, the RTT histogram, the
//! responders' delay), 160 for an 8-NIC node. Per target only for targets that lost a probe
//! lately, or for every target with `per_target` (small fabrics, the real-kernel tests).

use std::borrow::Cow;

use crate::exposition::{Families, HistogramValue, Label, Value};

use super::stats::{PortStats, Stats, KINDS, RTT_BUCKETS};
use super::transport::gid_text;

fn port_labels(port: &PortStats) -> [Label<'_>; 2] {
    [
        ("device", Cow::Borrowed(port.port.device.as_str())),
        ("port", Cow::Owned(port.port.port.to_string())),
    ]
}

/// Encodes `stats` into `families`.
pub fn encode<'s>(stats: &'s Stats, per_target: bool, families: &mut Families<'s>) {
    for port in &stats.ports {
        let labels = port_labels(port);
        families.info(
            "rdma_probe_port_info",
            "A local RDMA port that answers and sends probes: its rail, the GID and QPN it answers on, and where completion times come from (hardware: the NIC's completion timestamps; software: the host's monotonic clock).",
            labels.iter().cloned().chain([
                ("rail", Cow::Owned(port.port.rail.to_string())),
                ("gid", Cow::Owned(gid_text::format(&port.address.gid))),
                ("qpn", Cow::Owned(port.address.qpn.to_string())),
                ("clock", Cow::Borrowed(port.clock.as_str())),
            ]),
        );
        families.gauge(
            "rdma_probe_up",
            "1 while the port probes; 0 once its device is gone (removed, rdma link delete, driver unloaded).",
            labels.clone(),
            Value::U64(u64::from(!port.gone)),
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
        families.counter(
            "rdma_probe_responder_delay_seconds_total",
            "Sum of the delays the responders of this port's answered probes took between receiving a probe and answering it; divided by the RTT histogram's count, a rising mean says a busy host, not the network.",
            labels.clone(),
            Value::F64(port.responder_delay_sum),
        );
        for (reason, count) in port.dropped.iter().chain(&port.bad) {
            families.counter(
                "rdma_probe_invalid_packets_total",
                "Packets this port dropped: foreign or broken payloads, probes past the responder's rate bounds, answers to no probe in flight, answers with impossible times; by reason.",
                labels.iter().cloned().chain([("reason", Cow::Borrowed(*reason))]),
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
    use crate::probe::rtt::{Clock, RoundTrip};
    use crate::probe::stats::PathKey;
    use crate::probe::targets::{PathKind, Port};
    use crate::probe::transport::Address;

    fn port(n: u32) -> Port {
        Port {
            host: "gpu-01".into(),
            device: format!("mlx5_{n}"),
            port: 1,
            rail: n,
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
                    };
                    (port(n), address, Clock::Software)
                })
                .collect(),
        )
    }

    /// Series as a scraper counts them: the lines of the text format that are not comments.
    fn count(stats: &Stats, per_target: bool) -> usize {
        #[derive(Debug)]
        struct Probe(Stats, bool);
        impl prometheus_client::collector::Collector for Probe {
            fn encode(
                &self,
                mut encoder: prometheus_client::encoding::DescriptorEncoder,
            ) -> std::fmt::Result {
                let mut families = Families::default();
                encode(&self.0, self.1, &mut families);
                families.encode(&mut encoder)
            }
        }
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Probe(stats.clone(), per_target)));
        let text = crate::exposition::Format::PrometheusText
            .encode(&registry)
            .unwrap();
        text.lines().filter(|l| !l.starts_with('#')).count()
    }

    #[test]
    fn an_eight_nic_node_costs_160_series_and_targets_only_when_they_lose() {
        let mut stats = eight_ports();
        let path = |to: u32| PathKey {
            from: 0,
            kind: PathKind::Host,
            to: port(to),
        };
        for to in 1..8 {
            stats.sent(&path(to));
            stats.answered(
                &path(to),
                RoundTrip {
                    network_ns: 20_000,
                    responder_delay_ns: 5_000,
                    prober_delay_ns: 0,
                },
            );
        }
        assert_eq!(count(&stats, false), 160);
        assert_eq!(count(&stats, true), 160 + 7 * 4);
        stats.sent(&path(3));
        stats.lost(&path(3), 1_000);
        assert_eq!(count(&stats, false), 160 + 4);
        let mut families = Families::default();
        encode(&stats, false, &mut families);
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
}
