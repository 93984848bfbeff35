//! The SNMP walk against a real agent on loopback (async-snmp's in-process agent): the values
//! decoded through a vendor profile equal the ones the agent serves, and a switch that does not
//! answer, or refuses the community, fails with a reason within its timeout.

use crate::common;

use std::time::{Duration, Instant};

use common::snmp_agent::{start_agent, V3_AUTH_PASSWORD, V3_PRIV_PASSWORD};
use rdma_fabric_exporter::switch::profile::{Direction, Metric, Profiles, SampleKey, SampleValue};
use rdma_fabric_exporter::switch::secret::Secret;
use rdma_fabric_exporter::switch::snmp::{
    walk, AuthAlgorithm, Credentials, PrivAlgorithm, SnmpTarget, Usm,
};

fn target(address: String, community: &str) -> SnmpTarget {
    SnmpTarget {
        address,
        credentials: Credentials::V2c(Secret::new(community)),
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
    assert_eq!(
        find(Metric::LldpRemotePortDescription, port(1)),
        Some(SampleValue::Text("ConnectX-7 port 1".into()))
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
    assert_eq!(err.reason.as_label(), "timeout", "{err}");
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
    assert!(
        matches!(err.reason.as_label(), "timeout" | "network"),
        "{err}"
    );
}

fn v3_target(address: String, priv_password: &[u8]) -> SnmpTarget {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    SnmpTarget {
        credentials: Credentials::V3(Usm {
            username: "monitor".into(),
            auth: (AuthAlgorithm::Sha256, Secret::new(text(V3_AUTH_PASSWORD))),
            privacy: Some((PrivAlgorithm::Aes, Secret::new(text(priv_password)))),
        }),
        ..target(address, "unused")
    }
}

#[tokio::test]
async fn snmpv3_auth_priv() {
    let (agent, task) = start_agent().await;
    let profiles = Profiles::builtin().unwrap();
    let arista = profiles.get("arista_eos").unwrap();
    let result = walk(
        &v3_target(agent.local_addr().to_string(), V3_PRIV_PASSWORD),
        arista,
    )
    .await
    .expect("v3 walk");
    let pfc = SampleKey {
        ifindex: 1,
        priority: Some(3),
        direction: Some(Direction::Rx),
        queue: None,
    };
    assert!(result.samples.iter().any(|s| s.metric == Metric::PfcFrames
        && s.key == pfc
        && s.value == SampleValue::Counter(12_345)));
    // A wrong privacy password cannot decrypt the answers: the walk fails, and says nothing secret.
    let started = Instant::now();
    let err = walk(
        &v3_target(agent.local_addr().to_string(), b"wrong-priv-999"),
        arista,
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        !err.to_string().contains("wrong-priv-999") && !err.to_string().contains("auth-pass"),
        "{err}"
    );
    task.abort();
}

/// A peer that answers every request with the given bytes (garbage, or nothing at all).
fn hostile_peer(reply: Option<Vec<u8>>) -> (String, std::thread::JoinHandle<()>) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let address = socket.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        // Bounded: stops after a few requests or when the client stops asking.
        for _ in 0..8 {
            let Ok((_, from)) = socket.recv_from(&mut buf) else {
                return;
            };
            if let Some(reply) = &reply {
                let _ = socket.send_to(reply, from);
            }
        }
    });
    (address, handle)
}

#[tokio::test]
async fn garbage_and_truncated_answers_fail_cleanly() {
    let profiles = Profiles::builtin().unwrap();
    let generic = profiles.get("generic").unwrap();
    // Random bytes, a BER sequence cut short, and an oversized datagram of zeros.
    let mut truncated = vec![0x30, 0x82, 0x01, 0x00, 0x02, 0x01, 0x01, 0x04, 0x05];
    truncated.extend_from_slice(b"leaf1");
    for reply in [
        b"\xde\xad\xbe\xef garbage".to_vec(),
        truncated,
        vec![0u8; 60_000],
    ] {
        let (address, peer) = hostile_peer(Some(reply));
        let started = Instant::now();
        let err = walk(&target(address, "leaf1"), generic).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(err.reason.as_label(), "timeout" | "decode"),
            "{err}"
        );
        peer.join().unwrap();
    }
}

