//! The `ib_fabric` collector through the real binary: `serve --collector.ib_fabric` with
//! stand-in `ibnetdiscover` and `perfquery` scripts first on `PATH`, printing real outputs from
//! the corpus (kind `infiniband-diags`), one switch hanging. The served metrics carry the
//! corpus' values and labels, the hung switch is a failed query and the others are served, and
//! a scrape never waits on a scan in progress.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{self, parse_exposition, promtool_check_metrics, value_of, Exporter, Sample};

fn corpus(name: &str) -> PathBuf {
    crate::common::corpus::corpus("infiniband-diags").sample(name)
}

fn script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Stand-ins of ibnetdiscover and perfquery in `dir` that print the corpus' topology and, for
/// every switch, the corpus' counters.
fn corpus_tools(dir: &Path) {
    for (tool, sample) in [
        (
            "ibnetdiscover",
            "ibnetdiscover-switchib-edr-one-ddr-link.txt",
        ),
        ("perfquery", "perfquery-x-treydock-edr-two-ports.out"),
    ] {
        script(
            dir,
            tool,
            &format!("exec cat '{}'", corpus(sample).display()),
        );
    }
}

/// `serve` with only the ib_fabric collector, the stand-ins of `bin` first on PATH.
fn serve(bin: &Path, extra: &[&str]) -> Exporter {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut args = vec![
        "--no-collector.sysfs",
        "--no-collector.netlink",
        "--no-collector.process",
        "--collector.ib_fabric",
    ];
    args.extend_from_slice(extra);
    Exporter::start_with_env("serve", &args, &[("PATH", &path)])
}

/// Switches of the corpus topology: ec8240 (LID 48) and ec8480 (LID 23) answer with the
/// corpus' counters, ec81e0 (LID 21) hangs past the query timeout.
/// The exposition once the collector has finished its first scan (30 s at most).
fn first_scan(exporter: &Exporter) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let samples = parse_exposition(&exporter.metrics());
        if value_of(&samples, "rdma_ib_fabric_scans_total", &[]).is_some() {
            return samples;
        }
        assert!(Instant::now() < deadline, "no scan within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_served_scan_has_the_corpus_values_and_the_hung_switch_as_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    script(
        dir.path(),
        "ibnetdiscover",
        &format!(
            "exec cat '{}'",
            corpus("ibnetdiscover-switchib-edr-one-ddr-link.txt").display()
        ),
    );
    script(
        dir.path(),
        "perfquery",
        &format!(
            "for a in \"$@\"; do lid=$a; done\n\
             case \"$lid\" in 21) exec sleep 600 ;; esac\n\
             exec cat '{}'",
            corpus("perfquery-x-treydock-edr-two-ports.out").display()
        ),
    );
    let exporter = serve(
        dir.path(),
        &[
            "--collector.ib_fabric.query-timeout=500ms",
            "--collector.ib_fabric.interval=1h",
        ],
    );
    let samples = first_scan(&exporter);
    assert_eq!(
        value_of(&samples, "rdma_ib_fabric_scan_success", &[]),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_ib_fabric_query_failures",
            &[("reason", "timeout")]
        ),
        Some(1.0),
        "the hung switch"
    );
    let answered = [
        ("switch_guid", "ec0d:9a03:00ec:8240"),
        ("port", "1"),
        ("switch", "SwitchIB Mellanox Technologies"),
    ];
    assert_eq!(
        value_of(&samples, "rdma_ib_switch_port_xmit_wait_total", &answered),
        Some(22_730_501.0)
    );
    // PortXmitData counts 4-octet words; the metric is in bytes.
    assert_eq!(
        value_of(
            &samples,
            "rdma_ib_switch_port_xmit_data_bytes_total",
            &answered
        ),
        Some(36_298_026_860_928.0 * 4.0)
    );
    assert!(value_of(
        &samples,
        "rdma_ib_switch_port_xmit_wait_total",
        &[("switch_guid", "ec0d:9a03:00ec:8480"), ("port", "1")]
    )
    .is_some());
    assert!(
        !samples
            .iter()
            .any(|s| s.name.starts_with("rdma_ib_switch_port_")
                && s.labels.get("switch_guid").map(String::as_str) == Some("ec0d:9a03:00ec:81e0")),
        "the hung switch has no counters"
    );
    // Its links are still known from discovery: the link of ec8240 port 13 leads to it.
    let link = samples
        .iter()
        .find(|s| {
            s.name == "rdma_ib_link_info"
                && s.labels["switch_guid"] == "ec0d:9a03:00ec:8240"
                && s.labels["port"] == "13"
        })
        .expect("rdma_ib_link_info of ec8240 port 13");
    assert_eq!(link.labels["remote_guid"], "ec0d:9a03:00ec:81e0");
    assert_eq!(link.labels["remote_port"], "19");
    assert_eq!(link.labels["width"], "4X");
    assert_eq!(link.labels["speed"], "EDR");
    assert_eq!(
        value_of(&samples, "rdma_ib_fabric_nodes", &[("kind", "switch")]).map(|v| v >= 4.0),
        Some(true)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "ib_fabric")]
        ),
        Some(1.0)
    );
    common::promtool_check_metrics(&exporter.metrics());
}

