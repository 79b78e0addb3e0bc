//! Threads: one supervisor (initializes NVML with backoff, spawns workers,
//! publishes snapshots), one worker per GPU, one XID event thread.
//!
//! A worker is only ever spawned for a GPU whose previous worker has
//! finished, so a GPU stuck in a driver call holds exactly one thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::backoff::Backoff;
use super::errors::ErrorBook;
use super::sampler::GpuSampler;
use super::library::ResolvedLibrary;
use super::raw::{self, EventSet};
use super::watchdog::{lock, CallTracker};
use super::PollerConfig;
use crate::family::{Family, FamilySet};
use crate::snapshot::*;

const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
const XID_WAIT_MS: u32 = 200;

/// A stop flag threads can sleep on.
#[derive(Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    pub fn stop(&self) {
        *lock(&self.stopped) = true;
        self.cv.notify_all();
    }

    pub fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleeps up to `d`; true when stopped.
    pub fn wait(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut stopped = lock(&self.stopped);
        while !*stopped {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            stopped = match self.cv.wait_timeout(stopped, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        *stopped
    }
}

/// Wakes the publisher when a worker finishes a sample, so a snapshot goes
/// out as soon as every GPU has been sampled rather than up to an interval
/// later.
#[derive(Default)]
pub struct Notify {
    seq: Mutex<u64>,
    cv: Condvar,
}

impl Notify {
    fn notify(&self) {
        *lock(&self.seq) += 1;
        self.cv.notify_all();
    }

    /// Sleeps until notified or `d` passes.
    fn wait(&self, d: Duration) {
        let seq = lock(&self.seq);
        let start = *seq;
        let _ = self.cv.wait_timeout_while(seq, d, |s| *s == start);
    }
}

/// One NVML initialization: its workers stop when it ends.
struct Generation {
    stop: Stop,
    driver_gone: AtomicBool,
    sampled: Arc<Notify>,
}

impl Generation {
    fn new(sampled: Arc<Notify>) -> Self {
        Generation {
            stop: Stop::default(),
            driver_gone: AtomicBool::new(false),
            sampled,
        }
    }
}

type XidKey = (u64, Option<u32>, Option<u32>);

#[derive(Default)]
struct SlotState {
    uuid: Option<String>,
    identity: GpuIdentity,
    health: Option<Health>,
    last_sample: Option<SystemTime>,
    sample_duration: Option<Duration>,
    readings: Option<GpuReadings>,
    mig_enabled: bool,
    errors: ErrorBook,
    xids: BTreeMap<XidKey, (u64, SystemTime)>,
}

/// Everything known about one GPU index, across NVML re-initializations.
pub struct GpuSlot {
    index: u32,
    tracker: CallTracker,
    state: Mutex<SlotState>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Whether the current hang has been logged (once per hang).
    hung_reported: AtomicBool,
    /// Samples finished (or failed) by this GPU's workers.
    samples: AtomicU64,
}

impl GpuSlot {
    fn new(index: u32) -> Self {
        GpuSlot {
            index,
            tracker: CallTracker::default(),
            state: Mutex::default(),
            worker: Mutex::new(None),
            hung_reported: AtomicBool::new(false),
            samples: AtomicU64::new(0),
        }
    }

    /// Logs the start and the end of a hang, once each.
    fn report_hang(&self, stuck: Option<&StuckCall>, deadline: Duration) {
        match stuck {
            Some(call) if !self.hung_reported.swap(true, Ordering::SeqCst) => {
                tracing::error!(gpu = self.index, family = call.family,
                    "GPU is hung: a driver call has been blocked for more than {:?}; readings withdrawn until it returns", deadline);
            }
            None if self.hung_reported.swap(false, Ordering::SeqCst) => {
                tracing::info!(
                    gpu = self.index,
                    "GPU answers again after a hung driver call"
                );
            }
            _ => {}
        }
    }

    fn record_xid(&self, xid: u64, gi: Option<u32>, ci: Option<u32>, at: SystemTime) {
        let mut st = lock(&self.state);
        let (gi, ci) = if st.mig_enabled {
            (gi, ci)
        } else {
            (None, None)
        };
        let e = st.xids.entry((xid, gi, ci)).or_insert((0, at));
        e.0 += 1;
        e.1 = at;
    }

    fn worker_running(&self) -> bool {
        lock(&self.worker)
            .as_ref()
            .is_some_and(|h| !h.is_finished())
    }
}

/// State the supervisor shares with `Poller::shutdown`.
pub struct Shared {
    pub stop: Stop,
    sampled: Arc<Notify>,
    slots: Mutex<Vec<Arc<GpuSlot>>>,
    xid: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            stop: Stop::default(),
            sampled: Arc::default(),
            slots: Mutex::new(Vec::new()),
            xid: Mutex::new(None),
        }
    }

    /// Joins every thread that finishes before `deadline`; threads stuck
    /// in a driver call are left behind (they hold the last `Arc<Nvml>`, so
    /// `nvmlShutdown` runs when they return).
    pub fn join_threads(&self, deadline: Instant) {
        let mut handles: Vec<JoinHandle<()>> = Vec::new();
        for slot in lock(&self.slots).iter() {
            if let Some(h) = lock(&slot.worker).take() {
                handles.push(h);
            }
        }
        if let Some(h) = lock(&self.xid).take() {
            handles.push(h);
        }
        for h in handles {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

struct Loaded {
    nvml: Nvml,
    driver: DriverInfo,
    device_count: u32,
}

fn initialize(lib: &ResolvedLibrary) -> Result<Loaded, String> {
    let result = match lib {
        ResolvedLibrary::System => Nvml::init(),
        ResolvedLibrary::Path(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
    };
    let nvml = result.map_err(|e| match e {
        NvmlError::LibloadingError(inner) => format!("cannot load {}: {inner}", lib.describe()),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("{} is not a usable NVML library: {s}", lib.describe())
        }
        other => format!(
            "nvmlInit failed ({}): {other}",
            super::errors::error_name(&other)
        ),
    })?;
    let device_count = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount_v2 failed: {e}"))?;
    let driver = DriverInfo {
        driver_version: nvml.sys_driver_version().unwrap_or_default(),
        nvml_version: nvml.sys_nvml_version().unwrap_or_default(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        }),
    };
    Ok(Loaded {
        nvml,
        driver,
        device_count,
    })
}

struct Up {
    nvml: Arc<Nvml>,
    generation: Arc<Generation>,
    device_count: u32,
}

pub fn supervise(
    cfg: PollerConfig,
    lib: ResolvedLibrary,
    publish: Arc<dyn Fn(Arc<Snapshot>) + Send + Sync>,
    shared: Arc<Shared>,
) {
    let mut backoff = Backoff::new(BACKOFF_INITIAL, BACKOFF_CAP);
    let mut up: Option<Up> = None;
    let mut driver: Option<DriverInfo> = None;
    let mut init: Option<JoinHandle<Result<Loaded, String>>> = None;
    let mut next_attempt = Instant::now();
    let mut last_error: Option<String> = None;
    let mut ever_up = false;

    loop {
        let now = Instant::now();
        if up.is_none() {
            if init.as_ref().is_some_and(|h| h.is_finished()) {
                let result = init.take().map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("NVML initialization panicked".into()))
                });
                match result {
                    Some(Ok(loaded)) => {
                        tracing::info!(
                            library = %lib.describe(),
                            driver_version = %loaded.driver.driver_version,
                            gpus = loaded.device_count,
                            "NVML {}",
                            if ever_up || last_error.is_some() { "recovered" } else { "initialized" }
                        );
                        ever_up = true;
                        last_error = None;
                        backoff.reset();
                        driver = Some(loaded.driver);
                        let generation = Arc::new(Generation::new(shared.sampled.clone()));
                        let nvml = Arc::new(loaded.nvml);
                        {
                            let mut slots = lock(&shared.slots);
                            while (slots.len() as u32) < loaded.device_count {
                                let i = slots.len() as u32;
                                slots.push(Arc::new(GpuSlot::new(i)));
                            }
                        }
                        if cfg.families.contains(Family::Xid) {
                            let slots: Vec<Arc<GpuSlot>> = lock(&shared.slots)
                                .iter()
                                .take(loaded.device_count as usize)
                                .cloned()
                                .collect();
                            let (n, g) = (nvml.clone(), generation.clone());
                            let interval = cfg.interval;
                            match spawn("nvml-xid", move || run_xid(n, slots, g, interval)) {
                                Ok(h) => *lock(&shared.xid) = Some(h),
                                Err(e) => {
                                    tracing::error!(error = %e, "cannot start the XID event thread")
                                }
                            }
                        }
                        up = Some(Up {
                            nvml,
                            generation,
                            device_count: loaded.device_count,
                        });
                    }
                    Some(Err(why)) => {
                        let delay = backoff.next_delay();
                        if last_error.as_deref() != Some(why.as_str()) {
                            tracing::error!(
                                "NVML is unavailable: {why}; exporting nvml_exporter_nvml_up 0 and retrying (backoff up to {}s)",
                                BACKOFF_CAP.as_secs()
                            );
                            last_error = Some(why);
                        }
                        next_attempt = now + delay;
                    }
                    None => {}
                }
            } else if init.is_none() && now >= next_attempt {
                let lib = lib.clone();
                match spawn("nvml-init", move || initialize(&lib)) {
                    Ok(h) => init = Some(h),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start NVML initialization thread");
                        next_attempt = now + backoff.next_delay();
                    }
                }
            }
        }

        if let Some(u) = &up {
            if u.generation.driver_gone.load(Ordering::SeqCst) {
                tracing::error!("NVML reports the driver is gone; re-initializing with backoff");
                u.generation.stop.stop();
                up = None;
                next_attempt = now + backoff.next_delay();
                last_error = Some("driver gone".into());
            }
        }

        if let Some(u) = &up {
            let slots: Vec<Arc<GpuSlot>> = lock(&shared.slots)
                .iter()
                .take(u.device_count as usize)
                .cloned()
                .collect();
            for slot in slots {
                if slot.worker_running() {
                    continue;
                }
                let (n, g, s) = (u.nvml.clone(), u.generation.clone(), slot.clone());
                let (families, interval) = (cfg.families.clone(), cfg.interval);
                match spawn(&format!("nvml-gpu{}", slot.index), move || {
                    run_worker(n, s, g, families, interval)
                }) {
                    Ok(h) => *lock(&slot.worker) = Some(h),
                    Err(e) => {
                        tracing::error!(gpu = slot.index, error = %e, "cannot start GPU worker thread")
                    }
                }
            }
        }

        // Counted before the snapshot is built, so it holds at least these.
        let published: Vec<(Arc<GpuSlot>, u64)> = lock(&shared.slots)
            .iter()
            .take(up.as_ref().map_or(0, |u| u.device_count as usize))
            .map(|slot| (slot.clone(), slot.samples.load(Ordering::SeqCst)))
            .collect();
        let snapshot = build_snapshot(
            &shared,
            up.as_ref().map(|u| u.device_count),
            driver.clone(),
            cfg.stuck_deadline,
        );
        publish(Arc::new(snapshot));

        // Next round: as soon as every GPU has finished another sample (or
        // an initialization attempt ends), at the latest after an interval.
        let deadline = Instant::now() + cfg.interval;
        loop {
            if shared.stop.is_stopped() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let counts: Vec<(u64, u64)> = published
                .iter()
                .map(|(slot, n)| (*n, slot.samples.load(Ordering::SeqCst)))
                .collect();
            // Every GPU sampled again; or, after a start, the last GPUs
            // sampled for the first time (the others need not wait another
            // interval for their second sample).
            let round_done = !counts.is_empty()
                && (counts.iter().all(|(before, now)| now > before)
                    || (counts.iter().all(|(_, now)| *now > 0)
                        && counts.iter().any(|(before, now)| *before == 0 && *now > 0)));
            let init_due = up.is_none()
                && match &init {
                    Some(h) => h.is_finished(),
                    None => now >= next_attempt,
                };
            if round_done || init_due {
                break;
            }
            shared
                .sampled
                .wait((deadline - now).min(Duration::from_millis(50)));
        }
        if shared.stop.is_stopped() {
            break;
        }
    }
    if let Some(u) = up {
        u.generation.stop.stop();
    }
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name.to_string()).spawn(f)
}

