//! SNMP agents on loopback (async-snmp's in-process agent): an Arista-like leaf for the tests,
//! and any table for the switch bench.

use std::sync::Arc;

use async_snmp::agent::Agent;
use async_snmp::Oid;
use rdma_fabric_exporter::sim::snmp_agent::LiveTable;
use rdma_fabric_exporter::switch::profile::{parse_oid, SnmpValue as Value};

/// Rows of an agent under construction (OID text, value).
pub type Rows = Vec<(Vec<u32>, Value)>;

/// A table whose rows a test can change while the agent runs (a counter that wraps).
pub struct Table {
    live: Arc<LiveTable>,
    rows: std::sync::Mutex<Rows>,
}

impl Table {
    pub fn new(rows: Rows) -> Table {
        let live = Arc::new(LiveTable::default());
        live.replace(&rows);
        Table {
            live,
            rows: std::sync::Mutex::new(rows),
        }
    }

    pub fn len(&self) -> usize {
        self.rows.lock().unwrap().len()
    }

    pub fn set(&self, oid: &str, value: Value) {
        let mut rows = self.rows.lock().unwrap();
        row(&mut rows, oid, value);
        self.live.replace(&rows);
    }
}

pub const V3_AUTH_PASSWORD: &[u8] = b"auth-pass-123";
pub const V3_PRIV_PASSWORD: &[u8] = b"priv-pass-456";

/// A v2c agent on a loopback port serving `table` to `community` (the switch bench runs many).
pub async fn serve_table(
    table: Arc<Table>,
    community: &[u8],
) -> (Agent, tokio::task::JoinHandle<()>) {
    let agent = Agent::builder()
        .bind("127.0.0.1:0")
        .community(community)
        .handler(Oid::from_slice(&[1]), table.live.clone())
        .allow_all_access()
        .build()
        .await
        .expect("agent");
    run(agent)
}

/// Runs `agent` on the current runtime until the task is aborted.
fn run(agent: Agent) -> (Agent, tokio::task::JoinHandle<()>) {
    let runner = agent.clone();
    let task = tokio::spawn(async move {
        let _ = runner.run().await;
    });
    (agent, task)
}

fn row(rows: &mut Rows, oid: &str, value: Value) {
    let oid = parse_oid(oid).unwrap();
    rows.retain(|(existing, _)| *existing != oid);
    rows.push((oid, value));
}

/// An Arista-like leaf: two ports, PFC on priority 3, ECN marks on queue 3, an LLDP neighbour,
/// and one counter the agent answers with the wrong type.
pub async fn start_agent() -> (Agent, tokio::task::JoinHandle<()>) {
    let mut table = Rows::new();
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
    row(
        &mut table,
        "1.0.8802.1.1.2.1.4.1.1.8.0.1.1",
        Value::OctetString("ConnectX-7 port 1".into()),
    );
    // An SNMPv3 user next to the community, as switches are commonly set up.
    let engine = async_snmp::AuthoritativeEngine::install(b"rfe-test-engine".to_vec(), |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .expect("engine");
    let agent = Agent::builder()
        .bind("127.0.0.1:0")
        .authoritative_engine(engine)
        .usm_user("monitor", |user| {
            user.auth_priv(
                async_snmp::AuthProtocol::Sha256,
                V3_AUTH_PASSWORD,
                async_snmp::PrivProtocol::Aes128,
                V3_PRIV_PASSWORD,
            )
        })
        .expect("v3 user")
        .community(b"leaf1".as_slice())
        .handler(Oid::from_slice(&[1]), Table::new(table).live)
        .allow_all_access()
        .build()
        .await
        .expect("agent");
    run(agent)
}

/// A UDP peer at a switch's address that answers as `answer` says: given each request and,
/// when the peer relays to a real agent, that agent's answer, it returns the bytes to send
/// back after `delay`, or nothing. Counts the requests it saw.
pub struct UdpPeer {
    pub address: String,
    pub requests: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for UdpPeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a peer sends back for one request and the relayed agent's answer (if any).
pub type Answer = dyn Fn(&[u8], Option<Vec<u8>>) -> Option<Vec<u8>> + Send + Sync;

/// Starts a peer on the current runtime; `agent` is the real agent requests are relayed to.
pub async fn udp_peer(
    agent: Option<std::net::SocketAddr>,
    delay: std::time::Duration,
    answer: Arc<Answer>,
) -> UdpPeer {
    use tokio::net::UdpSocket;
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let address = front.local_addr().unwrap().to_string();
    let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = requests.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, client)) = front.recv_from(&mut buf).await {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let request = buf[..len].to_vec();
            let (front, answer) = (front.clone(), answer.clone());
            tokio::spawn(async move {
                let relayed = match agent {
                    Some(agent) => relay(&request, agent).await,
                    None => None,
                };
                if let Some(reply) = answer(&request, relayed) {
                    tokio::time::sleep(delay).await;
                    let _ = front.send_to(&reply, client).await;
                }
            });
        }
    });
    UdpPeer {
        address,
        requests,
        task,
    }
}

