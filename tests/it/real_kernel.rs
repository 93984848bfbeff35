//! The exporter on a real kernel: Debian 12's stock kernel booted under QEMU by `scripts/vm/boot`,
//! two soft-RoCE devices (`rdma_rxe`) on a veth pair, real RDMA traffic (perftest RC and UD,
//! `ibv_rc_pingpong`) and real faults (netem loss, link down, `rdma link delete`, `rmmod`); a
//! third soft-RoCE device on a virtio-net function behind a PCIe root port (`--pcie`) for its
//! PCIe link.
//!
//! TCG is slow, so the guest boots once for the whole module: `tests/real_kernel/guest.sh`
//! runs every phase and writes what the exporter, `cat`, `rdma` and the tools saw at each moment
//! to a shared directory, which is read into memory and removed; each test then checks its part.
//! A real Prometheus on the host scrapes the guest's exporter through QEMU's port forward
//! during the lossy phase and evaluates the shipped alerts. Where the VM cannot boot (no QEMU,
//! no Debian kernel package to download), the tests say they were skipped, or fail under CI; a
//! guest that booted and then did not finish fails them (`tests/common/vm.rs`).

use crate::common::vm::{self, Guest, GuestFiles, NoRun};
use crate::common::{self, prometheus, value_of, Sample};

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What the guest wrote, and what the host saw while it ran.
struct Run {
    guest: GuestFiles,
    /// Labels of the firing `RdmaTransportErrors` alerts Prometheus saw (empty: none), or why
    /// Prometheus could not run.
    alert: Result<Vec<BTreeMap<String, String>>, String>,
}

impl std::ops::Deref for Run {
    type Target = GuestFiles;

    fn deref(&self) -> &GuestFiles {
        &self.guest
    }
}

impl Run {
    /// `<device>/ports/<port>/<dir>/<name>` -> value, as `cat` read them.
    #[track_caller]
    fn counters(&self, name: &str) -> BTreeMap<String, u64> {
        self.file(&format!("{name}.sysfs"))
            .lines()
            .map(|line| {
                let (path, value) = line.split_once(' ').expect(line);
                (path.to_string(), value.trim().parse().expect(line))
            })
            .collect()
    }

    #[track_caller]
    fn qps(&self, name: &str) -> Vec<serde_json::Value> {
        let text = self.file(&format!("{name}.qp.json"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
    }
}

static RUN: OnceLock<Result<Run, NoRun>> = OnceLock::new();

/// The guest's run, booted on first use; `None` when it cannot boot here (skipped, or failed
/// under CI). A guest that booted and then did not finish fails every test.
fn run() -> Option<&'static Run> {
    vm::ran(RUN.get_or_init(boot_and_run))
}

fn boot_and_run() -> Result<Run, NoRun> {
    let started = Instant::now();
    vm::prepare(&["ib_write_bw", "rdma"], "perftest, rdma-core, iproute2")?;
    eprintln!(
        "real_kernel: kernel and initramfs ready in {:?}",
        started.elapsed()
    );

    let port = prometheus::free_port();
    let prom_dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(prom_dir.path(), port);
    let wait_alert = if prometheus.is_ok() {
        "--wait-alert"
    } else {
        ""
    };
    let mut guest = Guest::start(
        "real_kernel",
        // A q35 machine with a root port and a virtio-net function behind it: a real PCIe link.
        &["--port", &port.to_string(), "--timeout", "600", "--pcie"],
        "guest.sh",
        &[common::binary().as_os_str(), OsStr::new(wait_alert)],
    )?;

    // Watches for the transport-error alert while the guest runs its lossy phase, and tells
    // the guest when it fired (or when waiting longer is pointless).
    let mut alert = Err(String::new());
    if let Ok((_, address)) = &prometheus {
        let done = guest.out().join("host-alert-done");
        let deadline = Instant::now() + Duration::from_secs(500);
        let mut netem_since = None;
        let mut firing = Vec::new();
        while guest.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            if netem_since.is_none() && guest.out().join("netem-started").exists() {
                netem_since = Some(Instant::now());
            }
            let Some(since) = netem_since else { continue };
            if firing.is_empty() {
                firing = prometheus::try_query(
                    address,
                    r#"ALERTS{alertname="RdmaTransportErrors",alertstate="firing"}"#,
                )
                .unwrap_or_default();
            }
            if !firing.is_empty() || since.elapsed() > Duration::from_secs(120) {
                let _ = std::fs::write(&done, "");
            }
        }
        alert = Ok(firing.into_iter().map(|(labels, _)| labels).collect());
    } else if let Err(reason) = &prometheus {
        alert = Err(reason.clone());
    }
    let guest = guest.finish();
    drop(prometheus);
    Ok(Run {
        guest: guest?,
        alert,
    })
}

/// Prometheus on loopback scraping the guest's exporter every second, with the shipped alerts
/// (their `for:` cut to 10 s).
fn start_prometheus(dir: &Path, port: u16) -> Result<(common::ChildGuard, String), String> {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err("no prometheus (Debian package; scripts/test installs it)".into());
    }
    let alerts = crate::alerts_e2e::alerts_without_long_waits(dir);
    let rules = common::project_root().join("alerts/rdma-rules.yml");
    Ok(prometheus::start_with_rules(
        dir,
        &format!(
            "  - job_name: real-kernel\n    scrape_timeout: 1s\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
        &[&rules, &alerts],
    ))
}

