//! Bad input: every quirk of a real sysfs costs only the value concerned, is counted by reason,
//! and the scrape still succeeds with everything else.

use crate::common;

use common::*;

fn scrape_quirks() -> Vec<Sample> {
    let exporter = Exporter::on_sysfs(&fixture("quirks/sys"), &[]);
    let body = exporter.metrics();
    promtool_check_metrics(&body);
    parse_exposition(&body)
}

fn errors(samples: &[Sample], device: &str, reason: &str) -> f64 {
    value_of(
        samples,
        "rdma_exporter_read_errors_total",
        &[("device", device), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

#[test]
fn each_bad_value_is_skipped_and_counted() {
    let samples = scrape_quirks();
    let port = [("device", "qrk_pma0"), ("port", "1")];
    // Good values next to bad ones are all there, with units converted.
    for (name, expected) in [
        ("rdma_port_xmit_packets_total", 12345.0),
        ("rdma_port_rcv_data_bytes_total", 4000.0),
        ("rdma_port_vl15_dropped_total", u64::MAX as f64),
    ] {
        assert_eq!(value_of(&samples, name, &port), Some(expected), "{name}");
    }
    // The bad ones are absent, not zero.
    for missing in [
        "rdma_port_symbol_error_total",
        "rdma_port_link_downed_total",
        "rdma_port_rcv_errors_total",
        "rdma_port_xmit_discards_total",
        "rdma_port_rcv_packets_total",
        "rdma_port_xmit_wait_total",
        "rdma_port_xmit_data_bytes_total",
    ] {
        assert_eq!(value_of(&samples, missing, &port), None, "{missing}");
    }
    for (reason, count) in [
        ("not_available", 1.0),
        ("empty", 1.0),
        ("parse", 1.0),
        ("not_utf8", 1.0),
        ("overflow", 1.0),
        ("not_a_file", 1.0),
        ("dangling_symlink", 1.0),
    ] {
        assert_eq!(errors(&samples, "qrk_pma0", reason), count, "{reason}");
    }
}

#[test]
fn unknown_hw_counters_pass_through() {
    let samples = scrape_quirks();
    let port = [("device", "qrk_pma0"), ("port", "1")];
    for (name, expected) in [
        ("rdma_hw_out_of_sequence_total", 5.0),
        ("rdma_hw_vport_rx_write_requests_total", 7.0),
        ("rdma_hw_sdmaidint1_32_total", 9.0),
        ("rdma_hw_brand_new_count_total", 3.0),
        ("rdma_hw_lifespan_seconds", 0.01),
    ] {
        assert_eq!(value_of(&samples, name, &port), Some(expected), "{name}");
    }
}

#[test]
fn vanished_device_missing_dirs_and_bad_attributes() {
    let samples = scrape_quirks();
    // The dangling class symlink is one error for the device, and no series.
    assert_eq!(errors(&samples, "qrk_gone0", "dangling_symlink"), 1.0);
    assert!(!samples
        .iter()
        .any(
            |s| s.labels.get("device").map(String::as_str) == Some("qrk_gone0")
                && s.name != "rdma_exporter_read_errors_total"
        ));
    // A port without counters/ and hw_counters/ is no error: which directories a port has
    // depends on its driver. Its identity is served.
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "rdma_exporter_read_errors_total"
                && s.labels.get("device").map(String::as_str) == Some("qrk_nodirs0")),
        "qrk_nodirs0 has read errors"
    );
    let nodirs = [("device", "qrk_nodirs0"), ("port", "1")];
    assert_eq!(value_of(&samples, "rdma_port_state", &nodirs), Some(1.0));
    assert_eq!(
        value_of(&samples, "rdma_port_phys_state", &nodirs),
        Some(3.0)
    );
    // A bad rate and a bad state skip those gauges only.
    let bad = [("device", "qrk_badrate0"), ("port", "1")];
    assert_eq!(errors(&samples, "qrk_badrate0", "parse"), 2.0);
    assert_eq!(
        value_of(&samples, "rdma_port_rate_bytes_per_second", &bad),
        None
    );
    assert_eq!(value_of(&samples, "rdma_port_state", &bad), None);
    assert_eq!(
        value_of(&samples, "rdma_port_symbol_error_total", &bad),
        Some(42.0)
    );
    // A stray blank line after link_layer is tolerated.
    assert!(samples.iter().any(|s| s.name == "rdma_port_info"
        && s.labels["device"] == "qrk_badrate0"
        && s.labels["link_layer"] == "Ethernet"));
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(3.0));
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "sysfs")]
        ),
        Some(1.0)
    );
}

#[test]
fn errors_accumulate_across_scrapes() {
    let exporter = Exporter::on_sysfs(&fixture("quirks/sys"), &[]);
    exporter.metrics();
    let second = parse_exposition(&exporter.metrics());
    assert_eq!(errors(&second, "qrk_pma0", "not_available"), 2.0);
}

#[test]
fn no_infiniband_class_serves_self_metrics() {
    let empty = tempfile::tempdir().unwrap();
    let exporter = Exporter::start(&["--path.sysfs", path_str(empty.path())]);
    let body = exporter.metrics();
    let samples = parse_exposition(&body);
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(0.0));
    assert!(samples.iter().any(|s| s.name == "rdma_exporter_build_info"));
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "sysfs")]
        ),
        Some(1.0)
    );
    promtool_check_metrics(&body);
    // Still alive on the next scrape.
    exporter.metrics();
}

