//! `/probe-ping`: an operator's on-demand ping through the running agent
//! (`rdma-fabric-exporter ping`). The probing loop sends the probes ([`crate::probe::ping`]);
//! this front parses the ask, maps refusals to statuses and answers the report as JSON.

use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::probe::collector::ProbeCollector;
use crate::probe::ping::{PingError, Query};

pub use crate::probe::ping::PATH;

/// Runs one ask on `probe` (`None`: probing is off here) and answers its report.
pub async fn answer(probe: Option<Arc<ProbeCollector>>, params: &[(String, String)]) -> Response {
    let report = async {
        let query = Query::from_params(params)?;
        let probe = probe.ok_or(PingError::Off)?;
        probe.ping(&query)?.report().await
    };
    match report.await {
        Ok(report) => match serde_json::to_string(&report) {
            Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        },
        Err(e) => {
            let status = match e {
                PingError::BadRequest(_) => StatusCode::BAD_REQUEST,
                PingError::UnknownTarget(_) | PingError::Off => StatusCode::NOT_FOUND,
                PingError::Unlisted(_) => StatusCode::FORBIDDEN,
                PingError::Busy => {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "1")],
                        format!("{e}\n"),
                    )
                        .into_response()
                }
                PingError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            };
            (status, format!("{e}\n")).into_response()
        }
    }
}
