//! The `--web.config.file` of prometheus/exporter-toolkit: TLS, basic auth,
//! response headers and rate limiting, in the toolkit's exact file format so
//! an operator's existing file works unchanged. See docs/web-config.md.
//!
//! [`WebConfig::load`] validates a file once; [`WebConfigWatcher`] holds the
//! current one and follows changes to it and to the files it names.

mod auth;
mod gate;
mod headers;
pub mod http;
mod names;
mod rate;
mod raw;
pub mod san;
mod tls;
mod validity;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use tokio_rustls::rustls::ServerConfig;

pub use auth::AuthDecision;
pub use names::{ClientAuth, TlsVersion};
pub use watch::WebConfigWatcher;

use crate::fsread::{ReadError, Reader};

/// Web config files larger than this are refused before parsing.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// How long reading one of the files (the config, a certificate, a key, a
/// CA bundle) may take before it is abandoned: a file on a hung mount must
/// not keep the exporter from starting, stopping or serving.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);

/// The web config's own reader threads (src/fsread.rs): a stuck read of
/// one of its files never holds up workload attribution, nor the reverse.
pub(crate) fn reader() -> &'static Reader {
    static READER: OnceLock<Reader> = OnceLock::new();
    READER.get_or_init(|| Reader::new("web-config", 1))
}

/// The realm in `WWW-Authenticate` on a 401.
pub const AUTH_REALM: &str = "nvml-exporter";

/// A problem found in the file, before the file name is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    field: String,
    message: String,
}

