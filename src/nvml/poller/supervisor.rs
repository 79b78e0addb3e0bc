//! The supervisor thread. Each round it takes four steps, one job each:
//! bring NVML up (or wait for the next attempt), notice a driver that went
//! away, start a worker for every GPU without one, and publish a snapshot;
//! then it waits for the GPUs' next samples.

use super::super::fields::DriverBranch;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

use super::super::backoff::Backoff;
use super::super::library::{self, Loaded, ResolvedLibrary};
use super::super::watchdog::lock;
use super::super::PollerConfig;
use super::persist;
use super::publish::build_snapshot;
use super::{spawn, worker, xid, Generation, GpuSlot, Shared};
use crate::family::Family;
use crate::kmsg::{LogEvent, PciAddress};
use crate::snapshot::{DriverInfo, Health, KernelLogProblem, Snapshot};
use crate::state::{GpuRecord, KernelLogPosition, StateFile};
use crate::xid::{Clock, Unnamed, XidEvent, DEDUPE_WINDOW};
use std::collections::BTreeMap;

const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Takes each snapshot by value: the join step completes it in place.
pub type Publish = Arc<dyn Fn(Snapshot) + Send + Sync>;

/// Runs until `shared.stop`: publishes a snapshot every round, also while
/// NVML is down.
pub fn supervise(cfg: PollerConfig, lib: ResolvedLibrary, publish: Publish, shared: Arc<Shared>) {
    let mut s = Supervisor::new(cfg, lib, publish, shared);
    loop {
        let now = Instant::now();
        s.bring_up(now);
        s.notice_driver_gone(now);
        s.start_workers();
        let published = s.publish();
        s.wait_for_round(&published);
        if s.shared.stop.is_stopped() {
            break;
        }
    }
    if let Driver::Up(up) = &s.driver {
        up.generation.stop.stop();
    }
    s.save_state(true);
}

/// Where NVML stands.
enum Driver {
    /// Down; the next initialization attempt is due then.
    Down {
        next_attempt: Instant,
    },
    /// An `nvml-init` thread is loading and initializing the library.
    Starting(JoinHandle<Result<Loaded, String>>),
    Up(Up),
}

struct Up {
    nvml: Arc<Nvml>,
    branch: DriverBranch,
    generation: Arc<Generation>,
    device_count: u32,
}

struct Supervisor {
    cfg: PollerConfig,
    lib: ResolvedLibrary,
    publish: Publish,
    shared: Arc<Shared>,
    driver: Driver,
    backoff: Backoff,
    /// The driver last initialized; kept while NVML is down.
    info: Option<DriverInfo>,
    /// Why NVML is down, logged once per distinct reason.
    last_error: Option<String>,
    ever_up: bool,
    /// Kernel-log XIDs of addresses no named GPU has.
    unnamed: Unnamed,
    /// The kernel log's last record whose events have been counted.
    kernel_log_read_to: Option<u64>,
    /// Records of an earlier run of this boot, by UUID, until their GPU is
    /// named (kept in the file meanwhile).
    restored: BTreeMap<String, GpuRecord>,
    /// What the state file was last written with, less `restored`.
    saved: Option<StateFile>,
    /// `restored` changed since the state file was last written.
    absent_changed: bool,
    /// The kernel log is read from its start though an earlier run of this
    /// boot counted (its position did not carry over: `--path.kmsg`
    /// changed, or reading is newly switched on): what the restored counts
    /// hold is not counted again (issue 36).
    log_read_again: bool,
    /// Our clock against the boot's, read once: times in the state file
    /// are seconds since boot, the same each time they are written.
    clock: Option<Clock>,
    /// Every GPU of this run was named when the restored records were
    /// last claimed: those left are absent GPUs', to be aged.
    every_gpu_named: bool,
    /// When this process started, until the first snapshot is published.
    unpublished_since: Option<Instant>,
}

