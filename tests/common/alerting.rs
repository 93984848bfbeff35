//! The alerting path as shipped, around a real Prometheus: the node scrape jobs of
//! `deploy/prometheus/scrape-config.yml` pointed at simulated fabrics, the shipped rule files,
//! and a real Alertmanager posting to a webhook receiver in this process. Shared by
//! `tests/it/alerts_e2e.rs` and `benches/time_to_page.rs` (which includes this file).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_yaml::{Mapping, Value};

use super::prometheus::free_port;
use super::ChildGuard;

/// One alert as Alertmanager's webhook delivered it, and when it arrived.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub at: Instant,
    pub labels: BTreeMap<String, String>,
}

/// Every alert the webhook received, in arrival order.
pub type Inbox = Arc<Mutex<Vec<Delivered>>>;

fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An HTTP server that records every alert Alertmanager posts to it; returns its address.
pub fn webhook() -> (String, Inbox) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let received: Inbox = Arc::default();
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

/// Alertmanager sending every alert at once (no grouping delay) to the webhook; returns the
/// process and its address.
pub fn alertmanager(dir: &Path, webhook: &str) -> (ChildGuard, String) {
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

/// `alerts/rdma-rules.yml` and `alerts/rdma-alerts.yml`, as shipped.
pub fn shipped_rule_files() -> Vec<PathBuf> {
    ["alerts/rdma-rules.yml", "alerts/rdma-alerts.yml"]
        .iter()
        .map(|f| project_root().join(f))
        .collect()
}

/// The node jobs of `deploy/prometheus/scrape-config.yml` (`rdma-node` and `rdma-node-fast`)
/// as shipped (intervals, timeouts, `collect[]`/`exclude[]` params, metric relabeling), each
/// reading its targets from the file_sd file `targets` instead of the example hosts. Their
/// `relabel_configs` (instance from the host name) are left out: the file names each
/// simulated host's instance, as its own host name would.
pub fn shipped_node_jobs(targets: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(project_root().join("deploy/prometheus/scrape-config.yml"))
        .unwrap();
    let config: Value = serde_yaml::from_str(&text).unwrap();
    let jobs: Vec<Value> = config["scrape_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|job| {
            job["job_name"]
                .as_str()
                .is_some_and(|n| n.starts_with("rdma-node"))
        })
        .cloned()
        .map(|mut job| {
            let job_map = job.as_mapping_mut().unwrap();
            assert!(job_map.remove("static_configs").is_some(), "{job_map:?}");
            job_map.remove("relabel_configs");
            let mut sd = Mapping::new();
            sd.insert("files".into(), vec![Value::from(path(targets))].into());
            sd.insert("refresh_interval".into(), "2s".into());
            job_map.insert("file_sd_configs".into(), vec![Value::Mapping(sd)].into());
            job
        })
        .collect();
    let names: Vec<&str> = jobs.iter().filter_map(|j| j["job_name"].as_str()).collect();
    assert_eq!(
        names,
        ["rdma-node", "rdma-node-fast"],
        "the shipped node jobs"
    );
    jobs
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A whole Prometheus config: Prometheus' default 15 s scrape and evaluation intervals (the
/// jobs and rule groups that set their own keep them), `rule_files`, alerts to `alertmanager`.
pub fn prometheus_config(rule_files: &[PathBuf], alertmanager: &str, jobs: Vec<Value>) -> String {
    let config = serde_json::json!({
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": rule_files.iter().map(|f| path(f)).collect::<Vec<_>>(),
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
    });
    let mut config: Value = serde_json::from_value(config).unwrap();
    config
        .as_mapping_mut()
        .unwrap()
        .insert("scrape_configs".into(), Value::Sequence(jobs));
    serde_yaml::to_string(&config).unwrap()
}

/// Writes the file_sd file `targets`: the simulated hosts of each `(demo address, cluster)`,
/// as the demo's `/sd` lists them (its switch target left out), labelled with `cluster` so that
/// fabrics (or storms) stay apart. Written whole and renamed into place: Prometheus reads the
/// file when it changes.
pub fn write_demo_targets(targets: &Path, demos: &[(&str, &str)]) {
    let mut groups = Vec::new();
    for (address, cluster) in demos {
        let listed: serde_json::Value = reqwest::blocking::get(format!("http://{address}/sd"))
            .unwrap()
            .json()
            .unwrap();
        for group in listed.as_array().unwrap() {
            let labels = &group["labels"];
            let metrics_path = labels["__metrics_path__"].as_str().unwrap();
            if !metrics_path.starts_with("/hosts/") {
                continue;
            }
            groups.push(serde_json::json!({
                "targets": group["targets"],
                "labels": {
                    "__metrics_path__": metrics_path,
                    "instance": labels["instance"],
                    "cluster": cluster,
                },
            }));
        }
    }
    let partial = targets.with_extension("partial");
    std::fs::write(&partial, serde_json::Value::Array(groups).to_string()).unwrap();
    std::fs::rename(&partial, targets).unwrap();
}