/// Series of soft-RoCE devices (a `device` label starting with `rxe`), but for the read errors
/// counted against them: a removed device's count stays, as a counter should.
fn rxe_series(samples: &[Sample]) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.labels.get("device").is_some_and(|d| d.starts_with("rxe")))
        .filter(|s| s.name != "rdma_exporter_read_errors_total")
        .map(|s| format!("{}{:?}", s.name, s.labels))
        .collect()
}

/// The metric and labels the exporter serves a sysfs counter file as.
fn metric_of(path: &str) -> (String, Vec<(String, String)>, f64) {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [device, "ports", port, dir, name] => {
            let labels = vec![
                ("device".to_string(), device.to_string()),
                ("port".to_string(), port.to_string()),
            ];
            if *dir == "hw_counters" {
                if *name == "lifespan" {
                    return ("rdma_hw_lifespan_seconds".into(), labels, 0.001);
                }
                return (
                    format!("rdma_hw_{}_total", name.to_lowercase()),
                    labels,
                    1.0,
                );
            }
            let name = name.to_lowercase();
            let name = name.strip_prefix("port_").unwrap_or(&name).to_string();
            match name.as_str() {
                "xmit_data" | "rcv_data" => (format!("rdma_port_{name}_bytes_total"), labels, 4.0),
                _ => (format!("rdma_port_{name}_total"), labels, 1.0),
            }
        }
        [device, "hw_counters", name] => (
            format!("rdma_device_hw_{}_total", name.to_lowercase()),
            vec![("device".to_string(), device.to_string())],
            1.0,
        ),
        _ => panic!("unexpected counter path {path}"),
    }
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    value_of(samples, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?}"))
}

fn delta(before: &[Sample], after: &[Sample], name: &str, device: &str) -> f64 {
    value(after, name, &[("device", device)]) - value(before, name, &[("device", device)])
}

/// `(message bytes, iterations, MTU)` of a perftest bandwidth client's report.
fn perftest_report(output: &str) -> (u64, u64, u64) {
    let mtu = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Mtu")?.split(':').nth(1))
        .and_then(|v| v.trim().trim_end_matches("[B]").parse().ok())
        .unwrap_or_else(|| panic!("no MTU in {output}"));
    let mut lines = output.lines().skip_while(|l| !l.contains("#iterations"));
    let figures: Vec<u64> = lines
        .nth(1)
        .unwrap_or_else(|| panic!("no result line in {output}"))
        .split_whitespace()
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    (figures[0], figures[1], mtu)
}

#[test]
fn node_collector_serves_every_counter_cat_reads() {
    let Some(run) = run() else { return };
    let before = run.counters("idle-before");
    let after = run.counters("idle-after");
    assert_eq!(before, after, "the fabric was not idle around the scrape");
    let samples = run.scrape("idle");
    assert!(
        before.keys().any(|p| p.starts_with("rxeA/"))
            && before.keys().any(|p| p.starts_with("rxeB/"))
    );
    for (path, cat) in &before {
        let (name, labels, scale) = metric_of(path);
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let served = value_of(&samples, &name, &labels)
            .unwrap_or_else(|| panic!("{path} (cat: {cat}) is not served as {name}{labels:?}"));
        assert_eq!(served, *cat as f64 * scale, "{path} served as {name}");
    }
    // Nothing served that the kernel does not have.
    let served_hw: BTreeSet<String> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_hw_") && s.labels["device"].starts_with("rxe"))
        .map(|s| {
            format!(
                "{}/ports/{}/{}",
                s.labels["device"], s.labels["port"], s.name
            )
        })
        .collect();
    let files: BTreeSet<String> = before
        .keys()
        .map(|p| {
            let (name, labels, _) = metric_of(p);
            format!("{}/ports/{}/{name}", labels[0].1, labels[1].1)
        })
        .collect();
    assert_eq!(served_hw, files);

    // Port facts, against what the guest's sysfs says.
    let attributes: BTreeMap<&str, &str> = run
        .file("attributes.txt")
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let port =
        |device: &str, metric: &str| value(&samples, metric, &[("device", device), ("port", "1")]);
    let kernel_id =
        |attr: &str| -> f64 { attributes[attr].split(':').next().unwrap().parse().unwrap() };
    assert_eq!(
        port("rxeA", "rdma_port_state"),
        kernel_id("rxeA/ports/1/state")
    );
    assert_eq!(
        port("rxeA", "rdma_port_phys_state"),
        kernel_id("rxeA/ports/1/phys_state")
    );
    let gbps: f64 = attributes["rxeA/ports/1/rate"]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        port("rxeA", "rdma_port_rate_bytes_per_second"),
        gbps * 1e9 / 8.0
    );
    let info = common::matching(&samples, "rdma_port_info", &[("device", "rxeA")])
        .next()
        .expect("rdma_port_info of rxeA");
    assert_eq!(
        info.labels["link_layer"],
        attributes["rxeA/ports/1/link_layer"]
    );
    assert_eq!(info.labels["node_guid"], attributes["rxeA/node_guid"]);
    // The netdev behind the port is the one the GID table binds (`gid_attrs/ndevs`).
    let gid1: Vec<&str> = run
        .file("gids.txt")
        .lines()
        .nth(1)
        .unwrap()
        .split(' ')
        .collect();
    assert_eq!(info.labels["netdev"], gid1[3], "{gid1:?}");
    assert_eq!(
        gid1[1], "0000:0000:0000:0000:0000:ffff:c0a8:4d01",
        "GID 1 is vA's IPv4 address"
    );
    // A soft device has no PMA counters and an empty fw_ver: that is no read error.
    assert!(
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).all(|s| s.value == 0.0),
        "read errors on a healthy soft-RoCE host: {:?}",
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).collect::<Vec<_>>()
    );
    common::assert_no_duplicate_series(run.file("idle.prom"));
}