fn build_snapshot(
    shared: &Shared,
    device_count: Option<u32>,
    driver: Option<DriverInfo>,
    deadline: Duration,
) -> Snapshot {
    let now = Instant::now();
    let nvml_up = device_count.is_some();
    let slots = lock(&shared.slots).clone();
    let mut gpus = Vec::with_capacity(slots.len());
    for slot in &slots {
        let st = lock(&slot.state);
        let stuck_call = slot.tracker.stuck(now, deadline);
        slot.report_hang(stuck_call.as_ref(), deadline);
        let (health, readings) = if stuck_call.is_some() {
            (Health::Hung, None)
        } else if !nvml_up || device_count.is_some_and(|n| slot.index >= n) {
            (
                if st.health.is_some() {
                    Health::Failing
                } else {
                    Health::Pending
                },
                None,
            )
        } else {
            let h = st.health.unwrap_or(Health::Pending);
            (
                h,
                if h == Health::Up {
                    st.readings.clone()
                } else {
                    None
                },
            )
        };
        gpus.push(GpuState {
            index: slot.index,
            uuid: st.uuid.clone().unwrap_or_default(),
            identity: st.identity.clone(),
            health,
            last_sample: st.last_sample,
            sample_duration: st.sample_duration,
            stuck_call,
            readings,
            xids: st
                .xids
                .iter()
                .map(|(&(xid, gi, ci), &(count, last_seen))| XidCount {
                    xid,
                    gpu_instance: gi,
                    compute_instance: ci,
                    count,
                    last_seen,
                })
                .collect(),
            nvml_errors: st.errors.counts(),
            pods: Vec::new(),
        });
    }
    let ready = match device_count {
        Some(n) => {
            gpus.len() as u32 >= n
                && gpus
                    .iter()
                    .take(n as usize)
                    .all(|g| g.health != Health::Pending)
        }
        None => false,
    };
    Snapshot {
        nvml_up,
        ready,
        driver,
        gpus,
        kubernetes: None,
    }
}

