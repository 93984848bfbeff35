//! A real Prometheus (Debian's `prometheus`, installed by scripts/test) scrapes the exporter.
//! Prometheus asks for OpenMetrics first, so this proves that format end to end, which promtool
//! 2.42 cannot lint.

use crate::common;

use std::time::Duration;

use common::prometheus::{self, query, wait_for};
use common::*;

#[test]
fn prometheus_scrapes_openmetrics_and_sees_every_series() {
    let (sys, ethtool) = (fixture("cx7-roce/sys"), fixture("cx7-roce/ethtool"));
    // The storm sampler's series appear after its second period: off, so counts are exact.
    let exporter = Exporter::start(&[
        "--no-collector.pfc-storm",
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.stats-dir",
        path_str(&ethtool),
    ]);
    let expected_series = parse_exposition(&exporter.metrics()).len();

    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus::start(
        dir.path(),
        &format!(
            "  - job_name: rdma\n    static_configs:\n      - targets: ['{}']\n",
            exporter.address
        ),
    );
    let up = wait_for(
        &address,
        "up{job=\"rdma\"}",
        Duration::from_secs(60),
        |up| up.first().is_some_and(|(_, v)| *v == 1.0),
    );
    assert_eq!(up.len(), 1, "no scrape seen: {up:?}");
    assert_eq!(up[0].1, 1.0, "target down: {up:?}");

    // Every series arrived, with the exporter's values and labels.
    let scraped = query(&address, "scrape_samples_scraped{job=\"rdma\"}");
    assert_eq!(scraped[0].1 as usize, expected_series);
    assert_eq!(query(&address, "rdma_devices")[0].1, 10.0);
    let info = query(&address, "rdma_port_info{device=\"mlx5_8\"}");
    assert_eq!(info[0].0["link_layer"], "InfiniBand");
    let pause = query(
        &address,
        "rdma_pfc_pause_duration_seconds_total{device=\"mlx5_0\",priority=\"3\",direction=\"rx\"}",
    );
    assert_eq!(pause.len(), 1);
    assert!(pause[0].1 > 0.0);
    let build = query(&address, "rdma_exporter_build_info");
    assert_eq!(build[0].0["version"], env!("CARGO_PKG_VERSION"));
}

/// The demo's documented Prometheus config: HTTP service discovery gives every simulated host
/// its own `instance`, and PromQL then finds the storming NIC by host.
#[test]
fn prometheus_discovers_the_demo_hosts_and_finds_the_storm() {
    let _exclusive = common::exclusive(module_path!());
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--speed",
            "10",
            "--start-at",
            "70",
            "--switch-interval",
            "1s",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus::start(
        dir.path(),
        &prometheus::demo_sd_job("rdma-demo", &demo.address, None),
    );
    let up = wait_for(&address, "up == 1", Duration::from_secs(60), |up| {
        up.len() == 6
    });
    let mut instances: Vec<&str> = up.iter().map(|(l, _)| l["instance"].as_str()).collect();
    instances.sort();
    assert_eq!(
        instances,
        [
            "gpu-node-01",
            "gpu-node-02",
            "gpu-node-03",
            "gpu-node-04",
            "ib-fabric",
            "switch-poller"
        ]
    );
    let storming = wait_for(
        &address,
        "rate(rdma_pfc_pause_duration_seconds_total{direction=\"tx\"}[5s]) > 1",
        Duration::from_secs(30),
        |v| !v.is_empty(),
    );
    assert_eq!(storming.len(), 1, "{storming:?}");
    assert_eq!(storming[0].0["instance"], "gpu-node-01");
    assert_eq!(storming[0].0["device"], "mlx5_2");
}
