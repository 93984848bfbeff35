//! Switch polling bench: 50 simulated switches of 64 ports (IF-MIB, LLDP, per-priority PFC,
//! per-queue ECN marks and drops, as the arista_eos profile reads them), each an SNMP agent on
//! loopback. A round polls every switch once, 50 requests at a time, through our `/probe` and
//! through prometheus-snmp-exporter's `/snmp` walking the same OIDs from the same agents.
//! Prints wall time per round, CPU time per round and memory, side by side. Run with
//! `cargo bench --bench switch_poll` (BENCH_ROUNDS=N for more rounds).

mod common;
#[allow(dead_code)]
#[path = "../tests/common/snmp_agent.rs"]
mod snmp_agent;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use common::proc::{cpu_seconds, free_port, load_average, memory_kib};
use rdma_fabric_exporter::switch::profile::{
    Column, IndexPart, Metric, Profile, Profiles, SnmpValue as Value,
};

const SWITCHES: usize = 50;
const PORTS: u32 = 64;
const PROFILE: &str = "arista_eos";
const COMMUNITY: &str = "bench";
const DEFAULT_ROUNDS: usize = 10;
const SNMP_EXPORTER: &str = "/usr/bin/prometheus-snmp-exporter";

fn main() -> ExitCode {
    common::exit_code("switch", run())
}

fn run() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let profiles = Profiles::builtin()?;
    let profile = profiles.get(PROFILE).context("profile")?.clone();
    let table = Arc::new(snmp_agent::Table::new(switch_table(&profile)));
    let varbinds = table.len();
    // LLDP neighbours and PFC settings: walked every few minutes by us (`switch::settings`), at
    // every request by snmp_exporter.
    let setting_varbinds: usize = profile
        .columns
        .iter()
        .filter(|c| c.metric.changes_rarely())
        .map(|c| index_rows(c).len())
        .sum();

    // The agents live in this process, on their own runtime; both exporters poll the same ones.
    let runtime = tokio::runtime::Runtime::new()?;
    let agents: Vec<String> = runtime.block_on(async {
        let mut addresses = Vec::new();
        for _ in 0..SWITCHES {
            let (agent, task) = snmp_agent::serve_table(table.clone(), COMMUNITY.as_bytes()).await;
            std::mem::forget(task);
            addresses.push(agent.local_addr().to_string());
        }
        addresses
    });
    let dir = tempfile::tempdir()?;

    let ours = Server::ours(dir.path(), &agents)?;
    let mut targets = vec![Target {
        urls: (0..SWITCHES)
            .map(|i| format!("http://{}/probe?target=sw{i}", ours.address))
            .collect(),
        server: ours,
    }];
    match Server::snmp_exporter(dir.path(), &profile)? {
        Some(theirs) => targets.push(Target {
            urls: agents
                .iter()
                .map(|a| format!("http://{}/snmp?module=rfe&target={a}", theirs.address))
                .collect(),
            server: theirs,
        }),
        None => eprintln!(
            "\n*** {SNMP_EXPORTER} not found (apt-get install prometheus-snmp-exporter): our figures only ***\n"
        ),
    }

    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(SWITCHES)
        .build()?;
    // Warm-up round, and proof that both read the same values.
    let mut checks = Vec::new();
    for target in &targets {
        let bodies = target.round(&client)?.bodies;
        checks.push(spot_check(&bodies[5]));
    }
    println!("spot check (ifIndex 6, priority 3, rx PFC frames): {checks:?}");
    if checks.windows(2).any(|w| w[0] != w[1]) || checks.iter().any(Option::is_none) {
        bail!("the exporters disagree on a value: {checks:?}");
    }

    let mut results: Vec<Results> = targets
        .iter()
        .map(|t| Results {
            name: t.server.name,
            wall_ms: Vec::new(),
            cpu_ms: Vec::new(),
            series_per_switch: 0,
        })
        .collect();
    for round in 0..rounds {
        // Alternate the order so that noise falls on both.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        for index in order {
            let target = &targets[index];
            let cpu_before = cpu_seconds(target.server.child.id())?;
            let outcome = target.round(&client)?;
            let cpu = cpu_seconds(target.server.child.id())? - cpu_before;
            let result = &mut results[index];
            result.wall_ms.push(outcome.wall.as_secs_f64() * 1000.0);
            result.cpu_ms.push(cpu * 1000.0);
            result.series_per_switch = series(&outcome.bodies[0]);
        }
    }
    let mut report = String::new();
    writeln!(
        report,
        "\n{SWITCHES} switches x {PORTS} ports, profile {PROFILE}: {varbinds} varbinds per switch, \
         {rounds} rounds of {SWITCHES} concurrent polls; load average {}\n\
         our polls between settings walks (every {} s) read {} of them (LLDP and PFC settings kept); \
         snmp_exporter's read all\n",
        load_average(),
        rdma_fabric_exporter::switch::settings::DEFAULT_SETTINGS_INTERVAL.as_secs(),
        varbinds - setting_varbinds
    )?;
    writeln!(
        report,
        "| exporter | wall ms/round p50 | p90 | CPU ms/round p50 | RSS MiB | peak RSS MiB | series/switch |"
    )?;
    writeln!(report, "|---|---|---|---|---|---|---|")?;
    for (result, target) in results.iter_mut().zip(&targets) {
        let (rss, hwm) = memory_kib(target.server.child.id())?;
        result.wall_ms.sort_by(f64::total_cmp);
        result.cpu_ms.sort_by(f64::total_cmp);
        writeln!(
            report,
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} |",
            result.name,
            percentile(&result.wall_ms, 0.5),
            percentile(&result.wall_ms, 0.9),
            percentile(&result.cpu_ms, 0.5),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            result.series_per_switch
        )?;
    }
    if let [ours, theirs] = results.as_slice() {
        writeln!(
            report,
            "\nratio ours/snmp_exporter: wall {:.2}x, CPU {:.2}x (target: wall <= 1, CPU < 1)",
            percentile(&ours.wall_ms, 0.5) / percentile(&theirs.wall_ms, 0.5),
            percentile(&ours.cpu_ms, 0.5) / percentile(&theirs.cpu_ms, 0.5),
        )?;
    }
    print!("{report}");
    failing_targets(dir.path())
}

