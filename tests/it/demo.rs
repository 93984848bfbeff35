//! `demo` end to end: the simulated fabric served by the real binary. Each scenario's signature
//! is read from the exporter's own endpoints (per-host node agents and the switch poller),
//! never from the model's structs; the output passes promtool; SIGTERM ends it cleanly.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;

const HOSTS: [&str; 4] = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"];
/// Simulated seconds per second: a test window of 3 s covers 30 s of the fault.
const SPEED: &str = "10";

/// A demo straight into the scenario's fault (60 s into the cycle, plus a step).
fn start(scenario: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--speed",
            SPEED,
            "--start-at",
            "70",
            "--switch-interval",
            "500ms",
        ],
    )
}

/// Every host's and the switches' samples, with a `host` label added to node samples, and the
/// midpoint of each host's request: when its counters were read, give or take half a request.
fn scrape(demo: &Exporter) -> (Vec<Sample>, BTreeMap<String, Instant>) {
    let mut all = parse_exposition(&demo.metrics());
    let mut read_at = BTreeMap::new();
    for host in HOSTS {
        let sent = Instant::now();
        let (status, _, body) = demo.get(&format!("/hosts/{host}/metrics"));
        read_at.insert(host.to_string(), sent + sent.elapsed() / 2);
        assert_eq!(status, 200, "{body}");
        common::assert_no_duplicate_series(&body);
        for mut sample in parse_exposition(&body) {
            sample.labels.insert("host".into(), host.into());
            all.push(sample);
        }
    }
    (all, read_at)
}

/// Sum over series of `name` matching `labels`.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    matching(samples, name, labels).map(|s| s.value).sum()
}

/// How much `name` grew from `before` to `after`.
fn grown(before: &[Sample], after: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    total(after, name, labels) - total(before, name, labels)
}

/// How much each metric grew between two scrapes `window` apart, and the simulated seconds
/// between the two reads of each host. A loaded machine stretches the requests, so the window is
/// timed per host between its reads, not around the whole scrape (that overstated the time and
/// understated rates).
struct Window {
    before: Vec<Sample>,
    after: Vec<Sample>,
    host_seconds: BTreeMap<String, f64>,
}

impl Window {
    fn observe(scenario: &str) -> Window {
        let demo = start(scenario);
        // Let the switch poller read the leaves once.
        let deadline = Instant::now() + Duration::from_secs(60);
        while value_of(
            &parse_exposition(&demo.metrics()),
            "rdma_switch_up",
            &[("switch", "leaf1")],
        ) != Some(1.0)
        {
            assert!(Instant::now() < deadline, "{scenario}: leaf1 never up");
            std::thread::sleep(Duration::from_millis(100));
        }
        let (before, first_read) = scrape(&demo);
        std::thread::sleep(Duration::from_secs(3));
        let (after, second_read) = scrape(&demo);
        let speed = SPEED.parse::<f64>().unwrap();
        let host_seconds: BTreeMap<String, f64> = second_read
            .iter()
            .map(|(host, at)| {
                let wall = at.duration_since(first_read[host]).as_secs_f64();
                (host.clone(), wall * speed)
            })
            .collect();
        Window {
            before,
            after,
            host_seconds,
        }
    }

    /// The hosts' windows on average, for sums over every host.
    fn sim_seconds(&self) -> f64 {
        self.host_seconds.values().sum::<f64>() / self.host_seconds.len() as f64
    }

    fn growth(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        total(&self.after, name, labels) - total(&self.before, name, labels)
    }
}

const PAUSE: &str = "rdma_pfc_pause_duration_seconds_total";
const MARKS: &str = "rdma_hw_np_ecn_marked_roce_packets_total";
const CNPS: &str = "rdma_hw_np_cnp_sent_total";
const TX_BYTES: &str = "rdma_port_xmit_data_bytes_total";

/// Paused seconds per ECN mark on the NICs: how operators tell the ECN threshold's placement.
fn pause_per_mark(w: &Window) -> f64 {
    w.growth(PAUSE, &[("direction", "rx")]) / (w.growth(MARKS, &[]) + 1.0)
}

