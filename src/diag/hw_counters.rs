//! `hw-counters` (hidden, for the real-kernel suite and its bench): every RDMA port's hardware
//! counters as the scrape-time readers get them, over RDMA netlink (one `STAT_GET` a port,
//! [`crate::node::hw_netlink`]) or from the sysfs files (one `pread` a counter, descriptors
//! kept open as the walk's kept trees keep them). Printed as
//! `<device>/ports/<n>/hw_counters/<name> <value>` lines, what the VM's `cat` loop writes; or,
//! with `--bench ROUNDS`, both readers timed on the same ports, alternated round by round, in
//! CPU time of the reading thread (the kernel's work for a netlink request or a `pread` runs in
//! that thread, so it is counted).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::node::counter_filter::CounterFilter;
use crate::node::hw_netlink::{values_of, DeviceLink, Miss, NetlinkHwCounters, LIFESPAN};
use crate::node::parse;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Reader {
    Netlink,
    Sysfs,
}

#[derive(Debug, clap::Args)]
pub struct HwCountersArgs {
    /// sysfs mount point.
    #[arg(long = "path.sysfs", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// The reader whose values are printed.
    #[arg(long, value_enum, default_value = "netlink")]
    pub source: Reader,
    /// Time both readers over this many alternated rounds instead of printing.
    #[arg(long, value_name = "ROUNDS")]
    pub bench: Option<u32>,
}

/// One port with `hw_counters/`: its listing and a descriptor per counter file.
struct PortFiles {
    device: String,
    port: u32,
    names: Vec<Box<str>>,
    files: Vec<File>,
}

pub fn main(args: &HwCountersArgs) -> ExitCode {
    match run(args) {
        Ok(text) => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hw-counters: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &HwCountersArgs) -> Result<String, String> {
    let ports = ports(&args.sysfs)?;
    if ports.is_empty() {
        return Err(format!(
            "no port with hw_counters below {}",
            args.sysfs.display()
        ));
    }
    let netlink = NetlinkHwCounters::kernel(Duration::from_secs(2));
    let links: Vec<Arc<Mutex<DeviceLink>>> =
        ports.iter().map(|p| netlink.link(&p.device)).collect();
    match args.bench {
        Some(rounds) => bench(&ports, &links, rounds.max(1)),
        None => {
            let mut out = String::new();
            for (port, link) in ports.iter().zip(&links) {
                let pairs = match args.source {
                    Reader::Sysfs => read_files(port)?,
                    Reader::Netlink => lock(link)
                        .port_counters(port.port)
                        .map_err(|m| describe(port, &m))?,
                };
                for (name, value) in pairs {
                    out += &format!(
                        "{}/ports/{}/hw_counters/{name} {value}\n",
                        port.device, port.port
                    );
                }
            }
            Ok(out)
        }
    }
}

fn lock(link: &Mutex<DeviceLink>) -> std::sync::MutexGuard<'_, DeviceLink> {
    link.lock().unwrap_or_else(|p| p.into_inner())
}

fn describe(port: &PortFiles, miss: &Miss) -> String {
    format!("{}/{}: netlink: {miss:?}", port.device, port.port)
}

/// Every port of every device below `<sysfs>/class/infiniband` that has `hw_counters/`.
fn ports(sysfs: &Path) -> Result<Vec<PortFiles>, String> {
    let class = sysfs.join("class/infiniband");
    let mut out = Vec::new();
    for device in sorted_names(&class)? {
        let ports_dir = class.join(&device).join("ports");
        let mut numbers: Vec<u32> = sorted_names(&ports_dir)?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        numbers.sort_unstable();
        for port in numbers {
            let dir = ports_dir.join(port.to_string()).join("hw_counters");
            if !dir.is_dir() {
                continue;
            }
            let names: Vec<Box<str>> = sorted_names(&dir)?.into_iter().map(Into::into).collect();
            let files = names
                .iter()
                .map(|n| File::open(dir.join(&**n)).map_err(|e| format!("{}: {e}", dir.display())))
                .collect::<Result<_, _>>()?;
            out.push(PortFiles {
                device: device.clone(),
                port,
                names,
                files,
            });
        }
    }
    Ok(out)
}

fn sorted_names(dir: &Path) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort_unstable();
    Ok(names)
}

fn read_file(file: &File, buf: &mut [u8; 64]) -> Result<u64, String> {
    let n = file.read_at(buf, 0).map_err(|e| e.to_string())?;
    parse::counter(&buf[..n]).map_err(|e| e.to_string())
}

/// The files' values, `lifespan` included (it is one of the files).
fn read_files(port: &PortFiles) -> Result<Vec<(String, u64)>, String> {
    let mut buf = [0u8; 64];
    port.names
        .iter()
        .zip(&port.files)
        .map(|(name, file)| Ok((name.to_string(), read_file(file, &mut buf)?)))
        .collect()
}

