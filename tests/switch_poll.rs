//! The exporter polls switches in the background and serves them next to the node: values from
//! a real SNMP agent on loopback, a dead switch marked down with a reason, stale data dropped.

mod common;

use std::time::{Duration, Instant};

use common::snmp_agent::start_agent;
use common::*;

fn wait_for(exporter: &Exporter, what: &str, check: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let samples = parse_exposition(&exporter.metrics());
        if check(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn switches_are_polled_and_served() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (agent, agent_task) = runtime.block_on(start_agent());
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let community = dir.path().join("community");
    std::fs::write(&community, "leaf1\n").unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node:\n  enabled: false\nswitches:\n\
             \x20 - name: leaf1\n    address: {}\n    profile: arista_eos\n    snmp: {{version: 2c, community_file: {}}}\n    interval: 1s\n    timeout: 200ms\n    retries: 0\n\
             \x20 - name: dead\n    address: {}\n    profile: generic\n    snmp: {{version: 2c, community_file: {}}}\n    interval: 1s\n    timeout: 200ms\n    retries: 0\n",
            agent.local_addr(),
            community.display(),
            silent.local_addr().unwrap(),
            community.display()
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let up = |s: &[Sample], switch: &str| value_of(s, "rdma_switch_up", &[("switch", switch)]);
    let samples = wait_for(&exporter, "leaf1 up", |s| up(s, "leaf1") == Some(1.0));

    fn leaf<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut labels = vec![("switch", "leaf1"), ("port", "Ethernet1/1")];
        labels.extend_from_slice(extra);
        labels
    }
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_pfc_frames_total",
            &leaf(&[("priority", "3"), ("direction", "rx")])
        ),
        Some(12_345.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_queue_ecn_marked_packets_total",
            &leaf(&[("queue", "3")])
        ),
        Some(4_242.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_received_bytes_total",
            &leaf(&[])
        ),
        Some(9_876_543_210_123.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_oper_status",
            &[("switch", "leaf1"), ("port", "Ethernet2/1")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_info",
            &leaf(&[("ifindex", "1"), ("alias", "gpu-node-01 mlx5_0")])
        ),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_neighbor_info",
            &leaf(&[
                ("neighbor_host", "gpu-node-01"),
                ("neighbor_port", "ens1f0np0")
            ])
        ),
        Some(1.0)
    );
    // The garbage row is counted, not served.
    assert!(
        value_of(
            &samples,
            "rdma_switch_poll_errors_total",
            &[("switch", "leaf1"), ("reason", "value")]
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_pfc_frames_total",
            &[("switch", "leaf1"), ("port", "Ethernet2/1")]
        ),
        None
    );

    // The dead switch: down, with a reason; the rest is unaffected.
    let samples = wait_for(&exporter, "dead switch error", |s| {
        value_of(
            s,
            "rdma_switch_poll_errors_total",
            &[("switch", "dead"), ("reason", "timeout")],
        )
        .is_some()
    });
    assert_eq!(up(&samples, "dead"), Some(0.0));
    assert_eq!(up(&samples, "leaf1"), Some(1.0));

    // No secret anywhere a person or Prometheus can read.
    let body = exporter.metrics();
    assert_eq!(promtool_check_metrics(&body), "");
    // The community is "leaf1", also the switch's name: check no label carries it elsewhere.
    assert!(
        parse_exposition(&body)
            .iter()
            .all(|s| s.labels.iter().all(|(k, v)| v != "leaf1" || k == "switch")),
        "community value in a label"
    );

    // Every switch family served is in the metric reference.
    let reference = std::fs::read_to_string(project_root().join("docs/metrics.md")).unwrap();
    let undocumented: std::collections::BTreeSet<_> = parse_exposition(&body)
        .into_iter()
        .map(|s| s.name)
        .filter(|name| !reference.contains(&format!("`{name}")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "docs/metrics.md does not name {undocumented:?}"
    );

    // /probe polls one configured switch on demand and returns only its series.
    let (status, _, body) = exporter.get("/probe?target=leaf1");
    assert_eq!(status, 200, "{body}");
    let probed = parse_exposition(&body);
    assert_eq!(up(&probed, "leaf1"), Some(1.0));
    assert!(
        probed
            .iter()
            .all(|s| s.labels.get("switch").map(String::as_str) == Some("leaf1")),
        "{body}"
    );
    assert_eq!(
        value_of(
            &probed,
            "rdma_switch_port_pfc_frames_total",
            &leaf(&[("priority", "3"), ("direction", "rx")])
        ),
        Some(12_345.0)
    );
    assert_eq!(promtool_check_metrics(&body), "");
    let started = Instant::now();
    let (status, _, body) = get_with(
        &exporter.url("/probe?target=dead"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "1")],
    );
    assert_eq!(status, 200);
    assert_eq!(up(&parse_exposition(&body), "dead"), Some(0.0));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Not an open proxy: only configured targets.
    for query in ["/probe?target=127.0.0.1", "/probe"] {
        let (status, _, body) = exporter.get(query);
        assert_eq!(status, 400, "{query}: {body}");
    }

    // The switch goes away: down at once, its data dropped once older than two intervals.
    agent_task.abort();
    drop(agent);
    let samples = wait_for(&exporter, "leaf1 data dropped", |s| {
        up(s, "leaf1") == Some(0.0)
            && !s.iter().any(|x| {
                x.name == "rdma_switch_port_pfc_frames_total" && x.labels["switch"] == "leaf1"
            })
    });
    assert!(value_of(
        &samples,
        "rdma_switch_last_success_timestamp_seconds",
        &[("switch", "leaf1")]
    )
    .is_some());
}

#[test]
fn unsupported_or_unknown_switch_settings_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2:57400\n    protocol: gnmi\n    profile: sonic\n    snmp: {version: 2c, community_env: X}\n").unwrap();
    let (code, _, stderr) = run(&["check-config", "--config.file", path_str(&config)]);
    assert_eq!(code, 2, "{stderr}");
    // Located at the switch entry (the YAML library reports custom errors there).
    assert!(
        stderr.contains("config.yml:2:5: switches[0]: protocol gnmi is not supported yet"),
        "{stderr}"
    );

    std::fs::write(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2\n    profile: sonic\n    snmp: {version: 2c, community: public}\n").unwrap();
    let (code, _, stderr) = run(&["check-config", "--config.file", path_str(&config)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("unknown field `community`"),
        "inline communities are refused: {stderr}"
    );

    std::fs::write(&config, "node: {enabled: false}\nswitches:\n  - name: leaf2\n    address: 127.0.0.1:9\n    profile: acme\n    snmp: {version: 2c, community_file: /nonexistent}\n").unwrap();
    let (code, _, stderr) = run(&[
        "serve",
        "--config.file",
        path_str(&config),
        "--web.listen-address",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("unknown profile \"acme\""), "{stderr}");
}