impl Supervisor {
    fn new(cfg: PollerConfig, lib: ResolvedLibrary, publish: Publish, shared: Arc<Shared>) -> Self {
        Supervisor {
            cfg,
            lib,
            publish,
            shared,
            driver: Driver::Down {
                next_attempt: Instant::now(),
            },
            backoff: Backoff::new(BACKOFF_INITIAL, BACKOFF_CAP),
            info: None,
            last_error: None,
            ever_up: false,
            unnamed: Unnamed::default(),
            kernel_log_read_to: None,
            restored: BTreeMap::new(),
            saved: None,
            absent_changed: true,
            log_read_again: false,
            clock: Clock::read(),
            every_gpu_named: false,
            unpublished_since: Some(Instant::now()),
        }
        .restoring()
    }

    /// Takes what an earlier run of this boot left in the state file.
    fn restoring(mut self) -> Self {
        let Some(file) = self
            .cfg
            .state
            .as_ref()
            .and_then(|s| lock(s).restored.take())
        else {
            return self;
        };
        // The reader resumes only on the same path (`app::run`).
        self.log_read_again = self.cfg.kernel_log.as_ref().is_some_and(|log| {
            file.kernel_log
                .as_ref()
                .is_none_or(|k| !crate::kmsg::same_log(&k.path, log.path()))
        });
        self.kernel_log_read_to = file.kernel_log.map(|k| k.read_to);
        if let Some(c) = &self.clock {
            self.unnamed.restore(&file.unnamed, c);
        }
        self.restored = file.gpus.into_iter().map(|g| (g.uuid.clone(), g)).collect();
        crate::state::hold_records(&mut self.restored, self.cfg.xid_max_codes);
        self
    }

    /// Adds each restored record to its GPU once NVML names it; a reading
    /// only a reset changes back that changed meanwhile is a reset made
    /// while the exporter was stopped.
    fn restore_named(&mut self) {
        if self.restored.is_empty() {
            return;
        }
        let clock = self.clock;
        // Whether what is left is only absent GPUs': judged in this same
        // pass, as the workers name GPUs meanwhile.
        self.every_gpu_named = self.device_count().is_some();
        for slot in self.shared.slots(self.device_count().unwrap_or(0)) {
            let mut st = lock(&slot.state);
            if st.uuid.is_none() {
                self.every_gpu_named = false;
            }
            let Some(rec) = st.uuid.as_ref().and_then(|u| self.restored.remove(u)) else {
                continue;
            };
            self.absent_changed = true;
            persist::restore(
                &mut st,
                &rec,
                clock.as_ref(),
                self.cfg.xid_max_codes,
                self.log_read_again,
            );
            // Sampled before the record was found: compare now.
            let evidence = match (&st.readings, &st.baseline) {
                (Some(now), Some(before)) => worker::reset_evidence(before, now),
                _ => None,
            };
            if evidence.is_some() {
                st.baseline = None;
            }
            drop(st);
            if evidence.is_some() {
                slot.note_reset(
                    Instant::now(),
                    "readings only a reset changes back changed while the exporter was stopped",
                );
            }
        }
    }