fn run_worker(
    nvml: Arc<Nvml>,
    slot: Arc<GpuSlot>,
    generation: Arc<Generation>,
    families: FamilySet,
    interval: Duration,
) {
    let nvml_ref: &Nvml = &nvml;
    let index = slot.index;
    slot.tracker.enter("info");
    let device = nvml_ref.device_by_index(index);
    slot.tracker.exit();
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            let mut st = lock(&slot.state);
            let first = st.errors.record("info", &super::errors::error_name(&e));
            st.health = Some(if matches!(e, NvmlError::GpuLost) {
                Health::Lost
            } else {
                Health::Failing
            });
            st.readings = None;
            if first {
                tracing::warn!(gpu = index, error = %e, "cannot get a handle for this GPU; retrying every interval");
            }
            drop(st);
            slot.samples.fetch_add(1, Ordering::SeqCst);
            generation.sampled.notify();
            generation.stop.wait(interval);
            return;
        }
    };
    let mut sampler = GpuSampler::new(nvml_ref, device, index, families, &slot.tracker);
    sampler.calls.errors = lock(&slot.state).errors.clone();
    // Read again after every (re-)initialization: a driver reload may have
    // renumbered the GPUs.
    let mut identity_known = false;
    let mut was_lost = lock(&slot.state).health == Some(Health::Lost);

    while !generation.stop.is_stopped() {
        let started = Instant::now();
        sampler.calls.lost = false;
        if !identity_known {
            let (uuid, identity) = sampler.identity();
            let mut st = lock(&slot.state);
            if let Some(u) = uuid {
                if st.uuid.as_ref().is_some_and(|old| *old != u) {
                    tracing::warn!(gpu = index, old = st.uuid.as_deref().unwrap_or(""), new = %u,
                        "a different GPU now has this index; its counts start afresh");
                    st.xids.clear();
                    st.errors = ErrorBook::default();
                    sampler.calls.errors = ErrorBook::default();
                }
                st.uuid = Some(u);
                st.identity = identity;
                identity_known = true;
            } else if st.identity == GpuIdentity::default() {
                st.identity = identity;
            }
        }
        let readings = sampler.sample();
        let took = started.elapsed();
        let calls = &sampler.calls;
        {
            let mut st = lock(&slot.state);
            st.errors = calls.errors.clone();
            if calls.lost {
                if !was_lost {
                    tracing::error!(
                        gpu = index,
                        uuid = st.uuid.as_deref().unwrap_or(""),
                        "GPU is lost (fell off the bus): readings withdrawn until it answers again"
                    );
                    was_lost = true;
                }
                st.health = Some(Health::Lost);
                st.readings = None;
            } else if calls.driver_gone {
                generation.driver_gone.store(true, Ordering::SeqCst);
                st.health = Some(Health::Failing);
                st.readings = None;
            } else if calls.answered_this_sample == 0 && calls.failed_this_sample > 0 {
                st.health = Some(Health::Failing);
                st.readings = None;
            } else if let Some(r) = readings {
                if was_lost {
                    tracing::info!(gpu = index, "GPU answers again after being lost");
                    was_lost = false;
                }
                st.mig_enabled = r.mig_mode.is_some_and(|m| m.current);
                st.health = Some(Health::Up);
                st.readings = Some(r);
                st.last_sample = Some(SystemTime::now());
                st.sample_duration = Some(took);
            }
        }
        slot.samples.fetch_add(1, Ordering::SeqCst);
        generation.sampled.notify();
        if calls.driver_gone {
            return;
        }
        if generation
            .stop
            .wait(interval.saturating_sub(started.elapsed()))
        {
            break;
        }
    }
}

