//! The plain-data snapshot that separates sampling from encoding.
//!
//! The sampler (`crate::nvml`, the only module that imports `nvml_wrapper`)
//! fills these types; the collectors (`crate::collectors`) read them and never
//! touch NVML. Everything here is owned data: no handles, no lifetimes, cheap
//! to clone and safe to share behind an `Arc` across threads.
//!
//! Conventions the two sides rely on:
//! - Values are already in Prometheus base units (bytes, seconds, celsius,
//!   watts, joules, hertz, ratios 0..=1). Conversion from NVML's units (mW,
//!   mJ, MHz, KiB/s, percent) happens in the sampler, once.
//! - A reading NVML does not support, or that failed, is `None` or simply not
//!   in its `Vec`. It is never 0. The encoders emit exactly what is present.
//! - Labelled readings are `Vec<(Label, value)>` with a small enum for the
//!   label so its spelling lives in one place (`as_label`).
//!
//! The sampler hands its snapshot over by value; the join step
//! (`crate::join`) completes it in place (pod and workload attribution,
//! the process's own statistics, the verdicts judged from the evidence
//! below) and renders it once. A GPU's readings are shared with its
//! sampler's slot (`Arc`), not copied out of it each poll.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Everything the exporter knows at one moment. Built once per poll, encoded
/// once per poll, then served to every scrape until the next one.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Whether NVML is loaded and initialized right now.
    pub nvml_up: bool,
    /// NVML is up and every known GPU has been through one poll (sampled,
    /// or found lost or hung). Backs `/-/ready`.
    pub ready: bool,
    /// Present once NVML has been initialized at least once.
    pub driver: Option<DriverInfo>,
    /// `--collect.interval`: how often every GPU is meant to be sampled, the
    /// yardstick for how old a GPU's readings may be. Zero where unknown.
    pub interval: Duration,
    /// Every GPU known since start, in NVML index order. A GPU that is lost
    /// or hung stays here (with `health` saying so) so its identity and `up`
    /// series survive.
    pub gpus: Vec<GpuState>,
    /// Present when pod attribution (`--kubernetes`) is on.
    pub kubernetes: Option<KubernetesStatus>,
    /// Present when workload attribution (`--workloads`) is on.
    pub workloads: Option<WorkloadAttribution>,
    /// The exporter's own process (`/proc/self`), where it could be read.
    pub process: Option<ProcessStats>,
    /// What the HTTP server answered and refused since start.
    pub http: Option<HttpCounts>,
    /// Present when the kernel log is read for XIDs (`--collector.xid.kmsg`).
    pub kernel_log: Option<KernelLogStatus>,
    /// Present when a selection file is followed (`--config.file`).
    pub config: Option<ConfigStatus>,
    /// When the XID event thread last completed a wait on NVML's event
    /// set; absent while it does not run (NVML down, `xid` off).
    pub xid_last_wait: Option<SystemTime>,
    /// Writes of the state file (`--state.path`) that failed since start;
    /// absent where no state is kept.
    pub state_write_errors: Option<u64>,
    /// Health events for NVIDIA NVSentinel, where `--nvsentinel.socket`
    /// sends them.
    pub nvsentinel: Option<NvsentinelCounts>,
}

/// How loading the selection file (`--config.file`) has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigStatus {
    /// The last load of the file succeeded (false while a bad file waits
    /// to be fixed; the last good selection stays in force).
    pub last_reload_successful: bool,
    /// When a load last succeeded (the start, at first).
    pub last_success: SystemTime,
    /// Reloads since start that put a new selection in force.
    pub reloads: u64,
    /// Failed loads since start: each change, each SIGHUP and each retry
    /// (once a minute) that found the file bad.
    pub failures: u64,
    /// DCGM fields the selection in force lists that are not served here
    /// (each named with its reason in the log at load).
    pub dcgm_not_served: u64,
}

/// The exporter process, as client libraries' `process_*` metrics show
/// it. Each field is absent where `/proc` does not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time.
    pub cpu_seconds: f64,
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    /// Unix time the process started.
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    /// The soft limit on open files; `None` when unlimited.
    pub max_fds: Option<u64>,
}

/// Requests to the telemetry path by status code, and requests or
/// connections refused before reaching a handler, by reason; since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpCounts {
    pub scrapes: Vec<(u16, u64)>,
    pub refusals: Vec<(HttpRefusal, u64)>,
}

/// How reading the kernel log goes, and the NVSwitch SXIDs found in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelLogStatus {
    /// The log is open and followed: its last read returned within the
    /// deadline.
    pub up: bool,
    /// What went wrong since start, by kind; only kinds seen.
    pub problems: Vec<(KernelLogProblem, u64)>,
    /// SXIDs in the log since boot, per NVSwitch and code, bounded like
    /// the XIDs (`--collector.xid.max-codes` codes per switch, the rest
    /// under `sxid: None`, i.e. `sxid="other"`).
    pub sxids: Vec<SxidCount>,
    /// What the verdicts of GPUs the exporter cannot name are judged from:
    /// the XIDs the log gives per PCI address (`crate::xid::Unnamed`);
    /// present only while some GPU is lost, failing or hung without a
    /// known address.
    pub unnamed_evidence: Option<UnnamedEvidence>,
    /// Their verdicts, judged from `unnamed_evidence` by the join step.
    pub unnamed_gpus: Vec<UnnamedGpuVerdict>,
}

/// The kernel-log XIDs of addresses no GPU the exporter can name has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnnamedEvidence {
    pub gpus: Vec<UnnamedGpuXids>,
    /// The latest load of the NVIDIA module the log shows: every GPU was
    /// reset then.
    pub last_reset: Option<Instant>,
}

/// One unnamed address and the latest XID of each code and class its log
/// lines gave.
#[derive(Debug, Clone, PartialEq)]
pub struct UnnamedGpuXids {
    /// As NVML writes it: `00000000:3A:00.0`.
    pub pci_bus_id: String,
    pub xids: Vec<XidSeen>,
}

