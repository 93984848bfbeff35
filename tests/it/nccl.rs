//! `nccl FILE...` on fixture logs written from NCCL's format strings (ops.md §6.2), and the
//! NCCL log collector of `serve`.

use crate::common;

use common::{fixture, path_str, run, Exporter};
use serde_json::Value;

fn nccl(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["nccl"];
    all.extend_from_slice(args);
    run(&all)
}

fn log(name: &str) -> String {
    fixture("nccl").join(name).display().to_string()
}

/// Runs `nccl --output json` and returns (exit code, the first job).
fn json_job(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = nccl(&all);
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    assert_eq!(report["exit_code"], code);
    (code, report["jobs"][0].clone())
}

#[test]
fn healthy_ib_with_gdr_two_hosts() {
    let (code, job) = json_job(&[&log("ib-gdr")]);
    assert_eq!(code, 0);
    assert_eq!(job["verdict"], "rdma_with_gdr");
    assert_eq!(job["comm_id"], "0x7e3a9c1d5b2f4a60");
    let processes = job["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2);
    assert_eq!(processes[0]["host"], "gpu-node-01");
    assert_eq!(processes[0]["ranks"], serde_json::json!([0]));
    assert_eq!(processes[1]["ranks"], serde_json::json!([1]));
    assert_eq!(processes[0]["network"], "IB");
    assert_eq!(processes[0]["link_layer"], "IB");
    assert_eq!(processes[0]["gdr"], "enabled");
    assert_eq!(processes[0]["nccl_version"], "2.21.5+cuda12.4");
    assert_eq!(processes[0]["hcas"][0]["name"], "mlx5_0");
    assert_eq!(processes[0]["channels_gdrdma"], 4);
    let evidence = &processes[0]["evidence"];
    assert!(evidence
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["line"] == 10 && e["text"].as_str().unwrap().ends_with("Using network IB")));
    assert!(evidence[0]["file"]
        .as_str()
        .unwrap()
        .ends_with("gpu-node-01.4101.log"));
}

#[test]
fn ib_without_gdr_is_host_staged() {
    let (code, stdout, _) = nccl(&[&log("ib-no-gdr.log")]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("on IB without GPUDirect RDMA (host-staged"),
        "{stdout}"
    );
    let (_, job) = json_job(&[&log("ib-no-gdr.log")]);
    assert_eq!(job["verdict"], "rdma_without_gdr");
    assert_eq!(job["processes"][0]["channels_host_staged"], 2);
}

#[test]
fn roce_with_timestamps() {
    let (code, job) = json_job(&[&log("roce.log")]);
    assert_eq!(code, 0);
    assert_eq!(job["verdict"], "rdma_with_gdr");
    assert_eq!(job["processes"][0]["link_layer"], "RoCE");
    assert!(job["summary"].as_str().unwrap().contains("RoCE"));
}

#[test]
fn socket_fallback_exits_one_with_evidence() {
    let (code, stdout, _) = nccl(&[&log("socket-fallback.log")]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("SOCKET FALLBACK on ranks 0 (sock-01:9001), 1 (sock-02:9002)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "socket-fallback.log:3: sock-01:9001:9040 [0] NCCL INFO NET/IB : No device found."
        ),
        "{stdout}"
    );
    assert!(stdout.contains("socket-fallback.log:5:"), "{stdout}");
    let (_, job) = json_job(&[&log("socket-fallback.log")]);
    assert_eq!(job["verdict"], "socket_fallback");
    assert_eq!(
        job["processes"][0]["socket_interfaces"][0],
        "eth0:10.0.0.1<0>"
    );
    // NET/Socket's own GPU Direct line names an interface, not an HCA.
    assert_eq!(job["processes"][0]["gdr"], "unknown");
}

#[test]
fn plugin_failure_falls_back() {
    let (code, job) = json_job(&[&log("plugin-failure.log")]);
    assert_eq!(code, 1);
    assert_eq!(job["verdict"], "socket_fallback");
    let evidence: Vec<&str> = job["processes"][0]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert!(
        evidence
            .iter()
            .any(|t| t.contains("Failed to initialize NET plugin IB")),
        "{evidence:?}"
    );
    assert!(
        evidence
            .iter()
            .any(|t| t.contains("NCCL WARN NET/IB : ibv_open_device failed")),
        "{evidence:?}"
    );
}

#[test]
fn mixed_job_names_the_rank_that_fell_back() {
    let (code, stdout, _) = nccl(&[&log("mixed")]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("SOCKET FALLBACK on ranks 1 (gpu-node-02:5303) (1 of 2 processes"),
        "{stdout}"
    );
    assert!(stdout.contains("Connection refused"), "{stdout}");
}

