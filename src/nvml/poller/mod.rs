//! The sampling threads and the state they share: one supervisor
//! (`supervisor.rs`: initializes NVML with backoff, starts workers,
//! publishes snapshots), one worker per GPU (`worker.rs`), one XID event
//! thread (`xid.rs`). `publish.rs` turns the shared state into a snapshot,
//! with the evidence the verdict is judged from (judged later, in the join
//! step: `crate::join`).
//!
//! A worker is only ever spawned for a GPU whose previous worker has
//! finished, so a GPU stuck in a driver call holds exactly one thread.

mod persist;
mod publish;
mod supervisor;
mod unnamed;
mod worker;
mod xid;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::driver_time::DriverTime;
use super::errors::ErrorBook;
use super::watchdog::{lock, CallTracker};
use crate::kmsg::PciAddress;
use crate::snapshot::{
    GpuIdentity, GpuReadings, Health, Remembered, StuckCall, XidClass, XidOther, XidSeen,
    MAX_XID_CODE,
};
use crate::verdict;

pub use supervisor::supervise;

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

/// An XID count's key: the XID, and the MIG GPU and compute instance it
/// came from (on MIG-enabled GPUs).
type XidKey = (u64, Option<u32>, Option<u32>);

/// Where an XID event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidSource {
    Nvml,
    KernelLog,
}

/// One XID event, from either source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEvent {
    pub code: u64,
    /// How it is judged: by its code, or as its NVLink5 line decodes.
    pub class: XidClass,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub source: XidSource,
    /// When it happened: received from NVML, or logged by the kernel.
    pub at: Instant,
    pub wall: SystemTime,
}

/// XID dedupe: the driver raises an XID through NVML and prints it to the
/// kernel log at the same moment. An event from one source pairs with an
/// unpaired event of the other source of the same code on the same GPU
/// (and the same MIG instance, where both name one) that happened within
/// `DEDUPE_WINDOW` of it; a pair counts once. NVML events are dated when
/// received (within 200 ms), log records by their kernel timestamp, read
/// through the uptime clock and corrected by the skew measured on records
/// read as they are logged.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(10);
/// Events kept for pairing: long enough for the kernel log reader to catch
/// up after NVML (it queues records until the poller takes them, once a
/// round), few enough to stay small under an XID storm, past which an
/// event may count twice.
const DEDUPE_KEEP: Duration = Duration::from_secs(300);
const DEDUPE_MAX: usize = 256;
/// NVLink5 events from NVML waiting for the kernel-log line that decodes
/// them; past this the oldest is judged undecoded at once.
const AWAITING_MAX: usize = 64;
/// What the verdict reads, per GPU: past this, an event of a new code and
/// MIG instance is kept under its code alone (judged on the GPU).
const LATEST_MAX: usize = 256;

#[derive(Debug, Clone, Copy)]
struct Recent {
    key: XidKey,
    source: XidSource,
    at: Instant,
    paired: bool,
}

#[derive(Default)]
struct SlotState {
    uuid: Option<String>,
    identity: GpuIdentity,
    health: Option<Health>,
    last_sample: Option<SystemTime>,
    sample_duration: Option<Duration>,
    /// Shared with the snapshots that show them: a poll publishes the
    /// readings without copying them, and they stay here while the GPU is
    /// hung or slow.
    readings: Option<Arc<GpuReadings>>,
    mig_enabled: bool,
    errors: ErrorBook,
    driver_time: DriverTime,
    xids: BTreeMap<XidKey, (u64, SystemTime)>,
    xid_other: Option<XidOther>,
    /// Recent events, for pairing the two sources.
    recent: VecDeque<Recent>,
    /// The latest event of each code NVIDIA's catalog lists and class
    /// that asks for something (bounded by the catalog), whether or not its
    /// count was folded: what the verdict reads.
    xid_latest: BTreeMap<(XidKey, XidClass), Instant>,
    /// NVLink5 events NVML delivered, waiting (at most `AWAITING_MAX`) for
    /// their kernel-log line: NVML carries the code alone.
    awaiting: VecDeque<(XidKey, Instant)>,
    /// What NVML may stop showing, kept until the next boot.
    remembered: Remembered,
    /// The latest GPU reset known (`verdict`, "A GPU reset is known").
    last_reset: Option<Instant>,
    /// Restored from an earlier run of this boot: the readings only a
    /// reset changes back, which the first sample is compared with.
    baseline: Option<GpuReadings>,
    /// Where the kernel log is read again from its start after a restart
    /// (`Supervisor::log_read_again`): per code, the latest event the
    /// restored counts hold. A log record of that code no later is one
    /// they counted already.
    counted_through: BTreeMap<XidKey, SystemTime>,
}