/// Errors-only drops the data and packet counters and keeps the error and wait counters.
#[test]
fn errors_only_keeps_error_and_congestion_counters() {
    let dir = tempfile::tempdir().unwrap();
    corpus_tools(dir.path());
    let exporter = serve(
        dir.path(),
        &[
            "--collector.ib_fabric.errors-only",
            "--collector.ib_fabric.switch-include=SwitchIB.*",
        ],
    );
    let samples = first_scan(&exporter);
    let names: std::collections::BTreeSet<&str> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_ib_switch_port_"))
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        names.contains("rdma_ib_switch_port_xmit_wait_total"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("_data_") || n.contains("packets")),
        "{names:?}"
    );
    // Only the counters that moved: a zero says nothing a missing series does not.
    let zeros: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_ib_switch_port_") && s.value == 0.0)
        .collect();
    assert!(zeros.is_empty(), "{zeros:?}");
    // Links that trained at what is enabled have their link_info, no width/speed gauges.
    assert!(samples.iter().any(|s| s.name == "rdma_ib_link_info"));
    let gauges = samples
        .iter()
        .filter(|s| {
            s.name.starts_with("rdma_ib_link_width") || s.name.starts_with("rdma_ib_link_speed")
        })
        .count();
    let linked = samples
        .iter()
        .filter(|s| s.name == "rdma_ib_link_info")
        .count();
    assert!(gauges < 4 * linked, "{gauges} gauges for {linked} links");
}

