//! What one `[[gpu]]` table becomes once resolved on its board: identity,
//! settings, pinned readings, counters at start, MIG instances and
//! processes, every value checked. What a file may say is
//! `crate::schema`'s; `resolve.rs` goes from the one to the other.

use crate::fault::{ProcKind, ProcUse, Reason, RetireCause};
use crate::identity::PciAddr;
use crate::model::{self, Model};
use crate::value::Val;
use std::sync::Arc;

// ---- what a GPU becomes ------------------------------------------------------

#[derive(Debug, Clone)]
pub struct GpuSpec {
    pub model: Arc<Model>,
    pub load: f64,
    pub mig: Option<Vec<MigSpec>>,
    pub processes: Vec<ProcSpec>,
    /// MIG mode after the next GPU reset (`nvidia-smi -mig`); defaults to the current mode.
    pub mig_pending: Option<bool>,
    /// An MPS server runs on the GPU: its other compute processes are its clients.
    pub mps: bool,
    pub identity: Identity,
    /// What the scenario said of the identity, kept to derive it again
    /// when another scenario starts from this one (`base`).
    pub identity_given: super::IdentityGiven,
    pub settings: Settings,
    pub readings: Readings,
    pub counters: Counters,
    /// Calls on the whole GPU's handle that answer this error instead
    /// (`[gpu.errors]`: what a capture recorded, by function name).
    pub call_errors: Vec<(String, u32)>,
    pub fabric: FabricSpec,
    /// `nvmlDeviceGetModuleId`; `None`: the GPU's index + 1.
    pub module_id: Option<u32>,
    /// `nvmlDeviceGetPlatformInfo`; `None`: NOT_SUPPORTED.
    pub platform: Option<crate::schema::PlatformFile>,
    /// Field values a capture recorded (`[gpu.fields]`), answered as they
    /// are: they do not move with time or faults.
    pub field_pins: Vec<FieldPin>,
}

/// One `[gpu.fields]` entry: field id, scope id and the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldPin {
    pub id: u32,
    pub scope: u32,
    /// The value, or the `nvmlReturn_t` of the entry.
    pub answer: Result<i64, u32>,
}

/// The GPU's place in an NVLink fabric and the fabric manager's health
/// rows (`nvidia-smi -q`, "Fabric").
#[derive(Debug, Clone, Default)]
pub struct FabricSpec {
    /// `NVML_GPU_FABRIC_STATE_*` as a capture printed it (`None`: 3,
    /// completed, on NVSwitch boards).
    pub state: Option<u8>,
    /// The registration's `nvmlReturn_t` (0: success).
    pub status: u32,
    pub clique_id: u32,
    /// All zero: no multi-node partition (single-node NVSwitch systems).
    pub cluster_uuid: [u8; 16],
    pub health: model::FabricHealth,
}

/// Identifiers, resolved: the scenario's or derived, and unique in the fleet.
#[derive(Debug, Clone)]
pub struct Identity {
    pub uuid: String,
    /// `None`: the board has no serial, or the scenario says `"N/A"`.
    pub serial: Option<String>,
    pub pci: PciAddr,
    pub minor: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub persistence: Val<bool>,
    /// A display is attached and active (`nvmlDeviceGetDisplayActive`).
    pub display_active: Val<bool>,
    /// A display may be attached (`nvmlDeviceGetDisplayMode`).
    pub display_mode: Val<bool>,
    /// `nvmlComputeMode_t`.
    pub compute_mode: Val<u32>,
    /// ECC mode now and after the next reboot; `None`: not supported.
    pub ecc: Option<(bool, bool)>,
    /// The power limit set (`nvidia-smi -pl`), milliwatts; `None`: the
    /// board's default.
    pub power_limit_mw: Option<u32>,
    /// The limit enforced, where a scenario says it differs from the one set.
    pub enforced_power_limit_mw: Option<u32>,
    /// `nvmlGpuVirtualizationMode_t`.
    pub virtualization_mode: Val<u32>,
    /// Windows driver model now and pending (`nvmlDriverModel_t`); `None`
    /// on Linux, where NVML answers NOT_SUPPORTED.
    pub driver_model: Option<(u32, u32)>,
}

