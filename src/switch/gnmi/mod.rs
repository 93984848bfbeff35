//! A minimal gNMI client for switch counters. `fetch_once` reads with Subscribe ONCE, falling
//! back to Get where a target does not implement Subscribe; `session` keeps a STREAM/SAMPLE or
//! POLL subscription open. Values come back as typed values (PROTO) or as JSON_IETF documents
//! (SONiC sends numbers as strings); both are flattened into leaf updates.

pub mod session;

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request};

use super::poll_error::{PollError, PollErrorReason};
use super::secret::Secret;

/// Generated from `proto/gnmi.proto` by build.rs.
pub mod proto {
    tonic::include_proto!("gnmi");
}

use proto::g_nmi_client::GNmiClient;
use proto::subscribe_response::Response as SubscribeAnswer;
use proto::typed_value::Value as Typed;

/// How to reach one gNMI target.
#[derive(Debug, Clone)]
pub struct GnmiTarget {
    /// `host:port`.
    pub address: String,
    /// Bounds connecting and each one-shot read.
    pub timeout: Duration,
    /// Sent as `username`/`password` request metadata, as gNMI targets expect.
    pub credentials: Option<(String, Secret)>,
    /// TLS settings; plain HTTP/2 when `None`.
    pub tls: Option<GnmiTls>,
}