/// A discovery that hangs: scrapes answer at once with the initial state (no scan yet,
/// success 0), and keep answering while the scan waits out its deadline.
#[test]
fn a_scrape_does_not_wait_on_a_hung_scan() {
    let dir = tempfile::tempdir().unwrap();
    script(dir.path(), "ibnetdiscover", "exec sleep 600");
    script(dir.path(), "perfquery", "exit 1");
    let exporter = serve(
        dir.path(),
        &[
            "--collector.ib_fabric.timeout=2s",
            "--collector.ib_fabric.interval=1h",
        ],
    );
    let started = Instant::now();
    let samples = parse_exposition(&exporter.metrics());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        value_of(&samples, "rdma_ib_fabric_scan_success", &[]),
        Some(0.0)
    );
    assert_eq!(value_of(&samples, "rdma_ib_fabric_scans_total", &[]), None);
    // The deadline ends the scan: a failed one is served, still success 0.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let samples = parse_exposition(&exporter.metrics());
        if value_of(&samples, "rdma_ib_fabric_scans_total", &[]) == Some(1.0) {
            assert_eq!(
                value_of(&samples, "rdma_ib_fabric_scan_success", &[]),
                Some(0.0)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scan did not end at its deadline"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The tools named by flags (not on PATH) run with the HCA and port chosen by flags first, as
/// `-C <ca> -P <port>`, and their outputs are served.
#[test]
fn the_tool_paths_and_the_local_hca_port_come_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("ofed/sbin");
    std::fs::create_dir_all(&tools).unwrap();
    let args_log = dir.path().join("args.log");
    for (tool, sample) in [
        (
            "my-ibnetdiscover",
            "ibnetdiscover-switchib-edr-one-ddr-link.txt",
        ),
        ("my-perfquery", "perfquery-x-treydock-edr-two-ports.out"),
    ] {
        script(
            &tools,
            tool,
            &format!(
                "echo \"{tool} $*\" >> '{}'\nexec cat '{}'",
                args_log.display(),
                corpus(sample).display()
            ),
        );
    }
    let flag = |name: &str, tool: &str| {
        format!(
            "--collector.ib_fabric.{name}={}",
            tools.join(tool).display()
        )
    };
    let (ibnetdiscover, perfquery) = (
        flag("ibnetdiscover", "my-ibnetdiscover"),
        flag("perfquery", "my-perfquery"),
    );
    // An empty directory first on PATH: nothing is found there by name.
    let exporter = serve(
        dir.path(),
        &[
            &ibnetdiscover,
            &perfquery,
            "--collector.ib_fabric.ca=mlx5_3",
            "--collector.ib_fabric.ca-port=2",
            "--collector.ib_fabric.parallel=1",
            "--collector.ib_fabric.interval=1h",
        ],
    );
    let samples = first_scan(&exporter);
    assert_eq!(
        value_of(&samples, "rdma_ib_fabric_scan_success", &[]),
        Some(1.0)
    );
    assert!(samples
        .iter()
        .any(|s| s.name == "rdma_ib_switch_port_xmit_wait_total"));
    let log = std::fs::read_to_string(&args_log).unwrap();
    let runs: Vec<&str> = log.lines().collect();
    assert!(runs.len() >= 2, "{log}");
    assert!(
        runs[0].starts_with("my-ibnetdiscover -C mlx5_3 -P 2"),
        "{log}"
    );
    assert!(
        runs[1..]
            .iter()
            .all(|run| run.starts_with("my-perfquery -C mlx5_3 -P 2 ")),
        "{log}"
    );
}

/// The switch ports' families are encoded once per scan and spliced into every scrape's body:
/// the same text in every scrape, in both formats, plain or gzipped (a gzip stream of several
/// members), before OpenMetrics' `# EOF`.
#[test]
fn the_ports_encoded_once_per_scan_are_served_in_both_formats_plain_and_gzipped() {
    let dir = tempfile::tempdir().unwrap();
    corpus_tools(dir.path());
    let exporter = serve(dir.path(), &["--collector.ib_fabric.interval=1h"]);
    first_scan(&exporter);
    let ports = |body: &str| -> Vec<String> {
        body.lines()
            .filter(|l| l.starts_with("rdma_ib_switch_port_") || l.starts_with("rdma_ib_link_"))
            .map(str::to_owned)
            .collect()
    };
    let openmetrics = "application/openmetrics-text;version=1.0.0";
    let mut seen = Vec::new();
    for accept in ["text/plain", openmetrics] {
        for gzip in [false, true] {
            let mut headers = vec![("Accept", accept)];
            if gzip {
                headers.push(("Accept-Encoding", "gzip"));
            }
            let (status, response, raw) = crate::http::get_raw(&exporter, "/metrics", &headers);
            assert_eq!(status, 200);
            let body = if gzip {
                assert_eq!(response["content-encoding"], "gzip");
                crate::http::gunzip(&raw)
            } else {
                String::from_utf8(raw).unwrap()
            };
            if accept == openmetrics {
                assert!(body.ends_with("\n# EOF\n"), "{accept} gzip={gzip}");
                assert_eq!(body.matches("# EOF").count(), 1);
                assert!(body.contains("# TYPE rdma_ib_link info\n"));
            } else {
                assert!(!body.contains("# EOF"));
                assert!(body.contains("# TYPE rdma_ib_link_info gauge\n"));
                promtool_check_metrics(&body);
            }
            assert!(body.contains("# TYPE rdma_exporter_collector_success gauge\n"));
            let lines = ports(&body);
            assert!(lines.len() > 100, "{accept} gzip={gzip}: {}", lines.len());
            seen.push(lines);
        }
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "the same port lines in every answer"
    );
    // In full mode one switch's detail is its lines of the served text, copied.
    let of_switch = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.contains("switch_guid=\"ec0d:9a03:00ec:8480\""))
            .cloned()
            .collect()
    };
    let (status, _, detail) = exporter.get("/ib/switch?target=0xec0d9a0300ec8480");
    assert_eq!(status, 200, "{detail}");
    let detail = ports(&detail);
    assert!(detail.len() > 20, "{}", detail.len());
    assert_eq!(detail, of_switch(&seen[0]));
}

