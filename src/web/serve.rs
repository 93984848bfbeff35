//! The accept loop used with `--web.config.file`: TLS per the config in force when a connection
//! arrives, then HTTP/1.1 through hyper, with basic auth and headers on every request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use super::auth::Authenticator;
use super::LiveWebConfig;

/// A client that opens a connection and says nothing holds no task longer than this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections get this long to finish their requests at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Guard {
    live: Arc<LiveWebConfig>,
    auth: Arc<Authenticator>,
}

/// Serves `router` until `shutdown` completes; SIGHUP reloads the web config.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    live: Arc<LiveWebConfig>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let guard = Guard {
        live: live.clone(),
        auth: Arc::new(Authenticator::default()),
    };
    let app = router.layer(axum::middleware::from_fn_with_state(guard, protect));
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let reloader = live.clone();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            reloader.reload();
        }
    });
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        live.reload_if_changed();
        let config = live.current();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Some(tls) = &config.tls else {
                return serve_connection(stream, service, watcher).await;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(stream, service, watcher).await,
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
    }
    Ok(())
}

async fn serve_connection<IO>(io: IO, service: TowerToHyperService<Router>, watcher: Watcher)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!("HTTP connection ended: {e}");
    }
}

/// Basic auth (when users are configured) and the configured headers, on every path.
async fn protect(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    // Also here: kept-alive connections (Prometheus keeps its own) would never see a change.
    guard.live.reload_if_changed();
    let config = guard.live.current();
    let allowed = config.users.is_empty()
        || guard
            .auth
            .check(&config.users, request.headers().get(header::AUTHORIZATION))
            .await;
    let mut response = if allowed {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic")],
            "Unauthorized\n",
        )
            .into_response()
    };
    for (name, value) in &config.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}
