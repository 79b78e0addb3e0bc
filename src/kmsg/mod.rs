//! XIDs from the kernel log (`--collector.xid.kmsg`, `--path.kmsg`): the
//! second XID source beside NVML's events, for the codes NVML does not
//! deliver (79, 119, 120: NVIDIA/DCGM #162), for XIDs from before the
//! exporter started, and for NVSwitch SXIDs.
//!
//! A `kmsg` thread (`follow.rs`) reads the log from its oldest record and
//! follows it; the poller takes the XID events it finds once per round and
//! counts them on the GPU with that PCI address, once even when NVML
//! delivered the same event (`crate::nvml`, "XID dedupe"). SXIDs are
//! tallied here, per NVSwitch. Nothing here runs on the scrape path: a
//! scrape reads the last snapshot, and the poller only takes what the
//! thread queued.
//!
//! - `record.rs`: the `/dev/kmsg` record format;
//! - `message.rs`: what a message says (XID, SXID, driver load, reset);
//! - `pci.rs`: PCI addresses as the kernel and NVML spell them;
//! - `follow.rs`: the thread.

mod follow;
mod message;
mod pci;
mod record;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

pub use follow::last_seq;
pub use message::{
    Nvlink5Words, NvlinkErrWords, Xid, MAX_COMPUTE_INSTANCE_ID, MAX_GPU_INSTANCE_ID,
    NVSENTINEL_RESET_MARKER, RESET_MARKER,
};
pub use pci::PciAddress;
pub use record::format as format_record;

use crate::snapshot::{KernelLogProblem, KernelLogStatus, SxidCount};

pub const DEFAULT_PATH: &str = "/dev/kmsg";

/// Events waiting for the poller. Past this the thread stops reading until
/// they are taken: the memory bound of a burst (4,096 events of 136 bytes,
/// 544 KiB; a unit test holds it under 1 MiB). The poller takes them at
/// each round and, between rounds, as soon as `BACKLOG` are waiting (it
/// looks every 50 ms), so a storm is counted as it is logged, not at one
/// queue a round (issue 51; probe 6, D7: 4,096 a round was 820 XIDs a
/// second at the default interval).
const QUEUE_CAP: usize = 4096;
/// Events waiting past which the poller takes them before its round ends.
const BACKLOG: usize = QUEUE_CAP / 4;
/// NVSwitches tracked; SXIDs of further ones are counted as a problem.
/// An HGX baseboard has 4, a GB200 NVL72 compute tray sees none of its own.
const MAX_SWITCHES: usize = 64;
/// A read that has not returned after this long marks the log stalled.
const READ_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLogConfig {
    pub path: PathBuf,
    /// Distinct SXID codes per NVSwitch before further ones fold into
    /// `other` (`--collector.xid.max-codes`).
    pub max_codes: usize,
    /// Records up to this sequence number were counted by an earlier run
    /// of this boot (`crate::state`): skipped.
    pub resume_after: Option<u64>,
}

/// What the log says happened to a GPU, dated on this process's clock:
/// `at` is when the kernel logged it (its timestamp carried over), `wall`
/// the same moment in wall-clock time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    Xid {
        xid: Xid,
        at: Instant,
        wall: SystemTime,
        /// The major version of the driver that printed it, from the last
        /// module load line before it (NVLink5 lines changed encoding at
        /// R575); `None` where the log kept no load line.
        driver_major: Option<u32>,
    },
    /// The NVIDIA kernel module loaded: every GPU was initialized afresh.
    DriverLoaded {
        at: Instant,
    },
    /// A reset procedure recorded a GPU reset (`RESET_MARKER`), by PCI
    /// address or (NVSentinel) by UUID.
    GpuReset {
        gpu: PciAddress,
        at: Instant,
    },
    GpuResetUuid {
        uuid: String,
        at: Instant,
    },
}

/// The running reader.
#[derive(Debug)]
pub struct KernelLog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
}

