//! HTTP front: `/metrics` with content negotiation, `/healthz`, `/probe` (one configured
//! switch), `/ib/switch` (one InfiniBand switch of the last subnet scan), `/probe-address` and
//! `/probe-ping` (the probe collector's), and a landing page.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::metrics::counter::Counter;

use crate::collector::{Collector, Collectors, Scrape, Selection};
use crate::exposition::body::Body;
use crate::exposition::{Families, Format, Value};
use crate::ib::collector::IbFabricCollector;
use crate::ib::detail::DetailError;
use crate::node::storm::StormDetector;
use crate::node::NodeCollector;
use crate::switch::metrics::SwitchCollector;
use crate::switch::poller::Poller;
use crate::web::fabric_json::HostFeed;
use crate::web::probe_gate::{ProbeGate, MAX_PROBE_POLLS};
use crate::web::{fabric_page, negotiate, panic_guard};

/// Used when Prometheus does not send `X-Prometheus-Scrape-Timeout-Seconds`.
const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// A scraper cannot hold a scrape open longer than this, whatever its header says.
const MAX_SCRAPE_TIMEOUT: Duration = Duration::from_secs(300);
/// Headroom left for the response to travel back before Prometheus gives up.
const SCRAPE_TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

pub struct AppState {
    /// The enabled collectors; each scrape runs all of them or those `collect[]` names.
    pub collectors: Arc<Collectors>,
    /// The node walk, for the landing page.
    pub node: Option<Arc<NodeCollector>>,
    /// The PFC storm sampler, for the landing page's verdict (also among `collectors`).
    pub storm: Option<Arc<StormDetector>>,
    /// The landing page's rates: the previous walk it saw (`/api/v1/fabric`).
    pub fabric_rates: Arc<crate::web::fabric_json::RateMemory>,
    pub telemetry_path: String,
    /// Scrapes that walk the node run one at a time; others wait (bounded by their scrape
    /// timeout) and take the result of the walk that finished while they waited.
    pub scrape_lock: Arc<tokio::sync::Mutex<()>>,
    /// Off only to measure what the bound saves (`--debug.no-scrape-coalescing`).
    pub coalesce_scrapes: bool,
    /// The last scrape's result, for scrapes that arrived while it ran (see `metrics`).
    pub last_scrape: Arc<std::sync::Mutex<Option<FinishedScrape>>>,
    /// Scrapes answered with a result finished after they arrived, without a walk of their own.
    pub coalesced_scrapes: Counter,
    /// Configured switches, for `/probe`.
    pub switches: Option<Arc<Poller>>,
    /// `/probe` polls: one per target at a time, a bounded number at once.
    pub probe_gate: Arc<ProbeGate>,
    /// The `ib_fabric` collector (also among `collectors`), for `/ib/switch`.
    pub ib_fabric: Option<Arc<IbFabricCollector>>,
    /// The `probe` collector (also among `collectors`), for `/probe-address`.
    pub probe: Option<Arc<crate::probe::collector::ProbeCollector>>,
}

impl AppState {
    pub fn new(
        collectors: Collectors,
        node: Option<Arc<NodeCollector>>,
        switches: Option<Arc<Poller>>,
        telemetry_path: String,
    ) -> AppState {
        AppState {
            collectors: Arc::new(collectors),
            node,
            storm: None,
            fabric_rates: Arc::default(),
            telemetry_path,
            scrape_lock: Arc::default(),
            coalesce_scrapes: true,
            last_scrape: Arc::default(),
            coalesced_scrapes: Counter::default(),
            switches,
            probe_gate: ProbeGate::new(MAX_PROBE_POLLS),
            ib_fabric: None,
            probe: None,
        }
    }

    /// One scrape's body in `format`: the exporter's own families, then the selected
    /// collectors'.
    fn encode(&self, format: Format, selection: Selection) -> Result<Body, std::fmt::Error> {
        Scrape::new(self.collectors.clone(), selection, true).body(format, &self.own_families())
    }

    /// The exporter's own families, each written on its own in this order (as they were
    /// registered when prometheus-client encoded the scrape: the body keeps their place).
    fn own_families(&self) -> [Families<'static>; 3] {
        let mut coalesced = Families::default();
        coalesced.counter(
            "rdma_exporter_coalesced_scrapes_total",
            "Scrapes of /metrics answered with the result of a scrape that was running when they arrived, instead of a read of their own.",
            [],
            Value::U64(self.coalesced_scrapes.get()),
        );
        let mut panics = Families::default();
        panics.counter(
            "rdma_exporter_http_panics_total",
            "Panics while handling an HTTP request, answered with a 500 instead of the request's answer.",
            [],
            Value::U64(panic_guard::HTTP_PANICS.get()),
        );
        let mut build = Families::default();
        build.info(
            "rdma_exporter_build_info",
            "Build facts of the running rdma-fabric-exporter; value is always 1.",
            [
                ("version", Cow::Borrowed(crate::build::VERSION)),
                ("revision", Cow::Borrowed(crate::build::REVISION)),
                ("rustc_version", Cow::Borrowed(crate::build::RUSTC)),
            ],
        );
        [coalesced, panics, build]
    }
}