/// A log record dated this little after the latest counted event of its
/// code is the same event: the kernel's timestamp and NVML's arrival time
/// of one event differ by milliseconds.
const COUNTED_SLACK: Duration = Duration::from_secs(2);

impl SlotState {
    /// Records what `rec`'s counts hold, so that the kernel log read again
    /// does not count it twice.
    fn skip_counted(&mut self, rec: &crate::state::GpuRecord) {
        for x in &rec.xids {
            let seen = persist::system_time(x.last_seen);
            let t = self
                .counted_through
                .entry((x.code, x.gpu_instance, x.compute_instance))
                .or_insert(seen);
            *t = (*t).max(seen);
        }
    }

    /// The GPU's PCI address, once its identity has been read.
    fn pci_address(&self) -> Option<PciAddress> {
        self.identity
            .pci_bus_id
            .as_deref()
            .and_then(PciAddress::parse)
    }

    fn xids_seen(&self) -> Vec<XidSeen> {
        self.xid_latest
            .iter()
            .map(
                |(&((code, gpu_instance, compute_instance), class), &at)| XidSeen {
                    code,
                    class,
                    gpu_instance,
                    compute_instance,
                    at,
                },
            )
            .collect()
    }

    /// Keeps the latest event of a code and class the verdict may act on.
    fn note_latest(&mut self, key: XidKey, class: XidClass, at: Instant) {
        // Kept too: an event at action none whose reason says what
        // evidence it lacked (NVLink5 without its line).
        if verdict::xid_class_action(key.0, class).is_none_or(|(a, reason)| {
            a == crate::snapshot::Action::None && !verdict::is_note(reason)
        }) {
            return;
        }
        let full = self.xid_latest.len() >= LATEST_MAX;
        let key = if full && !self.xid_latest.contains_key(&(key, class)) {
            (key.0, None, None)
        } else {
            key
        };
        let latest = self.xid_latest.entry((key, class)).or_insert(at);
        *latest = (*latest).max(at);
    }

    /// NVLink5 events NVML delivered at least `wait` ago whose line never
    /// came are judged without the kernel log.
    fn settle(&mut self, now: Instant, wait: Duration) {
        while let Some(&(key, at)) = self.awaiting.front() {
            if now.saturating_duration_since(at) < wait {
                break;
            }
            self.awaiting.pop_front();
            self.note_latest(key, verdict::class_without_line(key.0), at);
        }
    }

