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

/// A multi-node excerpt in which each process printed one half of the fallback: some ranks
/// only `NET/IB : No device found.`, the others only `NET/Socket : Using [0]ens3:...` (NCCL's
/// `INFO(NCCL_INIT|NCCL_NET, "NET/IB : No device found.")` and `"NET/Socket : Using%s"`). No
/// process chose another network: the job is on sockets. One half alone proves nothing.
#[test]
fn an_excerpt_split_across_processes_is_a_socket_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for (host, pid) in [("gpu-a", 4101), ("gpu-b", 4202)] {
        lines.push(format!(
            "{host}:{pid}:{} [0] NCCL INFO NET/IB : No device found.",
            pid + 40
        ));
    }
    for (host, pid, address) in [("gpu-c", 4303, "10.1.0.13"), ("gpu-d", 4404, "10.1.0.14")] {
        lines.push(format!(
            "{host}:{pid}:{} [0] NCCL INFO NET/Socket : Using [0]ens3:{address}<0>",
            pid + 40
        ));
    }
    let split = dir.path().join("split.log");
    std::fs::write(&split, lines.join("\n") + "\n").unwrap();
    let (code, job) = json_job(&[path_str(&split)]);
    assert_eq!(
        (code, job["verdict"].as_str()),
        (1, Some("socket_fallback")),
        "{job:#}"
    );
    let summary = job["summary"].as_str().unwrap();
    for process in ["gpu-a:4101", "gpu-b:4202", "gpu-c:4303", "gpu-d:4404"] {
        assert!(summary.contains(process), "{summary}");
    }

    let half = dir.path().join("half.log");
    std::fs::write(&half, lines[..2].join("\n") + "\n").unwrap();
    let (code, job) = json_job(&[path_str(&half)]);
    assert_eq!(
        (code, job["verdict"].as_str()),
        (0, Some("unknown")),
        "{job:#}"
    );
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
    // No whole NCCL line in it: the distinct "no NCCL lines" code, not a pass.
    assert_eq!(code, 3, "{stderr}");
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
    // Scrapes serve the last background scan: wait for the first.
    let body = metrics_when(&exporter, "the first scan", |samples| {
        common::value_of(samples, "rdma_nccl_socket_fallback_processes", &[]) == Some(1.0)
    });
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

// The background scan of `serve`'s NCCL collector: scrapes serve the last finished scan, and the
// scan is bounded in files, bytes, time and processes.

/// Scrapes until `done` holds for the samples (30 s at most); every scrape must answer 200.
fn metrics_when(
    exporter: &Exporter,
    what: &str,
    done: impl Fn(&[common::Sample]) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let body = exporter.metrics();
        if done(&common::parse_exposition(&body)) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited 30 s for {what}:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `serve` on the fixture node with a config file holding `nccl` (YAML flow mapping body).
fn serve_with_nccl(dir: &std::path::Path, nccl: &str) -> (tempfile::TempDir, Exporter) {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!("nccl: {{log_dir: '{}', {nccl}}}\n", dir.display()),
    )
    .unwrap();
    let sys = fixture("cx7-roce/sys");
    let exporter = Exporter::start(&[
        "--config.file",
        path_str(&config),
        "--no-collector.pfc-storm",
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.source",
        "none",
    ]);
    (config_dir, exporter)
}

fn nccl_processes(samples: &[common::Sample]) -> usize {
    common::matching(samples, "rdma_nccl_process_info", &[]).count()
}

