//! The PFC-enabled set of switch ports (`rdma_switch_port_pfc_enabled`): from the switch where
//! it serves the standard DCBX tables over SNMP, from the switch's config entry where it does
//! not, and config mistakes reported with their line and column.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::gnmi_target::{serve, FakeSwitch, Transport};
use common::snmp_agent::{serve_table, Rows, Table};
use common::*;
use rdma_fabric_exporter::switch::profile::{parse_oid, SnmpValue};

const PFC_ENABLE: &str = "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.3.2.1.2";
const TRAFFIC_CLASS: &str = "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.1.2.1.2";

/// Two ports with queue counters (so PFC applies) and a VLAN; DCBX answers for port 1 only:
/// PFC on priority 3 (traffic class 6), off on 4.
fn leaf() -> Rows {
    let row = |oid: &str, value| (parse_oid(oid).unwrap(), value);
    let name = |n: &str| SnmpValue::OctetString(n.into());
    let mut rows = vec![
        row("1.3.6.1.2.1.31.1.1.1.1.1", name("Ethernet1/1")),
        row("1.3.6.1.2.1.31.1.1.1.1.2", name("Ethernet2/1")),
        row("1.3.6.1.2.1.31.1.1.1.1.30", name("Vlan30")),
        // aristaEcnQueuePktsMarked, ifIndex.queue
        row(
            "1.3.6.1.4.1.30065.3.13.1.9.1.4.1.3",
            SnmpValue::Counter64(1),
        ),
        row(
            "1.3.6.1.4.1.30065.3.13.1.9.1.4.2.3",
            SnmpValue::Counter64(1),
        ),
    ];
    for priority in 0..8 {
        let on = if priority == 3 { 1 } else { 2 };
        rows.push(row(
            &format!("{PFC_ENABLE}.1.{priority}"),
            SnmpValue::Integer(on),
        ));
    }
    rows.push(row(&format!("{TRAFFIC_CLASS}.1.3"), SnmpValue::Gauge32(6)));
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

#[test]
fn the_switch_answer_wins_and_the_config_covers_the_rest() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (agent, _task) = runtime.block_on(serve_table(
        Arc::new(Table::new(leaf())),
        b"leaf1-community",
    ));
    let dir = tempfile::tempdir().unwrap();
    let community = dir.path().join("community");
    std::fs::write(&community, "leaf1-community\n").unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node:\n  enabled: false\nswitches:\n\
             \x20 - name: leaf1\n    address: {}\n    profile: arista_eos\n    snmp: {{version: 2c, community_file: {}}}\n    interval: 1s\n    timeout: 500ms\n\
             \x20   pfc_priorities: [3, 4]\n    priority_queues: {{4: 2}}\n",
            agent.local_addr(),
            community.display(),
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let (samples, _) = wait_for_samples(&exporter, "leaf1 PFC", Duration::from_secs(15), |s| {
        s.iter().any(|x| x.name == "rdma_switch_port_pfc_enabled")
    });
    let pfc = |port: &str, priority: &str| -> Option<(f64, String, String)> {
        let found: Vec<_> = samples
            .iter()
            .filter(|s| {
                s.name == "rdma_switch_port_pfc_enabled"
                    && s.labels["switch"] == "leaf1"
                    && s.labels["port"] == port
                    && s.labels["priority"] == priority
            })
            .collect();
        assert!(found.len() <= 1, "{found:?}");
        found.first().map(|s| {
            (
                s.value,
                s.labels["queue"].clone(),
                s.labels["source"].clone(),
            )
        })
    };
    let expect = |value: f64, queue: &str, source: &str| {
        Some((value, queue.to_string(), source.to_string()))
    };
    // Port 1: what the switch says, with its traffic class as the queue.
    assert_eq!(pfc("Ethernet1/1", "3"), expect(1.0, "6", "switch"));
    // The operator expects PFC on 4; the switch has it off, and that is what is served.
    assert_eq!(pfc("Ethernet1/1", "4"), expect(0.0, "2", "switch"));
    // Port 2: the switch is silent, the config speaks (queue = priority unless mapped).
    assert_eq!(pfc("Ethernet2/1", "3"), expect(1.0, "3", "config"));
    assert_eq!(pfc("Ethernet2/1", "4"), expect(1.0, "2", "config"));
    assert_eq!(pfc("Ethernet2/1", "0"), expect(0.0, "0", "config"));
    // A VLAN has no queues: no PFC series for it.
    assert_eq!(pfc("Vlan30", "3"), None);
    let body = exporter.metrics();
    assert_no_duplicate_series(&body);
    promtool_check_metrics(&body);
}

