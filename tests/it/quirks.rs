//! Bad input: every quirk of a real sysfs costs only the value concerned, is counted by reason,
//! and the scrape still succeeds with everything else.

use crate::common;

use common::*;

fn scrape_quirks() -> Vec<Sample> {
    let exporter = Exporter::on_sysfs(&fixture("quirks/sys"), &[]);
    let body = exporter.metrics();
    assert_eq!(promtool_check_metrics(&body), "", "promtool warnings");
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
    // Missing counters/ and hw_counters/ are counted, the port identity is still served.
    assert_eq!(errors(&samples, "qrk_nodirs0", "missing_dir"), 2.0);
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
    assert_eq!(promtool_check_metrics(&body), "");
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
