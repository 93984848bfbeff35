//! Walks a switch over SNMP (v1, v2c, v3 USM) with a vendor profile and decodes what it answers into
//! normalized samples. All async-snmp use stays in this file, so a breaking release of that
//! pre-1.0 crate (or a move to another client) touches nothing else.

use std::time::Duration;

use async_snmp::{Auth, AuthProtocol, Client, Oid, PrivProtocol, Retry, UsmConfig, Value};

use super::poll_error::{PollError, PollErrorReason};
use super::profile::{Profile, Sample, SnmpValue};
use super::secret::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnmpVersion {
    V1,
    V2c,
    V3,
}

/// USM authentication algorithms (RFC 3414, RFC 7860).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthAlgorithm {
    Md5,
    Sha,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// USM privacy algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivAlgorithm {
    Des,
    Aes,
    Aes192,
    Aes256,
}

/// An SNMPv3 user: authNoPriv without `privacy`, authPriv with it.
#[derive(Debug, Clone)]
pub struct Usm {
    pub username: String,
    pub auth: (AuthAlgorithm, Secret),
    pub privacy: Option<(PrivAlgorithm, Secret)>,
}

/// Who we are to the switch.
#[derive(Debug, Clone)]
pub enum Credentials {
    V1(Secret),
    V2c(Secret),
    V3(Usm),
}

impl Credentials {
    pub fn version(&self) -> SnmpVersion {
        match self {
            Credentials::V1(_) => SnmpVersion::V1,
            Credentials::V2c(_) => SnmpVersion::V2c,
            Credentials::V3(_) => SnmpVersion::V3,
        }
    }

    fn auth(&self) -> Result<Auth, PollError> {
        Ok(match self {
            Credentials::V1(community) => Auth::v1(community.expose()),
            Credentials::V2c(community) => Auth::v2c(community.expose()),
            Credentials::V3(usm) => {
                let auth_protocol = match usm.auth.0 {
                    AuthAlgorithm::Md5 => AuthProtocol::Md5,
                    AuthAlgorithm::Sha => AuthProtocol::Sha1,
                    AuthAlgorithm::Sha224 => AuthProtocol::Sha224,
                    AuthAlgorithm::Sha256 => AuthProtocol::Sha256,
                    AuthAlgorithm::Sha384 => AuthProtocol::Sha384,
                    AuthAlgorithm::Sha512 => AuthProtocol::Sha512,
                };
                let user = UsmConfig::new(usm.username.clone().into_bytes());
                let configured = match &usm.privacy {
                    None => user.auth(auth_protocol, usm.auth.1.expose()),
                    Some((privacy, password)) => {
                        let priv_protocol = match privacy {
                            PrivAlgorithm::Des => PrivProtocol::Des,
                            PrivAlgorithm::Aes => PrivProtocol::Aes128,
                            PrivAlgorithm::Aes192 => PrivProtocol::Aes192Blumenthal,
                            PrivAlgorithm::Aes256 => PrivProtocol::Aes256Blumenthal,
                        };
                        user.auth_priv(
                            auth_protocol,
                            usm.auth.1.expose(),
                            priv_protocol,
                            password.expose(),
                        )
                    }
                };
                // The library's message names the protocol or the length rule, never the key.
                Auth::from(configured.map_err(|e| PollError {
                    reason: PollErrorReason::Config,
                    detail: format!("SNMPv3 user {:?}: {e}", usm.username),
                })?)
            }
        })
    }
}

/// How to reach one switch.
#[derive(Debug, Clone)]
pub struct SnmpTarget {
    /// `host:port`; the port defaults to 161.
    pub address: String,
    pub credentials: Credentials,
    pub timeout: Duration,
    pub retries: u32,
    pub max_repetitions: u32,
}

/// What one walk of a switch returned.
#[derive(Debug, Default)]
pub struct WalkResult {
    pub samples: Vec<Sample>,
    /// Rows a column claimed but whose value it could not read (wrong type, exceptions).
    pub decode_errors: Vec<String>,
}

impl SnmpTarget {
    fn socket_address(&self) -> String {
        let has_port = self.address.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && port.parse::<u16>().is_ok()
                && (!host.contains(':') || host.ends_with(']'))
        });
        if has_port {
            self.address.clone()
        } else {
            format!("{}:161", self.address)
        }
    }
}

fn poll_error(e: &async_snmp::Error) -> PollError {
    use async_snmp::ErrorKind;
    let reason = match e.kind() {
        ErrorKind::Timeout | ErrorKind::ConstructionTimeout => PollErrorReason::Timeout,
        ErrorKind::Network | ErrorKind::Closed => PollErrorReason::Network,
        ErrorKind::Auth => PollErrorReason::Auth,
        ErrorKind::Decode => PollErrorReason::Decode,
        ErrorKind::Snmp => PollErrorReason::SnmpError,
        _ => PollErrorReason::Other,
    };
    PollError {
        reason,
        detail: e.to_string(),
    }
}

fn snmp_value(value: &Value) -> SnmpValue {
    match value {
        Value::Counter32(v) => SnmpValue::Counter32(*v),
        Value::Counter64(v) => SnmpValue::Counter64(*v),
        Value::Gauge32(v) | Value::UInteger32(v) => SnmpValue::Gauge32(*v),
        Value::Integer(v) => SnmpValue::Integer(i64::from(*v)),
        Value::OctetString(bytes) => SnmpValue::OctetString(bytes.to_vec()),
        other => SnmpValue::Other(format!("{other:?}")),
    }
}

