//! The gNMI client against an in-process tonic gNMI target on loopback: SONiC COUNTERS_DB and
//! OpenConfig paths over Subscribe ONCE, POLL and STREAM, Get as the fallback, credentials,
//! TLS and mutual TLS, and targets that go silent, refuse, or break a stream mid-sample.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::gnmi_target::{serve, Behaviour, FakeSwitch, Pki, Transport};
use rdma_fabric_exporter::switch::gnmi::session::{self, SessionMode};
use rdma_fabric_exporter::switch::gnmi::{fetch_once, GnmiTarget, GnmiTls, GnmiUpdate};
use rdma_fabric_exporter::switch::profile::{Direction, Metric, Profiles, SampleValue};
use rdma_fabric_exporter::switch::secret::Secret;

const USER: (&str, &str) = ("monitor", "gnmi-pass-1");

/// One decoded series: port, metric, priority, queue, direction and value.
type Row = (
    String,
    Metric,
    Option<u8>,
    Option<u32>,
    Option<Direction>,
    SampleValue,
);
type Views = Arc<Mutex<Vec<Vec<GnmiUpdate>>>>;
type SessionEnd =
    tokio::task::JoinHandle<(rdma_fabric_exporter::switch::poll_error::PollError, bool)>;

fn client(address: String) -> GnmiTarget {
    GnmiTarget {
        address,
        timeout: Duration::from_millis(800),
        credentials: Some((USER.0.into(), Secret::new(USER.1))),
        tls: None,
    }
}

fn sonic_paths() -> Vec<rdma_fabric_exporter::switch::gnmi::proto::Path> {
    Profiles::builtin()
        .unwrap()
        .get("sonic")
        .unwrap()
        .gnmi
        .paths()
}

