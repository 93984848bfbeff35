//! The gNMI client against an in-process tonic gNMI target on loopback: SONiC COUNTERS_DB and
//! OpenConfig paths over Subscribe ONCE, Get as the fallback, and a target that goes silent.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_fabric_exporter::switch::gnmi::proto::g_nmi_server::{GNmi, GNmiServer};
use rdma_fabric_exporter::switch::gnmi::proto::{
    self, subscribe_request, subscribe_response, typed_value, GetRequest, GetResponse,
    Notification, SubscribeRequest, SubscribeResponse, TypedValue, Update,
};
use rdma_fabric_exporter::switch::gnmi::{
    fetch_once, parse_path, GnmiTarget, GnmiUpdate, GnmiValue,
};
use rdma_fabric_exporter::switch::snmp::Secret;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Full,
    GetOnly,
    Silent,
}

#[derive(Clone)]
struct Target {
    behaviour: Behaviour,
    /// Credentials the target saw, to prove they were sent.
    seen_user: Arc<Mutex<Option<(String, String)>>>,
}

/// The answer for one requested path, as a SONiC or OpenConfig target would give it.
fn notification_for(path: &proto::Path) -> Notification {
    let value = if path.target == "COUNTERS_DB" {
        // SONiC: a table as a JSON_IETF document whose numbers are strings.
        typed_value::Value::JsonIetfVal(
            br#"{"SAI_PORT_STAT_PFC_3_RX_PKTS":"12345","SAI_PORT_STAT_PFC_3_TX_PKTS":"678"}"#
                .to_vec(),
        )
    } else {
        typed_value::Value::UintVal(9_876_543_210)
    };
    Notification {
        timestamp: 1,
        prefix: None,
        update: vec![Update {
            path: Some(path.clone()),
            val: Some(TypedValue { value: Some(value) }),
            duplicates: 0,
        }],
        delete: vec![],
        atomic: false,
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<SubscribeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GNmi for Target {
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let notification = request
            .into_inner()
            .path
            .iter()
            .map(notification_for)
            .collect();
        Ok(Response::new(GetResponse { notification }))
    }

    type SubscribeStream = Answers;

    async fn subscribe(
        &self,
        request: Request<Streaming<SubscribeRequest>>,
    ) -> Result<Response<Answers>, Status> {
        let metadata = request.metadata();
        let text = |key| {
            metadata
                .get(key)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        *self.seen_user.lock().unwrap() = Some((text("username"), text("password")));
        match self.behaviour {
            Behaviour::GetOnly => return Err(Status::unimplemented("Subscribe")),
            Behaviour::Silent => {
                // Accept the stream, then never answer.
                let pending = tokio_stream::pending::<Result<SubscribeResponse, Status>>();
                return Ok(Response::new(Box::pin(pending)));
            }
            Behaviour::Full => {}
        }
        let mut requests = request.into_inner();
        let first = requests
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("no request"))??;
        let Some(subscribe_request::Request::Subscribe(list)) = first.request else {
            return Err(Status::invalid_argument("expected a SubscriptionList"));
        };
        assert_eq!(
            list.mode,
            proto::subscription_list::Mode::Once as i32,
            "ONCE expected"
        );
        let mut answers: Vec<Result<SubscribeResponse, Status>> = list
            .subscription
            .iter()
            .filter_map(|s| s.path.as_ref())
            .map(|path| {
                Ok(SubscribeResponse {
                    response: Some(subscribe_response::Response::Update(notification_for(path))),
                })
            })
            .collect();
        answers.push(Ok(SubscribeResponse {
            response: Some(subscribe_response::Response::SyncResponse(true)),
        }));
        Ok(Response::new(Box::pin(tokio_stream::iter(answers))))
    }
}

async fn serve(behaviour: Behaviour) -> (String, Target) {
    let target = Target {
        behaviour,
        seen_user: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let service = GNmiServer::new(target.clone());
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
    });
    (address, target)
}

fn client(address: String) -> GnmiTarget {
    GnmiTarget {
        address,
        timeout: Duration::from_millis(800),
        credentials: Some(("monitor".into(), Secret::new("gnmi-pass-1"))),
    }
}

fn paths() -> Vec<proto::Path> {
    vec![
        parse_path("COUNTERS_DB:COUNTERS/Ethernet0").unwrap(),
        parse_path("/interfaces/interface[name=Ethernet0]/state/counters/in-octets").unwrap(),
    ]
}

fn expected() -> Vec<GnmiUpdate> {
    vec![
        GnmiUpdate {
            path: "/COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS".into(),
            value: GnmiValue::Text("12345".into()),
        },
        GnmiUpdate {
            path: "/COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_TX_PKTS".into(),
            value: GnmiValue::Text("678".into()),
        },
        GnmiUpdate {
            path: "/interfaces/interface[name=Ethernet0]/state/counters/in-octets".into(),
            value: GnmiValue::Uint(9_876_543_210),
        },
    ]
}

#[tokio::test]
async fn subscribe_once_reads_sonic_and_openconfig_paths() {
    let (address, target) = serve(Behaviour::Full).await;
    let mut updates = fetch_once(&client(address), &paths()).await.expect("fetch");
    updates.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(updates, expected());
    assert_eq!(
        updates[0].value.as_counter(),
        Some(12_345),
        "SONiC numbers arrive as strings"
    );
    assert_eq!(
        *target.seen_user.lock().unwrap(),
        Some(("monitor".into(), "gnmi-pass-1".into()))
    );
}

#[tokio::test]
async fn get_is_the_fallback_when_subscribe_is_unimplemented() {
    let (address, _) = serve(Behaviour::GetOnly).await;
    let mut updates = fetch_once(&client(address), &paths())
        .await
        .expect("fetch via Get");
    updates.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(updates, expected());
}

#[tokio::test]
async fn a_silent_or_absent_target_fails_within_the_timeout() {
    let (address, _) = serve(Behaviour::Silent).await;
    let started = Instant::now();
    let err = fetch_once(&client(address), &paths()).await.unwrap_err();
    assert_eq!(err.reason, "timeout", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!err.to_string().contains("gnmi-pass-1"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let err = fetch_once(&client(closed), &paths()).await.unwrap_err();
    assert!(matches!(err.reason, "network" | "timeout"), "{err}");
}