    /// Pairs `e` with an event of the other source; the partner, if `e` is
    /// the second of a pair (counted already).
    fn pair(&mut self, key: XidKey, e: &XidEvent) -> Option<Recent> {
        if let Some(keep_from) = Instant::now().checked_sub(DEDUPE_KEEP) {
            self.recent.retain(|r| r.at >= keep_from);
        }
        let same = |a: Option<u32>, b: Option<u32>| a.is_none() || b.is_none() || a == b;
        let partner = self.recent.iter_mut().find(|r| {
            !r.paired
                && r.source != e.source
                && r.key.0 == key.0
                && same(r.key.1, key.1)
                && same(r.key.2, key.2)
                && r.at.max(e.at).duration_since(r.at.min(e.at)) <= DEDUPE_WINDOW
        });
        if let Some(r) = partner {
            r.paired = true;
            return Some(*r);
        }
        if self.recent.len() >= DEDUPE_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            key,
            source: e.source,
            at: e.at,
            paired: false,
        });
        None
    }
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

    /// Counts an XID event under its own label set, or folds it into
    /// `other` when the code is out of range or the GPU already has
    /// `max_codes` label sets (each costs two series until restart). The
    /// second event of a pair from the two sources is not counted again.
    fn record_xid(&self, e: XidEvent, max_codes: usize) {
        let mut st = lock(&self.state);
        let (gi, ci) = if st.mig_enabled {
            (e.gpu_instance, e.compute_instance)
        } else {
            (None, None)
        };
        let key = (e.code, gi, ci);
        if e.code == 64 && st.mig_enabled && !st.remembered.mig_remap_failure {
            // NVML hides the remap flags of a MIG-enabled GPU: this XID is
            // the one sign of a failed remap there (`verdict::Remembered`).
            st.remembered.mig_remap_failure = true;
        }
        if e.source == XidSource::KernelLog
            && st
                .counted_through
                .get(&key)
                .is_some_and(|t| e.wall <= *t + COUNTED_SLACK)
        {
            // Counted by an earlier run of this boot, whose restored
            // counts hold it.
            return;
        }
        // NVML's event of a code decided by its line (NVLink5, 74) waits
        // for that line.
        let nvlink5_from_nvml = e.source == XidSource::Nvml && verdict::decided_by_line(e.code);
        if let Some(partner) = st.pair(key, &e) {
            // Counted already. The log's line of an NVLink5 event NVML
            // delivered first decodes it.
            if partner.source == XidSource::Nvml && verdict::decided_by_line(e.code) {
                if let Some(i) = st
                    .awaiting
                    .iter()
                    .position(|&(k, at)| k == partner.key && at == partner.at)
                {
                    st.awaiting.remove(i);
                    st.note_latest(partner.key, e.class, partner.at);
                }
            }
            return;
        }
        if nvlink5_from_nvml {
            if st.awaiting.len() >= AWAITING_MAX {
                if let Some((k, at)) = st.awaiting.pop_front() {
                    st.note_latest(k, verdict::class_without_line(k.0), at);
                }
            }
            st.awaiting.push_back((key, e.at));
        } else {
            st.note_latest(key, e.class, e.at);
        }
        let xid = e.code;
        let in_range = (1..=MAX_XID_CODE).contains(&xid);
        if in_range && (st.xids.contains_key(&key) || st.xids.len() < max_codes) {
            let c = st.xids.entry(key).or_insert((0, e.wall));
            // Saturates: a counter never goes backwards, even from a
            // restored count at u64::MAX.
            c.0 = c.0.saturating_add(1);
            c.1 = c.1.max(e.wall);
            return;
        }
        let other = st.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: e.wall,
        });
        other.last_seen = other.last_seen.max(e.wall);
        // Logged at the first fold of each kind, not per event: a driver
        // that floods codes must not flood the log instead.
        if in_range {
            other.over_limit = other.over_limit.saturating_add(1);
            if other.over_limit == 1 {
                tracing::warn!(gpu = self.index, xid, max_codes,
                    "this GPU already has --collector.xid.max-codes XID label sets; further new codes are counted as xid=\"other\"");
            }
        } else {
            other.out_of_range = other.out_of_range.saturating_add(1);
            if other.out_of_range == 1 {
                tracing::warn!(gpu = self.index, xid,
                    "XID code outside NVIDIA's range (1 to {MAX_XID_CODE}); counted as xid=\"other\"");
            }
        }
    }

    /// Records a GPU reset at `at` (XIDs before it no longer ask for one).
    fn note_reset(&self, at: Instant, evidence: &str) {
        let mut st = lock(&self.state);
        if st.last_reset.is_some_and(|r| r >= at) {
            return;
        }
        st.last_reset = Some(at);
        drop(st);
        tracing::info!(
            gpu = self.index,
            evidence,
            "GPU reset: XIDs before it no longer ask for one"
        );
    }

    /// Not sampled yet since start: its identity may still be unknown.
    fn pending(&self) -> bool {
        lock(&self.state)
            .health
            .is_none_or(|h| h == Health::Pending)
    }

    fn worker_running(&self) -> bool {
        lock(&self.worker)
            .as_ref()
            .is_some_and(|h| !h.is_finished())
    }

    /// Counts a finished (or failed) sample and wakes the publisher.
    fn sampled(&self, generation: &Generation) {
        self.samples.fetch_add(1, Ordering::SeqCst);
        generation.sampled.notify();
    }
}