/// The sonic profile's reading of `updates`: (port, metric, priority, queue, direction) -> value.
fn decoded(updates: &[GnmiUpdate]) -> Vec<Row> {
    let profiles = Profiles::builtin().unwrap();
    let decoded = profiles.get("sonic").unwrap().gnmi.decode(updates);
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let names: std::collections::HashMap<u32, String> = decoded
        .samples
        .iter()
        .filter_map(|s| match &s.value {
            SampleValue::Text(t) if s.metric == Metric::IfName => Some((s.key.ifindex, t.clone())),
            _ => None,
        })
        .collect();
    let mut out: Vec<_> = decoded
        .samples
        .iter()
        .filter(|s| s.metric != Metric::IfName)
        .map(|s| {
            (
                names[&s.key.ifindex].clone(),
                s.metric,
                s.key.priority,
                s.key.queue,
                s.key.direction,
                s.value.clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

fn counter(rows: &[Row], port: &str, metric: Metric, direction: Option<Direction>) -> SampleValue {
    rows.iter()
        .find(|r| r.0 == port && r.1 == metric && r.4 == direction)
        .unwrap_or_else(|| panic!("{port} {metric:?} missing from {rows:?}"))
        .5
        .clone()
}

#[tokio::test]
async fn subscribe_once_values_equal_the_switch() {
    let switch = FakeSwitch::new(Some(USER));
    let address = serve(switch.clone(), Transport::Plain).await;
    let updates = fetch_once(&client(address), &sonic_paths())
        .await
        .expect("fetch");
    let rows = decoded(&updates);
    for port in ["Ethernet0", "Ethernet8"] {
        assert_eq!(
            counter(&rows, port, Metric::PfcFrames, Some(Direction::Rx)),
            SampleValue::Counter(switch.port_value(port, "SAI_PORT_STAT_PFC_3_RX_PKTS"))
        );
        assert_eq!(
            counter(&rows, port, Metric::PfcFrames, Some(Direction::Tx)),
            SampleValue::Counter(switch.port_value(port, "SAI_PORT_STAT_PFC_3_TX_PKTS"))
        );
        assert_eq!(
            counter(&rows, port, Metric::PfcPauseSeconds, Some(Direction::Rx)),
            SampleValue::Seconds(
                switch.port_value(port, "SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US") as f64 / 1e6
            )
        );
        assert_eq!(
            counter(&rows, port, Metric::InOctets, None),
            SampleValue::Counter(switch.port_value(port, "SAI_PORT_STAT_IF_IN_OCTETS"))
        );
    }
    let ecn = rows
        .iter()
        .find(|r| r.0 == "Ethernet8" && r.1 == Metric::QueueEcnMarkedPackets)
        .unwrap();
    assert_eq!((ecn.3, &ecn.5), (Some(3), &SampleValue::Counter(5033)));
    assert_eq!(switch.modes.lock().unwrap().as_slice(), [1], "ONCE");
    assert_eq!(*switch.capabilities_calls.lock().unwrap(), 1);
}

#[tokio::test]
async fn get_is_the_fallback_when_subscribe_is_unimplemented() {
    let switch = FakeSwitch::new(Some(USER));
    switch.set(Behaviour::GetOnly);
    let address = serve(switch.clone(), Transport::Plain).await;
    let updates = fetch_once(&client(address), &sonic_paths())
        .await
        .expect("Get");
    let rows = decoded(&updates);
    assert_eq!(
        counter(&rows, "Ethernet0", Metric::PfcFrames, Some(Direction::Rx)),
        SampleValue::Counter(1011)
    );
}

#[tokio::test]
async fn openconfig_typed_leaves_under_a_prefix() {
    let switch = FakeSwitch::new(None);
    let address = serve(switch.clone(), Transport::Plain).await;
    let profiles = Profiles::builtin().unwrap();
    let openconfig = &profiles.get("openconfig").unwrap().gnmi;
    let mut target = client(address);
    target.credentials = None;
    let updates = fetch_once(&target, &openconfig.paths()).await.unwrap();
    let decoded = openconfig.decode(&updates);
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let octets: Vec<u64> = decoded
        .samples
        .iter()
        .filter_map(|s| match s.value {
            SampleValue::Counter(v) if s.metric == Metric::InOctets => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(octets, [1_000_000_000, 5_000_000_000]);
    assert!(decoded
        .samples
        .iter()
        .any(|s| s.metric == Metric::OperStatus && s.value == SampleValue::Gauge(1)));
}

#[tokio::test]
async fn wrong_password_silent_and_absent_targets_fail_within_the_timeout() {
    let switch = FakeSwitch::new(Some(USER));
    let address = serve(switch.clone(), Transport::Plain).await;
    let mut wrong = client(address.clone());
    wrong.credentials = Some((USER.0.into(), Secret::new("guess")));
    let err = fetch_once(&wrong, &sonic_paths()).await.unwrap_err();
    assert_eq!(err.reason.as_label(), "auth", "{err}");
    assert!(!err.to_string().contains("guess"));

    switch.set(Behaviour::Silent);
    let started = Instant::now();
    let err = fetch_once(&client(address), &sonic_paths())
        .await
        .unwrap_err();
    assert_eq!(err.reason.as_label(), "timeout", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!err.to_string().contains(USER.1));

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let err = fetch_once(&client(closed), &sonic_paths())
        .await
        .unwrap_err();
    assert!(
        matches!(err.reason.as_label(), "network" | "timeout"),
        "{err}"
    );
}

/// A fake switch on loopback with a session to it running in the background.
async fn session_on_fake_switch(
    mode: SessionMode,
    interval: Duration,
) -> (FakeSwitch, Views, SessionEnd) {
    let switch = FakeSwitch::new(Some(USER));
    let address = serve(switch.clone(), Transport::Plain).await;
    let (views, session) = spawn_session(client(address), mode, interval);
    (switch, views, session)
}

/// Runs a session in the background, collecting its views; returns them and how it ended.
fn spawn_session(target: GnmiTarget, mode: SessionMode, interval: Duration) -> (Views, SessionEnd) {
    let views: Views = Arc::default();
    let sink = views.clone();
    let handle = tokio::spawn(async move {
        session::run(&target, &sonic_paths(), mode, interval, move |view, _| {
            sink.lock().unwrap().push(view)
        })
        .await
    });
    (views, handle)
}

async fn wait_for_views(views: &Mutex<Vec<Vec<GnmiUpdate>>>, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while views.lock().unwrap().len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} views",
            views.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn stream_sample_delivers_fresh_values_each_interval() {
    let (switch, views, session) =
        session_on_fake_switch(SessionMode::Stream, Duration::from_millis(200)).await;
    wait_for_views(&views, 1).await;
    switch.bump("Ethernet0", "SAI_PORT_STAT_PFC_3_RX_PKTS", 500);
    wait_for_views(&views, 4).await;
    let last = views.lock().unwrap().last().unwrap().clone();
    assert_eq!(
        counter(
            &decoded(&last),
            "Ethernet0",
            Metric::PfcFrames,
            Some(Direction::Rx)
        ),
        SampleValue::Counter(1511)
    );
    assert_eq!(
        switch.modes.lock().unwrap().as_slice(),
        [0],
        "one STREAM subscription"
    );
    session.abort();
}

#[tokio::test]
async fn poll_mode_asks_on_the_open_stream() {
    let (switch, views, session) =
        session_on_fake_switch(SessionMode::Poll, Duration::from_millis(150)).await;
    wait_for_views(&views, 3).await;
    assert_eq!(
        switch.modes.lock().unwrap().as_slice(),
        [2],
        "one POLL subscription"
    );
    assert!(*switch.polls.lock().unwrap() >= 2);
    session.abort();
}

#[tokio::test]
async fn a_stream_broken_mid_sample_ends_the_session_and_delivers_no_partial_view() {
    let (switch, views, session) =
        session_on_fake_switch(SessionMode::Stream, Duration::from_millis(200)).await;
    wait_for_views(&views, 1).await;
    switch.set(Behaviour::CloseMidSample);
    let (error, delivered) = tokio::time::timeout(Duration::from_secs(5), session)
        .await
        .expect("the session ends")
        .unwrap();
    assert!(delivered);
    assert_eq!(error.reason.as_label(), "network", "{error}");
    for view in views.lock().unwrap().iter() {
        let rows = decoded(view);
        assert!(
            rows.iter().any(|r| r.0 == "Ethernet8"),
            "a view lacks the second port"
        );
        assert!(rows.iter().any(|r| r.1 == Metric::QueueEcnMarkedPackets));
    }
}

#[tokio::test]
async fn a_silent_stream_is_declared_stalled() {
    let interval = Duration::from_millis(200);
    let (switch, views, session) = session_on_fake_switch(SessionMode::Stream, interval).await;
    wait_for_views(&views, 1).await;
    switch.set(Behaviour::Silent);
    let started = Instant::now();
    let (error, _) = tokio::time::timeout(Duration::from_secs(5), session)
        .await
        .expect("the session ends")
        .unwrap();
    assert_eq!(error.reason.as_label(), "stalled", "{error}");
    // Two intervals plus the timeout, give or take a tick.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

fn tls_client(address: String, tls: GnmiTls) -> GnmiTarget {
    let port = address.rsplit_once(':').unwrap().1;
    GnmiTarget {
        address: format!("localhost:{port}"),
        tls: Some(tls),
        ..client(address)
    }
}

#[tokio::test]
async fn tls_verifies_the_switch_and_mutual_tls_presents_a_client_certificate() {
    let pki = Pki::new();
    let switch = FakeSwitch::new(Some(USER));
    let address = serve(switch.clone(), Transport::Tls(&pki)).await;
    let trusted = GnmiTls {
        ca_file: Some(pki.path("ca.pem")),
        ..GnmiTls::default()
    };
    let updates = fetch_once(
        &tls_client(address.clone(), trusted.clone()),
        &sonic_paths(),
    )
    .await
    .expect("TLS with the right CA");
    assert!(!updates.is_empty());
    let untrusted = GnmiTls {
        ca_file: Some(pki.path("other-ca.pem")),
        ..GnmiTls::default()
    };
    let err = fetch_once(&tls_client(address.clone(), untrusted), &sonic_paths())
        .await
        .unwrap_err();
    assert_eq!(err.reason.as_label(), "tls", "{err}");
    let missing = GnmiTls {
        ca_file: Some(pki.path("nope.pem")),
        ..GnmiTls::default()
    };
    let err = fetch_once(&tls_client(address, missing), &sonic_paths())
        .await
        .unwrap_err();
    assert!(
        err.reason.as_label() == "tls" && err.detail.contains("nope.pem"),
        "{err}"
    );

    let mutual = serve(switch.clone(), Transport::MutualTls(&pki)).await;
    let err = fetch_once(&tls_client(mutual.clone(), trusted.clone()), &sonic_paths())
        .await
        .unwrap_err();
    assert!(
        matches!(err.reason.as_label(), "tls" | "network" | "grpc_error"),
        "{err}"
    );
    let with_cert = GnmiTls {
        client_cert: Some((pki.path("client.pem"), pki.path("client.key"))),
        ..trusted
    };
    fetch_once(&tls_client(mutual, with_cert), &sonic_paths())
        .await
        .expect("mutual TLS with a client certificate");
}

#[tokio::test]
async fn capabilities_choose_the_encoding() {
    use rdma_fabric_exporter::switch::gnmi::proto::Encoding;
    let switch = FakeSwitch::new(Some(USER));
    let address = serve(switch.clone(), Transport::Plain).await;
    // A target that offers PROTO only is asked for PROTO; one that offers only ASCII is
    // refused with a reason rather than misread.
    *switch.offered_encodings.lock().unwrap() = vec![Encoding::Proto as i32];
    fetch_once(&client(address.clone()), &sonic_paths())
        .await
        .unwrap();
    *switch.offered_encodings.lock().unwrap() = vec![Encoding::Ascii as i32];
    let err = fetch_once(&client(address), &sonic_paths())
        .await
        .unwrap_err();
    assert_eq!(err.reason.as_label(), "unsupported_encoding", "{err}");
    assert_eq!(
        switch.requested_encodings.lock().unwrap().as_slice(),
        [Encoding::Proto as i32]
    );
}
