//! The alerts end to end: every scenario of the simulated fabric, a real Prometheus evaluating
//! the shipped rules, a real Alertmanager routing to a webhook receiver in this test. The right
//! alert must arrive with the right labels, no other critical alert may, and `healthy` must
//! raise nothing. A second test measures the time to page for a PFC storm with the shipped
//! 15 s scrape and evaluation intervals, in real time.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::prometheus::{self, free_port};
use common::*;

/// One alert as Alertmanager's webhook delivered it, and when it arrived.
#[derive(Debug, Clone)]
struct Delivered {
    at: Instant,
    labels: BTreeMap<String, String>,
}

/// An HTTP server that records every alert Alertmanager posts to it.
fn webhook() -> (String, Arc<Mutex<Vec<Delivered>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let received: Arc<Mutex<Vec<Delivered>>> = Arc::default();
    let sink = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let at = Instant::now();
            if let Ok(payload) = serde_json::from_slice::<serde_json::Value>(&body) {
                for alert in payload["alerts"].as_array().into_iter().flatten() {
                    let labels = alert["labels"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect();
                    sink.lock().unwrap().push(Delivered { at, labels });
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (address, received)
}

/// Alertmanager sending every alert at once (no grouping delay) to the webhook.
fn alertmanager(dir: &Path, webhook: &str) -> (ChildGuard, String) {
    let config = dir.join("alertmanager.yml");
    std::fs::write(
        &config,
        format!(
            "route:\n  receiver: test\n  group_by: ['...']\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: test\n    webhook_configs:\n      - url: http://{webhook}/\n        send_resolved: false\n"
        ),
    )
    .unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let child = Command::new("prometheus-alertmanager")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.join("am-data").display()))
        .arg(format!("--web.listen-address={address}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus-alertmanager (Debian package; scripts/test installs it)");
    (ChildGuard(child), address)
}

/// Prometheus with the given rule files, sending alerts to `alertmanager`.
fn prometheus(
    dir: &Path,
    interval: &str,
    rule_files: &[&Path],
    alertmanager: &str,
    scrape_configs: &str,
) -> ChildGuard {
    let config = format!(
        "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: {interval}\nrule_files:\n{}alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\nscrape_configs:\n{scrape_configs}",
        prometheus::rule_file_list(rule_files)
    );
    prometheus::launch(dir, &config).0
}

/// The shipped alerts with every `for:` cut to 10 s: the expressions and thresholds are the
/// shipped ones, only the wait before firing is shortened so a test can see them.
fn alerts_without_long_waits(dir: &Path) -> std::path::PathBuf {
    let shipped = std::fs::read_to_string(project_root().join("alerts/rdma-alerts.yml")).unwrap();
    let for_line = regex::Regex::new(r"(?m)^(\s+)for: \d+[smh]$").unwrap();
    let fast = for_line.replace_all(&shipped, "${1}for: 10s");
    assert!(
        fast.matches("for: 10s").count() >= 10,
        "the for: lines moved"
    );
    let path = dir.join("rdma-alerts-fast.yml");
    std::fs::write(&path, fast.as_ref()).unwrap();
    path
}

/// A small fabric (2 hosts of 6 NICs: every scenario's faulty NIC is there) so that seven of
/// them and Prometheus fit on a small machine. The switches are walked every 2 s.
fn demo(scenario: &str, start_at: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--start-at",
            start_at,
            "--switch-interval",
            "2s",
            "--hosts",
            "2",
            "--nics-per-host",
            "6",
        ],
    )
}

fn has(labels: &BTreeMap<String, String>, wanted: &[(&str, &str)]) -> bool {
    wanted
        .iter()
        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
}

/// A scenario, the alert that must arrive from it with these labels, and the critical alerts it
/// may raise.
type Expectation<'a> = (
    &'a str,
    Option<(&'a str, Vec<(&'a str, &'a str)>)>,
    &'a [&'a str],
);

