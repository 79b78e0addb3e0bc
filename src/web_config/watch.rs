//! Keeps the current web config and follows edits to it, so certificates can
//! be rotated and users changed without a restart. The toolkit re-reads the
//! file on every request; we poll in the background instead so a request
//! never waits on the file system, and a bad edit keeps the last good config.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use hyper::header::{HeaderName, HeaderValue};
use tokio_rustls::TlsAcceptor;

use super::auth::{self, AuthCache, AuthDecision, Cached};
use super::gate::{BcryptGate, Ticket};
use super::rate::Bucket;
use super::{reader, WebConfig, WebConfigError, READ_DEADLINE};
use crate::reload::{self, PollState, Trigger};

/// How often the files are checked by default.
pub const DEFAULT_POLL_INTERVAL: Duration = reload::DEFAULT_POLL_INTERVAL;

/// Shared by all connections; every query is a lock-free load of the current
/// config (plus one bcrypt run for an uncached login).
pub struct WebConfigWatcher {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    current: ArcSwap<WebConfig>,
    /// Whether TLS was on at start. Turning it on or off needs a restart:
    /// the listener's protocol cannot change under connected clients, and
    /// silently dropping to plain HTTP would be a downgrade.
    tls: bool,
    cache: AuthCache,
    gate: Arc<BcryptGate>,
    bucket: ArcSwapOption<Bucket>,
    poll: Mutex<PollState>,
}

impl WebConfigWatcher {
    /// Loads `path` (an error here should stop the exporter) and starts
    /// watching it on a background thread.
    pub fn start(path: &Path) -> Result<WebConfigWatcher, WebConfigError> {
        Self::start_with_interval(path, DEFAULT_POLL_INTERVAL)
    }

    pub fn start_with_interval(
        path: &Path,
        interval: Duration,
    ) -> Result<WebConfigWatcher, WebConfigError> {
        let watcher = Self::new_unwatched(path)?;
        let weak = Arc::downgrade(&watcher.shared);
        // Errors were logged by check(); the last good config stays.
        reload::spawn_follower("web-config-watch", weak, interval, |shared| {
            let _ = shared.check(Trigger::Change);
        })
        .map_err(|source| WebConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(watcher)
    }

    /// Loads `path` without a background thread; call [`Self::check_now`] to
    /// pick up changes.
    pub fn new_unwatched(path: &Path) -> Result<WebConfigWatcher, WebConfigError> {
        let config = WebConfig::load(path)?;
        log_loaded(&config, Trigger::Start);
        let shared = Shared {
            path: path.to_path_buf(),
            tls: config.tls.is_some(),
            bucket: ArcSwapOption::new(config.rate_limit.map(|r| Arc::new(Bucket::new(r)))),
            current: ArcSwap::new(Arc::new(config)),
            cache: AuthCache::default(),
            gate: Arc::new(BcryptGate::default()),
            poll: Mutex::new(PollState::default()),
        };
        let fingerprint = shared.fingerprint(&shared.current.load());
        if let Ok(mut poll) = shared.poll.lock() {
            *poll = PollState::new(fingerprint);
        }
        Ok(WebConfigWatcher {
            shared: Arc::new(shared),
        })
    }

    /// The config now in force.
    pub fn current(&self) -> Arc<WebConfig> {
        self.shared.current.load_full()
    }

    /// `None`: serve plain HTTP. Take a fresh one per accepted connection so
    /// a rotated certificate is used from the next handshake on.
    pub fn tls_acceptor(&self) -> Option<TlsAcceptor> {
        if !self.shared.tls {
            return None;
        }
        self.shared
            .current
            .load()
            .tls
            .clone()
            .map(TlsAcceptor::from)
    }

    /// Checks the `Authorization` header against `basic_auth_users`. May run
    /// one bcrypt verification (tens of milliseconds at cost 10): call it from
    /// a blocking-capable context (`tokio::task::spawn_blocking`).
    pub fn authorize(&self, authorization_header: Option<&HeaderValue>) -> AuthDecision {
        let config = self.shared.current.load();
        auth::authorize(
            config.basic_auth(),
            &self.shared.cache,
            authorization_header.map(HeaderValue::as_bytes),
        )
    }

    /// The part of `authorize` that never runs bcrypt: decides requests
    /// without credentials and logins remembered from before.
    pub(crate) fn check_cached(&self, authorization_header: &HeaderValue) -> Cached {
        let config = self.shared.current.load();
        auth::check_cached(
            config.basic_auth(),
            &self.shared.cache,
            Some(authorization_header.as_bytes()),
        )
    }

    /// A place in the bounded bcrypt queue for a client at `peer`, or `None`
    /// when it is full (answer 429).
    pub(crate) fn admit_bcrypt(&self, peer: std::net::IpAddr) -> Option<Ticket> {
        self.shared.gate.admit(peer)
    }

    /// Whether `authorize` has anything to check (no users: every request
    /// is allowed and no blocking work is needed).
    pub fn requires_auth(&self) -> bool {
        self.shared.current.load().requires_auth()
    }

    /// `http_server_config.headers`, for every response (401s included).
    pub fn response_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        self.shared.current.load().headers.clone()
    }