/// An exporter without the node collector, its config `head` (top-level keys) and the
/// `switches:` entries `entries`; the directory holds the config file.
fn exporter_with_switches(head: &str, entries: &str) -> (tempfile::TempDir, Exporter) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!("node: {{enabled: false}}\n{head}switches:\n{entries}"),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    (dir, exporter)
}

/// gNMI has no standard PFC leaf (OpenConfig models none): the config entry speaks for a gNMI
/// switch too, on the ports its counters name.
#[test]
fn a_gnmi_switch_gets_its_pfc_state_from_the_config() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let address = runtime.block_on(serve(FakeSwitch::new(None), Transport::Plain));
    let (_dir, exporter) = exporter_with_switches(
        "switch_polling: on_demand\n",
        &format!(
            "  - {{name: sonic1, address: '{address}', protocol: gnmi, profile: sonic, interval: 2s, timeout: 1s, gnmi: {{mode: once}}, pfc_priorities: [3, 4]}}\n"
        ),
    );
    let (status, _, body) = exporter.get("/probe?target=sonic1");
    assert_eq!(status, 200, "{body}");
    assert_no_duplicate_series(&body);
    let samples = parse_exposition(&body);
    let pfc = |port: &str, priority: &str| {
        value_of(
            &samples,
            "rdma_switch_port_pfc_enabled",
            &[
                ("switch", "sonic1"),
                ("port", port),
                ("priority", priority),
                ("queue", priority),
                ("source", "config"),
            ],
        )
    };
    for port in ["Ethernet0", "Ethernet8"] {
        assert_eq!(pfc(port, "3"), Some(1.0), "{body}");
        assert_eq!(pfc(port, "4"), Some(1.0), "{body}");
        assert_eq!(pfc(port, "0"), Some(0.0), "{body}");
    }
    // No PORT_QOS_MAP entries (sonic-gnmi answers NOT_FOUND): no settings, and no error.
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "rdma_switch_poll_errors_total"),
        "{body}"
    );
}

/// `rdma_switch_port_pfc_enabled` of `switch`'s `port` and `priority` (its own queue), from
/// `source`.
fn pfc_enabled(
    samples: &[Sample],
    switch: &str,
    port: &str,
    priority: &str,
    source: &str,
) -> Option<f64> {
    value_of(
        samples,
        "rdma_switch_port_pfc_enabled",
        &[
            ("switch", switch),
            ("port", port),
            ("priority", priority),
            ("queue", priority),
            ("source", source),
        ],
    )
}

/// A SONiC switch with CONFIG_DB `PORT_QOS_MAP`: PFC on 3 and 4 on Ethernet0, off on
/// Ethernet8.
fn sonic_with_qos() -> FakeSwitch {
    let switch = FakeSwitch::new(None);
    let mut state = switch.state.lock().unwrap();
    for (port, enabled) in [("Ethernet0", "3,4"), ("Ethernet8", "")] {
        state.qos.insert(
            port.into(),
            [
                ("pfc_enable".to_string(), enabled.to_string()),
                ("pfc_to_queue_map".to_string(), "AZURE".to_string()),
            ]
            .into(),
        );
    }
    drop(state);
    switch
}

/// SONiC keeps each port's PFC-enabled priorities in CONFIG_DB, apart from its counters: the
/// sonic profile reads them with a Get of their own, once per `settings_interval`, and they
/// win over the config entry on the ports they describe.
#[test]
fn a_sonic_gnmi_switch_states_its_pfc_priorities_in_config_db() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let switch = sonic_with_qos();
    let address = runtime.block_on(serve(switch.clone(), Transport::Plain));
    let (_dir, exporter) = exporter_with_switches(
        "switch_polling: on_demand\n",
        &format!(
            "  - {{name: sonic1, address: '{address}', protocol: gnmi, profile: sonic, interval: 2s, timeout: 1s, gnmi: {{mode: once}}, pfc_priorities: [3]}}\n"
        ),
    );
    for probe in 0..2 {
        let (status, _, body) = exporter.get("/probe?target=sonic1");
        assert_eq!(status, 200, "{body}");
        assert_no_duplicate_series(&body);
        let samples = parse_exposition(&body);
        let pfc = |port, priority| pfc_enabled(&samples, "sonic1", port, priority, "switch");
        assert_eq!(pfc("Ethernet0", "3"), Some(1.0), "probe {probe}: {body}");
        assert_eq!(pfc("Ethernet0", "4"), Some(1.0), "probe {probe}: {body}");
        assert_eq!(pfc("Ethernet0", "0"), Some(0.0), "probe {probe}: {body}");
        // PFC off on the switch: the config's priority 3 does not speak for this port.
        assert_eq!(pfc("Ethernet8", "3"), Some(0.0), "probe {probe}: {body}");
        assert_eq!(
            pfc_enabled(&samples, "sonic1", "Ethernet8", "3", "config"),
            None,
            "{body}"
        );
    }
    // Both probes served the settings of one read (settings_interval 5m by default).
    assert_eq!(switch.state.lock().unwrap().config_db_requests, 1);
}