impl Problem {
    pub(crate) fn new(field: &str, message: impl Into<String>) -> Self {
        Problem {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("web config file {}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("web config file {}: larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("web config file {}: not a regular file (a {kind}); name the YAML file itself", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("web config file {}: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
    /// The file did not decode: not YAML at all (`syntax`), or YAML that
    /// does not fit the schema (an unknown key, a wrong type, a cipher
    /// suite or curve name the toolkit does not know).
    #[error("web config file {}: {}{message}", path.display(), if *syntax { "invalid YAML: " } else { "" })]
    Yaml {
        path: PathBuf,
        /// 1-based, where the parser knows it.
        line: Option<usize>,
        message: String,
        syntax: bool,
    },
    #[error("web config file {}: {field}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

impl WebConfigError {
    fn invalid(path: &Path, p: Problem) -> Self {
        WebConfigError::Invalid {
            path: path.to_path_buf(),
            field: p.field,
            message: p.message,
        }
    }
}

/// Token bucket settings from `rate_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub interval: Duration,
    pub burst: u32,
}

/// One validated web config file, with its certificates loaded.
#[derive(Debug)]
pub struct WebConfig {
    path: PathBuf,
    tls: Option<Arc<ServerConfig>>,
    #[allow(dead_code)] // read by tests only
    verifier: Option<Arc<dyn tokio_rustls::rustls::server::danger::ClientCertVerifier>>,
    tls_settings: Option<tls::TlsSettings>,
    auth: auth::BasicAuth,
    headers: Vec<(HeaderName, HeaderValue)>,
    http2: bool,
    rate_limit: Option<RateLimit>,
    warnings: Vec<String>,
}

impl WebConfig {
    /// Reads and validates `path` and every file it names.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = read_config_file(path)?;
        Self::from_yaml(path, &text)
    }

    /// Validates `text` as if read from `path` (relative certificate paths
    /// are resolved against `path`'s directory).
    pub fn from_yaml(path: &Path, text: &[u8]) -> Result<WebConfig, WebConfigError> {
        let raw = parse_raw(path, text)?;
        let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut warnings = Vec::new();
        let headers = match raw
            .http_server_config
            .as_ref()
            .and_then(|h| h.headers.clone())
        {
            Some(h) => headers::validate(h).map_err(|p| WebConfigError::invalid(path, p))?,
            None => Vec::new(),
        };
        let http2 = raw
            .http_server_config
            .as_ref()
            .and_then(|h| h.http2)
            .unwrap_or(true);
        let auth = auth::BasicAuth::new(raw.basic_auth_users.unwrap_or_default()).map_err(|e| {
            WebConfigError::invalid(path, Problem::new("basic_auth_users", e.to_string()))
        })?;
        warnings.extend(auth.cost_warning());
        let tls_settings = tls::settings(
            raw.tls_server_config.unwrap_or_default(),
            &base,
            &mut warnings,
        )
        .map_err(|p| WebConfigError::invalid(path, p))?;
        let (tls, verifier) = match &tls_settings {
            Some(s) => {
                let built =
                    tls::build(s, &mut warnings).map_err(|p| WebConfigError::invalid(path, p))?;
                (Some(built.config), Some(built.verifier))
            }
            None => (None, None),
        };
        let rate_limit = match raw.rate_limit {
            Some(r) => rate::settings(r).map_err(|p| WebConfigError::invalid(path, p))?,
            None => None,
        };
        if tls.is_none() && !auth.is_empty() {
            warnings.push(
                "basic_auth_users without tls_server_config: passwords travel in clear text"
                    .to_string(),
            );
        }
        Ok(WebConfig {
            path: path.to_path_buf(),
            tls,
            verifier,
            tls_settings,
            auth,
            headers,
            http2,
            rate_limit,
            warnings,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rustls server config, or `None` for plain HTTP.
    pub fn tls_server_config(&self) -> Option<Arc<ServerConfig>> {
        self.tls.clone()
    }

    pub fn client_auth(&self) -> Option<ClientAuth> {
        self.tls_settings.as_ref().map(|s| s.client_auth)
    }

    /// Whether `basic_auth_users` asks for credentials.
    pub fn requires_auth(&self) -> bool {
        !self.auth.is_empty()
    }

    pub fn users(&self) -> Vec<String> {
        self.auth.user_names().map(str::to_string).collect()
    }

    /// `http_server_config.headers`, to be set on every response.
    pub fn response_headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// `http_server_config.http2`. Accepted for compatibility; the server
    /// speaks HTTP/1.1 only.
    pub fn http2(&self) -> bool {
        self.http2
    }

    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate_limit
    }

    /// Things accepted but not honoured exactly as the toolkit would.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Files whose change means the config must be re-read: certificate,
    /// key and client CA files.
    pub fn referenced_files(&self) -> Vec<PathBuf> {
        let Some(s) = &self.tls_settings else {
            return Vec::new();
        };
        [Some(&s.cert), Some(&s.key), s.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|src| match src {
                tls::PemSource::File(p) => Some(p.clone()),
                tls::PemSource::Inline(_) => None,
            })
            .collect()
    }

    pub(crate) fn basic_auth(&self) -> &auth::BasicAuth {
        &self.auth
    }
}

fn read_config_file(path: &Path) -> Result<Vec<u8>, WebConfigError> {
    let path_buf = || path.to_path_buf();
    reader()
        .read_regular(path, MAX_FILE_BYTES, READ_DEADLINE)
        .map_err(|e| match e {
            ReadError::Io(source) => WebConfigError::Read {
                path: path_buf(),
                source,
            },
            ReadError::TooLarge { .. } => WebConfigError::TooLarge { path: path_buf() },
            ReadError::NotRegular(kind) => WebConfigError::NotRegular {
                path: path_buf(),
                kind,
            },
            e @ (ReadError::TimedOut(_) | ReadError::Busy) => WebConfigError::Unreadable {
                path: path_buf(),
                message: e.to_string(),
            },
        })
}

fn parse_raw(path: &Path, text: &[u8]) -> Result<raw::RawConfig, WebConfigError> {
    let yaml_err = |line, message| WebConfigError::Yaml {
        path: path.to_path_buf(),
        line,
        message,
        syntax: true,
    };
    let text = std::str::from_utf8(text).map_err(|e| yaml_err(None, format!("not UTF-8: {e}")))?;
    // A leading byte-order mark is allowed by YAML (1.2, 5.2); the parser
    // would take it for a second document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Some(line) = crate::fsread::yaml_nesting_too_deep(text.as_bytes()) {
        return Err(yaml_err(
            Some(line),
            format!(
                "nested deeper than {} levels: refused before parsing",
                crate::fsread::MAX_YAML_NESTING
            ),
        ));
    }
    // An empty file (or one holding only comments) is a valid, empty config.
    let parsed: Option<raw::RawConfig> = yaml_serde::from_str(text).map_err(|e| {
        // The parser's error has no public kind. Whether the text is YAML
        // at all decides the wording: "invalid YAML" for a cipher suite
        // name it does not know would send the user to the wrong fix. Only
        // on this error path is the text parsed a second time.
        let syntax = yaml_serde::from_str::<yaml_serde::Value>(text).is_err();
        WebConfigError::Yaml {
            path: path.to_path_buf(),
            line: e.location().map(|l| l.line()),
            message: crate::fsread::redact_values(&e.to_string()),
            syntax,
        }
    })?;
    Ok(parsed.unwrap_or_default())
}

#[cfg(test)]
mod tests;
