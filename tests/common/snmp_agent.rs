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