#[test]
fn packet_counters_move_by_what_perftest_sent() {
    let Some(run) = run() else { return };
    let (bytes, iterations, mtu) = perftest_report(run.file("rc-client.txt"));
    assert!(iterations > 0, "{}", run.file("rc-client.txt"));
    let packets = (iterations * bytes.div_ceil(mtu)) as f64;
    let (before, after) = (run.scrape("rc-before"), run.scrape("rc-after"));
    let sent = delta(&before, &after, "rdma_hw_sent_pkts_total", "rxeA");
    let received = delta(&before, &after, "rdma_hw_rcvd_pkts_total", "rxeB");
    // At least every packet of every reported message; retransmissions add some (TCG is slow
    // enough for the requester to time out now and then), never several times as many.
    assert!(
        sent >= packets && sent < 2.0 * packets,
        "sent {sent}, perftest {packets}"
    );
    assert!(
        received >= packets && received <= sent,
        "received {received}, sent {sent}"
    );
    // The responder's ACKs: far fewer packets the other way.
    let acks = delta(&before, &after, "rdma_hw_sent_pkts_total", "rxeB");
    assert!(acks > 0.0 && acks < packets, "{acks}");

    // ibv_rc_pingpong: every iteration is one send received on each side.
    let pingpong = run.file("pp-client.txt");
    let iterations: f64 = pingpong
        .lines()
        .find_map(|l| l.split_once(" iters in ")?.0.trim().parse().ok())
        .unwrap_or_else(|| panic!("{pingpong}"));
    let (before, after) = (run.counters("pp-before"), run.counters("pp-after"));
    let moved = |path: &str| (after[path] - before[path]) as f64;
    assert_eq!(moved("rxeA/ports/1/hw_counters/rdma_recvs"), iterations);
    assert_eq!(moved("rxeB/ports/1/hw_counters/rdma_sends"), iterations);
}

/// `<device>/ports/<n>/hw_counters/<name>` -> value, from `hw-counters` (or `cat`) lines;
/// `lifespan` (a setting, no netlink counter) left out.
fn hw_lines(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|line| {
            let (path, value) = line.split_once(' ').expect(line);
            (path.to_string(), value.trim().parse().expect(line))
        })
        .filter(|(path, _)| !path.ends_with("/lifespan"))
        .collect()
}

/// The rxe devices' `rdma_hw_*` series of a scrape, `lifespan` left out.
fn hw_series(samples: &[Sample]) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_hw_") && !s.name.contains("lifespan"))
        .filter(|s| s.labels.get("device").is_some_and(|d| d.starts_with("rxe")))
        .map(|s| (format!("{}{:?}", s.name, s.labels), s.value))
        .collect()
}

/// Issue 47: every port hardware counter of the rxe devices, read by the exporter's netlink
/// reader (one `RDMA_NLDEV_CMD_STAT_GET` a port), equals what its sysfs file says, counter for
/// counter, after RC traffic moved them. A counter may still move between two reads (rxe's
/// timers, late ACKs), so the guest read netlink, then the files, then netlink again, and each
/// file's value must lie between its two netlink readings (equal when nothing moved). The same
/// for the exporter's `/metrics` with `--collector.sysfs.hw-counters-source=netlink` against
/// `=sysfs`, scraped netlink, sysfs, netlink.
#[test]
fn hw_counters_over_netlink_equal_the_sysfs_files() {
    let Some(run) = run() else { return };
    let first = hw_lines(run.file("hw-netlink-1.txt"));
    let files = hw_lines(run.file("hw-files.txt"));
    let second = hw_lines(run.file("hw-netlink-2.txt"));
    for device in ["rxeA", "rxeB"] {
        let count = files.keys().filter(|p| p.starts_with(device)).count();
        // rdma_rxe's 15 port counters (rxe_hw_counters.c), at least.
        assert!(count >= 15, "{device}: {count} files: {files:?}");
    }
    assert!(
        files["rxeA/ports/1/hw_counters/sent_pkts"] > 0,
        "the RC traffic moved no counter"
    );
    let names = |m: &BTreeMap<String, u64>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(
        names(&first),
        names(&files),
        "netlink and sysfs name other counters"
    );
    assert_eq!(names(&second), names(&files));
    for (path, file) in &files {
        assert!(
            first[path] <= *file && *file <= second[path],
            "{path}: netlink {} then the file {file} then netlink {}",
            first[path],
            second[path]
        );
    }

    let (a, files, b) = (
        hw_series(&run.scrape("hw-netlink-a")),
        hw_series(&run.scrape("hw-sysfs")),
        hw_series(&run.scrape("hw-netlink-b")),
    );
    assert!(files.len() >= 30, "{files:?}");
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        b.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>()
    );
    for (series, file) in &files {
        assert!(
            a[series] <= *file && *file <= b[series],
            "{series}: netlink {} then sysfs {file} then netlink {}",
            a[series],
            b[series]
        );
    }
    // The netlink exporter read every port over netlink: no fallback was counted.
    for phase in ["hw-netlink-a", "hw-netlink-b"] {
        let errors: Vec<_> =
            common::matching(&run.scrape(phase), "rdma_exporter_read_errors_total", &[])
                .filter(|s| s.value > 0.0)
                .map(|s| s.labels.clone())
                .collect();
        assert!(errors.is_empty(), "{phase}: {errors:?}");
    }
    let log = run.file("hw-netlink.log");
    assert!(!log.contains(" WARN ") && !log.contains(" ERROR "), "{log}");
    // Both readers timed on the same ports (the figures go to BENCHMARKS.md from a release
    // build: scripts/vm/hw-counters-bench).
    let bench = run.file("hw-bench.txt");
    assert!(bench.contains("netlink/sysfs CPU ratio: "), "{bench}");
}

