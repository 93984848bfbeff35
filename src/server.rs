//! HTTP front: `/metrics` with content negotiation, `/healthz`, and a landing page.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;

use crate::exposition::Format;
use crate::node::NodeCollector;
use crate::switch::metrics::SwitchCollector;
use crate::switch::poller::Poller;

/// Used when Prometheus does not send `X-Prometheus-Scrape-Timeout-Seconds`.
const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// Headroom left for the response to travel back before Prometheus gives up.
const SCRAPE_TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

pub struct AppState {
    pub registry: Registry,
    pub node: Option<Arc<NodeCollector>>,
    pub telemetry_path: String,
    /// One scrape walks sysfs at a time; others wait (bounded by their scrape timeout).
    pub scrape_lock: Arc<tokio::sync::Mutex<()>>,
    /// Off only to measure what the bound saves (`--debug.no-scrape-coalescing`).
    pub coalesce_scrapes: bool,
    /// The last scrape's result, for scrapes that arrived while it ran (see `metrics`).
    pub last_scrape: Arc<std::sync::Mutex<Option<FinishedScrape>>>,
    /// Scrapes answered with a result finished after they arrived, without a walk of their own.
    pub coalesced_scrapes: prometheus_client::metrics::counter::Counter,
    /// Configured switches, for `/probe`.
    pub switches: Option<Arc<Poller>>,
    /// `demo`: one node agent per simulated host, at `/hosts/<name><telemetry path>`.
    pub hosts: BTreeMap<String, Arc<AppState>>,
}

/// A scrape's encoded body and when it was finished.
#[derive(Debug, Clone)]
pub struct FinishedScrape {
    pub finished: Instant,
    pub format: Format,
    /// Shared, not copied: a coalesced scrape sends the same bytes.
    pub body: axum::body::Bytes,
}

pub fn router(state: Arc<AppState>) -> Router {
    let telemetry_path = state.telemetry_path.clone();
    let mut router = Router::new()
        .route(&telemetry_path, get(metrics))
        .route("/healthz", get(|| async { "OK\n" }))
        .route("/probe", get(probe))
        .route("/", get(landing_page));
    if !state.hosts.is_empty() {
        router = router
            .route(
                &format!("/hosts/{{host}}{telemetry_path}"),
                get(host_metrics),
            )
            .route("/sd", get(service_discovery));
    }
    router.with_state(state)
}

/// One simulated host's node agent (`demo`).
async fn host_metrics(
    State(state): State<Arc<AppState>>,
    Path(host): Path<String>,
    headers: HeaderMap,
) -> Response {
    match state.hosts.get(&host) {
        Some(host_state) => metrics(State(host_state.clone()), headers).await,
        None => (
            StatusCode::NOT_FOUND,
            format!("no simulated host {host:?}\n"),
        )
            .into_response(),
    }
}

/// Prometheus HTTP service discovery of the simulated hosts (`demo`), addressed the way the
/// caller reached us.
async fn service_discovery(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let Some(address) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, "a Host header is needed\n").into_response();
    };
    let hosts: Vec<String> = state.hosts.keys().cloned().collect();
    let body = crate::sim::demo::service_discovery(address, &state.telemetry_path, &hosts);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
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
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s).saturating_sub(SCRAPE_TIMEOUT_OFFSET))
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_SCRAPE_TIMEOUT)
}

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let timeout = scrape_timeout(&headers);
    let arrived = Instant::now();
    let scrape = async {
        if !state.coalesce_scrapes {
            let state = state.clone();
            return tokio::task::spawn_blocking(move || {
                Ok(axum::body::Bytes::from(format.encode(&state.registry)?))
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
            .filter(|s| s.finished >= arrived && s.format == format)
            .map(|s| s.body.clone());
        if let Some(body) = finished_while_waiting {
            state.coalesced_scrapes.inc();
            return Ok(Ok::<_, std::fmt::Error>(body));
        }
        let state = state.clone();
        // sysfs reads block; keep them off the async workers.
        tokio::task::spawn_blocking(move || {
            let _guard = guard;
            let body = axum::body::Bytes::from(format.encode(&state.registry)?);
            *state.last_scrape.lock().unwrap_or_else(|p| p.into_inner()) = Some(FinishedScrape {
                finished: Instant::now(),
                format,
                body: body.clone(),
            });
            Ok(body)
        })
        .await
    };
    match tokio::time::timeout(timeout, scrape).await {
        Ok(Ok(Ok(body))) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Ok(Ok(Err(e))) => {
            tracing::error!("encoding metrics failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            )
                .into_response()
        }
        Ok(Err(e)) => {
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
        return (
            StatusCode::BAD_REQUEST,
            format!("unknown target {target:?}: /probe only polls switches named in the config\n"),
        )
            .into_response();
    };
    let poller = state.switches.clone().expect("index found in the poller");
    let timeout = scrape_timeout(&headers);
    if tokio::time::timeout(timeout, poller.poll_once(index))
        .await
        .is_err()
    {
        poller.record_timeout(index, timeout);
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SwitchCollector {
        poller,
        only: Some(index),
    }));
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    match format.encode(&registry) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
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

async fn landing_page(State(state): State<Arc<AppState>>) -> Response {
    if !state.hosts.is_empty() {
        return Html(crate::landing::render_demo(
            &state.telemetry_path,
            state.hosts.keys().map(String::as_str),
        ))
        .into_response();
    }
    let node = state.node.clone();
    let path = state.telemetry_path.clone();
    let page = tokio::task::spawn_blocking(move || crate::landing::render(&path, node.as_deref()))
        .await
        .unwrap_or_else(|e| format!("landing page failed: {e}"));
    Html(page).into_response()
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
    }
}