impl KernelLog {
    /// Starts the `kmsg` thread. Only a thread that cannot be spawned is
    /// an error; a log that cannot be read is retried and reported in the
    /// status.
    pub fn start(config: KernelLogConfig) -> std::io::Result<Arc<KernelLog>> {
        let shared = Arc::new(Shared::new(config.max_codes));
        shared.state().resume_after = config.resume_after;
        let s = shared.clone();
        let path = config.path.clone();
        let thread = std::thread::Builder::new()
            .name("kmsg".into())
            .spawn(move || follow::run(&path, &s))?;
        shared.set_thread(thread.thread().clone());
        Ok(Arc::new(KernelLog {
            shared,
            thread: Mutex::new(Some(thread)),
            path: config.path,
        }))
    }

    /// `--path.kmsg`.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The events queued since the last call, oldest first.
    pub fn take(&self) -> Vec<LogEvent> {
        self.take_to().0
    }

    /// The events queued since the last call, oldest first, and the
    /// sequence number of the last record read: every record up to it has
    /// its event in this batch or an earlier one.
    pub fn take_to(&self) -> (Vec<LogEvent>, Option<u64>) {
        let mut st = self.shared.state();
        let full = st.events.len() >= QUEUE_CAP;
        let events = st.events.drain(..).collect();
        let read_to = st.read_to;
        drop(st);
        if full {
            // The thread waits for room: it may read on now.
            self.shared.wake();
        }
        (events, read_to)
    }

    /// Whether enough events wait that the poller should take them now,
    /// before its round ends (`BACKLOG`).
    pub fn backlog(&self) -> bool {
        self.shared.state().events.len() >= BACKLOG
    }

    /// Counts a problem found by the poller (an XID on a PCI address no
    /// GPU has).
    pub fn problem(&self, problem: KernelLogProblem, detail: &str) {
        self.shared.problem(problem, detail);
    }

    pub fn status(&self) -> KernelLogStatus {
        let stalled = self.shared.stalled();
        let st = self.shared.state();
        KernelLogStatus {
            up: st.open && !stalled,
            problems: st.problems.iter().map(|(p, n)| (*p, *n)).collect(),
            sxids: st
                .sxids
                .iter()
                .flat_map(|(switch, codes)| {
                    codes.iter().map(move |(code, n)| SxidCount {
                        switch: switch.to_string(),
                        sxid: *code,
                        count: *n,
                    })
                })
                .collect(),
            // The sampler's (`crate::nvml`), then the join step's.
            unnamed_evidence: None,
            unnamed_gpus: Vec::new(),
        }
    }

    /// Stops the thread; waits for it until `deadline` (a read stuck in a
    /// file system is left behind).
    pub fn shutdown(&self, deadline: Instant) {
        self.shared.stop();
        let Some(h) = lock(&self.thread).take() else {
            return;
        };
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
}

/// What the thread and the poller share.
#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::Thread>>,
    state: Mutex<State>,
    max_codes: usize,
}

