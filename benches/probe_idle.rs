//! The probing loop's own cost at the default rate, polled against sleeping.
//!
//! `cargo bench --bench probe_idle`. BENCH_HOSTS hosts (default 4) of 8 ports each run their
//! probing loops (`probe::agent`) in this process over the memory fabric, every host probing
//! the others as an agent does with its peer list, at the default settings (1 s rounds, 12
//! targets a port: 96 probes a second a host). The endpoints stamp arrivals when they are
//! polled, as soft-RoCE and other verbs devices without completion timestamps do, so a loop
//! that wakes late shows in the round trips.
//!
//! Two modes, alternated BENCH_ROUNDS times (default 2) for BENCH_SECONDS each (default 20,
//! after 3 s of warm-up): `polled`, whose endpoints give no descriptor to sleep on (the loop
//! before it slept on completion channels, and what it still does for a device without them),
//! and `sleeping`. Printed per mode: each host's `rfe-probe` thread CPU (from
//! `/proc/self/task/*/schedstat`) as a share of one core, its wake-ups a second (voluntary
//! context switches), probes sent and lost, and the mean network round trip; then the ratio.
//! BENCH_MODE=polled or sleeping runs one mode alone (for `perf record`).

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdma_fabric_exporter::probe::agent::{Agent, LocalPort, Peer, Settings};
use rdma_fabric_exporter::probe::memory::MemoryFabric;
use rdma_fabric_exporter::probe::rtt::Clock;
use rdma_fabric_exporter::probe::stats::Stats;
use rdma_fabric_exporter::probe::targets::Port;
use rdma_fabric_exporter::sim::probing::gid;

mod common;

const PORTS: usize = 8;
/// The fabric's one-way delay: a packet over one leaf.
const DELAY_NS: u64 = 5_000;

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) => text.parse().with_context(|| format!("{name}={text:?}")),
        Err(_) => Ok(default),
    }
}

fn ports(memory: &MemoryFabric, host: usize) -> Vec<LocalPort> {
    (0..PORTS)
        .map(|n| LocalPort {
            port: Port {
                host: format!("host-{host:02}"),
                device: format!("mlx5_{n}"),
                port: 1,
                rail: n as u32,
                leaf: None,
            },
            netdev: String::new(),
            traffic_class: 104,
            responder: Box::new(memory.endpoint_with_clock(gid(host, n), 1, 7, Clock::Software)),
            prober: Box::new(memory.endpoint_with_clock(gid(host, n), 2, 7, Clock::Software)),
        })
        .collect()
}

/// What one mode's window measured.
#[derive(Default, Clone, Copy)]
struct Figures {
    /// Mean `rfe-probe` thread CPU, share of one core.
    cpu_per_host: f64,
    wakeups_per_second: f64,
    sent: u64,
    lost: u64,
    rtt_mean_us: f64,
}

/// Each `rfe-probe` thread's (CPU ns, voluntary context switches).
fn probe_threads() -> anyhow::Result<HashMap<u32, (u64, u64)>> {
    let mut threads = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let path = entry?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "rfe-probe" {
            continue;
        }
        let tid: u32 = path.file_name().unwrap().to_string_lossy().parse()?;
        let schedstat = std::fs::read_to_string(path.join("schedstat"))?;
        let cpu_ns: u64 = schedstat.split_whitespace().next().unwrap_or("0").parse()?;
        let status = std::fs::read_to_string(path.join("status"))?;
        let switches: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .context("no voluntary_ctxt_switches")?
            .trim()
            .parse()?;
        threads.insert(tid, (cpu_ns, switches));
    }
    Ok(threads)
}

/// Probes sent, lost and answered, and the network round trips' sum, over all agents.
fn totals(stats: &[Stats]) -> (u64, u64, u64, f64) {
    let mut t = (0, 0, 0, 0.0);
    for port in stats.iter().flat_map(|s| &s.ports) {
        t.0 += port.sent.iter().sum::<u64>();
        t.1 += port.lost.iter().sum::<u64>();
        t.2 += port.network_rtt.count;
        t.3 += port.network_rtt.sum;
    }
    t
}

