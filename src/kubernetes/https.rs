//! A small HTTPS client for the two JSON reads pod attribution makes
//! beside the kubelet's gRPC socket: the kubelet's authenticated `/pods`
//! and the API server's lists (ResourceSlices, pods).
//!
//! As a pod talks to either: TLS verified against a CA file (the service
//! account's `ca.crt` by default), the service account's bearer token read
//! again before every request (bound tokens are rotated in place by the
//! kubelet), one connection per request. Every request has one deadline
//! for connect, handshake, headers and body together, and a body cap, so
//! an API server that stalls or floods costs one failed refresh, never a
//! wedged task or unbounded memory.

use std::future::poll_fn;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper::{header, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls::{
    crypto::ring as provider,
    pki_types::{pem::PemObject, CertificateDer, ServerName},
    ClientConfig, RootCertStore,
};
use tokio_rustls::TlsConnector;

use crate::fsread::Reader;
use crate::snapshot::KubernetesReadError;

/// The service account's files, where Kubernetes mounts them in a pod.
pub const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
pub const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// A CA bundle or token larger than this is not one.
const MAX_CREDENTIAL_BYTES: u64 = 1 << 20;

/// Reading the service account's files (a tmpfs) takes microseconds.
const CREDENTIAL_DEADLINE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("cannot read {}: {detail}", .path.display())]
    Credentials { path: PathBuf, detail: String },
    #[error("cannot reach {url}: {detail}")]
    Connect { url: String, detail: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url} answered more than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("{url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
}

impl HttpsError {
    /// The self-metric's reason for this failure.
    pub fn reason(&self) -> KubernetesReadError {
        match self {
            HttpsError::Credentials { .. } => KubernetesReadError::Unreadable,
            HttpsError::Connect { .. } => KubernetesReadError::Unreachable,
            HttpsError::Status { status, .. } if *status == 401 || *status == 403 => {
                KubernetesReadError::Refused
            }
            HttpsError::Status { .. } => KubernetesReadError::Unreachable,
            HttpsError::TooLarge { .. } => KubernetesReadError::Malformed,
            HttpsError::Timeout { .. } => KubernetesReadError::Timeout,
        }
    }

    /// The answer was HTTP 404: the API version or path does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, HttpsError::Status { status: 404, .. })
    }
}

/// Checks that `s` is an `https://host[:port]` URL (a path is ignored
/// where the caller adds its own): for flags, at start.
pub fn parse_base_url(s: &str) -> Result<Uri, String> {
    let uri: Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "{s:?} is not an https:// URL (the kubelet and the API server serve TLS only)"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{s:?} names no host"));
    }
    Ok(uri)
}

/// The CA and token files, and the TLS configuration made from the CA.
pub struct HttpsClient {
    ca_file: PathBuf,
    token_file: PathBuf,
    reader: Reader,
    /// The CA bundle last read and its configuration, rebuilt when the
    /// bundle changes.
    tls: Mutex<Option<(Vec<u8>, Arc<ClientConfig>)>>,
}

impl HttpsClient {
    pub fn new(ca_file: PathBuf, token_file: PathBuf, reader: Reader) -> HttpsClient {
        HttpsClient {
            ca_file,
            token_file,
            reader,
            tls: Mutex::new(None),
        }
    }

    /// `GET base + path_and_query` with the bearer token; the body, at
    /// most `limit` bytes, of a 2xx answer.
    pub async fn get(
        &self,
        base: &Uri,
        path_and_query: &str,
        accept: &str,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, HttpsError> {
        let url = format!(
            "https://{}{}",
            base.authority().map_or("", |a| a.as_str()),
            path_and_query
        );
        let (ca, token) = self.credentials().await?;
        let config = self.config(ca)?;
        match tokio::time::timeout(
            timeout,
            fetch(base, path_and_query, &url, accept, &token, config, limit),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(HttpsError::Timeout { url, timeout }),
        }
    }

    /// The CA bundle and the token, read on a blocking thread with the
    /// reader's deadlines.
    async fn credentials(&self) -> Result<(Vec<u8>, String), HttpsError> {
        let reader = self.reader.clone();
        let (ca_file, token_file) = (self.ca_file.clone(), self.token_file.clone());
        let read = move |path: &PathBuf| {
            reader
                .read_regular(path, MAX_CREDENTIAL_BYTES, CREDENTIAL_DEADLINE)
                .map_err(|e| HttpsError::Credentials {
                    path: path.clone(),
                    detail: e.to_string(),
                })
        };
        let joined = tokio::task::spawn_blocking(move || {
            let ca = read(&ca_file)?;
            let token = read(&token_file)?;
            Ok::<_, HttpsError>((ca, token))
        })
        .await;
        let (ca, token) = joined.map_err(|e| HttpsError::Credentials {
            path: self.token_file.clone(),
            detail: e.to_string(),
        })??;
        let token = String::from_utf8(token)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| HttpsError::Credentials {
                path: self.token_file.clone(),
                detail: "not a bearer token (empty, or not printable ASCII)".into(),
            })?;
        Ok((ca, token))
    }