/// A scrape's encoded body and when it was finished.
#[derive(Debug, Clone)]
pub struct FinishedScrape {
    pub finished: Instant,
    pub format: Format,
    pub selection: Selection,
    /// Shared, not copied: a coalesced scrape sends the same bytes.
    pub body: Arc<Body>,
}

/// Every route of an exporter: [`routes`] and the landing page.
pub fn router(state: Arc<AppState>) -> Router {
    routes(state.clone()).merge(
        Router::new()
            .route("/", get(landing_page))
            .route(crate::web::fabric_json::PATH, get(fabric_json))
            .with_state(state),
    )
}

/// The metrics, probe and health routes, without a landing page (`demo` brings its own).
pub fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route(&state.telemetry_path, get(metrics))
        .route("/healthz", get(healthz))
        .route("/probe", get(probe))
        .route(IB_SWITCH_PATH, get(ib_switch))
        .route(crate::probe::peers::PATH, get(probe_address))
        .route(crate::web::probe_ping::PATH, get(probe_ping))
        .route(
            fabric_page::SCRIPT_PATH,
            get(|| async {
                fabric_page::asset("text/javascript; charset=utf-8", fabric_page::SCRIPT)
            }),
        )
        .route(
            fabric_page::STYLE_PATH,
            get(|| async { fabric_page::asset("text/css; charset=utf-8", fabric_page::STYLE) }),
        )
        .with_state(state)
}

/// `/healthz`: OK, unless a node walk is wedged past every deadline (then scrapes cannot be
/// served, and a restart is the remedy). A hung device is not unhealthy: it is cut off and
/// reported in `rdma_exporter_read_errors_total{reason="timeout"}`.
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.node.as_deref().and_then(NodeCollector::walk_overdue) {
        Some(running) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the node walk has been running for {running:.0?}\n"),
        )
            .into_response(),
        None => "OK\n".into_response(),
    }
}

/// Binds `host:port`, `:port` (all interfaces) or `[v6]:port`.
pub async fn bind(listen_address: &str) -> std::io::Result<tokio::net::TcpListener> {
    if let Some(port) = listen_address.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid port in listen address {listen_address:?}"),
            )
        })?;
        // Dual-stack first, IPv4 only where IPv6 is disabled.
        return match tokio::net::TcpListener::bind(SocketAddr::from(([0u16; 8], port))).await {
            Ok(listener) => Ok(listener),
            Err(_) => tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await,
        };
    }
    tokio::net::TcpListener::bind(listen_address).await
}

fn scrape_timeout(headers: &HeaderMap) -> Duration {
    headers
        .get("x-prometheus-scrape-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
        // `try_`: a huge, negative or NaN header is ignored, never a panic.
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(|d| {
            d.min(MAX_SCRAPE_TIMEOUT)
                .saturating_sub(SCRAPE_TIMEOUT_OFFSET)
        })
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_SCRAPE_TIMEOUT)
}

async fn metrics(
    State(state): State<Arc<AppState>>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    serve_metrics(state, &params, &headers).await
}

