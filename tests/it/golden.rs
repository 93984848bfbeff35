//! End to end on the bundled ConnectX-7 node: fixture in, whole `/metrics` body out, compared
//! with a checked-in file. `UPDATE_FIXTURES=1` rewrites the fixture tree from the generator,
//! `UPDATE_GOLDEN=1` rewrites the expected output.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use rdma_fabric_exporter::sim::sysfs_tree::{
    connectx7_node, write_ethtool_files, write_tree, LinkLayer, NicSpec,
};

/// The bundled node: 8 RoCE GPU NICs, one InfiniBand NDR port, one front-end RoCE port.
const DEVICES: usize = 10;
const SEED: u64 = 2026;

fn nics() -> Vec<NicSpec> {
    connectx7_node(DEVICES, SEED)
}

fn cx7() -> PathBuf {
    fixture("cx7-roce")
}

fn write_fixture(root: &Path) {
    write_tree(&root.join("sys"), &nics()).unwrap();
    write_ethtool_files(&root.join("ethtool"), &nics()).unwrap();
}

/// Every file and symlink below `dir`, with contents or link targets, never following links.
fn tree_listing(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(base).unwrap().to_path_buf();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.insert(
                    relative,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                );
            } else if kind.is_dir() {
                walk(base, &path, out);
            } else {
                out.insert(
                    relative,
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn fixture_tree_matches_its_generator() {
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        let _ = std::fs::remove_dir_all(cx7());
        write_fixture(&cx7());
    }
    let fresh = tempfile::tempdir().unwrap();
    write_fixture(fresh.path());
    let expected = tree_listing(fresh.path());
    let actual = tree_listing(&cx7());
    assert!(expected.len() > 1000, "{} entries", expected.len());
    for (path, content) in &expected {
        assert_eq!(
            actual.get(path),
            Some(content),
            "{} differs; run with UPDATE_FIXTURES=1",
            path.display()
        );
    }
    assert_eq!(
        actual.len(),
        expected.len(),
        "stray files in the fixture; run with UPDATE_FIXTURES=1"
    );
}

fn serve_cx7() -> Exporter {
    serve_cx7_with(&[])
}

/// The bundled node with its ethtool files, plus `extra` flags. The PFC storm sampler is off:
/// what it reports depends on how many periods passed before the scrape (tests/it/demo.rs and
/// src/node/storm.rs cover it). RDMA netlink is off: it would ask this machine's kernel, not the
/// fixture (tests/it/netlink_pods.rs covers it).
fn serve_cx7_with(extra: &[&str]) -> Exporter {
    let mut args = vec!["--no-collector.pfc-storm", "--no-collector.netlink"];
    args.extend_from_slice(extra);
    Exporter::on_node(&cx7().join("sys"), &cx7().join("ethtool"), &args)
}

/// Replaces what legitimately changes between runs: durations, build facts and the process's
/// own figures.
pub(crate) fn normalize(body: &str) -> String {
    body.lines()
        .map(|line| {
            if line.starts_with("rdma_exporter_collector_duration_seconds{") {
                let (series, _) = line.rsplit_once(' ').unwrap();
                format!("{series} <duration>")
            } else if line.starts_with("process_") || line.starts_with("rdma_exporter_async_tasks ")
            {
                let (series, _) = line.rsplit_once(' ').unwrap();
                format!("{series} <process>")
            } else if line.starts_with("rdma_exporter_build_info{") {
                "rdma_exporter_build_info{<build facts>} 1".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn whole_metrics_body_matches_golden_file() {
    let golden = project_root().join("tests/golden/cx7-roce.prom");
    let raw = serve_cx7().metrics();
    assert_no_duplicate_series(&raw);
    let body = normalize(&raw);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &body).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).expect("golden file; run with UPDATE_GOLDEN=1");
    if body != expected {
        let first = body
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(body.lines().count().min(expected.lines().count()));
        panic!(
            "/metrics differs from {} at line {}:\n  got:      {:?}\n  expected: {:?}\n(run with UPDATE_GOLDEN=1 after checking the change)",
            golden.display(),
            first + 1,
            body.lines().nth(first),
            expected.lines().nth(first)
        );
    }
}

#[test]
fn promtool_finds_nothing_to_lint() {
    let exporter = serve_cx7();
    // promtool 2.42 lints the text format 0.0.4 only.
    promtool_check_metrics(&exporter.metrics());
}

#[test]
fn values_and_units_match_the_hardware_model() {
    let samples = parse_exposition(&serve_cx7().metrics());
    let nics = nics();
    let roce = &nics[0];
    let netdev = roce.netdev.as_deref().unwrap();
    let port = [("device", roce.name.as_str()), ("port", "1")];
    // 4-octet words to bytes.
    assert_eq!(
        value_of(&samples, "rdma_port_xmit_data_bytes_total", &port),
        Some(roce.counter("port_xmit_data").unwrap() as f64 * 4.0)
    );
    // Congestion counters pass through.
    for name in [
        "np_cnp_sent",
        "np_ecn_marked_roce_packets",
        "rp_cnp_handled",
        "rp_cnp_ignored",
        "req_transport_retries_exceeded",
    ] {
        assert_eq!(
            value_of(&samples, &format!("rdma_hw_{name}_total"), &port),
            Some(roce.hw_counter(name).unwrap() as f64),
            "{name}"
        );
    }
    // PFC on priority 3, microseconds to seconds, RDMA port labels on the ethtool series.
    let pfc = [
        ("device", roce.name.as_str()),
        ("port", "1"),
        ("netdev", netdev),
        ("priority", "3"),
        ("direction", "tx"),
    ];
    assert_eq!(
        value_of(&samples, "rdma_pfc_pause_frames_total", &pfc),
        Some(roce.ethtool_stat("tx_prio3_pause").unwrap() as f64)
    );
    let seconds = value_of(&samples, "rdma_pfc_pause_duration_seconds_total", &pfc).unwrap();
    let micros = roce.ethtool_stat("tx_prio3_pause_duration").unwrap() as f64;
    assert!(
        (seconds - micros / 1e6).abs() < 1e-9,
        "{seconds} vs {micros} µs"
    );
    // Priorities without PFC have no pause series (mlx5 does not create those names).
    assert_eq!(
        value_of(
            &samples,
            "rdma_pfc_pause_frames_total",
            &[
                ("device", roce.name.as_str()),
                ("priority", "0"),
                ("direction", "rx")
            ]
        ),
        None
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_priority_ecn_marked_packets_total",
            &[("device", roce.name.as_str()), ("priority", "3")]
        ),
        Some(roce.ethtool_stat("rx_prio3_marked").unwrap() as f64)
    );
    // Untyped per-queue stats are not exported unless asked for.
    assert!(!samples.iter().any(|s| s.name == "rdma_ethtool_stat"));
    // The InfiniBand port: NDR rate, no RoCE counters, no ethtool series.
    let ib = nics
        .iter()
        .find(|n| n.hca_type == "MT4129" && n.rate.contains("NDR") && n.lid != "0x0")
        .unwrap();
    let ib_port = [("device", ib.name.as_str()), ("port", "1")];
    assert_eq!(
        value_of(&samples, "rdma_port_rate_bytes_per_second", &ib_port),
        Some(50e9)
    );
    assert!(samples.iter().any(|s| s.name == "rdma_port_info"
        && s.labels["device"] == ib.name
        && s.labels["link_layer"] == "InfiniBand"));
    assert!(!samples
        .iter()
        .any(|s| s.name.starts_with("rdma_pfc") && s.labels["device"] == ib.name));
    assert!(value_of(&samples, "rdma_port_lid", &ib_port).unwrap() > 0.0);
    assert_eq!(
        value_of(&samples, "rdma_devices", &[]),
        Some(DEVICES as f64)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "ethtool")]
        ),
        Some(1.0)
    );
    // Nothing was skipped on a clean node.
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "rdma_exporter_read_errors_total"),
        "unexpected read errors"
    );
}

