//! From a [`FabricScan`] to the `rdma_ib_*` families (names and units in docs/metrics.md):
//! every switch port's counters, each switch port's link (its far end, active width and speed)
//! and the gauges that compare active with enabled, and the scan's own figures.

use std::borrow::Cow;
use std::time::Duration;

use super::model::{FabricScan, IbNode, IbPort, NodeKind, QueryFailureReason};
use super::selection::Selection;
use super::source::ScanError;
use crate::exposition::{Families, Kind, Labels, Value};

/// One finished scan as the collector serves it.
#[derive(Debug, Default)]
pub struct ScanReading {
    /// `None` until the first scan ends.
    pub result: Option<Result<FabricScan, ScanError>>,
    /// Scans finished since the start, this one included.
    pub scans: u64,
    /// When this scan ended, seconds since the Unix epoch.
    pub finished_unix_s: f64,
    pub duration: Duration,
}

/// Data and packet counters: left out in errors-only mode, which keeps the error and congestion
/// counters (symbol errors, discards, PortXmitWait...) at a fraction of the series.
pub fn is_traffic_counter(ibta_name: &str) -> bool {
    ibta_name.ends_with("Data") || ibta_name.ends_with("Pkts")
}

fn port_labels<'a>(switch: &'a IbNode, port: &IbPort) -> Labels<'a> {
    vec![
        ("switch", Cow::Borrowed(switch.description.as_str())),
        ("switch_guid", Cow::Owned(switch.guid.to_string())),
        ("port", Cow::Owned(port.number.to_string())),
    ]
}

/// The families of one scan's switch ports: counters, links, widths and speeds, for the switches
/// `selection` keeps only, so that instances that split a fabric export each port once.
pub fn add_scan<'a>(
    families: &mut Families<'a>,
    scan: &'a FabricScan,
    errors_only: bool,
    selection: &Selection,
) {
    for switch in scan
        .switches()
        .filter(|s| selection.keeps_switch(s.guid, &s.description))
    {
        for port in &switch.ports {
            add_counters(families, switch, port, errors_only);
            add_link(families, switch, port);
        }
    }
}

fn add_counters<'a>(
    families: &mut Families<'a>,
    switch: &'a IbNode,
    port: &IbPort,
    errors_only: bool,
) {
    for (name, value) in &port.counters {
        if errors_only && is_traffic_counter(name) {
            continue;
        }
        let (stem, factor) = super::model::counter_metric_stem(name);
        let exposed = format!("{}{stem}_total", "rdma_ib_switch_port_");
        let added = families.add(
            &exposed,
            Kind::Counter,
            "Switch port counter from PortCounters/PortCountersExtended, as the subnet scan last read it (data counters in bytes; the narrow IBTA counters stop at their maximum).",
            port_labels(switch, port),
            Value::U64(value.saturating_mul(factor)),
        );
        if let Err(e) = added {
            tracing::debug!("InfiniBand counter {name}: {e}");
        }
    }
}