/// `(device, type, state)` -> count, from `rdma -j resource show qp`.
fn qps_by_type(qps: &[serde_json::Value]) -> BTreeMap<(String, String, String), f64> {
    let mut counts = BTreeMap::new();
    for qp in qps {
        let key = (
            qp["ifname"].as_str().unwrap().to_string(),
            qp["type"].as_str().unwrap().to_string(),
            qp["state"].as_str().unwrap().to_string(),
        );
        *counts.entry(key).or_default() += 1.0;
    }
    counts
}

fn served_qps(samples: &[Sample]) -> BTreeMap<(String, String, String), f64> {
    common::matching(samples, "rdma_qps", &[])
        .filter(|s| s.value > 0.0)
        .map(|s| {
            let key = (
                s.labels["device"].clone(),
                s.labels["qp_type"].clone(),
                s.labels["state"].clone(),
            );
            (key, s.value)
        })
        .collect()
}

#[test]
fn queue_pairs_match_rdma_resource_show_and_their_owners() {
    let Some(run) = run() else { return };
    for (phase, qp_type) in [("rc-during", "RC"), ("ud-during", "UD")] {
        // Listed just before and just after the scrape: the exporter's reading (at most one
        // netlink interval old, 1 s here) matches one of them.
        let listed = run.qps(phase);
        let listed_after = run.qps(&format!("{phase}2"));
        let samples = run.scrape(phase);
        let counts = qps_by_type(&listed);
        assert!(
            counts.keys().any(|(_, t, _)| t == qp_type),
            "{phase}: perftest had no {qp_type} QP when listed: {listed:?}"
        );
        let served = served_qps(&samples);
        assert!(
            served == counts || served == qps_by_type(&listed_after),
            "{phase}: served {served:?}, rdma resource show qp {counts:?}"
        );
        // Owner: perftest's own process (pid and comm), per device.
        for device in ["rxeA", "rxeB"] {
            let mut owners: BTreeMap<(String, String), f64> = BTreeMap::new();
            for qp in listed
                .iter()
                .filter(|q| q["ifname"] == device && q["type"] == qp_type)
            {
                let pid = qp["pid"].as_u64().unwrap_or_else(|| panic!("{qp}"));
                let comm = qp["comm"].as_str().unwrap().to_string();
                *owners.entry((pid.to_string(), comm)).or_default() += 1.0;
            }
            assert!(!owners.is_empty(), "{phase} {device}: {listed:?}");
            let served: BTreeMap<(String, String), f64> = common::matching(
                &samples,
                "rdma_owner_qps",
                &[("device", device), ("qp_type", qp_type)],
            )
            .map(|s| {
                (
                    (s.labels["pid"].clone(), s.labels["owner"].clone()),
                    s.value,
                )
            })
            .collect();
            assert_eq!(served, owners, "{phase} {device}");
        }
    }
    // After perftest exits: its QPs are gone from both.
    let after = run.scrape("rc-after");
    assert_eq!(served_qps(&after), qps_by_type(&run.qps("rc-after")));
    assert!(
        served_qps(&after).keys().all(|(_, t, _)| t == "GSI"),
        "{:?}",
        served_qps(&after)
    );

    // The pingpong client ran in a pod's cgroup: its QP is attributed to that pod.
    let listed = run.qps("pp-during");
    let client = run.file("pp-client.pid").trim().parse::<u64>().unwrap();
    let in_pod = listed
        .iter()
        .filter(|q| q["pid"].as_u64() == Some(client))
        .count();
    assert!(in_pod > 0, "no QP of the client (pid {client}): {listed:?}");
    let uid = run.file("pod-uid.txt").trim();
    assert!(
        run.file("pp-client.cgroup").contains(uid),
        "{}",
        run.file("pp-client.cgroup")
    );
    let samples = run.scrape("pp-during");
    let container = run.file("container-id.txt").trim();
    let pod_labels = [("pod_uid", uid), ("device", "rxeA")];
    let served: Vec<&Sample> = common::matching(&samples, "rdma_owner_qps", &pod_labels).collect();
    assert_eq!(served.len(), 1, "{samples:?}");
    assert_eq!(served[0].value, in_pod as f64);
    assert_eq!(served[0].labels["owner"], "ibv_rc_pingpong");
    assert_eq!(served[0].labels["pid"], client.to_string());
    assert_eq!(served[0].labels["container_id"], container);
}

