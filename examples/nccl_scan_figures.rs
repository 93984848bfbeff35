//! Figures for the NCCL log collector of `serve` (issue 14): how long a scrape and a scan of
//! the log directory take, and the server's peak memory, on synthetic directories.
//!
//! ```sh
//! cargo run --release --example nccl_scan_figures -- generate DIR          # 256 x 4 MiB logs
//! cargo run --release --example nccl_scan_figures -- generate-hostile DIR  # 4 MB, 72 000 host:pid
//! cargo run --release --example nccl_scan_figures -- measure BINARY DIR [CONFIG.yml]
//! ```
//!
//! `measure` starts `BINARY serve` on the fixture node with `--collector.nccl.log-dir DIR` (and
//! the config file, for `nccl:` limits), then scrapes `/metrics` every second for 90 s
//! (`MEASURE_SECONDS`) with a
//! 120 s scrape timeout, and prints each scrape's latency, the NCCL collector's reported
//! duration, the series count, and the server's peak RSS (`VmHWM`). It prints figures and never
//! fails on a figure: the machine may be shared.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["generate", dir] => generate(Path::new(dir)),
        ["generate-hostile", dir] => generate_hostile(Path::new(dir)),
        ["measure", binary, dir] => measure(Path::new(binary), Path::new(dir), None),
        ["measure", binary, dir, config] => {
            measure(Path::new(binary), Path::new(dir), Some(Path::new(config)))
        }
        _ => {
            eprintln!("usage: generate DIR | generate-hostile DIR | measure BINARY DIR [CONFIG]");
            std::process::exit(2);
        }
    }
}

/// One communicator's setup and channels, as NCCL 2.21 prints it for rank `rank` of 16.
fn init_block(host: &str, pid: u32, comm: u32, rank: u32) -> String {
    let p = format!("{host}:{pid}:{}", pid + 40);
    let mut text = format!(
        "{p} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>\n\
         {p} [0] NCCL INFO Using non-device net plugin version 0\n\
         {p} [0] NCCL INFO Using network IB\n\
         {p} [0] NCCL INFO ncclCommInitRank comm 0x55d4e8a{comm:05x} rank {rank} nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x51515151{comm:08x} - Init START\n\
         {p} [0] NCCL INFO Setting affinity for GPU 0 to ffff,ffffffff\n\
         {p} [0] NCCL INFO comm 0x55d4e8a{comm:05x} rank {rank} nRanks 16 nNodes 2 localRanks 8 localRank {rank} MNNVL 0\n\
         {p} [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
    );
    for channel in 0..16 {
        text.push_str(&format!(
            "{p} [0] NCCL INFO Channel {channel:02}/0 : {}[0] -> {rank}[0] [receive] via NET/IB/0/GDRDMA\n\
             {p} [0] NCCL INFO Channel {channel:02}/0 : {rank}[0] -> {}[0] [send] via NET/IB/0/GDRDMA\n\
             {p} [0] NCCL INFO Channel {channel:02}/1 : {rank}[0] -> {}[0] via P2P/CUMEM/read\n",
            (rank + 15) % 16,
            (rank + 1) % 16,
            (rank + 1) % 16,
        ));
    }
    text.push_str(&format!(
        "{p} [0] NCCL INFO Connected all rings\n\
         {p} [0] NCCL INFO Connected all trees\n\
         {p} [0] NCCL INFO threadThresholds 8/8/64 | 128/8/64 | 512 | 512\n\
         {p} [0] NCCL INFO 16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer\n\
         {p} [0] NCCL INFO ncclCommInitRank comm 0x55d4e8a{comm:05x} rank {rank} nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x51515151{comm:08x} - Init COMPLETE\n"
    ));
    text
}

/// 256 files of 4 MiB: one process each, a long job that created many communicators.
fn generate(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for file in 0..256u32 {
        let host = format!("gpu-node-{:03}", file / 8);
        let pid = 4000 + file;
        let mut text = String::from("NCCL version 2.21.5+cuda12.4\n");
        let mut comm = 0;
        while text.len() < 4 << 20 {
            text.push_str(&init_block(&host, pid, comm, file % 8));
            comm += 1;
        }
        text.truncate(4 << 20);
        std::fs::write(dir.join(format!("{host}.{pid}.log")), text).unwrap();
    }
    println!("{}: 256 files of 4 MiB", dir.display());
}

/// One file of about 4 MB holding 72 000 distinct `host:pid` prefixes.
fn generate_hostile(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut text = String::new();
    for i in 0..72_000u32 {
        text.push_str(&format!(
            "gpu-node-{i:05}:{}:1 [0] NCCL INFO Using network IB\n",
            100_000 + i
        ));
    }
    std::fs::write(dir.join("hostile.log"), &text).unwrap();
    println!(
        "{}: 1 file of {} bytes, 72 000 processes",
        dir.display(),
        text.len()
    );
}

fn measure(binary: &Path, dir: &Path, config: Option<&Path>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let sys = root.join("tests/fixtures/cx7-roce/sys");
    let mut command = Command::new(binary);
    command
        .args(["serve", "--web.listen-address", "127.0.0.1:0"])
        .arg("--path.sysfs")
        .arg(&sys)
        .args([
            "--collector.ethtool.source",
            "none",
            "--no-collector.pfc-storm",
        ])
        .arg("--collector.nccl.log-dir")
        .arg(dir);
    if let Some(config) = config {
        command.arg("--config.file").arg(config);
    }
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the exporter");
    let started = Instant::now();
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
            {
                let _ = sender.send(address.to_string());
            }
        }
    });
    let address = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the exporter's address");
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(180))
        .build()
        .unwrap();
    println!("scrape  at_s  latency_s  status  series  nccl_success  nccl_duration_s  nccl_processes  dropped  partial  VmHWM_MiB");
    let mut scrape = 0;
    let seconds = std::env::var("MEASURE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    while started.elapsed() < Duration::from_secs(seconds) {
        scrape += 1;
        let at = started.elapsed();
        let asked = Instant::now();
        let response = client
            .get(format!("http://{address}/metrics"))
            .header("X-Prometheus-Scrape-Timeout-Seconds", "120")
            .send();
        let latency = asked.elapsed();
        let (status, body) = match response {
            Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        };
        let value = |prefix: &str| {
            body.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or("-")
                .to_string()
        };
        let series = body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        let processes = body
            .lines()
            .filter(|l| l.starts_with("rdma_nccl_process_info{"))
            .count();
        println!(
            "{scrape:>6}  {:>4.0}  {:>9.3}  {status:>6}  {series:>6}  {:>12}  {:>15}  {processes:>14}  {:>7}  {:>7}  {:>9.1}",
            at.as_secs_f64(),
            latency.as_secs_f64(),
            value(r#"rdma_exporter_collector_success{collector="nccl"}"#),
            value(r#"rdma_exporter_collector_duration_seconds{collector="nccl"}"#),
            value("rdma_nccl_processes_dropped"),
            value("rdma_nccl_scan_partial"),
            peak_rss_mib(child.id()),
        );
        std::io::stdout().flush().unwrap();
        std::thread::sleep(Duration::from_secs(1).saturating_sub(latency));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
