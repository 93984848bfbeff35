//! Soak: the exporter serves a simulated node at high time acceleration and polls 50 switches
//! over SNMP and gNMI STREAM, a third healthy, a third that never answer, a third that flap, while it is scraped every
//! second. Its RSS, open fds, threads and async tasks are sampled every 10 s; the report gives
//! their slope, and checks that every healthy switch stays fresh and every flapping one comes
//! back.
//!
//! `cargo bench --bench soak`. Environment: SOAK_SECONDS (default 600), SOAK_SPEED (simulated
//! seconds per second, default 60), RFE_BINARY=PATH. Exits non-zero when a scrape fails, the
//! exporter dies, a healthy switch is ever seen stale after the warm-up, or a flapping switch
//! never recovers. The slopes are reported, not asserted. See BENCHMARKS.md.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
#[path = "../tests/common/gnmi_target.rs"]
#[allow(dead_code)]
mod gnmi_target;

use anyhow::bail;
use common::proc::{cpu_seconds, env_number, load_average, memory_kib, proc_stat};
use common::server::Server;
use gnmi_target::{serve, Behaviour, FakeSwitch, Transport};
use rdma_fabric_exporter::sim::demo::{Demo, DemoOptions, COMMUNITY};
use rdma_fabric_exporter::sim::fabric::Shape;
use rdma_fabric_exporter::sim::scenario::ScenarioName;

/// 50 switches: a third healthy, a third silent, a third flapping, over SNMP and gNMI.
const SNMP_HEALTHY: usize = 9;
const SNMP_SILENT: usize = 9;
const SNMP_FLAPPING: usize = 8;
const GNMI_PER_KIND: usize = 8;
const FLAPPING: usize = SNMP_FLAPPING + GNMI_PER_KIND;
const SWITCH_INTERVAL: &str = "5s";
const SWITCH_TIMEOUT: &str = "1s";
/// A flapping switch answers for this long, then is gone for as long.
const FLAP_HALF_PERIOD: Duration = Duration::from_secs(30);
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Start-up (first polls, page cache, allocator) is left out of the slopes and checks.
const WARM_UP: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    common::exit_code("soak", run())
}

