//! The HTTP side: hyper 1 over tokio, HTTP/1.1 only (what scrapers speak).
//!
//! The accept loop spawns one task per connection. Resource bounds, each
//! against a way a client can hurt the process:
//! - a slow or silent client: `--web.read-header-timeout` closes the
//!   connection (also idle keep-alive connections);
//! - a client that asks and never reads: `--web.write-timeout` closes the
//!   connection once its answer has waited that long (see `io`);
//! - oversized headers: hyper answers 431 beyond `MAX_HEADER_BYTES`,
//!   malformed requests get 400, and the connection ends;
//! - many concurrent scrapes: `--web.max-requests`, 503 beyond it;
//! - a connection flood: `--web.max-connections` for the whole process,
//!   every listener together, then `PROBE_RESERVED_CONNECTIONS` more that
//!   serve only `/-/healthy` and `/-/ready` (so a flood never fails a
//!   liveness probe), then a canned 503, so memory and file descriptors
//!   stay bounded however many addresses are listened on;
//! - shutdown: stop accepting, let in-flight requests finish (bounded by
//!   `DRAIN_TIMEOUT`), close idle connections.

mod body;
mod io;
pub mod negotiate;
mod routes;
mod stats;
pub mod systemd;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

pub use body::Body;
pub use routes::Router;
pub use stats::HttpStats;

use crate::exposition::Exposition;
use crate::snapshot::HttpRefusal;
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

/// Connections kept, beyond `--web.max-connections`, for `/-/healthy` and
/// `/-/ready`: a flood that takes every regular slot must not make the
/// kubelet's liveness probe fail and restart the pod. Such a connection
/// answers one request and closes; anything but a probe gets 503.
pub const PROBE_RESERVED_CONNECTIONS: usize = 4;

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
    /// The slots of `max_connections`, shared by every listener the
    /// config is cloned into: the limit is the process's, not a
    /// listener's. Built by [`ConnectionSlots::new`].
    pub slots: Option<ConnectionSlots>,
    /// `--web.write-timeout`: how long an answer may wait for a client that
    /// does not read it.
    pub write_timeout: Duration,
    /// Refusals are counted here (scrapes by the router).
    pub stats: Arc<HttpStats>,
}

/// The process's connection slots: `--web.max-connections` regular ones
/// and `PROBE_RESERVED_CONNECTIONS` for probes beyond them. Cloning shares
/// them.
#[derive(Clone)]
pub struct ConnectionSlots {
    regular: Arc<Semaphore>,
    probes: Arc<Semaphore>,
}

impl ConnectionSlots {
    /// `None` for 0 (no limit).
    pub fn new(max_connections: usize) -> Option<Self> {
        (max_connections > 0).then(|| ConnectionSlots {
            regular: Arc::new(Semaphore::new(max_connections)),
            probes: Arc::new(Semaphore::new(PROBE_RESERVED_CONNECTIONS)),
        })
    }
}

/// Which kind of connection slot a connection holds, until it closes.
enum Slot {
    /// Under `--web.max-connections` (or no limit): serves everything.
    Regular {
        _permit: Option<OwnedSemaphorePermit>,
    },
    /// One of `PROBE_RESERVED_CONNECTIONS`: probes only, one request.
    Probe { _permit: OwnedSemaphorePermit },
}

fn is_probe(path: &str) -> bool {
    matches!(path, "/-/healthy" | "/-/ready")
}

/// What every connection task needs, shared.
struct Shared {
    builder: Arc<http1::Builder>,
    /// For probe slots: one request, then close.
    probe_builder: Arc<http1::Builder>,
    router: Arc<Router>,
    cfg: ServerConfig,
}

impl Shared {
    fn connection(
        &self,
        slot: Slot,
        shutdown: watch::Receiver<()>,
        alive: mpsc::Sender<()>,
    ) -> Connection {
        let probe_only = matches!(slot, Slot::Probe { .. });
        Connection {
            builder: if probe_only {
                self.probe_builder.clone()
            } else {
                self.builder.clone()
            },
            router: self.router.clone(),
            web: self.cfg.web.clone(),
            stats: self.cfg.stats.clone(),
            health_without_auth: self.cfg.health_without_auth,
            handshake_timeout: self.cfg.read_header_timeout,
            write_timeout: self.cfg.write_timeout,
            probe_only,
            shutdown,
            _alive: alive,
            _slot: slot,
        }
    }