/// TLS for a gNMI target. Files are read at each connection, so rotated certificates are
/// picked up on the next reconnect.
#[derive(Debug, Clone, Default)]
pub struct GnmiTls {
    /// CA bundle (PEM) that signs the switch's certificate; the system roots when `None`.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for targets that require mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Name to verify the certificate against when it differs from the address's host.
    pub server_name: Option<String>,
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
    pub(crate) fn as_counter(&self) -> Option<u64> {
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

/// The request's prefix and paths for `paths`: their target moves into the prefix. The gNMI
/// specification (2.2.2.1) sets a target in the prefix only, and sonic-gnmi reads it nowhere
/// else: a Subscribe or Get whose prefix names no target is refused with "Empty target data
/// not supported yet", whatever its paths name. A profile's paths share one target (checked
/// when it is loaded).
pub(crate) fn prefixed(paths: &[proto::Path]) -> (Option<proto::Path>, Vec<proto::Path>) {
    let target = paths
        .iter()
        .map(|p| p.target.as_str())
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    if target.is_empty() {
        return (None, paths.to_vec());
    }
    let prefix = proto::Path {
        target: target.to_string(),
        ..Default::default()
    };
    let paths = paths
        .iter()
        .map(|p| proto::Path {
            target: String::new(),
            ..p.clone()
        })
        .collect();
    (Some(prefix), paths)
}

/// The path as text, `/elem[key=value]/...`, keys sorted, module prefixes dropped.
pub(crate) fn render(prefix: Option<&proto::Path>, path: Option<&proto::Path>) -> String {
    let mut out = String::new();
    for elem in prefix.into_iter().chain(path).flat_map(|p| &p.elem) {
        out.push('/');
        out.push_str(local_name(&elem.name));
        let mut keys: Vec<_> = elem.key.iter().collect();
        keys.sort();
        for (k, v) in keys {
            out.push_str(&format!("[{k}={v}]"));
        }
    }
    out
}

/// RFC 7951 qualifies names with their module (`openconfig-interfaces:interfaces`): keep the
/// local name. Only a `module:name` pair of YANG identifiers counts, so that SONiC's
/// `Ethernet0:3` queue keys stay whole.
fn local_name(name: &str) -> &str {
    let identifier = |text: &str| {
        text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    match name.split_once(':') {
        Some((module, local)) if identifier(module) && identifier(local) => local,
        _ => name,
    }
}

/// Leaves that name the entries of a YANG list in JSON (RFC 7951 encodes lists as arrays of
/// objects, keys included): the first present becomes the `[key=value]` of the entry's path.
const LIST_KEYS: [&str; 4] = ["name", "interface-id", "id", "index"];

/// Appends the leaves of a JSON document below `path`.
fn flatten_json(path: &str, json: &serde_json::Value, out: &mut Vec<GnmiUpdate>) {
    use serde_json::Value as J;
    let leaf = match json {
        J::Object(map) => {
            for (key, value) in map {
                flatten_json(&format!("{path}/{}", local_name(key)), value, out);
            }
            return;
        }
        J::Array(entries) => {
            for entry in entries {
                let J::Object(map) = entry else { continue };
                let key = LIST_KEYS.iter().find_map(|k| {
                    map.get(*k).and_then(|v| match v {
                        J::String(s) => Some((*k, s.clone())),
                        J::Number(n) => Some((*k, n.to_string())),
                        _ => None,
                    })
                });
                if let Some((key, value)) = key {
                    flatten_json(&format!("{path}[{key}={value}]"), entry, out);
                }
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
        J::Null => return,
    };
    out.push(GnmiUpdate {
        path: path.to_string(),
        value: leaf,
    });
}

/// Values of object members in a JSON text (`:` outside strings, not followed by `{` or `[`):
/// at least the leaves it flattens to, counted without parsing it.
fn json_member_values(bytes: &[u8]) -> usize {
    let (mut values, mut in_string, mut escaped, mut after_colon) = (0, false, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if after_colon && !b.is_ascii_whitespace() {
            after_colon = false;
            if b != b'{' && b != b'[' {
                values += 1;
            }
        }
        match b {
            b'"' => in_string = true,
            b':' => after_colon = true,
            _ => {}
        }
    }
    values
}

/// Refuses a JSON document of more than `max_leaves` values before it is parsed: parsing
/// takes about 150 bytes a value, so a 60 MiB document of small values (within the message
/// cap) would take a gigabyte before the leaf cap could see it.
pub(crate) fn check_document(update: &proto::Update, max_leaves: usize) -> Result<(), PollError> {
    match update.val.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Typed::JsonVal(bytes) | Typed::JsonIetfVal(bytes))
            if json_member_values(bytes) > max_leaves =>
        {
            Err(session::too_many_leaves(max_leaves))
        }
        _ => Ok(()),
    }
}

/// Appends the leaves of one update (a typed leaf, or a JSON document flattened) and returns
/// the update's own path: everything cached below it is replaced by what it carries.
pub(crate) fn collect_update(
    prefix: Option<&proto::Path>,
    update: &proto::Update,
    out: &mut Vec<GnmiUpdate>,
) -> Result<String, PollError> {
    let path = render(prefix, update.path.as_ref());
    let Some(value) = update.val.as_ref().and_then(|v| v.value.as_ref()) else {
        return Ok(path);
    };
    let leaf = match value {
        Typed::UintVal(v) => GnmiValue::Uint(*v),
        Typed::IntVal(v) => GnmiValue::Int(*v),
        Typed::FloatVal(v) => GnmiValue::Float(f64::from(*v)),
        Typed::DoubleVal(v) => GnmiValue::Float(*v),
        Typed::BoolVal(v) => GnmiValue::Bool(*v),
        Typed::StringVal(v) | Typed::AsciiVal(v) => GnmiValue::Text(v.clone()),
        Typed::JsonVal(bytes) | Typed::JsonIetfVal(bytes) => {
            let json: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| PollError {
                reason: PollErrorReason::Decode,
                detail: format!("{path}: JSON value: {e}"),
            })?;
            flatten_json(&path, &json, out);
            return Ok(path);
        }
        Typed::BytesVal(_) => return Ok(path),
    };
    out.push(GnmiUpdate {
        path: path.clone(),
        value: leaf,
    });
    Ok(path)
}

fn collect_notification(
    notification: &proto::Notification,
    out: &mut Vec<GnmiUpdate>,
    max_leaves: usize,
) -> Result<(), PollError> {
    for update in &notification.update {
        check_document(update, max_leaves)?;
        collect_update(notification.prefix.as_ref(), update, out)?;
    }
    Ok(())
}

pub(crate) fn status_error(status: &tonic::Status) -> PollError {
    let reason = match status.code() {
        Code::Unauthenticated | Code::PermissionDenied => PollErrorReason::Auth,
        Code::DeadlineExceeded => PollErrorReason::Timeout,
        Code::Unavailable => PollErrorReason::Network,
        _ => PollErrorReason::GrpcError,
    };
    PollError {
        reason,
        detail: format!("{:?}: {}", status.code(), status.message()),
    }
}

/// A request with the target's credentials; `deadline` for one-shot calls only (a deadline on
/// a streaming subscription would end it).
pub(crate) fn with_credentials<T>(
    target: &GnmiTarget,
    message: T,
    deadline: Option<Duration>,
) -> Result<Request<T>, PollError> {
    let mut request = Request::new(message);
    if let Some(deadline) = deadline {
        request.set_timeout(deadline);
    }
    if let Some((username, password)) = &target.credentials {
        let value = |text: &str| {
            MetadataValue::try_from(text).map_err(|_| PollError {
                reason: PollErrorReason::Config,
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

fn tls_config(tls: &GnmiTls) -> Result<ClientTlsConfig, PollError> {
    let read = |path: &PathBuf| {
        // PEM files of a CA bundle are a few hundred KiB at most.
        crate::bounded_read::read(path, 4 << 20).map_err(|e| PollError {
            reason: PollErrorReason::Tls,
            detail: format!("{}: {e}", path.display()),
        })
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca_file {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.client_cert {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// Opens a channel to the target (TLS when configured), bounded by its timeout.
pub(crate) async fn connect(target: &GnmiTarget) -> Result<GNmiClient<Channel>, PollError> {
    let scheme = if target.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", target.address))
        .map_err(|e| PollError {
            reason: PollErrorReason::Config,
            detail: format!("address {:?}: {e}", target.address),
        })?
        .connect_timeout(target.timeout);
    if let Some(tls) = &target.tls {
        endpoint = endpoint
            .tls_config(tls_config(tls)?)
            .map_err(|e| PollError {
                reason: PollErrorReason::Tls,
                detail: e.to_string(),
            })?;
    }
    let channel = endpoint.connect().await.map_err(|e| {
        // The transport error's source chain says what failed (refused, certificate, ...).
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            detail.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        let reason = if detail.contains("certificate") || detail.contains("tls") {
            PollErrorReason::Tls
        } else {
            PollErrorReason::Network
        };
        PollError { reason, detail }
    })?;
    // Switch answers can be large (every counter of every port in one document).
    Ok(GNmiClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// Upper bound of one gNMI message; a larger one fails the read instead of growing memory.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The encoding to ask for: JSON_IETF where the target supports it (or does not say), else
/// PROTO, else JSON. Capabilities is optional for a target; its failure is not an error.
pub(crate) async fn choose_encoding(
    client: &mut GNmiClient<Channel>,
    target: &GnmiTarget,
) -> Result<proto::Encoding, PollError> {
    use proto::Encoding as E;
    let request = with_credentials(target, proto::CapabilityRequest {}, Some(target.timeout))?;
    let supported = match client.capabilities(request).await {
        Ok(answer) => answer.into_inner().supported_encodings,
        Err(status)
            if matches!(
                status.code(),
                Code::Unauthenticated | Code::PermissionDenied
            ) =>
        {
            return Err(status_error(&status))
        }
        Err(_) => Vec::new(),
    };
    let offers = |e: E| supported.contains(&(e as i32));
    Ok(if supported.is_empty() || offers(E::JsonIetf) {
        E::JsonIetf
    } else if offers(E::Proto) {
        E::Proto
    } else if offers(E::Json) {
        E::Json
    } else {
        return Err(PollError {
            reason: PollErrorReason::UnsupportedEncoding,
            detail: format!(
                "the target offers encodings {supported:?}; JSON_IETF, PROTO or JSON needed"
            ),
        });
    })
}

/// Reads `paths` once: Subscribe ONCE until the target says it is in sync, or Get when the
/// target does not implement Subscribe. The whole read is bounded by the target's timeout.
pub async fn fetch_once(
    target: &GnmiTarget,
    paths: &[proto::Path],
) -> Result<Vec<GnmiUpdate>, PollError> {
    fetch_once_capped(target, paths, session::MAX_LEAVES).await
}

/// [`fetch_once`] that fails with `too_many_leaves` past `max_leaves` leaves, rather than
/// collecting whatever a target sends before its sync response.
pub(crate) async fn fetch_once_capped(
    target: &GnmiTarget,
    paths: &[proto::Path],
    max_leaves: usize,
) -> Result<Vec<GnmiUpdate>, PollError> {
    within_timeout(
        target,
        "no complete answer",
        fetch(target, paths, max_leaves),
    )
    .await
}

/// `read`, or a `timeout` error ("`what` within <timeout>") once the target's timeout passes.
async fn within_timeout<T>(
    target: &GnmiTarget,
    what: &str,
    read: impl std::future::Future<Output = Result<T, PollError>>,
) -> Result<T, PollError> {
    match tokio::time::timeout(target.timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(PollError {
            reason: PollErrorReason::Timeout,
            detail: format!("{what} within {:?}", target.timeout),
        }),
    }
}

async fn fetch(
    target: &GnmiTarget,
    paths: &[proto::Path],
    max_leaves: usize,
) -> Result<Vec<GnmiUpdate>, PollError> {
    let mut client = connect(target).await?;
    let encoding = choose_encoding(&mut client, target).await?;
    let request =
        session::subscription(paths, proto::subscription_list::Mode::Once, encoding, None);
    let stream = tokio_stream::iter([request]);
    let mut updates = Vec::new();
    match client
        .subscribe(with_credentials(target, stream, Some(target.timeout))?)
        .await
    {
        Ok(response) => {
            let mut answers = response.into_inner();
            loop {
                match answers.message().await {
                    Ok(Some(answer)) => match answer.response {
                        Some(SubscribeAnswer::Update(notification)) => {
                            collect_notification(&notification, &mut updates, max_leaves)?;
                            if updates.len() > max_leaves {
                                return Err(session::too_many_leaves(max_leaves));
                            }
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
            get(
                &mut client,
                target,
                paths,
                encoding,
                max_leaves,
                Absent::IsAnError,
            )
            .await
        }
        Err(status) => Err(status_error(&status)),
    }
}

/// Reads `paths` with one Get, bounded by the target's timeout: for settings read apart from
/// a switch's subscription (`switch::settings`), where a ONCE subscription would be one more
/// session for the switch to keep. A path the target has no data under (NOT_FOUND, which
/// sonic-gnmi answers for a table with no entries: a switch without PFC configured) reads as
/// no leaves.
pub(crate) async fn get_once_capped(
    target: &GnmiTarget,
    paths: &[proto::Path],
    max_leaves: usize,
) -> Result<Vec<GnmiUpdate>, PollError> {
    let read = async {
        let mut client = connect(target).await?;
        let encoding = choose_encoding(&mut client, target).await?;
        get(
            &mut client,
            target,
            paths,
            encoding,
            max_leaves,
            Absent::IsEmpty,
        )
        .await
    };
    within_timeout(target, "no answer to Get", read).await
}

/// What a Get answered with NOT_FOUND means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absent {
    IsAnError,
    IsEmpty,
}

async fn get(
    client: &mut GNmiClient<Channel>,
    target: &GnmiTarget,
    paths: &[proto::Path],
    encoding: proto::Encoding,
    max_leaves: usize,
    absent: Absent,
) -> Result<Vec<GnmiUpdate>, PollError> {
    let (prefix, path) = prefixed(paths);
    let request = proto::GetRequest {
        prefix,
        path,
        encoding: encoding as i32,
        ..Default::default()
    };
    let response = match client
        .get(with_credentials(target, request, Some(target.timeout))?)
        .await
    {
        Ok(response) => response,
        Err(status) if status.code() == Code::NotFound && absent == Absent::IsEmpty => {
            return Ok(Vec::new());
        }
        Err(status) => return Err(status_error(&status)),
    };
    let mut updates = Vec::new();
    for notification in &response.into_inner().notification {
        collect_notification(notification, &mut updates, max_leaves)?;
        if updates.len() > max_leaves {
            return Err(session::too_many_leaves(max_leaves));
        }
    }
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_target_goes_into_the_prefix() {
        let paths = [
            parse_path("COUNTERS_DB:COUNTERS/Ethernet*").unwrap(),
            parse_path("COUNTERS_DB:COUNTERS/Ethernet*/Queues").unwrap(),
        ];
        let (prefix, moved) = prefixed(&paths);
        let prefix = prefix.expect("a prefix naming the target");
        assert_eq!(
            (prefix.target.as_str(), prefix.elem.len()),
            ("COUNTERS_DB", 0)
        );
        assert!(moved.iter().all(|p| p.target.is_empty()), "{moved:?}");
        assert_eq!(
            moved
                .iter()
                .map(|p| render(None, Some(p)))
                .collect::<Vec<_>>(),
            ["/COUNTERS/Ethernet*", "/COUNTERS/Ethernet*/Queues"]
        );
        // OpenConfig paths name no target: no prefix.
        let openconfig = [parse_path("/interfaces/interface/state").unwrap()];
        assert_eq!(prefixed(&openconfig), (None, openconfig.to_vec()));
    }

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

    #[test]
    fn json_values_are_counted_without_parsing() {
        let text =
            br#"{"a": {"b": "x:y", "c": 1, "d": [{"name": "e\"f:", "g": null}]}, "h": true}"#;
        // b, c, name, g and h; not a, d (containers) nor the colons inside strings.
        assert_eq!(json_member_values(text), 5);
        let mut out = Vec::new();
        let update = proto::Update {
            path: Some(parse_path("/t").unwrap()),
            val: Some(proto::TypedValue {
                value: Some(Typed::JsonIetfVal(text.to_vec())),
            }),
            duplicates: 0,
        };
        let err = check_document(&update, 4).unwrap_err();
        assert_eq!(err.reason, PollErrorReason::TooManyLeaves);
        check_document(&update, 5).unwrap();
        collect_update(None, &update, &mut out).unwrap();
        assert_eq!(out.len(), 4, "{out:?}");
    }

    #[test]
    fn module_prefixes_go_queue_keys_and_list_entries_stay() {
        assert_eq!(local_name("openconfig-interfaces:interfaces"), "interfaces");
        assert_eq!(local_name("Ethernet0:3"), "Ethernet0:3");
        assert_eq!(local_name("Ethernet0:3:periodic"), "Ethernet0:3:periodic");
        let json = serde_json::json!({"openconfig-interfaces:interface": [
            {"name": "Ethernet0", "state": {"counters": {"in-octets": "7"}}},
            {"no-key": 1}
        ]});
        let mut out = Vec::new();
        flatten_json("/interfaces", &json, &mut out);
        let paths: Vec<&str> = out.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/interfaces/interface[name=Ethernet0]/name",
                "/interfaces/interface[name=Ethernet0]/state/counters/in-octets"
            ]
        );
    }
}
