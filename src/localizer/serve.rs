//! The localizer's routes: `/metrics` (the verdicts and its health), `/healthz`, and `/`, the
//! verdicts in words for whoever opens it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::exposition::body::BodyWriter;

use super::Localizer;

pub fn router(localizer: Arc<Localizer>, telemetry_path: &str) -> Router {
    Router::new()
        .route(telemetry_path, get(metrics))
        .route("/healthz", get(|| async { "OK\n" }))
        .route("/", get(page))
        .with_state(localizer)
}

async fn metrics(State(localizer): State<Arc<Localizer>>, headers: HeaderMap) -> Response {
    let format = crate::server::negotiated_format(&headers);
    let families = super::metrics::encode(
        &localizer.state.snapshot(),
        Instant::now(),
        localizer.max_age,
    );
    let mut body = BodyWriter::new(format);
    body.write(&families);
    crate::server::exposition(format, Arc::new(body.finish()), &headers).await
}

/// The verdicts as text: what the alerts read, for a person.
async fn page(State(localizer): State<Arc<Localizer>>) -> Response {
    let s = localizer.state.snapshot();
    let mut out = format!(
        "rdma-fabric-exporter localize: the probe vote of the clusters in {}\n\n",
        localizer.prometheus
    );
    let now = Instant::now();
    match &s.last {
        None => out.push_str("no round has read Prometheus yet: no verdicts\n"),
        Some(last) => {
            let age = now.saturating_duration_since(last.at);
            if !s.up {
                out.push_str("the last round could not read Prometheus\n");
            }
            if age > localizer.max_age {
                let _ = writeln!(out, "verdicts {age:.0?} old: none served");
            } else {
                let _ = writeln!(out, "verdicts {:.0?} old", age);
                for (cluster, c) in &last.clusters {
                    let l = &c.localization;
                    let _ = writeln!(
                        out,
                        "\ncluster {:?}: {} live ports, {} paths, {} failing, background loss {:.2e}",
                        cluster,
                        c.live_ports,
                        l.paths,
                        l.failing.len(),
                        l.background_loss
                    );
                    if l.verdicts.is_empty() {
                        out.push_str("  nothing named\n");
                    }
                    for v in &l.verdicts {
                        let name = [&v.host, &v.device, &v.switch, &v.switch_port]
                            .into_iter()
                            .flatten()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(" ");
                        let _ = writeln!(
                            out,
                            "  {} {}: lost {} of {} probes ({:.1} %), {} failing paths, confidence {:.4}",
                            v.kind.as_str(),
                            name,
                            v.lost,
                            v.sent,
                            v.mean_path_loss.unwrap_or(0.0) * 100.0,
                            v.failing_paths,
                            v.confidence
                        );
                    }
                }
            }
        }
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
