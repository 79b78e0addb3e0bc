//! The selection in force while the exporter runs: the schedule the
//! workers poll by and the context every render reads, both built from
//! one [`Selection`] and swapped together when the file changes (or on
//! SIGHUP). A file that fails to load or validate leaves the last good
//! selection in force; the failure is logged once and counted in
//! `nvml_exporter_config_*`.
//!
//! What a running exporter cannot take without a restart is refused on
//! reload with that reason: a poll interval shorter than the tick the
//! workers started with, and switching the XID families or the measured
//! use per workload on or off (their threads and accounting start with
//! the exporter).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use super::{load, Base, ConfigError, Selection, READ_DEADLINE};
use crate::compat::{self, Compat};
use crate::family::{Family, FamilySet};
use crate::metric::BuildInfo;
use crate::reload::{self, PollState, Trigger};
use crate::render::RenderContext;
use crate::schedule::{Schedule, SharedSchedule};
use crate::snapshot::ConfigStatus;

/// Everything besides the file a selection is resolved with.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// `--config.file`; `None`: the flags alone.
    pub path: Option<PathBuf>,
    pub base: Base,
    /// `--compat.dcgm.only`.
    pub compat_only: bool,
    /// The DCGM host label's value.
    pub hostname: Option<String>,
    /// `--workloads`: measured use per workload is sampled only then.
    pub workloads: bool,
    pub build: BuildInfo,
    /// How often the file is checked for changes.
    pub poll_interval: Duration,
}

/// Families whose switching needs a restart.
const STRUCTURAL: &[Family] = &[Family::Xid, Family::XidKmsg, Family::WorkloadUsage];

/// The selection in force, and the file it follows. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

struct Shared {
    settings: RuntimeSettings,
    /// The workers' poll interval, fixed at start.
    tick: Duration,
    /// The families sampled at start, for what needs a restart.
    started: FamilySet,
    selection: ArcSwap<Selection>,
    schedule: SharedSchedule,
    render: Arc<ArcSwap<RenderContext>>,
    /// What the DCGM output remembers between renders, kept across
    /// reloads.
    compat_state: Arc<Mutex<compat::encode::State>>,
    poll: Mutex<PollState>,
    status: Mutex<ConfigStatus>,
}

/// What the publisher reads the `nvml_exporter_config_*` values from.
pub trait ConfigStatusSource: Send + Sync {
    fn config_status(&self) -> Option<ConfigStatus>;
}

impl ConfigStatusSource for Runtime {
    fn config_status(&self) -> Option<ConfigStatus> {
        self.status()
    }
}

impl Runtime {
    /// Loads the file (an error here stops the exporter: a bad selection
    /// must not start) and follows it.
    pub fn start(settings: RuntimeSettings) -> Result<Runtime, ConfigError> {
        let rt = Self::new_unwatched(settings)?;
        if rt.shared.settings.path.is_some() {
            let weak = Arc::downgrade(&rt.shared);
            let interval = rt.shared.settings.poll_interval;
            reload::spawn_follower("config-watch", weak, interval, |shared| {
                // Logged and counted by check(); the last good one stays.
                let _ = shared.check(Trigger::Change);
            })
            .map_err(|e| ConfigError {
                path: rt.shared.settings.path.clone().unwrap_or_default(),
                line: None,
                message: format!("cannot start the thread following it: {e}"),
            })?;
        }
        Ok(rt)
    }

