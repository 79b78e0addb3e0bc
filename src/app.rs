//! Wires the parts together: the sampler publishes snapshots, each is
//! encoded once on the sampler's thread and swapped into `latest`, and the
//! HTTP server answers every scrape from `latest`.
//!
//! Startup fails fast, with a typed error, only on configuration problems
//! (an address that cannot be bound, a `--nvml.library` that does not
//! exist). A driver that is absent or broken is not one: the exporter then
//! serves `nvml_exporter_nvml_up 0` while the sampler retries.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::{Config, Library, ListenAddress};
use crate::family::Family;
use crate::http::{self, Published, Router, ServerConfig};
use crate::kubernetes::Attribution;
use crate::logging;
use crate::metric::BuildInfo;
use crate::nvml::{self, LibrarySource, PollerConfig};
use crate::render::{self, RenderContext};
use crate::snapshot::Snapshot;
use crate::web_config::{WebConfigError, WebConfigWatcher};
use crate::workloads::Workloads;

/// How long shutdown waits for the sampler. A worker blocked in the driver
/// cannot be joined; the sampler leaves it behind after this.
const POLLER_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("--web.listen-address {address}: cannot resolve the host: {source}")]
    Resolve {
        address: ListenAddress,
        #[source]
        source: io::Error,
    },
    #[error("--web.listen-address {address}: the host resolves to no address")]
    NoAddress { address: ListenAddress },
    #[error("--web.listen-address {address}: cannot listen on {socket}: {source}")]
    Bind {
        address: ListenAddress,
        socket: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Nvml(#[from] nvml::StartError),
    #[error(transparent)]
    WebConfig(#[from] WebConfigError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] io::Error),
    #[error("cannot install the {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    /// The HTTP server task ended by itself: nothing listens any more, so
    /// the process must not go on looking alive.
    #[error("the HTTP server stopped unexpectedly ({0}); exiting so the supervisor restarts the exporter")]
    ServerStopped(String),
}

/// Runs the exporter until SIGTERM or SIGINT (SIGHUP reloads the web
/// config), or until the HTTP server fails.
pub fn run(config: Config) -> Result<(), AppError> {
    logging::init(config.log_level, config.log_format);
    // Two workers are plenty for copying prepared bytes, and keep the
    // exporter's footprint small on a GPU host full of busier processes.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // The blocking pool runs bcrypt checks (one at a time, behind the
        // bounded queue of web_config::gate), web config reloads and address
        // lookups; a cap keeps any burst of them from spawning hundreds of
        // threads.
        .max_blocking_threads(8)
        .thread_name("nvml-exporter-http")
        .enable_all()
        .build()
        .map_err(AppError::Runtime)?;
    let (poller, outcome) = runtime.block_on(serve_until_signal(config))?;
    tracing::info!("stopping the sampler");
    poller.shutdown(POLLER_SHUTDOWN_TIMEOUT);
    // A connection task past the drain timeout must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    outcome?;
    tracing::info!("shutdown complete");
    Ok(())
}

/// The signals the exporter handles. Installed before listening: a signal
/// that arrives once we are listening must find its handler, not the
/// default action (which, for SIGHUP, is to die without a word).
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, AppError> {
        Ok(Signals {
            term: signal(SignalKind::terminate(), "SIGTERM")?,
            int: signal(SignalKind::interrupt(), "SIGINT")?,
            hup: signal(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Waits for SIGTERM or SIGINT; reloads the web config on each SIGHUP
    /// meanwhile, as Prometheus and its exporters do.
    async fn until_stop(&mut self, web: Option<Arc<WebConfigWatcher>>) -> &'static str {
        loop {
            tokio::select! {
                _ = self.term.recv() => return "SIGTERM",
                _ = self.int.recv() => return "SIGINT",
                _ = self.hup.recv() => reload_web_config(web.clone()).await,
            }
        }
    }
}

async fn reload_web_config(web: Option<Arc<WebConfigWatcher>>) {
    let Some(web) = web else {
        tracing::info!(
            signal = "SIGHUP",
            "no --web.config.file to reload; nothing to do"
        );
        return;
    };
    // Reading and validating the files (certificates included) is blocking
    // work; the outcome is logged by the watcher.
    let _ = tokio::task::spawn_blocking(move || web.reload_now()).await;
}

/// What ended the serving.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Signal(&'static str),
    /// The server task returned or panicked; the text says which.
    ServerEnded(String),
}

/// Waits for `stop` (a signal) or for the server task to end, whichever
/// comes first. A server that ends on its own is a failure: the process
/// would otherwise stay up, still "ready" to a supervisor, with no listener.
async fn supervise(server: &mut JoinHandle<()>, stop: impl Future<Output = &'static str>) -> Stop {
    tokio::select! {
        signal = stop => Stop::Signal(signal),
        ended = server => Stop::ServerEnded(match ended {
            Ok(()) => "its task returned".to_string(),
            Err(e) if e.is_panic() => "its task panicked".to_string(),
            Err(e) => e.to_string(),
        }),
    }
}

async fn serve_until_signal(
    config: Config,
) -> Result<(nvml::Poller, Result<(), AppError>), AppError> {
    let mut signals = Signals::install()?;
    // A bad web config is a configuration error: refuse to start.
    let web = match &config.web_config_file {
        Some(path) => Some(Arc::new(WebConfigWatcher::start(path)?)),
        None => None,
    };
    let listener = bind(&config.listen_address).await?;
    let local = listener.local_addr().map_err(|source| AppError::Bind {
        address: config.listen_address.clone(),
        socket: "0.0.0.0:0".parse().expect("literal socket address"),
        source,
    })?;

    let latest: Arc<ArcSwapOption<Published>> = Arc::new(ArcSwapOption::empty());
    let (stop_tx, stop_rx) = watch::channel(());
    let attribution = config.kubernetes.clone().map(Attribution::new);
    if let Some(a) = &attribution {
        tokio::spawn(a.clone().run(stop_rx.clone()));
    }
    let workloads = config.workloads.clone().map(Workloads::new);
    if let Some(w) = &workloads {
        tokio::spawn(w.clone().run(stop_rx.clone()));
    }
    let mut sampled = config.families.clone();
    if workloads.is_none() {
        // Per-workload use needs workloads to charge it to: without
        // --workloads its NVML calls are not made.
        sampled.set(Family::WorkloadUsage, false);
    }
    let poller = nvml::start(
        PollerConfig {
            library: library_source(&config.library),
            interval: config.collect_interval,
            stuck_deadline: config.stuck_deadline,
            families: sampled,
            xid_max_codes: config.xid_max_codes,
        },
        publisher(&config, latest.clone(), attribution, workloads),
    )?;

    let router = Arc::new(Router::new(
        config.telemetry_path.clone(),
        latest,
        config.max_requests,
    ));
    let mut server = tokio::spawn(http::serve(
        listener,
        router,
        ServerConfig {
            read_header_timeout: config.read_header_timeout,
            web: web.clone(),
            health_without_auth: config.health_without_auth,
            max_connections: config.max_connections,
            write_timeout: config.write_timeout,
        },
        stop_rx,
    ));
    tracing::info!(
        address = %local,
        telemetry_path = %config.telemetry_path,
        interval = ?config.collect_interval,
        "listening"
    );

    match supervise(&mut server, signals.until_stop(web)).await {
        Stop::Signal(signal) => {
            tracing::info!(signal, "shutting down");
            let _ = stop_tx.send(());
            if let Err(e) = server.await {
                tracing::error!(error = %e, "the HTTP server task failed");
            }
            Ok((poller, Ok(())))
        }
        Stop::ServerEnded(why) => {
            let _ = stop_tx.send(());
            Ok((poller, Err(AppError::ServerStopped(why))))
        }
    }
}

fn signal(kind: SignalKind, name: &'static str) -> Result<Signal, AppError> {
    tokio::signal::unix::signal(kind).map_err(|source| AppError::Signal {
        signal: name,
        source,
    })
}

async fn bind(address: &ListenAddress) -> Result<TcpListener, AppError> {
    let candidates: Vec<SocketAddr> = tokio::net::lookup_host(address.to_socket_string())
        .await
        .map_err(|source| AppError::Resolve {
            address: address.clone(),
            source,
        })?
        .collect();
    let mut last = None;
    for socket in candidates {
        match TcpListener::bind(socket).await {
            Ok(l) => return Ok(l),
            Err(source) => {
                last = Some(AppError::Bind {
                    address: address.clone(),
                    socket,
                    source,
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| AppError::NoAddress {
        address: address.clone(),
    }))
}

fn library_source(library: &Library) -> LibrarySource {
    match library {
        Library::System => LibrarySource::System,
        Library::Path(p) => LibrarySource::Path(p.clone()),
        Library::Simulated { scenario } => LibrarySource::Simulated {
            scenario: scenario.clone(),
        },
    }
}

/// The callback the sampler calls after every poll round: encode once, swap
/// in. Readiness changes are logged once each, not every poll.
fn publisher(
    config: &Config,
    latest: Arc<ArcSwapOption<Published>>,
    attribution: Option<Arc<Attribution>>,
    workloads: Option<Arc<Workloads>>,
) -> Arc<dyn Fn(Arc<Snapshot>) + Send + Sync> {
    let ctx = RenderContext {
        families: config.families.clone(),
        build: BuildInfo::current(),
    };
    let was_ready = AtomicBool::new(false);
    Arc::new(move |snapshot: Arc<Snapshot>| {
        // Attribution joins here, after sampling and before encoding, so
        // neither the sampler nor a scrape ever waits on the kubelet or
        // on /proc.
        let snapshot = match &attribution {
            Some(a) => Arc::new(a.apply(&snapshot)),
            None => snapshot,
        };
        let snapshot = match &workloads {
            Some(w) => Arc::new(w.apply(&snapshot)),
            None => snapshot,
        };
        let exposition = render::render(&snapshot, &ctx);
        latest.store(Some(Arc::new(Published {
            exposition: Arc::new(exposition),
            ready: snapshot.ready,
        })));
        if was_ready.swap(snapshot.ready, Ordering::Relaxed) != snapshot.ready {
            if snapshot.ready {
                tracing::info!(gpus = snapshot.gpus.len(), "ready");
            } else {
                tracing::warn!(nvml_up = snapshot.nvml_up, "not ready");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_dies_ends_the_serving() {
        let mut panicked: JoinHandle<()> = tokio::spawn(async { panic!("listener gone") });
        let never = std::future::pending::<&'static str>();
        assert_eq!(
            supervise(&mut panicked, never).await,
            Stop::ServerEnded("its task panicked".into())
        );
        let mut returned: JoinHandle<()> = tokio::spawn(async {});
        let never = std::future::pending::<&'static str>();
        assert_eq!(
            supervise(&mut returned, never).await,
            Stop::ServerEnded("its task returned".into())
        );
    }

    #[tokio::test]
    async fn a_signal_ends_the_serving_while_the_server_runs() {
        let mut running: JoinHandle<()> = tokio::spawn(std::future::pending());
        assert_eq!(
            supervise(&mut running, async { "SIGTERM" }).await,
            Stop::Signal("SIGTERM")
        );
        running.abort();
    }
}