async fn relay(request: &[u8], agent: std::net::SocketAddr) -> Option<Vec<u8>> {
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    back.send_to(request, agent).await.ok()?;
    let mut answer = vec![0u8; 65536];
    let (len, _) = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        back.recv_from(&mut answer),
    )
    .await
    .ok()?
    .ok()?;
    answer.truncate(len);
    Some(answer)
}

/// One BER header at `at`: (tag, start of the contents, length of the contents).
fn ber_header(data: &[u8], at: usize) -> Option<(u8, usize, usize)> {
    let tag = *data.get(at)?;
    let first = *data.get(at + 1)?;
    if first < 0x80 {
        return Some((tag, at + 2, usize::from(first)));
    }
    let octets = usize::from(first & 0x7f);
    let length = data
        .get(at + 2..at + 2 + octets)?
        .iter()
        .fold(0usize, |n, b| n << 8 | usize::from(*b));
    Some((tag, at + 2 + octets, length))
}

/// Where the request-id INTEGER's contents lie in a v1/v2c message: (start, length).
pub fn request_id_span(message: &[u8]) -> Option<(usize, usize)> {
    let (_, inner, _) = ber_header(message, 0)?;
    let (_, version, version_len) = ber_header(message, inner)?;
    let (_, community, community_len) = ber_header(message, version + version_len)?;
    let (_, pdu, _) = ber_header(message, community + community_len)?;
    let (tag, id, id_len) = ber_header(message, pdu)?;
    (tag == 0x02).then_some((id, id_len))
}

/// The answer with another request-id: what a confused or spoofing peer sends.
pub fn with_other_request_id(mut answer: Vec<u8>) -> Option<Vec<u8>> {
    let (start, len) = request_id_span(&answer)?;
    answer[start + len - 1] ^= 0x5a;
    Some(answer)
}

/// A response to `request` (its community and request-id) whose SEQUENCE and PDU headers
/// claim about 2 GB: a well-formed start, a lying length.
pub fn lying_length(request: &[u8]) -> Option<Vec<u8>> {
    let (id, id_len) = request_id_span(request)?;
    let (_, inner, _) = ber_header(request, 0)?;
    let (_, version, version_len) = ber_header(request, inner)?;
    let (_, community, community_len) = ber_header(request, version + version_len)?;
    let mut out = vec![0x30, 0x84, 0x7f, 0xff, 0xff, 0xff];
    out.extend_from_slice(&request[inner..community + community_len]);
    out.extend_from_slice(&[0xa2, 0x84, 0x7f, 0xff, 0xff, 0x00]);
    out.push(0x02);
    out.push(id_len as u8);
    out.extend_from_slice(&request[id..id + id_len]);
    out.extend_from_slice(&[0x02, 0x01, 0x00, 0x02, 0x01, 0x00, 0x30, 0x84, 0x7f, 0xff]);
    Some(out)
}

/// The answer with its varbind list turned into an OCTET STRING: the envelope and request-id
/// are intact (the client matches it to its request), the PDU cannot be decoded.
pub fn with_corrupt_varbinds(mut answer: Vec<u8>) -> Option<Vec<u8>> {
    let (id, id_len) = request_id_span(&answer)?;
    let (_, status, status_len) = ber_header(&answer, id + id_len)?;
    let (_, index, index_len) = ber_header(&answer, status + status_len)?;
    let list = index + index_len;
    (answer.get(list) == Some(&0x30)).then_some(())?;
    answer[list] = 0x04;
    Some(answer)
}
