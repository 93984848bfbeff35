//! The `ib_fabric` collector at scale: a simulated subnet of 2 000 switches x 64 ports
//! (128 000 switch ports, `src/sim/ib_fabric.rs`) scanned by the real collector code, in full,
//! errors-only and one-shard-of-four modes. Prints per mode the scan time (the source filling a
//! `FabricScan`, median of BENCH_RUNS runs), the scrape time (encoding the last scan) and the
//! series and bytes a scrape carries: the cardinality budget of docs/infiniband.md. The time of
//! a real scan is the fabric's MAD round trips and the tools (benches/ib_diags.rs); this is the
//! exporter's own share. Prints figures, never fails on them. `cargo bench --bench ib_fabric`
//! (BENCH_SWITCHES=N to change the fabric, BENCH_RUNS=N runs, default 5).

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rdma_fabric_exporter::collector::{Collectors, Scrape, Selection as Collect};
use rdma_fabric_exporter::ib::collector::IbFabricCollector;
use rdma_fabric_exporter::ib::config::IbFabricConfig;
use rdma_fabric_exporter::ib::selection::Shard;
use rdma_fabric_exporter::ib::source::{FabricSource, ScanLimits};
use rdma_fabric_exporter::sim::ib_fabric::SimIbFabric;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn scrape(collectors: &Arc<Collectors>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        collectors: collectors.clone(),
        selection: Collect::All,
        self_metrics: true,
    }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoding");
    text
}

fn main() {
    let switches = env("BENCH_SWITCHES", 2_000);
    let runs = env("BENCH_RUNS", 5).max(1);
    let started = Instant::now();
    let source: Arc<SimIbFabric> = Arc::new(SimIbFabric::scale(switches, Arc::new(|| 1234.5)));
    println!(
        "ib_fabric: simulated subnet of {switches} switches x 64 ports built in {:.2?}",
        started.elapsed()
    );
    let modes: [(&str, IbFabricConfig); 3] = [
        ("full", IbFabricConfig::default()),
        (
            "errors-only",
            IbFabricConfig {
                errors_only: true,
                ..IbFabricConfig::default()
            },
        ),
        (
            "shard 0/4",
            IbFabricConfig {
                shard: Some(Shard { index: 0, count: 4 }),
                ..IbFabricConfig::default()
            },
        ),
    ];
    println!("| mode | scan (median of {runs}) | scrape encode (median of {runs}) | series | scrape bytes |");
    println!("|---|---|---|---|---|");
    for (mode, config) in modes {
        let selection = config.selection();
        let scans: Vec<Duration> = (0..runs)
            .map(|_| {
                let limits = ScanLimits {
                    deadline: Instant::now() + Duration::from_secs(600),
                    query_timeout: Duration::from_secs(10),
                };
                let started = Instant::now();
                let scan = source.scan(limits, &selection).expect("a simulated scan");
                let took = started.elapsed();
                drop(scan);
                took
            })
            .collect();
        let collector = IbFabricCollector::spawn(
            source.clone() as Arc<dyn FabricSource>,
            IbFabricConfig {
                interval: Duration::from_secs(3600),
                ..config
            },
        )
        .expect("the scan thread");
        let collectors = Arc::new(Collectors::new(vec![Arc::new(collector)]));
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut text = scrape(&collectors);
        while !text.contains("rdma_ib_fabric_scans_total") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            text = scrape(&collectors);
        }
        let encodes: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                text = scrape(&collectors);
                started.elapsed()
            })
            .collect();
        let series = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        println!(
            "| {mode} | {:.2?} | {:.2?} | {series} | {:.1} MB |",
            median(scans),
            median(encodes),
            text.len() as f64 / 1e6
        );
        collectors.retire();
    }
}