fn run() -> anyhow::Result<()> {
    let seconds = env_number("SOAK_SECONDS", 600)?;
    let speed = env_number("SOAK_SPEED", 60)?;
    let runtime = tokio::runtime::Runtime::new()?;
    // The fabric: 4 hosts × 8 NICs rail-wired to 9 leaves, each leaf a live SNMP agent.
    let demo = runtime.block_on(Demo::start(
        DemoOptions {
            scenario: ScenarioName::PfcStorm,
            speed: speed as f64,
            shape: Shape {
                leaves: SNMP_HEALTHY,
                ..Shape::default()
            },
            ..DemoOptions::default()
        },
        "/metrics",
    ))?;
    let demo = Arc::new(demo);
    runtime.block_on(async { demo.spawn_ticker() });
    let host = demo.dir().join("hosts").join(&demo.host_names[0]);

    // SNMP switches that never answer: sockets that read nothing.
    let silent: Vec<UdpSocket> = (0..SNMP_SILENT)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    // Flapping SNMP switches: relays to a leaf that forward for half a period, then drop
    // everything (odd ones) or close their port (even ones: ICMP port unreachable).
    let stop = Arc::new(AtomicBool::new(false));
    let mut flappers = Vec::new();
    for i in 0..SNMP_FLAPPING {
        let leaf = demo.leaf_addresses[i % demo.leaf_addresses.len()];
        flappers.push(Flapper::start(leaf, phase(i), i % 2 == 0, stop.clone())?);
    }
    // gNMI switches (SONiC over STREAM): healthy ones, ones that accept the subscription and
    // never say a word, and ones that go silent for half of each period.
    let gnmi = |behaviour: Behaviour| {
        let switch = FakeSwitch::new(None);
        switch.set(behaviour);
        let handle = switch.clone();
        (runtime.block_on(serve(switch, Transport::Plain)), handle)
    };
    let gnmi_healthy: Vec<_> = (0..GNMI_PER_KIND)
        .map(|_| gnmi(Behaviour::Normal))
        .collect();
    let gnmi_silent: Vec<_> = (0..GNMI_PER_KIND)
        .map(|_| gnmi(Behaviour::Silent))
        .collect();
    let gnmi_flapping: Vec<_> = (0..GNMI_PER_KIND)
        .map(|_| gnmi(Behaviour::Normal))
        .collect();
    {
        let switches: Vec<FakeSwitch> = gnmi_flapping.iter().map(|(_, s)| s.clone()).collect();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                for (i, switch) in switches.iter().enumerate() {
                    let up = flap_is_up(started.elapsed() + phase(i));
                    switch.set(if up {
                        Behaviour::Normal
                    } else {
                        Behaviour::Silent
                    });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    }

    let dir = tempfile::tempdir()?;
    let community = dir.path().join("community");
    std::fs::write(&community, COMMUNITY)?;
    let mut config = format!(
        "node:\n  sysfs_path: '{}'\n  ethtool: {{source: files, stats_dir: '{}'}}\nswitches:\n",
        host.join("sys").display(),
        host.join("ethtool").display()
    );
    let mut kinds = BTreeMap::new();
    let mut add_snmp = |config: &mut String, name: String, address: SocketAddr, kind: Kind| {
        let _ = writeln!(
            config,
            "  - {{name: {name}, address: '{address}', profile: arista_eos, interval: {SWITCH_INTERVAL}, timeout: {SWITCH_TIMEOUT}, retries: 1, snmp: {{version: 2c, community_file: '{}'}}}}",
            community.display()
        );
        kinds.insert(name, kind);
    };
    for (i, address) in demo.leaf_addresses.iter().enumerate() {
        add_snmp(
            &mut config,
            format!("snmp-healthy{i:02}"),
            *address,
            Kind::Healthy,
        );
    }
    for (i, socket) in silent.iter().enumerate() {
        add_snmp(
            &mut config,
            format!("snmp-silent{i:02}"),
            socket.local_addr()?,
            Kind::Silent,
        );
    }
    for (i, flapper) in flappers.iter().enumerate() {
        add_snmp(
            &mut config,
            format!("snmp-flapping{i:02}"),
            flapper.address,
            Kind::Flapping,
        );
    }
    for (targets, kind, label) in [
        (&gnmi_healthy, Kind::Healthy, "healthy"),
        (&gnmi_silent, Kind::Silent, "silent"),
        (&gnmi_flapping, Kind::Flapping, "flapping"),
    ] {
        for (i, (address, _)) in targets.iter().enumerate() {
            let name = format!("gnmi-{label}{i:02}");
            let _ = writeln!(
                config,
                "  - {{name: {name}, address: '{address}', protocol: gnmi, profile: sonic, interval: {SWITCH_INTERVAL}, timeout: {SWITCH_TIMEOUT}, gnmi: {{mode: stream}}}}"
            );
            kinds.insert(name, kind);
        }
    }
    let config_path = dir.path().join("soak.yml");
    std::fs::write(&config_path, config)?;

    let mut server = Server::start_rfe(
        "rdma-fabric-exporter",
        &[OsString::from("--config.file"), config_path.into()],
    )?;
    let pid = server.pid();
    let url = format!("http://{}/metrics", server.address);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    println!(
        "soak: {seconds} s, fabric at {speed}x, {} switches ({} healthy, {} silent, {} flapping every {:?}; SNMP and gNMI STREAM), scraped every second; load average {}",
        kinds.len(),
        SNMP_HEALTHY + GNMI_PER_KIND,
        SNMP_SILENT + GNMI_PER_KIND,
        FLAPPING,
        FLAP_HALF_PERIOD,
        load_average()
    );

    let started = Instant::now();
    let mut next_sample = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut tally = Tally::default();
    let mut last_up: BTreeMap<String, bool> = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        let tick = Instant::now();
        server.check_alive()?;
        let body = client
            .get(&url)
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.text());
        let body = match body {
            Ok(body) => body,
            Err(e) => {
                tally.failed_scrapes += 1;
                eprintln!("scrape failed at {:?}: {e}", started.elapsed());
                continue;
            }
        };
        tally.scrapes += 1;
        let warm = started.elapsed() >= WARM_UP;
        let scrape = Scrape::parse(&body);
        for (name, kind) in &kinds {
            let up = scrape.up.get(name.as_str()).copied().unwrap_or(false);
            if warm {
                match kind {
                    Kind::Healthy if !up => {
                        tally.stale_healthy += 1;
                        eprintln!("{name} not up at {:?}", started.elapsed());
                    }
                    Kind::Silent if up => tally.silent_up += 1,
                    _ => {}
                }
            }
            if *kind == Kind::Flapping && last_up.get(name) == Some(&false) && up {
                *tally.recoveries.entry(name.clone()).or_default() += 1;
            }
            last_up.insert(name.clone(), up);
        }
        if !scrape.has_node {
            tally.node_missing += 1;
        }
        if tick >= next_sample {
            let (rss_kib, _) = memory_kib(pid)?;
            samples.push(Sample {
                at_s: started.elapsed().as_secs_f64(),
                rss_kib: rss_kib as f64,
                fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as f64,
                threads: proc_stat(pid)?.threads as f64,
                tasks: scrape.tasks.unwrap_or(f64::NAN),
                cpu_s: cpu_seconds(pid)?,
            });
            next_sample += SAMPLE_EVERY;
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    server.check_alive()?;
    print_report(&samples, &tally, seconds);
    drop(runtime);

    if tally.failed_scrapes > 0 {
        bail!("{} scrapes failed", tally.failed_scrapes);
    }
    if tally.stale_healthy > 0 {
        bail!(
            "healthy switches were seen down {} times",
            tally.stale_healthy
        );
    }
    if tally.silent_up > 0 {
        bail!("silent switches were reported up {} times", tally.silent_up);
    }
    if tally.node_missing > 0 {
        bail!("{} scrapes had no node series", tally.node_missing);
    }
    let never_recovered: Vec<_> = kinds
        .iter()
        .filter(|(name, kind)| **kind == Kind::Flapping && !tally.recoveries.contains_key(*name))
        .map(|(name, _)| name.as_str())
        .collect();
    if seconds >= 4 * FLAP_HALF_PERIOD.as_secs() && !never_recovered.is_empty() {
        bail!("flapping switches never came back: {never_recovered:?}");
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Healthy,
    Silent,
    Flapping,
}

#[derive(Debug, Default)]
struct Tally {
    scrapes: u64,
    failed_scrapes: u64,
    /// Scrapes after the warm-up in which a healthy switch was not up (stale or failing).
    stale_healthy: u64,
    silent_up: u64,
    node_missing: u64,
    /// Down-to-up transitions seen per flapping switch.
    recoveries: BTreeMap<String, u64>,
}

/// What one scrape says, in the few series the soak checks.
struct Scrape<'a> {
    up: BTreeMap<&'a str, bool>,
    tasks: Option<f64>,
    has_node: bool,
}

impl<'a> Scrape<'a> {
    fn parse(body: &'a str) -> Scrape<'a> {
        let mut up = BTreeMap::new();
        let mut tasks = None;
        let mut has_node = false;
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("rdma_switch_up{switch=\"") {
                if let Some((name, value)) = rest.split_once("\"} ") {
                    up.insert(name, value.trim() == "1");
                }
            } else if let Some(value) = line.strip_prefix("rdma_exporter_async_tasks ") {
                tasks = value.trim().parse().ok();
            } else if line.starts_with("rdma_port_state{") {
                has_node = true;
            }
        }
        Scrape {
            up,
            tasks,
            has_node,
        }
    }
}

struct Sample {
    at_s: f64,
    rss_kib: f64,
    fds: f64,
    threads: f64,
    tasks: f64,
    cpu_s: f64,
}

/// Least-squares slope of `y` over `x`, per minute of `x` seconds.
fn slope_per_minute(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance * 60.0
    }
}

