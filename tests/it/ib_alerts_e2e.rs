//! The `rdma-ib` alerts end to end: the demo's simulated InfiniBand subnet in `ib-degraded-link`
//! and `ib-congestion`, scraped through the demo's `/sd` by a real Prometheus evaluating the
//! shipped rules (their `for:` cut to 10 s, as in alerts_e2e.rs), a real Alertmanager delivering
//! to a webhook in this test: each scenario's alert arrives naming the faulty switch port, and
//! `ib-healthy` raises no `RdmaIb*` alert.

use crate::common;

use std::time::{Duration, Instant};

use common::alerting::{alertmanager, webhook};
use common::*;

/// A scenario (the `cluster` label), the alert it must raise and labels the alert carries.
type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

#[test]
fn degraded_link_and_congestion_raise_their_ib_alerts_and_healthy_none() {
    let _exclusive = common::exclusive(module_path!());
    let scenarios = ["ib-healthy", "ib-degraded-link", "ib-congestion"];
    let demos: Vec<Exporter> = scenarios
        .iter()
        .map(|s| Exporter::small_demo(s, "60", "2s", "4"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    let scrape_configs: String = scenarios
        .iter()
        .zip(&demos)
        .map(|(scenario, d)| {
            prometheus::demo_sd_job(&format!("rdma-{scenario}"), &d.address, Some(scenario))
        })
        .collect();
    let fast = crate::alerts_e2e::alerts_without_long_waits(dir.path());
    let (_prometheus, _) = crate::alerts_e2e::prometheus(
        dir.path(),
        "2s",
        &[&project_root().join("alerts/rdma-rules.yml"), &fast],
        &am_address,
        &scrape_configs,
    );
    // 2 hosts x 4 HCAs on 4 leaves: each leaf has 2 host ports, then one uplink per spine, so
    // ib-leaf-01's uplink to ib-spine-02 is its port 4 (ib-spine-02's port 1), and
    // ib-spine-01's port to ib-leaf-02 is its port 2.
    let expected: [Expected; 3] = [
        (
            "ib-degraded-link",
            "RdmaIbLinkDegraded",
            &[("switch", "MF0;ib-leaf-01:MQM9700/U1"), ("port", "4")],
        ),
        (
            "ib-degraded-link",
            "RdmaIbSymbolErrors",
            &[("switch", "MF0;ib-spine-02:MQM9700/U1"), ("port", "1")],
        ),
        (
            "ib-congestion",
            "RdmaIbCongestion",
            &[
                ("switch", "MF0;ib-spine-01:MQM9700/U1"),
                ("switch_guid", "b83f:d203:0020:0000"),
                ("port", "2"),
            ],
        ),
    ];
    let arrived = |cluster: &str, alert: &str, labels: &[(&str, &str)]| {
        received.lock().unwrap().iter().any(|d| {
            d.labels.get("cluster").map(String::as_str) == Some(cluster)
                && d.labels["alertname"] == alert
                && labels
                    .iter()
                    .all(|(k, v)| d.labels.get(*k).map(String::as_str) == Some(*v))
        })
    };
    let started = Instant::now();
    while !expected.iter().all(|(c, a, l)| arrived(c, a, l))
        && started.elapsed() < Duration::from_secs(150)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {} {} {}",
                d.labels.get("cluster").cloned().unwrap_or_default(),
                d.labels["alertname"],
                d.labels.get("switch").cloned().unwrap_or_default(),
                d.labels.get("port").cloned().unwrap_or_default()
            )
        })
        .collect();
    for (cluster, alert, labels) in &expected {
        assert!(
            arrived(cluster, alert, labels),
            "{cluster}: no {alert} with {labels:?} within 150 s; delivered: {delivered:#?}"
        );
    }
    let healthy_ib: Vec<&String> = delivered
        .iter()
        .filter(|d| d.starts_with("ib-healthy RdmaIb"))
        .collect();
    assert!(healthy_ib.is_empty(), "ib-healthy raised {healthy_ib:?}");
    // The degraded link's alerts name only that link's two ends.
    let degraded_ports: Vec<&String> = delivered
        .iter()
        .filter(|d| d.starts_with("ib-degraded-link RdmaIbLinkDegraded"))
        .collect();
    assert!(
        degraded_ports
            .iter()
            .all(|d| d.ends_with("ib-leaf-01:MQM9700/U1 4")
                || d.ends_with("ib-spine-02:MQM9700/U1 1")),
        "{degraded_ports:#?}"
    );
    println!("rdma-ib alerts arrived within {:.0?}", started.elapsed());
}
