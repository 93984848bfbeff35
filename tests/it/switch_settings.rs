//! An SNMP switch's LLDP neighbours and PFC settings are walked every few minutes, not at every
//! poll (`switch::settings`): the polls in between read the counters and serve the settings
//! kept, and a switch whose ports were renumbered has its settings walked again at once.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::snmp_agent::{serve_table, Rows, Table};
use rdma_fabric_exporter::switch::pfc::PfcConfig;
use rdma_fabric_exporter::switch::poller::{Poller, Source, Target};
use rdma_fabric_exporter::switch::profile::{
    parse_oid, Metric, Profiles, SampleKey, SampleValue, SnmpValue,
};
use rdma_fabric_exporter::switch::secret::Secret;
use rdma_fabric_exporter::switch::snmp::{Credentials, SnmpTarget};

const IF_NAME_1: &str = "1.3.6.1.2.1.31.1.1.1.1.1";
const IN_OCTETS_1: &str = "1.3.6.1.2.1.31.1.1.1.6.1";
/// lldpRemSysName of the neighbour on port 1.
const NEIGHBOUR_1: &str = "1.0.8802.1.1.2.1.4.1.1.9.0.1.1";
/// lldpXdot1dcbxLocPFCEnableEnabled of port 1, priority 3.
const PFC_ENABLE_1_3: &str = "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.3.2.1.2.1.3";

fn leaf() -> Rows {
    let row = |oid: &str, value| (parse_oid(oid).unwrap(), value);
    vec![
        row(IF_NAME_1, SnmpValue::OctetString(b"Ethernet1/1".to_vec())),
        row(
            "1.3.6.1.2.1.31.1.1.1.1.2",
            SnmpValue::OctetString(b"Ethernet2/1".to_vec()),
        ),
        row(IN_OCTETS_1, SnmpValue::Counter64(1_000)),
        row(NEIGHBOUR_1, SnmpValue::OctetString(b"gpu-node-01".to_vec())),
        row(PFC_ENABLE_1_3, SnmpValue::Integer(1)),
    ]
}

/// The value of `metric` for port 1 (priority 3 where it has one) in the last snapshot.
fn port_1(poller: &Poller, metric: Metric) -> Option<SampleValue> {
    let state = poller.targets[0].1.lock().unwrap();
    let snapshot = state.snapshot.as_ref().expect("a snapshot");
    snapshot
        .samples
        .iter()
        .find(|s| {
            s.metric == metric
                && s.key
                    == SampleKey {
                        ifindex: 1,
                        priority: (metric == Metric::PfcEnabled).then_some(3),
                        ..SampleKey::default()
                    }
        })
        .map(|s| s.value.clone())
}

/// A poller of one arista_eos switch at `address`.
fn poller(address: String, settings_interval: Duration) -> Poller {
    let profile = Profiles::builtin()
        .unwrap()
        .get("arista_eos")
        .unwrap()
        .clone();
    Poller::new(
        vec![Target {
            name: "leaf1".into(),
            profile,
            source: Source::Snmp(SnmpTarget {
                address,
                credentials: Credentials::V2c(Secret::new("leaf1")),
                timeout: Duration::from_secs(2),
                retries: 1,
                max_repetitions: 25,
            }),
            interval: Duration::from_secs(30),
            pfc: PfcConfig::default(),
            settings_interval,
        }],
        1,
    )
}

fn text(s: &str) -> Option<SampleValue> {
    Some(SampleValue::Text(s.into()))
}

#[tokio::test]
async fn settings_are_kept_between_walks_and_walked_again_when_ports_are_renumbered() {
    let table = Arc::new(Table::new(leaf()));
    let (agent, task) = serve_table(table.clone(), b"leaf1").await;
    let poller = poller(agent.local_addr().to_string(), Duration::from_secs(300));

    poller.poll_once(0).await;
    assert_eq!(
        port_1(&poller, Metric::InOctets),
        Some(SampleValue::Counter(1_000))
    );
    assert_eq!(
        port_1(&poller, Metric::LldpRemoteSystemName),
        text("gpu-node-01")
    );
    assert_eq!(
        port_1(&poller, Metric::PfcEnabled),
        Some(SampleValue::Gauge(1))
    );

    // Recabled and reconfigured, but within the settings' refresh: the counters move, the
    // settings served are the kept ones.
    table.set(IN_OCTETS_1, SnmpValue::Counter64(2_000));
    table.set(NEIGHBOUR_1, SnmpValue::OctetString(b"gpu-node-02".to_vec()));
    table.set(PFC_ENABLE_1_3, SnmpValue::Integer(2));
    poller.poll_once(0).await;
    assert_eq!(
        port_1(&poller, Metric::InOctets),
        Some(SampleValue::Counter(2_000))
    );
    assert_eq!(
        port_1(&poller, Metric::LldpRemoteSystemName),
        text("gpu-node-01")
    );
    assert_eq!(
        port_1(&poller, Metric::PfcEnabled),
        Some(SampleValue::Gauge(1))
    );

    // The switch renumbered its ports (ifName of ifIndex 1 changed): the kept settings would
    // name the old port, so they are walked again in the same poll.
    table.set(IF_NAME_1, SnmpValue::OctetString(b"Ethernet3/1".to_vec()));
    poller.poll_once(0).await;
    assert_eq!(port_1(&poller, Metric::IfName), text("Ethernet3/1"));
    assert_eq!(
        port_1(&poller, Metric::LldpRemoteSystemName),
        text("gpu-node-02")
    );
    assert_eq!(
        port_1(&poller, Metric::PfcEnabled),
        Some(SampleValue::Gauge(0))
    );
    task.abort();
}

/// `settings_interval: 0s` walks them at every poll, as before they were kept.
#[tokio::test]
async fn a_zero_settings_interval_walks_them_at_every_poll() {
    let table = Arc::new(Table::new(leaf()));
    let (agent, task) = serve_table(table.clone(), b"leaf1").await;
    let poller = poller(agent.local_addr().to_string(), Duration::ZERO);
    poller.poll_once(0).await;
    assert_eq!(
        port_1(&poller, Metric::LldpRemoteSystemName),
        text("gpu-node-01")
    );
    table.set(NEIGHBOUR_1, SnmpValue::OctetString(b"gpu-node-02".to_vec()));
    poller.poll_once(0).await;
    assert_eq!(
        port_1(&poller, Metric::LldpRemoteSystemName),
        text("gpu-node-02")
    );
    task.abort();
}