fn print_report(samples: &[Sample], tally: &Tally, seconds: u64) {
    println!(
        "\n{:>7} {:>9} {:>5} {:>8} {:>6} {:>8}",
        "t s", "RSS MiB", "fds", "threads", "tasks", "CPU s"
    );
    for s in samples {
        println!(
            "{:>7.0} {:>9.1} {:>5.0} {:>8.0} {:>6.0} {:>8.2}",
            s.at_s,
            s.rss_kib / 1024.0,
            s.fds,
            s.threads,
            s.tasks,
            s.cpu_s
        );
    }
    let after_warm_up: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_s >= WARM_UP.as_secs_f64())
        .collect();
    let series = |f: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        after_warm_up.iter().map(|s| (s.at_s, f(s))).collect()
    };
    let range = |f: fn(&Sample) -> f64| -> (f64, f64) {
        after_warm_up
            .iter()
            .map(|s| f(s))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    println!(
        "\nafter the {} s warm-up ({} samples):",
        WARM_UP.as_secs(),
        after_warm_up.len()
    );
    if after_warm_up.is_empty() {
        println!("  none: SOAK_SECONDS must exceed the warm-up for slopes");
    }
    for (name, unit, f) in [
        ("RSS", "KiB", (|s: &Sample| s.rss_kib) as fn(&Sample) -> f64),
        ("open fds", "", |s: &Sample| s.fds),
        ("threads", "", |s: &Sample| s.threads),
        ("async tasks", "", |s: &Sample| s.tasks),
    ] {
        if after_warm_up.is_empty() {
            break;
        }
        let (lo, hi) = range(f);
        // The second half alone tells a leak (steady) from the allocator settling (early).
        let all = series(f);
        let second_half: Vec<_> = all
            .iter()
            .copied()
            .filter(|(at, _)| *at >= seconds as f64 / 2.0)
            .collect();
        println!(
            "  {name:<12} slope {:+.2} {unit}/min (second half {:+.2})   min {lo:.0} max {hi:.0}",
            slope_per_minute(&all),
            slope_per_minute(&second_half)
        );
    }
    if let (Some(first), Some(last)) = (after_warm_up.first(), after_warm_up.last()) {
        let cpu = (last.cpu_s - first.cpu_s) / (last.at_s - first.at_s).max(1.0);
        println!("  CPU          {:.1}% of one core", cpu * 100.0);
    }
    let recoveries: Vec<u64> = tally.recoveries.values().copied().collect();
    println!(
        "scrapes {} in {seconds} s, failed {}; healthy switches seen down {} times; silent switches seen up {} times; scrapes without node series {}",
        tally.scrapes, tally.failed_scrapes, tally.stale_healthy, tally.silent_up, tally.node_missing
    );
    println!(
        "flapping switches that came back: {} of {FLAPPING}, recoveries each min {} max {}",
        recoveries.len(),
        recoveries.iter().min().unwrap_or(&0),
        recoveries.iter().max().unwrap_or(&0)
    );
}

