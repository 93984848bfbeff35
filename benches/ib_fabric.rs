//! The `ib_fabric` collector at scale: a simulated subnet of 2 000 switches x 64 ports
//! (128 000 switch ports, `src/sim/ib_fabric.rs`) scanned by the real collector code, in full,
//! errors-only and one-shard-of-four modes. Prints per mode the scan time (the source filling a
//! `FabricScan`, median of BENCH_RUNS runs), the encoding of the scan's port families (once per
//! scan, on the scan thread), a scrape (the body as the server assembles it: the registry
//! encoded, the scan's block copied in), its gzip (the first compresses the block, later ones
//! reuse it), the series and bytes a scrape carries (the cardinality budget of
//! docs/infiniband.md), one switch's detail (`/ib/switch?target=`: its series, bytes and time,
//! median over switches), and the process' resident memory: the scanner's peak (a scan and its
//! encoding while the previous scan's text and switch details are still served, as the
//! collector's thread holds them; measured from a reset high-water mark) and the process' after
//! each mode. The time of
//! a real scan is the fabric's MAD round trips and the tools (benches/ib_diags.rs); this is the
//! exporter's own share. Prints figures, never fails on them. `cargo bench --bench ib_fabric`
//! (BENCH_SWITCHES=N to change the fabric, BENCH_RUNS=N runs, default 5, BENCH_MODE=full,
//! errors-only or "shard 0/4" for one mode alone: its own resident memory).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_fabric_exporter::collector::{Collectors, Scrape, Selection as Collect};
use rdma_fabric_exporter::exposition::body::Body;
use rdma_fabric_exporter::exposition::Format;
use rdma_fabric_exporter::ib::collector::IbFabricCollector;
use rdma_fabric_exporter::ib::config::IbFabricConfig;
use rdma_fabric_exporter::ib::detail::SwitchDetails;
use rdma_fabric_exporter::ib::encoded::PortFamilies;
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

/// A scrape's body as the server assembles it (`server::AppState::encode`).
fn scrape(collectors: &Arc<Collectors>) -> Body {
    Scrape::new(collectors.clone(), Collect::All, true)
        .body(Format::OpenMetrics, &[])
        .expect("encoding")
}

/// Resets `VmHWM` to the current RSS (Linux 4.0+), so that a phase's own peak can be read.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `VmRSS` and `VmHWM` of this process, in MiB.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let switches = env("BENCH_SWITCHES", 2_000);
    let runs = env("BENCH_RUNS", 5).max(1);
    let started = Instant::now();
    let source: Arc<SimIbFabric> = Arc::new(SimIbFabric::scale(switches, Arc::new(|| 1234.5)));
    // The simulated subnet is the bench's, not the exporter's: its memory is the baseline.
    let (baseline, _) = memory_mib();
    println!(
        "ib_fabric: simulated subnet of {switches} switches x 64 ports built in {:.2?}, RSS {baseline:.0} MiB",
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
    println!("| mode | scan | encode, once per scan | scrape | first gzip | later gzip | series | scrape bytes | gzip bytes | one switch's detail: series, bytes, time | scanner peak RSS | RSS after | peak RSS |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // One mode per process gives each its own resident memory (freed heap is not returned).
    let only = std::env::var("BENCH_MODE").ok();
    for (mode, config) in modes {
        if only.as_deref().is_some_and(|m| m != mode) {
            continue;
        }
        let selection = config.selection();
        let limits = || ScanLimits {
            deadline: Instant::now() + Duration::from_secs(600),
            query_timeout: Duration::from_secs(10),
        };
        let mut scans = Vec::new();
        let mut encodes = Vec::new();
        reset_peak();
        // As the scan thread holds them: the served text of the last scan stays until the next
        // scan's is encoded.
        let mut served = None;
        for _ in 0..runs {
            let started = Instant::now();
            let scan = source.scan(limits(), &selection).expect("a simulated scan");
            scans.push(started.elapsed());
            let started = Instant::now();
            let ports = Arc::new(PortFamilies::encode(&scan, config.errors_only, &selection));
            encodes.push(started.elapsed());
            let details = SwitchDetails::keep(scan, &ports, &selection);
            served = Some((ports, details));
        }
        let (_, scanner_peak) = memory_mib();
        // One switch's detail, as `/ib/switch?target=` builds it, for a spread of switches.
        let (_, details) = served.as_ref().expect("at least one run");
        let targets: Vec<String> = (0..details.len())
            .step_by((details.len() / 16).max(1))
            .filter_map(|i| details.guid(i).map(|g| g.to_string()))
            .collect();
        let mut detail_times = Vec::new();
        let mut detail = (0, 0);
        for target in &targets {
            let started = Instant::now();
            let families = details.switch(target).expect("a switch of the scan");
            let body = Body::of_blocks(Format::OpenMetrics, vec![Arc::new(families)]).bytes();
            detail_times.push(started.elapsed());
            let series = body
                .split(|b| *b == b'\n')
                .filter(|l| !l.starts_with(b"#") && !l.is_empty())
                .count();
            detail = (series, body.len());
        }
        drop(served);
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
        while !String::from_utf8_lossy(&scrape(&collectors).bytes()[..])
            .contains("rdma_ib_fabric_scans_total")
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut text = axum::body::Bytes::new();
        let scrapes: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                text = scrape(&collectors).bytes();
                started.elapsed()
            })
            .collect();
        let started = Instant::now();
        let gz = scrape(&collectors).gzip();
        let first_gzip = started.elapsed();
        let later_gzips: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                let _ = scrape(&collectors).gzip();
                started.elapsed()
            })
            .collect();
        let series = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.starts_with(b"#") && !l.is_empty())
            .count();
        let (rss, peak) = memory_mib();
        println!(
            "| {mode} | {:.2?} | {:.2?} | {:.2?} | {:.2?} | {:.2?} | {series} | {:.1} MB | {:.1} MB | {}, {:.0} kB, {:.2?} | {scanner_peak:.0} MiB | {rss:.0} MiB | {peak:.0} MiB |",
            median(scans),
            median(encodes),
            median(scrapes),
            first_gzip,
            median(later_gzips),
            text.len() as f64 / 1e6,
            gz.len() as f64 / 1e6,
            detail.0,
            detail.1 as f64 / 1e3,
            median(detail_times),
        );
        collectors.retire();
    }
}
