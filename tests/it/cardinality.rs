//! Cardinality controls (issue 18, item 5): hw_counters include/exclude on the fixture node
//! (left-out counters absent and never read, bad patterns refused at their flag or key), and
//! the series budget per node and per switch that docs/deploy.md states, counted from real
//! scrapes. `cargo test --test it cardinality:: -- --nocapture` prints the figures.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::gnmi_target::{serve, FakeSwitch, Transport};
use common::*;

/// The hw_counters the shipped alerts, rules and dashboards use (and `lifespan`): the fleet
/// preset of docs/deploy.md, which must keep every one of them.
const FLEET_HW_COUNTERS: &str = "lifespan|out_of_buffer|out_of_sequence|packet_seq_err|implied_nak_seq_err|duplicate_request|local_ack_timeout_err|rnr_nak_retry_err|req_transport_retries_exceeded|np_cnp_sent|np_ecn_marked_roce_packets|rp_cnp_handled|rp_cnp_ignored|rx_icrc_encapsulated|completer_retry_err|rcvd_seq_err|out_of_seq_request|retry_exceeded_err";

fn cx7() -> std::path::PathBuf {
    fixture("cx7-roce")
}

fn serve_on(sys: &Path, extra: &[&str]) -> Exporter {
    let mut args = vec!["--no-collector.pfc-storm", "--no-collector.netlink"];
    args.extend_from_slice(extra);
    Exporter::on_node(sys, &cx7().join("ethtool"), &args)
}

fn series(exporter: &Exporter) -> Vec<Sample> {
    parse_exposition(&exporter.metrics())
}

fn has(samples: &[Sample], name: &str) -> bool {
    samples.iter().any(|s| s.name == name)
}

#[test]
fn excluded_hw_counters_are_absent_and_the_rest_stay() {
    let exporter = serve_on(
        &cx7().join("sys"),
        &[
            "--collector.sysfs.hw-counters-exclude",
            "rx_(read|write|atomic)_requests|roce_.*|out_of_buffer",
        ],
    );
    let samples = series(&exporter);
    for gone in [
        "rdma_hw_rx_read_requests_total",
        "rdma_hw_roce_adp_retrans_total",
        "rdma_hw_roce_slow_restart_total",
        "rdma_hw_out_of_buffer_total",
        // Device-level hw_counters are filtered by the same patterns.
        "rdma_device_hw_out_of_buffer_total",
    ] {
        assert!(!has(&samples, gone), "{gone} is excluded");
    }
    for kept in [
        "rdma_hw_np_cnp_sent_total",
        "rdma_hw_rp_cnp_ignored_total",
        "rdma_hw_out_of_sequence_total",
        "rdma_device_hw_out_of_sequence_total",
        // Anchored: `out_of_buffer` does not take `rx_out_of_buffer`-like names with it, and
        // classic counters are never filtered.
        "rdma_port_rcv_data_bytes_total",
    ] {
        assert!(has(&samples, kept), "{kept} is not excluded");
    }

    let include = serve_on(
        &cx7().join("sys"),
        &["--collector.sysfs.hw-counters-include", "np_.*|rp_.*"],
    );
    let samples = series(&include);
    let hw: std::collections::BTreeSet<&str> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_hw_") || s.name.starts_with("rdma_device_hw_"))
        .map(|s| s.name.as_str())
        .collect();
    assert!(!hw.is_empty());
    assert!(
        hw.iter()
            .all(|n| n.starts_with("rdma_hw_np_") || n.starts_with("rdma_hw_rp_")),
        "{hw:?}"
    );
    assert!(hw.contains("rdma_hw_np_cnp_sent_total"), "{hw:?}");
}

/// A counter left out is never opened: one whose file holds garbage costs a read error when
/// read, and none when excluded.
#[test]
fn excluded_hw_counters_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    copy_tree(&cx7().join("sys"), &sys);
    let port = sys.join("class/infiniband/mlx5_0/ports/1/hw_counters/rx_dct_connect");
    let port = std::fs::canonicalize(&port).unwrap();
    std::fs::write(&port, "not a number\n").unwrap();
    let errors = |exporter: &Exporter| -> f64 {
        series(exporter)
            .iter()
            .filter(|s| s.name == "rdma_exporter_read_errors_total")
            .map(|s| s.value)
            .sum()
    };
    let reading = serve_on(&sys, &[]);
    assert!(
        errors(&reading) >= 1.0,
        "the garbage file is read and counted"
    );
    let excluding = serve_on(
        &sys,
        &["--collector.sysfs.hw-counters-exclude", "rx_dct_connect"],
    );
    assert_eq!(errors(&excluding), 0.0, "an excluded counter is never read");
    // The YAML key does the same.
    let config = dir.path().join("config.yml");
    std::fs::write(&config, "node:\n  hw_counters:\n    exclude: rx_dct_.*\n").unwrap();
    let from_file = serve_on(&sys, &["--config.file", path_str(&config)]);
    assert_eq!(errors(&from_file), 0.0);
    assert!(!has(&series(&from_file), "rdma_hw_rx_dct_connect_total"));
}

