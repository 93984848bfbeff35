//! `ecn-tune` end to end: the demo in `healthy`, `ecn-too-high` and `ecn-too-low`, a real
//! Prometheus scraping it every second and evaluating the shipped recording rules, and the built
//! binary classifying every NIC and switch port over the last minute. Then what it says when it
//! cannot tell (Prometheus unreachable, no series, rules not loaded, an nccl-tests output
//! without timestamps), and the real captured inputs of the corpus (`../shared/corpus/`).

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::corpus::corpus;
use common::prometheus::{self, wait_for};
use common::*;

/// 2 hosts of 4 NICs on 2 leaves: 8 NICs, 8 switch ports.
const NICS: usize = 8;

/// The demo straight in the fault (`--start-at 60`), at real speed so rates mean line rate;
/// the fault lasts 180 s from here. Switches walked every second.
fn demo(scenario: &str) -> Exporter {
    Exporter::small_demo(scenario, "60", "1s", "4")
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn ecn_tune(args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = Command::new(binary())
        .arg("ecn-tune")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running ecn-tune");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Demo and Prometheus with the shipped rules; returns once Prometheus holds two minutes of
/// scrapes of every target: a minute for the 1-minute rules to fill, a minute of window.
fn fabric_under(scenario: &str) -> (Exporter, ChildGuard, tempfile::TempDir, String, Instant) {
    let demo = demo(scenario);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (prometheus, address) = prometheus::start_with_rules(
        dir.path(),
        &prometheus::demo_sd_job(&format!("rdma-{scenario}"), &demo.address, Some(scenario)),
        &[&project_root().join("alerts/rdma-rules.yml")],
    );
    // Every target the demo lists (hosts, switches, the IB subnet), as Prometheus discovers them.
    let (status, _, sd) = demo.get("/sd");
    assert_eq!(status, 200, "{sd}");
    let targets: usize = serde_json::from_str::<serde_json::Value>(&sd)
        .unwrap()
        .as_array()
        .map_or(0, |groups| {
            groups
                .iter()
                .map(|g| g["targets"].as_array().map_or(0, Vec::len))
                .sum()
        });
    // Scrapes counted, not time waited: a loaded machine that misses scrapes waits longer.
    // 125 one-second scrapes span at least 124 s.
    let filled = wait_for(
        &address,
        &format!("count_over_time(up{{cluster=\"{scenario}\"}}[3m])"),
        Duration::from_secs(360),
        |v| v.len() == targets && v.iter().all(|(_, n)| *n >= 125.0),
    );
    assert!(
        targets >= 3 && filled.len() == targets && filled.iter().all(|(_, n)| *n >= 125.0),
        "Prometheus did not collect two minutes of scrapes of the demo's {targets} targets in 6 minutes: {filled:?}"
    );
    (demo, prometheus, dir, address, started)
}

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\nstderr: {}", run.stdout, run.stderr))
}

/// Ports per class, and every reason, for messages.
fn classes(report: &serde_json::Value, rows: &str) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut counts = BTreeMap::new();
    let mut reasons = Vec::new();
    for row in report[rows].as_array().unwrap() {
        let class = row["verdict"]["class"].as_str().unwrap().to_string();
        reasons.push(format!("{class}: {}", row["verdict"]["reason"]));
        *counts.entry(class).or_insert(0) += 1;
    }
    (counts, reasons)
}

