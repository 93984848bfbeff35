//! A minimal gNMI client for switch counters: one-shot reads with Subscribe ONCE, falling back
//! to Get where a target does not implement Subscribe. Values come back as typed values or as
//! JSON_IETF documents (SONiC sends numbers as strings); both are flattened into leaf updates.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint;
use tonic::{Code, Request};

use super::snmp::{PollError, Secret};

/// Generated from `proto/gnmi.proto` by build.rs.
pub mod proto {
    tonic::include_proto!("gnmi");
}

use proto::g_nmi_client::GNmiClient;
use proto::subscribe_request::Request as SubscribeKind;
use proto::subscribe_response::Response as SubscribeAnswer;
use proto::typed_value::Value as Typed;

/// How to reach one gNMI target (plain HTTP/2; TLS is not wired yet).
#[derive(Debug, Clone)]
pub struct GnmiTarget {
    /// `host:port`.
    pub address: String,
    pub timeout: Duration,
    /// Sent as `username`/`password` request metadata, as gNMI targets expect.
    pub credentials: Option<(String, Secret)>,
}

/// A leaf value as the target reported it.
#[derive(Debug, Clone, PartialEq)]
pub enum GnmiValue {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl GnmiValue {
    /// The value as a counter: unsigned integers, non-negative integers, and decimal strings
    /// (SONiC's COUNTERS_DB returns every number as a string).
    pub fn as_counter(&self) -> Option<u64> {
        match self {
            GnmiValue::Uint(v) => Some(*v),
            GnmiValue::Int(v) => u64::try_from(*v).ok(),
            GnmiValue::Text(t) => t.trim().parse().ok(),
            GnmiValue::Float(_) | GnmiValue::Bool(_) => None,
        }
    }
}

/// One leaf: its full path (`/COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS`) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct GnmiUpdate {
    pub path: String,
    pub value: GnmiValue,
}

/// Parses `[TARGET:]/elem/elem[key=value]/...` into a gNMI path; `TARGET:` selects the data
/// source (`COUNTERS_DB:` on SONiC).
pub fn parse_path(text: &str) -> Result<proto::Path, String> {
    let (target, rest) = match text.split_once(':') {
        Some((target, rest)) if !target.contains('/') && !target.contains('[') => (target, rest),
        _ => ("", text),
    };
    let mut elems = Vec::new();
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        let (name, keys) = match part.split_once('[') {
            Some((name, keys)) => (name, Some(keys)),
            None => (part, None),
        };
        let mut key = std::collections::HashMap::new();
        if let Some(keys) = keys {
            for pair in keys.trim_end_matches(']').split("][") {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("invalid key {pair:?} in path {text:?}"))?;
                key.insert(k.to_string(), v.to_string());
            }
        }
        if name.is_empty() {
            return Err(format!("empty element in path {text:?}"));
        }
        elems.push(proto::PathElem {
            name: name.to_string(),
            key,
        });
    }
    Ok(proto::Path {
        origin: String::new(),
        elem: elems,
        target: target.to_string(),
    })
}

fn render(prefix: Option<&proto::Path>, path: Option<&proto::Path>) -> String {
    let mut out = String::new();
    for elem in prefix.into_iter().chain(path).flat_map(|p| &p.elem) {
        out.push('/');
        out.push_str(&elem.name);
        let mut keys: Vec<_> = elem.key.iter().collect();
        keys.sort();
        for (k, v) in keys {
            out.push_str(&format!("[{k}={v}]"));
        }
    }
    out
}

/// Appends the leaves of a JSON document below `path`.
fn flatten_json(path: &str, json: &serde_json::Value, out: &mut Vec<GnmiUpdate>) {
    use serde_json::Value as J;
    let leaf = match json {
        J::Object(map) => {
            for (key, value) in map {
                // RFC 7951 qualifies top-level names with their module: keep the local name.
                let local = key.rsplit_once(':').map_or(key.as_str(), |(_, name)| name);
                flatten_json(&format!("{path}/{local}"), value, out);
            }
            return;
        }
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => GnmiValue::Uint(u),
            (None, Some(i), _) => GnmiValue::Int(i),
            (_, _, Some(f)) => GnmiValue::Float(f),
            _ => return,
        },
        J::String(s) => GnmiValue::Text(s.clone()),
        J::Bool(b) => GnmiValue::Bool(*b),
        J::Null | J::Array(_) => return,
    };
    out.push(GnmiUpdate {
        path: path.to_string(),
        value: leaf,
    });
}

fn collect_notification(
    notification: &proto::Notification,
    out: &mut Vec<GnmiUpdate>,
) -> Result<(), PollError> {
    for update in &notification.update {
        let path = render(notification.prefix.as_ref(), update.path.as_ref());
        let Some(value) = update.val.as_ref().and_then(|v| v.value.as_ref()) else {
            continue;
        };
        let leaf = match value {
            Typed::UintVal(v) => GnmiValue::Uint(*v),
            Typed::IntVal(v) => GnmiValue::Int(*v),
            Typed::FloatVal(v) => GnmiValue::Float(f64::from(*v)),
            Typed::DoubleVal(v) => GnmiValue::Float(*v),
            Typed::BoolVal(v) => GnmiValue::Bool(*v),
            Typed::StringVal(v) | Typed::AsciiVal(v) => GnmiValue::Text(v.clone()),
            Typed::JsonVal(bytes) | Typed::JsonIetfVal(bytes) => {
                let json: serde_json::Value =
                    serde_json::from_slice(bytes).map_err(|e| PollError {
                        reason: "decode",
                        detail: format!("{path}: JSON value: {e}"),
                    })?;
                flatten_json(&path, &json, out);
                continue;
            }
            Typed::BytesVal(_) => continue,
        };
        out.push(GnmiUpdate { path, value: leaf });
    }
    Ok(())
}

