//! The sampling threads and the state they share: one supervisor
//! (`supervisor.rs`: initializes NVML with backoff, starts workers,
//! publishes snapshots), one worker per GPU (`worker.rs`), one XID event
//! thread (`xid.rs`); each GPU's XIDs, from that thread and the kernel
//! log, are routed to its slot's ledger (`crate::xid`). `publish.rs` turns the shared state into a snapshot,
//! with the evidence the verdict is judged from (judged later, in the join
//! step: `crate::join`).
//!
//! A worker is only ever spawned for a GPU whose previous worker has
//! finished, so a GPU stuck in a driver call holds exactly one thread.

mod persist;
mod publish;
mod supervisor;
mod worker;
mod xid;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::driver_time::DriverTime;
use super::errors::ErrorBook;
use super::watchdog::{lock, CallTracker};
use crate::kmsg::PciAddress;
use crate::snapshot::{GpuIdentity, GpuReadings, Health, Remembered, StuckCall};
use crate::xid::{Ledger, XidEvent};

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
    /// The GPU's XIDs: counts, pairs, what the verdict reads.
    ledger: Ledger,
    /// What NVML may stop showing, kept until the next boot.
    remembered: Remembered,
    /// The latest GPU reset known (`verdict`, "A GPU reset is known").
    last_reset: Option<Instant>,
    /// Restored from an earlier run of this boot: the readings only a
    /// reset changes back, which the first sample is compared with.
    baseline: Option<GpuReadings>,
}

impl SlotState {
    /// The GPU's PCI address, once its identity has been read.
    fn pci_address(&self) -> Option<PciAddress> {
        self.identity
            .pci_bus_id
            .as_deref()
            .and_then(PciAddress::parse)
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

    /// Counts an XID event on this GPU's ledger (`Ledger::record`), and
    /// remembers what the ledger says it showed.
    fn record_xid(&self, e: XidEvent, max_codes: usize) {
        let mut st = lock(&self.state);
        let mig_enabled = st.mig_enabled;
        if st
            .ledger
            .record(e, mig_enabled, max_codes, self.index)
            .mig_remap_failure
        {
            st.remembered.mig_remap_failure = true;
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
}
