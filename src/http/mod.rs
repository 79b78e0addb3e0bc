//! The HTTP side: hyper 1 over tokio, HTTP/1.1 only (what scrapers speak).
//!
//! The accept loop spawns one task per connection. Resource bounds, each
//! against a way a client can hurt the process:
//! - a slow or silent client: `--web.read-header-timeout` closes the
//!   connection (also idle keep-alive connections);
//! - oversized headers: hyper answers 431 beyond `MAX_HEADER_BYTES`,
//!   malformed requests get 400, and the connection ends;
//! - many concurrent scrapes: `--web.max-requests`, 503 beyond it;
//! - a connection flood: `--web.max-connections`, a canned 503 beyond it,
//!   so memory and file descriptors stay bounded;
//! - shutdown: stop accepting, let in-flight requests finish (bounded by
//!   `DRAIN_TIMEOUT`), close idle connections.

mod body;
pub mod negotiate;
mod routes;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

pub use body::Body;
pub use routes::Router;

use crate::exposition::Exposition;
use crate::web_config::{self, WebConfigWatcher};

/// What a scrape is answered with: the latest exposition, and whether the
/// exporter is ready (NVML up and every GPU sampled once).
#[derive(Debug)]
pub struct Published {
    pub exposition: Arc<Exposition>,
    pub ready: bool,
}

/// Request line plus headers a client may send. Large enough for any
/// scraper (Prometheus sends well under 1 KiB), small enough that a
/// thousand hostile connections cost little.
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long shutdown waits for in-flight requests. A scrape is a memory
/// copy, so anything still running after this is a stalled client.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after an accept error such as EMFILE, so a full file table does not
/// turn the accept loop into a busy loop.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct ServerConfig {
    pub read_header_timeout: Duration,
    /// `--web.config.file`: TLS, basic auth, headers. Also bounds the TLS
    /// handshake by `read_header_timeout`.
    pub web: Option<Arc<WebConfigWatcher>>,
    /// `--web.health-without-auth`.
    pub health_without_auth: bool,
    /// `--web.max-connections`; 0: no limit.
    pub max_connections: usize,
}

/// Serves until `shutdown` changes (or its sender is dropped), then drains.
pub async fn serve(
    listener: TcpListener,
    router: Arc<Router>,
    cfg: ServerConfig,
    mut shutdown: watch::Receiver<()>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.read_header_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let builder = Arc::new(builder);
    // Each connection task holds a sender; when all are dropped, `recv`
    // returns None and every connection has finished.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let conn_limit =
        (cfg.max_connections > 0).then(|| Arc::new(Semaphore::new(cfg.max_connections)));
    let mut accept_errors = LogOnce::default();
    let mut over_limit = LogOnce::default();

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    accept_errors.reset();
                    let permit = match &conn_limit {
                        None => None,
                        Some(limit) => match limit.clone().try_acquire_owned() {
                            Ok(p) => {
                                over_limit.reset();
                                Some(p)
                            }
                            Err(_) => {
                                if over_limit.first() {
                                    tracing::warn!(
                                        max_connections = cfg.max_connections,
                                        "connection limit reached; answering 503 until connections close"
                                    );
                                }
                                tokio::spawn(reject(stream));
                                continue;
                            }
                        },
                    };
                    let _ = stream.set_nodelay(true);
                    let conn = Connection {
                        builder: builder.clone(),
                        router: router.clone(),
                        web: cfg.web.clone(),
                        health_without_auth: cfg.health_without_auth,
                        handshake_timeout: cfg.read_header_timeout,
                        shutdown: shutdown.clone(),
                        _alive: alive_tx.clone(),
                        _permit: permit,
                    };
                    tokio::spawn(conn.run(stream, peer));
                }
                Err(e) => {
                    // EMFILE and friends repeat until connections close:
                    // say it once per streak, not ten times a second.
                    if accept_errors.first() {
                        tracing::warn!(error = %e, "accepting connections fails; retrying");
                    }
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    drop(alive_tx);
    tracing::info!("stopped accepting connections; finishing in-flight requests");
    if tokio::time::timeout(DRAIN_TIMEOUT, alive_rx.recv())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?DRAIN_TIMEOUT,
            "connections still open after the drain timeout; closing them"
        );
    }
}

