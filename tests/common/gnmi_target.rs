//! An in-process gNMI target on loopback (tonic server) that answers like a SONiC switch
//! (COUNTERS_DB virtual paths, the DB target read from the request's prefix only, JSON_IETF
//! documents with numbers as strings) and like an
//! OpenConfig switch (typed leaves per interface). It implements Capabilities, Get and
//! Subscribe ONCE / POLL / STREAM-SAMPLE, checks credentials, can serve TLS (optionally
//! requiring client certificates), and can be told to misbehave while the test runs.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdma_fabric_exporter::switch::gnmi::proto::g_nmi_server::{GNmi, GNmiServer};
use rdma_fabric_exporter::switch::gnmi::proto::{
    self, subscribe_request, subscribe_response, subscription_list, typed_value, CapabilityRequest,
    CapabilityResponse, GetRequest, GetResponse, Notification, SubscribeRequest, SubscribeResponse,
    TypedValue, Update,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

/// How the target treats the next answers it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// Subscribe is unimplemented: clients must use Get.
    GetOnly,
    /// Streams stay open and nothing more is sent.
    Silent,
    /// The next sample is cut in half and the stream ends with an error.
    CloseMidSample,
    /// New calls are refused as unavailable.
    Down,
    /// After one full sample and its sync, the same sample again and again, as fast as the
    /// stream takes it.
    FloodSame,
    /// Documents of 100 leaves each under paths never sent before, without end; after one
    /// full sample and its sync when `sync_first`.
    FloodNew {
        sync_first: bool,
    },
    /// One message of about this many bytes as the first answer, then silence: a JSON_IETF
    /// document of leaves `"k0":"1","k1":"1",...`.
    Oversized(usize),
    /// The subscription ends as soon as it is opened, without a word.
    CloseAtOnce,
    /// Every sample is sent without the sync response that says it is complete.
    NoSync,
}

/// What the switch's counters hold: per port, SONiC field name to value.
#[derive(Debug, Default)]
pub struct SwitchState {
    pub ports: BTreeMap<String, BTreeMap<String, u64>>,
    /// "Ethernet0:3" to queue fields.
    pub queues: BTreeMap<String, BTreeMap<String, u64>>,
    pub oper_status: BTreeMap<String, &'static str>,
    /// CONFIG_DB `PORT_QOS_MAP`: per port, field to value (`pfc_enable: "3,4"`).
    pub qos: BTreeMap<String, BTreeMap<String, String>>,
    /// CONFIG_DB requests are refused, as a path blacklist refuses them.
    pub refuse_config_db: bool,
    /// CONFIG_DB requests received (refused ones included).
    pub config_db_requests: u64,
}

#[derive(Clone)]
pub struct FakeSwitch {
    pub state: Arc<Mutex<SwitchState>>,
    pub behaviour: Arc<Mutex<Behaviour>>,
    /// Subscription modes seen (ONCE 1, POLL 2, STREAM 0), and Poll requests received.
    pub modes: Arc<Mutex<Vec<i32>>>,
    pub polls: Arc<Mutex<u32>>,
    pub capabilities_calls: Arc<Mutex<u32>>,
    /// Encodings the target offers in Capabilities, and those clients asked for.
    pub offered_encodings: Arc<Mutex<Vec<i32>>>,
    pub requested_encodings: Arc<Mutex<Vec<i32>>>,
    /// Notifications sent on subscriptions, floods included.
    pub notifications_sent: Arc<std::sync::atomic::AtomicU64>,
    /// When each Subscribe call arrived.
    pub subscribed_at: Arc<Mutex<Vec<std::time::Instant>>>,
    credentials: Option<(String, String)>,
}

