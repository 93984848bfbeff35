//! Process figures the benches share: CPU time and memory from /proc, free ports, load.

use anyhow::Context;
use rdma_fabric_exporter::process_metrics::{read_stat, ProcStat};

/// A port that was free a moment ago (node_exporter 1.5 does not report the port it bound).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `/proc/<pid>/stat` read as the exporter reads its own (`process_*` metrics).
pub fn proc_stat(pid: u32) -> anyhow::Result<ProcStat> {
    read_stat(Some(pid)).with_context(|| format!("reading /proc/{pid}/stat"))
}

/// utime + stime of all threads of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    Ok(proc_stat(pid)?.cpu_seconds)
}

/// CPU time of each thread of `pid` in nanoseconds (`/proc/<pid>/task/<tid>/schedstat`, first
/// field: time on the CPU). Nanoseconds, where `/proc/<pid>/stat` counts 10 ms ticks: a round of
/// a hundred 1 ms scrapes is a dozen ticks there, and one tick more or less moved a round's
/// figure by 8 %.
pub fn thread_cpu_ns(pid: u32) -> anyhow::Result<std::collections::HashMap<u32, u64>> {
    let tasks = format!("/proc/{pid}/task");
    let mut threads = std::collections::HashMap::new();
    for entry in std::fs::read_dir(&tasks).with_context(|| format!("listing {tasks}"))? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that ended since the listing has nothing more to add.
        let Ok(schedstat) = std::fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        let on_cpu = schedstat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{tasks}/{tid}/schedstat: {schedstat:?}"))?;
        threads.insert(tid, on_cpu);
    }
    Ok(threads)
}

/// CPU nanoseconds `pid`'s threads spent between two [`thread_cpu_ns`] readings: a thread
/// started in between counts from zero; one that ended in between loses its last stretch (the
/// exporters' threads are long-lived, so this is rare and small).
pub fn cpu_ns_between(
    before: &std::collections::HashMap<u32, u64>,
    after: &std::collections::HashMap<u32, u64>,
) -> u64 {
    after
        .iter()
        .map(|(tid, &now)| now.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// (VmRSS, VmHWM) of `pid` in KiB.
pub fn memory_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        Ok(line.trim().trim_end_matches("kB").trim().parse()?)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// A positive integer from the environment, or `default` when the variable is unset.
pub fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("{name}={v:?} is not a positive integer")),
        Err(_) => Ok(default),
    }
}
