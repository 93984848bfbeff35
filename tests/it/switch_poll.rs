//! The exporter polls switches in the background and serves them next to the node: values from
//! a real SNMP agent on loopback, a dead switch marked down with a reason, stale data dropped.

use crate::common;

use std::time::{Duration, Instant};

use common::gnmi_target::{serve, Behaviour, FakeSwitch, Transport};
use common::snmp_agent::start_agent;
use common::*;

/// `common::wait_for_samples` with this file's patience.
fn wait_for(exporter: &Exporter, what: &str, check: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    wait_for_samples(exporter, what, Duration::from_secs(15), check).0
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
                ("neighbor_port", "ens1f0np0"),
                ("neighbor_port_description", "ConnectX-7 port 1")
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
    promtool_check_metrics(&body);
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
    assert_no_duplicate_series(&body);
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
    promtool_check_metrics(&body);
    let started = Instant::now();
    let (status, _, body) = get_with(
        &exporter.url("/probe?target=dead"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "1")],
    );
    assert_eq!(status, 200);
    assert_no_duplicate_series(&body);
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

/// Writes `text` as the config, runs `check-config` (or `serve` when `at_startup`: errors
/// found only when the switches are built), expects exit 2 and returns stderr.
fn refused(config: &std::path::Path, text: &str, at_startup: bool) -> String {
    std::fs::write(config, text).unwrap();
    let path = path_str(config);
    let (code, _, stderr) = if at_startup {
        run(&[
            "serve",
            "--config.file",
            path,
            "--web.listen-address",
            "127.0.0.1:0",
        ])
    } else {
        run(&["check-config", "--config.file", path])
    };
    assert_eq!(code, 2, "{stderr}");
    stderr
}

#[test]
fn unsupported_or_unknown_switch_settings_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    let stderr = refused(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2:57400\n    protocol: gnmi\n    profile: sonic\n    snmp: {version: 2c, community_env: X}\n", false);
    // Located at the switch entry (the YAML library reports custom errors there).
    assert!(
        stderr.contains(
            "config.yml:2:3: switches: switch \"leaf2\": protocol gnmi needs a `gnmi:` section"
        ),
        "{stderr}"
    );

    let stderr = refused(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2\n    protocol: gnmi\n    profile: sonic\n    gnmi: {username: mon, password_env: P}\n", false);
    assert!(stderr.contains("in clear"), "{stderr}");

    let stderr = refused(&config, "node: {enabled: false}\nswitches:\n  - name: leaf2\n    address: 127.0.0.1\n    protocol: gnmi\n    profile: arista_eos\n    gnmi: {}\n", true);
    assert!(
        stderr.contains("profile \"arista_eos\" has no gNMI paths"),
        "{stderr}"
    );

    let stderr = refused(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2\n    profile: sonic\n    snmp: {version: 2c, community: public}\n", false);
    assert!(
        stderr.contains("unknown field `community`"),
        "inline communities are refused: {stderr}"
    );

    let stderr = refused(&config, "node: {enabled: false}\nswitches:\n  - name: leaf2\n    address: 127.0.0.1:9\n    profile: acme\n    snmp: {version: 2c, community_file: /nonexistent}\n", true);
    assert!(stderr.contains("unknown profile \"acme\""), "{stderr}");

    let stderr = refused(&config, "switches:\n  - name: leaf2\n    address: 10.0.0.2\n    profile: sonic\n    snmp: {version: 2c, community_env: X}\n    settings_interval: 5 minutes\n", false);
    assert!(
        stderr.contains(
            "config.yml:6:24: switches[0].settings_interval: invalid duration \"5 minutes\""
        ),
        "a settings_interval that is no duration, at its value: {stderr}"
    );
}

/// gNMI switches through the binary: a SONiC target streamed (STREAM/SAMPLE) over TLS with
/// credentials and an OpenConfig target polled (POLL); values equal the switch's; a stream
/// broken mid-sample marks the switch down with a reason, and the exporter reconnects.
#[test]
fn gnmi_switches_are_streamed_and_polled() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = common::gnmi_target::Pki::new();
    let sonic = FakeSwitch::new(Some(("monitor", "gnmi-pass-1")));
    let openconfig = FakeSwitch::new(None);
    let sonic_address = runtime.block_on(serve(sonic.clone(), Transport::Tls(&pki)));
    let openconfig_address = runtime.block_on(serve(openconfig.clone(), Transport::Plain));
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "gnmi-pass-1\n").unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node:\n  enabled: false\nswitches:\n\
             \x20 - name: sonic1\n    address: {sonic_address}\n    protocol: gnmi\n    profile: sonic\n    interval: 1s\n    timeout: 500ms\n\
             \x20   gnmi: {{username: monitor, password_file: {}, tls: {{ca_file: {}, server_name: localhost}}}}\n\
             \x20 - name: oc1\n    address: {openconfig_address}\n    protocol: gnmi\n    profile: openconfig\n    interval: 1s\n    timeout: 500ms\n    gnmi: {{mode: poll}}\n",
            password.display(),
            pki.path("ca.pem").display(),
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let up = |s: &[Sample], switch: &str| value_of(s, "rdma_switch_up", &[("switch", switch)]);
    let samples = wait_for(&exporter, "both gNMI switches up", |s| {
        up(s, "sonic1") == Some(1.0) && up(s, "oc1") == Some(1.0)
    });
    let pfc = |s: &[Sample], port: &str, direction: &str| {
        value_of(
            s,
            "rdma_switch_port_pfc_frames_total",
            &[
                ("switch", "sonic1"),
                ("port", port),
                ("priority", "3"),
                ("direction", direction),
            ],
        )
    };
    for port in ["Ethernet0", "Ethernet8"] {
        assert_eq!(
            pfc(&samples, port, "rx"),
            Some(sonic.port_value(port, "SAI_PORT_STAT_PFC_3_RX_PKTS") as f64)
        );
        assert_eq!(
            pfc(&samples, port, "tx"),
            Some(sonic.port_value(port, "SAI_PORT_STAT_PFC_3_TX_PKTS") as f64)
        );
    }
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_queue_ecn_marked_packets_total",
            &[("switch", "sonic1"), ("port", "Ethernet8"), ("queue", "3")]
        ),
        Some(5033.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_pfc_pause_seconds_total",
            &[
                ("switch", "sonic1"),
                ("port", "Ethernet0"),
                ("priority", "3"),
                ("direction", "rx")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_received_bytes_total",
            &[("switch", "oc1"), ("port", "Ethernet8")]
        ),
        Some(5e9)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_oper_status",
            &[("switch", "oc1"), ("port", "Ethernet0")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_switch_port_info",
            &[("switch", "sonic1"), ("port", "Ethernet0"), ("ifindex", "")]
        ),
        Some(1.0),
        "gNMI ports carry no ifIndex"
    );

    // Traffic on the switch shows up on the next sample.
    sonic.bump("Ethernet0", "SAI_PORT_STAT_PFC_3_RX_PKTS", 1000);
    wait_for(&exporter, "the streamed counter to advance", |s| {
        pfc(s, "Ethernet0", "rx") == Some(2011.0)
    });

    // The stream breaks and new connections are refused: down, with the reason.
    sonic.set(Behaviour::Down);
    sonic.set(Behaviour::CloseMidSample);
    let samples = wait_for(&exporter, "sonic1 down", |s| up(s, "sonic1") == Some(0.0));
    let network_errors = value_of(
        &samples,
        "rdma_switch_poll_errors_total",
        &[("switch", "sonic1"), ("reason", "network")],
    );
    assert!(network_errors >= Some(1.0), "{network_errors:?}");
    assert_eq!(
        up(&samples, "oc1"),
        Some(1.0),
        "the other switch is unaffected"
    );
    // It comes back: the exporter reconnects on its own.
    sonic.set(Behaviour::Normal);
    wait_for(&exporter, "sonic1 up again", |s| {
        up(s, "sonic1") == Some(1.0)
    });
    assert!(
        openconfig.modes.lock().unwrap().iter().all(|m| *m == 2),
        "POLL"
    );
    assert!(
        sonic.modes.lock().unwrap().iter().all(|m| *m == 0),
        "STREAM"
    );
    let logs = exporter.logs();
    assert!(
        !logs.contains("gnmi-pass-1"),
        "the password leaked into the logs"
    );
}