/// A switch that refuses its settings paths keeps its counters: the refusal is counted under
/// its reason (PermissionDenied: `auth`), and the config entry speaks for its ports.
/// Subscribed (STREAM) switches read their settings on a schedule of their own.
#[test]
fn a_switch_that_refuses_its_settings_paths_keeps_its_counters() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answering = sonic_with_qos();
    let refusing = sonic_with_qos();
    refusing.state.lock().unwrap().refuse_config_db = true;
    let answering_address = runtime.block_on(serve(answering.clone(), Transport::Plain));
    let refusing_address = runtime.block_on(serve(refusing.clone(), Transport::Plain));
    let (_dir, exporter) = exporter_with_switches(
        "",
        &format!(
            "  - {{name: answering, address: '{answering_address}', protocol: gnmi, profile: sonic, interval: 1s, timeout: 500ms, gnmi: {{mode: stream}}}}\n\
             \x20 - {{name: refusing, address: '{refusing_address}', protocol: gnmi, profile: sonic, interval: 1s, timeout: 500ms, gnmi: {{mode: stream}}, pfc_priorities: [3]}}\n"
        ),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let samples = loop {
        let samples = parse_exposition(&exporter.metrics());
        let ready = pfc_enabled(&samples, "answering", "Ethernet0", "4", "switch") == Some(1.0)
            && pfc_enabled(&samples, "refusing", "Ethernet0", "3", "config") == Some(1.0);
        if ready {
            break samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no PFC state from both switches: {:#?}",
            samples
                .iter()
                .filter(|s| s.name.starts_with("rdma_switch_port_pfc_enabled")
                    || s.name.starts_with("rdma_switch_poll_errors"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        pfc_enabled(&samples, "answering", "Ethernet8", "3", "switch"),
        Some(0.0)
    );
    for switch in ["answering", "refusing"] {
        assert_eq!(
            value_of(&samples, "rdma_switch_up", &[("switch", switch)]),
            Some(1.0),
            "{switch}"
        );
    }
    assert_eq!(
        pfc_enabled(&samples, "refusing", "Ethernet0", "4", "switch"),
        None
    );
    assert!(
        value_of(
            &samples,
            "rdma_switch_poll_errors_total",
            &[("switch", "refusing"), ("reason", "auth")]
        )
        .is_some_and(|v| v >= 1.0),
        "the refusal is counted"
    );
    assert!(refusing.state.lock().unwrap().config_db_requests >= 1);
}

#[test]
fn pfc_config_mistakes_are_reported_at_their_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    let entry = "switches:\n  - name: leaf1\n    address: 10.0.0.1\n    profile: generic\n    snmp: {version: 2c, community_env: C}\n";
    for (extra, expected) in [
        (
            "    pfc_priorities: [3, 9]\n",
            "config.yml:6:21: switches[0].pfc_priorities: priority 9 is outside 0-7",
        ),
        // Found once the list is read: located at the switch entry.
        (
            "    pfc_priorities: [3, 3]\n",
            "config.yml:2:5: switches[0]: pfc_priorities: priority 3 is listed twice",
        ),
        (
            "    pfc_priorities: 3\n",
            "config.yml:6:21: switches[0].pfc_priorities: invalid type",
        ),
        (
            "    priority_queues: {8: 1}\n",
            "config.yml:6:22: switches[0].priority_queues: priority 8 is outside 0-7",
        ),
    ] {
        std::fs::write(&config, format!("{entry}{extra}")).unwrap();
        let (code, _, stderr) = run(&["check-config", "--config.file", path_str(&config)]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expected), "{extra}: {stderr}");
    }
}
