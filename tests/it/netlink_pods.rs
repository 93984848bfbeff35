//! The `netlink` and `pods` collectors through the real binary: on this machine's kernel (which
//! may have no RDMA netlink), on the demo's simulated hosts (the same collector code behind the
//! simulator's sources), and `serve` with pod attribution against a kubelet pod-resources API
//! served by this test, over the cx7 fixture tree.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{
    self, fixture, matching, parse_exposition, path_str, value_of, Exporter, Sample,
};
use rdma_fabric_exporter::sim::pod_resources_server::{pod, PodResourcesServer};

/// Whether this kernel answers NETLINK_RDMA sockets (ib_core loaded).
fn kernel_has_rdma_netlink() -> bool {
    // SAFETY: a plain socket(2) call; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 20) };
    if fd >= 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

fn cx7_exporter(extra: &[&str]) -> Exporter {
    let cx7 = fixture("cx7-roce");
    Exporter::on_node(&cx7.join("sys"), &cx7.join("ethtool"), extra)
}

fn success(samples: &[Sample], collector: &str) -> Option<f64> {
    value_of(
        samples,
        "rdma_exporter_collector_success",
        &[("collector", collector)],
    )
}

/// Polls `path` until `done` holds for its samples (the collectors read in the background).
fn wait_for(
    exporter: &Exporter,
    path: &str,
    what: &str,
    done: impl Fn(&[Sample]) -> bool,
) -> Vec<Sample> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, _, body) = exporter.get(path);
        assert_eq!(status, 200, "{body}");
        let samples = parse_exposition(&body);
        if done(&samples) {
            return samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}:\n{body}\n{}",
            exporter.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn without_rdma_netlink_the_collector_says_so_once_and_reports_failure() {
    let exporter = cx7_exporter(&[]);
    let samples = wait_for(&exporter, "/metrics?collect[]=netlink", "a reading", |s| {
        success(s, "netlink").is_some()
    });
    if kernel_has_rdma_netlink() {
        // A kernel with ib_core but (on a test machine) no RDMA device: nothing to count, and
        // the real devices are not those of the fixture.
        assert_eq!(success(&samples, "netlink"), Some(1.0), "{samples:?}");
        return;
    }
    assert_eq!(success(&samples, "netlink"), Some(0.0));
    assert!(
        samples
            .iter()
            .all(|s| !s.name.starts_with("rdma_qps")
                && s.name != "rdma_exporter_netlink_qps_truncated"),
        "nothing but the collector's own success: {samples:?}"
    );
    // More readings, one log line.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = exporter.metrics();
    let logs = exporter.logs();
    assert_eq!(
        logs.matches("no RDMA netlink (NETLINK_RDMA)").count(),
        1,
        "{logs}"
    );
    assert!(logs.contains("--no-collector.netlink"), "{logs}");
    // The rest of the scrape is whole.
    let all = parse_exposition(&exporter.metrics());
    assert_eq!(success(&all, "sysfs"), Some(1.0));

    let off = cx7_exporter(&["--no-collector.netlink"]);
    let (status, _, body) = off.get("/metrics?collect[]=netlink");
    assert_eq!(status, 400, "{body}");
    assert!(success(&parse_exposition(&off.metrics()), "netlink").is_none());
}

/// Per host of the demo: (device -> RC QPs) and the samples.
fn demo_host(demo: &Exporter, host: &str) -> Vec<Sample> {
    wait_for(
        demo,
        &format!("/hosts/{host}/metrics?collect[]=netlink&collect[]=pods"),
        "both collectors' first readings",
        |s| success(s, "netlink") == Some(1.0) && success(s, "pods") == Some(1.0),
    )
}