/// Memory and descriptors of the exporter while every switch fails: 25 SNMP targets that never
/// answer and 25 gNMI targets whose port is closed, polled every second. Both must stay flat.
fn failing_targets(dir: &Path) -> anyhow::Result<()> {
    let seconds: u64 = std::env::var("BENCH_FAIL_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let silent: Vec<std::net::UdpSocket> = (0..SWITCHES / 2)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let mut config = String::from("node: {enabled: false}\nswitches:\n");
    let community = dir.join("community");
    for (i, socket) in silent.iter().enumerate() {
        writeln!(
            config,
            "  - {{name: snmp{i}, address: '{}', profile: {PROFILE}, interval: 1s, timeout: 200ms, retries: 1, snmp: {{version: 2c, community_file: '{}'}}}}",
            socket.local_addr()?,
            community.display()
        )?;
    }
    for i in 0..SWITCHES / 2 {
        writeln!(
            config,
            "  - {{name: gnmi{i}, address: '127.0.0.1:{}', protocol: gnmi, profile: sonic, interval: 1s, timeout: 200ms, gnmi: {{}}}}",
            free_port()?
        )?;
    }
    let path = dir.join("failing.yml");
    std::fs::write(&path, config)?;
    let server = Server::ours_with_config(&path)?;
    let pid = server.child.id();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count());
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(5));
        let (rss, _) = memory_kib(pid)?;
        samples.push((started.elapsed().as_secs_f64(), rss as f64 / 1024.0, fds()?));
    }
    // Least-squares slope of RSS over time, after the first sample (start-up allocations).
    let points = &samples[1.min(samples.len())..];
    let n = points.len() as f64;
    let (mean_t, mean_m) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let slope = points
        .iter()
        .map(|p| (p.0 - mean_t) * (p.1 - mean_m))
        .sum::<f64>()
        / points.iter().map(|p| (p.0 - mean_t).powi(2)).sum::<f64>();
    println!(
        "\n{} failing switches (half SNMP silent, half gNMI refused) polled every 1s for {seconds}s:",
        SWITCHES
    );
    println!("| t s | RSS MiB | open fds |\n|---|---|---|");
    for (t, rss, fds) in &samples {
        println!("| {t:.0} | {rss:.1} | {fds} |");
    }
    println!(
        "RSS slope after the first sample: {:.1} KiB/min",
        slope * 1024.0 * 60.0
    );
    Ok(())
}