impl FakeSwitch {
    /// Two 400G ports with PFC on priority 3, queue counters and ECN marks.
    pub fn new(credentials: Option<(&str, &str)>) -> Self {
        let mut state = SwitchState::default();
        for (port, base) in [("Ethernet0", 1000u64), ("Ethernet8", 5000)] {
            let fields = [
                ("SAI_PORT_STAT_IF_IN_OCTETS", base * 1_000_000),
                ("SAI_PORT_STAT_IF_OUT_OCTETS", base * 2_000_000),
                ("SAI_PORT_STAT_IF_IN_ERRORS", 0),
                ("SAI_PORT_STAT_PFC_3_RX_PKTS", base + 11),
                ("SAI_PORT_STAT_PFC_3_TX_PKTS", base + 22),
                ("SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US", base * 1000),
                ("SAI_PORT_STAT_ETHER_STATS_JABBERS", 0),
            ];
            state.ports.insert(
                port.to_string(),
                fields.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            );
            state.queues.insert(
                format!("{port}:3"),
                [
                    ("SAI_QUEUE_STAT_PACKETS".to_string(), base * 10),
                    (
                        "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS".to_string(),
                        base + 33,
                    ),
                ]
                .into(),
            );
            state.oper_status.insert(port.to_string(), "UP");
        }
        FakeSwitch {
            state: Arc::new(Mutex::new(state)),
            behaviour: Arc::new(Mutex::new(Behaviour::Normal)),
            modes: Arc::default(),
            polls: Arc::default(),
            capabilities_calls: Arc::default(),
            offered_encodings: Arc::new(Mutex::new(vec![
                proto::Encoding::JsonIetf as i32,
                proto::Encoding::Proto as i32,
            ])),
            requested_encodings: Arc::default(),
            notifications_sent: Arc::default(),
            subscribed_at: Arc::default(),
            credentials: credentials.map(|(u, p)| (u.to_string(), p.to_string())),
        }
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    fn behaviour(&self) -> Behaviour {
        *self.behaviour.lock().unwrap()
    }

    /// Adds `by` to a port counter, as traffic would.
    pub fn bump(&self, port: &str, field: &str, by: u64) {
        let mut state = self.state.lock().unwrap();
        *state
            .ports
            .get_mut(port)
            .unwrap()
            .entry(field.to_string())
            .or_default() += by;
    }

    pub fn port_value(&self, port: &str, field: &str) -> u64 {
        self.state.lock().unwrap().ports[port][field]
    }

    fn check_credentials<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some((user, password)) = &self.credentials else {
            return Ok(());
        };
        let metadata = request.metadata();
        let given = |key| metadata.get(key).and_then(|v| v.to_str().ok());
        if given("username") == Some(user) && given("password") == Some(password) {
            Ok(())
        } else {
            Err(Status::unauthenticated("bad username or password"))
        }
    }

