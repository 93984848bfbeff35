//! Shared helpers for the integration tests: run the real binary, scrape it, parse exposition.
#![allow(dead_code)]

pub mod alerting;
pub mod corpus;
pub mod dcb_answer;
pub mod gnmi_target;
pub mod prometheus;
pub mod series;
pub mod snmp_agent;
pub mod stall;
pub mod victoria_metrics;
pub mod vm;

pub use series::assert_no_duplicate_series;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(relative: &str) -> PathBuf {
    project_root().join("tests/fixtures").join(relative)
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdma-fabric-exporter"))
}

/// Held for their whole run by the tests that measure time or memory, or that load the machine
/// (a simulated fabric, Prometheus, a flood of peers, a tight loop of renames), with their
/// module's name (`exclusive(module_path!())`): tests of one module may run together, as they
/// did in the binary each module used to be, but never beside such a test of another module, as
/// cargo ran those binaries one after the other. (libtest runs as many tests at once as there
/// are cores.)
pub fn exclusive(module: &'static str) -> Exclusive {
    let mut holder = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
    while holder.0.is_some_and(|m| m != module) {
        holder = RELEASED.wait(holder).unwrap_or_else(|e| e.into_inner());
    }
    holder.0 = Some(module);
    holder.1 += 1;
    Exclusive
}

/// The module holding `exclusive`, and how many of its tests hold it.
static EXCLUSIVE: std::sync::Mutex<(Option<&str>, usize)> = std::sync::Mutex::new((None, 0));
static RELEASED: std::sync::Condvar = std::sync::Condvar::new();

/// Releases `exclusive` when dropped (a failing test's too).
pub struct Exclusive;

impl Drop for Exclusive {
    fn drop(&mut self) {
        let mut holder = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
        holder.1 -= 1;
        if holder.1 == 0 {
            holder.0 = None;
            RELEASED.notify_all();
        }
    }
}

/// Whether the suite runs under CI: `CI` is set (CI services set `CI=true`; `.ci/run` sets
/// `CI=1` when it is missing), and not empty, `0` or `false`.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// A real component a test needs (a program, root, a kernel feature) is unavailable. Under CI
/// that fails the test; elsewhere the test prints `skipped: REASON` and the caller returns:
/// `return skip_or_fail("...")`.
#[track_caller]
pub fn skip_or_fail(reason: &str) {
    if under_ci() {
        panic!("{reason} (CI is set: a test that cannot run its real component fails instead of skipping)");
    }
    eprintln!("skipped: {reason}");
}

/// How long a child has to exit after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stops a child as a service manager would: SIGTERM, up to `STOP_GRACE` for it to exit (an
/// exporter or the demo cleans up on SIGTERM: the demo removes its fabric tree), then SIGKILL.
/// Always reaps it. Returns its exit status and whether it needed the SIGKILL.
pub fn stop(child: &mut Child) -> (Option<std::process::ExitStatus>, bool) {
    if let Ok(Some(status)) = child.try_wait() {
        return (Some(status), false);
    }
    // SAFETY: kill(2) on our own child, not yet reaped, so its pid is still ours.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + STOP_GRACE;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return (Some(status), false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let command = std::fs::read(format!("/proc/{}/cmdline", child.id()))
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .unwrap_or_default();
    eprintln!(
        "pid {} did not exit within {STOP_GRACE:?} of SIGTERM: killed ({})",
        child.id(),
        command.trim_end()
    );
    let _ = child.kill();
    (child.wait().ok(), true)
}

/// Any child process a test starts (Prometheus, Alertmanager, snmpsim, ...), stopped with
/// `stop` when dropped, so that no test leaves a process or its files behind.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// A running exporter process, stopped with SIGTERM (then SIGKILL) on drop. A demo must have
/// removed its fabric tree by then: a test whose demo left it behind fails.
pub struct Exporter {
    child: Child,
    pub address: String,
    /// Everything the exporter has logged so far.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let (_, killed) = stop(&mut self.child);
        // `demo` logs `fabric=<dir>`: the tree it writes, which it must remove on SIGTERM.
        let Some(fabric) = self.fabric_dir() else {
            return;
        };
        if fabric.exists() {
            // Never left behind, whichever way the test ends.
            let _ = std::fs::remove_dir_all(&fabric);
            if !killed && !std::thread::panicking() {
                panic!(
                    "the demo (pid {}) exited on SIGTERM but left its fabric {} behind",
                    self.child.id(),
                    fabric.display()
                );
            }
        }
    }
}

impl Exporter {
    /// Starts `rdma-fabric-exporter serve ARGS` on an ephemeral loopback port (port 0, so
    /// parallel tests never race for one) and reads the bound address from its log.
    pub fn start(args: &[&str]) -> Exporter {
        Exporter::start_subcommand("serve", args)
    }