#[test]
fn a_bad_counter_pattern_is_a_clear_error() {
    let (code, _, stderr) = run(&["serve", "--collector.sysfs.hw-counters-include", "rp_("]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--collector.sysfs.hw-counters-include")
            && stderr.contains("invalid regular expression"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(&config, "node:\n  hw_counters:\n    exclude: 'rp_('\n").unwrap();
    let (code, _, stderr) = run(&["check-config", "--config.file", path_str(&config)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("config.yml:2:")
            && stderr.contains("hw_counters.exclude: invalid regular expression"),
        "{stderr}"
    );
}

/// The fleet preset keeps every hw_counter the shipped alerts, rules and dashboards name, and
/// docs/deploy.md shows it as it is here.
#[test]
fn the_fleet_preset_keeps_what_alerts_and_dashboards_use() {
    let preset = regex::Regex::new(&format!("^(?:{FLEET_HW_COUNTERS})$")).unwrap();
    let used = regex::Regex::new(r"rdma_(?:device_)?hw_([a-z0-9_]+?)_total").unwrap();
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for dir in ["alerts", "dashboards"] {
        for entry in std::fs::read_dir(project_root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yml" || e == "json") {
                files.push(path);
            }
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for c in used.captures_iter(&text) {
            names.insert(c[1].to_string());
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !preset.is_match(n)).collect();
    assert!(missing.is_empty(), "the preset drops {missing:?}");
    let deploy = std::fs::read_to_string(project_root().join("docs/deploy.md")).unwrap();
    assert!(
        deploy.contains(FLEET_HW_COUNTERS),
        "docs/deploy.md shows another preset"
    );
}

/// Series of a scrape, with the exporter's own families apart.
fn count(samples: &[Sample]) -> (usize, usize) {
    let own = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_exporter_") || s.name.starts_with("process_"))
        .count();
    (samples.len(), own)
}

/// The figures of docs/deploy.md "Series budget": the fixture node (10 devices, and its 8 GPU
/// NICs), a demo host, with defaults and with each control.
#[test]
fn series_budget_per_node() {
    let eight = ["--collector.infiniband.device-include", "^mlx5_[0-7]$"];
    let preset = ["--collector.sysfs.hw-counters-include", FLEET_HW_COUNTERS];
    let fixture = |extra: &[&str]| count(&series(&serve_on(&cx7().join("sys"), extra)));
    let all = fixture(&[]);
    let eight_nics = fixture(&eight);
    let eight_preset = fixture(&[&eight[..], &preset[..]].concat());
    let all_preset = fixture(&preset);
    eprintln!(
        "series-budget fixture node, 10 devices, defaults: {} ({} self)",
        all.0, all.1
    );
    eprintln!(
        "series-budget fixture node, 10 devices, fleet hw_counters preset: {}",
        all_preset.0
    );
    eprintln!(
        "series-budget fixture node, 8 GPU NICs, defaults: {}",
        eight_nics.0
    );
    eprintln!(
        "series-budget fixture node, 8 GPU NICs, fleet hw_counters preset: {}",
        eight_preset.0
    );
    // The design's budget (under 1 000), with headroom. Since the NIC health families (a
    // device's PCIe link: 6, a port's FEC: 4, its ECN points: 2 on the fixture's PFC priority)
    // the 8 NICs take 916.
    assert!(eight_nics.0 < 950, "{} series for 8 NICs", eight_nics.0);
    assert!(eight_preset.0 < eight_nics.0 && all_preset.0 < all.0);

    let demo = Exporter::start_subcommand("demo", &["--scenario", "healthy"]);
    let host = parse_exposition(&demo.get("/hosts/gpu-node-01/metrics").2);
    // The demo's hosts run every collector, opt-in ones included: count them apart.
    let group = |s: &Sample| -> &'static str {
        let n = s.name.as_str();
        if n.starts_with("rdma_pod_") || n == "rdma_device_pod_info" {
            "pods"
        } else if ["rdma_device_resources", "rdma_qps", "rdma_owner_qps"].contains(&n)
            || n.starts_with("rdma_optional_")
        {
            "netlink"
        } else if n == "rdma_pfc_paused_ratio_peak" || n == "rdma_pfc_storms_detected_total" {
            "pfc_storm"
        } else if n.starts_with("rdma_probe_") {
            "probe"
        } else if n.starts_with("rdma_transceiver_")
            || n == "rdma_exporter_transceiver_read_errors_total"
        {
            "transceiver"
        } else if n.starts_with("rdma_dcqcn_")
            || n.starts_with("rdma_fec_lane_")
            || n.starts_with("rdma_fec_histogram_")
            || n.starts_with("rdma_pcie_link_max_")
            || (n == "rdma_pcie_aer_errors_total"
                && s.labels.get("severity").is_some_and(|v| v == "correctable"))
        {
            "opt-in detail"
        } else {
            "sysfs+ethtool+self"
        }
    };
    let mut groups = std::collections::BTreeMap::<&str, usize>::new();
    for s in &host {
        *groups.entry(group(s)).or_default() += 1;
    }
    eprintln!(
        "series-budget demo host, 8 NICs, every collector: {} {groups:?}",
        host.len()
    );
    let node = groups
        .get("sysfs+ethtool+self")
        .copied()
        .unwrap_or_default();
    // The default collectors (the FEC and PCIe families among them) stay under 1 000.
    assert!(node > 100 && node < 1_000, "{groups:?}");
    // Probing on (the demo's hosts probe each other, healthy: no losing target has series of
    // its own): 21 series a port, about 1 100 with the default collectors.
    let probe = groups.get("probe").copied().unwrap_or_default();
    assert_eq!(probe, 8 * 21, "{groups:?}");
    assert!(node + probe < 1_110, "{groups:?}");
    // The transceiver collector (opt-in: it needs CAP_NET_ADMIN) on the demo's 400G CMIS
    // modules: 48 a port (8 lanes x 3 monitors, their thresholds, temperature, voltage, info).
    let transceiver = groups.get("transceiver").copied().unwrap_or_default();
    assert_eq!(transceiver, 8 * 48, "{groups:?}");
}

/// Series per switch and per switch port for the SNMP (`arista_eos`, the demo's leaves) and
/// gNMI (`sonic`) profiles, from `/probe`.
#[test]
fn series_budget_per_switch() {
    let demo = Exporter::start_subcommand("demo", &["--scenario", "healthy"]);
    let leaf = wait_for_samples(&demo, "leaf1 polled", Duration::from_secs(20), |samples| {
        value_of(samples, "rdma_switch_up", &[("switch", "leaf1")]) == Some(1.0)
    })
    .0;
    let leaf: Vec<&Sample> = leaf
        .iter()
        .filter(|s| s.labels.get("switch").map(String::as_str) == Some("leaf1"))
        .collect();
    let ports = leaf
        .iter()
        .filter(|s| s.name == "rdma_switch_port_info")
        .count();
    eprintln!(
        "series-budget snmp arista_eos (demo leaf): {} series, {ports} ports, {:.1} per port",
        leaf.len(),
        leaf.len() as f64 / ports as f64
    );
    assert!(ports > 0 && leaf.len() > ports);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let address = runtime.block_on(serve(FakeSwitch::new(None), Transport::Plain));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node: {{enabled: false}}\nswitch_polling: on_demand\nswitches:\n\
             \x20 - {{name: sonic1, address: '{address}', protocol: gnmi, profile: sonic, interval: 2s, timeout: 1s, gnmi: {{mode: once}}}}\n"
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let (status, _, body) = exporter.get("/probe?target=sonic1");
    assert_eq!(status, 200, "{body}");
    let sonic = parse_exposition(&body);
    let ports = sonic
        .iter()
        .filter(|s| s.name == "rdma_switch_port_info")
        .count();
    eprintln!(
        "series-budget gnmi sonic (test target): {} series, {ports} ports, {:.1} per port",
        sonic.len(),
        sonic.len() as f64 / ports as f64
    );
    assert!(ports > 0 && sonic.len() > ports);
}

/// `--collector.nccl.aggregate-only`: a node whose logs hold 200 ranks serves per-node counts
/// instead of two series per rank.
#[test]
fn nccl_aggregate_only_keeps_per_node_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut text: String = (0..200)
        .map(|pid| format!("gpu-node-01:{pid}:1 [0] NCCL INFO Using network IB\n"))
        .collect();
    text.push_str("gpu-node-01:999:1 [0] NCCL INFO Using network Socket\n");
    std::fs::write(dir.path().join("job.log"), text).unwrap();
    let nccl_series = |extra: &[&str]| -> Vec<Sample> {
        let mut args = vec![
            "--no-collector.sysfs",
            "--collector.nccl.log-dir",
            path_str(dir.path()),
        ];
        args.extend_from_slice(extra);
        let exporter = Exporter::start(&args);
        let (samples, _) =
            wait_for_samples(&exporter, "the first scan", Duration::from_secs(20), |s| {
                value_of(s, "rdma_nccl_socket_fallback_processes", &[]) == Some(1.0)
            });
        samples
            .into_iter()
            .filter(|s| s.name.starts_with("rdma_nccl_"))
            .collect()
    };
    let per_process = nccl_series(&[]);
    let aggregate = nccl_series(&["--collector.nccl.aggregate-only"]);
    eprintln!(
        "series-budget nccl, 201 processes: {} per process, {} aggregate-only",
        per_process.len(),
        aggregate.len()
    );
    assert_eq!(
        matching(&per_process, "rdma_nccl_process_info", &[]).count(),
        201
    );
    assert!(!aggregate.iter().any(|s| s.labels.contains_key("pid")));
    assert_eq!(
        value_of(
            &aggregate,
            "rdma_nccl_processes",
            &[("host", "gpu-node-01"), ("network", "IB")]
        ),
        Some(200.0)
    );
    assert_eq!(
        value_of(&aggregate, "rdma_nccl_socket_fallback_processes", &[]),
        Some(1.0)
    );
    assert!(aggregate.len() <= 6, "{}", aggregate.len());
}