/// The verdict of a GPU known only by the address its kernel-log lines
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnnamedGpuVerdict {
    /// As NVML writes it: `00000000:3A:00.0`.
    pub pci_bus_id: String,
    pub action: Action,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SxidCount {
    /// The NVSwitch's PCI address as the kernel prints it, `0000:c3:00.0`.
    pub switch: String,
    /// `None`: folded into `other` (the switch already had the most codes,
    /// or the code is out of range).
    pub sxid: Option<u64>,
    pub count: u64,
}

/// How the kubelet's pod-resources API answered lately, and what the
/// rest of pod attribution (DRA claims, CDI specs, ResourceSlices, pod
/// labels) could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubernetesStatus {
    /// The last List call succeeded.
    pub up: bool,
    /// Failed List calls since start.
    pub refresh_errors: u64,
    /// When the last List call succeeded.
    pub last_refresh: Option<SystemTime>,
    /// Devices of the DRA claims in the kubelet's last answer, by what
    /// became of them; every state, zeros included.
    pub claimed_devices: Vec<(ClaimedDeviceState, u64)>,
    /// What could not be read since start, by source and reason; only
    /// those seen.
    pub read_errors: Vec<(KubernetesSource, KubernetesReadError, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverInfo {
    pub driver_version: String,
    pub nvml_version: String,
    /// CUDA driver API version as NVML reports it, rendered `major.minor`.
    pub cuda_driver_version: Option<String>,
}

/// One physical GPU: identity that survives faults, health, and the latest
/// readings (withdrawn while the GPU is unhealthy).
#[derive(Debug, Clone)]
pub struct GpuState {
    pub index: u32,
    pub uuid: String,
    pub identity: GpuIdentity,
    pub health: Health,
    /// When the last complete sample of this GPU finished.
    pub last_sample: Option<SystemTime>,
    /// How long that sample took.
    pub sample_duration: Option<Duration>,
    /// A driver call that has not returned yet, if it has been blocked for
    /// longer than the stuck-call deadline.
    pub stuck_call: Option<StuckCall>,
    /// `None` while the GPU is lost, hung or failing: its measurement series
    /// are withdrawn, its info and `up` series stay. Shared with the GPU's
    /// slot in the sampler, which keeps the last readings while it is hung
    /// or slow: a poll shares them rather than copies them.
    pub readings: Option<Arc<GpuReadings>>,
    /// XID events counted since the exporter started. Kept outside
    /// `readings` so the counts survive every fault.
    pub xids: Vec<XidCount>,
    /// XID events not given a label set of their own (`xid="other"`):
    /// codes outside NVIDIA's range, and label sets beyond
    /// `--collector.xid.max-codes`. Kept, like `xids`, through every fault.
    pub xid_other: Option<XidOther>,
    /// NVML calls that failed, per family and error, since start.
    /// `NotSupported` is not an error and is not counted here.
    pub nvml_errors: Vec<NvmlErrorCount>,
    /// NVML calls the sampler made on this GPU and the time they took, per
    /// family, since start (`--collector.driver_time`).
    pub driver_time: Vec<DriverTimeCount>,
    /// Kubernetes pods that hold this GPU or one of its MIG devices, when
    /// pod attribution is on.
    pub pods: Vec<PodAttribution>,
    /// What the verdict is judged from besides `health` and `readings`, as
    /// the sampler knew it when it built the snapshot; `None` while NVML is
    /// down (every GPU then reads failing, which says nothing of it).
    pub evidence: Option<VerdictEvidence>,
    /// What to do with this GPU now: the GPU's verdict first, then one per
    /// MIG instance whose own fault decides something. Judged from
    /// `evidence` by the join step (`crate::join`, `crate::verdict`). Empty
    /// where the exporter cannot judge (NVML down, the GPU not sampled yet,
    /// denied or failing every call).
    pub verdicts: Vec<Verdict>,
}

/// What a GPU's verdict is judged from besides its health and readings
/// (`crate::verdict::judge_gpu`, called by the join step).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerdictEvidence {
    /// The latest XID of each code, class and MIG instance that asks for
    /// something.
    pub xids: Vec<XidSeen>,
    pub remembered: Remembered,
    /// The MIG instances of the GPU's last readings (kept while it is
    /// hung), (GPU instance, compute instance): an XID naming another is
    /// judged on the GPU.
    pub instances: Vec<(u32, u32)>,
    /// The latest GPU reset known.
    pub last_reset: Option<Instant>,
}

/// How an XID event is judged: by its code's catalog bucket, or, for the
/// NVLink5 codes 144-150, by what its kernel-log line says, read through
/// NVIDIA's decode sheet (`crate::xid_catalog::nvlink5`, decided in
/// `crate::xid::nvlink5_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XidClass {
    /// Its code's bucket decides.
    Code,
    /// NVLink5: the sheet's row says `RESET_GPU`, or no row matched and the
    /// line says `Fatal`.
    Nvlink5Fatal,
    /// NVLink5: the sheet says `IGNORE` or `XID_154_EVAL` (the driver's
    /// recovery action then carries any need), or no row matched and the
    /// line says `Nonfatal`.
    Nvlink5Nothing,
    /// NVLink5 with a kernel-log line of another shape (no severity word
    /// before `XC<n>`, no registers): asks for nothing on the XID, the
    /// driver's recovery action and XID 154 carry any need; the verdict's
    /// reason says the line could not be read.
    Nvlink5Undecoded,
    /// NVLink5 from NVML's event alone (it carries only the code; the
    /// kernel log not read, unreadable, or its line never came): asks for
    /// nothing on the XID, as the sheet's `XID_154_EVAL` rows do; the
    /// verdict's reason says the kernel log was missing.
    Nvlink5NoKernelLog,
    /// NVLink5 whose line says the fault was injected (`i1`): counted,
    /// judged as a test (nothing asked; the reason says so).
    Nvlink5Injected,
    /// XID 74 whose registers NVIDIA's workflow reads as nothing to do
    /// (`xid_catalog::nvlink_err`).
    NvlinkErrNothing,
    /// XID 74 whose registers ask for a report to NVIDIA.
    NvlinkErrReport,
    /// XID 74 whose registers ask for the link to be checked.
    NvlinkErrCheckLink,
    /// XID 74 whose fourth register's bit 18 asks for a reset of the
    /// fabric.
    NvlinkErrFabricReset,
    /// XID 74 with ECC/parity bits seen more than twice on the same link
    /// within `xid::NVLINK_ERR_REPEAT_WINDOW`: a report to NVIDIA.
    NvlinkErrRepeated,
    /// XID 45 whose line names the XID that caused it (`caused by previous
    /// Xid N`): not solo, the catalog's "Not Solo: IGNORE"; the cause is
    /// judged by its own line.
    Xid45Caused,
}

/// The latest XID of one code, class (and MIG instance) on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidSeen {
    pub code: u64,
    pub class: XidClass,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    /// When it happened (for XIDs from the kernel log: when logged).
    pub at: Instant,
}

