//! The pieces the HTTP server calls: the TLS handshake of an accepted
//! connection and the per-request checks, in the toolkit's order (rate limit,
//! then basic auth), so the server's own code stays about routing.

use std::sync::Arc;
use std::time::Duration;

use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::auth::Cached;
use super::{AuthDecision, WebConfigWatcher};

/// The path probes use; `--web.health-without-auth` exempts it from auth.
pub const HEALTH_PATH: &str = "/-/healthy";

/// Completes the TLS handshake within `timeout`. A client that fails it
/// (wrong protocol, no or bad client certificate, too slow) only loses its
/// own connection: `None`, logged at debug level.
pub async fn handshake<IO>(
    acceptor: TlsAcceptor,
    stream: IO,
    timeout: Duration,
    peer: std::net::SocketAddr,
) -> Option<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(peer = %peer, ?timeout, "TLS handshake timed out");
            None
        }
    }
}

/// Why a request is answered without reaching the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `rate_limit` exhausted: 429.
    TooManyRequests,
    /// Credentials that need a bcrypt check while the bounded queue of
    /// checks (or this client's share of it) is full: 429 with
    /// `Retry-After`, at once.
    AuthBusy,
    /// Missing or wrong credentials: 401 with `WWW-Authenticate`.
    Unauthorized,
}

impl Rejection {
    /// How the exporter's HTTP metrics count it.
    pub fn refusal(self) -> crate::snapshot::HttpRefusal {
        use crate::snapshot::HttpRefusal;
        match self {
            Rejection::TooManyRequests => HttpRefusal::RateLimited,
            Rejection::AuthBusy => HttpRefusal::AuthQueueFull,
            Rejection::Unauthorized => HttpRefusal::Unauthorized,
        }
    }
}

impl Rejection {
    pub fn status(self) -> StatusCode {
        match self {
            Rejection::TooManyRequests | Rejection::AuthBusy => StatusCode::TOO_MANY_REQUESTS,
            Rejection::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    /// Headers the rejection needs besides the configured ones.
    pub fn headers(self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            Rejection::TooManyRequests => Vec::new(),
            Rejection::AuthBusy => vec![(RETRY_AFTER, HeaderValue::from_static("1"))],
            Rejection::Unauthorized => vec![(
                WWW_AUTHENTICATE,
                HeaderValue::from_static(WWW_AUTHENTICATE_VALUE),
            )],
        }
    }
}

/// `Basic realm="nvml-exporter"`; kept in step with [`AUTH_REALM`] by a test.
pub const WWW_AUTHENTICATE_VALUE: &str = "Basic realm=\"nvml-exporter\"";

/// Rate limit, then basic auth. `health_without_auth` lets `/-/healthy`
/// through without credentials (for probes that cannot send any). `peer` is
/// the client's address, whose share of the bcrypt queue is bounded.
///
/// A login remembered in the success cache is decided here, on the async
/// worker, in microseconds: it never waits behind bcrypt work.
pub async fn check(
    web: &Arc<WebConfigWatcher>,
    path: &str,
    headers: &HeaderMap,
    health_without_auth: bool,
    peer: std::net::IpAddr,
) -> Result<(), Rejection> {
    if !web.allow_request() {
        return Err(Rejection::TooManyRequests);
    }
    if !web.requires_auth() || (health_without_auth && path == HEALTH_PATH) {
        return Ok(());
    }
    let Some(value) = headers.get(AUTHORIZATION).cloned() else {
        tracing::debug!(peer = %peer, path, "basic auth: no credentials; 401");
        return Err(Rejection::Unauthorized);
    };
    // A refused login is the client's business, but an operator chasing a
    // scraper's 401s needs to see whose: the user name, never the password.
    let denied = |value: &HeaderValue| {
        let user = super::auth::claimed_user(value.as_bytes());
        tracing::debug!(
            peer = %peer,
            path,
            user = user.as_deref().unwrap_or("(not Basic auth)"),
            "basic auth: wrong user or password; 401"
        );
        Err(Rejection::Unauthorized)
    };
    match web.check_cached(&value) {
        Cached::Decided(AuthDecision::Allowed) => return Ok(()),
        Cached::Decided(AuthDecision::Denied) => return denied(&value),
        Cached::NeedsBcrypt => {}
    }
    let Some(ticket) = web.admit_bcrypt(peer) else {
        tracing::debug!(peer = %peer, "basic auth: bcrypt queue full; 429");
        return Err(Rejection::AuthBusy);
    };
    // bcrypt takes tens of milliseconds: off the async workers, one at a time.
    let web = web.clone();
    let header = value.clone();
    let decision = ticket
        .run(move || web.authorize(Some(&header)))
        .await
        .unwrap_or(AuthDecision::Denied);
    match decision {
        AuthDecision::Allowed => Ok(()),
        AuthDecision::Denied => denied(&value),
    }
}

#[cfg(test)]
mod tests {
    use super::super::AUTH_REALM;
    use super::*;

    #[test]
    fn realm_header() {
        assert_eq!(
            WWW_AUTHENTICATE_VALUE,
            format!("Basic realm=\"{AUTH_REALM}\"")
        );
        let h = Rejection::Unauthorized.headers();
        assert_eq!(h[0].0, WWW_AUTHENTICATE);
        assert_eq!(Rejection::Unauthorized.status(), 401);
        assert_eq!(Rejection::TooManyRequests.status(), 429);
        assert_eq!(Rejection::AuthBusy.status(), 429);
        assert_eq!(Rejection::AuthBusy.headers()[0].0, RETRY_AFTER);
    }

    #[tokio::test]
    async fn checks_in_toolkit_order() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(
            &path,
            format!(
                "basic_auth_users:\n  u: {}\nrate_limit:\n  interval: 1h\n  burst: 4\n",
                bcrypt::hash("p", 4).unwrap()
            ),
        )
        .unwrap();
        let web = Arc::new(WebConfigWatcher::new_unwatched(&path).unwrap());
        let mut good = HeaderMap::new();
        let b64 = base64::engine::general_purpose::STANDARD.encode("u:p");
        good.insert(AUTHORIZATION, format!("Basic {b64}").parse().unwrap());
        let none = HeaderMap::new();
        let peer: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(check(&web, "/metrics", &good, false, peer).await, Ok(()));
        assert_eq!(
            check(&web, "/metrics", &none, false, peer).await,
            Err(Rejection::Unauthorized)
        );
        assert_eq!(check(&web, HEALTH_PATH, &none, true, peer).await, Ok(()));
        assert_eq!(
            check(&web, HEALTH_PATH, &none, false, peer).await,
            Err(Rejection::Unauthorized)
        );
        assert_eq!(
            check(&web, "/metrics", &good, false, peer).await,
            Err(Rejection::TooManyRequests)
        );
    }
}