/// `/metrics`: every enabled collector, those named by `collect[]` parameters (several may
/// be given; an unknown or disabled name is a 400 that lists the names), or all but those
/// named by `exclude[]` (node_exporter's pair; both at once are a 400). Scrapes that walk
/// the node share walks (see below); the others run at once.
pub async fn serve_metrics(
    state: Arc<AppState>,
    params: &[(String, String)],
    headers: &HeaderMap,
) -> Response {
    let values = |name: &str| -> Vec<&str> {
        params
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    };
    let selection = match state
        .collectors
        .select_by(&values("collect[]"), &values("exclude[]"))
    {
        Ok(selection) => selection,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let format = negotiated_format(headers);
    let timeout = scrape_timeout(headers);
    let arrived = Instant::now();
    let walks = state.collectors.selects(&selection, "sysfs");
    let scrape = async {
        if !state.coalesce_scrapes || !walks {
            let state = state.clone();
            return tokio::task::spawn_blocking(move || {
                Ok(Arc::new(state.encode(format, selection)?))
            })
            .await;
        }
        let guard = state.scrape_lock.clone().lock_owned().await;
        // Scrapes that queued behind a running one take its result: however many scrapers
        // arrive together, the node is read once (bounded CPU, sysfs and firmware load).
        let finished_while_waiting = state
            .last_scrape
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|s| s.finished >= arrived && s.format == format && s.selection == selection)
            .map(|s| s.body.clone());
        if let Some(body) = finished_while_waiting {
            state.coalesced_scrapes.inc();
            return Ok(Ok::<_, std::fmt::Error>(body));
        }
        let state = state.clone();
        // sysfs reads block; keep them off the async workers.
        tokio::task::spawn_blocking(move || {
            let _guard = guard;
            let body = Arc::new(state.encode(format, selection.clone())?);
            *state.last_scrape.lock().unwrap_or_else(|p| p.into_inner()) = Some(FinishedScrape {
                finished: Instant::now(),
                format,
                selection,
                body: body.clone(),
            });
            Ok(body)
        })
        .await
    };
    match tokio::time::timeout(timeout, scrape).await {
        Ok(Ok(Ok(body))) => exposition(format, body, headers).await,
        Ok(Ok(Err(e))) => {
            tracing::error!("encoding metrics failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            )
                .into_response()
        }
        Ok(Err(e)) => {
            if e.is_panic() {
                panic_guard::record();
            }
            tracing::error!("metrics task failed: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "metrics task failed\n").into_response()
        }
        Err(_) => {
            tracing::warn!(?timeout, "scrape timed out");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("scrape did not finish within {timeout:?}\n"),
            )
                .into_response()
        }
    }
}

/// `/probe?target=NAME`, in the snmp_exporter style: polls that configured switch now (within
/// the scrape timeout) and returns its metrics only. Only configured targets are accepted, so the
/// exporter is no open SNMP proxy.
async fn probe(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(target) = params.get("target") else {
        return (StatusCode::BAD_REQUEST, "missing parameter: target\n").into_response();
    };
    let Some(index) = state.switches.as_ref().and_then(|p| p.index_of(target)) else {
        if let Some(owner) = state.switches.as_ref().and_then(|p| p.owner_of(target)) {
            return (StatusCode::NOT_FOUND, owner).into_response();
        }
        return (
            StatusCode::BAD_REQUEST,
            format!("unknown target {target:?}: /probe only polls switches named in the config\n"),
        )
            .into_response();
    };
    let poller = state.switches.clone().expect("index found in the poller");
    let timeout = scrape_timeout(&headers);
    let polled = state.probe_gate.poll(index, || {
        let poller = poller.clone();
        async move { poller.poll_once(index).await }
    });
    match tokio::time::timeout(timeout, polled).await {
        Ok(Ok(_)) => {}
        Ok(Err(saturated)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!("{saturated}; try again\n"),
            )
                .into_response()
        }
        Err(_) => poller.record_timeout(index, timeout),
    }
    let switch: Arc<dyn Collector> = Arc::new(SwitchCollector {
        poller,
        only: Some(index),
    });
    let scrape = Scrape::new(
        Arc::new(Collectors::new(vec![switch])),
        Selection::All,
        false,
    );
    let format = negotiated_format(&headers);
    match scrape.body(format, &[]) {
        Ok(body) => exposition(format, Arc::new(body), &headers).await,
        Err(e) => {
            tracing::error!("encoding probe metrics failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            )
                .into_response()
        }
    }
}

/// `/probe-address`: where this host's ports answer probes (GID, QPN, Q_Key per port), for its
/// peers' agents, with an `ETag` (304 to a peer that holds it already). A 404 where probing is
/// off.
async fn probe_address(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(collector) = state.probe.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "the probe collector is not enabled here (--collector.probe)\n",
        )
            .into_response();
    };
    let held = headers.get(axum::http::header::IF_NONE_MATCH);
    crate::probe::peers::answer(&collector.published(), held.map(|v| v.as_bytes()))
}

/// `/probe-ping?to=PEER`: N probes now from a local port to a port of the peer set, through the
/// running probe loop (`rdma-fabric-exporter ping`).
async fn probe_ping(
    State(state): State<Arc<AppState>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    crate::web::probe_ping::answer(state.probe.clone(), &params).await
}

/// Where one InfiniBand switch's detail is served.
pub const IB_SWITCH_PATH: &str = "/ib/switch";

