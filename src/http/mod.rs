//! The HTTP side: hyper 1 over tokio, HTTP/1.1 only (what scrapers speak).
//!
//! The accept loop spawns one task per connection. Resource bounds, each
//! against a way a client can hurt the process:
//! - a slow or silent client: `--web.read-header-timeout` closes the
//!   connection (also idle keep-alive connections);
//! - oversized headers: hyper answers 431 beyond `MAX_HEADER_BYTES`,
//!   malformed requests get 400, and the connection ends;
//! - many concurrent scrapes: `--web.max-requests`, 503 beyond it;
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
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

pub use body::Body;
pub use routes::Router;

use crate::exposition::Exposition;

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

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub read_header_timeout: Duration,
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

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = Connection {
                        builder: builder.clone(),
                        router: router.clone(),
                        shutdown: shutdown.clone(),
                        _alive: alive_tx.clone(),
                    };
                    tokio::spawn(conn.run(stream, peer));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
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
    shutdown: watch::Receiver<()>,
    _alive: mpsc::Sender<()>,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let router = self.router.clone();
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let resp = router.route(req.method(), req.uri().path(), req.headers());
            async move { Ok::<_, Infallible>(resp) }
        });
        let conn = self.builder.serve_connection(TokioIo::new(stream), service);
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