    fn tls(&self) -> bool {
        self.cfg
            .web
            .as_ref()
            .is_some_and(|w| w.tls_acceptor().is_some())
    }
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
    let mut probe_builder = builder.clone();
    probe_builder.keep_alive(false);
    let conn_limit = cfg.slots.clone();
    let shared = Arc::new(Shared {
        builder: Arc::new(builder),
        probe_builder: Arc::new(probe_builder),
        router,
        cfg,
    });
    // Each connection task holds a sender; when all are dropped, `recv`
    // returns None and every connection has finished.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let mut accept_errors = LogOnce::default();
    let mut over_limit = LogOnce::default();

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    accept_errors.reset();
                    let _ = stream.set_nodelay(true);
                    let slot = match &conn_limit {
                        None => Slot::Regular { _permit: None },
                        Some(ConnectionSlots { regular, probes }) => match regular.clone().try_acquire_owned() {
                            Ok(p) => {
                                over_limit.reset();
                                Slot::Regular { _permit: Some(p) }
                            }
                            Err(_) => {
                                if over_limit.first() {
                                    tracing::warn!(
                                        max_connections = shared.cfg.max_connections,
                                        kept_for_probes = PROBE_RESERVED_CONNECTIONS,
                                        "connection limit reached; answering /-/healthy and /-/ready on \
                                         connections kept for probes, 503 to the rest, until connections close"
                                    );
                                }
                                tokio::spawn(beyond_the_limit(
                                    shared.clone(),
                                    probes.clone(),
                                    stream,
                                    peer,
                                    shutdown.clone(),
                                    alive_tx.clone(),
                                ));
                                continue;
                            }
                        },
                    };
                    let conn = shared.connection(slot, shutdown.clone(), alive_tx.clone());
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

/// A connection over `--web.max-connections`: served on a probe slot if it
/// asks for a probe and one is free, else refused with the canned 503.
///
/// Over plain HTTP the request line is looked at (without consuming it)
/// first, so only connections that really ask for `/-/healthy` or
/// `/-/ready` take a probe slot, each for the microseconds its answer
/// takes: a flood of other requests, or of silent connections, cannot hold
/// them. Over TLS the request is not visible before the handshake, so the
/// slots go to whoever comes first (and serve probes only).
async fn beyond_the_limit(
    shared: Arc<Shared>,
    probes: Arc<Semaphore>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: watch::Receiver<()>,
    alive: mpsc::Sender<()>,
) {
    let tls = shared.tls();
    if tls || asks_for_probe(&stream).await {
        if let Ok(permit) = probes.try_acquire_owned() {
            let conn = shared.connection(Slot::Probe { _permit: permit }, shutdown, alive);
            conn.run(stream, peer).await;
            return;
        }
    }
    drop(alive);
    shared.cfg.stats.refused(HttpRefusal::ConnectionLimit);
    let headers = shared
        .cfg
        .web
        .as_ref()
        .map(|w| w.response_headers())
        .unwrap_or_default();
    reject(stream, tls, headers).await;
}

/// How long a connection over the limit has to show its request line.
const PEEK_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether the request waiting on `stream` is a GET or HEAD of a probe
/// path, read without consuming it. False for anything else, including a
/// client that has sent no complete request line within `PEEK_TIMEOUT`.
async fn asks_for_probe(stream: &TcpStream) -> bool {
    let deadline = tokio::time::Instant::now() + PEEK_TIMEOUT;
    let mut buf = [0u8; 32];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return false,
        };
        match probe_request_line(&buf[..n]) {
            Some(answer) => return answer,
            // Part of a line: peek returns at once while nothing new has
            // arrived, so wait a little before looking again.
            None if n < buf.len() => {
                if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(10)))
                    .await
                    .is_err()
                {
                    return false;
                }
            }
            None => return false,
        }
    }
}