#[test]
fn the_demo_attributes_queue_pairs_and_devices_to_pods() {
    let _exclusive = common::exclusive(module_path!());
    let demo = Exporter::start_subcommand("demo", &["--scenario", "healthy"]);
    let samples = demo_host(&demo, "gpu-node-02");
    common::assert_no_duplicate_series(&demo.get("/hosts/gpu-node-02/metrics").2);

    // Every QP is counted once by state and once by owner, and the summary agrees.
    let per_device = |name: &str| -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == name) {
            *sums.entry(s.labels["device"].clone()).or_default() += s.value;
        }
        sums
    };
    let by_state = per_device("rdma_qps");
    assert_eq!(by_state.len(), 8, "{by_state:?}");
    assert_eq!(by_state, per_device("rdma_owner_qps"));
    for (device, qps) in &by_state {
        let summary = value_of(
            &samples,
            "rdma_device_resources",
            &[("device", device), ("resource", "qp")],
        );
        assert_eq!(summary, Some(*qps), "{device}");
    }

    // The training worker's RC QPs, named by pod through /proc/<pid>/cgroup and the pod logs.
    let rc = matching(
        &samples,
        "rdma_owner_qps",
        &[("device", "mlx5_0"), ("qp_type", "RC")],
    )
    .collect::<Vec<_>>();
    assert_eq!(rc.len(), 1, "{rc:?}");
    let labels = &rc[0].labels;
    assert_eq!(labels["namespace"], "ml-training");
    assert_eq!(labels["pod"], "llm-pretrain-worker-1");
    assert_eq!(labels["owner"], "python3");
    assert_eq!(labels["container_id"].len(), 64);
    assert!(labels["pod_uid"].len() == 36 && !labels["pod_uid"].contains('_'));
    // Two QPs per peer: between one and three peers in a four-host job.
    assert!([2.0, 4.0, 6.0].contains(&rc[0].value), "{rc:?}");
    // The kernel's GSI QP has no pod.
    let gsi = matching(
        &samples,
        "rdma_owner_qps",
        &[("device", "mlx5_0"), ("qp_type", "GSI")],
    )
    .collect::<Vec<_>>();
    assert_eq!(
        (
            gsi[0].labels["owner"].as_str(),
            gsi[0].labels["pod"].as_str()
        ),
        ("ib_core", "")
    );

    // Every NIC assigned to the training pod, by PCI address through sysfs; the shared-device
    // resource and the GPUs name no RDMA device.
    let info = matching(&samples, "rdma_device_pod_info", &[]).collect::<Vec<_>>();
    assert_eq!(info.len(), 8, "{info:?}");
    assert!(info
        .iter()
        .all(|s| s.labels["pod"] == "llm-pretrain-worker-1"
            && s.labels["resource"] == "nvidia.com/hostdev"
            && s.labels["container"] == "trainer"
            && s.labels["netdev"].starts_with("ens")));

    // The RDMA cgroup: three objects per QP of the pod, against its limit.
    let used = value_of(
        &samples,
        "rdma_pod_cgroup_usage",
        &[
            ("pod", "llm-pretrain-worker-1"),
            ("device", "mlx5_0"),
            ("resource", "hca_object"),
        ],
    )
    .unwrap();
    assert_eq!(used, 3.0 * (rc[0].value + 1.0), "RC and UD QPs of the pod");
    let limit = value_of(
        &samples,
        "rdma_pod_cgroup_limit",
        &[
            ("pod", "llm-pretrain-worker-1"),
            ("device", "mlx5_0"),
            ("resource", "hca_object"),
        ],
    );
    assert_eq!(limit, Some(400.0));
    assert!(
        matching(
            &samples,
            "rdma_pod_cgroup_limit",
            &[("namespace", "inference")]
        )
        .next()
        .is_none(),
        "no limit series where rdma.max says max"
    );
    // The optional counters sysfs does not show.
    assert!(value_of(
        &samples,
        "rdma_optional_cc_rx_ce_pkts_total",
        &[("device", "mlx5_0"), ("port", "1")]
    )
    .is_some());
}