/// `switch_polling: on_demand`: nothing is read until `/probe` asks (Prometheus alone sets the
/// load on the switches), and gNMI subscriptions are read with Subscribe ONCE then.
#[test]
fn on_demand_polling_reads_only_when_probed() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (agent, _agent_task) = runtime.block_on(start_agent());
    let sonic = FakeSwitch::new(None);
    let sonic_address = runtime.block_on(serve(sonic.clone(), Transport::Plain));
    let dir = tempfile::tempdir().unwrap();
    let community = dir.path().join("community");
    std::fs::write(&community, "leaf1\n").unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node: {{enabled: false}}\nswitch_polling: on_demand\nswitches:\n\
             \x20 - {{name: leaf1, address: '{}', profile: arista_eos, interval: 1s, timeout: 300ms, snmp: {{version: 2c, community_file: '{}'}}}}\n\
             \x20 - {{name: sonic1, address: '{sonic_address}', protocol: gnmi, profile: sonic, interval: 1s, timeout: 300ms, gnmi: {{mode: stream}}}}\n",
            agent.local_addr(),
            community.display()
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    std::thread::sleep(Duration::from_millis(1500));
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(
        value_of(&samples, "rdma_switch_up", &[("switch", "leaf1")]),
        Some(0.0)
    );
    assert!(
        !samples
            .iter()
            .any(|s| s.name.starts_with("rdma_switch_poll_errors")
                || s.name.starts_with("rdma_switch_last_success")),
        "nothing was polled yet"
    );
    assert!(
        sonic.modes.lock().unwrap().is_empty(),
        "no subscription yet"
    );

    let (status, _, body) = exporter.get("/probe?target=leaf1");
    assert_eq!(status, 200, "{body}");
    assert_no_duplicate_series(&body);
    let probed = parse_exposition(&body);
    assert_eq!(
        value_of(&probed, "rdma_switch_up", &[("switch", "leaf1")]),
        Some(1.0)
    );
    let (status, _, body) = exporter.get("/probe?target=sonic1");
    assert_eq!(status, 200, "{body}");
    assert_no_duplicate_series(&body);
    let probed = parse_exposition(&body);
    assert_eq!(
        value_of(&probed, "rdma_switch_up", &[("switch", "sonic1")]),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &probed,
            "rdma_switch_port_pfc_frames_total",
            &[
                ("switch", "sonic1"),
                ("port", "Ethernet0"),
                ("priority", "3"),
                ("direction", "rx")
            ]
        ),
        Some(1011.0)
    );
    assert_eq!(
        sonic.modes.lock().unwrap().as_slice(),
        [1],
        "read with ONCE"
    );
}