#[test]
fn each_scenario_pages_with_its_own_alert_and_healthy_pages_nothing() {
    let _exclusive = common::exclusive(module_path!());
    let expectations: [Expectation; 7] = [
        ("healthy", None, &[]),
        (
            "pfc-storm",
            Some((
                "RdmaPfcStormSource",
                vec![
                    ("instance", "gpu-node-01"),
                    ("device", "mlx5_2"),
                    ("switch", "leaf1"),
                    ("switch_port", "Ethernet2/1"),
                    ("severity", "critical"),
                ],
            )),
            &[
                "RdmaPfcStormNic",
                "RdmaPfcStormSource",
                "RdmaSwitchPfcPauseSustained",
            ],
        ),
        (
            "ecn-too-high",
            Some(("RdmaEcnThresholdTooHigh", vec![("severity", "warning")])),
            &[],
        ),
        (
            "ecn-too-low",
            Some((
                "RdmaEcnThresholdPossiblyTooLow",
                vec![("severity", "warning")],
            )),
            &[],
        ),
        (
            "link-flap",
            Some((
                "RdmaLinkFlapping",
                vec![("instance", "gpu-node-02"), ("device", "mlx5_5")],
            )),
            &[],
        ),
        (
            "cnp-ignored",
            Some((
                "RdmaEcnNotEnabled",
                vec![("instance", "gpu-node-02"), ("device", "mlx5_1")],
            )),
            &[],
        ),
        (
            "transport-errors",
            Some((
                "RdmaTransportErrors",
                vec![("instance", "gpu-node-02"), ("device", "mlx5_0")],
            )),
            &[],
        ),
    ];
    let demos: Vec<Exporter> = expectations.iter().map(|(s, _, _)| demo(s, "60")).collect();
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    // One job per fabric; `cluster` tells them apart, as it would across real clusters.
    let scrape_configs: String = expectations
        .iter()
        .zip(&demos)
        .map(|((scenario, _, _), d)| {
            format!(
                "  - job_name: rdma-{scenario}\n    http_sd_configs:\n      - url: http://{}/sd\n        refresh_interval: 1s\n    relabel_configs:\n      - target_label: cluster\n        replacement: {scenario}\n",
                d.address
            )
        })
        .collect();
    let fast = alerts_without_long_waits(dir.path());
    let _prometheus = prometheus(
        dir.path(),
        "2s",
        &[&project_root().join("alerts/rdma-rules.yml"), &fast],
        &am_address,
        &scrape_configs,
    );

    let started = Instant::now();
    let arrived = |scenario: &str, alert: &str, labels: &[(&str, &str)]| {
        received.lock().unwrap().iter().any(|d| {
            d.labels.get("cluster").map(String::as_str) == Some(scenario)
                && d.labels["alertname"] == alert
                && has(&d.labels, labels)
        })
    };
    let all_arrived = || {
        expectations.iter().all(|(scenario, expected, _)| {
            expected
                .as_ref()
                .is_none_or(|(alert, labels)| arrived(scenario, alert, labels))
        })
    };
    // The fault lasts until 180 s in (it starts 60 s into a 300 s cycle, at --start-at 60).
    // The 5-minute windows of the ECN rules need about 100 s of fault data to cross their
    // thresholds: rate() divides by the whole window.
    while !all_arrived() && started.elapsed() < Duration::from_secs(175) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered = received.lock().unwrap().clone();
    let summary: Vec<String> = delivered
        .iter()
        .map(|d| {
            format!(
                "{} {} {:?}",
                d.labels.get("cluster").cloned().unwrap_or_default(),
                d.labels["alertname"],
                d.labels.get("instance")
            )
        })
        .collect();
    for (scenario, expected, _) in &expectations {
        if let Some((alert, labels)) = expected {
            assert!(
                arrived(scenario, alert, labels),
                "{scenario}: no {alert} {labels:?} in {summary:#?}"
            );
        }
    }
    for (scenario, _, allowed_critical) in &expectations {
        for d in delivered
            .iter()
            .filter(|d| d.labels.get("cluster").map(String::as_str) == Some(scenario))
        {
            let alert = d.labels["alertname"].as_str();
            assert!(
                *scenario != "healthy",
                "healthy raised {alert}: {:?}",
                d.labels
            );
            if d.labels.get("severity").map(String::as_str) == Some("critical") {
                assert!(
                    allowed_critical.contains(&alert),
                    "{scenario}: unexpected critical {alert} {:?}",
                    d.labels
                );
            }
        }
    }
    for (scenario, expected, _) in &expectations {
        if let Some((alert, labels)) = expected {
            let first = delivered
                .iter()
                .filter(|d| {
                    d.labels.get("cluster").map(String::as_str) == Some(*scenario)
                        && d.labels["alertname"] == *alert
                        && has(&d.labels, labels)
                })
                .map(|d| d.at.saturating_duration_since(started).as_secs_f64())
                .fold(f64::INFINITY, f64::min);
            println!("{scenario}: {alert} after {first:.1} s");
        }
    }
    println!(
        "all expected alerts arrived {:.1} s after Prometheus started",
        started.elapsed().as_secs_f64()
    );
}

/// Shipped rules and intervals, real time: from the storm's start to the page.
#[test]
fn a_pfc_storm_pages_within_45_seconds() {
    let _exclusive = common::exclusive(module_path!());
    // The fault starts 60 simulated seconds into the cycle: 20 s after the demo starts.
    let storm_in = Duration::from_secs(20);
    let demo = demo("pfc-storm", "40");
    let storm_starts = Instant::now() + storm_in;
    let healthy = self::demo("healthy", "40");
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    let _prometheus = prometheus(
        dir.path(),
        "15s",
        &[
            &project_root().join("alerts/rdma-rules.yml"),
            &project_root().join("alerts/rdma-alerts.yml"),
        ],
        &am_address,
        &format!(
            "  - job_name: rdma\n    http_sd_configs:\n      - url: http://{}/sd\n        refresh_interval: 5s\n    relabel_configs:\n      - target_label: cluster\n        replacement: pfc-storm\n\
             \x20 - job_name: rdma-healthy\n    http_sd_configs:\n      - url: http://{}/sd\n        refresh_interval: 5s\n    relabel_configs:\n      - target_label: cluster\n        replacement: healthy\n",
            demo.address, healthy.address
        ),
    );
    let deadline = storm_starts + Duration::from_secs(90);
    let paged = loop {
        let page = received
            .lock()
            .unwrap()
            .iter()
            .find(|d| d.labels["alertname"] == "RdmaPfcStormNic")
            .cloned();
        if let Some(page) = page {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no page 90 s after the storm began"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        has(
            &paged.labels,
            &[
                ("instance", "gpu-node-01"),
                ("device", "mlx5_2"),
                ("severity", "critical")
            ]
        ),
        "{:?}",
        paged.labels
    );
    let delay = paged.at.saturating_duration_since(storm_starts);
    println!(
        "time to page: {:.1} s from the storm's start (scrape and evaluation every 15 s)",
        delay.as_secs_f64()
    );
    assert!(
        delay <= Duration::from_secs(45),
        "paged {delay:?} after the storm began"
    );
    // Nothing was paged before the storm, and the healthy fabric next to it paged nothing.
    assert!(paged.at > storm_starts, "paged before the storm started");
    let from_healthy: Vec<_> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|d| d.labels.get("cluster").map(String::as_str) == Some("healthy"))
        .map(|d| d.labels.clone())
        .collect();
    assert!(from_healthy.is_empty(), "{from_healthy:?}");
}