/// Which of a profile's columns a walk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Columns {
    All,
    /// Counters and port state: every column but those that change rarely.
    Counters,
    /// The columns that change rarely (LLDP neighbours, PFC settings: `Metric::changes_rarely`).
    Settings,
}

impl Columns {
    fn wants(self, metric: crate::switch::profile::Metric) -> bool {
        match self {
            Columns::All => true,
            Columns::Counters => !metric.changes_rarely(),
            Columns::Settings => metric.changes_rarely(),
        }
    }
}

/// Walks every column of `profile` on `target` (GETBULK for v2c, GETNEXT for v1). One failed
/// column fails the poll: a partial snapshot would look like counters that vanished.
pub async fn walk(target: &SnmpTarget, profile: &Profile) -> Result<WalkResult, PollError> {
    walk_columns(target, profile, Columns::All).await
}

/// [`walk`] of the `columns` given.
pub(crate) async fn walk_columns(
    target: &SnmpTarget,
    profile: &Profile,
    columns: Columns,
) -> Result<WalkResult, PollError> {
    let auth = target.credentials.auth()?;
    let retry = Retry::fixed(target.retries, Duration::ZERO).map_err(|e| PollError {
        reason: PollErrorReason::Config,
        detail: e.to_string(),
    })?;
    let client = Client::builder(target.socket_address(), auth)
        .request_timeout(target.timeout)
        .retry(retry)
        .connect()
        .await
        .map_err(|e| poll_error(&e))?;
    let mut result = WalkResult::default();
    for root in profile.walk_roots_of(|metric| columns.wants(metric)) {
        walk_root(&client, target, profile, &root, &mut result).await?;
    }
    // The standard tables stand in for vendor ones the device does not serve (an older OS).
    // A metric this walk does not read counts as found: its fallback is not this walk's either.
    let found: std::collections::HashSet<_> = result.samples.iter().map(|s| s.metric).collect();
    for root in profile.fallback_roots(|metric| !columns.wants(metric) || found.contains(&metric)) {
        walk_root(&client, target, profile, &root, &mut result).await?;
    }
    Ok(result)
}

/// Walks one column, adding what the profile decodes to `result`.
async fn walk_root(
    client: &Client,
    target: &SnmpTarget,
    profile: &Profile,
    root: &[u32],
    result: &mut WalkResult,
) -> Result<(), PollError> {
    let oid = Oid::from_slice(root);
    let mut stream = match target.credentials.version() {
        SnmpVersion::V1 => client.walk_getnext(oid),
        SnmpVersion::V2c | SnmpVersion::V3 => client.bulk_walk(oid, target.max_repetitions),
    }
    .map_err(|e| poll_error(&e))?;
    // Datagrams counted when the last answer was taken: any that arrive for a request that
    // then times out were answers the client could not use.
    let mut taken = client.stats();
    while let Some(varbind) = stream.next().await {
        let varbind = varbind.map_err(|e| match poll_error(&e) {
            timeout if timeout.reason == PollErrorReason::Timeout => {
                unusable_answers(&taken, &client.stats(), target.credentials.version())
                    .unwrap_or(timeout)
            }
            other => other,
        })?;
        taken = client.stats();
        match profile.decode(varbind.oid.arcs(), &snmp_value(&varbind.value)) {
            Some(Ok(sample)) => result.samples.push(sample),
            Some(Err(e)) => result.decode_errors.push(e.to_string()),
            None => {}
        }
    }
    Ok(())
}

/// A request timed out although the agent answered: with datagrams that are not SNMP (or
/// whose lengths lie), or that carry the request's id but do not decode. The client drops
/// them and waits, as RFC 3416 asks, so the poll would otherwise pass for an agent that never
/// answered. Answers to other request ids stay timeouts: a late answer looks the same. Over
/// SNMPv3 the client's own engine discovery answers are counted with the request's, so only
/// datagrams that are not SNMP count there.
fn unusable_answers(
    before: &async_snmp::UdpStats,
    after: &async_snmp::UdpStats,
    version: SnmpVersion,
) -> Option<PollError> {
    let malformed = after.malformed_datagrams - before.malformed_datagrams;
    let refused = match version {
        SnmpVersion::V1 | SnmpVersion::V2c => {
            after.correlated_datagrams - before.correlated_datagrams
        }
        SnmpVersion::V3 => 0,
    };
    (malformed + refused > 0).then(|| PollError {
        reason: PollErrorReason::Decode,
        detail: format!(
            "no usable answer within the timeout: the agent sent {malformed} datagrams that are not SNMP and {refused} answers that do not decode"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(address: &str) -> SnmpTarget {
        SnmpTarget {
            address: address.into(),
            credentials: Credentials::V2c(Secret::new("s3cret")),
            timeout: Duration::from_millis(200),
            retries: 0,
            max_repetitions: 25,
        }
    }

    #[test]
    fn default_port_is_161() {
        assert_eq!(target("leaf1").socket_address(), "leaf1:161");
        assert_eq!(target("10.0.0.1:1161").socket_address(), "10.0.0.1:1161");
        assert_eq!(target("[::1]:1161").socket_address(), "[::1]:1161");
    }

    #[test]
    fn community_never_printed() {
        let text = format!("{:?}", target("leaf1"));
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("<redacted>"));
    }
}