    /// `rate_limit`: false means answer 429 Too Many Requests.
    pub fn allow_request(&self) -> bool {
        match &*self.shared.bucket.load() {
            Some(b) => b.allow(),
            None => true,
        }
    }

    /// Re-reads the files if they changed. `Ok(true)`: a new config is in
    /// force. `Err`: the files changed but are invalid; the old config stays.
    pub fn check_now(&self) -> Result<bool, WebConfigError> {
        self.shared.check(Trigger::Change)
    }

    /// Re-reads the files whether or not they changed, as Prometheus tools
    /// do on SIGHUP. An invalid file is logged (every time) and the old
    /// config stays. Reads files: call it off the async workers.
    pub fn reload_now(&self) -> Result<(), WebConfigError> {
        self.shared.check(Trigger::Sighup).map(|_| ())
    }
}

impl Shared {
    /// The fingerprint of the config file and of every file it names
    /// (`crate::reload::fingerprint`).
    fn fingerprint(&self, config: &WebConfig) -> u64 {
        let mut files = vec![self.path.clone()];
        files.extend(config.referenced_files());
        reload::fingerprint(reader(), &files, READ_DEADLINE)
    }

    fn check(&self, trigger: Trigger) -> Result<bool, WebConfigError> {
        let Ok(mut poll) = self.poll.lock() else {
            return Ok(false);
        };
        let current = self.current.load_full();
        let fp = self.fingerprint(&current);
        if !poll.must_load(fp, trigger) {
            return Ok(false);
        }
        let result = WebConfig::load(&self.path).and_then(|new| {
            if self.tls && new.tls.is_none() {
                return Err(WebConfigError::Invalid {
                    path: self.path.clone(),
                    field: "tls_server_config".into(),
                    message: "TLS was enabled at start; turning it off needs a restart".into(),
                });
            }
            Ok(new)
        });
        match result {
            Ok(new) => {
                if !self.tls && new.tls.is_some() {
                    tracing::warn!(
                        path = %self.path.display(),
                        "web config now enables TLS; it takes effect after a restart, serving plain HTTP until then"
                    );
                }
                let limit = new.rate_limit;
                let same_bucket = self.bucket.load().as_ref().map(|b| b.limit()) == limit;
                if !same_bucket {
                    self.bucket.store(limit.map(|r| Arc::new(Bucket::new(r))));
                }
                poll.loaded(self.fingerprint(&new));
                let new = Arc::new(new);
                self.current.store(new.clone());
                // Logged once in force, so "loaded" in the log means served.
                log_loaded(&new, trigger);
                Ok(true)
            }
            Err(e) => {
                if poll.failed(fp, e.to_string(), trigger) {
                    tracing::error!(
                        error = %e,
                        trigger = trigger.name(),
                        "web config reload failed; keeping the last good config"
                    );
                } else {
                    tracing::debug!(
                        trigger = trigger.name(),
                        "web config still invalid as logged; keeping the last good config"
                    );
                }
                Err(e)
            }
        }
    }
}

fn log_loaded(config: &WebConfig, trigger: Trigger) {
    for w in config.warnings() {
        tracing::warn!(path = %config.path().display(), "web config: {w}");
    }
    tracing::info!(
        path = %config.path().display(),
        tls = config.tls.is_some(),
        client_auth = config.client_auth().map_or("none", |c| c.name()),
        basic_auth_users = config.users().len(),
        reload = trigger != Trigger::Start,
        trigger = trigger.name(),
        "web config loaded"
    );
}