/// Share of line rate the 32 GPU NICs carried.
fn utilization(w: &Window) -> f64 {
    let bytes_per_second: f64 = w
        .host_seconds
        .iter()
        .map(|(host, seconds)| w.growth(TX_BYTES, &[("host", host)]) / seconds)
        .sum();
    bytes_per_second / (32.0 * 50e9)
}

#[test]
fn ecn_threshold_signatures_differ_from_healthy_by_a_wide_margin() {
    let _exclusive = common::exclusive(module_path!());
    let healthy = Window::observe("healthy");
    let too_high = Window::observe("ecn-too-high");
    let too_low = Window::observe("ecn-too-low");

    // Healthy: marks and CNPs flow, no PFC, near line rate.
    assert!(healthy.growth(MARKS, &[]) > 0.0);
    assert!(healthy.growth(CNPS, &[]) > 0.0);
    assert_eq!(healthy.growth(PAUSE, &[]), 0.0);
    assert!(utilization(&healthy) > 0.8, "{}", utilization(&healthy));

    // Too high: PFC does the work ECN should: pause time per mark far above healthy.
    assert!(too_high.growth(PAUSE, &[("direction", "rx")]) > 0.05 * too_high.sim_seconds());
    assert!(
        pause_per_mark(&too_high) > 1000.0 * (pause_per_mark(&healthy) + 1e-9),
        "pause per mark: too high {}, healthy {}",
        pause_per_mark(&too_high),
        pause_per_mark(&healthy)
    );
    assert!(too_high.growth(CNPS, &[]) < 0.01 * healthy.growth(CNPS, &[]));
    // The switches see it too: PFC frames sent to the NICs.
    assert!(too_high.growth("rdma_switch_port_pfc_frames_total", &[("direction", "tx")]) > 0.0);

    // Too low: no PFC at all, CNPs many times healthy, throughput far below line rate.
    assert_eq!(too_low.growth(PAUSE, &[]), 0.0);
    assert!(
        too_low.growth(CNPS, &[]) > 10.0 * healthy.growth(CNPS, &[]),
        "CNPs: too low {}, healthy {}",
        too_low.growth(CNPS, &[]),
        healthy.growth(CNPS, &[])
    );
    assert!(utilization(&too_low) < 0.5, "{}", utilization(&too_low));
    assert!(too_low.growth("rdma_switch_queue_ecn_marked_packets_total", &[]) > 0.0);
}

#[test]
fn a_pfc_storm_names_its_source() {
    let _exclusive = common::exclusive(module_path!());
    let w = Window::observe("pfc-storm");
    let victim = [
        ("host", "gpu-node-01"),
        ("device", "mlx5_2"),
        ("priority", "3"),
    ];
    // The wedged NIC pauses its switch port all the time.
    let mut tx = victim.to_vec();
    tx.push(("direction", "tx"));
    let paused = w.growth(PAUSE, &tx);
    assert!(
        paused > 0.9 * w.host_seconds["gpu-node-01"] * 0.9
            && paused <= w.host_seconds["gpu-node-01"] * 1.2,
        "{paused} s of pause in {} s",
        w.host_seconds["gpu-node-01"]
    );
    // No other NIC sends pause.
    assert!((w.growth(PAUSE, &[("direction", "tx")]) - paused).abs() < 1e-6);
    // Its storm events fired (the fault began 10 simulated seconds before the first scrape).
    let events = total(
        &w.after,
        "rdma_pfc_pause_storm_events_total",
        &[("host", "gpu-node-01"), ("device", "mlx5_2")],
    );
    assert!(events >= 1.0, "{events}");
    // The agent's own sampler saw the storm, and the victim's peak paused share is total.
    let mut sampled = victim.to_vec();
    sampled.push(("direction", "tx"));
    let detected = total(&w.after, "rdma_pfc_storms_detected_total", &sampled);
    assert!(detected >= 1.0, "{detected}");
    // Only the victim pauses its switch. (Accelerated time inflates paused shares, so at
    // --speed 10 the senders the switch pauses count as stormed too: rx is not checked.)
    assert_eq!(
        total(
            &w.after,
            "rdma_pfc_storms_detected_total",
            &[("direction", "tx")]
        ),
        detected,
        "only the victim: {:?}",
        matching(
            &w.after,
            "rdma_pfc_storms_detected_total",
            &[("direction", "tx")]
        )
        .filter(|s| s.value > 0.0)
        .collect::<Vec<_>>()
    );
    let peak = total(&w.after, "rdma_pfc_paused_ratio_peak", &sampled);
    assert!(peak > 0.9, "{peak}");
    // The switch port it hangs off receives PFC; the neighbour tells which host it is.
    let neighbors: BTreeMap<String, String> = w
        .after
        .iter()
        .filter(|s| s.name == "rdma_switch_port_neighbor_info" && s.labels["switch"] == "leaf1")
        .map(|s| {
            (
                s.labels["port"].clone(),
                format!(
                    "{} {}",
                    s.labels["neighbor_host"], s.labels["neighbor_port"]
                ),
            )
        })
        .collect();
    let stormed: Vec<&String> = neighbors
        .keys()
        .filter(|port| {
            w.growth(
                "rdma_switch_port_pfc_frames_total",
                &[("switch", "leaf1"), ("port", port), ("direction", "rx")],
            ) > 0.0
        })
        .collect();
    assert_eq!(stormed.len(), 1, "{stormed:?}");
    assert_eq!(neighbors[stormed[0]], "gpu-node-01 ens3f0np0");
    // The pause spreads: other senders on that leaf are paused by the switch.
    assert!(
        w.growth(
            PAUSE,
            &[
                ("host", "gpu-node-04"),
                ("device", "mlx5_2"),
                ("direction", "rx")
            ]
        ) > 0.5 * w.host_seconds["gpu-node-04"]
    );
}