struct Connection {
    builder: Arc<http1::Builder>,
    router: Arc<Router>,
    web: Option<Arc<WebConfigWatcher>>,
    health_without_auth: bool,
    handshake_timeout: Duration,
    shutdown: watch::Receiver<()>,
    _alive: mpsc::Sender<()>,
    /// Held for the connection's life: `--web.max-connections`.
    _permit: Option<OwnedSemaphorePermit>,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        // The acceptor is taken per connection so a rotated certificate
        // applies from the next handshake on.
        match self.web.as_ref().and_then(|w| w.tls_acceptor()) {
            None => self.serve(TokioIo::new(stream), peer).await,
            Some(acceptor) => {
                let handshake =
                    web_config::http::handshake(acceptor, stream, self.handshake_timeout, peer);
                let tls = tokio::select! {
                    tls = handshake => tls,
                    _ = self.shutdown.changed() => None,
                };
                if let Some(tls) = tls {
                    self.serve(TokioIo::new(tls), peer).await;
                }
            }
        }
    }

    async fn serve<I>(mut self, io: I, peer: SocketAddr)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let web = self.web.clone();
        let health_without_auth = self.health_without_auth;
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let router = router.clone();
            let web = web.clone();
            async move {
                let Some(web) = web else {
                    return Ok::<_, Infallible>(router.route(
                        req.method(),
                        req.uri().path(),
                        req.headers(),
                    ));
                };
                let path = req.uri().path();
                let mut resp =
                    match web_config::http::check(&web, path, req.headers(), health_without_auth)
                        .await
                    {
                        Ok(()) => router.route(req.method(), path, req.headers()),
                        Err(rejection) => rejected(rejection),
                    };
                for (name, value) in web.response_headers() {
                    resp.headers_mut().insert(name, value);
                }
                Ok(resp)
            }
        });
        let conn = self.builder.serve_connection(io, service);
        tokio::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            _ = self.shutdown.changed() => {
                // Finishes the request in progress, if any, then closes.
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            log_connection_error(&e, peer);
        }
    }
}

fn rejected(rejection: web_config::http::Rejection) -> hyper::Response<Body> {
    let status = rejection.status();
    let text = format!("{}\n", status.canonical_reason().unwrap_or("Rejected"));
    let len = text.len();
    let mut r = hyper::Response::new(Body::new(text));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        hyper::header::CONTENT_LENGTH,
        hyper::header::HeaderValue::from(len),
    );
    for (name, value) in rejection.headers() {
        h.insert(name, value);
    }
    r
}

/// How long a rejected connection gets to take its 503.
const REJECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers a connection over `--web.max-connections` with a canned 503
/// without parsing anything, then closes it. The request is read (a few KiB
/// at most) before closing because closing a socket with unread input sends
/// a reset, which could destroy the 503 before the client reads it.
async fn reject(mut stream: TcpStream) {
    const RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
        Content-Type: text/plain; charset=utf-8\r\nContent-Length: 36\r\n\
        Retry-After: 1\r\nConnection: close\r\n\r\n\
        Too many connections; retry later.\r\n";
    let _ = tokio::time::timeout(REJECT_TIMEOUT, async {
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).await;
        stream.write_all(RESPONSE).await?;
        stream.shutdown().await
    })
    .await;
}

/// Logs the first of a streak of repeated events.
#[derive(Default)]
struct LogOnce(bool);

impl LogOnce {
    fn first(&mut self) -> bool {
        !std::mem::replace(&mut self.0, true)
    }

    fn reset(&mut self) {
        self.0 = false;
    }
}

fn log_connection_error(e: &hyper::Error, peer: SocketAddr) {
    // A client's misbehaviour is its problem, not an operator's: debug.
    let client_side = e.is_timeout()
        || e.is_parse()
        || e.is_parse_too_large()
        || e.is_incomplete_message()
        || e.is_closed()
        || e.is_canceled()
        || source_is_io(e);
    if client_side {
        tracing::debug!(peer = %peer, error = %e, "connection ended");
    } else {
        tracing::warn!(peer = %peer, error = %e, "connection failed");
    }
}

fn source_is_io(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::LogOnce;

    #[test]
    fn log_once_per_streak() {
        let mut l = LogOnce::default();
        assert!(l.first());
        assert!(!l.first());
        assert!(!l.first());
        l.reset();
        assert!(l.first());
    }
}