    /// Writes the state file when it says something new, and when
    /// `force`d (at shutdown).
    fn save_state(&mut self, force: bool) {
        let Some(store) = self.cfg.state.clone() else {
            return;
        };
        let clock = self.clock;
        let mut file = StateFile {
            kernel_log: self
                .cfg
                .kernel_log
                .as_ref()
                .zip(self.kernel_log_read_to)
                .map(|(log, read_to)| KernelLogPosition {
                    path: log.path().display().to_string(),
                    read_to,
                }),
            unnamed: clock.map_or_else(Vec::new, |c| self.unnamed.records(&c)),
            ..StateFile::default()
        };
        for slot in self.shared.slots(self.device_count().unwrap_or(0)) {
            if let Some(rec) = persist::record(&lock(&slot.state), clock.as_ref()) {
                file.gpus.push(rec);
            }
        }
        // GPUs not named in this run keep what an earlier one knew, within
        // bounds (`crate::state::age_absent`), once NVML has named every
        // GPU of this run: a record not yet claimed by one still sampling
        // for the first time is not an absent GPU's.
        if !self.restored.is_empty() && self.every_gpu_named {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let gone = crate::state::age_absent(&mut self.restored, now);
            if gone > 0 {
                self.absent_changed = true;
                tracing::info!(gone, kept = self.restored.len(),
                    "records of GPUs absent from this run dropped from the state file: those whose latest event is over 7 days old, then past the {} with the latest events",
                    crate::state::MAX_ABSENT_GPUS);
            }
        }
        // What was written is not written again; what failed is retried
        // next round, as the log line says. The absent GPUs' records are
        // compared by whether they changed, and moved into the file for
        // the write, not cloned each round.
        // ...unless the file was lost with its directory (`Store::rewrite_due`).
        if !force
            && !self.absent_changed
            && self.saved.as_ref() == Some(&file)
            && !lock(&store).rewrite_due()
        {
            return;
        }
        let present = file.gpus.len();
        while file.gpus.len() < crate::state::MAX_GPUS {
            let Some((_, rec)) = self.restored.pop_first() else {
                break;
            };
            file.gpus.push(rec);
        }
        let saved = lock(&store).save(&mut file);
        for rec in file.gpus.drain(present..) {
            self.restored.insert(rec.uuid.clone(), rec);
        }
        self.absent_changed = !saved;
        if saved {
            self.saved = Some(file);
        }
        if force {
            // At exit: the write is on its own thread; wait for it, bounded.
            lock(&store).flush(Duration::from_secs(2));
        }
    }

    fn device_count(&self) -> Option<u32> {
        match &self.driver {
            Driver::Up(up) => Some(up.device_count),
            _ => None,
        }
    }