    fn config(&self, ca: Vec<u8>) -> Result<Arc<ClientConfig>, HttpsError> {
        let mut cached = self.tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((bytes, config)) = cached.as_ref() {
            if *bytes == ca {
                return Ok(config.clone());
            }
        }
        let bad = |detail: String| HttpsError::Credentials {
            path: self.ca_file.clone(),
            detail,
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            let cert = cert.map_err(|e| bad(format!("not a PEM certificate bundle: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(format!("a certificate is not usable as a CA: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad("holds no certificate".into()));
        }
        let config = ClientConfig::builder_with_provider(Arc::new(provider::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let config = Arc::new(config);
        *cached = Some((ca, config.clone()));
        Ok(config)
    }
}

async fn fetch(
    base: &Uri,
    path_and_query: &str,
    url: &str,
    accept: &str,
    token: &str,
    config: Arc<ClientConfig>,
    limit: usize,
) -> Result<Vec<u8>, HttpsError> {
    let connect = |detail: String| HttpsError::Connect {
        url: url.to_string(),
        detail,
    };
    let host = base
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = base.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| connect(e.to_string()))?;
    let name = ServerName::try_from(host.clone())
        .map_err(|e| connect(format!("{host:?} is not a TLS server name: {e}")))?;
    let tls = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| connect(format!("TLS: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| connect(e.to_string()))?;
    // The connection is driven beside the request and ends with it.
    let driver = tokio::spawn(conn);
    let authority = base.authority().map_or(host.clone(), |a| a.to_string());
    let request = Request::get(path_and_query)
        .header(header::HOST, authority)
        .header(header::ACCEPT, accept)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(
            header::USER_AGENT,
            concat!("nvml-exporter/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty)
        .map_err(|e| connect(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| connect(e.to_string()));
    let result = match response {
        Ok(response) if response.status() == StatusCode::OK => {
            read_body(response.into_body(), limit, url).await
        }
        Ok(response) => Err(HttpsError::Status {
            url: url.to_string(),
            status: response.status().as_u16(),
        }),
        Err(e) => Err(e),
    };
    driver.abort();
    result
}

async fn read_body(
    mut body: hyper::body::Incoming,
    limit: usize,
    url: &str,
) -> Result<Vec<u8>, HttpsError> {
    let mut out = Vec::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| HttpsError::Connect {
            url: url.to_string(),
            detail: e.to_string(),
        })?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(HttpsError::TooLarge {
                    url: url.to_string(),
                    limit,
                });
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// A request without a body.
struct Empty;

impl Body for Empty {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_with_a_host_are_taken() {
        assert!(parse_base_url("https://10.0.0.7:10250").is_ok());
        assert!(parse_base_url("https://[fd00::7]:10250").is_ok());
        assert!(parse_base_url("http://10.0.0.7:10250")
            .unwrap_err()
            .contains("https"));
        assert!(parse_base_url("10.0.0.7:10250").is_err());
        assert!(parse_base_url("https://").is_err());
    }

    #[test]
    fn refusals_and_timeouts_have_their_reasons() {
        let status = |status| HttpsError::Status {
            url: "u".into(),
            status,
        };
        assert_eq!(status(403).reason(), KubernetesReadError::Refused);
        assert_eq!(status(401).reason(), KubernetesReadError::Refused);
        assert_eq!(status(500).reason(), KubernetesReadError::Unreachable);
        assert!(status(404).is_not_found());
    }
}