fn status_error(status: &tonic::Status) -> PollError {
    let reason = match status.code() {
        Code::Unauthenticated | Code::PermissionDenied => "auth",
        Code::DeadlineExceeded => "timeout",
        Code::Unavailable => "network",
        _ => "grpc_error",
    };
    PollError {
        reason,
        detail: format!("{:?}: {}", status.code(), status.message()),
    }
}

fn with_credentials<T>(target: &GnmiTarget, message: T) -> Result<Request<T>, PollError> {
    let mut request = Request::new(message);
    request.set_timeout(target.timeout);
    if let Some((username, password)) = &target.credentials {
        let value = |text: &str| {
            MetadataValue::try_from(text).map_err(|_| PollError {
                reason: "config",
                detail: "gNMI credentials must be printable ASCII".into(),
            })
        };
        request.metadata_mut().insert("username", value(username)?);
        request
            .metadata_mut()
            .insert("password", value(password.expose())?);
    }
    Ok(request)
}

/// Reads `paths` once: Subscribe ONCE until the target says it is in sync, or Get when the
/// target does not implement Subscribe. The whole read is bounded by the target's timeout.
pub async fn fetch_once(
    target: &GnmiTarget,
    paths: &[proto::Path],
) -> Result<Vec<GnmiUpdate>, PollError> {
    match tokio::time::timeout(target.timeout, fetch(target, paths)).await {
        Ok(result) => result,
        Err(_) => Err(PollError {
            reason: "timeout",
            detail: format!("no complete answer within {:?}", target.timeout),
        }),
    }
}

async fn fetch(target: &GnmiTarget, paths: &[proto::Path]) -> Result<Vec<GnmiUpdate>, PollError> {
    let endpoint =
        Endpoint::from_shared(format!("http://{}", target.address)).map_err(|e| PollError {
            reason: "config",
            detail: format!("address {:?}: {e}", target.address),
        })?;
    let channel = endpoint
        .connect_timeout(target.timeout)
        .connect()
        .await
        .map_err(|e| PollError {
            reason: "network",
            detail: e.to_string(),
        })?;
    let mut client = GNmiClient::new(channel);
    let subscriptions = paths
        .iter()
        .map(|path| proto::Subscription {
            path: Some(path.clone()),
            ..Default::default()
        })
        .collect();
    let request = proto::SubscribeRequest {
        request: Some(SubscribeKind::Subscribe(proto::SubscriptionList {
            subscription: subscriptions,
            mode: proto::subscription_list::Mode::Once as i32,
            encoding: proto::Encoding::JsonIetf as i32,
            ..Default::default()
        })),
    };
    let stream = tokio_stream::iter([request]);
    let mut updates = Vec::new();
    match client.subscribe(with_credentials(target, stream)?).await {
        Ok(response) => {
            let mut answers = response.into_inner();
            loop {
                match answers.message().await {
                    Ok(Some(answer)) => match answer.response {
                        Some(SubscribeAnswer::Update(notification)) => {
                            collect_notification(&notification, &mut updates)?
                        }
                        Some(SubscribeAnswer::SyncResponse(_)) => return Ok(updates),
                        None => {}
                    },
                    // ONCE ends with the stream; a target that closes without a sync response
                    // has still sent everything it had.
                    Ok(None) => return Ok(updates),
                    Err(status) => return Err(status_error(&status)),
                }
            }
        }
        Err(status) if status.code() == Code::Unimplemented => {
            let request = proto::GetRequest {
                path: paths.to_vec(),
                encoding: proto::Encoding::JsonIetf as i32,
                ..Default::default()
            };
            let response = client
                .get(with_credentials(target, request)?)
                .await
                .map_err(|s| status_error(&s))?;
            for notification in &response.into_inner().notification {
                collect_notification(notification, &mut updates)?;
            }
            Ok(updates)
        }
        Err(status) => Err(status_error(&status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_targets_and_keys() {
        let path = parse_path("COUNTERS_DB:COUNTERS/Ethernet0").unwrap();
        assert_eq!(path.target, "COUNTERS_DB");
        assert_eq!(
            path.elem
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>(),
            ["COUNTERS", "Ethernet0"]
        );
        let path = parse_path("/interfaces/interface[name=Ethernet0]/state/counters").unwrap();
        assert_eq!(path.target, "");
        assert_eq!(path.elem[1].key["name"], "Ethernet0");
        assert_eq!(
            render(None, Some(&path)),
            "/interfaces/interface[name=Ethernet0]/state/counters"
        );
        assert!(parse_path("/a/b[c]").is_err());
    }

    #[test]
    fn json_ietf_documents_flatten_to_leaves() {
        let json = serde_json::json!({"openconfig-interfaces:counters": {"in-octets": 5, "name": "x"}, "SAI_PORT_STAT_PFC_3_RX_PKTS": "12345"});
        let mut out = Vec::new();
        flatten_json("/p", &json, &mut out);
        out.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            out[0],
            GnmiUpdate {
                path: "/p/SAI_PORT_STAT_PFC_3_RX_PKTS".into(),
                value: GnmiValue::Text("12345".into())
            }
        );
        assert_eq!(out[0].value.as_counter(), Some(12345));
        assert_eq!(out[1].path, "/p/counters/in-octets");
        assert_eq!(out[1].value, GnmiValue::Uint(5));
        assert_eq!(GnmiValue::Text("lots".into()).as_counter(), None);
    }
}