/// What the walk does for a port over netlink: one request, and `lifespan`'s file.
fn read_netlink(port: &PortFiles, link: &Mutex<DeviceLink>) -> Result<usize, String> {
    let values = lock(link)
        .port_values(port.port, &port.names, &CounterFilter::ALL)
        .map_err(|m| describe(port, &m))?;
    let mut read = values.iter().flatten().count();
    if let Some(at) = port.names.iter().position(|n| &**n == LIFESPAN) {
        read_file(&port.files[at], &mut [0; 64])?;
        read += 1;
    }
    Ok(read)
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one valid timespec; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// (CPU, wall) of one read of every port by `read`.
fn timed(mut read: impl FnMut() -> Result<usize, String>) -> Result<(f64, f64, usize), String> {
    let (cpu, wall) = (thread_cpu(), Instant::now());
    let values = read()?;
    let cpu = (thread_cpu() - cpu).as_secs_f64() * 1e6;
    Ok((cpu, wall.elapsed().as_secs_f64() * 1e6, values))
}

fn bench(
    ports: &[PortFiles],
    links: &[Arc<Mutex<DeviceLink>>],
    rounds: u32,
) -> Result<String, String> {
    let files = || -> Result<usize, String> {
        let mut buf = [0u8; 64];
        let mut read = 0;
        for port in ports {
            for file in &port.files {
                read_file(file, &mut buf)?;
                read += 1;
            }
        }
        Ok(read)
    };
    let netlink = || -> Result<usize, String> {
        let mut read = 0;
        for (port, link) in ports.iter().zip(links) {
            read += read_netlink(port, link)?;
        }
        Ok(read)
    };
    // The user-space half of the netlink reader alone: each port's answer decoded and matched
    // to its listing, no syscall.
    let answers: Vec<Vec<u8>> = ports
        .iter()
        .zip(links)
        .map(|(port, link)| {
            lock(link)
                .port_answer(port.port)
                .map_err(|m| describe(port, &m))
        })
        .collect::<Result<_, _>>()?;
    let decode = || -> Result<usize, String> {
        let mut read = 0;
        for (port, answer) in ports.iter().zip(&answers) {
            let values = values_of(answer, &port.names, &CounterFilter::ALL)
                .map_err(|m| describe(port, &m))?;
            read += values.iter().flatten().count();
        }
        Ok(read)
    };
    // Warm-up: sockets open, device indexes known, both paths' caches warm.
    for _ in 0..3 {
        files()?;
        netlink()?;
    }
    let (mut sysfs, mut nl, mut decoded) = (Vec::new(), Vec::new(), Vec::new());
    let mut counted = (0, 0);
    for round in 0..rounds {
        // Alternated, and which goes first alternates too.
        let (a, b) = if round % 2 == 0 {
            (timed(files)?, timed(netlink)?)
        } else {
            let b = timed(netlink)?;
            (timed(files)?, b)
        };
        counted = (a.2, b.2);
        sysfs.push((a.0, a.1));
        nl.push((b.0, b.1));
        let c = timed(decode)?;
        decoded.push((c.0, c.1));
    }
    let ratios: Vec<f64> = sysfs.iter().zip(&nl).map(|(s, n)| n.0 / s.0).collect();
    let counters: usize = ports.iter().map(|p| p.names.len()).sum();
    let devices = {
        let mut d: Vec<&str> = ports.iter().map(|p| p.device.as_str()).collect();
        d.dedup();
        d.len()
    };
    let line = |label: &str, samples: &[(f64, f64)], values: usize| {
        let cpu: Vec<f64> = samples.iter().map(|s| s.0).collect();
        let wall: Vec<f64> = samples.iter().map(|s| s.1).collect();
        format!(
            "{label}: CPU per read of all ports {:.1} us mean, {:.1} us median; wall {:.1} us median; {values} values\n",
            mean(&cpu),
            percentile(&cpu, 0.5),
            percentile(&wall, 0.5),
        )
    };
    let sysfs_cpu: Vec<f64> = sysfs.iter().map(|s| s.0).collect();
    let nl_cpu: Vec<f64> = nl.iter().map(|s| s.0).collect();
    Ok(format!(
        "hw-counters bench: {devices} devices, {} ports, {counters} hw_counters files, {rounds} rounds alternated\n{}{}{}netlink/sysfs CPU ratio: {:.3} (of means); per-round ratio median {:.3}, 10th-90th percentile {:.3}-{:.3}\n",
        ports.len(),
        line("sysfs   (one pread a counter)", &sysfs, counted.0),
        line("netlink (one STAT_GET a port)", &nl, counted.1),
        line("  of which decoding and matching the answers", &decoded, counted.1 - lifespans(ports)),
        mean(&nl_cpu) / mean(&sysfs_cpu),
        percentile(&ratios, 0.5),
        percentile(&ratios, 0.1),
        percentile(&ratios, 0.9),
    ))
}

/// Ports with a `lifespan` file (read from the file by the netlink reader too).
fn lifespans(ports: &[PortFiles]) -> usize {
    ports
        .iter()
        .filter(|p| p.names.iter().any(|n| &**n == LIFESPAN))
        .count()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = ((sorted.len().saturating_sub(1)) as f64 * q).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of the bundled ConnectX-7 node, as the sysfs reader prints them.
    #[test]
    fn the_files_reader_reads_every_port_of_a_tree() {
        let sys = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cx7-roce/sys");
        let text = run(&HwCountersArgs {
            sysfs: sys.clone(),
            source: Reader::Sysfs,
            bench: None,
        })
        .unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("mlx5_0/ports/1/hw_counters/np_cnp_sent "))
            .unwrap();
        assert_eq!(line, "mlx5_0/ports/1/hw_counters/np_cnp_sent 5832481");
        let files = std::fs::read_dir(sys.join("class/infiniband/mlx5_0/ports/1/hw_counters"))
            .unwrap()
            .count();
        assert_eq!(
            text.lines().filter(|l| l.starts_with("mlx5_0/")).count(),
            files
        );
        assert!(run(&HwCountersArgs {
            sysfs: PathBuf::from("/nonexistent"),
            source: Reader::Sysfs,
            bench: None,
        })
        .is_err());
    }

    #[test]
    fn percentiles_of_a_few_values() {
        let values = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(percentile(&values, 0.5), 3.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert_eq!(percentile(&values, 1.0), 5.0);
        assert_eq!(mean(&values), 3.0);
    }
}