#[test]
fn serve_scans_in_the_background_and_picks_up_new_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("nccl/mixed/rank0.log"),
        dir.path().join("rank0.log"),
    )
    .unwrap();
    let (_config, mut exporter) = serve_with_nccl(dir.path(), "scan_interval: 200ms");
    let body = metrics_when(&exporter, "the first scan", |samples| {
        nccl_processes(samples) == 1
    });
    let samples = common::parse_exposition(&body);
    assert_eq!(
        common::value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "nccl")]
        ),
        Some(1.0),
        "{body}"
    );
    for family in [
        "rdma_nccl_processes_dropped",
        "rdma_nccl_scan_partial",
        "rdma_exporter_collector_duration_seconds",
    ] {
        assert!(
            common::matching(&samples, family, &[]).next().is_some(),
            "{body}"
        );
    }
    assert_eq!(
        common::value_of(&samples, "rdma_nccl_scan_partial", &[]),
        Some(0.0)
    );
    // A file written later shows up at a following scan.
    std::fs::copy(
        fixture("nccl/mixed/rank1.log"),
        dir.path().join("rank1.log"),
    )
    .unwrap();
    let body = metrics_when(&exporter, "a scan after the new file", |samples| {
        nccl_processes(samples) == 2
    });
    let samples = common::parse_exposition(&body);
    assert_eq!(
        common::value_of(
            &samples,
            "rdma_nccl_socket_fallback",
            &[("host", "gpu-node-02"), ("pid", "5303")]
        ),
        Some(1.0),
        "{body}"
    );
    common::promtool_check_metrics(&body);
    // The scan thread never keeps the process from ending.
    let status = exporter.terminate(std::time::Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn serve_exports_at_most_max_processes() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..40)
        .map(|i| format!("node-{i}:{}:1 [0] NCCL INFO Using network IB\n", 1000 + i))
        .collect();
    std::fs::write(dir.path().join("many.log"), text).unwrap();
    let (_config, exporter) =
        serve_with_nccl(dir.path(), "scan_interval: 200ms, max_processes: 16");
    let body = metrics_when(&exporter, "the first scan", |samples| {
        nccl_processes(samples) > 0
    });
    let samples = common::parse_exposition(&body);
    assert_eq!(nccl_processes(&samples), 16, "{body}");
    assert_eq!(
        common::matching(&samples, "rdma_nccl_socket_fallback", &[]).count(),
        16
    );
    assert_eq!(
        common::value_of(&samples, "rdma_nccl_processes_dropped", &[]),
        Some(24.0),
        "{body}"
    );
    let docs = std::fs::read_to_string(common::project_root().join("docs/metrics.md")).unwrap();
    for family in ["rdma_nccl_processes_dropped", "rdma_nccl_scan_partial"] {
        assert!(
            docs.contains(&format!("`{family}`")),
            "docs/metrics.md lacks {family}"
        );
    }
}

#[test]
fn serve_answers_with_the_node_while_a_huge_log_dir_is_scanned() {
    // 24 files of 4 MiB of init and channel lines, at the default per-file bound: a scan takes
    // seconds, scrapes must not wait for it.
    let dir = tempfile::tempdir().unwrap();
    let block = std::fs::read_to_string(fixture("nccl/mixed/rank0.log")).unwrap();
    let per_file = 4 << 20;
    for file in 0..24 {
        let mut text = String::with_capacity(per_file + block.len());
        let mut round = 0;
        while text.len() < per_file {
            // Another pid per round: many processes, as a long job with restarts would log.
            text.push_str(&block.replace("4111", &format!("{}", 10_000 + file * 1000 + round)));
            round += 1;
        }
        std::fs::write(dir.path().join(format!("rank{file}.log")), text).unwrap();
    }
    let (_config, exporter) = serve_with_nccl(dir.path(), "scan_interval: 1s");
    for _ in 0..20 {
        let asked = std::time::Instant::now();
        let samples = common::scrape_without_duplicates(&exporter);
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(5),
            "a scrape took {:?}",
            asked.elapsed()
        );
        assert_eq!(
            common::value_of(
                &samples,
                "rdma_exporter_collector_success",
                &[("collector", "sysfs")]
            ),
            Some(1.0)
        );
        assert!(common::matching(&samples, "rdma_port_info", &[])
            .next()
            .is_some());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The scans finish and stay within the default process cap.
    let body = metrics_when(&exporter, "a finished scan", |samples| {
        nccl_processes(samples) > 0
    });
    let samples = common::parse_exposition(&body);
    assert!(
        nccl_processes(&samples) <= 1024,
        "{}",
        nccl_processes(&samples)
    );
}

/// Writes `text` as one log file and runs `nccl --output json` on it.
fn judge_text(text: &str) -> (i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank.log");
    std::fs::write(&path, text).unwrap();
    json_job(&[path_str(&path)])
}

