//! Wires the parts together: the sampler publishes snapshots, the join
//! step (`crate::join`) completes each in place and encodes it once on the
//! sampler's thread, swapping it into `latest`, and the HTTP server answers
//! every scrape from `latest`.
//!
//! Startup fails fast, with a typed error, only on configuration problems
//! (an address that cannot be bound, a `--nvml.library` that does not
//! exist). A driver that is absent or broken is not one: the exporter then
//! serves `nvml_exporter_nvml_up 0` while the sampler retries.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::{Config, Library, ListenAddress};
use crate::family::{Family, FamilySet};
use crate::http::{self, HttpStats, Published, Router, ServerConfig};
use crate::join::{self, Join};
use crate::kmsg::KernelLog;
use crate::kubernetes::Attribution;
use crate::logging;
use crate::metric::BuildInfo;
use crate::nvml::{self, LibrarySource, PollerConfig};
use crate::nvsentinel::Nvsentinel;
use crate::selection::{ConfigError, Runtime};
use crate::selection_check;
use crate::selfstat::SelfStats;
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
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Check(#[from] selection_check::CheckError),
    #[error(transparent)]
    SystemdSocket(#[from] http::systemd::SystemdSocketError),
    #[error("a start-up task failed: {0}")]
    StartTask(String),
    #[error(transparent)]
    State(#[from] crate::state::OpenError),
    #[error("cannot start the kernel log thread: {0}")]
    KernelLog(#[source] io::Error),
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
    if let Some(path) = config.config_check.clone() {
        let report = selection_check::check(&config, &path, |families, tick| {
            sample_for_check(&config, families, tick)
        })?;
        print!("{report}");
        return Ok(());
    }
    for name in &config.unknown_env {
        tracing::warn!(
            variable = %name,
            "environment variable is not one of the exporter's (a misspelling?); ignored"
        );
    }
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
    let (background, outcome) = runtime.block_on(serve_until_signal(config))?;
    if let Some(background) = background {
        tracing::info!("stopping the sampler");
        background.shutdown();
    }
    // A connection task past the drain timeout must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    outcome?;
    tracing::info!("shutdown complete");
    Ok(())
}

/// The threads that outlive the async runtime: the sampler and the kernel
/// log reader.
struct Background {
    poller: nvml::Poller,
    kernel_log: Option<Arc<KernelLog>>,
}

impl Background {
    fn shutdown(self) {
        let deadline = std::time::Instant::now() + POLLER_SHUTDOWN_TIMEOUT;
        self.poller.shutdown(POLLER_SHUTDOWN_TIMEOUT);
        if let Some(log) = self.kernel_log {
            log.shutdown(deadline);
        }
    }
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

    /// Waits for SIGTERM or SIGINT; reloads the web config and the
    /// selection file on each SIGHUP meanwhile, as Prometheus and its
    /// exporters do.
    async fn until_stop(
        &mut self,
        web: Option<Arc<WebConfigWatcher>>,
        runtime: Runtime,
    ) -> &'static str {
        let reload = move || {
            let (web, runtime) = (web.clone(), runtime.clone());
            async move {
                reload_web_config(web).await;
                reload_selection(runtime).await;
            }
        };
        until_stop(&mut self.term, &mut self.int, &mut self.hup, reload).await
    }

    /// Waits for SIGTERM or SIGINT, for start-up work that may take a while
    /// (reading the web config): `None` when `work` finished first.
    async fn or_stop<T>(&mut self, work: impl Future<Output = T>) -> Result<T, &'static str> {
        tokio::select! {
            _ = self.term.recv() => Err("SIGTERM"),
            _ = self.int.recv() => Err("SIGINT"),
            done = work => Ok(done),
        }
    }
}

/// A stream of one signal, as the loop below sees it (tokio's `Signal`,
/// or a test's channel).
trait SignalStream {
    fn recv(&mut self) -> impl Future<Output = Option<()>> + Send;
}

impl SignalStream for Signal {
    fn recv(&mut self) -> impl Future<Output = Option<()>> + Send {
        Signal::recv(self)
    }
}

/// Returns at the first SIGTERM or SIGINT. Each SIGHUP starts `reload` as
/// a task of its own and the loop goes on: however long a reload takes
/// (a certificate on a hung mount), SIGTERM is handled at once. While one
/// reload runs, further SIGHUPs are refused with a log line rather than
/// piling up reloads.
async fn until_stop<F>(
    term: &mut impl SignalStream,
    int: &mut impl SignalStream,
    hup: &mut impl SignalStream,
    reload: impl Fn() -> F,
) -> &'static str
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut running: Option<JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = term.recv() => return "SIGTERM",
            _ = int.recv() => return "SIGINT",
            _ = hup.recv() => {
                if running.as_ref().is_some_and(|r| !r.is_finished()) {
                    tracing::warn!(
                        signal = "SIGHUP",
                        "the previous web config reload is still running; this SIGHUP is ignored"
                    );
                } else {
                    running = Some(tokio::spawn(reload()));
                }
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
    // work, each read bounded by the web config's deadline; the outcome is
    // logged by the watcher.
    let _ = tokio::task::spawn_blocking(move || web.reload_now()).await;
}

async fn reload_selection(runtime: Runtime) {
    if runtime.status().is_none() {
        return;
    }
    // Logged and counted by the runtime; the last good selection stays.
    let _ = tokio::task::spawn_blocking(move || runtime.reload_now()).await;
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

/// One line when `--compat.dcgm` named a dcgm-exporter release newer than
/// any generation known here (it is served as the newest known).
fn log_newer_generation(config: &Config) {
    if let Some(c) = config.compat.as_ref() {
        if let Some(release) = c.newer_release.as_deref() {
            tracing::warn!(
                release,
                served_as = c.generation.as_str(),
                "--compat.dcgm names a dcgm-exporter release newer than any known here; serving the newest known generation's names"
            );
        }
    }
}

/// Serves until a signal or a server failure: the sampler to shut down
/// (`None` when stopped before it started) and how serving ended.
async fn serve_until_signal(
    config: Config,
) -> Result<(Option<Background>, Result<(), AppError>), AppError> {
    let mut signals = Signals::install()?;
    // A bad web config is a configuration error: refuse to start. Its
    // files are read with deadlines, on a blocking thread, while SIGTERM
    // and SIGINT are still answered.
    let web = match config.web_config_file.clone() {
        Some(path) => {
            let load = tokio::task::spawn_blocking(move || WebConfigWatcher::start(&path));
            match signals.or_stop(load).await {
                Ok(Ok(loaded)) => Some(Arc::new(loaded?)),
                Ok(Err(e)) => return Err(AppError::StartTask(e.to_string())),
                Err(signal) => {
                    tracing::info!(signal, "stopped while reading the web config");
                    return Ok((None, Ok(())));
                }
            }
        }
        None => None,
    };
    // The selection file, read like the web config: a bad one stops the
    // start with an error naming its line.
    let settings = selection_check::runtime_settings(&config);
    let runtime = match signals
        .or_stop(tokio::task::spawn_blocking(move || {
            Runtime::start(settings)
        }))
        .await
    {
        Ok(Ok(loaded)) => loaded?,
        Ok(Err(e)) => return Err(AppError::StartTask(e.to_string())),
        Err(signal) => {
            tracing::info!(signal, "stopped while reading the selection file");
            return Ok((None, Ok(())));
        }
    };
    let listeners = listeners(&config).await?;
    let addresses: Vec<SocketAddr> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();

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
    // What is sampled comes from the selection (the flags, the file, and
    // the families the DCGM fields read); without --workloads it leaves
    // per-workload use out.
    let sampled = runtime.sampled();
    let own = Arc::new(SelfStats::default());
    tokio::spawn(refresh_self_stats(
        own.clone(),
        config.collect_interval,
        stop_rx.clone(),
    ));
    let nvsentinel = (config.nvsentinel.clone()).map(|n| nvsentinel_start(n, &stop_rx));
    let http_stats = Arc::new(HttpStats::default());
    let mut state = match &config.state {
        Some(s) => crate::state::Store::open(&s.path, &s.procfs)?,
        None => None,
    };
    let state_stats = state.as_ref().map(crate::state::Store::stats);
    warn_kernel_log_unused(config.kernel_log_asked_by, &sampled);
    let kernel_log = match config
        .kernel_log
        .clone()
        .filter(|_| sampled.contains(Family::Xid) && sampled.contains(Family::XidKmsg))
    {
        Some(mut cfg) => {
            forget_position_past_the_end(state.as_mut(), &cfg.path);
            // Resume after what an earlier run of this boot counted.
            cfg.resume_after = state
                .as_ref()
                .and_then(|s| s.restored.as_ref()?.kernel_log.as_ref())
                .filter(|k| crate::kmsg::same_log(&k.path, &cfg.path))
                .map(|k| k.read_to);
            Some(KernelLog::start(cfg).map_err(AppError::KernelLog)?)
        }
        None => None,
    };
    let poller = nvml::start(
        PollerConfig {
            library: library_source(&config.library),
            interval: runtime.tick(),
            stuck_deadline: config.stuck_deadline,
            schedule: runtime.schedule(),
            families: sampled,
            xid_max_codes: config.xid_max_codes,
            kernel_log: kernel_log.clone(),
            state: state.map(|s| Arc::new(std::sync::Mutex::new(s))),
        },
        Join {
            attribution,
            workloads,
            own,
            http: http_stats.clone(),
            runtime: runtime.clone(),
            restart_app_window: config.restart_app_window,
            state: state_stats,
            nvsentinel,
        }
        .publish(latest.clone()),
    )?;

    let router = Arc::new(Router::new(
        config.telemetry_path.clone(),
        latest,
        config.max_requests,
        http_stats.clone(),
    ));
    let server_config = ServerConfig {
        read_header_timeout: config.read_header_timeout,
        web: web.clone(),
        health_without_auth: config.health_without_auth,
        max_connections: config.max_connections,
        slots: http::ConnectionSlots::new(config.max_connections),
        write_timeout: config.write_timeout,
        stats: http_stats,
    };
    let mut server = tokio::spawn(serve_all(listeners, router, server_config, stop_rx));
    for address in &addresses {
        tracing::info!(address = %address, telemetry_path = %config.telemetry_path, "listening");
    }
    // Before the start line, which tests wait on.
    log_newer_generation(&config);
    let build = BuildInfo::current();
    tracing::info!(
        version = build.version,
        revision = build.revision,
        addresses = %addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        collectors = %runtime.render_context().load().families.enabled_names().join(","),
        interval = ?config.collect_interval,
        compat_dcgm = config.compat.as_ref().map_or("off", |c| c.generation.as_str()),
        config_file = %config.config_file.as_ref().map_or(String::new(), |p| p.display().to_string()),
        tls = web.as_ref().is_some_and(|w| w.tls_acceptor().is_some()),
        "nvml-exporter started"
    );

    match supervise(&mut server, signals.until_stop(web, runtime)).await {
        Stop::Signal(signal) => {
            tracing::info!(signal, "shutting down");
            let _ = stop_tx.send(());
            if let Err(e) = server.await {
                tracing::error!(error = %e, "the HTTP server task failed");
            }
            Ok((Some(Background { poller, kernel_log }), Ok(())))
        }
        Stop::ServerEnded(why) => {
            let _ = stop_tx.send(());
            Ok((
                Some(Background { poller, kernel_log }),
                Err(AppError::ServerStopped(why)),
            ))
        }
    }
}

/// Serves every listener until `stop`; returns when all have drained, or
/// at once if one ends before `stop` (the supervisor then treats the
/// server as failed). A listener's panic is passed on.
async fn serve_all(
    listeners: Vec<TcpListener>,
    router: Arc<Router>,
    cfg: ServerConfig,
    stop: watch::Receiver<()>,
) {
    let mut set = tokio::task::JoinSet::new();
    for listener in listeners {
        set.spawn(http::serve(
            listener,
            router.clone(),
            cfg.clone(),
            stop.clone(),
        ));
    }
    while let Some(ended) = set.join_next().await {
        if let Err(e) = ended {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        if !stop.has_changed().unwrap_or(true) {
            return;
        }
    }
}

/// Every `--web.listen-address` bound, or systemd's sockets with
/// `--web.systemd-socket`.
async fn listeners(config: &Config) -> Result<Vec<TcpListener>, AppError> {
    if config.systemd_socket {
        return http::systemd::listeners()?
            .into_iter()
            .map(|l| TcpListener::from_std(l).map_err(AppError::Runtime))
            .collect();
    }
    let mut out = Vec::with_capacity(config.listen_addresses.len());
    for address in &config.listen_addresses {
        out.push(bind(address).await?);
    }
    Ok(out)
}

/// Reads the process's own statistics every interval (at most every 5 s)
/// on a blocking thread, off every scrape.
async fn refresh_self_stats(
    own: Arc<SelfStats>,
    interval: Duration,
    mut stop: watch::Receiver<()>,
) {
    let mut tick = tokio::time::interval(interval.min(Duration::from_secs(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let own = own.clone();
        let _ = tokio::task::spawn_blocking(move || own.refresh()).await;
    }
}

fn signal(kind: SignalKind, name: &'static str) -> Result<Signal, AppError> {
    tokio::signal::unix::signal(kind).map_err(|source| AppError::Signal {
        signal: name,
        source,
    })
}

async fn bind(address: &ListenAddress) -> Result<TcpListener, AppError> {
    let mut candidates: Vec<SocketAddr> = tokio::net::lookup_host(address.to_socket_string())
        .await
        .map_err(|source| AppError::Resolve {
            address: address.clone(),
            source,
        })?
        .collect();
    // `:PORT` is `[::]:PORT`, both families on one socket; where the kernel
    // has IPv6 off, every IPv4 interface alone.
    if address.host.is_none() {
        candidates.push(SocketAddr::from(([0, 0, 0, 0], address.port)));
    }
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

/// A kernel-log flag given by name has no effect while what it tunes is
/// off: said once, at start (both families need a restart to switch). Not
/// refused: the chart and the Docker recipe set the variables while an
/// operator may deny `xid` in the selection file, and a family denied
/// there never stops a start (issue 51; probe 6, D9).
fn warn_kernel_log_unused(asked_by: Option<&'static str>, sampled: &FamilySet) {
    let Some(flag) = asked_by else {
        return;
    };
    let why = if !sampled.contains(Family::Xid) {
        "the xid family is off (--no-collector.xid, or denied by the selection file)"
    } else if !sampled.contains(Family::XidKmsg) {
        "--collector.xid.kmsg is off (it is off by default under --simulate)"
    } else {
        return;
    };
    tracing::warn!(
        flag,
        "{flag} has no effect: {why}, so the kernel log is not read and nvml_exporter_kernel_log_up is not served"
    );
}

/// A saved kernel-log position past the newest record the log holds is of
/// another log (a file recreated at the same path, a crafted or copied
/// state file; `/dev/kmsg` never numbers backwards within a boot): resuming
/// after it would skip every new record up to it, silently. It is dropped,
/// with a line, so the log is read from its start and what the restored
/// counts hold is not counted again (`log_read_again` of the poller).
fn forget_position_past_the_end(state: Option<&mut crate::state::Store>, log: &std::path::Path) {
    let Some(restored) = state.and_then(|s| s.restored.as_mut()) else {
        return;
    };
    let Some(read_to) = restored
        .kernel_log
        .as_ref()
        .filter(|k| crate::kmsg::same_log(&k.path, log))
        .map(|k| k.read_to)
    else {
        return;
    };
    let Some(newest) = crate::kmsg::last_seq(log).filter(|&n| n < read_to) else {
        return;
    };
    tracing::warn!(path = %log.display(), saved = read_to, newest,
        "the state file's kernel-log position is past the newest record the log holds (another log at this path): reading the log from its start; XIDs the restored counts hold are not counted again");
    restored.kernel_log = None;
}

fn library_source(library: &Library) -> LibrarySource {
    match library {
        Library::System { rootfs } => LibrarySource::System {
            rootfs: rootfs.clone(),
        },
        Library::Path(p) => LibrarySource::Path(p.clone()),
        Library::Simulated { scenario } => LibrarySource::Simulated {
            scenario: scenario.clone(),
        },
    }
}

/// `--config.check`'s sampling: `families` read every `tick` (at most a
/// second: what is counted does not depend on how often it is read), the
/// snapshot once every GPU has been read three times (GPM activity and
/// the DCGM rates need two reads), at most a minute, with its verdicts
/// judged as the join step judges them (no attribution: a check counts
/// the GPUs' series).
fn sample_for_check(
    config: &Config,
    families: FamilySet,
    tick: Duration,
) -> Result<Snapshot, String> {
    type Latest = Mutex<(usize, Option<Snapshot>)>;
    let latest: Arc<Latest> = Arc::default();
    let sink = latest.clone();
    let tick = tick.min(Duration::from_secs(1));
    let poller = nvml::start(
        PollerConfig {
            library: library_source(&config.library),
            interval: tick,
            stuck_deadline: config.stuck_deadline,
            schedule: crate::schedule::Schedule::shared(families.clone(), tick),
            families,
            xid_max_codes: config.xid_max_codes,
            kernel_log: None,
            // A check reads; it keeps nothing for the exporter's next start.
            state: None,
        },
        Arc::new(move |s: Snapshot| {
            let mut l = sink.lock().unwrap_or_else(PoisonError::into_inner);
            let complete = s.ready && s.gpus.iter().all(|g| g.readings.is_some());
            l.0 = if complete { l.0 + 1 } else { 0 };
            l.1 = Some(s);
        }),
    )
    .map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let last = loop {
        {
            let mut l = latest.lock().unwrap_or_else(PoisonError::into_inner);
            if l.0 > 2 || std::time::Instant::now() >= deadline {
                break l.1.take();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    poller.shutdown(Duration::from_secs(5));
    let mut last = last.ok_or_else(|| {
        "no snapshot of the GPUs within a minute: NVML did not come up".to_string()
    })?;
    join::judge(
        &mut last,
        std::time::Instant::now(),
        config.restart_app_window,
    );
    Ok(last)
}

/// The NVSentinel event source, its settings completed from the host:
/// the kernel's host name where no node name was given, and whether the
/// CPU says it runs under a hypervisor (a reboot is then RESTART_VM).
/// Its sending task is started here, on the runtime.
fn nvsentinel_start(
    mut settings: crate::nvsentinel::Settings,
    stop: &watch::Receiver<()>,
) -> Arc<Nvsentinel> {
    // Read once at start, through a reader with a deadline and a cap: a
    // procfs read is a read like any other (`crate::fsread`).
    let reader = crate::fsread::Reader::new("nvsentinel", 1);
    let read = |path: &str, limit: u64| {
        reader
            .read(std::path::Path::new(path), limit, Duration::from_secs(2))
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    if settings.node_name.is_empty() {
        settings.node_name = read("/proc/sys/kernel/hostname", 256)
            .map(|n| n.trim().to_string())
            .unwrap_or_default();
    }
    // 16 MiB: /proc/cpuinfo of the largest hosts is a few MiB.
    settings.guest =
        read("/proc/cpuinfo", 16 << 20).is_some_and(|c| crate::nvsentinel::guest_from_cpuinfo(&c));
    tracing::info!(socket = %settings.socket.display(), node = %settings.node_name,
        dry_run = settings.dry_run, guest = settings.guest,
        "sending NVSentinel health events at each change of a GPU's verdict");
    let n = Nvsentinel::new(settings);
    tokio::spawn(n.clone().run(stop.clone()));
    n
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

    struct Chan(tokio::sync::mpsc::UnboundedReceiver<()>);

    impl SignalStream for Chan {
        fn recv(&mut self) -> impl Future<Output = Option<()>> + Send {
            self.0.recv()
        }
    }

    fn chan() -> (tokio::sync::mpsc::UnboundedSender<()>, Chan) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (tx, Chan(rx))
    }

    #[tokio::test]
    async fn a_reload_that_never_ends_does_not_hold_up_sigterm() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (term_tx, mut term) = chan();
        let (_int_tx, mut int) = chan();
        let (hup_tx, mut hup) = chan();
        let started = Arc::new(AtomicUsize::new(0));
        let counted = started.clone();
        let reload = move || {
            counted.fetch_add(1, Ordering::SeqCst);
            // A reload stuck for ever (a file on a hung mount).
            std::future::pending::<()>()
        };
        let waiting =
            tokio::spawn(async move { until_stop(&mut term, &mut int, &mut hup, reload).await });
        hup_tx.send(()).unwrap();
        while started.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // A second SIGHUP while the first reload runs starts no second one.
        hup_tx.send(()).unwrap();
        term_tx.send(()).unwrap();
        assert_eq!(waiting.await.unwrap(), "SIGTERM");
        assert_eq!(started.load(Ordering::SeqCst), 1);
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