/// What the exporter remembers of a GPU until the next boot because NVML
/// may stop saying it: on a MIG-enabled GPU NVML hides the row remapper's
/// flags ("On MIG-enabled GPUs with active instances, querying the number
/// of remapped rows is not supported", cuda-python
/// `device_get_remapped_rows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Remembered {
    /// NVML's remap-failure flag was seen set.
    pub remap_failed: bool,
    /// XID 64 (a row remap failed) on the GPU while MIG was enabled.
    pub mig_remap_failure: bool,
}

/// One verdict: the action, and the signal that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub action: Action,
    /// A fixed, bounded vocabulary (`crate::verdict::REASONS`).
    pub reason: &'static str,
}

/// Health events for NVSentinel since start, by outcome
/// (`nvml_exporter_nvsentinel_events_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvsentinelCounts {
    /// Delivered: the platform connector answered.
    pub sent: u64,
    /// Calls that failed or timed out (each event is retried).
    pub failed: u64,
    /// Left out of the full queue, a newer state of the same GPU kept.
    pub dropped: u64,
}

/// Strings that identify a GPU. Each is absent when NVML cannot give it
/// (consumer cards have no serial, for example).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuIdentity {
    pub name: Option<String>,
    pub brand: Option<String>,
    pub architecture: Option<String>,
    pub pci_bus_id: Option<String>,
    pub serial: Option<String>,
    pub vbios_version: Option<String>,
    /// `major.minor`, e.g. `9.0`.
    pub compute_capability: Option<String>,
    pub board_part_number: Option<String>,
    /// The `N` of the GPU's device node `/dev/nvidiaN`: how CDI specs and
    /// device cgroups name it.
    pub minor_number: Option<u32>,
    /// Where the GPU sits in its rack (`nvmlDeviceGetPlatformInfo`, R570+,
    /// NVL72 trays and HGX B200); `None` where the driver does not say.
    pub platform: Option<Platform>,
}

/// `nvmlPlatformInfo_v2_t`, as labels: the chassis (rack) serial number,
/// the chassis slot (switch trays counted), the compute tray index, the
/// host within the tray and the GPU module. Each is `None` where
/// nvidia-smi would print N/A (an empty serial number; the HGX B200's slot
/// and tray).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Platform {
    pub chassis_serial: Option<String>,
    pub slot: Option<u8>,
    pub tray: Option<u8>,
    pub host_id: u8,
    pub module_id: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The last sample completed.
    Up,
    /// NVML said `GPU_IS_LOST`: the GPU fell off the bus.
    Lost,
    /// A driver call on this GPU has been blocked past the deadline.
    Hung,
    /// Sampling fails for another reason (every family erroring).
    Failing,
    /// NVML counts the GPU but answers NO_PERMISSION for its handle: this
    /// process may not open its device node (container device list,
    /// cgroup). A setting, not a fault.
    Denied,
    /// Not sampled yet since start (or since NVML came back).
    Pending,
}

impl Health {
    pub fn is_up(self) -> bool {
        matches!(self, Health::Up)
    }
}

#[cfg(test)]
impl GpuState {
    /// For unit tests: GPU `index` (UUID `GPU-<index>`), up, with these
    /// readings and nothing else known.
    pub fn with_readings(index: u32, readings: GpuReadings) -> GpuState {
        GpuState {
            index,
            uuid: format!("GPU-{index}"),
            identity: GpuIdentity::default(),
            health: Health::Up,
            last_sample: None,
            sample_duration: None,
            stuck_call: None,
            readings: Some(Arc::new(readings)),
            xids: vec![],
            xid_other: None,
            nvml_errors: vec![],
            driver_time: vec![],
            pods: vec![],
            evidence: None,
            verdicts: vec![],
        }
    }