#[derive(Debug, Default)]
struct State {
    events: VecDeque<LogEvent>,
    problems: BTreeMap<KernelLogProblem, u64>,
    /// Per switch: code (`None`: other) to count.
    sxids: BTreeMap<PciAddress, BTreeMap<Option<u64>, u64>>,
    open: bool,
    /// When the read now in progress started.
    reading_since: Option<Instant>,
    /// See `KernelLogConfig::resume_after`.
    resume_after: Option<u64>,
    /// The sequence number of the last record read.
    read_to: Option<u64>,
    stall_counted: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn new(max_codes: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            state: Mutex::default(),
            max_codes,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn set_thread(&self, t: std::thread::Thread) {
        *lock(&self.thread) = Some(t);
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Ends the thread's current sleep or wait for room.
    fn wake(&self) {
        if let Some(t) = lock(&self.thread).as_ref() {
            t.unpark();
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps up to `d`; true when stopped.
    fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            std::thread::park_timeout(until - now);
        }
        self.stopped()
    }

    fn set_open(&self, open: bool) {
        self.state().open = open;
    }

    fn queue_full(&self) -> bool {
        self.state().events.len() >= QUEUE_CAP
    }

    /// Waits until the poller has taken the queued events (`take_to` wakes
    /// the thread), looking again every `FOLLOW_PERIOD` at the latest;
    /// false when stopped.
    fn wait_for_room(&self) -> bool {
        while self.queue_full() {
            if self.stopped() {
                return false;
            }
            std::thread::park_timeout(follow::FOLLOW_PERIOD);
        }
        !self.stopped()
    }

    fn push(&self, event: LogEvent) {
        self.state().events.push_back(event);
    }

    fn resume_after(&self) -> Option<u64> {
        self.state().resume_after
    }

    fn read_to(&self, seq: u64) {
        self.state().read_to = Some(seq);
    }

    /// Runs a read, marking it in progress for the stall watch.
    fn timed_read<T>(&self, read: impl FnOnce() -> T) -> T {
        self.state().reading_since = Some(Instant::now());
        let out = read();
        let mut st = self.state();
        st.reading_since = None;
        st.stall_counted = false;
        out
    }

    /// Whether a read has been blocked past the deadline; counted (and
    /// logged) once per stall.
    fn stalled(&self) -> bool {
        let mut st = self.state();
        let stalled = st
            .reading_since
            .is_some_and(|t| t.elapsed() > READ_DEADLINE);
        if stalled && !st.stall_counted {
            st.stall_counted = true;
            drop(st);
            self.problem(
                KernelLogProblem::Stalled,
                "a read of the kernel log has not returned for 10 s: kernel-log XIDs are not counted until it does",
            );
        }
        stalled
    }

    /// Counts a problem; logs its first occurrence of each kind only, so a
    /// log full of garbage cannot flood ours.
    fn problem(&self, problem: KernelLogProblem, detail: &str) {
        let first = {
            let mut st = self.state();
            let n = st.problems.entry(problem).or_insert(0);
            *n += 1;
            *n == 1
        };
        if first {
            tracing::warn!(
                problem = problem.as_label(),
                "{detail} (counted in nvml_exporter_kernel_log_problems_total; logged once)"
            );
        }
    }

    fn sxid(&self, switch: PciAddress, code: u64) {
        let mut st = self.state();
        if !st.sxids.contains_key(&switch) && st.sxids.len() >= MAX_SWITCHES {
            drop(st);
            self.problem(
                KernelLogProblem::TooManySwitches,
                "SXIDs name more NVSwitches than the exporter tracks (64): those of further switches are not counted",
            );
            return;
        }
        let max_codes = self.max_codes;
        let codes = st.sxids.entry(switch).or_default();
        let known = codes.contains_key(&Some(code));
        let named = codes.keys().filter(|c| c.is_some()).count();
        let key = if code <= MAX_SXID_CODE && (known || named < max_codes) {
            Some(code)
        } else {
            None
        };
        *codes.entry(key).or_insert(0) += 1;
    }
}

/// Whether a kernel-log path saved in the state file names the log at
/// `path`: the same file under any spelling (`./k`, `d/../k`, a symlink to
/// it) is the same log, whose saved position holds. Compared by what the
/// paths resolve to, and literally where either cannot be resolved now.
/// Before, another spelling read the log again from its start, and records
/// dated within 2 s of the last counted one were taken as counted (issue
/// 51; probe 6, D12).
pub fn same_log(saved: &str, path: &std::path::Path) -> bool {
    let saved = std::path::Path::new(saved);
    if saved == path {
        return true;
    }
    match (std::fs::canonicalize(saved), std::fs::canonicalize(path)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Seconds since boot (`/proc/uptime`), the clock of the kernel log's
/// timestamps.
pub fn uptime() -> Option<f64> {
    std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// SXIDs are five decimal digits.
const MAX_SXID_CODE: u64 = 99_999;

#[cfg(test)]
mod tests;
