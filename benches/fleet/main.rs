//! The fleet at scale: the shipped rules and dashboards in a real Prometheus against a simulated
//! fleet, and what 1 000 and 10 000 GPU nodes would cost.
//!
//! `cargo bench --bench fleet`. A few `demo` processes (up to 64 hosts of 8 RoCE NICs and 8
//! leaves each) simulate the fabric; each demo is scraped as several clusters (file_sd target
//! groups with their own `cluster` label pointing at the same demo endpoints: Prometheus keeps
//! one target, and one set of series, per label set), so the fleet grows without a simulator
//! per host. A real Prometheus runs the shipped node jobs of `deploy/prometheus/scrape-config.yml`
//! (15 s full scrape, 5 s storm sampler), the switches every 30 s (as the shipped
//! `rdma-switches` job), and the shipped rule files at their intervals. After a warm-up it
//! measures series per node and per switch port, samples per second ingested
//! (`prometheus_tsdb_head_samples_appended_total`), every rule group's evaluation time
//! (`prometheus_rule_group_last_duration_seconds`, sampled every 5 s), Prometheus' memory per
//! series, and the query time of every dashboard panel (variables at All), then extrapolates to
//! 1 000 and 10 000 nodes with their leaf/spine switches.
//!
//! Environment: FLEET_NODES=N simulated nodes (default 256), FLEET_DEMOS=N demo processes
//! (default 2) of at most FLEET_DEMO_HOSTS hosts (default 32, at most 64), FLEET_WARMUP_S / FLEET_MEASURE_S (default 90 / 120), FLEET_SOURCE=DIR to read
//! alerts/ and dashboards/ from another checkout, FLEET_BEFORE=DIR to run a second Prometheus
//! with DIR's rules and dashboards against the same fleet at the same time and compare (the
//! before/after figures in BENCHMARKS.md). FLEET_STORE=0 leaves out the central store (store.rs:
//! the first Prometheus remote-writes to two `victoria-metrics`, the shipped selection and
//! everything; their write volume and the fleet board's query times on the store).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

#[path = "../common/mod.rs"]
mod common;
mod extrapolate;
mod fleet;
mod panels;
mod rules;
mod scrape;
mod store;

// The integration tests' real Prometheus helpers, shared rather than copied (they name
// `super::ChildGuard` and `super::prometheus`).
#[allow(dead_code)]
#[path = "../../tests/common/prometheus.rs"]
mod prometheus;

#[allow(dead_code)]
#[path = "../../tests/common/alerting.rs"]
mod alerting;

#[allow(dead_code)]
#[path = "../../tests/common/victoria_metrics.rs"]
mod victoria_metrics;

/// A child process killed and reaped on drop (Prometheus).
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use common::proc::{env_number, load_average};

/// The quiet phase asks about the fleet this long before its simulators stopped: past the
/// last scrapes (a scrape that fails once they stop marks its series stale at its start).
const QUIET_LOOKBACK: Duration = Duration::from_secs(20);
/// The bench Prometheus' global `evaluation_interval`, the budget of every group without its own
/// (stricter than Prometheus' default of 1 m).
const RULE_INTERVAL: Duration = Duration::from_secs(15);

fn unix_now() -> anyhow::Result<f64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64())
}

fn main() -> ExitCode {
    common::exit_code("fleet", run())
}