/// A node's files for pod attribution under `root`: pod log directories, and a pod's RDMA
/// cgroup (cgroup v2, systemd driver) near its limit.
fn write_pod_files(root: &Path) {
    let uid = "0c6a3e36-8a5f-4d35-9d5e-1b2c3d4e5f60";
    std::fs::create_dir_all(root.join(format!("pods/ml_trainer-0_{uid}/main"))).unwrap();
    let pod = root.join(format!(
        "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    ));
    std::fs::create_dir_all(&pod).unwrap();
    std::fs::write(
        pod.join("rdma.current"),
        "mlx5_0 hca_handle=1 hca_object=950\n",
    )
    .unwrap();
    std::fs::write(
        pod.join("rdma.max"),
        "mlx5_0 hca_handle=max hca_object=1000\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_the_pods_behind_devices_from_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    write_pod_files(dir.path());
    let socket = dir.path().join("kubelet.sock");
    let cx7 = fixture("cx7-roce");
    let pci = std::fs::read_link(cx7.join("sys/class/infiniband/mlx5_3/device")).unwrap();
    let pci = pci.file_name().unwrap().to_str().unwrap().to_string();
    let server = PodResourcesServer::start(
        &socket,
        vec![pod(
            "ml",
            "trainer-0",
            "main",
            &[("nvidia.com/rdma_vf", &[pci.as_str()])],
        )],
    )
    .unwrap();
    let (socket_arg, logs_arg, cgroup_arg) = (
        path_str(&socket).to_string(),
        path_str(&dir.path().join("pods")).to_string(),
        path_str(&dir.path().join("cgroup")).to_string(),
    );
    let samples = tokio::task::spawn_blocking(move || {
        let exporter = cx7_exporter(&[
            "--no-collector.netlink",
            "--collector.pods",
            "--collector.pods.pod-resources-socket",
            &socket_arg,
            "--collector.pods.pod-logs-dir",
            &logs_arg,
            "--path.cgroupfs",
            &cgroup_arg,
        ]);
        wait_for(
            &exporter,
            "/metrics?collect[]=pods",
            "the kubelet's answer",
            |s| success(s, "pods") == Some(1.0),
        )
    })
    .await
    .unwrap();
    let info = matching(&samples, "rdma_device_pod_info", &[]).collect::<Vec<_>>();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].labels["device"], "mlx5_3");
    assert_eq!(info[0].labels["pod"], "trainer-0");
    assert_eq!(info[0].labels["resource"], "nvidia.com/rdma_vf");
    let labels = [
        ("namespace", "ml"),
        ("pod", "trainer-0"),
        ("resource", "hca_object"),
    ];
    assert_eq!(
        value_of(&samples, "rdma_pod_cgroup_usage", &labels),
        Some(950.0)
    );
    assert_eq!(
        value_of(&samples, "rdma_pod_cgroup_limit", &labels),
        Some(1000.0)
    );
    server.stop().await;
}

#[test]
fn a_missing_kubelet_socket_fails_the_collector_not_the_scrape() {
    let dir = tempfile::tempdir().unwrap();
    write_pod_files(dir.path());
    let socket = dir.path().join("no-kubelet.sock");
    let exporter = cx7_exporter(&[
        "--no-collector.netlink",
        "--collector.pods",
        "--collector.pods.pod-resources-socket",
        path_str(&socket),
        "--collector.pods.pod-logs-dir",
        path_str(&dir.path().join("pods")),
        "--path.cgroupfs",
        path_str(&dir.path().join("cgroup")),
    ]);
    let samples = wait_for(&exporter, "/metrics", "a failed kubelet read", |s| {
        value_of(
            s,
            "rdma_exporter_pods_errors_total",
            &[("source", "pod_resources"), ("reason", "socket_missing")],
        )
        .is_some()
    });
    assert_eq!(success(&samples, "pods"), Some(0.0));
    assert_eq!(success(&samples, "sysfs"), Some(1.0));
    // The cgroup part still answers.
    assert_eq!(
        value_of(
            &samples,
            "rdma_pod_cgroup_usage",
            &[("pod", "trainer-0"), ("resource", "hca_object")]
        ),
        Some(950.0)
    );
    let logs = exporter.logs();
    assert!(!logs.contains("hca_object=950"), "no file contents in logs");
}