    /// The notifications answering one requested path.
    fn answer(&self, path: &proto::Path) -> Vec<Notification> {
        let state = self.state.lock().unwrap();
        let names: Vec<&str> = path.elem.iter().map(|e| e.name.as_str()).collect();
        let strings = |fields: &BTreeMap<String, u64>| {
            fields
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.to_string())))
                .collect::<serde_json::Map<_, _>>()
        };
        let document = |json: serde_json::Value| {
            vec![notification(
                path.clone(),
                typed_value::Value::JsonIetfVal(json.to_string().into_bytes()),
            )]
        };
        match (path.target.as_str(), names.as_slice()) {
            ("COUNTERS_DB", ["COUNTERS", "Ethernet*"]) => document(serde_json::Value::Object(
                state
                    .ports
                    .iter()
                    .map(|(port, fields)| (port.clone(), strings(fields).into()))
                    .collect(),
            )),
            ("COUNTERS_DB", ["COUNTERS", "Ethernet*", "Queues"]) => {
                document(serde_json::Value::Object(
                    state
                        .queues
                        .iter()
                        .map(|(queue, fields)| (queue.clone(), strings(fields).into()))
                        .collect(),
                ))
            }
            // Watchdog and anything unknown: an empty answer, as SONiC gives for no entries.
            ("COUNTERS_DB", _) => Vec::new(),
            ("CONFIG_DB", ["PORT_QOS_MAP"]) if !state.qos.is_empty() => {
                document(serde_json::Value::Object(
                    state
                        .qos
                        .iter()
                        .map(|(port, fields)| {
                            let fields: serde_json::Map<_, _> = fields
                                .iter()
                                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                                .collect();
                            (port.clone(), fields.into())
                        })
                        .collect(),
                ))
            }
            (_, ["interfaces", "interface", "state"]) => state
                .ports
                .iter()
                .map(|(port, fields)| {
                    // OpenConfig targets send typed leaves under a per-interface prefix.
                    let mut prefix = proto::Path::default();
                    prefix.elem.push(elem("interfaces", None));
                    prefix.elem.push(elem("interface", Some(("name", port))));
                    prefix.elem.push(elem("state", None));
                    let leaf = |name: &str, value| Update {
                        path: Some(proto::Path {
                            elem: name.split('/').map(|n| elem(n, None)).collect(),
                            ..Default::default()
                        }),
                        val: Some(TypedValue { value: Some(value) }),
                        duplicates: 0,
                    };
                    Notification {
                        timestamp: 1,
                        prefix: Some(prefix),
                        update: vec![
                            leaf(
                                "oper-status",
                                typed_value::Value::StringVal(state.oper_status[port].into()),
                            ),
                            leaf(
                                "counters/in-octets",
                                typed_value::Value::UintVal(fields["SAI_PORT_STAT_IF_IN_OCTETS"]),
                            ),
                        ],
                        ..Default::default()
                    }
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn answers(&self, paths: &[proto::Path]) -> Vec<Notification> {
        paths.iter().flat_map(|p| self.answer(p)).collect()
    }

    /// The requested paths as sonic-gnmi reads them: the target is the prefix's, whatever a
    /// path names, and a request for a DB table (`COUNTERS/...`) whose prefix names no target
    /// is refused as sonic-gnmi refuses it.
    fn targeted(
        &self,
        prefix: Option<&proto::Path>,
        paths: Vec<proto::Path>,
    ) -> Result<Vec<proto::Path>, Status> {
        let target = prefix.map(|p| p.target.as_str()).unwrap_or_default();
        if target == "CONFIG_DB" {
            let mut state = self.state.lock().unwrap();
            state.config_db_requests += 1;
            if state.refuse_config_db {
                return Err(Status::permission_denied("CONFIG_DB is blacklisted"));
            }
        }
        let db_table = paths
            .iter()
            .any(|p| p.elem.first().is_some_and(|e| e.name == "COUNTERS"));
        if target.is_empty() && db_table {
            return Err(Status::unimplemented("Empty target data not supported yet"));
        }
        Ok(paths
            .into_iter()
            .map(|p| proto::Path {
                target: target.to_string(),
                ..p
            })
            .collect())
    }
}

fn elem(name: &str, key: Option<(&str, &str)>) -> proto::PathElem {
    proto::PathElem {
        name: name.to_string(),
        key: key
            .map(|(k, v)| [(k.to_string(), v.to_string())].into())
            .unwrap_or_default(),
    }
}

fn notification(path: proto::Path, value: typed_value::Value) -> Notification {
    Notification {
        timestamp: 1,
        prefix: None,
        update: vec![Update {
            path: Some(path),
            val: Some(TypedValue { value: Some(value) }),
            duplicates: 0,
        }],
        ..Default::default()
    }
}

fn update(notification: Notification) -> Result<SubscribeResponse, Status> {
    Ok(SubscribeResponse {
        response: Some(subscribe_response::Response::Update(notification)),
    })
}

fn sync() -> Result<SubscribeResponse, Status> {
    Ok(SubscribeResponse {
        response: Some(subscribe_response::Response::SyncResponse(true)),
    })
}

type Answers = Pin<Box<dyn Stream<Item = Result<SubscribeResponse, Status>> + Send>>;

impl FakeSwitch {
    /// Sends one full sample followed by a sync; false when the client went away or the
    /// target was told to break the stream.
    async fn send_sample(
        &self,
        paths: &[proto::Path],
        out: &mpsc::Sender<Result<SubscribeResponse, Status>>,
    ) -> bool {
        let notifications = self.answers(paths);
        match self.behaviour() {
            // Keep the stream open and say nothing, for as long as the client waits.
            Behaviour::Silent => std::future::pending::<()>().await,
            Behaviour::NoSync => return self.send_all(notifications, out).await,
            Behaviour::FloodSame => {
                if !self.send_all(notifications.clone(), out).await
                    || out.send(sync()).await.is_err()
                {
                    return false;
                }
                while self.send_all(notifications.clone(), out).await {}
                return false;
            }
            Behaviour::FloodNew { sync_first } => {
                if sync_first
                    && (!self.send_all(notifications, out).await || out.send(sync()).await.is_err())
                {
                    return false;
                }
                for batch in 0u64.. {
                    let leaves: serde_json::Map<_, _> = (0..100)
                        .map(|i| {
                            (
                                format!("FLOOD_{i}"),
                                serde_json::Value::String(i.to_string()),
                            )
                        })
                        .collect();
                    let path = proto::Path {
                        target: "COUNTERS_DB".into(),
                        elem: vec![
                            elem("COUNTERS", None),
                            elem("Ethernet*", None),
                            elem(&format!("Flood{batch}"), None),
                        ],
                        ..Default::default()
                    };
                    let json = serde_json::Value::Object(leaves).to_string().into_bytes();
                    let n = notification(path, typed_value::Value::JsonIetfVal(json));
                    if !self.send_all(vec![n], out).await {
                        return false;
                    }
                }
                return false;
            }
            Behaviour::Oversized(bytes) => {
                // Built off the runtime's workers: the other targets it serves stay prompt.
                let json = tokio::task::spawn_blocking(move || {
                    let mut json = String::with_capacity(bytes + 32);
                    json.push('{');
                    for i in 0u64.. {
                        if json.len() >= bytes {
                            break;
                        }
                        json.push_str(&format!("\"k{i}\":\"1\","));
                    }
                    json.push_str("\"end\":\"1\"}");
                    json
                })
                .await
                .unwrap();
                let path = paths.first().cloned().unwrap_or_default();
                let n = notification(path, typed_value::Value::JsonIetfVal(json.into_bytes()));
                if self.send_all(vec![n], out).await {
                    std::future::pending::<()>().await;
                }
                return false;
            }
            Behaviour::CloseMidSample => {
                let half = notifications.len() / 2;
                for n in notifications.into_iter().take(half) {
                    let _ = out.send(update(n)).await;
                }
                let _ = out
                    .send(Err(Status::unavailable("connection reset mid-sample")))
                    .await;
                return false;
            }
            _ => {}
        }
        self.send_all(notifications, out).await && out.send(sync()).await.is_ok()
    }

    /// Sends `notifications` as updates; false when the client went away.
    async fn send_all(
        &self,
        notifications: Vec<Notification>,
        out: &mpsc::Sender<Result<SubscribeResponse, Status>>,
    ) -> bool {
        for n in notifications {
            if out.send(update(n)).await.is_err() {
                return false;
            }
            self.notifications_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

#[tonic::async_trait]
impl GNmi for FakeSwitch {
    async fn capabilities(
        &self,
        request: Request<CapabilityRequest>,
    ) -> Result<Response<CapabilityResponse>, Status> {
        self.check_credentials(&request)?;
        *self.capabilities_calls.lock().unwrap() += 1;
        Ok(Response::new(CapabilityResponse {
            supported_models: vec![],
            supported_encodings: self.offered_encodings.lock().unwrap().clone(),
            g_nmi_version: "0.10.0".into(),
        }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        self.check_credentials(&request)?;
        if self.behaviour() == Behaviour::Down {
            return Err(Status::unavailable("down"));
        }
        let request = request.into_inner();
        let paths = self.targeted(request.prefix.as_ref(), request.path)?;
        let notification = self.answers(&paths);
        // sonic-gnmi's Get answers NOT_FOUND for a DB table with no entries.
        if notification.is_empty() && paths.iter().any(|p| p.target == "CONFIG_DB") {
            return Err(Status::not_found("PORT_QOS_MAP: no entries"));
        }
        Ok(Response::new(GetResponse { notification }))
    }

    type SubscribeStream = Answers;

    async fn subscribe(
        &self,
        request: Request<Streaming<SubscribeRequest>>,
    ) -> Result<Response<Answers>, Status> {
        self.check_credentials(&request)?;
        self.subscribed_at
            .lock()
            .unwrap()
            .push(std::time::Instant::now());
        match self.behaviour() {
            Behaviour::GetOnly => return Err(Status::unimplemented("Subscribe")),
            Behaviour::Down => return Err(Status::unavailable("down")),
            _ => {}
        }
        let close_at_once = self.behaviour() == Behaviour::CloseAtOnce;
        let mut requests = request.into_inner();
        let first = requests
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("no request"))??;
        let Some(subscribe_request::Request::Subscribe(list)) = first.request else {
            return Err(Status::invalid_argument("expected a SubscriptionList"));
        };
        self.modes.lock().unwrap().push(list.mode);
        self.requested_encodings.lock().unwrap().push(list.encoding);
        let paths: Vec<proto::Path> = list
            .subscription
            .iter()
            .filter_map(|s| s.path.clone())
            .collect();
        let paths = self.targeted(list.prefix.as_ref(), paths)?;
        let (out, answers) = mpsc::channel(64);
        let switch = self.clone();
        if close_at_once {
            drop(out);
        } else if list.mode == subscription_list::Mode::Stream as i32 {
            let interval = list
                .subscription
                .first()
                .map_or(1_000_000_000, |s| s.sample_interval.max(100_000_000));
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(Duration::from_nanos(interval));
                loop {
                    ticker.tick().await;
                    if !switch.send_sample(&paths, &out).await {
                        return;
                    }
                }
            });
        } else if list.mode == subscription_list::Mode::Poll as i32 {
            tokio::spawn(async move {
                if !switch.send_sample(&paths, &out).await {
                    return;
                }
                while let Some(Ok(request)) = requests.next().await {
                    if let Some(subscribe_request::Request::Poll(_)) = request.request {
                        *switch.polls.lock().unwrap() += 1;
                        if !switch.send_sample(&paths, &out).await {
                            return;
                        }
                    }
                }
            });
        } else {
            tokio::spawn(async move {
                switch.send_sample(&paths, &out).await;
            });
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(answers))))
    }
}

/// Certificates for a TLS test: a CA, a server certificate for `localhost` and 127.0.0.1, and a
/// client certificate, all as PEM files in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
    pub server: (String, String),
}

impl Pki {
    pub fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let leaf = |names: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let server = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
        let client = leaf(vec!["exporter".into()]);
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", &ca.pem());
        write("client.pem", &client.0);
        write("client.key", &client.1);
        // A CA nobody trusts, for the negative case.
        let other = CertifiedIssuer::self_signed(
            CertificateParams::new(Vec::new()).unwrap(),
            KeyPair::generate().unwrap(),
        )
        .unwrap();
        write("other-ca.pem", &other.pem());
        Pki {
            ca_pem: ca.pem(),
            server,
            dir,
        }
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

/// How the target accepts connections.
pub enum Transport<'a> {
    Plain,
    Tls(&'a Pki),
    /// TLS that also requires a client certificate signed by the CA.
    MutualTls(&'a Pki),
}

/// Serves `switch` on a loopback port of the current runtime; returns `127.0.0.1:port`.
pub async fn serve(switch: FakeSwitch, transport: Transport<'_>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let mut builder = Server::builder();
    let tls = match transport {
        Transport::Plain => None,
        Transport::Tls(pki) => Some((pki, false)),
        Transport::MutualTls(pki) => Some((pki, true)),
    };
    if let Some((pki, mutual)) = tls {
        let mut config =
            ServerTlsConfig::new().identity(Identity::from_pem(&pki.server.0, &pki.server.1));
        if mutual {
            config = config.client_ca_root(Certificate::from_pem(&pki.ca_pem));
        }
        builder = builder.tls_config(config).unwrap();
    }
    let service = GNmiServer::new(switch);
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let _ = builder
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
    });
    address
}