fn measure(polled: bool, hosts: usize, window: Duration) -> anyhow::Result<Figures> {
    let memory = MemoryFabric::new(Box::new(|_, _, _| Some(DELAY_NS)));
    let memory = if polled { memory.polled() } else { memory };
    let agents: Vec<Agent> = (0..hosts)
        .map(|h| Agent::spawn(ports(&memory, h), Settings::default()))
        .collect::<Result<_, _>>()?;
    let published: Vec<Vec<Peer>> = agents.iter().map(Agent::addresses).collect();
    for (h, agent) in agents.iter().enumerate() {
        let peers = published
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != h)
            .flat_map(|(_, p)| p.iter().cloned())
            .collect();
        agent.set_peers(peers);
    }
    std::thread::sleep(Duration::from_secs(3));
    let (threads_before, stats_before) = (
        probe_threads()?,
        agents.iter().map(Agent::stats).collect::<Vec<_>>(),
    );
    let start = Instant::now();
    std::thread::sleep(window);
    let (threads_after, stats_after) = (
        probe_threads()?,
        agents.iter().map(Agent::stats).collect::<Vec<_>>(),
    );
    let seconds = start.elapsed().as_secs_f64();
    drop(agents);
    if threads_after.len() != hosts {
        bail!(
            "{} rfe-probe threads, expected {hosts}",
            threads_after.len()
        );
    }
    let (mut cpu_ns, mut switches) = (0u64, 0u64);
    for (tid, (cpu, sw)) in &threads_after {
        let (cpu0, sw0) = threads_before.get(tid).copied().unwrap_or_default();
        cpu_ns += cpu - cpu0;
        switches += sw - sw0;
    }
    let (s0, l0, n0, r0) = totals(&stats_before);
    let (s1, l1, n1, r1) = totals(&stats_after);
    Ok(Figures {
        cpu_per_host: cpu_ns as f64 / 1e9 / seconds / hosts as f64,
        wakeups_per_second: switches as f64 / seconds / hosts as f64,
        sent: s1 - s0,
        lost: l1 - l0,
        rtt_mean_us: if n1 > n0 {
            (r1 - r0) / (n1 - n0) as f64 * 1e6
        } else {
            f64::NAN
        },
    })
}

fn run() -> anyhow::Result<()> {
    let hosts = env_number("BENCH_HOSTS", 4)? as usize;
    let seconds = env_number("BENCH_SECONDS", 20)?;
    let rounds = env_number("BENCH_ROUNDS", 2)?;
    // One mode alone, for a profile of it.
    let only = match std::env::var("BENCH_MODE").as_deref() {
        Err(_) => None,
        Ok("polled") => Some(true),
        Ok("sleeping") => Some(false),
        Ok(other) => bail!("BENCH_MODE={other:?}: polled or sleeping"),
    };
    println!(
        "probe_idle: {hosts} hosts x {PORTS} ports, default settings, {seconds} s a window, \
         {rounds} rounds, load {}",
        common::proc::load_average()
    );
    println!(
        "{:<9} {:>14} {:>16} {:>8} {:>6} {:>14}",
        "mode", "CPU a host", "wake-ups/s a host", "sent", "lost", "mean RTT (µs)"
    );
    let mut sums = [Figures::default(); 2];
    for _ in 0..rounds {
        for (i, polled) in [true, false].into_iter().enumerate() {
            if only.is_some_and(|mode| mode != polled) {
                continue;
            }
            let f = measure(polled, hosts, Duration::from_secs(seconds))?;
            println!(
                "{:<9} {:>13.2}% {:>16.0} {:>8} {:>6} {:>14.1}",
                if polled { "polled" } else { "sleeping" },
                f.cpu_per_host * 100.0,
                f.wakeups_per_second,
                f.sent,
                f.lost,
                f.rtt_mean_us
            );
            let s = &mut sums[i];
            s.cpu_per_host += f.cpu_per_host / rounds as f64;
            s.wakeups_per_second += f.wakeups_per_second / rounds as f64;
            s.rtt_mean_us += f.rtt_mean_us / rounds as f64;
            s.sent += f.sent;
            s.lost += f.lost;
        }
    }
    let [polled, sleeping] = sums;
    println!(
        "mean: polled {:.2}% ({:.0} wake-ups/s, RTT {:.1} µs), sleeping {:.2}% ({:.0} wake-ups/s, \
         RTT {:.1} µs); CPU sleeping/polled {:.2}x; lost {} / {} and {} / {}; load {}",
        polled.cpu_per_host * 100.0,
        polled.wakeups_per_second,
        polled.rtt_mean_us,
        sleeping.cpu_per_host * 100.0,
        sleeping.wakeups_per_second,
        sleeping.rtt_mean_us,
        sleeping.cpu_per_host / polled.cpu_per_host,
        polled.lost,
        polled.sent,
        sleeping.lost,
        sleeping.sent,
        common::proc::load_average()
    );
    Ok(())
}

fn main() -> ExitCode {
    common::exit_code("probe_idle", run())
}