#[test]
fn a_fifo_where_a_counter_should_be_does_not_hang_the_scrape() {
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("quirks/sys"), tree.path());
    let fifo = tree
        .path()
        .join("class/infiniband/qrk_badrate0/ports/1/counters/port_rcv_errors");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let exporter = Exporter::on_sysfs(tree.path(), &[]);
    let (status, _, body) = get_with(
        &exporter.url("/metrics"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "5")],
    );
    assert_eq!(status, 200, "{body}");
    assert_no_duplicate_series(&body);
    let samples = parse_exposition(&body);
    let port = [("device", "qrk_badrate0"), ("port", "1")];
    assert_eq!(
        value_of(&samples, "rdma_port_rcv_errors_total", &port),
        None
    );
    assert_eq!(
        value_of(&samples, "rdma_port_symbol_error_total", &port),
        Some(42.0)
    );
    assert_eq!(errors(&samples, "qrk_badrate0", "empty"), 1.0);
}

/// Writes `files` (path below `root`, content) and the symlinks `links` (path, target).
fn write_files(root: &std::path::Path, files: &[(&str, &str)], links: &[(&str, &str)]) {
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    for (path, target) in links {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }
}

/// A soft-RoCE (rxe) device as the kernel lays it out: no PMA, so no `ports/1/counters/`; its
/// statistics in `ports/1/hw_counters/` (drivers/infiniband/sw/rxe/rxe_hw_counters.c); an empty
/// `fw_ver` (the core prints an empty line for a driver without `get_dev_fw_str`); no
/// `hca_type` or `board_id` (those are mlx5's own attributes). A healthy host: no read error.
#[test]
fn a_soft_roce_device_is_healthy_without_counters_dir_and_firmware() {
    let dir = tempfile::tempdir().unwrap();
    let device = "devices/virtual/infiniband/rxe0";
    let port = format!("{device}/ports/1");
    let hw = |name: &str| format!("{port}/hw_counters/{name}");
    let hw_names = [
        ("sent_pkts", "1200"),
        ("rcvd_pkts", "1100"),
        ("duplicate_request", "3"),
        ("out_of_seq_request", "0"),
        ("rcvd_rnr_err", "0"),
        ("send_rnr_err", "0"),
        ("rcvd_seq_err", "7"),
        ("ack_deferred", "0"),
        ("retry_exceeded_err", "0"),
        ("retry_rnr_exceeded_err", "0"),
        ("completer_retry_err", "5"),
        ("send_err", "0"),
        ("link_downed", "0"),
        ("rdma_sends", "40"),
        ("rdma_recvs", "40"),
        ("lifespan", "10"),
    ];
    let mut files: Vec<(String, String)> = vec![
        (format!("{device}/fw_ver"), "\n".into()),
        (
            format!("{device}/node_guid"),
            "5a6f:45ff:fe12:3401\n".into(),
        ),
        (format!("{device}/node_type"), "1: CA\n".into()),
        (format!("{device}/parent"), "v0\n".into()),
        (format!("{port}/link_layer"), "Ethernet\n".into()),
        (format!("{port}/state"), "4: ACTIVE\n".into()),
        (format!("{port}/phys_state"), "5: LinkUp\n".into()),
        (format!("{port}/rate"), "10 Gb/sec (1X QDR)\n".into()),
        (format!("{port}/lid"), "0x0\n".into()),
        (format!("{port}/gid_attrs/ndevs/0"), "v0\n".into()),
    ];
    files.extend(hw_names.iter().map(|(n, v)| (hw(n), format!("{v}\n"))));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let link_target = format!("../../{device}");
    write_files(
        dir.path(),
        &files,
        &[("class/infiniband/rxe0", link_target.as_str())],
    );

    let exporter = Exporter::on_sysfs(dir.path(), &[]);
    let body = exporter.metrics();
    promtool_check_metrics(&body);
    let samples = parse_exposition(&body);
    let read_errors: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "rdma_exporter_read_errors_total")
        .collect();
    assert!(read_errors.is_empty(), "{read_errors:?}");
    let info = samples
        .iter()
        .find(|s| s.name == "rdma_port_info")
        .expect("rdma_port_info");
    assert_eq!(info.labels["device"], "rxe0");
    assert_eq!(info.labels["netdev"], "v0");
    assert_eq!(info.labels["node_guid"], "5a6f:45ff:fe12:3401");
    for absent in ["fw_ver", "hca_type", "board_id"] {
        assert!(!info.labels.contains_key(absent), "{absent}: {info:?}");
    }
    let port = [("device", "rxe0"), ("port", "1")];
    for (name, value) in [
        ("rdma_hw_duplicate_request_total", 3.0),
        ("rdma_hw_rcvd_seq_err_total", 7.0),
        ("rdma_hw_completer_retry_err_total", 5.0),
        ("rdma_port_state", 4.0),
    ] {
        assert_eq!(value_of(&samples, name, &port), Some(value), "{name}");
    }
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "sysfs")]
        ),
        Some(1.0)
    );
}

/// A narrow PMA counter at its maximum is flagged by a series whose name promtool accepts (a
/// name holding `_counter_` is a type in the name).
#[test]
fn a_saturated_counter_is_flagged_in_a_clean_exposition() {
    use rdma_fabric_exporter::sim::sysfs_tree::{connectx7_node, write_tree};
    let dir = tempfile::tempdir().unwrap();
    let mut nics = connectx7_node(1, 7);
    for (name, value) in &mut nics[0].counters {
        if name == "link_downed" {
            *value = 255;
        }
    }
    write_tree(dir.path(), &nics).unwrap();
    let exporter = Exporter::on_sysfs(dir.path(), &[]);
    let body = exporter.metrics();
    promtool_check_metrics(&body);
    let samples = parse_exposition(&body);
    assert_eq!(
        value_of(
            &samples,
            "rdma_port_pma_saturated",
            &[
                ("device", nics[0].name.as_str()),
                ("port", "1"),
                ("counter", "link_downed")
            ]
        ),
        Some(1.0)
    );
}
