//! A real Prometheus (Debian's `prometheus` package) started by a test, and its query API.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ChildGuard;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub type Vector = Vec<(std::collections::BTreeMap<String, String>, f64)>;

pub fn query(prometheus: &str, expr: &str) -> Vector {
    try_query(prometheus, expr).expect("Prometheus answers queries")
}

/// `None` while Prometheus is still starting.
pub fn try_query(prometheus: &str, expr: &str) -> Option<Vector> {
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

/// Starts Prometheus with `scrape_configs` (YAML, indented as a top-level key's items) and a
/// 1 s scrape interval; returns the process and its address.
pub fn start(dir: &Path, scrape_configs: &str) -> (ChildGuard, String) {
    launch(
        dir,
        &format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape_configs}"),
    )
}

/// Starts Prometheus with the whole configuration `config` (YAML) on a free loopback port;
/// returns the process and its address.
pub fn launch(dir: &Path, config: &str) -> (ChildGuard, String) {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus not found: install Debian's `prometheus` package (scripts/test does)");
    }
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (ChildGuard(child), address)
}

/// Polls `expr` until `done` holds for its result or `within` passes; returns the last result.
pub fn wait_for(
    prometheus: &str,
    expr: &str,
    within: Duration,
    done: impl Fn(&Vector) -> bool,
) -> Vector {
    let deadline = Instant::now() + within;
    loop {
        let result = try_query(prometheus, expr).unwrap_or_default();
        if done(&result) || Instant::now() > deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Like `start`, plus recording/alerting rule files evaluated every second
/// (`evaluation_interval: 1s`).
pub fn start_with_rules(
    dir: &Path,
    scrape_configs: &str,
    rule_files: &[&Path],
) -> (ChildGuard, String) {
    launch(
        dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{}scrape_configs:\n{scrape_configs}",
            rule_file_list(rule_files)
        ),
    )
}

/// A scrape job that finds a demo's targets through its `/sd`; with `cluster`, every target
/// carries that label, which keeps several demos' series apart as across real clusters.
pub fn demo_sd_job(job: &str, demo_address: &str, cluster: Option<&str>) -> String {
    let mut job = format!(
        "  - job_name: {job}\n    http_sd_configs:\n      - url: http://{demo_address}/sd\n        refresh_interval: 1s\n"
    );
    if let Some(cluster) = cluster {
        job.push_str(&format!(
            "    relabel_configs:\n      - target_label: cluster\n        replacement: {cluster}\n"
        ));
    }
    job
}

/// `rule_files:` items, one per line.
pub fn rule_file_list(rule_files: &[&Path]) -> String {
    rule_files
        .iter()
        .map(|file| {
            // A JSON string is a valid YAML double-quoted scalar.
            let quoted = serde_json::to_string(file.to_str().expect("UTF-8 rule file path"));
            format!("  - {}\n", quoted.unwrap())
        })
        .collect()
}