#[test]
fn per_priority_traffic_and_pfc_priorities() {
    let samples = parse_exposition(&serve_cx7().metrics());
    let nics = nics();
    let roce = &nics[0];
    let netdev = roce.netdev.as_deref().unwrap();
    let at = |priority: &'static str, direction: &'static str| {
        [
            ("device", roce.name.as_str()),
            ("port", "1"),
            ("netdev", netdev),
            ("priority", priority),
            ("direction", direction),
        ]
    };
    // The driver's per-priority counters, as they are.
    for (priority, direction) in [("3", "tx"), ("3", "rx"), ("0", "tx"), ("6", "rx")] {
        let stat = format!("{direction}_prio{priority}_bytes");
        assert_eq!(
            value_of(
                &samples,
                "rdma_priority_bytes_total",
                &at(priority, direction)
            ),
            Some(roce.ethtool_stat(&stat).unwrap() as f64),
            "{stat}"
        );
        let stat = format!("{direction}_prio{priority}_packets");
        assert_eq!(
            value_of(
                &samples,
                "rdma_priority_packets_total",
                &at(priority, direction)
            ),
            Some(roce.ethtool_stat(&stat).unwrap() as f64),
            "{stat}"
        );
    }
    // Priorities that never carried a frame and have no PFC have no series.
    assert_eq!(roce.ethtool_stat("tx_prio1_bytes"), Some(0));
    assert_eq!(
        value_of(&samples, "rdma_priority_bytes_total", &at("1", "tx")),
        None
    );
    // mlx5 lists pause statistics for priority 3 only: PFC is on there and nowhere else.
    let pfc: Vec<&str> = samples
        .iter()
        .filter(|s| s.name == "rdma_pfc_enabled" && s.labels["device"] == roce.name)
        .map(|s| s.labels["priority"].as_str())
        .collect();
    assert_eq!(pfc, ["3"]);
    // The InfiniBand port has neither.
    let ib = nics
        .iter()
        .find(|n| n.link_layer == LinkLayer::InfiniBand)
        .unwrap();
    let families = [
        "rdma_pfc_enabled",
        "rdma_priority_bytes_total",
        "rdma_priority_packets_total",
    ];
    assert!(!samples
        .iter()
        .any(|s| families.contains(&s.name.as_str()) && s.labels["device"] == ib.name));
}