/// State the supervisor shares with `Poller::shutdown`.
pub struct Shared {
    pub stop: Stop,
    sampled: Arc<Notify>,
    slots: Mutex<Vec<Arc<GpuSlot>>>,
    xid: Mutex<Option<JoinHandle<()>>>,
    /// When the XID thread last completed a wait (`xid.rs`); `None` while
    /// it does not run.
    xid_last_wait: Mutex<Option<SystemTime>>,
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            stop: Stop::default(),
            sampled: Arc::default(),
            slots: Mutex::new(Vec::new()),
            xid: Mutex::new(None),
            xid_last_wait: Mutex::new(None),
        }
    }

    /// The slots of the first `count` GPUs.
    fn slots(&self, count: u32) -> Vec<Arc<GpuSlot>> {
        lock(&self.slots)
            .iter()
            .take(count as usize)
            .cloned()
            .collect()
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

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name.to_string()).spawn(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event from NVML, received now, with the wall time `wall`.
    fn nvml_event(code: u64, gi: Option<u32>, ci: Option<u32>, wall: SystemTime) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: gi,
            compute_instance: ci,
            source: XidSource::Nvml,
            at: Instant::now(),
            wall,
        }
    }

    fn event(code: u64, gi: Option<u32>, source: XidSource, at: Instant) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: gi,
            compute_instance: gi.map(|_| 0),
            source,
            at,
            wall: SystemTime::now(),
        }
    }

    fn count(slot: &GpuSlot, code: u64) -> u64 {
        lock(&slot.state)
            .xids
            .iter()
            .filter(|(k, _)| k.0 == code)
            .map(|(_, v)| v.0)
            .sum()
    }

    #[test]
    fn an_xid_seen_by_nvml_and_in_the_kernel_log_counts_once() {
        use XidSource::{KernelLog, Nvml};
        let slot = GpuSlot::new(0);
        // Dated ahead of the clock, so that "an hour earlier" exists on a
        // machine up for less than an hour.
        let secs = Duration::from_secs;
        let now = Instant::now() + secs(4000);
        // NVML first, the log's record of it (logged a moment earlier) later.
        slot.record_xid(event(79, None, Nvml, now), 64);
        slot.record_xid(
            event(79, None, KernelLog, now.checked_sub(secs(1)).unwrap()),
            64,
        );
        assert_eq!(count(&slot, 79), 1);
        // The log first, NVML later.
        slot.record_xid(event(48, None, KernelLog, now), 64);
        slot.record_xid(event(48, None, Nvml, now + secs(2)), 64);
        assert_eq!(count(&slot, 48), 1);
        // A storm seen by both: pairs, one to one.
        for _ in 0..3 {
            slot.record_xid(event(13, None, Nvml, now), 64);
        }
        for _ in 0..3 {
            slot.record_xid(event(13, None, KernelLog, now), 64);
        }
        assert_eq!(count(&slot, 13), 3);
        // Outside the window, or from the same source: two events.
        slot.record_xid(
            event(79, None, KernelLog, now + DEDUPE_WINDOW + secs(5)),
            64,
        );
        assert_eq!(count(&slot, 79), 2);
        slot.record_xid(event(31, None, Nvml, now), 64);
        slot.record_xid(event(31, None, Nvml, now), 64);
        assert_eq!(count(&slot, 31), 2);
        // A record from long before (read at start) pairs with nothing.
        slot.record_xid(
            event(94, None, KernelLog, now.checked_sub(secs(3600)).unwrap()),
            64,
        );
        slot.record_xid(event(94, None, Nvml, now), 64);
        assert_eq!(count(&slot, 94), 2);
    }

    #[test]
    fn dedupe_matches_a_log_line_without_an_instance_to_the_instances_event() {
        use XidSource::{KernelLog, Nvml};
        let slot = GpuSlot::new(0);
        lock(&slot.state).mig_enabled = true;
        let now = Instant::now();
        slot.record_xid(event(31, Some(3), Nvml, now), 64);
        slot.record_xid(event(31, None, KernelLog, now), 64);
        slot.record_xid(event(31, Some(4), KernelLog, now), 64);
        let st = lock(&slot.state);
        assert_eq!(st.xids[&(31, Some(3), Some(0))].0, 1);
        assert_eq!(
            st.xids[&(31, Some(4), Some(0))].0,
            1,
            "another instance: another event"
        );
        assert!(!st.xids.contains_key(&(31, None, None)));
        // The verdict's record keeps the catalogued codes.
        assert_eq!(st.xid_latest.len(), 2);
    }

    #[test]
    fn an_nvlink5_event_from_nvml_waits_for_its_log_line_then_is_judged_without_it() {
        use XidSource::{KernelLog, Nvml};
        let slot = GpuSlot::new(0);
        let now = Instant::now();
        let nvlink5 = |source, class, at| XidEvent {
            class,
            ..event(145, None, source, at)
        };
        // NVML first: nothing decided yet; the log's non-fatal line pairs
        // with it and decides: nothing to do.
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, now), 64);
        assert!(lock(&slot.state).xids_seen().is_empty());
        slot.record_xid(nvlink5(KernelLog, XidClass::Nvlink5Nothing, now), 64);
        lock(&slot.state).settle(now + DEDUPE_WINDOW * 2, DEDUPE_WINDOW);
        assert!(lock(&slot.state).xids_seen().is_empty());
        assert_eq!(count(&slot, 145), 1);
        // A fatal line decides a reset.
        let later = now + Duration::from_secs(60);
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, later), 64);
        slot.record_xid(nvlink5(KernelLog, XidClass::Nvlink5Fatal, later), 64);
        let seen = lock(&slot.state).xids_seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].class, XidClass::Nvlink5Fatal);
        // No line within the window: judged without the kernel log (kept
        // for its reason, asking for nothing).
        let last = later + Duration::from_secs(60);
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, last), 64);
        lock(&slot.state).settle(last + Duration::from_secs(1), DEDUPE_WINDOW);
        assert_eq!(lock(&slot.state).xids_seen().len(), 1, "still waiting");
        lock(&slot.state).settle(last + DEDUPE_WINDOW, DEDUPE_WINDOW);
        let seen = lock(&slot.state).xids_seen();
        assert!(seen.iter().any(|x| x.class == XidClass::Nvlink5NoKernelLog));
        assert_eq!(count(&slot, 145), 3);
    }

    #[test]
    fn what_the_verdict_reads_stays_bounded() {
        let slot = GpuSlot::new(0);
        lock(&slot.state).mig_enabled = true;
        let now = Instant::now();
        for gi in 0..15 {
            for ci in 0..8 {
                for code in [13, 31, 43, 48, 119] {
                    let e = XidEvent {
                        compute_instance: Some(ci),
                        ..event(code, Some(gi), XidSource::KernelLog, now)
                    };
                    slot.record_xid(e, 64);
                }
            }
        }
        let st = lock(&slot.state);
        assert!(
            st.xid_latest.len() <= LATEST_MAX + 4,
            "{}",
            st.xid_latest.len()
        );
        // Past the bound, each code lands on the GPU: none is forgotten.
        for code in [13, 31, 48, 119] {
            assert!(
                st.xid_latest.keys().any(|((c, _, _), _)| *c == code),
                "{code}"
            );
        }
    }

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
        slot.record_xid(nvml_event(79, Some(0), Some(0), t), 64);
        slot.record_xid(
            nvml_event(79, Some(0), Some(0), t + Duration::from_secs(1)),
            64,
        );
        lock(&slot.state).mig_enabled = true;
        slot.record_xid(nvml_event(31, Some(3), Some(0), t), 64);
        let st = lock(&slot.state);
        assert_eq!(
            st.xids.get(&(79, None, None)),
            Some(&(2, t + Duration::from_secs(1)))
        );
        assert_eq!(st.xids.get(&(31, Some(3), Some(0))), Some(&(1, t)));
    }

    #[test]
    fn xids_past_the_limit_or_out_of_range_fold_into_other() {
        let slot = GpuSlot::new(0);
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        lock(&slot.state).mig_enabled = true;
        for code in [13, 31, 13] {
            slot.record_xid(nvml_event(code, None, None, t), 2);
        }
        // A third label set: the same code on a MIG instance is one too.
        slot.record_xid(nvml_event(13, Some(1), Some(0), t), 2);
        slot.record_xid(nvml_event(79, None, None, t + Duration::from_secs(1)), 2);
        // Known label sets keep counting past the limit.
        slot.record_xid(nvml_event(31, None, None, t), 2);
        for bad in [0, MAX_XID_CODE + 1, u64::from(u32::MAX), u64::MAX] {
            slot.record_xid(nvml_event(bad, None, None, t), 2);
        }
        let st = lock(&slot.state);
        assert_eq!(st.xids.len(), 2);
        assert_eq!(st.xids[&(13, None, None)].0, 2);
        assert_eq!(st.xids[&(31, None, None)].0, 2);
        let other = st.xid_other.as_ref().expect("folded events");
        assert_eq!((other.over_limit, other.out_of_range), (2, 4));
        assert_eq!(other.count(), 6);
        assert_eq!(
            other.last_seen,
            t + Duration::from_secs(1),
            "the latest folded event"
        );
        let total: u64 = st.xids.values().map(|v| v.0).sum::<u64>() + other.count();
        assert_eq!(total, 10, "every event is counted somewhere");
    }
}