    /// Starts `rdma-fabric-exporter SUBCOMMAND ARGS` (`serve` or `demo`) the same way.
    pub fn start_subcommand(subcommand: &str, args: &[&str]) -> Exporter {
        Exporter::start_with_env(subcommand, args, &[])
    }

    /// A `demo` of 2 hosts with `nics_per_host` NICs each, `start_at` simulated seconds into its
    /// scenario's cycle, the switches walked every `switch_interval`: small enough that several
    /// of them and a Prometheus fit on a 2-core machine.
    pub fn small_demo(
        scenario: &str,
        start_at: &str,
        switch_interval: &str,
        nics_per_host: &str,
    ) -> Exporter {
        Exporter::start_subcommand(
            "demo",
            &[
                "--scenario",
                scenario,
                "--start-at",
                start_at,
                "--switch-interval",
                switch_interval,
                "--hosts",
                "2",
                "--nics-per-host",
                nics_per_host,
            ],
        )
    }

    /// [`Exporter::start_subcommand`] with environment variables set for the exporter alone
    /// (`PATH` with stand-in tools first).
    pub fn start_with_env(subcommand: &str, args: &[&str], env: &[(&str, &str)]) -> Exporter {
        Exporter::start_configured(subcommand, args, |command| {
            command.envs(env.iter().copied());
        })
    }

    /// [`Exporter::start_subcommand`] with the command set up by `configure` first (its
    /// environment, what the child does before exec).
    pub fn start_configured(
        subcommand: &str,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Exporter {
        use std::io::BufRead;
        let mut command = Command::new(binary());
        configure(&mut command);
        let mut child = command
            .arg(subcommand)
            .args(["--web.listen-address", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the exporter");
        let (sender, receiver) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let shared_log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log_sink = shared_log.clone();
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut log = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                log.push_str(&line);
                log.push('\n');
                {
                    let mut shared = log_sink.lock().unwrap();
                    shared.push_str(&line);
                    shared.push('\n');
                }
                // After the line is in the shared log: a caller woken by the address reads
                // the rest of that line (a demo's `fabric=`) from `logs()` at once.
                if let Some(address) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("address="))
                {
                    let _ = sender.send(Ok(address.to_string()));
                }
            }
            let _ = sender.send(Err(log));
        });
        // A deadline, not a measure: a demo writes its trees before it listens, which takes
        // long on a machine loaded many times over.
        match receiver.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(address)) => Exporter {
                child,
                address,
                log: shared_log,
            },
            Ok(Err(log)) => {
                let status = child.wait().unwrap();
                panic!("exporter exited with {status} before listening:\n{log}")
            }
            Err(e) => {
                stop(&mut child);
                panic!("exporter did not report its address: {e}")
            }
        }
    }

    /// The exporter on a node: its sysfs tree and a directory of `ethtool -S` files, plus
    /// `extra` flags.
    pub fn on_node(sys: &Path, ethtool_stats: &Path, extra: &[&str]) -> Exporter {
        let mut args = vec![
            "--path.sysfs",
            path_str(sys),
            "--collector.ethtool.source",
            "files",
            "--collector.ethtool.stats-dir",
            path_str(ethtool_stats),
        ];
        args.extend_from_slice(extra);
        Exporter::start(&args)
    }

    /// The exporter on a sysfs tree alone (no ethtool statistics), plus `extra` flags.
    pub fn on_sysfs(sys: &Path, extra: &[&str]) -> Exporter {
        let mut args = vec![
            "--path.sysfs",
            path_str(sys),
            "--collector.ethtool.source",
            "none",
        ];
        args.extend_from_slice(extra);
        Exporter::start(&args)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `within` for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Where a `demo` writes its simulated fabric (it logs `fabric=<dir>` when listening).
    pub fn fabric_dir(&self) -> Option<PathBuf> {
        self.logs()
            .split_whitespace()
            .find_map(|w| w.strip_prefix("fabric="))
            .map(PathBuf::from)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    pub fn get(&self, path: &str) -> (u16, String, String) {
        get_with(&self.url(path), &[])
    }

    /// `/metrics`, asserted to answer 200 with no series twice: every test that fetches a
    /// whole body this way checks its integrity.
    pub fn metrics(&self) -> String {
        let (status, _, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        assert_no_duplicate_series(&body);
        body
    }
}

/// GET with extra headers; returns status, content type and body.
pub fn get_with(url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let client = reqwest::blocking::Client::new();
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("HTTP request");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_type, response.text().unwrap())
}

/// One sample of an exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the sample lines of a text exposition (0.0.4 or OpenMetrics); comments are skipped.
pub fn parse_exposition(body: &str) -> Vec<Sample> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect(line);
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').expect(line))),
                None => (series, BTreeMap::new()),
            };
            Sample {
                name: name.to_string(),
                labels,
                value,
            }
        })
        .collect()
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect(text);
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, escaped) = chars.next().unwrap();
                    value.push(match escaped {
                        'n' => '\n',
                        other => other,
                    });
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_string(), value);
        rest = after[end..].trim_start_matches(',');
    }
    labels
}