fn add_link<'a>(families: &mut Families<'a>, switch: &'a IbNode, port: &'a IbPort) {
    if let Some(remote) = &port.remote {
        let mut labels = port_labels(switch, port);
        labels.extend([
            ("remote", Cow::Borrowed(remote.description.as_str())),
            ("remote_guid", Cow::Owned(remote.guid.to_string())),
            ("remote_port", Cow::Owned(remote.port.to_string())),
            (
                "width",
                Cow::Owned(port.active_width.map(|w| w.to_string()).unwrap_or_default()),
            ),
            (
                "speed",
                Cow::Borrowed(port.active_speed.map(|s| s.as_label()).unwrap_or_default()),
            ),
        ]);
        families.info(
            "rdma_ib_link_info",
            "A switch port's link: the node and port at the far end, and the active width and speed.",
            labels,
        );
    }
    let lanes = |w: Option<super::model::LinkWidth>| w.map(|w| u64::from(w.0));
    let gbps = |s: Option<super::model::LinkSpeed>| s.map(|s| s.lane_bits_per_second() / 1e9);
    if let Some(v) = lanes(port.active_width) {
        families.gauge(
            "rdma_ib_link_width_active_lanes",
            "Lanes the switch port's link trained at (1X = 1, 4X = 4).",
            port_labels(switch, port),
            Value::U64(v),
        );
    }
    if let Some(v) = lanes(port.enabled_width) {
        families.gauge(
            "rdma_ib_link_width_enabled_lanes",
            "The widest width enabled on the switch port, in lanes: what the link should train at.",
            port_labels(switch, port),
            Value::U64(v),
        );
    }
    if let Some(v) = gbps(port.active_speed) {
        families.gauge(
            "rdma_ib_link_speed_active_gbps",
            "Data rate of one lane of the switch port's link at its active speed, in Gb/s (NDR = 100, HDR = 50).",
            port_labels(switch, port),
            Value::F64(v),
        );
    }
    if let Some(v) = gbps(port.enabled_speed) {
        families.gauge(
            "rdma_ib_link_speed_enabled_gbps",
            "Data rate of one lane at the fastest speed enabled on the switch port, in Gb/s.",
            port_labels(switch, port),
            Value::F64(v),
        );
    }
}