/// Formats of versions before 2.18, as logs in the wild show them: no `Using network`, bus ids
/// in hex in channel lines, a bare version banner, CRLF line ends.
#[test]
fn older_versions_hex_bus_ids_and_no_using_network() {
    let (code, job) = judge_text(
        "NCCL version 2.7.8+cuda11.0\r\n\
         node1:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\r\n\
         node1:1234:1300 [0] NCCL INFO Channel 00 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA\r\n\
         node1:1234:1300 [0] NCCL INFO Channel 01 : 0[87000] -> 2[c7000] [send] via NET/IB/5/GDRDMA\r\n",
    );
    assert_eq!(code, 0, "{job}");
    assert_eq!(job["verdict"], "rdma_with_gdr", "{job}");
    let process = &job["processes"][0];
    assert_eq!(process["network"], "IB");
    assert_eq!(process["nccl_version"], "2.7.8+cuda11.0");
    assert_eq!(process["channels_gdrdma"], 2);
}

/// Net names with a space (EFA's plugin), PXN proxies and 6-digit bus ids.
#[test]
fn plugin_net_names_and_pxn_channels() {
    let (code, job) = judge_text(
        "h1:7:7 [0] NCCL INFO Channel 00/0 : 5[c00000] -> 12[b00000] [send] via NET/IBext/4(13)/GDRDMA\n\
         h2:8:8 [0] NCCL INFO Channel 00 : 0[101d0] -> 1[101d0] [send] via NET/AWS Libfabric/1/GDRDMA\n",
    );
    assert_eq!(code, 0, "{job}");
    let networks: Vec<&str> = job["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["network"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["IBext", "AWS Libfabric"]);
    assert_eq!(job["verdict"], "rdma_with_gdr", "{job}");
    // The chosen network, named with its space as the channels name it (NCCL 2.9.9 with
    // aws-ofi-nccl on p4d): its channels decide GPUDirect RDMA.
    let (code, job) = judge_text(
        "h2:8:8 [0] NCCL INFO Using network AWS Libfabric\n\
         h2:8:8 [0] NCCL INFO Channel 00 : 1[101d0] -> 8[101c0] [send] via NET/AWS Libfabric/1/GDRDMA\n",
    );
    assert_eq!(code, 0, "{job}");
    assert_eq!(job["processes"][0]["network"], "AWS Libfabric");
    assert_eq!(job["verdict"], "rdma_with_gdr", "{job}");
}

/// Every rank says `NET/IB : No device found.` and then uses sockets, in a version that
/// prints no `Using network`: a fallback, exit 1.
#[test]
fn no_ib_device_then_sockets_is_a_fallback() {
    let (code, job) = judge_text(
        "node1:20:20 [0] NCCL INFO NET/IB : No device found.\n\
         node1:20:20 [0] NCCL INFO NET/Socket : Using [0]ens3:10.0.0.5<0>\n\
         node2:21:21 [0] NCCL INFO NET/IB : No device found.\n\
         node2:21:21 [0] NCCL INFO NET/Socket : Using [0]ens3:10.0.0.6<0>\n",
    );
    assert_eq!(code, 1, "{job}");
    assert_eq!(job["verdict"], "socket_fallback", "{job}");
    assert_eq!(
        job["processes"][1]["socket_interfaces"][0],
        "ens3:10.0.0.6<0>"
    );
}

/// The spacing around the colon varies across versions (`NET/IB : `, `NET/IB: `), and the
/// reasons IB is unusable have several wordings.
#[test]
fn colon_spacing_and_unusable_ib_wordings() {
    for (ib_line, socket_line) in [
        (
            "NET/IB : No IP address found for device mlx5_0",
            "NET/Socket: Using [0]ens5f0:10.1.1.1<0>",
        ),
        (
            "NET/IB: Could not find a usable IB device",
            "NET/Socket : Using [0]ens5f0:10.1.1.1<0>",
        ),
    ] {
        let (code, job) = judge_text(&format!(
            "h:1:1 [0] NCCL INFO {ib_line}\nh:1:1 [0] NCCL INFO {socket_line}\n"
        ));
        assert_eq!(code, 1, "{ib_line}: {job}");
        assert_eq!(job["verdict"], "socket_fallback", "{ib_line}: {job}");
        let evidence = job["processes"][0]["evidence"].to_string();
        assert!(evidence.contains(ib_line), "{evidence}");
    }
    let (code, job) =
        judge_text("h:1:1 [0] NCCL INFO NET/IB: Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n");
    assert_eq!(code, 0, "{job}");
    assert_eq!(job["verdict"], "rdma_gdr_unknown", "{job}");
    assert_eq!(job["processes"][0]["link_layer"], "RoCE");
}

/// A failed verbs call is a failure (exit 1) with where to look.
#[test]
fn qp_creation_failure_points_at_limits() {
    let text = "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n\
                h:1:9 [0] misc/ibvwrap.cc:252 NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory\n";
    let (code, job) = judge_text(text);
    assert_eq!(code, 1, "{job}");
    assert_eq!(job["failures"][0]["call"], "ibv_create_qp");
    assert_eq!(job["failures"][0]["evidence"]["line"], 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank.log");
    std::fs::write(&path, text).unwrap();
    let (_, stdout, _) = nccl(&[path_str(&path)]);
    assert!(
        stdout.contains("failed: ibv_create_qp") && stdout.contains("max_qp"),
        "{stdout}"
    );
}

/// No NCCL line at all (an empty or wrong file) has its own exit code, so a CI gate fails.
#[test]
fn no_nccl_lines_exit_three() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let wrong = dir.path().join("wrong.log");
    std::fs::write(&wrong, "Epoch 1/10 loss=0.3\n").unwrap();
    for path in [&empty, &wrong] {
        let (code, stdout, _) = nccl(&[path_str(path)]);
        assert_eq!(code, 3, "{stdout}");
        assert!(stdout.contains("no NCCL log lines found"), "{stdout}");
    }
}

/// RCCL prints its own version banner.
#[test]
fn rccl_version_banner() {
    let (_, job) = judge_text(
        "h:1:1 [0] NCCL INFO RCCL version : 2.22.3-HEAD:271856d\n\
         h:1:1 [0] NCCL INFO Channel 00/0 : 0[2] -> 1[3] [send] via NET/IB/0/GDRDMA comm 0x5a nRanks 16\n",
    );
    assert_eq!(job["processes"][0]["nccl_version"], "2.22.3-HEAD:271856d");
    assert_eq!(job["processes"][0]["network"], "IB");
}

/// Excerpts as tuning guides and tickets quote them, without the `host:pid:tid [dev]` prefix:
/// one process, named after its input.
#[test]
fn quoted_excerpts_without_prefixes() {
    let (code, job) = judge_text(
        "NCCL INFO NET/IB : No IP address found for device mlx5_0\n\
         NCCL INFO NET/Socket: Using [0]ens5f0:10.0.0.5<0>\n\
         NCCL WARN bootstrapNetSend failed: NET/Socket: Connection refused\n",
    );
    assert_eq!(code, 1, "{job}");
    assert_eq!(job["verdict"], "socket_fallback", "{job}");
    let process = &job["processes"][0];
    assert!(
        process["host"].as_str().unwrap().ends_with("rank.log"),
        "{process}"
    );
    assert!(process["evidence"]
        .to_string()
        .contains("Connection refused"));
    let (code, job) =
        judge_text("NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n");
    assert_eq!(code, 0, "{job}");
    assert_eq!(job["processes"][0]["network"], "IB");
}

/// A healthy two-rank IB init as `kubectl logs --timestamps` prints it (RFC 3339, UTC):
/// NCCL's INFO lines carry no time of their own (NCCL_DEBUG_TIMESTAMP_LEVELS is WARN only by
/// default), the wrapper's prefix gives every line one.
const KUBECTL_INIT: &str = "\
2026-05-01T10:00:00.100000000Z trainer-0:4242:4242 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
2026-05-01T10:00:00.200000000Z trainer-0:4242:4300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>
2026-05-01T10:00:00.300000000Z trainer-0:4242:4300 [0] NCCL INFO Using network IB
2026-05-01T10:00:01.000000000Z trainer-0:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
2026-05-01T10:00:01.100000000Z trainer-0:4242:4300 [0] NCCL INFO ncclCommInitRank comm 0x55d4e8a0b2c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x4a5b6c7d8e9f0a1b - Init COMPLETE
2026-05-01T10:00:02.000000000Z [trainer] epoch 0 step 0 started
";

/// A run that hung after NCCL's init: healthy NCCL lines, then nothing for twelve minutes
/// until the scheduler killed it. Exit 1 with the silence; the same log with steady progress,
/// or a threshold above the silence, passes.
#[test]
fn a_silence_after_init_in_the_timestamps_is_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let hung = dir.path().join("hung.log");
    std::fs::write(
        &hung,
        format!("{KUBECTL_INIT}2026-05-01T10:12:02.500000000Z [launcher] received SIGTERM, stopping workers\n"),
    )
    .unwrap();
    let (code, stdout, stderr) = nccl(&["--output", "json", path_str(&hung)]);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["exit_code"], 1);
    // The NCCL side alone is healthy: the hang is the only failure.
    assert_eq!(report["jobs"][0]["verdict"], "rdma_with_gdr", "{report}");
    let hangs = report["hangs"].as_array().unwrap();
    assert_eq!(hangs.len(), 1, "{report}");
    assert_eq!(hangs[0]["kind"], "silence_after_init");
    assert_eq!(hangs[0]["line"], 7);
    assert_eq!(hangs[0]["init_line"], 5);
    assert_eq!(hangs[0]["last_line"], 6);
    assert_eq!(hangs[0]["silent_seconds"], 720);
    assert_eq!(hangs[0]["threshold_seconds"], 300);
    assert!(hangs[0]["file"].as_str().unwrap().ends_with("hung.log"));

    let (code, text, _) = nccl(&[path_str(&hung)]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("hang: ") && text.contains("hung.log:7: no log line for 12m00s"),
        "{text}"
    );
    assert!(
        text.contains("Init COMPLETE"),
        "the init line is quoted: {text}"
    );

    // Above the silence: no hang, the healthy verdict decides.
    let (code, text, _) = nccl(&["--hang-threshold", "15m", path_str(&hung)]);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("hang: "), "{text}");

    // Progress every minute: no hang.
    let busy = dir.path().join("busy.log");
    let mut log = KUBECTL_INIT.to_string();
    for minute in 1..=12 {
        log.push_str(&format!(
            "2026-05-01T10:{minute:02}:02.000000000Z [trainer] epoch 0 step {minute} loss 2.1\n"
        ));
    }
    std::fs::write(&busy, log).unwrap();
    let (code, text, _) = nccl(&[path_str(&busy)]);
    assert_eq!(code, 0, "{text}");

    // A bad threshold is a usage error, not a verdict.
    let (code, _, stderr) = nccl(&["--hang-threshold", "soon", path_str(&busy)]);
    assert_eq!(code, 2, "{stderr}");
}