/// The samples named `name` whose labels include all of `labels`.
pub fn matching<'a>(
    samples: &'a [Sample],
    name: &'a str,
    labels: &'a [(&str, &str)],
) -> impl Iterator<Item = &'a Sample> {
    samples.iter().filter(move |s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
    })
}

/// The value of the one sample named `name` whose labels include all of `labels`.
pub fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<&Sample> = matching(samples, name, labels).collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {matching:?}"
    );
    matching.first().map(|s| s.value)
}

/// Runs `promtool check metrics` on a body and fails on any warning it prints (a metric name
/// holding its type, a counter without `_total`, a missing HELP...).
#[track_caller]
pub fn promtool_check_metrics(body: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: install Debian's `prometheus` package (scripts/test does)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool failed: {text}");
    assert_eq!(text, "", "promtool check metrics warns");
}

/// Runs `promtool ARGS` in the project root; returns its combined output, asserting success.
pub fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(project_root())
        .output()
        .expect("promtool not found: install Debian's `prometheus` package (scripts/test does)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// Scrapes `/metrics` every 100 ms until `check` holds for its samples, for up to `within`;
/// returns them and how long it took. A timeout fails with `what` and the switches' state.
pub fn wait_for_samples(
    exporter: &Exporter,
    what: &str,
    within: Duration,
    check: impl Fn(&[Sample]) -> bool,
) -> (Vec<Sample>, Duration) {
    let started = std::time::Instant::now();
    loop {
        let samples = parse_exposition(&exporter.metrics());
        if check(&samples) {
            return (samples, started.elapsed());
        }
        assert!(
            started.elapsed() < within,
            "timed out after {within:?} waiting for {what}; last errors: {:?}",
            samples
                .iter()
                .filter(|s| s.name == "rdma_switch_poll_errors_total" || s.name == "rdma_switch_up")
                .map(|s| format!("{}{:?}={}", s.name, s.labels, s.value))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A memory figure of process `pid` from /proc/PID/status, in KiB: `field` is VmRSS (now) or
/// VmHWM (peak).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Threads of process `pid` named `name` (`/proc/<pid>/task/*/comm`), and all its threads.
pub fn threads(pid: u32, name: &str) -> (usize, usize) {
    let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .collect();
    let named = tasks.iter().filter(|comm| comm.trim_end() == name).count();
    (named, tasks.len())
}

/// Runs the binary to completion with the given args; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(binary()).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Copies a directory tree (files and symlinks as they are, links not followed).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// One `/metrics` scrape that must answer 200 with no series twice, whatever moment of a
/// device's removal it hit.
pub fn scrape_without_duplicates(exporter: &Exporter) -> Vec<Sample> {
    parse_exposition(&exporter.metrics())
}

/// [`scrape_without_duplicates`], and how long the scrape took.
pub fn timed_scrape(exporter: &Exporter) -> (Vec<Sample>, Duration) {
    let started = std::time::Instant::now();
    let samples = scrape_without_duplicates(exporter);
    (samples, started.elapsed())
}

/// The simulated hosts of a default `demo`.
pub const DEMO_HOSTS: [&str; 4] = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"];

/// Every simulated host's node samples from `demo` (`/hosts/<host>/metrics`, each answering
/// 200 with no series twice), with a `host` label added.
pub fn demo_hosts_samples(demo: &Exporter) -> Vec<Sample> {
    let mut all = Vec::new();
    for host in DEMO_HOSTS {
        let (status, _, body) = demo.get(&format!("/hosts/{host}/metrics"));
        assert_eq!(status, 200, "{body}");
        assert_no_duplicate_series(&body);
        for mut sample in parse_exposition(&body) {
            sample.labels.insert("host".into(), host.into());
            all.push(sample);
        }
    }
    all
}

/// Each series of `name` in [`demo_hosts_samples`]' samples as `host device` and value, in
/// order (a NIC with several series of `name` appears once for each).
pub fn demo_values_by_nic(samples: &[Sample], name: &str) -> Vec<(String, f64)> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| {
            (
                format!("{} {}", s.labels["host"], s.labels["device"]),
                s.value,
            )
        })
        .collect()
}

/// Runs `ip ARGS`; the error says which command failed and why.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