    /// Step 1: starts an initialization attempt when one is due, and takes
    /// its outcome when it ends. Initialization runs on its own thread: a
    /// driver that blocks in `nvmlInit` must not stop the snapshots.
    fn bring_up(&mut self, now: Instant) {
        match &self.driver {
            Driver::Starting(h) if h.is_finished() => {
                let Driver::Starting(h) =
                    std::mem::replace(&mut self.driver, Driver::Down { next_attempt: now })
                else {
                    unreachable!("matched just above");
                };
                match h
                    .join()
                    .unwrap_or_else(|_| Err("NVML initialization panicked".into()))
                {
                    Ok(loaded) => self.came_up(loaded),
                    Err(why) => self.stays_down(why, now),
                }
            }
            Driver::Down { next_attempt } if now >= *next_attempt => {
                let lib = self.lib.clone();
                match spawn("nvml-init", move || library::initialize(&lib)) {
                    Ok(h) => self.driver = Driver::Starting(h),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start NVML initialization thread");
                        self.driver = Driver::Down {
                            next_attempt: now + self.backoff.next_delay(),
                        };
                    }
                }
            }
            _ => {}
        }
    }

    fn came_up(&mut self, loaded: Loaded) {
        let again = self.ever_up;
        tracing::info!(
            library = %loaded.library,
            driver_version = %loaded.driver.driver_version,
            gpus = loaded.device_count,
            "NVML {}",
            if self.ever_up || self.last_error.is_some() { "recovered" } else { "initialized" }
        );
        self.ever_up = true;
        self.last_error = None;
        self.backoff.reset();
        self.info = Some(loaded.driver);
        let up = Up {
            nvml: Arc::new(loaded.nvml),
            branch: loaded.branch,
            generation: Arc::new(Generation::new(self.shared.sampled.clone())),
            device_count: loaded.device_count,
        };
        {
            let mut slots = lock(&self.shared.slots);
            while (slots.len() as u32) < up.device_count {
                let i = slots.len() as u32;
                slots.push(Arc::new(GpuSlot::new(i)));
            }
        }
        if again {
            // NVML comes back only after the driver went away: a reload,
            // which initializes every GPU afresh.
            for slot in self.shared.slots(up.device_count) {
                slot.note_reset(
                    Instant::now(),
                    "NVML initialized again after the driver went away",
                );
            }
        }
        if self.cfg.families.contains(Family::Xid) {
            self.start_xid_thread(&up);
        }
        self.driver = Driver::Up(up);
    }

    fn stays_down(&mut self, why: String, now: Instant) {
        let delay = self.backoff.next_delay();
        if self.last_error.as_deref() == Some(why.as_str()) {
            tracing::debug!(
                retry_in_ms = delay.as_millis() as u64,
                "NVML still unavailable, as logged"
            );
        } else {
            tracing::error!(
                library = %self.lib.describe(),
                "NVML is unavailable: {why}; exporting nvml_exporter_nvml_up 0 and retrying (backoff up to {}s)",
                BACKOFF_CAP.as_secs()
            );
            self.last_error = Some(why);
        }
        self.driver = Driver::Down {
            next_attempt: now + delay,
        };
    }

    fn start_xid_thread(&self, up: &Up) {
        let slots = self.shared.slots(up.device_count);
        let (n, g, shared) = (up.nvml.clone(), up.generation.clone(), self.shared.clone());
        let cfg = xid::Config {
            interval: self.cfg.interval,
            deadline: self.cfg.stuck_deadline,
            max_codes: self.cfg.xid_max_codes,
        };
        match spawn("nvml-xid", move || xid::run(n, slots, g, shared, cfg)) {
            Ok(h) => *lock(&self.shared.xid) = Some(h),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the XID event thread")
            }
        }
    }

    /// Step 2: a worker that saw the driver go away ends its generation;
    /// NVML is then initialized again, with backoff.
    fn notice_driver_gone(&mut self, now: Instant) {
        let Driver::Up(up) = &self.driver else {
            return;
        };
        if !up.generation.driver_gone.load(Ordering::SeqCst) {
            return;
        }
        tracing::error!("NVML reports the driver is gone; re-initializing with backoff");
        up.generation.stop.stop();
        self.driver = Driver::Down {
            next_attempt: now + self.backoff.next_delay(),
        };
        self.last_error = Some("driver gone".into());
    }

    /// Step 3: a worker for every GPU whose previous worker has finished
    /// (a worker stuck in the driver is never doubled).
    fn start_workers(&self) {
        let Driver::Up(up) = &self.driver else {
            return;
        };
        for slot in self.shared.slots(up.device_count) {
            if slot.worker_running() {
                continue;
            }
            let (n, g, s) = (up.nvml.clone(), up.generation.clone(), slot.clone());
            let (schedule, interval) = (self.cfg.schedule.clone(), self.cfg.interval);
            let branch = up.branch;
            match spawn(&format!("nvml-gpu{}", slot.index), move || {
                worker::run(n, s, g, schedule, branch, interval)
            }) {
                Ok(h) => *lock(&slot.worker) = Some(h),
                Err(e) => {
                    tracing::error!(gpu = slot.index, error = %e, "cannot start GPU worker thread")
                }
            }
        }
    }

    /// Counts the XIDs the kernel log reader found on their GPUs, once
    /// every GPU has been sampled or is hung (its PCI address is then
    /// known, or will not be soon), and notes the resets the log shows.
    /// Until then they wait in the reader's queue. An XID of an address no
    /// named GPU has waits among the unnamed (`Unnamed`): it is counted on
    /// its GPU once NVML names it (a GPU hung since start), and decides a
    /// verdict keyed by the address while some GPU stays unnamed (one lost
    /// before the exporter started).
    fn take_kernel_log(&mut self) {
        let (Some(log), Driver::Up(up)) = (&self.cfg.kernel_log, &self.driver) else {
            return;
        };
        let now = Instant::now();
        let slots = self.shared.slots(up.device_count);
        let waiting = |s: &Arc<GpuSlot>| {
            s.pending() && s.tracker.stuck(now, self.cfg.stuck_deadline).is_none()
        };
        if slots.len() < up.device_count as usize || slots.iter().any(waiting) {
            return;
        }
        let addressed: Vec<(PciAddress, &Arc<GpuSlot>)> = slots
            .iter()
            .filter_map(|s| lock(&s.state).pci_address().map(|a| (a, s)))
            .collect();
        let find = |gpu: &PciAddress| {
            addressed
                .iter()
                .find(|(a, _)| a.same_device(gpu))
                .map(|(_, s)| *s)
        };
        let unknown = |gpu: &dyn std::fmt::Display| {
            log.problem(
                KernelLogProblem::UnknownGpu,
                &format!("the kernel log names GPU {gpu}, which NVML does not list (or whose address it cannot read)"),
            );
        };
        let nvml_major = self
            .info
            .as_ref()
            .and_then(|i| driver_major(&i.driver_version));
        let (events, read_to) = log.take_to();
        for event in events {
            match event {
                LogEvent::Xid {
                    xid,
                    at,
                    wall,
                    driver_major,
                    ..
                } => {
                    let e = XidEvent::from_kernel_log(&xid, at, wall, driver_major.or(nvml_major));
                    match find(&xid.gpu) {
                        Some(slot) => slot.record_xid(e, self.cfg.xid_max_codes),
                        None => {
                            unknown(&format_args!("PCI:{}", xid.gpu));
                            self.unnamed.push(xid.gpu, e);
                        }
                    }
                }
                LogEvent::DriverLoaded { at, .. } => {
                    for slot in &slots {
                        slot.note_reset(at, "the kernel log shows the NVIDIA module loading");
                    }
                    self.unnamed.reset_before(at);
                }
                LogEvent::GpuReset { gpu, at, .. } => match find(&gpu) {
                    Some(slot) => slot.note_reset(at, "the kernel log records a GPU reset"),
                    None => unknown(&format_args!("PCI:{gpu}")),
                },
                LogEvent::GpuResetUuid { uuid, at, .. } => {
                    let slot = slots
                        .iter()
                        .find(|s| lock(&s.state).uuid.as_deref() == Some(uuid.as_str()));
                    match slot {
                        Some(slot) => slot.note_reset(
                            at,
                            "the kernel log records a GPU reset by its UUID (NVSentinel's line)",
                        ),
                        None => unknown(&uuid),
                    }
                }
            }
        }
        // A GPU named since: the lines that waited for it count on it.
        for (gpu, slot) in &addressed {
            for e in self.unnamed.take(*gpu) {
                slot.record_xid(e, self.cfg.xid_max_codes);
            }
        }
        self.kernel_log_read_to = read_to.or(self.kernel_log_read_to);
    }

    /// Step 4: publishes a snapshot, by value, with the evidence its
    /// verdicts are judged from (the join step judges them). Returns each
    /// GPU's sample count as of just before it was built, so the next round
    /// can wait for newer ones.
    fn publish(&mut self) -> Vec<(Arc<GpuSlot>, u64)> {
        self.restore_named();
        self.take_kernel_log();
        // NVLink5 events NVML delivered wait for their log line while the
        // log is followed (it comes within the pairing window), else are
        // judged at once.
        // Read once a round: the status is built anew at each call.
        let log_status = self.cfg.kernel_log.as_ref().map(|log| log.status());
        let wait = match &log_status {
            Some(status) if status.up => DEDUPE_WINDOW,
            _ => Duration::ZERO,
        };
        let now = Instant::now();
        let published: Vec<(Arc<GpuSlot>, u64)> = self
            .shared
            .slots(self.device_count().unwrap_or(0))
            .into_iter()
            .map(|slot| {
                lock(&slot.state).ledger.settle(now, wait);
                let n = slot.samples.load(Ordering::SeqCst);
                (slot, n)
            })
            .collect();
        let mut snapshot = build_snapshot(
            &self.shared,
            self.device_count(),
            self.info.clone(),
            self.cfg.stuck_deadline,
            self.cfg.interval,
        );
        snapshot.kernel_log = log_status.map(|mut status| {
            // Only while some GPU cannot be named: otherwise the address is
            // no GPU of this node's.
            if snapshot.gpus.iter().any(|g| {
                g.identity.pci_bus_id.is_none()
                    && matches!(g.health, Health::Lost | Health::Failing | Health::Hung)
            }) {
                status.unnamed_evidence = Some(self.unnamed.evidence());
            }
            status
        });
        if self.may_publish(now) {
            (self.publish)(snapshot);
        }
        self.save_state(false);
        published
    }

    /// Nothing is published while NVML's first initialization is under
    /// way, so that /metrics answers 503 ("No sample taken yet"), not
    /// `nvml_up 0` for a driver that is only starting (issue 51). An
    /// initialization blocked past the stuck-call deadline is published
    /// as NVML down. GPUs not yet sampled have no series of their own
    /// (`collectors::info`).
    fn may_publish(&mut self, now: Instant) -> bool {
        let Some(since) = self.unpublished_since else {
            return true;
        };
        let starting = matches!(self.driver, Driver::Starting(_)) && !self.ever_up;
        if starting && now.saturating_duration_since(since) < self.cfg.stuck_deadline {
            return false;
        }
        self.unpublished_since = None;
        true
    }

    /// Waits until every GPU has finished another sample (or an
    /// initialization attempt is due or done), at the latest an interval.
    /// Meanwhile it takes the kernel log's events whenever a burst has
    /// queued `kmsg::BACKLOG` of them: the reader's queue is bounded, and a
    /// storm is counted as it is read rather than one queue a round.
    fn wait_for_round(&mut self, published: &[(Arc<GpuSlot>, u64)]) {
        let deadline = Instant::now() + self.cfg.interval;
        loop {
            if self.shared.stop.is_stopped() {
                return;
            }
            if self
                .cfg
                .kernel_log
                .as_ref()
                .is_some_and(|log| log.backlog())
            {
                self.take_kernel_log();
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let counts: Vec<(u64, u64)> = published
                .iter()
                .map(|(slot, n)| (*n, slot.samples.load(Ordering::SeqCst)))
                .collect();
            let init_due = match &self.driver {
                Driver::Down { next_attempt } => now >= *next_attempt,
                Driver::Starting(h) => h.is_finished(),
                Driver::Up(_) => false,
            };
            if round_done(&counts) || init_due {
                return;
            }
            self.shared
                .sampled
                .wait((deadline - now).min(Duration::from_millis(50)));
        }
    }
}

/// The major version of a driver version string: 580 of `580.159.04`.
fn driver_major(version: &str) -> Option<u32> {
    version.split('.').next()?.trim().parse().ok()
}

/// Given each GPU's sample count (when the last snapshot was built, now):
/// every GPU sampled again; or, after a start, the last GPUs sampled for
/// the first time (the others need not wait another interval for their
/// second sample).
fn round_done(counts: &[(u64, u64)]) -> bool {
    !counts.is_empty()
        && (counts.iter().all(|(before, now)| now > before)
            || (counts.iter().all(|(_, now)| *now > 0)
                && counts.iter().any(|(before, now)| *before == 0 && *now > 0)))
}

#[cfg(test)]
mod tests {
    use super::round_done;

    #[test]
    fn a_round_ends_when_every_gpu_sampled_again_or_the_last_first_sample_arrives() {
        assert!(!round_done(&[]));
        assert!(round_done(&[(3, 4), (5, 6)]));
        assert!(!round_done(&[(3, 4), (5, 5)]));
        // At start: GPU 0 already had its first sample, GPU 1 now has its
        // first: publish now rather than an interval later.
        assert!(round_done(&[(1, 1), (0, 1)]));
        assert!(!round_done(&[(1, 1), (0, 0)]));
    }
}