#[test]
fn netem_loss_raises_transport_errors_and_the_alert_fires() {
    let Some(run) = run() else { return };
    // Loss on vA's egress (A's requests to B): B sees gaps (out_of_seq_request) and NAKs
    // them, A counts the NAKs (rcvd_seq_err) and retries. Under TCG on a busy machine the
    // clean run loses a few packets too (socket queues overflow), so the rate per packet B
    // received is compared: netem's 2 % loss is far above that.
    let gaps = |before: &str, after: &str| {
        let (b, a) = (run.scrape(before), run.scrape(after));
        let received = delta(&b, &a, "rdma_hw_rcvd_pkts_total", "rxeB");
        assert!(received > 0.0, "{before}..{after}: no traffic");
        (
            delta(&b, &a, "rdma_hw_out_of_seq_request_total", "rxeB") / received,
            delta(&b, &a, "rdma_hw_rcvd_seq_err_total", "rxeA") / received,
        )
    };
    let clean = gaps("rc-before", "rc-after");
    let lossy = gaps("netem-before", "netem-after");
    assert!(
        lossy.0 > 2.0 * clean.0 && lossy.1 > 2.0 * clean.1 && lossy.1 > 0.0,
        "per packet received: clean {clean:?}, lossy {lossy:?}"
    );
    // And the exporter still agrees with cat after the phase.
    let after = run.counters("netem-after");
    let served = run.scrape("netem-after");
    let path = "rxeA/ports/1/hw_counters/rcvd_seq_err";
    assert_eq!(
        value(&served, "rdma_hw_rcvd_seq_err_total", &[("device", "rxeA")]),
        after[path] as f64
    );

    match &run.alert {
        Ok(firing) => assert!(
            firing
                .iter()
                .any(|labels| labels.get("device").is_some_and(|d| d.starts_with("rxe"))),
            "RdmaTransportErrors did not fire on a soft-RoCE device: {firing:?}"
        ),
        Err(reason) => common::skip_or_fail(reason),
    }
}

#[test]
fn removing_a_device_or_the_module_costs_nothing_but_the_device() {
    let Some(run) = run() else { return };
    assert_eq!(run.file("link-delete.rc").trim(), "0");
    assert_eq!(run.file("rmmod.rc").trim(), "0", "rmmod rdma_rxe");
    let scrapes: Vec<&str> = run.file("removal-loop.txt").lines().collect();
    assert!(scrapes.len() >= 2, "{scrapes:?}");
    assert!(
        scrapes.iter().all(|s| s.starts_with("ok ")),
        "a scrape failed during removal: {scrapes:?}"
    );
    let deleted = run.scrape("after-delete");
    // rxeP, the PCIe phase's device, was deleted before this phase: what it had counted then.
    let before_removal = run.scrape("pcie-after");
    for counted in common::matching(&deleted, "rdma_exporter_read_errors_total", &[]) {
        if counted.labels["device"] == "rxeP" {
            let labels: Vec<(&str, &str)> = counted
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let earlier = value_of(&before_removal, &counted.name, &labels);
            assert_eq!(earlier, Some(counted.value), "{counted:?}");
            continue;
        }
        assert_eq!(counted.labels["device"], "rxeB", "{counted:?}");
    }
    assert!(
        rxe_series(&deleted).iter().all(|s| !s.contains("\"rxeB\"")),
        "rxeB series stay: {:?}",
        rxe_series(&deleted)
    );
    assert!(rxe_series(&deleted).iter().any(|s| s.contains("\"rxeA\"")));
    assert_eq!(value(&deleted, "rdma_devices", &[]), 1.0);
    let unloaded = run.scrape("after-rmmod");
    assert_eq!(run.file("after-rmmod.ls").trim(), "");
    assert_eq!(
        rxe_series(&unloaded),
        BTreeSet::new(),
        "series of unloaded devices stay"
    );
    assert_eq!(value(&unloaded, "rdma_devices", &[]), 0.0);
    assert_eq!(
        value(&unloaded, "rdma_exporter_http_panics_total", &[]),
        0.0
    );
    for collector in ["sysfs", "netlink"] {
        assert_eq!(
            value(
                &unloaded,
                "rdma_exporter_collector_success",
                &[("collector", collector)]
            ),
            1.0,
            "{collector}"
        );
    }
    for healthz in ["healthz-after-delete.rc", "healthz-after-rmmod.rc"] {
        assert_eq!(run.file(healthz).trim(), "0", "{healthz}");
    }
    let log = run.file("serve.log");
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(
        run.file("serve.rc").trim(),
        "0",
        "exit status after SIGTERM: {log}"
    );
}

#[test]
fn doctor_on_real_soft_roce_devices() {
    let Some(run) = run() else { return };
    let report = run.file("doctor.txt");
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let line = |prefix: &str| -> Vec<&str> {
        lines
            .iter()
            .copied()
            .filter(|l| l.split_whitespace().nth(1) == Some(prefix))
            .collect()
    };
    assert_eq!(
        line("devices:"),
        ["OK    devices: 2 RDMA devices: rxeA, rxeB"],
        "{report}"
    );
    assert!(line("dev-files:")[0].starts_with("OK"), "{report}");
    assert!(line("dev-files:")[0].contains("uverbs0"), "{report}");
    assert!(!line("memlock:").is_empty(), "{report}");
    let gids = line("gid:");
    assert_eq!(gids.len(), 2, "{report}");
    assert!(
        gids[0].starts_with("OK") && gids[0].contains("192.168.77.1"),
        "{report}"
    );
    let mtu = line("mtu:");
    assert!(
        mtu.iter().all(|l| l.contains("1500") && l.contains("1024")),
        "{report}"
    );
    // veth has no DCB: a clear finding, not a failure.
    for check in ["qos-trust:", "pfc:"] {
        let found = line(check);
        assert_eq!(found.len(), 2, "{report}");
        assert!(
            found
                .iter()
                .all(|l| l.starts_with("INFO") && l.contains("no DCB support")),
            "{report}"
        );
    }
    assert!(!lines.iter().any(|l| l.starts_with("FAIL")), "{report}");
    let json: serde_json::Value =
        serde_json::from_str(run.file("doctor.json")).expect("doctor --output json");
    assert!(json.is_object(), "{json}");
}