#[test]
fn truncated_interleaved_and_non_utf8_lines() {
    let (code, job) = json_job(&[&log("garbled.log")]);
    assert_eq!(code, 0);
    assert_eq!(job["verdict"], "rdma_with_gdr");
    let hosts: Vec<&str> = job["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["host"].as_str())
        .collect();
    assert_eq!(hosts, ["gpu-node-07", "gpu-node-08"]);
}

#[test]
fn proto_simple_warns() {
    let (code, stdout, _) = nccl(&[&log("proto-simple.log")]);
    assert_eq!(code, 0);
    assert!(stdout.contains("warning: NCCL_PROTO=Simple"), "{stdout}");
    assert!(stdout.contains("proto-simple.log:7)"), "{stdout}");
    let (_, job) = json_job(&[&log("proto-simple.log")]);
    assert_eq!(job["warnings"][0]["setting"], "NCCL_PROTO");
    assert_eq!(job["warnings"][0]["evidence"]["line"], 7);
}

#[test]
fn globs_stdin_and_bad_input() {
    let pattern = fixture("nccl").join("ib-gdr/*.log").display().to_string();
    let (code, job) = json_job(&[&pattern]);
    assert_eq!((code, job["processes"].as_array().unwrap().len()), (0, 2));

    let output = std::process::Command::new(common::binary())
        .args(["nccl", "-"])
        .stdin(std::fs::File::open(fixture("nccl/socket-fallback.log")).unwrap())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("<stdin>:3:"));

    let missing = log("does-not-exist.log");
    let (code, _, stderr) = nccl(&[&log("roce.log"), &missing]);
    assert_eq!(code, 2);
    assert!(stderr.contains("does-not-exist.log"), "{stderr}");
    let (code, _, stderr) = nccl(&[&fixture("nccl").join("nothing-*.log").display().to_string()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no file matches"), "{stderr}");
}

#[test]
fn garbage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    let mut x: u32 = 12345;
    for _ in 0..200_000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        bytes.push((x >> 16) as u8);
    }
    bytes.extend_from_slice(b"\nh:1:1 [0] NCCL INFO Using network\nh:99999999999:1 [0] NCCL INFO Channel 00/0 : 9999999999[0] -> 1[0] via NET/");
    let path = dir.path().join("garbage.log");
    std::fs::write(&path, &bytes).unwrap();
    let (code, _, stderr) = nccl(&[path_str(&path)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn serve_collector_exposes_processes() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        ("mixed/rank0.log", "rank0.log"),
        ("mixed/rank1.log", "rank1.log"),
    ] {
        std::fs::copy(fixture("nccl").join(from), dir.path().join(to)).unwrap();
    }
    let sys = fixture("cx7-roce/sys");
    let exporter = Exporter::start(&[
        "--no-collector.pfc-storm",
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.source",
        "none",
        "--collector.nccl.log-dir",
        path_str(dir.path()),
    ]);
    let body = exporter.metrics();
    let samples = common::parse_exposition(&body);
    let fallback = |host: &str, pid: &str| {
        common::value_of(
            &samples,
            "rdma_nccl_socket_fallback",
            &[("host", host), ("pid", pid)],
        )
    };
    assert_eq!(fallback("gpu-node-02", "5303"), Some(1.0), "{body}");
    assert_eq!(fallback("gpu-node-01", "4111"), Some(0.0), "{body}");
    assert_eq!(
        common::value_of(&samples, "rdma_nccl_socket_fallback_processes", &[]),
        Some(1.0)
    );
    assert_eq!(
        common::value_of(
            &samples,
            "rdma_nccl_process_info",
            &[
                ("host", "gpu-node-01"),
                ("network", "IB"),
                ("link_layer", "IB"),
                ("gdr", "enabled")
            ]
        ),
        Some(1.0),
        "{body}"
    );
    for collector in ["nccl", "sysfs"] {
        assert_eq!(
            common::value_of(
                &samples,
                "rdma_exporter_collector_success",
                &[("collector", collector)]
            ),
            Some(1.0),
            "{body}"
        );
    }
    common::promtool_check_metrics(&body);
    // Every NCCL family is documented.
    let docs = std::fs::read_to_string(common::project_root().join("docs/metrics.md")).unwrap();
    for family in [
        "rdma_nccl_process_info",
        "rdma_nccl_socket_fallback",
        "rdma_nccl_socket_fallback_processes",
    ] {
        assert!(
            docs.contains(&format!("`{family}")),
            "docs/metrics.md lacks {family}"
        );
    }
}