/// A Counter32 that wraps between two polls is served as the switch reports it (the new small
/// value, no error, the switch stays readable): Prometheus' rate() takes the drop for a reset,
/// as it does with snmp_exporter. 64-bit columns are preferred wherever the MIB has them.
#[tokio::test]
async fn a_wrapping_counter32_is_served_as_reported() {
    use common::snmp_agent::{serve_table, Table};
    use rdma_fabric_exporter::switch::profile::SnmpValue as Value;
    let table = std::sync::Arc::new(Table::new(Vec::new()));
    let discards = "1.3.6.1.2.1.2.2.1.13.7";
    table.set(
        "1.3.6.1.2.1.31.1.1.1.1.7",
        Value::OctetString("Ethernet7".into()),
    );
    table.set(discards, Value::Counter32(u32::MAX - 5));
    let (agent, task) = serve_table(table.clone(), b"leaf1").await;
    let profiles = Profiles::builtin().unwrap();
    let generic = profiles.get("generic").unwrap();
    let discards_of = |result: &rdma_fabric_exporter::switch::snmp::WalkResult| {
        result
            .samples
            .iter()
            .find(|s| s.metric == Metric::InDiscards && s.key.ifindex == 7)
            .map(|s| s.value.clone())
    };
    let address = agent.local_addr().to_string();
    let before = walk(&target(address.clone(), "leaf1"), generic)
        .await
        .unwrap();
    assert_eq!(
        discards_of(&before),
        Some(SampleValue::Counter(u64::from(u32::MAX - 5)))
    );
    table.set(discards, Value::Counter32(10));
    let after = walk(&target(address, "leaf1"), generic).await.unwrap();
    assert_eq!(discards_of(&after), Some(SampleValue::Counter(10)));
    assert!(after.decode_errors.is_empty(), "{:?}", after.decode_errors);
    task.abort();
}

/// A UDP relay in front of the agent that holds every answer for `delay`: a slow switch.
async fn slow_relay(agent: std::net::SocketAddr, delay: Duration) -> String {
    use std::sync::Arc;
    use tokio::net::UdpSocket;
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let address = front.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, client)) = front.recv_from(&mut buf).await {
            let request = buf[..len].to_vec();
            let front = front.clone();
            tokio::spawn(async move {
                let back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                back.send_to(&request, agent).await.unwrap();
                let mut answer = vec![0u8; 65536];
                let Ok(Ok((len, _))) =
                    tokio::time::timeout(Duration::from_secs(2), back.recv_from(&mut answer)).await
                else {
                    return;
                };
                tokio::time::sleep(delay).await;
                let _ = front.send_to(&answer[..len], client).await;
            });
        }
    });
    address
}

#[tokio::test]
async fn a_slow_switch_is_read_within_its_timeout_and_fails_beyond_it() {
    let (agent, task) = start_agent().await;
    let profiles = Profiles::builtin().unwrap();
    let arista = profiles.get("arista_eos").unwrap();
    // Slower than a LAN, faster than the 300 ms timeout: read, just slowly.
    let slow = slow_relay(agent.local_addr(), Duration::from_millis(60)).await;
    let result = walk(&target(slow, "leaf1"), arista)
        .await
        .expect("a slow walk");
    assert!(result.samples.iter().any(|s| s.metric == Metric::PfcFrames));
    // An answer later than one timeout but within the retry is still taken: the retry resends
    // the same request, as net-snmp does. Later than (retries + 1) x timeout: a timeout, in
    // bounded time, not a hang.
    let too_slow = slow_relay(agent.local_addr(), Duration::from_millis(700)).await;
    let started = Instant::now();
    let err = walk(&target(too_slow, "leaf1"), arista).await.unwrap_err();
    assert_eq!(err.reason.as_label(), "timeout", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    task.abort();
}