/// Every row the profile's columns read, for `PORTS` ports: eight priorities and queues.
fn switch_table(profile: &Profile) -> snmp_agent::Rows {
    let mut table = snmp_agent::Rows::new();
    for column in &profile.columns {
        for suffix in index_rows(column) {
            let mut oid = column.oid.clone();
            oid.extend_from_slice(&suffix);
            let port = suffix
                .iter()
                .zip(&column.index)
                .find(|(_, part)| matches!(part, IndexPart::IfIndex | IndexPart::LocalPort))
                .map_or(0, |(arc, _)| *arc);
            let value = value(column, port, &oid);
            table.push((oid, value));
        }
    }
    table
}

fn index_rows(column: &Column) -> Vec<Vec<u32>> {
    let mut rows = vec![Vec::new()];
    let mut anys = 0;
    for part in &column.index {
        let choices: Vec<u32> = match part {
            IndexPart::IfIndex | IndexPart::LocalPort => (1..=PORTS).collect(),
            IndexPart::Priority => (0..8).collect(),
            IndexPart::Queue => (column.queue_base..column.queue_base + 8).collect(),
            IndexPart::Equals(n) => vec![*n],
            IndexPart::Any => {
                anys += 1;
                vec![anys - 1]
            }
        };
        rows = rows
            .into_iter()
            .flat_map(|row| {
                choices.iter().map(move |c| {
                    let mut next = row.clone();
                    next.push(*c);
                    next
                })
            })
            .collect();
    }
    rows
}

fn value(column: &Column, port: u32, oid: &[u32]) -> Value {
    // A counter value that differs per row but is the same for every switch and run.
    let counter = oid.iter().fold(1469598103934665603u64, |h, a| {
        (h ^ u64::from(*a)).wrapping_mul(1099511628211)
    }) >> 20;
    match column.metric {
        Metric::IfName => Value::OctetString(format!("Ethernet{port}/1").into_bytes()),
        Metric::IfAlias => Value::OctetString(format!("gpu-node-{port:03} mlx5_0").into_bytes()),
        Metric::LldpRemoteSystemName => {
            Value::OctetString(format!("gpu-node-{port:03}").into_bytes())
        }
        Metric::LldpRemotePortId | Metric::LldpRemotePortDescription => {
            Value::OctetString("ens1f0np0".into())
        }
        Metric::OperStatus => Value::Integer(1),
        // ifTable columns are 32-bit.
        _ if column.oid.starts_with(&[1, 3, 6, 1, 2, 1, 2, 2, 1]) => {
            Value::Counter32(counter as u32)
        }
        _ => Value::Counter64(counter),
    }
}

/// The spot-checked value, whatever the exporter calls it.
fn spot_check(body: &str) -> Option<u64> {
    body.lines().find_map(|line| {
        let ours = line.starts_with("rdma_switch_port_pfc_frames_total{")
            && line.contains("port=\"Ethernet6/1\"")
            && line.contains("priority=\"3\"")
            && line.contains("direction=\"rx\"");
        let theirs = line.starts_with("aristaPfcPriorityIndications{")
            && line.contains("ifIndex=\"6\"")
            && line.contains("priority=\"3\"");
        (ours || theirs).then(|| {
            line.rsplit_once(' ')?
                .1
                .parse::<f64>()
                .ok()
                .map(|v| v as u64)
        })?
    })
}