#[test]
fn pods_collector_reads_the_real_rdma_cgroup() {
    let Some(run) = run() else { return };
    let uid = run.file("pod-uid.txt").trim();
    let samples = run.scrape("pp-during");
    let parse = |text: &str| -> BTreeMap<(String, String), String> {
        text.lines()
            .flat_map(|line| {
                let mut words = line.split_whitespace();
                let device = words.next().unwrap().to_string();
                words.map(move |kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    ((device.clone(), k.to_string()), v.to_string())
                })
            })
            .collect()
    };
    let current = parse(run.file("cg-current.txt"));
    let max = parse(run.file("cg-max.txt"));
    assert_eq!(
        current[&("rxeA".into(), "hca_handle".into())],
        "1",
        "the client's verbs context is charged"
    );
    for ((device, resource), used) in &current {
        let labels = [
            ("pod_uid", uid),
            ("device", device.as_str()),
            ("resource", resource.as_str()),
        ];
        assert_eq!(
            value(&samples, "rdma_pod_cgroup_usage", &labels),
            used.parse::<f64>().unwrap(),
            "{labels:?}"
        );
        let limit = value_of(&samples, "rdma_pod_cgroup_limit", &labels);
        match max[&(device.clone(), resource.clone())].as_str() {
            "max" => assert_eq!(limit, None, "{labels:?}"),
            n => assert_eq!(limit, Some(n.parse().unwrap()), "{labels:?}"),
        }
    }
}

#[test]
fn unprivileged_exporter_reads_what_needs_no_capability() {
    let Some(run) = run() else { return };
    let (unprivileged, root) = (run.scrape("unpriv"), run.scrape("unpriv-root"));
    assert_eq!(rxe_series(&unprivileged), rxe_series(&root));
    assert!(rxe_series(&root).len() > 30, "{:?}", rxe_series(&root));
    for collector in ["sysfs", "ethtool", "netlink"] {
        assert_eq!(
            value(
                &unprivileged,
                "rdma_exporter_collector_success",
                &[("collector", collector)]
            ),
            1.0,
            "{collector} as nobody"
        );
    }
    // The counters are idle here: the same values too.
    for sample in unprivileged
        .iter()
        .filter(|s| s.name.starts_with("rdma_hw_") && !s.name.contains("lifespan"))
    {
        assert_eq!(
            Some(sample.value),
            value_of(
                &root,
                &sample.name,
                &sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>()
            ),
            "{sample:?}"
        );
    }
    // Nobody read its hw_counters through netlink (the flag in guest.sh): no fallback to the
    // files, no refusal.
    let fallbacks: Vec<_> = unprivileged
        .iter()
        .filter(|s| {
            s.name == "rdma_exporter_read_errors_total"
                && s.labels
                    .get("reason")
                    .is_some_and(|r| r.starts_with("netlink_"))
        })
        .collect();
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    let log = run.file("unpriv.log");
    assert!(!log.contains(" WARN ") && !log.contains(" ERROR "), "{log}");
}

#[test]
fn link_down_and_up_show_in_port_state() {
    let Some(run) = run() else { return };
    for (phase, state) in [
        ("link-down", "link-down.state"),
        ("link-up", "link-up.state"),
    ] {
        let kernel: Vec<f64> = run
            .file(state)
            .lines()
            .map(|l| l.split(':').next().unwrap().parse().unwrap())
            .collect();
        let samples = run.scrape(phase);
        let port = [("device", "rxeA"), ("port", "1")];
        assert_eq!(
            value(&samples, "rdma_port_state", &port),
            kernel[0],
            "{phase}"
        );
        assert_eq!(
            value(&samples, "rdma_port_phys_state", &port),
            kernel[1],
            "{phase}"
        );
    }
    assert_ne!(run.file("link-down.state"), run.file("link-up.state"));
    let (down, up) = (run.scrape("netem-after"), run.scrape("link-up"));
    assert_eq!(delta(&down, &up, "rdma_hw_link_downed_total", "rxeA"), 1.0);
}

/// The entries ib_core creates for every device and port, as a layout lists them; the rest is
/// a driver's (rxe's `parent` and `hw_counters/*`, mlx5's `hca_type`, `board_id`, `counters/`,
/// device-level `hw_counters/`), ib_cm's (`ports/N/cm_*`), or the driver core's (`uevent`,
/// `power/`, the `device` link of a device with a parent bus).
fn core_entries(layout: &BTreeSet<String>) -> BTreeSet<String> {
    let driver = regex::Regex::new(
        r"^(parent|uevent|device|hca_type|board_id|hw_counters(/.*)?|ports/1/hw_counters/.+|ports/1/(counters|cm_[a-z_]+)(/.*)?)$",
    )
    .unwrap();
    layout
        .iter()
        .filter(|entry| !driver.is_match(entry))
        .cloned()
        .collect()
}

