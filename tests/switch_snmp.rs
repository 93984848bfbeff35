//! The SNMP walk against a real agent on loopback (async-snmp's in-process agent): the values
//! decoded through a vendor profile equal the ones the agent serves, and a switch that does not
//! answer, or refuses the community, fails with a reason within its timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_snmp::agent::Agent;
use async_snmp::handler::{
    BoxFuture, GetNextResult, GetResult, HandlerResult, MibHandler, OidTable, RequestContext,
};
use async_snmp::{Oid, Value, VarBind};
use rdma_fabric_exporter::switch::profile::{
    parse_oid, Direction, Metric, Profiles, SampleKey, SampleValue,
};
use rdma_fabric_exporter::switch::snmp::{walk, Secret, SnmpTarget, SnmpVersion};

/// Serves a fixed table, like a switch whose counters stand still.
struct Table(OidTable<Value>);

impl MibHandler for Table {
    fn get<'a>(
        &'a self,
        _: &'a RequestContext,
        oid: &'a Oid,
    ) -> BoxFuture<'a, HandlerResult<GetResult>> {
        Box::pin(async move {
            Ok(match self.0.get(oid) {
                Some(v) => GetResult::Value(v.clone()),
                None => GetResult::NoSuchInstance,
            })
        })
    }

    fn get_next<'a>(
        &'a self,
        _: &'a RequestContext,
        oid: &'a Oid,
    ) -> BoxFuture<'a, HandlerResult<GetNextResult>> {
        Box::pin(async move {
            Ok(match self.0.get_next(oid) {
                Some((next, v)) => GetNextResult::Value(VarBind::new(next.clone(), v.clone())),
                None => GetNextResult::EndOfMibView,
            })
        })
    }
}

fn row(table: &mut OidTable<Value>, oid: &str, value: Value) {
    table.insert(Oid::from_slice(&parse_oid(oid).unwrap()), value);
}

/// An Arista-like leaf: two ports, PFC on priority 3, ECN marks on queue 3, an LLDP neighbour,
/// and one counter the agent answers with the wrong type.
async fn start_agent() -> (Agent, tokio::task::JoinHandle<()>) {
    let mut table = OidTable::new();
    row(
        &mut table,
        "1.3.6.1.2.1.31.1.1.1.1.1",
        Value::OctetString("Ethernet1/1".into()),
    );
    row(
        &mut table,
        "1.3.6.1.2.1.31.1.1.1.1.2",
        Value::OctetString("Ethernet2/1".into()),
    );
    row(
        &mut table,
        "1.3.6.1.2.1.31.1.1.1.18.1",
        Value::OctetString("gpu-node-01 mlx5_0".into()),
    );
    row(&mut table, "1.3.6.1.2.1.2.2.1.8.1", Value::Integer(1));
    row(&mut table, "1.3.6.1.2.1.2.2.1.8.2", Value::Integer(2));
    row(
        &mut table,
        "1.3.6.1.2.1.31.1.1.1.6.1",
        Value::Counter64(9_876_543_210_123),
    );
    row(
        &mut table,
        "1.3.6.1.2.1.2.2.1.13.1",
        Value::Counter32(u32::MAX),
    );
    row(
        &mut table,
        "1.3.6.1.4.1.30065.3.11.1.1.1.4.1.3",
        Value::Counter64(12_345),
    );
    row(
        &mut table,
        "1.3.6.1.4.1.30065.3.11.1.1.1.3.1.3",
        Value::Counter64(678),
    );
    row(
        &mut table,
        "1.3.6.1.4.1.30065.3.11.1.1.1.3.2.3",
        Value::OctetString("garbage".into()),
    );
    row(
        &mut table,
        "1.3.6.1.4.1.30065.3.13.1.9.1.4.1.3",
        Value::Counter64(4_242),
    );
    row(
        &mut table,
        "1.0.8802.1.1.2.1.4.1.1.9.0.1.1",
        Value::OctetString("gpu-node-01".into()),
    );
    row(
        &mut table,
        "1.0.8802.1.1.2.1.4.1.1.7.0.1.1",
        Value::OctetString("ens1f0np0".into()),
    );
    let agent = Agent::builder()
        .bind("127.0.0.1:0")
        .community(b"leaf1".as_slice())
        .handler(Oid::from_slice(&[1]), Arc::new(Table(table)))
        .allow_all_access()
        .build()
        .await
        .expect("agent");
    let runner = agent.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (agent, task)
}