fn series(body: &str) -> usize {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct Results {
    name: &'static str,
    wall_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
    series_per_switch: usize,
}

struct Target {
    server: Server,
    urls: Vec<String>,
}

struct Round {
    wall: Duration,
    bodies: Vec<String>,
}

impl Target {
    /// Polls every switch once, all at the same time, as Prometheus scraping 50 probes would.
    fn round(&self, client: &reqwest::blocking::Client) -> anyhow::Result<Round> {
        let started = Instant::now();
        let bodies: Vec<anyhow::Result<String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .urls
                .iter()
                .map(|url| {
                    scope.spawn(move || -> anyhow::Result<String> {
                        let response = client.get(url).send()?;
                        let status = response.status();
                        let body = response.text()?;
                        if !status.is_success() {
                            bail!("{url}: {status}: {body}");
                        }
                        Ok(body)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("poll thread"))
                .collect()
        });
        let wall = started.elapsed();
        let bodies = bodies.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        // Every answer must carry the switch's PFC counters: a failed walk is not a fast one.
        if let Some(body) = bodies.iter().find(|b| spot_check(b).is_none()) {
            bail!("{}: a switch was not read: {body:.600}", self.server.name);
        }
        Ok(Round { wall, bodies })
    }
}

struct Server {
    name: &'static str,
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn ours(dir: &Path, agents: &[String]) -> anyhow::Result<Server> {
        let community = dir.join("community");
        std::fs::write(&community, COMMUNITY)?;
        // Read on demand only, as snmp_exporter: no background poll besides the measured ones.
        let mut config =
            String::from("node: {enabled: false}\nswitch_polling: on_demand\nswitches:\n");
        for (i, address) in agents.iter().enumerate() {
            writeln!(
                config,
                "  - {{name: sw{i}, address: '{address}', profile: {PROFILE}, interval: 30s, timeout: 5s, retries: 1, max_repetitions: 25, snmp: {{version: 2c, community_file: '{}'}}}}",
                community.display()
            )?;
        }
        let path = dir.join("config.yml");
        std::fs::write(&path, config)?;
        Server::ours_with_config(&path)
    }

    fn ours_with_config(path: &Path) -> anyhow::Result<Server> {
        let binary = std::env::var_os("RFE_BINARY")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rdma-fabric-exporter")));
        let mut child = Command::new(binary)
            .args([
                "serve",
                "--web.listen-address",
                "127.0.0.1:0",
                "--log.format",
                "text",
            ])
            .arg("--config.file")
            .arg(path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let address = loop {
            let line = lines
                .next()
                .context("the exporter exited before listening")??;
            if let Some(address) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
            {
                break address.to_string();
            }
        };
        // Keep draining the log so that the exporter never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Server {
            name: "rdma-fabric-exporter",
            child,
            address,
        })
    }

    /// snmp_exporter with one module walking the profile's columns and exporting each.
    fn snmp_exporter(dir: &Path, profile: &Profile) -> anyhow::Result<Option<Server>> {
        let binary = std::env::var("SNMP_EXPORTER").unwrap_or_else(|_| SNMP_EXPORTER.into());
        if !Path::new(&binary).exists() {
            return Ok(None);
        }
        let oid = |arcs: &[u32]| {
            arcs.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(".")
        };
        let mut config = String::from("rfe:\n  walk:\n");
        for root in profile.walk_roots() {
            writeln!(config, "  - {}", oid(&root))?;
        }
        writeln!(
            config,
            "  version: 2\n  max_repetitions: 25\n  retries: 1\n  timeout: 5s\n  auth:\n    community: {COMMUNITY}\n  metrics:"
        )?;
        for column in &profile.columns {
            let kind = match column.metric {
                m if m.is_text() => "DisplayString",
                Metric::OperStatus => "gauge",
                _ => "counter",
            };
            writeln!(
                config,
                "  - name: {}\n    oid: {}\n    type: {kind}\n    indexes:",
                column.name,
                oid(&column.oid)
            )?;
            let mut anys = 0;
            for part in &column.index {
                let label = match part {
                    IndexPart::IfIndex | IndexPart::LocalPort => "ifIndex".to_string(),
                    IndexPart::Priority => "priority".to_string(),
                    IndexPart::Queue => "queue".to_string(),
                    IndexPart::Equals(_) | IndexPart::Any => {
                        anys += 1;
                        format!("index{anys}")
                    }
                };
                writeln!(config, "    - labelname: {label}\n      type: gauge")?;
            }
        }
        let path = dir.join("snmp.yml");
        std::fs::write(&path, config)?;
        let port = free_port()?;
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", path.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {binary}"))?;
        let server = Server {
            name: "snmp_exporter",
            child,
            address: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while reqwest::blocking::get(format!("http://{}/metrics", server.address)).is_err() {
            if Instant::now() > deadline {
                bail!("snmp_exporter did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(server))
    }
}
