//! Load benchmark: 200 concurrent scrapers on one node agent, with and without the bound on
//! concurrent sysfs walks (simultaneous scrapes coalesce onto one read), next to node_exporter
//! 1.5 on the same fixture node.
//!
//! `cargo bench --bench load`. Needs `wrk` (`apt-get install wrk`). Environment:
//! BENCH_SECONDS=N per run (default 60), BENCH_CONNECTIONS=N (default 200), NODE_EXPORTER=PATH,
//! RFE_BINARY=PATH. Prints figures; exits non-zero when wrk is missing, a server dies, or any
//! request of ours fails (the target is zero errors). See BENCHMARKS.md.

use std::ffi::OsString;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use anyhow::{bail, Context};
use common::fixture::{node_exporter_binary, Fixture};
use common::proc::{cpu_seconds, env_number, load_average, memory_kib};
use common::server::Server;

const DEVICES: usize = 10;
const SEED: u64 = 42;
const DEFAULT_SECONDS: u64 = 60;
const DEFAULT_CONNECTIONS: u64 = 200;
/// wrk's per-request timeout: well above any scrape here, so a slow answer counts as latency.
const REQUEST_TIMEOUT: &str = "30s";

fn main() -> ExitCode {
    common::exit_code("load", run())
}

fn run() -> anyhow::Result<()> {
    let seconds = env_number("BENCH_SECONDS", DEFAULT_SECONDS)?;
    let connections = env_number("BENCH_CONNECTIONS", DEFAULT_CONNECTIONS)?;
    let wrk = Command::new("wrk").arg("--version").output();
    if wrk.is_err() {
        bail!("wrk not found: apt-get install wrk");
    }
    let fixture = Fixture::create("rfe-load-bench-", DEVICES, SEED)?;
    println!(
        "fixture: {DEVICES} mlx5 devices with hw_counters and ethtool stats in {} ({})",
        fixture.root().display(),
        fixture.medium
    );
    println!(
        "load: wrk -t2 -c{connections} -d{seconds}s --latency, GET /metrics, keep-alive, text format"
    );
    println!("load average before: {}", load_average());

    let ours_args = |extra: &[&str]| -> Vec<OsString> {
        let mut args = fixture.agent_args();
        args.extend(extra.iter().map(OsString::from));
        args
    };
    let mut results = Vec::new();
    let bounded = Server::start_rfe("rfe (coalesced)", &ours_args(&[]))?;
    results.push(measure(bounded, seconds, connections)?);
    let unbounded = Server::start_rfe(
        "rfe (no bound)",
        &ours_args(&["--debug.no-scrape-coalescing"]),
    )?;
    results.push(measure(unbounded, seconds, connections)?);
    match node_exporter_binary() {
        Some(binary) => {
            let server = Server::start_node_exporter(&binary, &fixture.sys(), &[])?;
            results.push(measure(server, seconds, connections)?);
        }
        None => eprintln!("node_exporter not found (apt-get install prometheus-node-exporter): reporting ours only"),
    }
    println!("load average after:  {}", load_average());
    print_report(&results, seconds, connections);
    for result in &results[..2] {
        if result.errors() > 0 {
            bail!(
                "{}: {} failed requests (target: 0)",
                result.name,
                result.errors()
            );
        }
    }
    Ok(())
}

/// One server's figures under load.
struct LoadResult {
    name: &'static str,
    wrk: WrkSummary,
    peak_rss_mib: f64,
    cpu_cores: f64,
    /// Our own count of scrapes that shared another's read (None for node_exporter).
    coalesced: Option<f64>,
}

impl LoadResult {
    fn errors(&self) -> u64 {
        self.wrk.socket_errors + self.wrk.non_2xx
    }

    /// Requests answered with metrics, per second.
    fn answered_per_second(&self) -> f64 {
        let answered = self.wrk.requests.saturating_sub(self.wrk.non_2xx) as f64;
        self.wrk.requests_per_second * answered / self.wrk.requests as f64
    }
}

fn measure(mut server: Server, seconds: u64, connections: u64) -> anyhow::Result<LoadResult> {
    let url = format!("http://{}/metrics", server.address);
    // Warm-up: the page cache and the allocator reach their working set.
    for _ in 0..20 {
        reqwest::blocking::get(&url)?.error_for_status()?.bytes()?;
    }
    let pid = server.pid();
    let coalesced_before = coalesced_scrapes(&url)?;
    let cpu_before = cpu_seconds(pid)?;
    let started = Instant::now();
    // Peak RSS, sampled while the load runs: VmHWM would include the warm-up.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak_kib = 0;
            while sampling.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = memory_kib(pid) {
                    peak_kib = peak_kib.max(rss);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            peak_kib
        })
    };
    let output = Command::new("wrk")
        .args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .args(["--latency", "--timeout", REQUEST_TIMEOUT])
        .arg(&url)
        .output()
        .context("running wrk")?;
    sampling.store(false, Ordering::Relaxed);
    let peak_kib = sampler.join().expect("sampler thread");
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid)? - cpu_before;
    server.check_alive()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "wrk failed ({}): {text}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let wrk = WrkSummary::parse(&text).with_context(|| format!("parsing wrk's output:\n{text}"))?;
    let coalesced = match coalesced_before {
        Some(before) => coalesced_scrapes(&url)?.map(|after| after - before),
        None => None,
    };
    println!("\n--- {} ---\n{}", server.name, text.trim_end());
    Ok(LoadResult {
        name: server.name,
        wrk,
        peak_rss_mib: peak_kib as f64 / 1024.0,
        cpu_cores: cpu / elapsed,
        coalesced,
    })
}