    /// [`Runtime::start`] without the following thread; [`Runtime::check_now`]
    /// picks up changes.
    pub fn new_unwatched(settings: RuntimeSettings) -> Result<Runtime, ConfigError> {
        let selection = match &settings.path {
            Some(path) => load(path, &settings.base)?,
            None => Selection::from_base(&settings.base),
        };
        let tick = selection.tick(settings.base.interval);
        let compat_state = Arc::default();
        let (ctx, schedule) = resolve(&settings, &selection, tick, &compat_state);
        check_needs(&settings, schedule.families()).map_err(|message| ConfigError {
            path: settings.path.clone().unwrap_or_default(),
            line: None,
            message,
        })?;
        if let Some(path) = &settings.path {
            log_loaded(path, &selection, &ctx, Trigger::Start);
        }
        let files = files(&settings, &selection);
        let dcgm_not_served = selection.dcgm_not_served;
        let shared = Shared {
            tick,
            started: schedule.families().clone(),
            schedule: Arc::new(ArcSwap::from_pointee(schedule)),
            render: Arc::new(ArcSwap::from_pointee(ctx)),
            selection: ArcSwap::from_pointee(selection),
            compat_state,
            poll: Mutex::new(PollState::new_backing_off(reload::fingerprint(
                super::reader(),
                &files,
                READ_DEADLINE,
            ))),
            status: Mutex::new(ConfigStatus {
                last_reload_successful: true,
                last_success: SystemTime::now(),
                reloads: 0,
                failures: 0,
                dcgm_not_served,
            }),
            settings,
        };
        Ok(Runtime {
            shared: Arc::new(shared),
        })
    }

    /// What the workers poll by; swapped on a reload.
    pub fn schedule(&self) -> SharedSchedule {
        self.shared.schedule.clone()
    }

    /// What every render reads; swapped on a reload.
    pub fn render_context(&self) -> Arc<ArcSwap<RenderContext>> {
        self.shared.render.clone()
    }

    /// The workers' poll interval.
    pub fn tick(&self) -> Duration {
        self.shared.tick
    }

    /// The families sampled now.
    pub fn sampled(&self) -> FamilySet {
        self.shared.schedule.load().families().clone()
    }

    /// The selection in force.
    pub fn selection(&self) -> Arc<Selection> {
        self.shared.selection.load_full()
    }