#[test]
fn single_nic_faults_show_on_that_nic_only() {
    let _exclusive = common::exclusive(module_path!());
    let per_nic = |w: &Window, name: &str| -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in w.after.iter().filter(|s| s.name == name) {
            let key = format!("{} {}", s.labels["host"], s.labels["device"]);
            let before = w
                .before
                .iter()
                .find(|b| b.name == name && b.labels == s.labels)
                .map_or(0.0, |b| b.value);
            out.insert(key, s.value - before);
        }
        out
    };
    let only = |growth: BTreeMap<String, f64>, nic: &str| {
        let rising: Vec<&String> = growth
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(rising, [nic], "{growth:?}");
    };
    let w = Window::observe("cnp-ignored");
    only(
        per_nic(&w, "rdma_hw_rp_cnp_ignored_total"),
        "gpu-node-02 mlx5_1",
    );
    let w = Window::observe("transport-errors");
    only(
        per_nic(&w, "rdma_hw_out_of_sequence_total"),
        "gpu-node-02 mlx5_0",
    );
    only(
        per_nic(&w, "rdma_hw_local_ack_timeout_err_total"),
        "gpu-node-02 mlx5_0",
    );
    let w = Window::observe("link-flap");
    only(
        per_nic(&w, "rdma_port_link_downed_total"),
        "gpu-node-02 mlx5_5",
    );
}

