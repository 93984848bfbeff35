//! The last resort: a panic anywhere in a request's handling answers 500 instead of dropping
//! the connection, and is counted (`rdma_exporter_http_panics_total`), so that a bug shows in
//! Prometheus rather than as a scrape that silently failed.

use std::any::Any;
use std::sync::LazyLock;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::counter::Counter;
use tower_http::catch_panic::CatchPanicLayer;

/// Panics answered since the process started: a process-wide figure, like `process_*`.
pub static HTTP_PANICS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Counts a panic caught elsewhere (a scrape's blocking task) the same way.
pub fn record() {
    HTTP_PANICS.inc();
}

fn answer(payload: Box<dyn Any + Send + 'static>) -> Response {
    record();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    tracing::error!("a request handler panicked: {message}");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
}

/// Wrap a whole router with this (outermost, so the auth and header middleware are covered).
pub fn layer() -> CatchPanicLayer<fn(Box<dyn Any + Send + 'static>) -> Response> {
    CatchPanicLayer::custom(answer as fn(Box<dyn Any + Send + 'static>) -> Response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_is_counted() {
        let router = axum::Router::new()
            .route(
                "/boom",
                get(|| async {
                    if true {
                        panic!("test panic");
                    }
                    "unreachable"
                }),
            )
            .route(
                "/boom-later",
                get(|| async {
                    tokio::task::yield_now().await;
                    "not a number"
                        .parse::<u8>()
                        .expect("a later poll panics too")
                        .to_string()
                }),
            )
            .layer(layer());
        for path in ["/boom", "/boom-later"] {
            let before = HTTP_PANICS.get();
            let request = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::INTERNAL_SERVER_ERROR,
                "{path}"
            );
            // Other tests of this binary may panic meanwhile: at least one more.
            assert!(HTTP_PANICS.get() > before, "{path}");
        }
    }
}