/// Flapping switch `i`'s offset into the flap period: phases spread over the period.
fn phase(i: usize) -> Duration {
    FLAP_HALF_PERIOD * 2 * i as u32 / FLAPPING as u32
}

/// Whether a flapping switch answers, `since` into its (phase-shifted) period.
fn flap_is_up(since: Duration) -> bool {
    (since.as_secs() / FLAP_HALF_PERIOD.as_secs()).is_multiple_of(2)
}

/// A UDP relay in front of a live agent that answers for half a period and is gone for the
/// other half: dropping requests (a timeout) or with its port closed (refused).
struct Flapper {
    address: SocketAddr,
}

impl Flapper {
    fn start(
        agent: SocketAddr,
        phase: Duration,
        close_when_down: bool,
        stop: Arc<AtomicBool>,
    ) -> anyhow::Result<Flapper> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let address = socket.local_addr()?;
        let started = Instant::now();
        std::thread::spawn(move || {
            let mut socket = Some(socket);
            let upstream = UdpSocket::bind("127.0.0.1:0").expect("upstream socket");
            upstream
                .set_read_timeout(Some(Duration::from_millis(500)))
                .expect("timeout");
            let mut buf = vec![0u8; 65536];
            let mut answer = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let up = flap_is_up(started.elapsed() + phase);
                if !up && close_when_down {
                    socket = None;
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                if socket.is_none() {
                    // Back on the same port, as a rebooted switch would be.
                    match UdpSocket::bind(address) {
                        Ok(s) => socket = Some(s),
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    }
                }
                let relay = socket.as_ref().expect("bound above");
                relay
                    .set_read_timeout(Some(Duration::from_millis(100)))
                    .expect("timeout");
                let Ok((n, client)) = relay.recv_from(&mut buf) else {
                    continue;
                };
                if !up {
                    continue;
                }
                if upstream.send_to(&buf[..n], agent).is_ok() {
                    if let Ok((m, _)) = upstream.recv_from(&mut answer) {
                        let _ = relay.send_to(&answer[..m], client);
                    }
                }
            }
        });
        Ok(Flapper { address })
    }
}
