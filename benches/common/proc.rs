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