/// Runs `ecn-tune` over the last minute of `scenario` and checks every NIC and switch port got
/// `expected`, with the exit code and the direction that go with it.
fn every_port_is(scenario: &str, expected: &str, exit_code: i32, direction: &str) {
    let _exclusive = common::exclusive(module_path!());
    let (_demo, _prometheus, _dir, address, started) = fabric_under(scenario);
    let selector = format!("{{cluster=\"{scenario}\"}}");
    let prometheus_url = format!("http://{address}");
    let run = ecn_tune(
        &[
            "--prometheus",
            &prometheus_url,
            "--last",
            "60s",
            "--selector",
            &selector,
            "--output",
            "json",
        ],
        &[],
    );
    let elapsed = started.elapsed();
    assert_eq!(run.code, Some(exit_code), "{}\n{}", run.stdout, run.stderr);
    let report = json(&run);
    assert_eq!(report["exit_code"], exit_code);
    let (nics, nic_reasons) = classes(&report, "nics");
    let (ports, port_reasons) = classes(&report, "switch_ports");
    let context = format!(
        "{scenario}, {:.0} s after the demo started (the fault lasts 180 s): NICs {nics:?} {nic_reasons:#?}, switch ports {ports:?} {port_reasons:#?}",
        elapsed.as_secs_f64()
    );
    assert_eq!(
        nics,
        BTreeMap::from([(expected.to_string(), NICS)]),
        "{context}"
    );
    assert_eq!(
        ports,
        BTreeMap::from([(expected.to_string(), NICS)]),
        "{context}"
    );
    for row in report["nics"].as_array().unwrap() {
        assert_eq!(row["labels"]["cluster"], scenario, "the selector held");
        assert!(
            row["verdict"]["direction"]
                .as_str()
                .unwrap()
                .starts_with(direction),
            "{row}"
        );
        // The evidence the verdict rests on is in the report.
        assert!(
            row["evidence"]["tx_utilization"]["avg"].is_number(),
            "{row}"
        );
        assert!(
            row["evidence"]["pfc_rx_paused_ratio"]["avg"].is_number(),
            "{row}"
        );
        assert!(
            row["evidence"]["cnp_handled_per_packet"].is_number(),
            "{row}"
        );
        assert_eq!(row["evidence"]["line_rate_gbps"], 400.0, "{row}");
        // What the NIC is set to (MLNX_OFED's ecn/, which the demo writes): DCQCN on at both
        // points of the PFC priority in every scenario of this test.
        assert_eq!(
            row["evidence"]["nic_settings"]["ecn"],
            serde_json::json!([{"priority": "3", "reaction": true, "notification": true}]),
            "{row}"
        );
        // The demo's NICs probe each other: the probe RTT joins the row, before the run too
        // (the minute before the window), which proves the queries on a real Prometheus. The
        // notes are not asserted: the simulated fabric's delays are fixed whatever the ECN
        // scenario (no queues grow), but its ports time probes with the host's clock, which
        // the machine's load moves. A rise with PFC, or without, is proven on tables
        // (src/diag/ecn_tune/evidence.rs), not forced on the demo.
        assert_eq!(row["evidence"]["probe_clock"], "software", "{row}");
        for key in [
            "probe_network_rtt_seconds",
            "probe_network_rtt_baseline_seconds",
        ] {
            let rtt = row["evidence"][key].as_f64();
            assert!(rtt.is_some_and(|r| r > 0.0 && r < 1.0), "{key}: {row}");
        }
    }
    for row in report["switch_ports"].as_array().unwrap() {
        // LLDP joined every leaf port to the NIC behind it, whose rate it took.
        assert!(
            row["neighbor"].as_str().unwrap().starts_with("gpu-node-0"),
            "{row}"
        );
        assert_eq!(row["evidence"]["line_rate_source"], "neighbour", "{row}");
    }
    // The text report says the same, with the direction.
    let text = ecn_tune(
        &[
            "--prometheus",
            &prometheus_url,
            "--last",
            "60s",
            "--selector",
            &selector,
        ],
        &[],
    );
    assert_eq!(
        text.code,
        Some(exit_code),
        "{}\n{}",
        text.stdout,
        text.stderr
    );
    assert!(
        text.stdout.contains(&format!("NICs ({NICS} {expected})")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("move: {direction}")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("probe network RTT "),
        "{}",
        text.stdout
    );
    assert_eq!(
        text.stdout
            .matches("NIC settings: priority 3: ECN reaction point on, notification point on")
            .count(),
        NICS,
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("point off"), "{}", text.stdout);
}

#[test]
fn healthy_fabric_is_healthy_everywhere_and_exits_0() {
    every_port_is("healthy", "healthy", 0, "keep Kmin/Kmax");
}

#[test]
fn ecn_too_high_says_lower_kmin_kmax_on_every_port_and_exits_1() {
    every_port_is("ecn-too-high", "too_high", 1, "lower Kmin/Kmax");
}

#[test]
fn ecn_too_low_says_raise_kmin_kmax_on_every_port_and_exits_1() {
    every_port_is("ecn-too-low", "too_low", 1, "raise Kmin/Kmax");
}

/// `cnp-ignored` turns gpu-node-02 mlx5_1's ECN reaction point off (MLNX_OFED's `ecn/` in the
/// demo): ecn-tune says so for that NIC, first among its notes, and for no other; every other
/// NIC's settings line says both points on.
#[test]
fn a_nic_with_its_reaction_point_off_is_named_by_its_settings() {
    let _exclusive = common::exclusive(module_path!());
    let scenario = "cnp-ignored";
    let (_demo, _prometheus, _dir, address, _) = fabric_under(scenario);
    let selector = format!("{{cluster=\"{scenario}\"}}");
    let prometheus_url = format!("http://{address}");
    let args = [
        "--prometheus",
        &prometheus_url,
        "--last",
        "60s",
        "--selector",
        &selector,
    ];
    let run = ecn_tune(&[&args[..], &["--output", "json"]].concat(), &[]);
    let report = json(&run);
    let note = "ECN reaction point off on priority 3: DCQCN cannot slow this sender";
    let mut named = Vec::new();
    for row in report["nics"].as_array().unwrap() {
        let nic = format!("{} {}", row["labels"]["instance"], row["labels"]["device"]);
        let notes: Vec<&str> = row["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        if notes.first().is_some_and(|n| n.starts_with(note)) {
            named.push(nic.clone());
        }
        let reaction = &row["evidence"]["nic_settings"]["ecn"][0]["reaction"];
        assert_eq!(
            *reaction,
            serde_json::Value::Bool(nic != "\"gpu-node-02\" \"mlx5_1\""),
            "{row}"
        );
    }
    assert_eq!(named, ["\"gpu-node-02\" \"mlx5_1\""], "{report:#}");
    let text = ecn_tune(&args, &[]);
    assert_eq!(text.stdout.matches(note).count(), 1, "{}", text.stdout);
    assert!(
        text.stdout
            .contains("NIC settings: priority 3: ECN reaction point off, notification point on"),
        "{}",
        text.stdout
    );
}

#[test]
fn an_unreachable_prometheus_is_exit_2_and_named() {
    // A port nothing listens on: bound, then released.
    let port = prometheus::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let run = ecn_tune(&["--prometheus", &url, "--last", "10m"], &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("cannot reach Prometheus at {url}")),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    // The password of a URL with credentials never shows.
    let secret = format!("http://ops:hunter2@127.0.0.1:{port}");
    let run = ecn_tune(&["--prometheus", &secret, "--last", "10m"], &[]);
    assert_eq!(run.code, Some(2));
    assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
    assert!(run.stderr.contains(&url), "{}", run.stderr);
}

#[test]
fn a_prometheus_without_the_series_says_which_are_missing_and_why() {
    let _exclusive = common::exclusive(module_path!());
    // Nothing scraped: not even the exporter's metrics.
    let empty_dir = tempfile::tempdir().unwrap();
    let (_empty, empty) = prometheus::start_with_rules(
        empty_dir.path(),
        "  []\n",
        &[&project_root().join("alerts/rdma-rules.yml")],
    );
    wait_for(&empty, "vector(1)", Duration::from_secs(60), |v| {
        v.len() == 1
    });
    let run = ecn_tune(
        &["--prometheus", &format!("http://{empty}"), "--last", "5m"],
        &[],
    );
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("no series of the exporter's recording rules"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("is the exporter scraped"),
        "{}",
        run.stderr
    );

    // The exporter scraped, the rules not loaded.
    let demo = demo("healthy");
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus::start(
        dir.path(),
        &prometheus::demo_sd_job("rdma", &demo.address, None),
    );
    let nics = wait_for(
        &address,
        "rdma_port_xmit_data_bytes_total",
        Duration::from_secs(120),
        |v| v.len() == NICS,
    );
    assert_eq!(nics.len(), NICS, "the demo's NICs were not scraped");
    // The switches' raw counters have rates too: they alone must not pass for the rules.
    let switch = wait_for(
        &address,
        "rate(rdma_switch_queue_ecn_marked_packets_total[1m])",
        Duration::from_secs(120),
        |v| !v.is_empty(),
    );
    assert!(
        !switch.is_empty(),
        "the demo's switches were not scraped twice"
    );
    let run = ecn_tune(
        &["--prometheus", &format!("http://{address}"), "--last", "1m"],
        &[],
    );
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("load alerts/rdma-rules.yml"),
        "{}",
        run.stderr
    );

    // The window of a timestamped nccl-tests output (-S 1), read as UTC here.
    let nccl = dir.path().join("all_reduce.txt");
    std::fs::write(
        &nccl,
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong           timestamp\n\
         \x20 8589934592    2147483648     float     sum      -1  45012.3  190.84  357.82       0  44987.1  190.94  358.02       0  2025-10-14 12:00:05\n\
         \x20 8589934592    2147483648     float     sum      -1  45101.0  190.46  357.11       0  45003.9  190.87  357.89       0  2025-10-14 12:09:58\n",
    )
    .unwrap();
    let run = ecn_tune(
        &[
            "--prometheus",
            &format!("http://{address}"),
            "--nccl-tests",
            path_str(&nccl),
        ],
        &[("TZ", "UTC")],
    );
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("2025-10-14T12:00:05Z .. 2025-10-14T12:09:58Z"),
        "the window is the run's: {}",
        run.stderr
    );
}