/// A layout's entries with numbered table slots folded to `N`, as the fixture lists them.
fn folded(entries: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    let slot = regex::Regex::new(r"/(gids|pkeys|ndevs|types)/[0-9]+$").unwrap();
    entries
        .into_iter()
        .map(|e| slot.replace(&e, "/$1/N").into_owned())
        .collect()
}

fn real_layout() -> BTreeSet<String> {
    let text = std::fs::read_to_string(common::fixture(
        "real-kernel/6.1.0-57-amd64/rxe-sysfs-layout.txt",
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every path below a device directory, links listed but not followed.
fn walk(dir: &Path, prefix: &str, into: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        into.push(name.clone());
        if entry.file_type().unwrap().is_dir() {
            walk(&entry.path(), &format!("{name}/"), into);
        }
    }
}

#[test]
fn simulator_lays_out_a_device_like_the_real_kernel() {
    use rdma_fabric_exporter::sim::sysfs_tree::{connectx7_node, write_tree};
    let sys = tempfile::tempdir().unwrap();
    let nics = connectx7_node(1, 7);
    write_tree(sys.path(), &nics).unwrap();
    let device =
        std::fs::canonicalize(sys.path().join("class/infiniband").join(&nics[0].name)).unwrap();
    let mut simulated = Vec::new();
    walk(&device, "", &mut simulated);
    let simulated = core_entries(&folded(simulated));
    let real = core_entries(&real_layout());
    assert!(real.contains("ports/1/gid_attrs/ndevs/N") && real.contains("node_desc"));
    assert_eq!(
        simulated, real,
        "ib_core's entries: the simulator's (left) against the real kernel's (right)"
    );

    // The capture is the kernel's own: the guest's layout, when it ran here, is the fixture's.
    if let Some(run) = RUN.get().and_then(|r| r.as_ref().ok()) {
        let live = folded(run.file("layout.txt").lines().map(str::to_string));
        assert_eq!(live, real_layout(), "the captured layout is out of date");
    }
}

/// The captured rxe device written out as a tree, read as the exporter reads a node: what the
/// real kernel showed stays covered where the VM cannot boot.
#[test]
fn captured_soft_roce_device_is_read_without_errors() {
    let captured = common::fixture("real-kernel/6.1.0-57-amd64");
    let read = |name: &str| std::fs::read_to_string(captured.join(name)).unwrap();
    let sys = tempfile::tempdir().unwrap();
    let device = sys.path().join("devices/virtual/infiniband/rxeA");
    let mut files = BTreeMap::new();
    for line in read("rxe-attributes.txt").lines() {
        let (path, value) = line.split_once('=').unwrap();
        files.insert(
            path.strip_prefix("rxeA/").unwrap().to_string(),
            value.to_string(),
        );
    }
    for line in read("rxe-hw-counters.txt").lines() {
        let (path, value) = line.split_once(' ').unwrap();
        files.insert(
            path.strip_prefix("rxeA/").unwrap().to_string(),
            value.to_string(),
        );
    }
    // Index, GID, type (spaces as `_`), netdev; unused entries have neither type nor netdev.
    for line in read("rxe-gids.txt").lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        files.insert(format!("ports/1/gids/{}", fields[0]), fields[1].to_string());
        if !fields[2].is_empty() {
            let kind = fields[2].replace('_', " ");
            files.insert(format!("ports/1/gid_attrs/types/{}", fields[0]), kind);
            let netdev = fields[3].to_string();
            files.insert(format!("ports/1/gid_attrs/ndevs/{}", fields[0]), netdev);
        }
    }
    let layout = real_layout();
    for (path, value) in &files {
        assert!(
            layout.contains(&folded([path.clone()]).pop_first().unwrap()),
            "{path} is not in the captured layout"
        );
        let file = device.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, format!("{value}\n")).unwrap();
    }
    std::fs::create_dir_all(sys.path().join("class/infiniband")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/virtual/infiniband/rxeA",
        sys.path().join("class/infiniband/rxeA"),
    )
    .unwrap();

    let exporter = common::Exporter::on_sysfs(sys.path(), &["--no-collector.netlink"]);
    let body = exporter.metrics();
    let samples = common::parse_exposition(&body);
    for (path, value) in files.iter().filter(|(p, _)| p.contains("hw_counters/")) {
        let (name, labels, scale) = metric_of(&format!("rxeA/{path}"));
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let expected = value.parse::<f64>().unwrap() * scale;
        assert_eq!(value_of(&samples, &name, &labels), Some(expected), "{path}");
    }
    let info = common::matching(&samples, "rdma_port_info", &[("device", "rxeA")])
        .next()
        .unwrap_or_else(|| panic!("no rdma_port_info: {body}"));
    assert_eq!(info.labels["link_layer"], "Ethernet");
    assert_eq!(info.labels["node_guid"], files["node_guid"]);
    assert_eq!(info.labels["netdev"], files["ports/1/gid_attrs/ndevs/0"]);
    assert!(
        !info.labels.contains_key("fw_ver"),
        "an empty fw_ver is no label value: {info:?}"
    );
    assert_eq!(
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).count(),
        0,
        "{body}"
    );
    let state = files["ports/1/state"].split(':').next().unwrap();
    assert_eq!(
        value(&samples, "rdma_port_state", &[("device", "rxeA")]),
        state.parse::<f64>().unwrap()
    );
}

/// `<end>/<file>` -> what `cat` read in the guest (`pcie.txt`, lines joined with `;`).
fn pcie_files(run: &Run) -> BTreeMap<String, String> {
    run.file("pcie.txt")
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(file, text)| (file.to_string(), text.trim_end_matches(';').to_string()))
        .collect()
}

