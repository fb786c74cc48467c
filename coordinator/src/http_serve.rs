//! Serving the API's connections, plain or TLS, with bounds a client cannot lift: a request head
//! must arrive within the header-read timeout, a connection with no request in flight is closed
//! after the idle timeout (one that never sends a byte included), and at most
//! `max_connections` are open at once.
//!
//! When a new connection arrives at the cap, the oldest connection with no request in flight is
//! closed to make room; only when every open connection has a request in flight is the new one
//! closed instead. So a flood of idle connections (no token needed to open one) can neither
//! exhaust the process's file descriptors nor keep `/healthz` or a real client out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Default time a client has to send a complete request head once it started one.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a connection may stay open with no request in flight.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on open connections: well under the usual 64k descriptor limit, far above what
/// the fleet's clients (CLI, watch streams, scrapers) open.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8192;
/// Pause after a failed `accept` (no descriptor left): an immediate retry would spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Bounds on the API's connections (`--http-header-timeout`, `--http-idle-timeout`,
/// `--http-max-connections`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Requests in flight on one connection; the idle watchdog and the cap's eviction read it.
type InFlight = watch::Sender<usize>;

/// One open connection as the cap sees it.
struct OpenConnection {
    in_flight: Arc<InFlight>,
    close: CancellationToken,
}

/// The open connections, oldest first (ids grow with accept order).
#[derive(Default)]
struct Connections {
    next_id: u64,
    open: BTreeMap<u64, OpenConnection>,
}

impl Connections {
    /// Admits a new connection under `cap`: closes the oldest idle one when full. `None` when
    /// every open connection has a request in flight (the new one is then refused).
    fn admit(&mut self, cap: usize) -> Option<(u64, Arc<InFlight>, CancellationToken)> {
        if self.open.len() >= cap.max(1) {
            let idle = self
                .open
                .iter()
                .find(|(_, open)| *open.in_flight.borrow() == 0)
                .map(|(id, _)| *id)?;
            if let Some(evicted) = self.open.remove(&idle) {
                evicted.close.cancel();
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let in_flight = Arc::new(watch::Sender::new(0));
        let close = CancellationToken::new();
        self.open.insert(
            id,
            OpenConnection {
                in_flight: Arc::clone(&in_flight),
                close: close.clone(),
            },
        );
        Some((id, in_flight, close))
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown`, within
/// `limits`. A failed handshake or connection is logged and ends that connection only.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = Arc::new(Mutex::new(Connections::default()));
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // No descriptor left or a transient network error: keep serving.
                tracing::warn!(error = %error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        // A response goes out in pieces (head, body chunks): with Nagle's algorithm on, a piece
        // waits for the ACK of the one before, which a client delays by up to 40 ms, so each
        // request on a kept-alive connection took ~40 ms (`results --download`: 23 files/s).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %error, "setting TCP_NODELAY failed");
        }
        let admitted = lock(&connections).admit(limits.max_connections);
        let Some((id, in_flight, close)) = admitted else {
            tracing::warn!(%peer, max_connections = limits.max_connections, "connection refused: every open connection has a request in flight");
            drop(stream);
            continue;
        };
        let router = router.clone();
        let acceptor = acceptor.clone();
        let shutdown = shutdown.clone();
        let connections = Arc::clone(&connections);
        tasks.spawn(async move {
            let served = serve_connection(stream, acceptor, router, &limits, &in_flight);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = close.cancelled() => tracing::debug!(%peer, "idle connection closed to stay under the connection cap"),
                _ = idle_watchdog(&in_flight, limits.idle_timeout) => tracing::debug!(%peer, "idle connection closed"),
                result = served => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, error = %error, "connection ended with an error");
                    }
                }
            }
            lock(&connections).open.remove(&id);
        });
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}

fn lock(connections: &Mutex<Connections>) -> std::sync::MutexGuard<'_, Connections> {
    // A panic while holding the lock leaves the table consistent (every change is one call).
    connections
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Returns once the connection had no request in flight for `idle_timeout` in a row.
async fn idle_watchdog(in_flight: &InFlight, idle_timeout: Duration) {
    let mut seen = in_flight.subscribe();
    loop {
        if seen.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        if tokio::time::timeout(idle_timeout, seen.wait_for(|n| *n > 0))
            .await
            .is_err()
        {
            return;
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One connection: the TLS handshake when configured, then HTTP/1.1 or HTTP/2 (with upgrades,
/// for SSE keep-alives), every request counted in `in_flight` until its response body ends.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    router: axum::Router,
    limits: &HttpLimits,
    in_flight: &Arc<InFlight>,
) -> Result<(), BoxError> {
    let counted = Arc::clone(in_flight);
    let service = tower::service_fn(move |request: Request<hyper::body::Incoming>| {
        let guard = RequestInFlight::start(&counted);
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(CountedBody {
                    inner: body,
                    _guard: guard,
                })
            }))
        }
    });
    let service = hyper_util::service::TowerToHyperService::new(service);
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    match acceptor {
        Some(acceptor) => {
            let tls = acceptor.accept(stream).await?;
            builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service)
                .await
        }
        None => {
            builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service)
                .await
        }
    }
}

/// Counts one request in flight from its head until its response body is done or dropped.
struct RequestInFlight(Arc<InFlight>);

impl RequestInFlight {
    fn start(in_flight: &Arc<InFlight>) -> RequestInFlight {
        in_flight.send_modify(|n| *n += 1);
        RequestInFlight(Arc::clone(in_flight))
    }
}

impl Drop for RequestInFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its request counted in flight while it streams (an SSE watch is
/// not idle).
struct CountedBody {
    inner: Body,
    _guard: RequestInFlight,
}

impl http_body::Body for CountedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_oldest_idle_connection_first() {
        let mut table = Connections::default();
        let (_, first, first_close) = table.admit(2).expect("room");
        first.send_modify(|n| *n = 1);
        let (_, _, second_close) = table.admit(2).expect("room");
        let (_, third, _) = table.admit(2).expect("the idle second makes room");
        assert!(!first_close.is_cancelled(), "a busy connection is kept");
        assert!(second_close.is_cancelled(), "the oldest idle one is closed");
        third.send_modify(|n| *n = 1);
        assert!(table.admit(2).is_none(), "every connection busy: refused");
    }
}