/// `/ib/switch?target=` serves every counter of one switch's ports from the last scan, including
/// what errors-only leaves out of `/metrics` (data counters, zero error counters, the width and
/// speed of links that trained as enabled); by GUID in either form; in both formats, plain or
/// gzipped; promtool-clean. A target the scan did not read as a switch is a 404 that says so,
/// a description several switches share a 400 listing their GUIDs, no target a 400.
#[test]
fn one_switchs_every_counter_is_served_on_demand_from_the_last_scan() {
    let dir = tempfile::tempdir().unwrap();
    corpus_tools(dir.path());
    let exporter = serve(
        dir.path(),
        &[
            "--collector.ib_fabric.errors-only",
            "--collector.ib_fabric.interval=1h",
        ],
    );
    let metrics = first_scan(&exporter);
    assert!(
        !metrics
            .iter()
            .any(|s| s.name == "rdma_ib_switch_port_xmit_data_bytes_total"),
        "errors-only /metrics has no data counters"
    );
    let (status, content_type, body) = exporter.get("/ib/switch?target=0xec0d9a0300ec8240");
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    promtool_check_metrics(&body);
    let samples = parse_exposition(&body);
    assert!(
        samples
            .iter()
            .all(|s| s.labels.get("switch_guid").map(String::as_str) == Some("ec0d:9a03:00ec:8240")),
        "only the switch asked for"
    );
    let port1 = [("port", "1")];
    assert_eq!(
        value_of(
            &samples,
            "rdma_ib_switch_port_xmit_data_bytes_total",
            &port1
        ),
        Some(36_298_026_860_928.0 * 4.0)
    );
    assert_eq!(
        value_of(&samples, "rdma_ib_switch_port_rcv_errors_total", &port1),
        Some(0.0),
        "zero counters are there"
    );
    assert_eq!(
        value_of(&samples, "rdma_ib_switch_port_xmit_wait_total", &port1),
        Some(22_730_501.0)
    );
    // ibnetdiscover gives the active width and speed: errors-only serves them for degraded
    // links only, the detail for every link.
    let gauges = |samples: &[Sample]| {
        samples
            .iter()
            .filter(|s| {
                s.name == "rdma_ib_link_width_active_lanes"
                    && s.labels.get("switch_guid").map(String::as_str)
                        == Some("ec0d:9a03:00ec:8240")
            })
            .count()
    };
    assert_eq!(gauges(&metrics), 0);
    assert!(gauges(&samples) > 10, "{}", gauges(&samples));
    assert!(samples.iter().any(|s| s.name == "rdma_ib_link_info"));
    // The sysfs form of the GUID names the same switch.
    assert_eq!(
        exporter.get("/ib/switch?target=ec0d:9a03:00ec:8240").2,
        body
    );
    // OpenMetrics, gzipped: one `# EOF`, at the end.
    let (status, headers, raw) = crate::http::get_raw(
        &exporter,
        "/ib/switch?target=0xec0d9a0300ec8240",
        &[
            ("Accept", "application/openmetrics-text;version=1.0.0"),
            ("Accept-Encoding", "gzip"),
        ],
    );
    assert_eq!(status, 200);
    assert_eq!(headers["content-encoding"], "gzip");
    let openmetrics = crate::http::gunzip(&raw);
    assert!(openmetrics.ends_with("\n# EOF\n"), "{openmetrics}");
    assert_eq!(openmetrics.matches("# EOF").count(), 1);
    assert_eq!(
        parse_exposition(&openmetrics).len(),
        samples.len(),
        "the same series in both formats"
    );

    for (target, status, says) in [
        ("", 400, "missing parameter: target"),
        // An HCA of the subnet: not a switch.
        (
            "0x506b4b03003fa9b6",
            404,
            "no switch \"0x506b4b03003fa9b6\"",
        ),
        ("0x0123", 404, "no switch \"0x0123\""),
        ("spine-99", 404, "no switch \"spine-99\""),
        (
            "SwitchIB%20Mellanox%20Technologies",
            400,
            "switches have the NodeDescription \"SwitchIB Mellanox Technologies\"",
        ),
    ] {
        let path = if target.is_empty() {
            "/ib/switch".to_owned()
        } else {
            format!("/ib/switch?target={target}")
        };
        let (got, _, body) = exporter.get(&path);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    let (_, _, ambiguous) = exporter.get("/ib/switch?target=SwitchIB%20Mellanox%20Technologies");
    assert!(
        ambiguous.contains("ec0d:9a03:00ec:8240") && ambiguous.contains("ec0d:9a03:00ec:8480"),
        "{ambiguous}"
    );
}

/// Without the collector there is no subnet to serve from: 404, saying why.
#[test]
fn the_switch_detail_needs_the_ib_fabric_collector() {
    let exporter = Exporter::start_with_env(
        "serve",
        &[
            "--no-collector.sysfs",
            "--no-collector.netlink",
            "--no-collector.process",
        ],
        &[],
    );
    let (status, _, body) = exporter.get("/ib/switch?target=0x1");
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("ib_fabric collector is not enabled"),
        "{body}"
    );
}