#[test]
fn include_regex_adds_untyped_stats() {
    let exporter = serve_cx7_with(&[
        "--collector.ethtool.metrics-include",
        "^(rx|tx)_vport_rdma_unicast_bytes$",
    ]);
    let body = exporter.metrics();
    let samples = parse_exposition(&body);
    let stats: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "rdma_ethtool_stat")
        .collect();
    assert_eq!(stats.len(), 2 * 9, "two stats on each of the 9 RoCE ports");
    promtool_check_metrics(&body);
}

#[test]
fn cardinality_budget_of_an_8_gpu_node() {
    // The design's budget: the 8 GPU NICs of a node stay under 1,000 series by default.
    let exporter = serve_cx7_with(&["--collector.infiniband.device-include", "^mlx5_[0-7]$"]);
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(8.0));
    assert!(samples.len() < 1000, "{} series for 8 NICs", samples.len());
}

#[test]
fn docs_name_every_metric() {
    let reference = std::fs::read_to_string(project_root().join("docs/metrics.md")).unwrap();
    let mut missing: Vec<String> = parse_exposition(&serve_cx7().metrics())
        .into_iter()
        .map(|s| s.name)
        // Device-level driver counters are documented by their pattern.
        .filter(|name| {
            !name.starts_with("rdma_device_hw_")
                || !reference.contains("rdma_device_hw_<name>_total")
        })
        .filter(|name| {
            name.starts_with("rdma_device_hw_") || !reference.contains(&format!("`{name}"))
        })
        .collect();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not name: {missing:?}"
    );
}
