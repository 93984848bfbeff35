//! Cross-check against node_exporter's own golden output for its public InfiniBand sysfs fixture
//! (provided beside the project in `../shared/fixtures/procfs-infiniband/node_exporter`, with
//! its licence and sources; `RFE_NODE_EXPORTER_FIXTURE` names another copy): every value
//! node_exporter reports must be the value we report, after the naming map below.

use std::path::PathBuf;

use crate::common;
use common::*;
use rdma_fabric_exporter::node::sysfs::{read_node, DeviceFilter};

/// node_exporter's fixture, `None` (skipped, or failed under CI) where it is not provided: a
/// test must never pass without comparing.
fn node_exporter_fixture() -> Option<PathBuf> {
    let dir = match std::env::var_os("RFE_NODE_EXPORTER_FIXTURE") {
        Some(dir) => project_root().join(dir),
        None => project_root().join("../shared/fixtures/procfs-infiniband/node_exporter"),
    };
    if dir.join("sys/class/infiniband").is_dir() && dir.join("expected").is_dir() {
        return Some(dir);
    }
    skip_or_fail(&format!(
        "{} is missing: node_exporter's fixture is provided beside the project in ../shared",
        dir.display()
    ));
    None
}

/// node_exporter name (without `node_infiniband_`) -> our name. Every node_exporter family must
/// be listed, so a family we do not map fails the test instead of being ignored.
const NAME_MAP: &[(&str, &str)] = &[
    (
        "excessive_buffer_overrun_errors_total",
        "rdma_port_excessive_buffer_overrun_errors_total",
    ),
    ("link_downed_total", "rdma_port_link_downed_total"),
    (
        "link_error_recovery_total",
        "rdma_port_link_error_recovery_total",
    ),
    (
        "local_link_integrity_errors_total",
        "rdma_port_local_link_integrity_errors_total",
    ),
    (
        "multicast_packets_received_total",
        "rdma_port_multicast_rcv_packets_total",
    ),
    (
        "multicast_packets_transmitted_total",
        "rdma_port_multicast_xmit_packets_total",
    ),
    ("physical_state_id", "rdma_port_phys_state"),
    (
        "port_constraint_errors_received_total",
        "rdma_port_rcv_constraint_errors_total",
    ),
    (
        "port_constraint_errors_transmitted_total",
        "rdma_port_xmit_constraint_errors_total",
    ),
    (
        "port_data_received_bytes_total",
        "rdma_port_rcv_data_bytes_total",
    ),
    (
        "port_data_transmitted_bytes_total",
        "rdma_port_xmit_data_bytes_total",
    ),
    (
        "port_discards_received_total",
        "rdma_port_rcv_discards_total",
    ),
    (
        "port_discards_transmitted_total",
        "rdma_port_xmit_discards_total",
    ),
    ("port_errors_received_total", "rdma_port_rcv_errors_total"),
    ("port_packets_received_total", "rdma_port_rcv_packets_total"),
    (
        "port_packets_transmitted_total",
        "rdma_port_xmit_packets_total",
    ),
    (
        "port_receive_remote_physical_errors_total",
        "rdma_port_rcv_remote_physical_errors_total",
    ),
    (
        "port_receive_switch_relay_errors_total",
        "rdma_port_rcv_switch_relay_errors_total",
    ),
    ("port_transmit_wait_total", "rdma_port_xmit_wait_total"),
    ("rate_bytes_per_second", "rdma_port_rate_bytes_per_second"),
    ("state_id", "rdma_port_state"),
    ("symbol_error_total", "rdma_port_symbol_error_total"),
    (
        "unicast_packets_received_total",
        "rdma_port_unicast_rcv_packets_total",
    ),
    (
        "unicast_packets_transmitted_total",
        "rdma_port_unicast_xmit_packets_total",
    ),
    ("vl15_dropped_total", "rdma_port_vl15_dropped_total"),
];

/// node_exporter's `legacy_*` families read `counters_ext/`; the file each one reads, and the
/// factor it applies.
const LEGACY_MAP: &[(&str, &str, f64)] = &[
    ("legacy_data_received_bytes_total", "port_rcv_data_64", 4.0),
    (
        "legacy_data_transmitted_bytes_total",
        "port_xmit_data_64",
        4.0,
    ),
    ("legacy_packets_received_total", "port_rcv_packets_64", 1.0),
    (
        "legacy_packets_transmitted_total",
        "port_xmit_packets_64",
        1.0,
    ),
    (
        "legacy_multicast_packets_received_total",
        "port_multicast_rcv_packets",
        1.0,
    ),
    (
        "legacy_multicast_packets_transmitted_total",
        "port_multicast_xmit_packets",
        1.0,
    ),
    (
        "legacy_unicast_packets_received_total",
        "port_unicast_rcv_packets",
        1.0,
    ),
    (
        "legacy_unicast_packets_transmitted_total",
        "port_unicast_xmit_packets",
        1.0,
    ),
];

#[test]
fn every_node_exporter_value_matches_ours() {
    let Some(dir) = node_exporter_fixture() else {
        return;
    };
    let golden =
        std::fs::read_to_string(dir.join("expected/e2e-output.node_infiniband.prom")).unwrap();
    let theirs = parse_exposition(&golden);
    let sysfs = dir.join("sys");
    let exporter = Exporter::on_sysfs(&sysfs, &[]);
    let ours = parse_exposition(&exporter.metrics());
    // Raw counters_ext values, to check the legacy families where the plain file wins.
    let snapshot = read_node(&sysfs, &DeviceFilter::default());

    let mut compared = 0;
    for sample in &theirs {
        let short = sample
            .name
            .strip_prefix("node_infiniband_")
            .expect(&sample.name);
        let device = sample.labels["device"].as_str();
        if short == "info" {
            let matches = ours.iter().filter(|s| {
                s.name == "rdma_port_info"
                    && s.labels["device"] == device
                    && s.labels["board_id"] == sample.labels["board_id"]
                    && s.labels["fw_ver"] == sample.labels["firmware_version"]
                    && s.labels["hca_type"] == sample.labels["hca_type"]
            });
            assert!(matches.count() >= 1, "no rdma_port_info matches {sample:?}");
            compared += 1;
            continue;
        }
        let port = sample.labels["port"].as_str();
        let labels = [("device", device), ("port", port)];
        if let Some((_, ours_name)) = NAME_MAP.iter().find(|(n, _)| *n == short) {
            let value = value_of(&ours, ours_name, &labels);
            assert_eq!(
                value,
                Some(sample.value),
                "{ours_name} {labels:?} vs {sample:?}"
            );
        } else if let Some((_, file, factor)) = LEGACY_MAP.iter().find(|(n, _, _)| *n == short) {
            let port = snapshot
                .devices
                .iter()
                .find(|d| d.name == device)
                .and_then(|d| d.ports.iter().find(|p| p.number.to_string() == port))
                .expect("port in snapshot");
            let raw = port
                .counters_ext
                .iter()
                .find(|(n, _)| n == file)
                .expect(file)
                .1;
            assert_eq!(raw as f64 * factor, sample.value, "{short} {labels:?}");
        } else {
            panic!("node_exporter family {short} has no mapping in this test");
        }
        compared += 1;
    }
    assert_eq!(compared, theirs.len());
    assert!(compared >= 50, "only {compared} values compared");
}