    /// For unit tests: the readings to change (copied first if shared).
    #[cfg(test)]
    pub fn readings_mut(&mut self) -> &mut GpuReadings {
        Arc::make_mut(self.readings.as_mut().expect("a GPU with readings"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckCall {
    /// The collector family whose call is blocked, e.g. `power`.
    pub family: &'static str,
    pub since: SystemTime,
}

#[derive(Debug, Clone, PartialEq)]
pub struct XidCount {
    pub xid: u64,
    /// Set when the event named a MIG GPU instance.
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub count: u64,
    /// Wall-clock time of the most recent event of this kind.
    pub last_seen: SystemTime,
}

/// The XID events folded into one overflow series, so that a driver
/// sending ever new codes cannot grow the exposition without bound while
/// `sum()` over the XID family still counts every event.
#[derive(Debug, Clone, PartialEq)]
pub struct XidOther {
    /// Events whose code NVIDIA does not document (0, or above
    /// `MAX_XID_CODE`): a corrupt event, never a label value.
    pub out_of_range: u64,
    /// Events of valid codes whose label set (code and MIG instance) came
    /// after the GPU already had `--collector.xid.max-codes` of them.
    pub over_limit: u64,
    /// Wall-clock time of the most recent folded event.
    pub last_seen: SystemTime,
}

impl XidOther {
    /// Every folded event: the value of the `xid="other"` series.
    pub fn count(&self) -> u64 {
        self.out_of_range.saturating_add(self.over_limit)
    }
}

/// The highest XID code exported as a label value. NVIDIA's XID catalog
/// numbers codes from 1 upwards and was near 170 in 2025; three digits
/// leave decades of room for new codes, while the values a driver bug or a
/// corrupt event produces (0, 2^32-1, 2^64-1) are folded into `other`.
pub const MAX_XID_CODE: u64 = 999;

impl XidClass {
    /// Whether an event of this code and class matters: a catalogued code
    /// whose bucket asks for something, or whose reason says what evidence
    /// the verdict lacked; a code the catalog lacks in NVIDIA's range (the
    /// verdict's policy for unlisted codes acts on it); a class decoded to
    /// something, or to a note. Decided here once: the XID ledger keeps
    /// the latest event of what matters (`crate::xid::kept`) and the
    /// verdict judges only what matters (`crate::verdict`), whose actions
    /// a test there holds to this (an action or a note exactly where it
    /// matters). Both matches are exhaustive: a bucket or a class added
    /// does not compile until it is decided here.
    pub fn matters(self, code: u64) -> bool {
        use crate::xid_catalog::{lookup, Bucket};
        match self {
            // A code the catalog lacks, in NVIDIA's range.
            XidClass::Code if lookup(code).is_none() => (1..=MAX_XID_CODE).contains(&code),
            XidClass::Code => lookup(code).is_some_and(|x| match x.bucket() {
                Bucket::Ignore | Bucket::Xid154 => false,
                Bucket::RestartApp
                | Bucket::CheckUvm
                | Bucket::ResetGpu
                | Bucket::WorkflowXid48
                | Bucket::WorkflowNvlinkErr
                | Bucket::WorkflowNvlink5Err
                | Bucket::RestartBm
                | Bucket::RestartVm
                | Bucket::UpdateSwFw
                | Bucket::CheckMechanicals
                | Bucket::ContactSupport
                | Bucket::WorkflowXid45 => true,
            }),
            XidClass::Nvlink5Nothing | XidClass::Xid45Caused => false,
            // Kept: off Hopper the verdict gives the code-wide action
            // whatever the bits say (`crate::verdict::xid_event_action`).
            XidClass::NvlinkErrNothing
            | XidClass::NvlinkErrFabricReset
            | XidClass::NvlinkErrRepeated
            | XidClass::Nvlink5Fatal
            | XidClass::Nvlink5Undecoded
            | XidClass::Nvlink5NoKernelLog
            | XidClass::Nvlink5Injected
            | XidClass::NvlinkErrReport
            | XidClass::NvlinkErrCheckLink => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DriverTimeCount {
    /// Collector family, `field_values` for the batched call, `info` for
    /// identity.
    pub family: &'static str,
    pub calls: u64,
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlErrorCount {
    /// Collector family, e.g. `ecc`.
    pub family: &'static str,
    /// NVML error in lower snake case, e.g. `gpu_is_lost`, `timeout`.
    pub error: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAttribution {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// MIG GPU instance the pod holds, `None` for a whole GPU.
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    /// The pod's labels that `--kubernetes.pod-labels` allows, under their
    /// Prometheus names, sorted by name.
    pub labels: PodLabels,
}

/// Pod labels as Prometheus labels: (name, value), sorted by name. The
/// names are the allowlist's, fixed for the process's life.
pub type PodLabels = Vec<(&'static str, String)>;

/// Which workloads (Slurm jobs, containers, services, users) hold each GPU
/// and MIG device, from the cgroups of the processes NVML lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadAttribution {
    /// One per workload per device, sorted by device then workload, at
    /// most `--workloads.limit`.
    pub holdings: Vec<WorkloadHolding>,
    /// Holdings left out of this snapshot because the node had more than
    /// the limit.
    pub dropped: u64,
    /// Failed reads since start, by source and reason.
    pub read_errors: Vec<WorkloadReadErrors>,
    /// Measured use per workload, when the `workload_usage` family is on.
    pub usage: Option<WorkloadUsage>,
    /// When the resolver last finished reading every source; `None` until
    /// it first has.
    pub last_refresh: Option<std::time::SystemTime>,
    /// The jobs of dcgm-exporter's HPC job mapping directory
    /// (`--workloads.slurm-mapping-dir`) by device, as written, for the
    /// DCGM series' `hpc_job` (`crate::compat::encode`).
    pub hpc_jobs: Arc<HpcJobs>,
}

/// Job names by device: GPU index, and the GPU instance for a file named
/// `<gpu>.<gpu instance>`.
pub type HpcJobs = BTreeMap<(u32, Option<u32>), Vec<String>>;

/// What each workload used of the devices it held, since the exporter
/// started (`src/workloads/usage.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadUsage {
    /// One per workload per device, sorted like the holdings; workloads
    /// that left stay a few minutes so their last increments get scraped.
    pub accounts: Vec<UsageAccount>,
    /// Energy of each GPU charged to no workload, by reason.
    pub unattributed: Vec<UnattributedEnergy>,
    /// Holdings refused an account at the limit in this update (retained
    /// accounts of ended workloads give way first, so normally 0).
    pub refused: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UsageAccount {
    pub gpu: u32,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub workload: Workload,
    /// SM busy time in seconds of the whole GPU; `None` where the device's
    /// use is not measured.
    pub sm_seconds: Option<f64>,
    /// An MPS client's part of its server's SM time, estimated (NVML
    /// samples the server's context only): `None` where not under MPS.
    pub mps_sm_seconds: Option<f64>,
    /// Memory, encoder and decoder busy time where NVML measures them per
    /// process (not on MIG).
    pub engine_seconds: Vec<(UsageEngine, f64)>,
    /// The workload's part of the GPU's energy by measured SM time.
    pub energy_joules: Option<f64>,
    /// Its part by estimated SM time (MPS clients).
    pub mps_energy_joules: Option<f64>,
    /// The holder's view: the GPU's energy by held share, so that whoever
    /// holds a GPU alone pays all of it; `None` where the GPU has no energy
    /// counter.
    pub held_energy_joules: Option<f64>,
    /// Device-seconds held: elapsed time times the workload's share of the
    /// device, a MIG device weighted by its part of the GPU.
    pub held_seconds: f64,
    /// While the workload holds the device without using it (measured SM
    /// use below the threshold, or no process at all): for how long.
    pub idle_seconds: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnattributedEnergy {
    pub gpu: u32,
    pub reason: UnattributedReason,
    pub joules: f64,
}

/// One workload on one device: a whole GPU (`gpu_instance` `None`) or a
/// compute instance of a MIG GPU instance.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadHolding {
    /// NVML index of the GPU.
    pub gpu: u32,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub workload: Workload,
    /// 1/N of the device (the whole GPU, or the MIG GPU instance) when N
    /// holdings share it.
    pub share: f64,
    /// GPU memory its processes use on the device; `None` when NVML gives
    /// no per-process memory for one of them, or the holding comes from a
    /// Slurm mapping file alone.
    pub memory_used_bytes: Option<u64>,
}

/// What a workload is, as far as its cgroup path, its processes' uid and
/// the optional sources tell. Each present field is a label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub slurm_job: Option<String>,
    pub slurm_step: Option<String>,
    /// Short form (12 hex digits), as `docker ps` and `podman ps` print it.
    pub container_id: Option<String>,
    /// Only through the opt-in container engine socket.
    pub container_name: Option<String>,
    /// Kubernetes pod UID, from the kubepods cgroup.
    pub pod_uid: Option<String>,
    pub systemd_unit: Option<String>,
    /// The cgroup path of a workload of kind `other`.
    pub cgroup: Option<String>,
    /// Real uid of the processes (host view).
    pub uid: Option<u32>,
    /// The uid's name in the host's passwd file.
    pub user: Option<String>,
    /// Kubernetes namespace, pod and container names: from the kubelet's
    /// container log links for a pod's processes, from pod-resources for
    /// a device a pod holds.
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// The pod's allowlisted labels (`--kubernetes.pod-labels`).
    pub pod_labels: PodLabels,
}

impl Workload {
    /// A workload of this kind with nothing else known.
    pub fn of(kind: WorkloadKind) -> Self {
        Workload {
            kind,
            slurm_job: None,
            slurm_step: None,
            container_id: None,
            container_name: None,
            pod_uid: None,
            systemd_unit: None,
            cgroup: None,
            uid: None,
            user: None,
            namespace: None,
            pod: None,
            container: None,
            pod_labels: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadReadErrors {
    pub source: WorkloadSource,
    pub reason: WorkloadReadError,
    pub count: u64,
}

/// What `nvmlDeviceGetGridLicensableFeatures` says of vGPU software
/// licensing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VgpuLicense {
    /// The system does not support it: bare metal, or a pass-through VM.
    Unsupported,
    /// Supported: whether the vGPU feature is licensed (`None`: NVML
    /// lists no vGPU feature).
    Supported(Option<bool>),
}

/// All measurements of one GPU from one poll. Each field is absent where
/// NVML does not support it on this GPU or the call failed.
#[derive(Debug, Clone, Default)]
pub struct GpuReadings {
    /// Families not read this poll (their own interval, the selection
    /// file's `intervals:`): their readings are the last poll's, carried
    /// forward. A rate over two polls skips them.
    pub carried: Vec<crate::family::Family>,
    pub utilization: Vec<(Engine, f64)>,
    /// GPM metrics (Hopper and newer), ratios 0..=1.
    pub activity: Vec<(GpmMetric, f64)>,
    /// Each decoder, JPEG and optical flow engine's GPM activity, 0..=1, by
    /// NVML's GPM metric id (nvml.h `NVML_GPM_METRIC_NVDEC_0_UTIL` = 30 to
    /// 37, `NVJPG_0` 40 to 47, `NVOFA_0` 50 and 51), for the engines that
    /// exist; read with `gpm.all-metrics`. Only DCGM's per-engine fields
    /// serve them (`activity` has their mean).
    pub engine_activity: Vec<(u32, f64)>,
    pub memory: Option<Memory>,
    pub bar1: Option<Bar1Memory>,
    pub temperatures: Vec<(Sensor, f64)>,
    pub temperature_thresholds: Vec<(Threshold, f64)>,
    /// Distance of the GPU to its T.Limit, in degrees (positive: below it).
    /// Read only where NVML reports no absolute slowdown threshold.
    pub temperature_margin: Option<f64>,
    /// The thresholds as signed distances to T.Limit (shutdown, slowdown,
    /// memory_max, gpu_max), read where `temperature_margin` is.
    pub temperature_margin_thresholds: Vec<(Threshold, f64)>,
    /// Fan index and speed as a ratio of maximum.
    pub fan_speeds: Vec<(u32, f64)>,
    pub power_usage_watts: Option<f64>,
    /// Instantaneous draw (NVML_FI_DEV_POWER_INSTANT); family
    /// `power.instant`.
    pub power_instant_watts: Option<f64>,
    pub power_limits: Vec<(PowerLimit, f64)>,
    /// Energy since the driver was loaded (NVML total energy consumption).
    pub energy_joules: Option<f64>,
    /// Draw of the module the GPU is part of (NVML power scope "module":
    /// a Grace superchip's CPU, GPUs and memory), where NVML reports it.
    pub module_power_watts: Option<f64>,
    pub module_power_limits: Vec<(PowerLimit, f64)>,
    /// Draw of the GPU's memory (power scope "memory").
    pub memory_power_watts: Option<f64>,
    /// Power smoothing hardware circuitry lifetime left, 0..=1 (Blackwell).
    pub power_smoothing_lifetime_remaining: Option<f64>,
    /// P0 = 0 ... P15 = 15.
    pub performance_state: Option<u32>,
    pub clocks_hertz: Vec<(Clock, f64)>,
    pub max_clocks_hertz: Vec<(Clock, f64)>,
    /// Applications clocks (the clock targets an operator set), sm and
    /// memory; family `clocks.applications`.
    pub applications_clocks_hertz: Vec<(Clock, f64)>,
    /// Only reasons the GPU supports appear; `true` while active.
    pub throttle_active: Vec<(ThrottleReason, bool)>,
    /// Cumulative time spent throttled per reason, where NVML reports it.
    pub throttle_seconds: Vec<(ThrottleReason, f64)>,
    pub pcie: Pcie,
    pub persistence_mode: Option<bool>,
    pub display_active: Option<bool>,
    pub compute_mode: Option<ComputeMode>,
    /// vGPU software licensing as NVML reports it; family
    /// `mode.vgpu-license`.
    pub vgpu_license: Option<VgpuLicense>,
    pub ecc_mode: Option<ModePair>,
    pub mig_mode: Option<ModePair>,
    /// On a MIG-enabled GPU: whether NVML gave this process the whole-GPU
    /// aggregates it reserves for callers with MIG privileges (root,
    /// CAP_SYS_ADMIN or the `mig/monitor` capability). The same privilege
    /// decides whether instance-scoped events (XIDs of MIG instances)
    /// reach us at all.
    pub mig_privileged: Option<bool>,
    pub ecc_errors: Vec<EccCount>,
    pub retired_pages: Vec<(RetirementCause, u64)>,
    pub retired_pages_pending: Option<bool>,
    pub remapped_rows: Option<RemappedRows>,
    /// Memory banks by spare rows left (row remapper histogram).
    pub remapper_banks: Vec<(SpareRows, u64)>,
    /// Uncorrectable SRAM errors crossed NVIDIA's RMA threshold.
    pub sram_threshold_exceeded: Option<bool>,
    pub recovery_action: Option<u32>,
    /// NVML's fabric registration state (1 not started, 2 in progress,
    /// 3 completed) and whether it succeeded; NVSwitch systems only.
    pub fabric: Option<Fabric>,
    pub nvlinks: Vec<NvLink>,
    /// NVLink-C2C links to the Grace CPU; empty on boards without them.
    pub c2c_links: Vec<C2cLink>,
    /// Where the GPU sits on the host (`sampler/topology.rs`): read at
    /// start and when a link changes state, shared between polls.
    pub topology: Option<Arc<GpuTopology>>,
    /// Bytes moved over all the GPU's links, as the driver sums them:
    /// read so when no per-link series needs each link's counters (the
    /// links' own `tx_bytes`/`rx_bytes` are then `None`). See
    /// [`GpuReadings::nvlink_bytes`].
    pub nvlink_traffic: Option<NvLinkTraffic>,
    /// `None` where listing processes of that type is not supported.
    pub compute_processes: Option<Vec<Process>>,
    pub graphics_processes: Option<Vec<Process>>,
    /// GPU instances, when MIG is enabled.
    pub mig: Vec<MigGpuInstance>,
    /// What the per-workload use accounting needs from NVML (family
    /// `workload_usage`, with `--workloads`).
    pub usage: Option<UsageReadings>,
}

/// Per-process use as NVML measured it, accumulated by the sampler from
/// poll to poll (`src/nvml/sampler/workload_usage/`), plus what places a
/// GPU's holders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageReadings {
    /// Identifies the accumulation: busy seconds of different epochs (a
    /// sampler started afresh) are not comparable.
    pub epoch: u64,
    /// Busy seconds per pid since the epoch began, sorted by pid; pids
    /// that ended stay while they may still have samples. `None` where
    /// NVML has no per-process utilization (MIG-enabled GPUs, or not
    /// supported).
    pub pids: Option<Vec<PidUsage>>,
    /// Seconds the per-process windows counted so far covered (the
    /// device samples' periods): the busy share of an interval is its SM
    /// seconds over this, not over the time between two polls, whose
    /// edges fall between samples.
    pub sampled_seconds: f64,
    /// Pids NVML lists as MPS clients: their work is sampled under the MPS
    /// server's pid.
    pub mps_clients: Vec<u32>,
    /// The GPU's minor number (`/dev/nvidia<minor>`), which device
    /// allowlists name.
    pub minor_number: Option<u32>,
    /// Compute slices of the whole GPU, on a MIG-enabled GPU (7 on A100 and
    /// H100): what an instance's slices are a share of.
    pub mig_compute_slices: Option<u32>,
    /// Entries of NVML's per-process answers left out since the epoch, by
    /// why (every reason, where per-process use is read).
    pub dropped: Vec<(UsageDrop, u64)>,
}

/// One process's busy time per engine, in seconds of the whole engine.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PidUsage {
    pub pid: u32,
    pub sm_seconds: f64,
    pub memory_seconds: f64,
    pub encoder_seconds: f64,
    pub decoder_seconds: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Only from `nvmlDeviceGetMemoryInfo_v2`; v1 folds it into `used`.
    pub reserved_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bar1Memory {
    pub total_bytes: u64,
    pub used_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pcie {
    pub link_generation_current: Option<u32>,
    pub link_generation_max: Option<u32>,
    pub link_width_current: Option<u32>,
    pub link_width_max: Option<u32>,
    pub replay_errors: Option<u64>,
    pub tx_bytes: Option<u64>,
    pub rx_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModePair {
    pub current: bool,
    pub pending: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EccCount {
    pub error: EccError,
    pub scope: EccScope,
    pub location: EccLocation,
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    pub pending: bool,
    pub failed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fabric {
    pub state: u32,
    pub registered: bool,
    /// NVML's health summary (fabric info v3, R580+); `None` where the
    /// driver or GPU does not report one.
    pub health_summary: Option<FabricHealth>,
    /// The health mask's conditions the GPU reports (v2, R550+; most bits
    /// R570+), each with whether it holds now.
    pub health_issues: Vec<(FabricIssue, bool)>,
    /// The NVLink partition the GPU belongs to; `None` outside a
    /// multi-node NVLink cluster (the cluster UUID is all zero).
    pub partition: Option<FabricPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricPartition {
    pub clique_id: u32,
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower case.
    pub cluster_uuid: String,
}

/// NVLink traffic summed over a GPU's links by the driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvLinkTraffic {
    pub tx_bytes: Option<u64>,
    pub rx_bytes: Option<u64>,
}

impl GpuReadings {
    /// The byte counters behind a GPU's NVLink traffic in one direction:
    /// the driver's sum over all links where it was read so, else each
    /// link's own. Summed, they give the GPU's traffic either way.
    pub fn nvlink_bytes(&self, tx: bool) -> Vec<u64> {
        let pick = |tx_bytes: Option<u64>, rx_bytes: Option<u64>| {
            if tx {
                tx_bytes
            } else {
                rx_bytes
            }
        };
        match self.nvlink_traffic {
            Some(t) => pick(t.tx_bytes, t.rx_bytes).into_iter().collect(),
            None => self
                .nvlinks
                .iter()
                .filter_map(|l| pick(l.tx_bytes, l.rx_bytes))
                .collect(),
        }
    }
}

/// One NVLink-C2C link: its state and the error counters the driver
/// answered (R575 on), by `c2c_error_label` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct C2cLink {
    pub link: u32,
    pub up: Option<bool>,
    pub errors: Vec<(C2cError, u64)>,
}

/// `NVML_FI_DEV_C2C_LINK_ERROR_*`: INTR (nvml.h: "CRC Error Counter"),
/// REPLAY and REPLAY_B2B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum C2cError {
    Crc,
    Replay,
    ReplayB2b,
}

impl C2cError {
    pub fn as_label(self) -> &'static str {
        match self {
            C2cError::Crc => "crc",
            C2cError::Replay => "replay",
            C2cError::ReplayB2b => "replay_b2b",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NvLink {
    pub link: u32,
    pub up: bool,
    pub errors: Vec<(NvLinkError, u64)>,
    /// NVLink5 bit error rates (read only for `nvlink.per-link`).
    pub bit_error_rates: Vec<(NvLinkBer, f64)>,
    pub tx_bytes: Option<u64>,
    pub rx_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub name: Option<String>,
    pub used_memory_bytes: Option<u64>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
}

/// One MIG GPU instance and the compute instances (MIG devices) inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigGpuInstance {
    pub gpu_instance: u32,
    /// GPU instance profile name, e.g. `3g.40gb`.
    pub profile: String,
    /// The instance's GPU slices and memory in MiB, as NVML gives its
    /// profile (`nvmlDeviceGetAttributes_v2` of a MIG device:
    /// `gpuInstanceSliceCount`, `memorySizeMB`); what DCGM builds its own
    /// profile name from.
    pub size: Option<MigSize>,
    pub memory: Option<MigMemory>,
    /// BAR1 of the instance (family `mig.bar1`).
    pub bar1: Option<Bar1Memory>,
    /// GPM per GPU instance (Hopper and newer); empty on A100.
    pub activity: Vec<(GpmMetric, f64)>,
    /// Per engine, as `GpuReadings::engine_activity`.
    pub engine_activity: Vec<(u32, f64)>,
    pub compute_instances: Vec<MigComputeInstance>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigSize {
    pub slices: u32,
    pub memory_mib: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigMemory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Memory the driver reserves in the instance
    /// (`nvmlDeviceGetMemoryInfo_v2` on its handle); `None` where only the
    /// v1 call answers.
    pub reserved_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigComputeInstance {
    pub compute_instance: u32,
    /// The MIG device UUID (`MIG-...`).
    pub mig_uuid: String,
}

/// Declares a label enum with its exposition spelling in one place.
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value as it appears on `/metrics`.
            pub fn as_label(self) -> &'static str {
                match self { $($name::$variant => $label),+ }
            }
        }
    };
}

label_enum!(
    /// What became of a device of a DRA claim.
    ClaimedDeviceState {
        // Found to be a GPU or MIG device of this node.
        Resolved => "resolved",
        // NVIDIA's GPU driver's, but neither its CDI spec nor the node's
        // ResourceSlices said which GPU or MIG device it is.
        Unresolved => "unresolved",
        // Another DRA driver's (a NIC, IMEX channels): not a GPU.
        OtherDriver => "other_driver",
    }
);

label_enum!(
    /// Where pod attribution reads beside the kubelet's pod-resources.
    KubernetesSource {
        // The CDI specs under `<rootfs>/var/run/cdi` and `<rootfs>/etc/cdi`,
        // and the MIG capability minors under the procfs.
        Cdi => "cdi",
        // The DRA fields of the kubelet's pod-resources answer.
        KubeletDra => "kubelet_dra",
        // This node's ResourceSlices, from the API server.
        ResourceSlices => "resource_slices",
        // Pod labels, from the kubelet's `/pods` or the API server.
        PodLabels => "pod_labels",
    }
);

label_enum!(
    /// Why a read for pod attribution failed.
    KubernetesReadError {
        // Not there, not permitted, or the file system failed.
        Unreadable => "unreadable",
        // Did not answer in time.
        Timeout => "timeout",
        // Answered, but not in the format it should have.
        Malformed => "malformed",
        // Refused the request (HTTP 401 or 403).
        Refused => "refused",
        // Could not be reached, or answered with another error.
        Unreachable => "unreachable",
        // The kubelet reports no DRA claims while CDI specs of prepared
        // claims exist: it predates the DRA fields or has them off.
        Missing => "missing",
        // A pod label left out: over the limit of labels, or its name
        // taken by another label.
        Dropped => "dropped",
    }
);

label_enum!(Engine {
    Gpu => "gpu", Memory => "memory", Encoder => "encoder",
    Decoder => "decoder", Jpeg => "jpeg", Ofa => "ofa",
});

label_enum!(
    /// GPM metrics exported as ratios.
    GpmMetric {
        Graphics => "graphics", Sm => "sm", SmOccupancy => "sm_occupancy",
        Tensor => "tensor", Dram => "dram", Fp64 => "fp64", Fp32 => "fp32",
        Fp16 => "fp16", Integer => "integer",
        TensorDfma => "tensor_dfma", TensorHmma => "tensor_hmma",
        TensorImma => "tensor_imma",
        NvDec => "nvdec", NvJpg => "nvjpg", NvOfa => "nvofa", NvEnc => "nvenc",
    }
);

impl GpmMetric {
    /// The metrics exported without `--collector.gpm.all-metrics` (and the
    /// only ones the sampler asks NVML for then): graphics engine activity
    /// is what a MIG instance has in place of utilization; SM, tensor and
    /// DRAM activity are the MIG dashboard's.
    pub const DEFAULT: &'static [GpmMetric] = &[
        GpmMetric::Graphics,
        GpmMetric::Sm,
        GpmMetric::Tensor,
        GpmMetric::Dram,
    ];
}

label_enum!(Sensor { Gpu => "gpu", Memory => "memory" });

label_enum!(Threshold {
    Shutdown => "shutdown", Slowdown => "slowdown", MemoryMax => "memory_max",
    GpuMax => "gpu_max", AcousticMin => "acoustic_min",
    AcousticCurrent => "acoustic_current", AcousticMax => "acoustic_max",
});

label_enum!(PowerLimit {
    Enforced => "enforced", Management => "management", Default => "default",
    Min => "min", Max => "max",
});

label_enum!(Clock { Graphics => "graphics", Sm => "sm", Memory => "memory", Video => "video" });

label_enum!(
    /// Clock event (throttle) reasons. `Thermal` is NVML's thermal policy
    /// violation time (field 75, `NVML_PERF_POLICY_THERMAL`): time held
    /// down by any thermal slowdown, software or hardware. It is never a
    /// flag, and never reported as `sw_thermal`, which is one cause of it.
    ThrottleReason {
        GpuIdle => "gpu_idle", ApplicationsClocks => "applications_clocks",
        SwPowerCap => "sw_power_cap", HwSlowdown => "hw_slowdown",
        SyncBoost => "sync_boost", SwThermal => "sw_thermal",
        HwThermal => "hw_thermal", HwPowerBrake => "hw_power_brake",
        DisplayClocks => "display_clocks", Thermal => "thermal",
    }
);

label_enum!(ComputeMode {
    Default => "default", ExclusiveThread => "exclusive_thread",
    Prohibited => "prohibited", ExclusiveProcess => "exclusive_process",
});

label_enum!(EccError { Corrected => "corrected", Uncorrected => "uncorrected" });

label_enum!(EccScope { Volatile => "volatile", Aggregate => "aggregate" });

label_enum!(EccLocation {
    All => "all", L1Cache => "l1_cache", L2Cache => "l2_cache", Dram => "dram",
    DeviceMemory => "device_memory", RegisterFile => "register_file",
    TextureMemory => "texture_memory", TextureShm => "texture_shm",
    Cbu => "cbu", Sram => "sram",
});

label_enum!(SpareRows { Max => "max", High => "high", Partial => "partial", Low => "low", Exhausted => "none" });
label_enum!(RetirementCause { SingleBitEcc => "single_bit_ecc", DoubleBitEcc => "double_bit_ecc" });

label_enum!(
    /// NVLink error kinds. Up to NVLink4: `crc_flit`, `crc_data`, `replay`,
    /// `recovery` (the DL counters). NVLink5 (Blackwell): `recovery` (link
    /// recovery events, successful or not: the same meaning, so the same
    /// label), `recovery_failed`, `effective` (packet errors left after
    /// FEC) and `symbol` (raw received symbol errors, before FEC).
    NvLinkError {
        CrcFlit => "crc_flit", CrcData => "crc_data", Replay => "replay", Recovery => "recovery",
        RecoveryFailed => "recovery_failed", Effective => "effective", Symbol => "symbol",
    }
);

impl NvLinkError {
    /// Whether the per-GPU sum (`nvidia_gpu_nvlink_errors_total`) carries
    /// this kind. NVLink5's failed recoveries are a part of its recoveries
    /// (the link then shows down in `nvidia_gpu_nvlink_links`), and its
    /// symbol errors are corrected by FEC (no alert reads them): both stay
    /// in the per-link detail.
    pub fn summed_by_default(self) -> bool {
        !matches!(self, NvLinkError::RecoveryFailed | NvLinkError::Symbol)
    }
}

label_enum!(NvLinkBer { Effective => "effective", Symbol => "symbol" });

label_enum!(
    /// NVML's fabric health summary (`NVML_GPU_FABRIC_HEALTH_SUMMARY_*`).
    FabricHealth { Healthy => "healthy", Unhealthy => "unhealthy", LimitedCapacity => "limited_capacity" }
);

label_enum!(
    /// The conditions of NVML's fabric health mask (`NVML_GPU_FABRIC_HEALTH_MASK_*`).
    FabricIssue {
        DegradedBandwidth => "degraded_bandwidth", RouteRecovery => "route_recovery",
        RouteUnhealthy => "route_unhealthy", AccessTimeoutRecovery => "access_timeout_recovery",
        IncorrectConfiguration => "incorrect_configuration",
    }
);

label_enum!(ProcessKind { Compute => "compute", Graphics => "graphics" });

label_enum!(
    /// What to do with a GPU now, from least to most drastic: the order is
    /// the severity (`Ord`), and the worst action wins.
    Action {
        None => "none", RestartApp => "restart_app", ResetGpu => "reset_gpu",
        Reboot => "reboot", CheckHardware => "check_hardware", Rma => "rma",
    }
);

label_enum!(
    /// What went wrong reading the kernel log (`--collector.xid.kmsg`).
    KernelLogProblem {
        Unreadable => "unreadable", ReadError => "read_error", Stalled => "stalled",
        Malformed => "malformed", Oversized => "oversized", OutOfOrder => "out_of_order",
        Overrun => "overrun", Rotated => "rotated", Truncated => "truncated",
        UnknownGpu => "unknown_gpu", TooManySwitches => "too_many_switches",
        UserSpace => "user_space",
    }
);

label_enum!(
    /// What holds a GPU, by the cgroup of its processes. `unknown`: the
    /// process's `/proc` entry could not be read.
    WorkloadKind {
        Slurm => "slurm", Kubernetes => "kubernetes", Docker => "docker",
        Podman => "podman", Containerd => "containerd", Systemd => "systemd",
        User => "user", Other => "other", Unknown => "unknown",
    }
);

label_enum!(
    /// Where workload attribution reads from.
    WorkloadSource {
        Procfs => "procfs", Passwd => "passwd", SlurmMappingDir => "slurm_mapping_dir",
        ContainerEngine => "container_engine", SlurmCgroup => "slurm_cgroup",
        KubeletLogs => "kubelet_logs",
    }
);

label_enum!(
    /// Engines whose per-process busy time NVML reports beside the SM.
    UsageEngine { Memory => "memory", Encoder => "encoder", Decoder => "decoder" }
);

label_enum!(
    /// Why an entry of NVML's per-process utilization answer was left out
    /// (nvtop drops the same after real driver bugs, its issue #110):
    /// `stale` (its sample is not newer than the last one counted),
    /// `future` (stamped more than a ring's length ahead of the clock),
    /// `unlisted` (its pid is 0 or one NVML has not listed as running on
    /// the GPU lately), `over_100` (a percent above 100).
    UsageDrop {
        Stale => "stale", Future => "future", Unlisted => "unlisted", Over100 => "over_100",
    }
);

label_enum!(
    /// Why part of a GPU's energy went to no workload: `idle` (SM time no
    /// workload used), `over_limit` (used by workloads beyond
    /// --workloads.limit), `unknown` (measured use of a MIG instance no
    /// workload is known to hold).
    UnattributedReason { Idle => "idle", OverLimit => "over_limit", Unknown => "unknown" }
);

label_enum!(
    /// Why a read failed: `gone` (the process or file no longer exists),
    /// `permission_denied`, `malformed` (contents not as documented),
    /// `timeout` (no answer within the read's deadline: abandoned, see
    /// `src/fsread.rs`), `io` (anything else).
    WorkloadReadError {
        Gone => "gone", PermissionDenied => "permission_denied",
        Malformed => "malformed", Timeout => "timeout", Io => "io",
    }
);

label_enum!(
    /// Why a request or connection got no handler's answer.
    HttpRefusal {
        Unauthorized => "unauthorized", RateLimited => "rate_limited",
        AuthQueueFull => "auth_queue_full", TooManyScrapes => "too_many_scrapes",
        ConnectionLimit => "connection_limit", TlsHandshake => "tls_handshake",
        PlainHttpOnTls => "plain_http_on_tls", MalformedRequest => "malformed_request",
    }
);

/// One GPU's place on the host as NVML gives it, the GPU's own row of
/// `nvidia-smi topo -m` before it is joined with its peers' rows
/// (`collectors/topology.rs`). Each part is `None` where NVML gave none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuTopology {
    /// `nvmlGpuTopologyLevel_t` to each other GPU, by the peer's index.
    pub pcie: Vec<(u32, u32)>,
    /// CPUs near the GPU, as nvidia-smi prints them (`0-55,112-167`).
    pub cpus: Option<String>,
    /// NUMA nodes near the GPU, printed the same way.
    pub numa_nodes: Option<String>,
    /// The GPU's own NUMA node (coherent Grace platforms).
    pub numa_node: Option<u32>,
    /// Its active NVLink links by what they reach; `None` on a GPU
    /// without NVLink.
    pub nvlink: Option<NvlinkReach>,
}

/// Where a GPU's active NVLink links go.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvlinkReach {
    /// Links to an NVSwitch: each reaches every GPU on the fabric.
    pub to_switch: u32,
    /// Links straight to another GPU, by its PCI bus id (upper case).
    pub to_gpu: Vec<(String, u32)>,
}