fn target(address: String, community: &str) -> SnmpTarget {
    SnmpTarget {
        address,
        version: SnmpVersion::V2c,
        community: Secret::new(community),
        timeout: Duration::from_millis(300),
        retries: 1,
        max_repetitions: 10,
    }
}

#[tokio::test]
async fn walk_decodes_what_the_agent_serves() {
    let (agent, task) = start_agent().await;
    let profiles = Profiles::builtin().unwrap();
    let arista = profiles.get("arista_eos").unwrap();
    let result = walk(&target(agent.local_addr().to_string(), "leaf1"), arista)
        .await
        .expect("walk");
    let find = |metric: Metric, key: SampleKey| {
        result
            .samples
            .iter()
            .find(|s| s.metric == metric && s.key == key)
            .map(|s| s.value.clone())
    };
    let port = |ifindex| SampleKey {
        ifindex,
        ..SampleKey::default()
    };
    let pfc = |direction| SampleKey {
        ifindex: 1,
        priority: Some(3),
        direction: Some(direction),
        queue: None,
    };
    assert_eq!(
        find(Metric::IfName, port(2)),
        Some(SampleValue::Text("Ethernet2/1".into()))
    );
    assert_eq!(
        find(Metric::OperStatus, port(2)),
        Some(SampleValue::Gauge(2))
    );
    assert_eq!(
        find(Metric::InOctets, port(1)),
        Some(SampleValue::Counter(9_876_543_210_123))
    );
    assert_eq!(
        find(Metric::InDiscards, port(1)),
        Some(SampleValue::Counter(u64::from(u32::MAX)))
    );
    assert_eq!(
        find(Metric::PfcFrames, pfc(Direction::Rx)),
        Some(SampleValue::Counter(12_345))
    );
    assert_eq!(
        find(Metric::PfcFrames, pfc(Direction::Tx)),
        Some(SampleValue::Counter(678))
    );
    assert_eq!(
        find(
            Metric::QueueEcnMarkedPackets,
            SampleKey {
                ifindex: 1,
                queue: Some(3),
                ..SampleKey::default()
            }
        ),
        Some(SampleValue::Counter(4_242))
    );
    assert_eq!(
        find(Metric::LldpRemoteSystemName, port(1)),
        Some(SampleValue::Text("gpu-node-01".into()))
    );
    assert_eq!(
        find(Metric::LldpRemotePortId, port(1)),
        Some(SampleValue::Text("ens1f0np0".into()))
    );
    // The garbage row is reported, not turned into a number.
    assert_eq!(result.decode_errors.len(), 1, "{:?}", result.decode_errors);
    assert!(result.decode_errors[0].contains("aristaPfcPriorityRequests"));
    task.abort();
}

#[tokio::test]
async fn silent_or_refusing_switches_fail_within_the_timeout() {
    let (agent, task) = start_agent().await;
    let profiles = Profiles::builtin().unwrap();
    let generic = profiles.get("generic").unwrap();
    // Wrong community: the agent drops the request, as real agents do.
    let started = Instant::now();
    let err = walk(&target(agent.local_addr().to_string(), "wrong"), generic)
        .await
        .unwrap_err();
    assert_eq!(err.reason, "timeout", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !err.to_string().contains("wrong"),
        "the community leaked into {err}"
    );
    task.abort();
    // Nobody listening at all.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent = socket.local_addr().unwrap().to_string();
    let err = walk(&target(silent, "leaf1"), generic).await.unwrap_err();
    assert!(matches!(err.reason, "timeout" | "network"), "{err}");
}