/// `Some(true)` if `start` opens a GET or HEAD of `/-/healthy` or
/// `/-/ready`, `Some(false)` if it cannot, `None` if it is too short to
/// tell.
fn probe_request_line(start: &[u8]) -> Option<bool> {
    const PROBES: [&[u8]; 4] = [
        b"GET /-/healthy",
        b"GET /-/ready",
        b"HEAD /-/healthy",
        b"HEAD /-/ready",
    ];
    let mut undecided = false;
    for p in PROBES {
        if start.len() > p.len() {
            if start.starts_with(p) && matches!(start[p.len()], b' ' | b'?') {
                return Some(true);
            }
        } else if p.starts_with(start) {
            undecided = true;
        }
    }
    if undecided {
        None
    } else {
        Some(false)
    }
}

struct Connection {
    builder: Arc<http1::Builder>,
    router: Arc<Router>,
    web: Option<Arc<WebConfigWatcher>>,
    stats: Arc<HttpStats>,
    health_without_auth: bool,
    handshake_timeout: Duration,
    write_timeout: Duration,
    /// On a slot kept for probes: anything but a probe gets 503.
    probe_only: bool,
    shutdown: watch::Receiver<()>,
    _alive: mpsc::Sender<()>,
    /// Held for the connection's life: `--web.max-connections`.
    _slot: Slot,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        // The acceptor is taken per connection so a rotated certificate
        // applies from the next handshake on.
        let headers = self
            .web
            .as_ref()
            .map(|w| w.response_headers())
            .unwrap_or_default();
        let write_timeout = self.write_timeout;
        match self.web.as_ref().and_then(|w| w.tls_acceptor()) {
            None => {
                let io = io::ServerIo::new(stream, peer, write_timeout, headers);
                self.serve(TokioIo::new(io), peer).await
            }
            Some(acceptor) => {
                if plain_http_on_tls(&stream, self.handshake_timeout).await {
                    self.stats.refused(HttpRefusal::PlainHttpOnTls);
                    tracing::debug!(peer = %peer, "plain HTTP on the TLS port; 400");
                    answer_plain_http_on_tls(stream, headers).await;
                    return;
                }
                let handshake =
                    web_config::http::handshake(acceptor, stream, self.handshake_timeout, peer);
                let tls = tokio::select! {
                    tls = handshake => tls,
                    _ = self.shutdown.changed() => return,
                };
                match tls {
                    Some(tls) => {
                        let io = io::ServerIo::new(tls, peer, write_timeout, headers);
                        self.serve(TokioIo::new(io), peer).await;
                    }
                    None => self.stats.refused(HttpRefusal::TlsHandshake),
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
        let stats = self.stats.clone();
        let health_without_auth = self.health_without_auth;
        let probe_only = self.probe_only;
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let router = router.clone();
            let web = web.clone();
            let stats = stats.clone();
            async move {
                let path = req.uri().path();
                if probe_only && !is_probe(path) {
                    stats.refused(HttpRefusal::ConnectionLimit);
                    let mut resp = too_many_connections();
                    for (name, value) in web.iter().flat_map(|w| w.response_headers()) {
                        resp.headers_mut().insert(name, value);
                    }
                    return Ok::<_, Infallible>(resp);
                }
                let Some(web) = web else {
                    return Ok::<_, Infallible>(router.route(req.method(), path, req.headers()));
                };
                let check = web_config::http::check(
                    &web,
                    path,
                    req.headers(),
                    health_without_auth,
                    peer.ip(),
                );
                let mut resp = match check.await {
                    Ok(()) => router.route(req.method(), path, req.headers()),
                    Err(rejection) => {
                        stats.refused(rejection.refusal());
                        rejected(rejection)
                    }
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
            if e.is_parse() || e.is_parse_too_large() {
                self.stats.refused(HttpRefusal::MalformedRequest);
            }
            log_connection_error(&e, peer);
        }
    }
}

/// How long a connection to the TLS port has to show its first byte
/// before the handshake is left to time out on its own.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether the client opened a TLS connection with plain HTTP: a TLS
/// client speaks first with a handshake record (byte 0x16), an HTTP client
/// with a method in capitals. Read without consuming anything.
async fn plain_http_on_tls(stream: &TcpStream, timeout: Duration) -> bool {
    let mut first = [0u8; 1];
    let wait = timeout.min(FIRST_BYTE_TIMEOUT);
    matches!(
        tokio::time::timeout(wait, stream.peek(&mut first)).await,
        Ok(Ok(1)) if first[0].is_ascii_uppercase()
    )
}

const PLAIN_HTTP_ON_TLS: &str = "Client sent an HTTP request to an HTTPS server: this port speaks \
     TLS (web config tls_server_config); use https://.\n";

/// Go's answer to plain HTTP on a TLS listener: a plain-text 400 that says
/// what went wrong, instead of TLS alert bytes a browser shows as garbage.
async fn answer_plain_http_on_tls(stream: TcpStream, headers: Vec<(HeaderName, HeaderValue)>) {
    let response = canned("HTTP/1.0 400 Bad Request", "", &headers, PLAIN_HTTP_ON_TLS);
    write_and_drain(stream, &response).await;
}

/// A whole plain-text answer written by hand (for connections no HTTP
/// parser serves): the status line, `extra` header lines (each ending in
/// CRLF), the configured headers, then `body`; the connection closes.
fn canned(
    status_line: &str,
    extra: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: &str,
) -> Vec<u8> {
    let mut response = format!(
        "{status_line}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n{extra}Connection: close\r\n",
        body.len()
    )
    .into_bytes();
    for (name, value) in headers {
        response.extend_from_slice(name.as_str().as_bytes());
        response.extend_from_slice(b": ");
        response.extend_from_slice(value.as_bytes());
        response.extend_from_slice(b"\r\n");
    }
    response.extend_from_slice(b"\r\n");
    response.extend_from_slice(body.as_bytes());
    response
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

const TOO_MANY_CONNECTIONS: &str = "Too many connections; retry later.\n";

/// The answer to a request that arrived on a connection over the limit.
fn too_many_connections() -> hyper::Response<Body> {
    let mut r = hyper::Response::new(Body::new(TOO_MANY_CONNECTIONS));
    *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        hyper::header::CONTENT_LENGTH,
        HeaderValue::from(TOO_MANY_CONNECTIONS.len()),
    );
    h.insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// How long a rejected connection gets to take its 503.
const REJECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What a rejected connection may send before it is closed.
const REJECT_DRAIN_BYTES: usize = 64 * 1024;

/// Answers a connection over every limit with a canned 503 at once, without
/// parsing anything, then closes it. A client that has not sent its request
/// yet gets the answer too. After the answer the client's input is read and
/// dropped (bounded in time and bytes) before closing, because closing a
/// socket with unread input sends a reset, and a reset can destroy the 503
/// before the client reads it.
///
/// Over TLS the connection is closed without an answer: a plain-text 503 is
/// not TLS, and a handshake per refused connection would spend the CPU the
/// limit protects.
async fn reject(stream: TcpStream, tls: bool, headers: Vec<(HeaderName, HeaderValue)>) {
    if tls {
        return;
    }
    let response = canned(
        "HTTP/1.1 503 Service Unavailable",
        "Retry-After: 1\r\n",
        &headers,
        TOO_MANY_CONNECTIONS,
    );
    write_and_drain(stream, &response).await;
}

/// Writes a canned answer and closes, reading and dropping what the client
/// sent (bounded in time and bytes): closing a socket with unread input
/// sends a reset, which can destroy the answer before the client reads it.
async fn write_and_drain(mut stream: TcpStream, response: &[u8]) {
    let _ = tokio::time::timeout(REJECT_TIMEOUT, async {
        stream.write_all(response).await?;
        stream.shutdown().await?;
        let mut buf = [0u8; 4096];
        let mut drained = 0;
        while drained < REJECT_DRAIN_BYTES {
            match stream.read(&mut buf).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
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
        if s.is::<std::io::Error>() {
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
    fn probe_request_lines() {
        use super::probe_request_line as p;
        for yes in [
            &b"GET /-/healthy HTTP/1.1\r\n"[..],
            b"HEAD /-/ready HTTP/1.1",
            b"GET /-/ready?x=1 HTTP/1.1",
        ] {
            assert_eq!(p(yes), Some(true), "{:?}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"GET /metrics HTTP/1.1"[..],
            b"GET /-/healthyx HTTP/1.1",
            b"POST /-/healthy HTTP/1.1",
            b"\x16\x03\x01\x02\x00",
            b"X",
        ] {
            assert_eq!(p(no), Some(false), "{:?}", String::from_utf8_lossy(no));
        }
        for short in [&b"G"[..], b"GET /-/", b"HEAD /-/ready", b"GET /-/healthy"] {
            assert_eq!(p(short), None, "{:?}", String::from_utf8_lossy(short));
        }
    }

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