/// The scan's own figures; `fresh` is false when the served scan is older than it should be.
pub fn add_self(families: &mut Families<'_>, reading: &ScanReading, fresh: bool) {
    let Some(result) = &reading.result else {
        families.gauge(
            "rdma_ib_fabric_scan_success",
            "1 if the last subnet scan discovered the subnet (failed queries of single switches are in rdma_ib_fabric_query_failures) and is recent.",
            Vec::new(),
            Value::U64(0),
        );
        return;
    };
    families.gauge(
        "rdma_ib_fabric_scan_success",
        "1 if the last subnet scan discovered the subnet (failed queries of single switches are in rdma_ib_fabric_query_failures) and is recent.",
        Vec::new(),
        Value::U64(u64::from(result.is_ok() && fresh)),
    );
    families.gauge(
        "rdma_ib_fabric_scan_duration_seconds",
        "Duration of the last subnet scan in seconds.",
        Vec::new(),
        Value::F64(reading.duration.as_secs_f64()),
    );
    families.counter(
        "rdma_ib_fabric_scans_total",
        "Subnet scans finished since the start, failed ones included.",
        Vec::new(),
        Value::U64(reading.scans),
    );
    families.gauge(
        "rdma_ib_fabric_last_scan_timestamp_seconds",
        "When the last subnet scan ended, in seconds since the Unix epoch.",
        Vec::new(),
        Value::F64(reading.finished_unix_s),
    );
    let Ok(scan) = result else {
        return;
    };
    for kind in [NodeKind::Switch, NodeKind::Hca, NodeKind::Router] {
        families.gauge(
            "rdma_ib_fabric_nodes",
            "Nodes the last subnet scan found, by kind.",
            vec![("kind", Cow::Borrowed(kind.as_label()))],
            Value::U64(scan.nodes.iter().filter(|n| n.kind == kind).count() as u64),
        );
    }
    families.gauge(
        "rdma_ib_fabric_ports",
        "Switch ports the last subnet scan found.",
        Vec::new(),
        Value::U64(scan.switches().map(|s| s.ports.len() as u64).sum()),
    );
    for reason in QueryFailureReason::ALL {
        families.gauge(
            "rdma_ib_fabric_query_failures",
            "Queries of the last subnet scan that failed, by reason (a switch that did not answer is one; the other switches are served).",
            vec![("reason", Cow::Borrowed(reason.as_label()))],
            Value::U64(scan.failures.iter().filter(|f| f.reason == reason).count() as u64),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::model::{Guid, LinkSpeed, LinkWidth, RemoteEnd};
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[derive(Debug)]
    struct Encoded<'a>(std::sync::Mutex<Option<Families<'a>>>);

    fn text(scan: &FabricScan, errors_only: bool) -> String {
        let mut families = Families::default();
        add_scan(&mut families, scan, errors_only, &Selection::default());
        // Families borrow the scan: encode through a collector that owns a clone.
        let owned: Families<'static> = {
            let mut f = Families::default();
            for (name, labels, value) in families.samples() {
                let labels: Vec<_> = labels
                    .iter()
                    .map(|(k, v)| (*k, std::borrow::Cow::Owned(v.to_string())))
                    .collect();
                let kind = if name.ends_with("_total") {
                    Kind::Counter
                } else if name.ends_with("_info") {
                    Kind::Info
                } else {
                    Kind::Gauge
                };
                f.add(name, kind, "h", labels, value).unwrap();
            }
            f
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Encoded(std::sync::Mutex::new(Some(owned)))));
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    impl prometheus_client::collector::Collector for Encoded<'static> {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> std::fmt::Result {
            match self.0.lock().unwrap().take() {
                Some(f) => f.encode(&mut encoder),
                None => Ok(()),
            }
        }
    }

    fn scan(description: &str) -> FabricScan {
        let port = IbPort {
            number: 3,
            active_width: Some(LinkWidth(2)),
            enabled_width: Some(LinkWidth(4)),
            active_speed: Some(LinkSpeed::Hdr),
            enabled_speed: Some(LinkSpeed::Ndr),
            remote: Some(RemoteEnd {
                guid: Guid(0xb83f_d203_0029_1a46),
                port: 1,
                description: "gpu-07 mlx5_0".into(),
                kind: NodeKind::Hca,
            }),
            counters: [
                ("PortXmitData".to_owned(), 10),
                ("PortXmitWait".to_owned(), 7),
                ("SymbolErrorCounter".to_owned(), 2),
            ]
            .into_iter()
            .collect(),
            ..IbPort::default()
        };
        FabricScan {
            nodes: vec![IbNode {
                guid: Guid(0x0002_c903_00a1_b2c3),
                kind: NodeKind::Switch,
                description: description.into(),
                ports: vec![port],
            }],
            ..FabricScan::default()
        }
    }

    #[test]
    fn ports_become_counters_links_and_width_speed_gauges() {
        let out = text(&scan("MF0;leaf-01:MQM9700/U1"), false);
        let labels =
            r#"{switch="MF0;leaf-01:MQM9700/U1",switch_guid="0002:c903:00a1:b2c3",port="3"}"#;
        for line in [
            format!("rdma_ib_switch_port_xmit_data_bytes_total{labels} 40"),
            format!("rdma_ib_switch_port_xmit_wait_total{labels} 7"),
            format!("rdma_ib_link_width_active_lanes{labels} 2"),
            format!("rdma_ib_link_width_enabled_lanes{labels} 4"),
            format!("rdma_ib_link_speed_active_gbps{labels} 50.0"),
            format!("rdma_ib_link_speed_enabled_gbps{labels} 100.0"),
            r#"rdma_ib_link_info{switch="MF0;leaf-01:MQM9700/U1",switch_guid="0002:c903:00a1:b2c3",port="3",remote="gpu-07 mlx5_0",remote_guid="b83f:d203:0029:1a46",remote_port="1",width="2X",speed="HDR"} 1"#.to_owned(),
        ] {
            assert!(out.contains(&line), "{line} not in:\n{out}");
        }
        let errors_only = text(&scan("s"), true);
        assert!(!errors_only.contains("xmit_data"), "{errors_only}");
        assert!(errors_only.contains("rdma_ib_switch_port_symbol_error_total"));
    }

    #[test]
    fn hostile_descriptions_are_escaped() {
        let out = text(&scan("evil\"} 1\nrdma_fake 2 \\"), false);
        assert!(!out.lines().any(|l| l.starts_with("rdma_fake")), "{out}");
        assert!(
            out.contains(r#"switch="evil\"} 1\nrdma_fake 2 \\""#),
            "{out}"
        );
    }
}
