//! The sampling threads and the state they share: one supervisor
//! (`supervisor.rs`: initializes NVML with backoff, starts workers,
//! publishes snapshots), one worker per GPU (`worker.rs`), one XID event
//! thread (`xid.rs`). `publish.rs` turns the shared state into a snapshot.
//!
//! A worker is only ever spawned for a GPU whose previous worker has
//! finished, so a GPU stuck in a driver call holds exactly one thread.

mod publish;
mod supervisor;
mod worker;
mod xid;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::errors::ErrorBook;
use super::watchdog::{lock, CallTracker};
use crate::snapshot::{GpuIdentity, GpuReadings, Health, StuckCall, XidOther, MAX_XID_CODE};

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
    xid_other: Option<XidOther>,
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
    /// `max_codes` label sets (each costs two series until restart).
    fn record_xid(
        &self,
        xid: u64,
        gi: Option<u32>,
        ci: Option<u32>,
        at: SystemTime,
        max_codes: usize,
    ) {
        let mut st = lock(&self.state);
        let (gi, ci) = if st.mig_enabled {
            (gi, ci)
        } else {
            (None, None)
        };
        let key = (xid, gi, ci);
        let in_range = (1..=MAX_XID_CODE).contains(&xid);
        if in_range && (st.xids.contains_key(&key) || st.xids.len() < max_codes) {
            let e = st.xids.entry(key).or_insert((0, at));
            e.0 += 1;
            e.1 = at;
            return;
        }
        let other = st.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: at,
        });
        other.last_seen = at;
        // Logged at the first fold of each kind, not per event: a driver
        // that floods codes must not flood the log instead.
        if in_range {
            other.over_limit += 1;
            if other.over_limit == 1 {
                tracing::warn!(gpu = self.index, xid, max_codes,
                    "this GPU already has --collector.xid.max-codes XID label sets; further new codes are counted as xid=\"other\"");
            }
        } else {
            other.out_of_range += 1;
            if other.out_of_range == 1 {
                tracing::warn!(gpu = self.index, xid,
                    "XID code outside NVIDIA's range (1 to {MAX_XID_CODE}); counted as xid=\"other\"");
            }
        }
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
        slot.record_xid(79, Some(0), Some(0), t, 64);
        slot.record_xid(79, Some(0), Some(0), t + Duration::from_secs(1), 64);
        lock(&slot.state).mig_enabled = true;
        slot.record_xid(31, Some(3), Some(0), t, 64);
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
            slot.record_xid(code, None, None, t, 2);
        }
        // A third label set: the same code on a MIG instance is one too.
        slot.record_xid(13, Some(1), Some(0), t, 2);
        slot.record_xid(79, None, None, t + Duration::from_secs(1), 2);
        // Known label sets keep counting past the limit.
        slot.record_xid(31, None, None, t, 2);
        for bad in [0, MAX_XID_CODE + 1, u64::from(u32::MAX), u64::MAX] {
            slot.record_xid(bad, None, None, t, 2);
        }
        let st = lock(&slot.state);
        assert_eq!(st.xids.len(), 2);
        assert_eq!(st.xids[&(13, None, None)].0, 2);
        assert_eq!(st.xids[&(31, None, None)].0, 2);
        let other = st.xid_other.as_ref().expect("folded events");
        assert_eq!((other.over_limit, other.out_of_range), (2, 4));
        assert_eq!(other.count(), 6);
        assert_eq!(other.last_seen, t);
        let total: u64 = st.xids.values().map(|v| v.0).sum::<u64>() + other.count();
        assert_eq!(total, 10, "every event is counted somewhere");
    }
}
