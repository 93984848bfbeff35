//! A real Prometheus (Debian's `prometheus`, installed by scripts/test) scrapes the exporter.
//! Prometheus asks for OpenMetrics first, so this proves that format end to end, which promtool
//! 2.42 cannot lint.

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

type Vector = Vec<(std::collections::BTreeMap<String, String>, f64)>;

fn query(prometheus: &str, expr: &str) -> Vector {
    try_query(prometheus, expr).expect("Prometheus answers queries")
}

/// `None` while Prometheus is still starting.
fn try_query(prometheus: &str, expr: &str) -> Option<Vector> {
    let url = format!("http://{prometheus}/api/v1/query");
    let response: serde_json::Value = reqwest::blocking::Client::new()
        .get(url)
        .query(&[("query", expr)])
        .send()
        .ok()?
        .json()
        .ok()?;
    assert_eq!(response["status"], "success", "{response}");
    let vector = response["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = r["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let value = r["value"][1].as_str().unwrap().parse().unwrap();
            (labels, value)
        })
        .collect();
    Some(vector)
}

#[test]
fn prometheus_scrapes_openmetrics_and_sees_every_series() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus not found: install Debian's `prometheus` package (scripts/test does)");
    }
    let (sys, ethtool) = (fixture("cx7-roce/sys"), fixture("cx7-roce/ethtool"));
    let exporter = Exporter::start(&[
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.stats-dir",
        path_str(&ethtool),
    ]);
    let expected_series = parse_exposition(&exporter.metrics()).len();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: rdma\n    static_configs:\n      - targets: ['{}']\n",
            exporter.address
        ),
    )
    .unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // Wait for a successful scrape.
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = loop {
        let up = try_query(&address, "up{job=\"rdma\"}").unwrap_or_default();
        if up.first().is_some_and(|(_, v)| *v == 1.0) || Instant::now() > deadline {
            break up;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
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
