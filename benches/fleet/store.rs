//! The fleet's central store (docs/deploy.md, "A global view of many clusters"): the bench
//! Prometheus remote-writes to two real `victoria-metrics` processes (Debian's package), one
//! through the shipped `deploy/prometheus/remote-write.yml` selection (what the fleet board
//! needs) and one with everything (a long history of every series). Measured: samples and
//! bytes per second on the wire (Prometheus' `prometheus_remote_storage_samples_total` and
//! `prometheus_remote_storage_bytes_total` of each queue, compressed protobuf as sent), and
//! the fleet board's query times against the store; extrapolated linearly in nodes, like the
//! rest, and held to the cluster boards' budget (each panel within Prometheus' query timeout).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_yaml::Value;

use crate::panels::{per_dashboard, Timing};
use crate::victoria_metrics;
use crate::ChildGuard;

/// The board that reads the store.
pub const FLEET_BOARD: &str = "rdma-fleet";
/// The cluster boards' budget (extrapolate.rs): a panel slower than Prometheus' default
/// `--query.timeout` fails.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);
/// The fleets of the table.
const FLEETS: [f64; 2] = [1000.0, 10000.0];

/// What a store is sent.
#[derive(Clone, Copy, PartialEq)]
pub enum Selection {
    /// The shipped `write_relabel_configs`.
    Shipped,
    Everything,
}

impl Selection {
    fn name(self) -> &'static str {
        match self {
            Selection::Shipped => "shipped selection",
            Selection::Everything => "everything",
        }
    }
}

pub struct Store {
    pub selection: Selection,
    pub address: String,
    _process: ChildGuard,
}

impl Store {
    /// A `victoria-metrics` on a loopback port, its data in `dir`.
    pub fn start(selection: Selection, dir: &Path) -> anyhow::Result<Store> {
        let (process, address) = victoria_metrics::start(dir).map_err(anyhow::Error::msg)?;
        Ok(Store {
            selection,
            address,
            _process: process,
        })
    }

    fn url(&self) -> String {
        format!("http://{}/api/v1/write", self.address)
    }

    /// Its `remote_write` entry: the shipped one pointed here, with or without its selection.
    fn remote_write(&self, source: &Path) -> anyhow::Result<Value> {
        let path = source.join("deploy/prometheus/remote-write.yml");
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let config: Value = serde_yaml::from_str(&text)?;
        let mut entry = config["remote_write"][0].clone();
        let Some(map) = entry.as_mapping_mut() else {
            bail!("{}: no remote_write entry", path.display());
        };
        map.insert("url".into(), self.url().into());
        if self.selection == Selection::Everything {
            map.remove("write_relabel_configs");
        }
        Ok(entry)
    }
}

/// `config` (Prometheus YAML) with a `remote_write` entry per store.
pub fn with_remote_write(config: &str, stores: &[Store], source: &Path) -> anyhow::Result<String> {
    let mut config: Value = serde_yaml::from_str(config)?;
    let entries = stores
        .iter()
        .map(|s| s.remote_write(source))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !entries.is_empty() {
        config["remote_write"] = Value::Sequence(entries);
    }
    Ok(serde_yaml::to_string(&config)?)
}

/// Samples and bytes each remote-write queue has sent, by URL, read from Prometheus' `/metrics`.
pub struct Sent {
    at: Instant,
    by_url: BTreeMap<String, (f64, f64)>,
}

impl Sent {
    pub fn read(prometheus: &str) -> anyhow::Result<Sent> {
        let text = reqwest::blocking::get(format!("http://{prometheus}/metrics"))?.text()?;
        let at = Instant::now();
        let mut by_url: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let Some(url) = series
                .split("url=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
            else {
                continue;
            };
            let name = series.split('{').next().unwrap_or_default();
            let entry = by_url.entry(url.to_string()).or_default();
            match name {
                "prometheus_remote_storage_samples_total" => entry.0 = value,
                "prometheus_remote_storage_bytes_total" => entry.1 = value,
                _ => {}
            }
        }
        Ok(Sent { at, by_url })
    }
}

/// What one store was sent per second over the window.
pub struct Ingest {
    pub selection: Selection,
    pub samples_per_s: f64,
    pub bytes_per_s: f64,
}

pub fn ingest(stores: &[Store], first: &Sent, last: &Sent) -> Vec<Ingest> {
    let seconds = last.at.duration_since(first.at).as_secs_f64().max(1e-9);
    stores
        .iter()
        .map(|store| {
            let url = store.url();
            let (s0, b0) = first.by_url.get(&url).copied().unwrap_or_default();
            let (s1, b1) = last.by_url.get(&url).copied().unwrap_or_default();
            Ingest {
                selection: store.selection,
                samples_per_s: (s1 - s0) / seconds,
                bytes_per_s: (b1 - b0) / seconds,
            }
        })
        .collect()
}

/// The write volume and the fleet board's times, measured and at 1 000 and 10 000 nodes: the
/// store holds every cluster, so its figures grow with the whole fleet.
pub fn print(nodes: f64, ingest: &[Ingest], timings: &[Timing]) {
    println!(
        "\ncentral store (victoria-metrics), measured over {nodes} nodes and extrapolated linearly in nodes:"
    );
    let mut columns = vec![("measured".to_string(), 1.0)];
    columns.extend(FLEETS.iter().map(|f| (format!("{f:.0} nodes"), f / nodes)));
    let titles: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
    println!("| | {} |", titles.join(" | "));
    println!("|---{}|", " | ---:".repeat(columns.len()));
    for i in ingest {
        let samples: Vec<String> = columns
            .iter()
            .map(|(_, k)| format!("{:.0}", i.samples_per_s * k))
            .collect();
        println!(
            "| remote write, {}: samples/s | {} |",
            i.selection.name(),
            samples.join(" | ")
        );
        let bytes: Vec<String> = columns
            .iter()
            .map(|(_, k)| bytes_per_s(i.bytes_per_s * k))
            .collect();
        println!(
            "| remote write, {}: bytes/s on the wire | {} |",
            i.selection.name(),
            bytes.join(" | ")
        );
    }
    let mut over_budget = Vec::new();
    for (dashboard, _, total, _, slowest) in per_dashboard(timings) {
        let cells: Vec<String> = columns
            .iter()
            .map(|(_, k)| {
                format!(
                    "{:.0}, {:.0}",
                    total.as_secs_f64() * 1000.0 * k,
                    slowest.as_secs_f64() * 1000.0 * k
                )
            })
            .collect();
        println!(
            "| dashboard {dashboard} on the store: one refresh, slowest panel ms | {} |",
            cells.join(" | ")
        );
        for (title, k) in &columns {
            if slowest.mul_f64(*k) > QUERY_TIMEOUT {
                over_budget.push(format!("{dashboard} at {title}"));
            }
        }
    }
    if over_budget.is_empty() {
        println!(
            "\nwithin budget: every fleet board panel on the store within the {} s query timeout, in every column",
            QUERY_TIMEOUT.as_secs()
        );
    } else {
        println!("\nover budget (a panel longer than the query timeout):");
        for what in over_budget {
            println!("  - {what}");
        }
    }
}

fn bytes_per_s(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1} MB/s", value / 1e6)
    } else {
        format!("{:.1} kB/s", value / 1e3)
    }
}
