//! The demo's switches on the wire: one SNMP v2c agent per simulated leaf on a loopback port
//! (async-snmp's agent), serving rows that the fabric's ticker replaces after every step.

use std::sync::{Arc, RwLock};

use async_snmp::agent::Agent;
use async_snmp::handler::{
    BoxFuture, GetNextResult, GetResult, HandlerResult, MibHandler, OidTable, RequestContext,
};
use async_snmp::{Oid, Value, VarBind};

use crate::switch::profile::SnmpValue;

/// The rows an agent serves; replaced whole so that a walk never sees half a step.
#[derive(Default)]
pub struct LiveTable(RwLock<Arc<OidTable<Value>>>);

impl LiveTable {
    pub fn replace(&self, rows: &[(Vec<u32>, SnmpValue)]) {
        let mut table = OidTable::new();
        for (oid, value) in rows {
            let value = match value {
                SnmpValue::Counter32(v) => Value::Counter32(*v),
                SnmpValue::Counter64(v) => Value::Counter64(*v),
                SnmpValue::Gauge32(v) => Value::Gauge32(*v),
                SnmpValue::Integer(v) => Value::Integer(*v as i32),
                SnmpValue::OctetString(bytes) => Value::OctetString(bytes.clone().into()),
                SnmpValue::Other(_) => continue,
            };
            table.insert(Oid::from_slice(oid), value);
        }
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }

    fn current(&self) -> Arc<OidTable<Value>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl MibHandler for LiveTable {
    fn get<'a>(
        &'a self,
        _: &'a RequestContext,
        oid: &'a Oid,
    ) -> BoxFuture<'a, HandlerResult<GetResult>> {
        Box::pin(async move {
            Ok(match self.current().get(oid) {
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
            Ok(match self.current().get_next(oid) {
                Some((next, v)) => GetNextResult::Value(VarBind::new(next.clone(), v.clone())),
                None => GetNextResult::EndOfMibView,
            })
        })
    }
}

/// Starts an agent for `table` on a loopback port; returns its address. It runs until the
/// runtime stops.
pub async fn start(
    table: Arc<LiveTable>,
    community: &str,
) -> std::io::Result<std::net::SocketAddr> {
    let agent = Agent::builder()
        .bind("127.0.0.1:0")
        .community(community.as_bytes())
        .handler(Oid::from_slice(&[1]), table)
        .allow_all_access()
        .build()
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let address = agent.local_addr();
    tokio::spawn(async move {
        if let Err(e) = agent.run().await {
            tracing::error!("simulated switch agent stopped: {e}");
        }
    });
    Ok(address)
}
