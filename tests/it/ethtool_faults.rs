//! Driver statistics that cannot be read cost only that netdev's PFC/ECN series.

use crate::common;

use common::*;

#[test]
fn garbage_and_missing_stats_files_are_counted_and_skipped() {
    let stats = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce/ethtool"), stats.path());
    // mlx5_0's netdev answers garbage, mlx5_1's has vanished from this network namespace.
    std::fs::write(
        stats.path().join("ens1f0np0.txt"),
        "NIC statistics:\n rx_prio3_pause: lots\n",
    )
    .unwrap();
    std::fs::remove_file(stats.path().join("ens2f0np0.txt")).unwrap();
    let sys = fixture("cx7-roce/sys");
    let exporter = Exporter::start(&[
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.stats-dir",
        path_str(stats.path()),
    ]);
    let body = exporter.metrics();
    let samples = parse_exposition(&body);
    let errors = |device: &str, reason: &str| {
        value_of(
            &samples,
            "rdma_exporter_read_errors_total",
            &[("device", device), ("reason", reason)],
        )
    };
    assert_eq!(errors("mlx5_0", "ethtool_parse"), Some(1.0));
    assert_eq!(errors("mlx5_1", "ethtool_no_device"), Some(1.0));
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "ethtool")]
        ),
        Some(0.0)
    );
    // Their PFC series are gone; the sysfs series of the same ports and other netdevs remain.
    for device in ["mlx5_0", "mlx5_1"] {
        assert!(!samples
            .iter()
            .any(|s| s.name.starts_with("rdma_pfc") && s.labels["device"] == device));
        assert!(value_of(&samples, "rdma_hw_np_cnp_sent_total", &[("device", device)]).is_some());
    }
    assert!(value_of(
        &samples,
        "rdma_pfc_pause_frames_total",
        &[("device", "mlx5_2"), ("priority", "3"), ("direction", "rx")]
    )
    .is_some());
    promtool_check_metrics(&body);
    // The landing page names the failure in words.
    let page = exporter.get("/").2;
    assert!(
        page.contains("ethtool_parse") && page.contains("ens1f0np0"),
        "landing page"
    );
}

#[test]
fn a_stats_file_that_is_a_device_or_a_fifo_costs_only_its_netdev() {
    let stats = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce/ethtool"), stats.path());
    // mlx5_0's file links to an endless device, mlx5_1's is a FIFO no one writes: read
    // without a bound or with a blocking open, either would stop the scrape for good.
    let zero = stats.path().join("ens1f0np0.txt");
    std::fs::remove_file(&zero).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let fifo = stats.path().join("ens2f0np0.txt");
    std::fs::remove_file(&fifo).unwrap();
    let name = std::ffi::CString::new(path_str(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let exporter = Exporter::start(&[
        "--path.sysfs",
        path_str(&fixture("cx7-roce/sys")),
        "--collector.ethtool.stats-dir",
        path_str(stats.path()),
    ]);
    let samples = parse_exposition(&exporter.metrics());
    for device in ["mlx5_0", "mlx5_1"] {
        assert_eq!(
            value_of(
                &samples,
                "rdma_exporter_read_errors_total",
                &[("device", device), ("reason", "ethtool_io")]
            ),
            Some(1.0),
            "{device}"
        );
    }
    assert!(value_of(
        &samples,
        "rdma_pfc_pause_frames_total",
        &[("device", "mlx5_2"), ("priority", "3"), ("direction", "rx")]
    )
    .is_some());
    // And the next scrape is answered too.
    assert_eq!(exporter.get("/metrics").0, 200);
}

/// An SR-IOV VF whose netdev was moved into a pod: its RDMA device is still in the host's
/// `/sys/class/infiniband` (shared RDMA netns mode), its netdev in neither the host's
/// `class/net` nor this namespace. Its statistics are the pod's; that costs no read error and
/// fails neither the ethtool collector nor the storm sampler, and the port says where its
/// netdev is. It was an `ethtool_no_device` error at every scrape (`RdmaCollectorFailing`).
#[test]
fn a_netdev_in_another_namespace_is_no_read_error() {
    let sys = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce/sys"), sys.path());
    std::fs::remove_file(sys.path().join("class/net/ens2f0np0")).unwrap();
    let stats = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce/ethtool"), stats.path());
    std::fs::remove_file(stats.path().join("ens2f0np0.txt")).unwrap();
    let exporter = Exporter::start(&[
        "--path.sysfs",
        path_str(sys.path()),
        "--collector.ethtool.stats-dir",
        path_str(stats.path()),
        "--collector.pfc_storm.period",
        "50ms",
    ]);
    // The storm sampler's first rounds, then a scrape that reports them.
    exporter.metrics();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let body = exporter.metrics();
    let samples = parse_exposition(&body);
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "rdma_exporter_read_errors_total"
                && s.labels.get("device").map(String::as_str) == Some("mlx5_1")),
        "no read error for mlx5_1"
    );
    for collector in ["ethtool", "pfc_storm"] {
        assert_eq!(
            value_of(
                &samples,
                "rdma_exporter_collector_success",
                &[("collector", collector)]
            ),
            Some(1.0),
            "{collector}"
        );
    }
    assert_eq!(
        value_of(
            &samples,
            "rdma_port_netdev_in_other_netns",
            &[("device", "mlx5_1"), ("port", "1"), ("netdev", "ens2f0np0")]
        ),
        Some(1.0)
    );
    assert_eq!(
        samples
            .iter()
            .filter(|s| s.name == "rdma_port_netdev_in_other_netns")
            .count(),
        1,
        "only the moved netdev"
    );
    assert!(value_of(
        &samples,
        "rdma_hw_np_cnp_sent_total",
        &[("device", "mlx5_1")]
    )
    .is_some());
    promtool_check_metrics(&body);
}