#[test]
fn an_nccl_tests_output_without_timestamps_asks_for_the_window() {
    let file = corpus("nccl-tests-window").sample("all_reduce_perf-h100-16ranks.txt");
    let run = ecn_tune(
        &[
            "--prometheus",
            "http://127.0.0.1:9",
            "--nccl-tests",
            path_str(&file),
        ],
        &[],
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no timestamps"), "{}", run.stderr);
    assert!(run.stderr.contains("--start and --end"), "{}", run.stderr);
}

#[test]
fn the_rule_of_thumb_runs_without_prometheus() {
    let run = ecn_tune(
        &[
            "--buffer-bytes",
            "64MB",
            "--ports",
            "64",
            "--line-rate",
            "400",
            "--output",
            "json",
        ],
        &[],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let report = json(&run);
    let s = &report["starting_thresholds"];
    assert_eq!(s["bound_by"], "buffer", "{s}");
    let (kmin, kmax, xoff) = (
        s["kmin_bytes"].as_f64().unwrap(),
        s["kmax_bytes"].as_f64().unwrap(),
        s["xoff_bytes"].as_f64().unwrap(),
    );
    assert!(kmin < kmax && kmax <= xoff && xoff < 1_000_000.0, "{s}");
    assert!(!s["assumptions"].as_array().unwrap().is_empty());
    assert_eq!(s["sources"].as_array().unwrap().len(), 3);
    // Without a line rate (and no Prometheus to take it from) it says what is missing.
    let run = ecn_tune(&["--buffer-bytes", "64MB", "--ports", "64"], &[]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("--line-rate"), "{}", run.stderr);
}

/// The series (instance, value) a query answer holds, or the word its refusal names.
type Answer = Result<Vec<(&'static str, f64)>, &'static str>;

/// Every sample of the corpus kinds `nccl-tests-window` and `prometheus-api` has its expected
/// result here, and a sample without one fails: the parsers are proven on what real tools
/// printed.
#[test]
fn the_corpus_parses_as_expected() {
    use rdma_fabric_exporter::diag::ecn_tune::{nccl_window, query};

    type Window<'a> = (&'a str, Option<(&'a str, &'a str)>);
    let windows: [Window; 2] = [
        ("all_reduce_perf-h100-16ranks.txt", None),
        ("all_reduce_perf-gb200-nvl72.txt", None),
    ];
    for (path, (name, expected)) in corpus("nccl-tests-window").with_table(&windows, |w| w.0) {
        let name = *name;
        let text = std::fs::read_to_string(&path).unwrap();
        match (nccl_window::span(name, &text), expected) {
            (Ok((first, last)), Some((want_first, want_last))) => {
                assert_eq!(
                    (first.as_str(), last.as_str()),
                    (*want_first, *want_last),
                    "{name}"
                )
            }
            (Err(nccl_window::NcclWindowError::NoTimestamps { .. }), None) => {}
            (got, want) => panic!("{name}: {got:?}, expected {want:?}"),
        }
    }

    let answers: [(&str, Answer); 2] = [
        (
            "instant-query-vector.json",
            Ok(vec![("localhost:9090", 1.0), ("localhost:9100", 0.0)]),
        ),
        ("range-query-matrix.json", Err("matrix")),
    ];
    for (path, (name, expected)) in corpus("prometheus-api").with_table(&answers, |a| a.0) {
        let body = std::fs::read(&path).unwrap();
        match (query::decode_vector(&body, 200), expected) {
            (Ok(samples), Ok(want)) => {
                let got: Vec<(&str, f64)> = samples
                    .iter()
                    .map(|s| (s.labels["instance"].as_str(), s.value.unwrap()))
                    .collect();
                assert_eq!(&got, want, "{name}");
            }
            (Err(query::Failure::Shape(message)), Err(word)) => {
                assert!(message.contains(word), "{name}: {message}")
            }
            (got, want) => panic!("{name}: {got:?}, expected {want:?}"),
        }
    }
}