/// Readings the scenario pins. `None`: the reading follows the load wave;
/// `Some(NotSupported)`: NVML answers NOT_SUPPORTED.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    pub temperature_c: Option<Val<u32>>,
    pub memory_temperature_c: Option<Val<u32>>,
    /// How far below T.Limit the GPU is (`nvmlDeviceGetMarginTemperature`).
    pub tlimit_c: Option<Val<i32>>,
    pub power_mw: Option<Val<u32>>,
    pub module_power_mw: Option<Val<u32>>,
    pub memory_power_mw: Option<Val<u32>>,
    /// Graphics, SM, memory, video (`nvmlClockType_t` order).
    pub clocks_mhz: [Option<Val<u32>>; 4],
    pub pstate: Option<Val<u32>>,
    /// Per fan, percent; one value serves every fan.
    pub fans_percent: Option<Val<Vec<u32>>>,
    /// GPU, memory, encoder, decoder, JPEG, OFA, percent.
    pub utilization: [Option<Val<u32>>; 6],
    pub pcie_tx_kbps: Option<Val<u32>>,
    pub pcie_rx_kbps: Option<Val<u32>>,
    pub pcie_generation: Option<Val<u32>>,
    /// The link's width at start (a `pcie` fault can still retrain it).
    pub pcie_width: Option<u32>,
    /// Bytes, as NVML answers them.
    pub memory_used: Option<u64>,
    /// Free memory as NVML reported it, where it is not total - reserved -
    /// used to the MiB (nvidia-smi rounds each).
    pub memory_free: Option<u64>,
    pub bar1_used: Option<u64>,
    /// Power smoothing circuitry lifetime remaining, percent.
    pub power_smoothing_lifetime_percent: Option<Val<f64>>,
}

/// Counters at start; faults add to them.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// [corrected, uncorrected][volatile, aggregate][nvmlMemoryLocation_t];
    /// `None`: a little corrected history derived from the GPU index.
    pub ecc: Option<[[[u64; 8]; 2]; 2]>,
    /// Per error type (corrected, uncorrected), bit n:
    /// `nvmlMemoryLocation_t` n has counters (`None`: the default set).
    pub ecc_locations: Option<[u8; 2]>,
    /// The clock event reasons the GPU reports (`None`: all nine).
    pub supported_clock_event_reasons: Option<Vec<Reason>>,
    pub sram: Option<SramCounts>,
    /// `Some(NotSupported)`: the queries answer NOT_SUPPORTED.
    pub retired_pages: Option<Val<Vec<RetiredSpec>>>,
    pub retired_pending: bool,
    pub remapped_rows: Option<Val<RemapSpec>>,
    /// Clock event reasons active at start, if the scenario says.
    pub clock_event_reasons: Option<Vec<Reason>>,
    /// SW power cap, sync boost, SW thermal, HW thermal, HW power brake.
    pub clock_event_durations_us: [u64; 5],
    pub pcie_replays: Option<Val<u32>>,
    /// `nvmlGpuRecoveryAction_t` the driver asks for (field 230); `None`:
    /// derived from pending remaps and retirements.
    pub recovery_action: Option<Val<u32>>,
}

/// `nvmlEccSramErrorStatus_v1_t`'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SramCounts {
    pub volatile_corrected: u64,
    pub volatile_uncorrected_parity: u64,
    pub volatile_uncorrected_secded: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected_parity: u64,
    pub aggregate_uncorrected_secded: u64,
    pub l2: u64,
    pub sm: u64,
    pub microcontroller: u64,
    pub pcie: u64,
    pub other: u64,
    pub threshold_exceeded: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetiredSpec {
    pub address: u64,
    pub cause: RetireCause,
    pub timestamp_us: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemapSpec {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
    /// `[max, high, partial, low, none]` banks; absent: every bank at max.
    pub histogram: Option<[u32; 5]>,
}

#[derive(Debug, Clone)]
pub struct MigSpec {
    pub profile: String,
    pub load: f64,
    /// Memory slice it starts at (resolved: the scenario's, or where the
    /// driver would put it).
    pub start: u32,
    pub uuid: Option<String>,
    /// Memory in use in the instance, pinned.
    pub memory_used_mib: Option<u64>,
    /// Compute instances (never empty: by default one spanning it, id 0).
    pub compute_instances: Vec<CiSpec>,
}

#[derive(Debug, Clone)]
pub struct CiSpec {
    pub id: u32,
    pub slices: u32,
    pub uuid: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ProcSpec {
    pub pid: Option<u32>,
    pub name: String,
    /// `None`: NVML gives no per-process memory (`"N/A"`, as under WDDM).
    pub memory_mib: Option<u64>,
    pub kind: ProcKind,
    /// Index into the GPU's `mig` list.
    pub mig_instance: Option<usize>,
    /// Compute instance id in that GPU instance.
    pub compute_instance: u32,
    /// What the process does, when the scenario declares it.
    pub usage: Option<ProcUse>,
}