#[test]
fn demo_output_passes_promtool_and_sigterm_ends_it_cleanly() {
    let _exclusive = common::exclusive(module_path!());
    let mut demo = start("pfc-storm");
    // promtool sees the netlink and pods families too: their threads' first readings are
    // waited for (they come within a second or two on an idle machine).
    let families = [
        "rdma_owner_qps{",
        "rdma_device_pod_info{",
        "rdma_pod_cgroup_usage{",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, _, body) = demo.get("/hosts/gpu-node-01/metrics");
        assert_eq!(status, 200);
        if families.iter().all(|f| body.contains(f)) || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for family in families {
        assert!(body.contains(family), "{family} missing");
    }
    promtool_check_metrics(&demo.metrics());
    promtool_check_metrics(&body);
    common::assert_no_duplicate_series(&body);
    let (status, _, sd) = demo.get("/sd");
    assert_eq!(status, 200);
    let groups: serde_json::Value = serde_json::from_str(&sd).unwrap();
    // The hosts, the switch poller and the InfiniBand subnet's scanner.
    assert_eq!(groups.as_array().unwrap().len(), HOSTS.len() + 2);
    assert_eq!(
        groups[0]["labels"]["__metrics_path__"],
        "/hosts/gpu-node-01/metrics"
    );
    let (status, _, _) = demo.get("/hosts/nobody/metrics");
    assert_eq!(status, 404);
    let fabric_dir = demo
        .fabric_dir()
        .expect("the demo logs where its fabric lives");
    assert!(fabric_dir
        .join("hosts/gpu-node-01/sys/class/infiniband/mlx5_0")
        .exists());
    let status = demo
        .terminate(Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(
        !fabric_dir.exists(),
        "the simulated fabric is removed on exit"
    );
}

/// A demo killed with SIGKILL cannot remove its fabric; the next demo removes the fabrics of
/// demos that are gone, and leaves those of running ones.
#[test]
fn a_killed_demos_fabric_is_removed_by_the_next_demo() {
    let _exclusive = common::exclusive(module_path!());
    let mut killed = start("healthy");
    let orphan = killed.fabric_dir().expect("the demo logs its fabric");
    let pid = killed.pid();
    assert!(orphan
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(&format!("rfe-demo-{pid}-")));
    // SIGKILL: no handler runs, the tree stays.
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    killed.terminate(Duration::from_secs(10));
    // SIGKILL left the tree behind, though another demo of this test binary starting right now
    // (the other `demo::` tests run beside this one) may already have removed it: that is the
    // removal under test as well. What must hold is that it is gone once the next demo is up.
    // A tree of a live process (this test's) that looks like a demo's is kept.
    let live = orphan
        .parent()
        .unwrap()
        .join(format!("rfe-demo-{}-keep", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let next = start("healthy");
    let next_fabric = next.fabric_dir().expect("the demo logs its fabric");
    let orphan_gone = !orphan.exists();
    let live_kept = live.exists();
    std::fs::remove_dir_all(&live).ok();
    assert!(orphan_gone, "the killed demo's fabric was not removed");
    assert!(live_kept, "a running process's tree was removed");
    assert!(next_fabric.exists());
}

/// SIGTERM the moment the demo logs that it listens (what a supervisor or a test may do): the
/// handler is already installed then, so the demo exits cleanly and removes its fabric instead
/// of dying by the signal's default action.
#[test]
fn a_sigterm_right_after_listening_still_removes_the_fabric() {
    let _exclusive = common::exclusive(module_path!());
    for _ in 0..3 {
        let mut demo = start("healthy");
        let fabric = demo.fabric_dir().expect("the demo logs its fabric");
        let status = demo
            .terminate(Duration::from_secs(10))
            .expect("exits on SIGTERM");
        assert!(
            status.success(),
            "{status}: ended by the signal, not by its handler"
        );
        assert!(!fabric.exists(), "{} left behind", fabric.display());
    }
}

/// The demo's InfiniBand subnet has the scanner's per-switch detail too: `/ib/switch?target=`
/// serves one simulated switch, found by GUID or NodeDescription, with the series that
/// `/ib/metrics` has for it. It answered 404 "not enabled here": the route was served from the
/// switch poller's state, which has no `ib_fabric` collector.
#[test]
fn the_simulated_subnet_serves_one_switchs_detail() {
    let demo = start("ib-degraded-link");
    let leaf = "MF0;ib-leaf-01:MQM9700/U1";
    let target = format!(
        "/ib/switch?target={}",
        leaf.replace(';', "%3B").replace('/', "%2F")
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let detail = loop {
        let (status, _, body) = demo.get(&target);
        if status == 200 {
            break body;
        }
        // 503 until the first scan; anything else is the bug.
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "no scan in 30 s: {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    promtool_check_metrics(&detail);
    let detail = parse_exposition(&detail);
    let guids: std::collections::BTreeSet<&str> = detail
        .iter()
        .filter_map(|s| s.labels.get("switch_guid").map(String::as_str))
        .collect();
    assert_eq!(guids.len(), 1, "one switch: {guids:?}");
    let guid = *guids.iter().next().unwrap();
    let series = |samples: &[Sample]| -> std::collections::BTreeSet<String> {
        samples
            .iter()
            .filter(|s| s.labels.get("switch_guid").map(String::as_str) == Some(guid))
            .map(|s| format!("{}{:?}", s.name, s.labels))
            .collect()
    };
    let (status, _, subnet) = demo.get("/ib/metrics");
    assert_eq!(status, 200, "{subnet}");
    let in_subnet = series(&parse_exposition(&subnet));
    assert!(in_subnet.len() > 20, "{}", in_subnet.len());
    assert_eq!(
        series(&detail),
        in_subnet,
        "the detail is the switch's part of /ib/metrics"
    );
    let (status, _, body) = demo.get("/ib/switch?target=0x0123456789abcdef");
    assert_eq!(status, 404, "{body}");
}

/// The demo's hosts probe each other through the simulated fabric: in `healthy` every probe is
/// answered, with RTTs by hop count (a path inside one leaf under 10 µs, one over the spine
/// between 10 and 25 µs); in `leaf-spine-loss` probes between the leaves lose while no error
/// counter moves, paths inside one leaf (the rail mesh) lose nothing, and the losing targets
/// get their own series.
#[test]
fn the_simulated_hosts_probe_and_a_silent_uplink_loses_only_its_probes() {
    let healthy = start("healthy");
    // A window of at least 500 answers (about 4 s of probing on an idle machine), waited for,
    // not slept for, since a loaded machine probes more slowly. A window that fails while this
    // machine left a thread waiting 20 ms past its wake-up says nothing of the fabric: the
    // responders, threads too, may have answered late or after the timeout. Another is taken,
    // five at most; on a machine that runs its threads, a lost or late probe fails the test.
    let watch = common::stall::StallWatch::start();
    let mut stalls = Vec::new();
    let (before, after) = loop {
        watch.take();
        let (before, _) = scrape(&healthy);
        let deadline = Instant::now() + Duration::from_secs(60);
        let after = loop {
            let (after, _) = scrape(&healthy);
            let answered = grown(&before, &after, "rdma_probe_network_rtt_seconds_count", &[]);
            if answered > 500.0 || Instant::now() > deadline {
                break after;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let stall = watch.take();
        let grown = |name: &str, labels: &[(&str, &str)]| grown(&before, &after, name, labels);
        let answered = grown("rdma_probe_network_rtt_seconds_count", &[]);
        let on_time = grown(
            "rdma_probe_network_rtt_seconds_bucket",
            &[("le", "2.5e-05")],
        );
        let clean = grown("rdma_probe_lost_total", &[]) == 0.0 && on_time >= 0.99 * answered;
        if clean || stall < Duration::from_millis(20) || stalls.len() == 4 {
            break (before, after);
        }
        stalls.push(stall);
    };
    let grown = |name: &str, labels: &[(&str, &str)]| grown(&before, &after, name, labels);
    let answered = grown("rdma_probe_network_rtt_seconds_count", &[]);
    assert!(
        answered > 500.0,
        "{answered} probes answered; stalls {stalls:?}"
    );
    assert_eq!(
        grown("rdma_probe_lost_total", &[]),
        0.0,
        "windows left for this machine's stalls: {stalls:?}"
    );
    let bucket = |le| grown("rdma_probe_network_rtt_seconds_bucket", &[("le", le)]);
    let (in_leaf, under_25us) = (bucket("1e-05"), bucket("2.5e-05"));
    assert!(
        total(
            &after,
            "rdma_probe_network_rtt_seconds_bucket",
            &[("le", "5e-06")]
        ) == 0.0
            && in_leaf > 0.0,
        "{in_leaf}"
    );
    // A few answers are late by the responder's own lag between stamping its delay and
    // posting the answer (a busy machine preempts it there), as on a real host.
    assert!(
        under_25us > in_leaf && under_25us >= 0.99 * answered,
        "{under_25us} of {answered}; stalls {stalls:?}"
    );
    common::promtool_check_metrics(&healthy.get("/hosts/gpu-node-01/metrics").2);
    drop(healthy);

    let lossy = start("leaf-spine-loss");
    let (first, _) = scrape(&lossy);
    let deadline = Instant::now() + Duration::from_secs(30);
    let samples = loop {
        let (samples, _) = scrape(&lossy);
        if total(&samples, "rdma_probe_lost_total", &[]) >= 5.0 || Instant::now() > deadline {
            break samples;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let lost = total(&samples, "rdma_probe_lost_total", &[]);
    assert!(lost >= 5.0, "{lost} probes lost");
    assert_eq!(
        total(&samples, "rdma_probe_lost_total", &[("path", "rail")]),
        0.0,
        "a rail's ports share their leaf: no probe of theirs crosses the spine"
    );
    let targets: Vec<&Sample> = matching(&samples, "rdma_probe_target_lost_total", &[]).collect();
    assert!(!targets.is_empty());
    for target in &targets {
        assert_ne!(target.labels["path"], "rail", "{target:?}");
    }
    // Silent: no link error counter moved meanwhile (every NIC's condition is healthy's:
    // `sim::probing` tests it).
    for quiet in [
        "rdma_port_symbol_error_total",
        "rdma_port_link_downed_total",
    ] {
        assert_eq!(
            total(&samples, quiet, &[]),
            total(&first, quiet, &[]),
            "{quiet}"
        );
    }
}

/// Scrapes `demo` until at least `lost` probes are lost (at most 30 s).
fn until_lost(demo: &Exporter, lost: f64) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (samples, _) = scrape(demo);
        if total(&samples, "rdma_probe_lost_total", &[]) >= lost || Instant::now() > deadline {
            return samples;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The NIC index of a simulated device name (`mlx5_3`: 3).
fn nic_index(device: &str) -> usize {
    device.strip_prefix("mlx5_").unwrap().parse().unwrap()
}

/// The other probe scenarios hit exactly what they name (docs/localization.md's faults):
/// `nic-optic-failure` loses only paths touching gpu-node-02 mlx5_3, about three round trips
/// in four, and moves its symbol errors alone; `leaf-ecmp-blackhole` loses only probes leaving
/// leaf2 for leaf1, and moves no error counter; `host-cpu-load` loses nothing and raises
/// gpu-node-02's answer delay to ~20 ms while every network RTT stays a healthy fabric's. Each
/// probing port's info names the netdev its leaf's LLDP names for it. (A probe loop starved for
/// the 500 ms timeout on a loaded machine loses the probe or two it had in flight, anywhere:
/// losses elsewhere are bounded, not forbidden.)
#[test]
fn the_probe_scenarios_lose_and_lag_exactly_where_they_say() {
    let optic = start("nic-optic-failure");
    let (first, _) = scrape(&optic);
    let samples = until_lost(&optic, 100.0);
    let suspect = [("host", "gpu-node-02"), ("device", "mlx5_3")];
    let (touching, elsewhere): (Vec<&Sample>, Vec<&Sample>) =
        matching(&samples, "rdma_probe_target_lost_total", &[]).partition(|target| {
            let from = (
                target.labels["host"].as_str(),
                target.labels["device"].as_str(),
            );
            let to = (
                target.labels["target_host"].as_str(),
                target.labels["target_device"].as_str(),
            );
            from == ("gpu-node-02", "mlx5_3") || to == ("gpu-node-02", "mlx5_3")
        });
    let lost_touching: f64 = touching.iter().map(|s| s.value).sum();
    assert!(lost_touching >= 100.0, "{touching:?}");
    // Every host lost probes to it, and it to every host.
    for host in HOSTS {
        assert!(
            touching.iter().any(|s| s.labels["host"] == host),
            "{host}: {touching:?}"
        );
    }
    assert!(
        elsewhere.iter().map(|s| s.value).sum::<f64>() <= 0.05 * lost_touching,
        "{elsewhere:?}"
    );
    let lost = total(&samples, "rdma_probe_lost_total", &suspect);
    let answered = total(&samples, "rdma_probe_network_rtt_seconds_count", &suspect);
    let share = lost / (lost + answered);
    assert!(
        (0.6..0.9).contains(&share),
        "{lost} lost, {answered} answered"
    );
    for counter in ["rdma_port_symbol_error_total", "rdma_port_rcv_errors_total"] {
        assert!(
            total(&samples, counter, &suspect) > total(&first, counter, &suspect),
            "{counter}"
        );
        assert_eq!(
            total(&samples, counter, &[]) - total(&samples, counter, &suspect),
            total(&first, counter, &[]) - total(&first, counter, &suspect),
            "{counter} moved elsewhere"
        );
    }
    assert_eq!(total(&samples, "rdma_port_link_downed_total", &[]), {
        total(&first, "rdma_port_link_downed_total", &[])
    });
    drop(optic);

    let hole = start("leaf-ecmp-blackhole");
    let (first, _) = scrape(&hole);
    let samples = until_lost(&hole, 50.0);
    // NIC n is cabled to leaf n % 2 + 1: leaf2's NICs are the odd ones.
    let (crossing, elsewhere): (Vec<&Sample>, Vec<&Sample>) =
        matching(&samples, "rdma_probe_target_lost_total", &[]).partition(|target| {
            nic_index(&target.labels["device"]) % 2 == 1
                && nic_index(&target.labels["target_device"]).is_multiple_of(2)
        });
    let lost_crossing: f64 = crossing.iter().map(|s| s.value).sum();
    assert!(lost_crossing >= 50.0, "{crossing:?}");
    for target in &crossing {
        assert_ne!(target.labels["path"], "rail", "{target:?}");
    }
    assert!(
        elsewhere.iter().map(|s| s.value).sum::<f64>() <= 0.05 * lost_crossing,
        "{elsewhere:?}"
    );
    for quiet in [
        "rdma_port_symbol_error_total",
        "rdma_port_rcv_errors_total",
        "rdma_port_link_downed_total",
    ] {
        assert_eq!(
            total(&samples, quiet, &[]),
            total(&first, quiet, &[]),
            "{quiet}"
        );
    }
    drop(hole);

    let busy = start("host-cpu-load");
    let deadline = Instant::now() + Duration::from_secs(60);
    let samples = loop {
        let (samples, _) = scrape(&busy);
        let neighbors = matching(&samples, "rdma_switch_port_neighbor_info", &[]).count();
        let answered = total(&samples, "rdma_probe_network_rtt_seconds_count", &[]);
        if (neighbors == 32 && answered > 1_000.0) || Instant::now() > deadline {
            break samples;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(total(&samples, "rdma_probe_lost_total", &[]), 0.0);
    // gpu-node-02's responders hold each probe 20 ms and some; the others only their loop's
    // lag (under 1 ms on an idle machine, a few on a loaded one).
    let (busy, idle): (Vec<&Sample>, Vec<&Sample>) =
        matching(&samples, "rdma_probe_answer_delay_seconds", &[])
            .partition(|s| s.labels["host"] == "gpu-node-02");
    assert_eq!((busy.len(), idle.len()), (8, 24));
    let slowest_idle = idle.iter().map(|s| s.value).fold(0.0, f64::max);
    for delay in &busy {
        assert!(delay.value >= 0.019, "{delay:?}");
        assert!(delay.value > 2.0 * slowest_idle, "{delay:?}, {idle:?}");
    }
    // The network RTT, the responders' delay taken out, stays a healthy fabric's.
    let answered = total(&samples, "rdma_probe_network_rtt_seconds_count", &[]);
    let under_25us = total(
        &samples,
        "rdma_probe_network_rtt_seconds_bucket",
        &[("le", "2.5e-05")],
    );
    assert!(under_25us >= 0.99 * answered, "{under_25us} of {answered}");
    // The netdev of each probing port is the one its leaf's LLDP names for that host.
    let neighbors: std::collections::BTreeSet<(String, String)> =
        matching(&samples, "rdma_switch_port_neighbor_info", &[])
            .map(|s| {
                (
                    s.labels["neighbor_host"].clone(),
                    s.labels["neighbor_port"].clone(),
                )
            })
            .collect();
    let infos: Vec<&Sample> = matching(&samples, "rdma_probe_port_info", &[]).collect();
    assert_eq!(infos.len(), 32);
    for info in infos {
        let netdev = &info.labels["netdev"];
        assert_eq!(
            netdev,
            &format!("ens{}f0np0", nic_index(&info.labels["device"]) + 1),
            "{info:?}"
        );
        assert!(
            neighbors.contains(&(info.labels["host"].clone(), netdev.clone())),
            "{info:?} has no LLDP neighbour in {neighbors:?}"
        );
    }
}
