//! Sampling NVML in the background. The only module that imports
//! `nvml_wrapper`: everything it learns leaves as a plain `Snapshot`.
//!
//! See docs/design.md ("Sampling") for the thread layout and why a stuck
//! driver call never costs more than one thread per GPU.
//!
//! # Modules
//! - `library`: which libnvidia-ml to load, and loading it;
//! - `poller/`: the threads (supervisor, one worker per GPU, XID events)
//!   and the snapshot they publish, by value, with the evidence its
//!   verdicts are judged from;
//! - `sampler/`: one GPU's poll, one file per family group, named like its
//!   collector in `src/collectors/`;
//! - `calls`: how every NVML call is made, counted and cached;
//! - `raw`: the only `unsafe`, NVML calls nvml-wrapper does not wrap;
//! - `fields`, `units`, `errors`, `watchdog`, `backoff`: field ids, unit
//!   conversions, error classes, stuck-call detection, retry delays.
//!
//! # Threads
//! `nvml-poller` (initializes NVML with backoff 1 s doubling to 30 s, spawns
//! workers, takes the kernel log's XIDs, publishes a snapshot every interval),
//! one `nvml-gpuN` per GPU, one `nvml-xid` (event set, 200 ms waits), and a
//! short-lived `nvml-init` per initialization attempt. The `kmsg` thread
//! (`crate::kmsg`) is the app's, not the poller's. A worker is spawned only for
//! a GPU whose previous worker has finished.
//!
//! # NVML calls per GPU per poll (default families)
//! Whole GPU: one `nvmlDeviceGetFieldValues` with the scalar fields (memory
//! temperature, PCIe tx/rx bytes and replay counter, energy, ECC totals,
//! retired pages, remapped rows, recovery action, throttle durations, module
//! and memory power by scope id, power smoothing lifetime; per-location ECC
//! counters only with `ecc.by-location`; with `c2c`, the NVLink-C2C link
//! count in the first poll, then each link's status and error counters,
//! scope id = link, on Grace boards only), one `nvmlDeviceGetFieldValues` with
//! the per-link NVLink fields (state, traffic, and the error counters of the
//! GPU's NVLink generation: replay, recovery, CRC up to Hopper, link recovery,
//! effective and symbol errors on Blackwell; scope id = link),
//! persistence/display/compute mode (3, every 12 polls), MIG mode (1, every
//! 12 polls: the utilization rates, asked every poll, say when it flipped), utilization
//! rates/encoder/decoder/JPEG/OFA (5), `nvmlGpmSampleGet` + `nvmlGpmMetricsGet`
//! (2, Hopper+; the four default metrics, all only with `gpm.all-metrics`),
//! memory v2 + BAR1 (2), temperature (1: `nvmlDeviceGetTemperatureV` where
//! exported; plus the T.Limit margin where no absolute slowdown threshold is
//! reported), power usage/enforced/management limit (3), clocks (4) and P-state
//! (1), current clock event reasons (1, the ClocksEventReasons call where
//! exported), PCIe current generation/width (2), ECC mode (1) and, with
//! `ecc.by-location` only, `nvmlDeviceGetMemoryErrorCounter` for location
//! counters the field batch lacks (SRAM on H100: 4;
//! `tests/sampler/detail_calls.rs`), processes (compute and graphics, 1 call
//! each, more only when a list outgrows the first buffer:
//! `RunningProcessDetailList` where the branch exports it, else the `_v3` list
//! in a buffer sized for R535's larger entries), the row remapper histogram,
//! SRAM error status and fabric info (3: RMA signals and NVSwitch registration
//! and health, which no field id carries; fabric info through
//! `nvmlDeviceGetGpuFabricInfoV`, v3 then v2, the version that answered kept).
//! Values that only change on reconfiguration (thresholds, max clocks, power
//! limit default/min/max, maximum PCIe link, supported throttle reasons, fan
//! count, NVLink link count, GPM support, T.Limit margin thresholds and module
//! power limits where read) are re-read every 60 polls; calls that answered
//! "not supported" are skipped until then. A MIG GPU skips the utilization
//! calls but the rates (NVML does not support them there; their refusal is
//! the MIG mode's signal) and adds
//! `nvmlDeviceGetMigDeviceHandleByIndex` per MIG slot, UUID per MIG device,
//! memory per GPU instance and two GPM calls per GPU instance; instance ids and
//! names are read once per MIG device UUID. Identity (9 calls) is read once per
//! GPU and per NVML initialization. The simulator's counters put the dgx-h100
//! fleet (GPUs 0 and 1 in MIG mode) at about 38 calls per GPU per poll on
//! average (`tests/sampler/call_counts.rs` prints the breakdown).
//!
//! # Counters
//! Counters are exported as NVML reports them, never rebased. They go
//! backwards only when NVML's own counter resets: volatile ECC counts on a
//! driver reload or GPU reset, energy, PCIe and NVLink counters on a driver
//! reload. XID counts and `nvml_errors` are the exporter's own: they survive
//! lost, hung and restarted drivers and reset only when the exporter does.