fn run_xid(
    nvml: Arc<Nvml>,
    slots: Vec<Arc<GpuSlot>>,
    generation: Arc<Generation>,
    interval: Duration,
) {
    let nvml_ref: &Nvml = &nvml;
    let set = match EventSet::create(nvml_ref) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create an NVML event set: XID errors will not be counted");
            return;
        }
    };
    let mut handles: Vec<(usize, Arc<GpuSlot>)> = Vec::new();
    for slot in slots {
        let registered = nvml_ref
            .device_by_index(slot.index)
            .map(|d| raw::device_handle(&d))
            .and_then(|h| set.register(h, raw::XID_EVENT).map(|()| h));
        match registered {
            Ok(h) => handles.push((h as usize, slot)),
            Err(e) => {
                tracing::warn!(gpu = slot.index, error = %e, "cannot register for XID events on this GPU")
            }
        }
    }
    if handles.is_empty() {
        return;
    }
    let mut logged_failure = false;
    while !generation.stop.is_stopped() {
        match set.wait(XID_WAIT_MS) {
            Ok(ev) => {
                if ev.event_type & raw::XID_EVENT == 0 {
                    continue;
                }
                let id = |v: u32| if v == u32::MAX { None } else { Some(v) };
                match handles.iter().find(|(h, _)| *h == ev.device as usize) {
                    Some((_, slot)) => slot.record_xid(
                        ev.data,
                        id(ev.gpu_instance),
                        id(ev.compute_instance),
                        SystemTime::now(),
                    ),
                    None => {
                        tracing::warn!(xid = ev.data, "XID event from an unknown device handle")
                    }
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                if !logged_failure {
                    tracing::warn!(error = %e, "waiting for NVML events failed; retrying");
                    logged_failure = true;
                }
                if generation.stop.wait(interval) {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_wakes_sleepers() {
        let stop = Arc::new(Stop::default());
        let s = stop.clone();
        let h = std::thread::spawn(move || s.wait(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        stop.stop();
        assert!(h.join().unwrap());
        assert!(!Stop::default().wait(Duration::from_millis(1)));
    }

    #[test]
    fn xids_keep_instance_ids_only_on_mig_gpus() {
        let slot = GpuSlot::new(0);
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        slot.record_xid(79, Some(0), Some(0), t);
        slot.record_xid(79, Some(0), Some(0), t + Duration::from_secs(1));
        lock(&slot.state).mig_enabled = true;
        slot.record_xid(31, Some(3), Some(0), t);
        let st = lock(&slot.state);
        assert_eq!(
            st.xids.get(&(79, None, None)),
            Some(&(2, t + Duration::from_secs(1)))
        );
        assert_eq!(st.xids.get(&(31, Some(3), Some(0))), Some(&(1, t)));
    }

    #[test]
    fn a_hung_gpu_is_reported_without_readings_and_others_stay_up() {
        let shared = Shared::new();
        for i in 0..2 {
            let slot = Arc::new(GpuSlot::new(i));
            {
                let mut st = lock(&slot.state);
                st.uuid = Some(format!("GPU-{i}"));
                st.health = Some(Health::Up);
                st.readings = Some(GpuReadings {
                    power_usage_watts: Some(100.0),
                    ..Default::default()
                });
            }
            lock(&shared.slots).push(slot);
        }
        let slot1 = lock(&shared.slots)[1].clone();
        slot1.tracker.enter_at(
            "power",
            Instant::now() - Duration::from_secs(10),
            SystemTime::now(),
        );
        let snap = build_snapshot(&shared, Some(2), None, Duration::from_secs(5));
        assert!(snap.nvml_up && snap.ready);
        assert_eq!(snap.gpus[0].health, Health::Up);
        assert!(snap.gpus[0].readings.is_some());
        assert_eq!(snap.gpus[1].health, Health::Hung);
        assert!(snap.gpus[1].readings.is_none());
        assert_eq!(snap.gpus[1].uuid, "GPU-1");
        assert_eq!(
            snap.gpus[1].stuck_call.as_ref().map(|s| s.family),
            Some("power")
        );

        slot1.tracker.exit();
        let snap = build_snapshot(&shared, Some(2), None, Duration::from_secs(5));
        assert_eq!(snap.gpus[1].health, Health::Up);

        let down = build_snapshot(&shared, None, None, Duration::from_secs(5));
        assert!(!down.nvml_up && !down.ready);
        assert!(down
            .gpus
            .iter()
            .all(|g| g.health == Health::Failing && g.readings.is_none()));
    }
}