/// `/ib/switch?target=GUID|NodeDescription`, in the style of `/probe`: every counter of one
/// switch's ports (traffic included, zeros included, every link's width and speed) from the
/// `ib_fabric` collector's last scan, whatever `errors-only` leaves out of `/metrics`. Nothing
/// is queried: a target the scan did not read is a 404, never a MAD.
async fn ib_switch(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(collector) = state.ib_fabric.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "the ib_fabric collector is not enabled here (--collector.ib_fabric)\n",
        )
            .into_response();
    };
    let Some(target) = params
        .get("target")
        .filter(|t| !t.trim().is_empty())
        .cloned()
    else {
        return (
            StatusCode::BAD_REQUEST,
            "missing parameter: target (a switch's GUID or NodeDescription)\n",
        )
            .into_response();
    };
    let format = negotiated_format(&headers);
    // A copy of up to a few hundred kB, or one switch encoded: off the async workers.
    let built = tokio::task::spawn_blocking(move || {
        let families = collector.switch_detail(&target)?;
        Ok::<_, DetailError>(Body::of_blocks(format, vec![Arc::new(families)]))
    })
    .await;
    match built {
        Ok(Ok(body)) => exposition(format, Arc::new(body), &headers).await,
        Ok(Err(e)) => {
            let status = match e {
                DetailError::NoScan | DetailError::ScanFailed(_) => StatusCode::SERVICE_UNAVAILABLE,
                DetailError::Unknown(..) => StatusCode::NOT_FOUND,
                DetailError::Ambiguous { .. } => StatusCode::BAD_REQUEST,
            };
            (status, format!("{e}\n")).into_response()
        }
        Err(e) => {
            if e.is_panic() {
                panic_guard::record();
            }
            tracing::error!("the switch detail task failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the switch detail task failed\n",
            )
                .into_response()
        }
    }
}

pub fn negotiated_format(headers: &HeaderMap) -> Format {
    negotiate::format(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

/// An encoded exposition as the client asked for it: gzipped when it accepts gzip, and marked
/// as varying by both headers so that no cache hands one client's answer to another.
pub async fn exposition(format: Format, body: Arc<Body>, request: &HeaderMap) -> Response {
    let accept_encoding = request
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let vary = (header::VARY, "Accept, Accept-Encoding");
    let content_type = (header::CONTENT_TYPE, format.content_type());
    if !negotiate::gzip(accept_encoding) {
        if !body.has_blocks() {
            return ([content_type, vary], body.bytes()).into_response();
        }
        // A copy of a large pre-encoded block is still a copy: off the async workers too.
        return match tokio::task::spawn_blocking(move || body.bytes()).await {
            Ok(bytes) => ([content_type, vary], bytes).into_response(),
            Err(e) => {
                if e.is_panic() {
                    panic_guard::record();
                }
                tracing::error!("assembling the body failed: {e}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "assembling the body failed
",
                )
                    .into_response()
            }
        };
    }
    // A few milliseconds for a large node: off the async workers.
    match tokio::task::spawn_blocking(move || body.gzip()).await {
        Ok(gz) => ([content_type, vary, (header::CONTENT_ENCODING, "gzip")], gz).into_response(),
        Err(e) => {
            if e.is_panic() {
                panic_guard::record();
            }
            tracing::error!("gzip failed: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "gzip failed\n").into_response()
        }
    }
}

/// This node (when the node collector runs) and its configured switches, as the page draws them.
async fn fabric_view(state: &AppState) -> crate::web::fabric_json::FabricView {
    let hosts: Vec<HostFeed> = state
        .node
        .iter()
        .map(|node| HostFeed {
            name: crate::host::name(),
            node: node.clone(),
            storm: state.storm.clone(),
            probe: state.probe.clone(),
        })
        .collect();
    crate::web::fabric_json::build(
        "node",
        &hosts,
        state.switches.as_deref(),
        None,
        &state.fabric_rates,
    )
    .await
}

async fn landing_page(State(state): State<Arc<AppState>>) -> Response {
    let view = fabric_view(&state).await;
    fabric_page::response(
        &view,
        &fabric_page::Links {
            telemetry_path: &state.telemetry_path,
            demo_hosts: &[],
        },
    )
}

/// `/api/v1/fabric`: the landing page's data.
async fn fabric_json(State(state): State<Arc<AppState>>) -> Response {
    fabric_page::json_response(&fabric_view(&state).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_timeout_from_prometheus_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(scrape_timeout(&headers), DEFAULT_SCRAPE_TIMEOUT);
        headers.insert("x-prometheus-scrape-timeout-seconds", "15".parse().unwrap());
        assert_eq!(scrape_timeout(&headers), Duration::from_millis(14_500));
        headers.insert(
            "x-prometheus-scrape-timeout-seconds",
            "nonsense".parse().unwrap(),
        );
        assert_eq!(scrape_timeout(&headers), DEFAULT_SCRAPE_TIMEOUT);
        for hostile in ["1e30", "-1", "NaN", "inf", "1e-30", "0"] {
            headers.insert(
                "x-prometheus-scrape-timeout-seconds",
                hostile.parse().unwrap(),
            );
            let timeout = scrape_timeout(&headers);
            assert!(
                timeout <= MAX_SCRAPE_TIMEOUT && !timeout.is_zero(),
                "{hostile}: {timeout:?}"
            );
        }
    }
}