/// A PyTorch job without timestamps whose collective never completed: the watchdog's lines
/// are the evidence (one finding per rank and work item, the traceback's repeat folded in).
/// Without them and without timestamps, the same log says nothing new.
#[test]
fn pytorch_watchdog_timeouts_are_hangs() {
    let init = "\
trainer-1:77:77 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
trainer-1:77:90 [0] NCCL INFO Using network IB
trainer-1:77:90 [0] NCCL INFO ncclCommInitRank comm 0x7f00 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x11aa22bb33cc44dd - Init COMPLETE
";
    let watchdog = "\
[rank1]:[E0501 10:10:02.123456789 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600321 milliseconds before timing out.
[rank1]:[E0501 10:10:02.223456789 ProcessGroupNCCL.cpp:2000] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 2.
torch.distributed.DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600321 milliseconds before timing out.
";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank1.log");
    std::fs::write(&path, format!("{init}{watchdog}")).unwrap();
    let (code, stdout, _) = nccl(&["--output", "json", path_str(&path)]);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(code, 1, "{report}");
    let hangs = report["hangs"].as_array().unwrap();
    assert_eq!(hangs.len(), 1, "{report}");
    assert_eq!(hangs[0]["kind"], "collective_timeout");
    assert_eq!(hangs[0]["line"], 4);
    assert_eq!(hangs[0]["rank"], 1);
    assert_eq!(hangs[0]["seq"], 3);
    assert_eq!(hangs[0]["op_type"], "ALLREDUCE");
    assert_eq!(hangs[0]["timeout_ms"], 600000);
    assert_eq!(hangs[0]["ran_ms"], 600321);

    // Without NCCL_DEBUG lines the watchdog is still a failed run, not "no NCCL line".
    std::fs::write(&path, watchdog).unwrap();
    let (code, text, _) = nccl(&[path_str(&path)]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("rank 1: PyTorch's NCCL watchdog timed out ALLREDUCE #3"),
        "{text}"
    );

    // The init alone, no timestamps, no watchdog: healthy as before (no guess).
    std::fs::write(&path, init).unwrap();
    let (code, stdout, _) = nccl(&["--output", "json", path_str(&path)]);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["hangs"], serde_json::json!([]));
}