/// `"2.5 GT/s PCIe"` -> 2.5e9, read here independently of the exporter's parser.
fn transfers_per_second(text: &str) -> f64 {
    let gigatransfers: f64 = text
        .split(" GT/s")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a link speed: {text:?}"));
    gigatransfers * 1e9
}

#[test]
fn pcie_link_of_a_real_rdma_device_is_what_cat_reads() {
    let Some(run) = run() else { return };
    let cat = pcie_files(run);
    let file = |name: &str| -> &str {
        cat.get(name)
            .unwrap_or_else(|| panic!("the guest read no {name}: {cat:?}"))
    };
    let samples = run.scrape("pcie");
    let device = [("device", "rxeP")];
    eprintln!(
        "real_kernel: the PCIe phase took {} s; cat read:\n{}",
        run.files.get("pcie-seconds.txt").map_or("?", |s| s.trim()),
        run.file("pcie.txt")
    );

    // The link runs below what its root port supports: QEMU's endpoint is narrower and slower.
    let (up_speed, up_max_speed) = (
        transfers_per_second(file("upstream/current_link_speed")),
        transfers_per_second(file("upstream/max_link_speed")),
    );
    let (up_width, up_max_width): (f64, f64) = (
        file("upstream/current_link_width").parse().unwrap(),
        file("upstream/max_link_width").parse().unwrap(),
    );
    assert!(
        up_speed < up_max_speed && up_width < up_max_width,
        "the root port's link is not below its maximum: {cat:?}"
    );

    let info = common::matching(&samples, "rdma_pcie_link_info", &device)
        .next()
        .unwrap_or_else(|| panic!("no rdma_pcie_link_info for rxeP: {}", run.file("pcie.prom")));
    assert_eq!(info.labels["pci_address"], file("function/address"));
    assert_eq!(
        info.labels["upstream_pci_address"],
        file("upstream/address")
    );
    match file("function/numa_node") {
        "-1" => assert!(!info.labels.contains_key("numa_node"), "{info:?}"),
        node => assert_eq!(info.labels["numa_node"], node),
    }

    let speed = transfers_per_second(file("function/current_link_speed"));
    let width: f64 = file("function/current_link_width").parse().unwrap();
    let max_speed = transfers_per_second(file("function/max_link_speed"));
    let max_width: f64 = file("function/max_link_width").parse().unwrap();
    let served = |name: &str, labels: &[(&str, &str)]| value(&samples, name, labels);
    assert_eq!(
        served("rdma_pcie_link_speed_transfers_per_second", &device),
        speed
    );
    assert_eq!(served("rdma_pcie_link_width_lanes", &device), width);
    for (end, speed, width) in [
        ("device", max_speed, max_width),
        ("upstream", up_max_speed, up_max_width),
    ] {
        let labels = [("device", "rxeP"), ("end", end)];
        assert_eq!(
            served("rdma_pcie_link_max_speed_transfers_per_second", &labels),
            speed,
            "{end}"
        );
        assert_eq!(
            served("rdma_pcie_link_max_width_lanes", &labels),
            width,
            "{end}"
        );
    }
    // Downtrained only when below what BOTH ends support: here the function's own maximum
    // is the bar, and the link meets it, though the root port runs below its own.
    let downtrained = speed < max_speed.min(up_max_speed) || width < max_width.min(up_max_width);
    assert_eq!(
        served("rdma_pcie_link_downtrained", &device),
        f64::from(u8::from(downtrained)),
        "{cat:?}"
    );

    // AER: a series exactly where the kernel has the file, with its TOTAL line.
    for (severity, name, total) in [
        ("correctable", "aer_dev_correctable", "TOTAL_ERR_COR "),
        ("nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL "),
        ("fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL "),
    ] {
        let labels = [("device", "rxeP"), ("severity", severity)];
        let counted = value_of(&samples, "rdma_pcie_aer_errors_total", &labels);
        let expected = cat.get(&format!("function/{name}")).map(|text| {
            text.split(';')
                .find_map(|line| line.strip_prefix(total))
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{name}: {text:?}"))
        });
        assert_eq!(counted, expected, "{severity}");
    }
    assert!(
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).all(|s| s.value == 0.0),
        "read errors: {:?}",
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).collect::<Vec<_>>()
    );
    // Deleting the device leaves no series of it; a read that raced the deletion may count
    // as `vanished`, nothing else.
    assert_eq!(run.file("pcie-delete.rc").trim(), "0");
    assert!(!run.file("pcie-after.ls").contains("rxeP"));
    let after = run.scrape("pcie-after");
    assert!(
        !after.iter().any(|s| s.name.starts_with("rdma_pcie_")),
        "PCIe series of a deleted device stay"
    );
    let raced: Vec<_> = common::matching(&after, "rdma_exporter_read_errors_total", &device)
        .map(|s| (s.labels["reason"].clone(), s.value))
        .collect();
    eprintln!("real_kernel: read errors counted for rxeP by its deletion: {raced:?}");
    assert!(
        raced.iter().all(|(reason, _)| reason == "vanished"),
        "{raced:?}"
    );
    // The veth devices have no PCI function: no PCIe series, and no error for it.
    assert!(
        common::matching(&samples, "rdma_pcie_link_info", &[("device", "rxeA")])
            .next()
            .is_none()
    );
}