/// `rdma_exporter_coalesced_scrapes_total`, if the server exposes it.
fn coalesced_scrapes(url: &str) -> anyhow::Result<Option<f64>> {
    let body = reqwest::blocking::get(url)?.error_for_status()?.text()?;
    Ok(body
        .lines()
        .find_map(|l| l.strip_prefix("rdma_exporter_coalesced_scrapes_total "))
        .and_then(|v| v.trim().parse().ok()))
}

/// What wrk prints, in numbers.
#[derive(Debug, Default)]
struct WrkSummary {
    requests: u64,
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    socket_errors: u64,
    non_2xx: u64,
}

impl WrkSummary {
    fn parse(text: &str) -> anyhow::Result<WrkSummary> {
        let mut summary = WrkSummary::default();
        for line in text.lines().map(str::trim) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["50%", value] => summary.p50_ms = duration_ms(value)?,
                ["99%", value] => summary.p99_ms = duration_ms(value)?,
                ["Requests/sec:", value] => summary.requests_per_second = value.parse()?,
                [count, "requests", "in", ..] => summary.requests = count.parse()?,
                ["Non-2xx", "or", "3xx", "responses:", count] => summary.non_2xx = count.parse()?,
                ["Socket", "errors:", rest @ ..] => {
                    // "connect 0, read 0, write 0, timeout 0"
                    for pair in rest.chunks(2) {
                        if let [_, n] = pair {
                            summary.socket_errors += n.trim_end_matches(',').parse::<u64>()?;
                        }
                    }
                }
                _ => {}
            }
        }
        if summary.requests == 0 {
            bail!("no requests completed");
        }
        Ok(summary)
    }
}

/// wrk's "635.91us", "1.20ms", "2.00s", "1.50m".
fn duration_ms(text: &str) -> anyhow::Result<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .with_context(|| format!("no unit in {text:?}"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse()?;
    Ok(match unit {
        "us" => number / 1000.0,
        "ms" => number,
        "s" => number * 1000.0,
        "m" => number * 60_000.0,
        _ => bail!("unknown unit in {text:?}"),
    })
}

fn print_report(results: &[LoadResult], seconds: u64, connections: u64) {
    println!("\n{connections} connections for {seconds} s per server (wrk, 2 threads, same 2-core machine)\n");
    println!(
        "{:<18} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>10} {:>12}",
        "server",
        "req/s",
        "200/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "peak RSS",
        "CPU cores",
        "sysfs reads"
    );
    for r in results {
        let reads = match r.coalesced {
            Some(coalesced) => format!("{:.0}", r.wrk.requests as f64 - coalesced),
            None => "-".to_string(),
        };
        println!(
            "{:<18} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>8} {:>7.1}Mi {:>10.2} {:>12}",
            r.name,
            r.wrk.requests_per_second,
            r.answered_per_second(),
            r.wrk.p50_ms,
            r.wrk.p99_ms,
            r.errors(),
            r.peak_rss_mib,
            r.cpu_cores,
            reads
        );
    }
    println!("  (errors: socket errors + non-2xx answers; sysfs reads: requests minus coalesced scrapes, from rdma_exporter_coalesced_scrapes_total)");
    if let [bounded, unbounded, rest @ ..] = results {
        println!(
            "\nthe bound: answered/s {:.2}x, p99 {:.2}x, peak RSS {:.2}x of the unbounded run",
            bounded.answered_per_second() / unbounded.answered_per_second(),
            bounded.wrk.p99_ms / unbounded.wrk.p99_ms,
            bounded.peak_rss_mib / unbounded.peak_rss_mib
        );
        if let [node_exporter] = rest {
            println!(
                "ours (coalesced) / node_exporter: answered/s {:.2}x, p99 {:.2}x, peak RSS {:.2}x, errors {} vs {}",
                bounded.answered_per_second() / node_exporter.answered_per_second(),
                bounded.wrk.p99_ms / node_exporter.wrk.p99_ms,
                bounded.peak_rss_mib / node_exporter.peak_rss_mib,
                bounded.errors(),
                node_exporter.errors()
            );
            println!("NOTE: node_exporter reads less per scrape (no hw_counters, no ethtool) and refuses requests beyond --web.max-requests (40 by default) with 503.");
        }
    }
}