    /// `None` without a file.
    pub fn status(&self) -> Option<ConfigStatus> {
        self.shared.settings.path.as_ref()?;
        Some(
            *self
                .shared
                .status
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Re-reads the file if it (or the CSV it names) changed: `Ok(true)`
    /// when a new selection is in force.
    pub fn check_now(&self) -> Result<bool, ConfigError> {
        self.shared.check(Trigger::Change)
    }

    /// Re-reads the file whether or not it changed, as on SIGHUP. Reads
    /// files: call it off the async workers.
    pub fn reload_now(&self) -> Result<bool, ConfigError> {
        self.shared.check(Trigger::Sighup)
    }
}

/// The render context and schedule a selection gives.
fn resolve(
    settings: &RuntimeSettings,
    selection: &Selection,
    tick: Duration,
    compat_state: &Arc<Mutex<compat::encode::State>>,
) -> (RenderContext, Schedule) {
    let compat = settings.base.compat.map(|generation| Compat {
        generation,
        replace_native: settings.compat_only,
        hostname: settings.hostname.clone(),
        fields: selection.compat_fields(generation),
        state: compat_state.clone(),
    });
    let mut sampled = selection.sampled(compat.as_ref().map(|c| c.fields.as_slice()));
    if !settings.workloads {
        // Per-workload use needs workloads to charge it to: without
        // --workloads its NVML calls are not made.
        sampled.set(Family::WorkloadUsage, false);
    }
    let schedule = selection.schedule(sampled, settings.base.interval, tick);
    let ctx = RenderContext {
        families: selection.families.clone(),
        build: settings.build,
        filter: selection.filter.clone().map(Arc::new),
        compat: compat.map(Arc::new),
    };
    (ctx, schedule)
}

/// What the sampled families must hold for the rest of the exporter.
fn check_needs(settings: &RuntimeSettings, sampled: &FamilySet) -> Result<(), String> {
    if settings.workloads
        && !sampled.contains(Family::Processes)
        && !sampled.contains(Family::ProcessMemory)
    {
        return Err(
            "--workloads attributes the processes NVML lists: the selection must keep the processes family"
                .into(),
        );
    }
    Ok(())
}

/// The files whose change means a reload: the selection file and the
/// counters CSV it names.
fn files(settings: &RuntimeSettings, selection: &Selection) -> Vec<PathBuf> {
    settings
        .path
        .iter()
        .cloned()
        .chain(selection.referenced.iter().cloned())
        .collect()
}

impl Shared {
    fn check(&self, trigger: Trigger) -> Result<bool, ConfigError> {
        let Some(path) = &self.settings.path else {
            return Ok(false);
        };
        let mut poll = self.poll.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.selection.load_full();
        let fp = reload::fingerprint(
            super::reader(),
            &files(&self.settings, &current),
            READ_DEADLINE,
        );
        if !poll.must_load(fp, trigger) {
            return Ok(false);
        }
        let loaded = load(path, &self.settings.base).and_then(|new| {
            let (ctx, schedule) = resolve(&self.settings, &new, self.tick, &self.compat_state);
            self.restartless(&new, &schedule)
                .map(|()| (new, ctx, schedule))
                .map_err(|message| ConfigError {
                    path: path.clone(),
                    line: None,
                    message,
                })
        });
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        match loaded {
            Ok((new, ctx, schedule)) => {
                poll.loaded(reload::fingerprint(
                    super::reader(),
                    &files(&self.settings, &new),
                    READ_DEADLINE,
                ));
                log_loaded(path, &new, &ctx, trigger);
                // The schedule first: a render that sees the new context
                // then finds its families sampled from the next poll on.
                self.schedule.store(Arc::new(schedule));
                self.render.store(Arc::new(ctx));
                status.dcgm_not_served = new.dcgm_not_served;
                self.selection.store(Arc::new(new));
                status.last_reload_successful = true;
                status.last_success = SystemTime::now();
                status.reloads += 1;

                Ok(true)
            }
            Err(e) => {
                status.last_reload_successful = false;
                // Every failed load counts, retries included (once a
                // minute while the file stays bad); the log says each
                // distinct error once.
                status.failures += 1;
                if poll.failed(fp, e.to_string(), trigger) {
                    tracing::error!(
                        error = %e,
                        trigger = trigger.name(),
                        "config reload failed; keeping the last good selection"
                    );
                } else {
                    tracing::debug!(
                        trigger = trigger.name(),
                        "config still invalid as logged; keeping the last good selection"
                    );
                }
                Err(e)
            }
        }
    }

    /// Whether `new` can take over without a restart.
    fn restartless(&self, new: &Selection, schedule: &Schedule) -> Result<(), String> {
        if let Some((f, d)) = new.intervals.iter().find(|(_, d)| *d < self.tick) {
            return Err(format!(
                "intervals.{}: {}ms is shorter than the poll interval the exporter started with ({}ms); a shorter one needs a restart",
                f.name(),
                d.as_millis(),
                self.tick.as_millis()
            ));
        }
        for &f in STRUCTURAL {
            if self.started.contains(f) != schedule.families().contains(f) {
                return Err(format!(
                    "switching the {} family {} needs a restart",
                    f.name(),
                    if self.started.contains(f) {
                        "off"
                    } else {
                        "on"
                    }
                ));
            }
        }
        check_needs(&self.settings, schedule.families())
    }
}

fn log_loaded(
    path: &std::path::Path,
    selection: &Selection,
    ctx: &RenderContext,
    trigger: Trigger,
) {
    for w in &selection.warnings {
        tracing::warn!(path = %path.display(), "config file: {w}");
    }
    tracing::info!(
        path = %path.display(),
        families = %ctx.families.enabled_names().join(","),
        intervals = %selection
            .intervals
            .iter()
            .map(|(f, d)| format!("{}={}ms", f.name(), d.as_millis()))
            .collect::<Vec<_>>()
            .join(","),
        dcgm_fields = ctx.compat.as_ref().map_or(0, |c| c.fields.len()),
        trigger = trigger.name(),
        "config loaded"
    );
}
