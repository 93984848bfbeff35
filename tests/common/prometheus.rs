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

/// `None` while Prometheus is still starting; a query it refuses fails the test.
pub fn try_query(prometheus: &str, expr: &str) -> Option<Vector> {
    let response = instant(prometheus, expr, None).ok()?;
    Some(answer(&response).unwrap_or_else(|e| panic!("{expr}: {e}")))
}

/// An instant query's answer at `time` (seconds since the epoch; the server's now when
/// `None`), from Prometheus or anything speaking its API (VictoriaMetrics): each series'
/// labels and value, a scalar as one entry without labels. Errors, the server's included, as
/// text.
pub fn query_at(server: &str, expr: &str, time: Option<f64>) -> Result<Vector, String> {
    answer(&instant(server, expr, time)?)
}

fn instant(server: &str, expr: &str, time: Option<f64>) -> Result<serde_json::Value, String> {
    let mut params = vec![("query", expr.to_string())];
    if let Some(time) = time {
        params.push(("time", format!("{time:.3}")));
    }
    reqwest::blocking::Client::new()
        .get(format!("http://{server}/api/v1/query"))
        .query(&params)
        .send()
        .map_err(|e| e.to_string())?
        .json()
        .map_err(|e| e.to_string())
}

fn answer(response: &serde_json::Value) -> Result<Vector, String> {
    if response["status"] != "success" {
        return Err(format!("{}: {}", response["errorType"], response["error"]));
    }
    let value = |pair: &serde_json::Value| -> Result<f64, String> {
        pair[1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("not a value: {pair}"))
    };
    let data = &response["data"];
    if data["resultType"] == "scalar" {
        return Ok(vec![(Default::default(), value(&data["result"])?)]);
    }
    let shape = |what: &str| format!("{what}: {response}");
    let mut vector = Vector::new();
    for series in data["result"]
        .as_array()
        .ok_or_else(|| shape("no result"))?
    {
        let metric = series["metric"]
            .as_object()
            .ok_or_else(|| shape("no labels"))?;
        let labels = metric
            .iter()
            .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect::<Option<_>>()
            .ok_or_else(|| shape("a label value that is not a string"))?;
        vector.push((labels, value(&series["value"])?));
    }
    Ok(vector)
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
    let address = format!("127.0.0.1:{}", free_port());
    (launch_at(dir, config, &address), address)
}

/// [`launch`] on `address`: for a client that must know it before Prometheus starts (the
/// localizer, which Prometheus scrapes in turn).
pub fn launch_at(dir: &Path, config: &str, address: &str) -> ChildGuard {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus not found: install Debian's `prometheus` package (scripts/test does)");
    }
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
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
    ChildGuard(child)
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

/// `job` (one scrape config) scraped every `interval` instead of the global interval.
pub fn every(job: &str, interval: &str) -> String {
    let (name, rest) = job.split_once('\n').expect("a job of more than one line");
    format!("{name}\n    scrape_interval: {interval}\n    scrape_timeout: {interval}\n{rest}")
}

/// A scrape job for a `localize` at `address`: its verdicts keep the `cluster` they name
/// (`honor_labels`), its own health takes `cluster` when given.
pub fn localizer_job(job: &str, address: &str, cluster: Option<&str>) -> String {
    let mut job = format!(
        "  - job_name: {job}\n    honor_labels: true\n    static_configs:\n      - targets: ['{address}']\n"
    );
    if let Some(cluster) = cluster {
        job.push_str(&format!("        labels:\n          cluster: {cluster}\n"));
    }
    job
}