mod backoff;
mod calls;
mod driver_time;
mod errors;
mod fields;
mod library;
mod poller;
mod raw;
mod sampler;
mod units;
mod watchdog;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::family::FamilySet;
use crate::kmsg::KernelLog;
use crate::schedule::SharedSchedule;
use crate::snapshot::Snapshot;

pub use calls::SLOW_REFRESH_POLLS;
pub use library::{SIM_LIBRARY_ENV, SIM_SCENARIO_ENV};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibrarySource {
    /// libnvidia-ml.so.1 through the dynamic loader, else at the places
    /// drivers are installed under `rootfs` (`--path.rootfs`) and the GPU
    /// Operator's driver root (`library::system_candidates`).
    System { rootfs: PathBuf },
    /// `--nvml.library PATH`; must exist.
    Path(PathBuf),
    /// `--simulate [SCENARIO]`: the simulated driver, found through
    /// `$NVML_SIM_LIBRARY`, next to the executable, or in
    /// `<exe dir>/../lib/nvml-exporter/`, and told `scenario` through its
    /// own export before each `nvmlInit` (the environment is left alone).
    Simulated { scenario: String },
}

#[derive(Debug, Clone)]
pub struct PollerConfig {
    pub library: LibrarySource,
    /// How often every GPU is sampled and a snapshot published.
    pub interval: Duration,
    /// How long one driver call may block before its GPU is reported hung.
    pub stuck_deadline: Duration,
    /// The families switched on at start (whether the XID event thread
    /// runs).
    pub families: FamilySet,
    /// What each poll reads (`crate::schedule`); `interval` is its tick.
    /// Swapped on a reload of the selection file.
    pub schedule: SharedSchedule,
    /// Distinct XID label sets (code and MIG instance) per GPU before
    /// further ones are folded into `xid="other"`.
    pub xid_max_codes: usize,
    /// The kernel log reader (`--collector.xid.kmsg`): its XIDs are counted
    /// with NVML's, each event once.
    pub kernel_log: Option<Arc<KernelLog>>,
    /// The state kept across restarts (`--state.path`), where it can be.
    pub state: Option<Arc<std::sync::Mutex<crate::state::Store>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("NVML library {0} does not exist or is not a file")]
    LibraryNotFound(PathBuf),
    #[error("simulated driver libnvml_sim.so not found; looked in: {}", display_paths(.searched))]
    SimulatorNotFound { searched: Vec<PathBuf> },
    #[error("NVML library {}: cannot be loaded: {message}", path.display())]
    LibraryUnloadable { path: PathBuf, message: String },
    #[error("--simulate {scenario}: {message}")]
    Scenario { scenario: String, message: String },
    #[error("the collect interval must be greater than zero")]
    ZeroInterval,
    #[error("cannot start the sampling thread: {0}")]
    Spawn(#[source] std::io::Error),
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "(nowhere: set NVML_SIM_LIBRARY)".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Handle on the background sampling threads.
pub struct Poller {
    shared: Arc<poller::Shared>,
    supervisor: Option<std::thread::JoinHandle<()>>,
}

/// Starts sampling in background threads and returns at once. `publish`
/// gets a fresh snapshot, by value, after every poll round, also while
/// NVML is down (`nvml_up: false`); its verdicts are not judged yet (the
/// join step judges the evidence it carries, `crate::join`). Only
/// configuration errors are `Err`; a driver that fails to load or
/// initialize is retried with backoff.
pub fn start(
    cfg: PollerConfig,
    publish: Arc<dyn Fn(Snapshot) + Send + Sync>,
) -> Result<Poller, StartError> {
    if cfg.interval.is_zero() {
        return Err(StartError::ZeroInterval);
    }
    let lib = library::resolve(&cfg.library)?;
    let shared = Arc::new(poller::Shared::new());
    let s = shared.clone();
    let supervisor = std::thread::Builder::new()
        .name("nvml-poller".into())
        .spawn(move || poller::supervise(cfg, lib, publish, s))
        .map_err(StartError::Spawn)?;
    Ok(Poller {
        shared,
        supervisor: Some(supervisor),
    })
}

impl Poller {
    /// Stops polling and joins every thread that is not stuck in a driver
    /// call. NVML is shut down when the last thread using it lets go, which
    /// for a stuck thread is when its call returns. Never blocks longer
    /// than `timeout`.
    pub fn shutdown(mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        self.shared.stop.stop();
        if let Some(h) = self.supervisor.take() {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        self.shared.join_threads(deadline);
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // Dropped without shutdown: stop the threads, do not wait for them.
        self.shared.stop.stop();
    }
}
