//! The accept loop of every listener: HTTP/1.1 through hyper, with a bound on open connections
//! and on the time a client may take to send its request headers, so that idle or half-open
//! connections can neither exhaust file descriptors nor hold the process at shutdown. With
//! `--web.config.file`: TLS per the config in force when a connection arrives, basic auth and
//! headers on every request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use super::auth::{Authenticator, Verdict};
use super::{panic_guard, LiveWebConfig};

/// A client that opens a connection and says nothing holds no task longer than this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections get this long to finish their requests at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// A request's headers must arrive within this; a silent connection is then closed. hyper starts
/// this clock as soon as it waits for a request, so it is also the idle timeout of a kept-alive
/// connection between requests (a scraper with a longer interval reconnects at each scrape).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once. More are accepted and closed at once, so that the kernel's
/// backlog never fills and file descriptors stay for sysfs (the load bench runs 200 clients).
const MAX_CONNECTIONS: usize = 512;
/// Connections one client (an IPv4 address, an IPv6 /64) may hold of those: a host flooding
/// the port with idle or half-open connections cannot lock out scrapers on other hosts. Half,
/// not less: one Prometheus probing many switches at once holds a connection per probe.
const MAX_CONNECTIONS_PER_CLIENT: usize = MAX_CONNECTIONS / 2;

#[derive(Clone)]
struct Guard {
    live: Arc<LiveWebConfig>,
    auth: Arc<Authenticator>,
}

/// Serves `router` until `shutdown` completes. With a web config, SIGHUP reloads it.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    live: Option<Arc<LiveWebConfig>>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let app = match &live {
        Some(live) => {
            let guard = Guard {
                live: live.clone(),
                auth: Arc::new(Authenticator::default()),
            };
            let mut hangup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
            let reloader = live.clone();
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    reloader.reload();
                }
            });
            router.layer(axum::middleware::from_fn_with_state(guard, protect))
        }
        None => router,
    };
    // Outermost: a panic in auth or header middleware is caught too.
    let app = app.layer(panic_guard::layer());
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let shares = super::client_share::ClientShares::new(MAX_CONNECTIONS_PER_CLIENT);
    let graceful = GracefulShutdown::new();
    // Set at shutdown: TLS handshakes still in progress give up (and their watchers with them)
    // instead of holding the graceful shutdown for the handshake timeout.
    let (stopping, stopping_seen) = tokio::sync::watch::channel(false);
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
        let Some(share) = shares.take(peer.ip()) else {
            tracing::debug!(%peer, "the client holds {MAX_CONNECTIONS_PER_CLIENT} connections; closing a new one");
            drop(stream);
            continue;
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "{MAX_CONNECTIONS} connections open; closing a new one");
            drop(stream);
            continue;
        };
        let tls = live.as_ref().and_then(|live| {
            live.reload_if_changed();
            live.current().tls.clone()
        });
        // The peer's address, for auth's per-client share of bcrypt.
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        ));
        let watcher = graceful.watcher();
        let mut stopping_seen = stopping_seen.clone();
        tokio::spawn(async move {
            let _permit = (permit, share);
            let Some(tls) = tls else {
                return serve_connection(stream, service, watcher).await;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls);
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            tokio::select! {
                handshake = handshake => match handshake {
                    Ok(Ok(stream)) => serve_connection(stream, service, watcher).await,
                    Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                },
                _ = stopping_seen.changed() => {
                    tracing::debug!(%peer, "shutting down: TLS handshake dropped");
                }
            }
        });
    }
    let _ = stopping.send(true);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
    }
    Ok(())
}

async fn serve_connection<IO, S>(io: IO, service: TowerToHyperService<S>, watcher: Watcher)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<Request<hyper::body::Incoming>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
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
    let verdict = match &config.unknown_user {
        None => Verdict::Allowed,
        Some(unknown_user) => {
            let peer = request
                .extensions()
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|ConnectInfo(peer)| peer.ip());
            let header = request.headers().get(header::AUTHORIZATION);
            guard
                .auth
                .check(&config.users, unknown_user, header, peer)
                .await
        }
    };
    let mut response = match verdict {
        Verdict::Allowed => next.run(request).await,
        Verdict::Denied => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic")],
            "Unauthorized\n",
        )
            .into_response(),
        Verdict::Busy => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "Too many authentication attempts at once\n",
        )
            .into_response(),
    };
    for (name, value) in &config.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Every listener has the panic guard: the client gets a 500, not a dropped connection.
    #[tokio::test]
    async fn a_handler_panic_answers_500_through_the_listener() {
        let router = Router::new().route(
            "/boom",
            get(|| async {
                if true {
                    panic!("test panic");
                }
                "unreachable"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, router, None, async {
            let _ = stopped.await;
        }));
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 500"), "{answer:?}");
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }
}