fn run() -> anyhow::Result<()> {
    let nodes = env_number("FLEET_NODES", 256)? as usize;
    let demos = env_number("FLEET_DEMOS", 2)? as usize;
    let demo_hosts = env_number("FLEET_DEMO_HOSTS", 32)? as usize;
    let warmup = Duration::from_secs(env_number("FLEET_WARMUP_S", 90)?);
    let measure = Duration::from_secs(env_number("FLEET_MEASURE_S", 120)?);
    let mut sources = vec![(
        "this checkout",
        std::env::var_os("FLEET_SOURCE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
    )];
    if let Some(before) = std::env::var_os("FLEET_BEFORE") {
        sources.push(("before", PathBuf::from(before)));
    }
    // Prometheus resolves relative rule_files against its config file's directory (a temporary
    // one), where a relative FLEET_BEFORE would match no file and load no rule, silently.
    for (_, source) in &mut sources {
        *source = std::fs::canonicalize(&*source).with_context(|| source.display().to_string())?;
    }
    let plan = fleet::Plan::new(nodes, demos, demo_hosts)?;
    println!(
        "fleet: {} nodes ({} demos x {} hosts x {} clusters), 8 NICs and {} leaves per demo; load {}",
        plan.nodes(),
        plan.demos,
        plan.hosts,
        plan.replicas,
        plan.leaves,
        load_average()
    );
    let dir = tempfile::Builder::new().prefix("rfe-fleet-").tempdir()?;
    let mut fleet = fleet::Fleet::start(&plan, dir.path())?;
    let stores = if env_number("FLEET_STORE", 1)? == 0 {
        Vec::new()
    } else {
        vec![
            store::Store::start(store::Selection::Shipped, &dir.path().join("store-shipped"))?,
            store::Store::start(store::Selection::Everything, &dir.path().join("store-all"))?,
        ]
    };
    let mut sides = Vec::new();
    for (index, (name, source)) in sources.into_iter().enumerate() {
        println!(
            "Prometheus {index}: {name}, rules and dashboards from {}",
            source.display()
        );
        // Only the first one writes to the stores: a second would write the same series.
        let writes_to = if index == 0 { &stores[..] } else { &[] };
        sides.push(Side::start(
            name,
            source,
            &dir.path().join(index.to_string()),
            &fleet,
            writes_to,
        )?);
    }
    // Prometheus' own memory before any target, taken out of the per-series figure.
    std::thread::sleep(Duration::from_secs(5));
    let baselines = sides
        .iter()
        .map(|s| s.client.self_metrics())
        .collect::<anyhow::Result<Vec<_>>>()?;
    fleet.list_targets()?;
    let started = Instant::now();
    println!(
        "warming up {} s (every rate window has samples), then measuring {} s",
        warmup.as_secs(),
        measure.as_secs()
    );
    std::thread::sleep(warmup);
    fleet.check_alive()?;
    let clients: Vec<&scrape::Client> = sides.iter().map(|s| &s.client).collect();
    let sent_first = store::Sent::read(&sides[0].address)?;
    let windows = scrape::RuleWindow::sample(&clients, measure)?;
    let ingest = store::ingest(&stores, &sent_first, &store::Sent::read(&sides[0].address)?);
    fleet.check_alive()?;
    // The quiet phase: the simulators stop, and every rule and panel is timed with the machine
    // to Prometheus, at a moment just before they stopped (when every series was fresh). The
    // running fleet leaves Prometheus a fraction of a core on this machine, which says more
    // about the machine than about the rules.
    let quiet_at = unix_now()? - QUIET_LOOKBACK.as_secs_f64();
    let range = started
        .elapsed()
        .saturating_sub(QUIET_LOOKBACK)
        .min(Duration::from_secs(3600));
    fleet.set_paused(true)?;
    println!(
        "simulators stopped; timing rules and panels at {} s ago, load {}",
        QUIET_LOOKBACK.as_secs(),
        load_average()
    );
    let mut results = Vec::new();
    for index in 0..sides.len() {
        // The other Prometheus stop too: their 5m rates keep evaluating the stopped fleet's
        // last five minutes at full cost.
        for (other, side) in sides.iter().enumerate() {
            side.set_paused(other != index)?;
        }
        let side = &mut sides[index];
        side.client.pin(quiet_at);
        let counts = scrape::Counts::query(&side.client)?;
        let files: Vec<&std::path::Path> = side.rule_files.iter().map(PathBuf::as_path).collect();
        let rule_costs = rules::time_all(&side.client, &files, RULE_INTERVAL)?;
        let panels = panels::load(&side.source.join("dashboards"), &side.client)?;
        let timings = panels::time_all(&side.client, &panels, range)?;
        results.push((counts, rule_costs, timings));
    }
    // The fleet board on the store, every Prometheus stopped (none writes meanwhile).
    let mut store_timings = Vec::new();
    if let Some(shipped) = stores.first() {
        for side in &sides {
            side.set_paused(true)?;
        }
        let boards = dir.path().join("store-boards");
        std::fs::create_dir_all(&boards)?;
        let board = format!("{}.json", store::FLEET_BOARD);
        std::fs::copy(
            sides[0].source.join("dashboards").join(&board),
            boards.join(&board),
        )?;
        let mut client = scrape::Client::new(&shipped.address)?;
        client.pin(quiet_at);
        let panels = panels::load(&boards, &client)?;
        store_timings = panels::time_all(&client, &panels, range)?;
    }
    println!("quiet phase done, load {}", load_average());
    for side in &sides {
        side.set_paused(false)?;
    }
    fleet.set_paused(false)?;
    fleet.check_alive()?;

    for (((side, (counts, rule_costs, timings)), window), baseline) in
        sides.iter().zip(&results).zip(&windows).zip(&baselines)
    {
        println!(
            "
## {} ({})",
            side.name,
            side.source.display()
        );
        let measured = extrapolate::Measured::new(&plan, counts, baseline, window)?;
        scrape::print_rule_groups(window);
        rules::print(rule_costs);
        panels::print(timings);
        measured.print();
        extrapolate::print_table(&measured, rule_costs, timings);
    }
    if !stores.is_empty() {
        store::print(plan.nodes() as f64, &ingest, &store_timings);
    }
    if let ([after, before], [(_, after_rules, after_timings), (_, before_rules, before_timings)]) =
        (&windows[..], &results[..])
    {
        println!(
            "
## before and after, same fleet, same time"
        );
        scrape::print_comparison(before, after);
        rules::print_comparison(before_rules, after_rules);
        panels::print_comparison(before_timings, after_timings);
    }
    Ok(())
}

/// One Prometheus with one checkout's rules, and the dashboards it is queried with.
struct Side {
    name: &'static str,
    source: PathBuf,
    rule_files: Vec<PathBuf>,
    client: scrape::Client,
    /// Its HTTP address (its own `/metrics`: remote-write counters).
    address: String,
    prometheus: ChildGuard,
}

impl Side {
    /// Stops (SIGSTOP) or resumes (SIGCONT) this side's Prometheus.
    fn set_paused(&self, paused: bool) -> anyhow::Result<()> {
        let pid = i32::try_from(self.prometheus.0.id())?;
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        if unsafe { libc::kill(pid, signal) } != 0 {
            anyhow::bail!("{}: kill: {}", self.name, std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn start(
        name: &'static str,
        source: PathBuf,
        dir: &std::path::Path,
        fleet: &fleet::Fleet,
        stores: &[store::Store],
    ) -> anyhow::Result<Side> {
        std::fs::create_dir_all(dir)?;
        let rule_files: Vec<PathBuf> = ["alerts/rdma-rules.yml", "alerts/rdma-alerts.yml"]
            .iter()
            .map(|f| source.join(f))
            .collect();
        // rule_files are globs to Prometheus: a missing file loads nothing and says nothing.
        if let Some(missing) = rule_files.iter().find(|f| !f.is_file()) {
            anyhow::bail!("{}: no such rule file", missing.display());
        }
        let config =
            store::with_remote_write(&fleet.prometheus_config(&rule_files), stores, &source)?;
        let (prometheus, address) = prometheus::launch(dir, &config);
        let client = scrape::Client::new(&address)?;
        client.wait_ready(Duration::from_secs(60))?;
        Ok(Side {
            name,
            source,
            rule_files,
            client,
            address,
            prometheus,
        })
    }
}
