//! One `[[gpu]]` table: everything `nvidia-smi -q` shows of a GPU, as a
//! scenario says it (README.md, "Scenario file format"): identity,
//! settings, pinned readings (`[gpu.readings]`), counters at start
//! (`[gpu.counters]`), MIG instances and processes. Any value may be
//! `"N/A"`: the driver then answers NOT_SUPPORTED for it.

use crate::fault::{ProcKind, ProcUse, Reason, RetireCause};
use crate::identity::PciAddr;
use crate::model::{self, Model, Placement};
use crate::value::Val;
use serde::Deserialize;
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
    pub memory_used_mib: Option<u64>,
    /// Free memory as NVML reported it, where it is not total - reserved -
    /// used to the MiB (nvidia-smi rounds each).
    pub memory_free_mib: Option<u64>,
    pub bar1_used_mib: Option<u64>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredSpec {
    pub address: u64,
    pub cause: RetireCause,
    pub timestamp_us: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemapSpec {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
    /// `[max, high, partial, low, none]` banks; absent: every bank at max.
    #[serde(deserialize_with = "histogram")]
    pub histogram: Option<[u32; 5]>,
}

fn histogram<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<[u32; 5]>, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct H {
        max: u32,
        high: u32,
        partial: u32,
        low: u32,
        none: u32,
    }
    let h = H::deserialize(d)?;
    Ok(Some([h.max, h.high, h.partial, h.low, h.none]))
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

// ---- what a scenario file says -------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGpu {
    pub model: Option<toml::Spanned<String>>,
    pub board: Option<toml::Spanned<model::BoardFile>>,
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default)]
    pub load: f64,
    pub mig: Option<toml::Spanned<Vec<RawMig>>>,
    #[serde(default)]
    pub processes: Vec<RawProc>,
    pub display: Option<Val<bool>>,
    pub display_mode: Option<Val<bool>>,
    pub persistence: Option<Val<bool>>,
    pub mig_pending: Option<bool>,
    #[serde(default)]
    pub mps: bool,
    pub uuid: Option<toml::Spanned<String>>,
    pub serial: Option<toml::Spanned<Val<String>>>,
    pub pci_bus_id: Option<toml::Spanned<String>>,
    pub minor_number: Option<Val<u32>>,
    pub compute_mode: Option<Val<ComputeMode>>,
    pub ecc: Option<Val<bool>>,
    pub ecc_pending: Option<bool>,
    pub power_limit_w: Option<toml::Spanned<f64>>,
    pub enforced_power_limit_w: Option<toml::Spanned<f64>>,
    pub virtualization_mode: Option<Val<VirtualizationMode>>,
    pub driver_model: Option<DriverModel>,
    pub driver_model_pending: Option<DriverModel>,
    pub readings: Option<toml::Spanned<RawReadings>>,
    pub counters: Option<RawCounters>,
    pub fabric: Option<toml::Spanned<RawFabric>>,
    pub errors: Option<toml::Spanned<toml::Table>>,
    pub fields: Option<toml::Spanned<toml::Table>>,
}

/// `fabric = { clique_id = 2, cluster_uuid = "...", health = { ... } }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFabric {
    /// As a capture printed it: not-started | in-progress | completed.
    state: Option<FabricState>,
    status: Option<FabricStatus>,
    clique_id: Option<u32>,
    cluster_uuid: Option<String>,
    health: Option<model::FabricHealthSection>,
}

impl RawFabric {
    fn resolve(&self, model: &Model) -> Result<FabricSpec, String> {
        if !model.nvswitch_fabric() {
            return Err(format!(
                "{} is not on an NVSwitch fabric (fabric)",
                model.name
            ));
        }
        let mut health = model.fabric_health;
        if let Some(h) = &self.health {
            h.apply(&mut health);
        }
        let cluster_uuid = match &self.cluster_uuid {
            None => [0; 16],
            Some(text) => {
                let hex: String = text.chars().filter(|c| *c != '-').collect();
                let bad = || {
                    format!("fabric.cluster_uuid `{text}` is not a UUID (8-4-4-4-12 hex digits)")
                };
                if hex.len() != 32 || text.len() != 36 {
                    return Err(bad());
                }
                let mut out = [0u8; 16];
                for (i, b) in out.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
                }
                out
            }
        };
        Ok(FabricSpec {
            state: self.state.map(|s| match s {
                FabricState::NotStarted => 1,
                FabricState::InProgress => 2,
                FabricState::Completed => 3,
            }),
            status: match self.status {
                None | Some(FabricStatus::Success) => 0,
                Some(FabricStatus::Failure) => 999,
            },
            clique_id: self.clique_id.unwrap_or(0),
            cluster_uuid,
            health,
        })
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum FabricState {
    NotStarted,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum FabricStatus {
    Success,
    Failure,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
}

/// `errors = { nvmlFunction = "NOT_SUPPORTED", ... }`: what calls answer
/// instead of their value (a capture's record of a real driver).
pub(super) fn call_errors(errors: &toml::Spanned<toml::Table>) -> Result<Vec<(String, u32)>, Fail> {
    let mut out = Vec::new();
    for (name, v) in errors.get_ref() {
        let ok_name =
            name.starts_with("nvml") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_name {
            return Err((
                Some(errors.span().start),
                format!("errors: `{name}` is not an NVML function name"),
            ));
        }
        let code = crate::value::nvml_error(v).ok_or_else(|| {
            (
                Some(errors.span().start),
                format!(
                    "errors.{name} = {v}: an NVML error name (NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST, UNKNOWN, ...) or a non-zero code"
                ),
            )
        })?;
        out.push((name.clone(), code));
    }
    Ok(out)
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum VirtualizationMode {
    None,
    PassThrough,
    Vgpu,
    HostVgpu,
    HostVsga,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum DriverModel {
    Wddm,
    /// TCC (nvml.h calls it WDM).
    Tcc,
    Mcdm,
}

impl DriverModel {
    fn nvml(self) -> u32 {
        match self {
            DriverModel::Wddm => 0,
            DriverModel::Tcc => 1,
            DriverModel::Mcdm => 2,
        }
    }
}

/// A MIG entry: a profile name, or a table.
pub(super) enum RawMig {
    Name(String),
    Full(RawMigEntry),
}

impl<'de> Deserialize<'de> for RawMig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) => Ok(RawMig::Name(s)),
            v @ toml::Value::Table(_) => v
                .try_into()
                .map(RawMig::Full)
                .map_err(|e: toml::de::Error| D::Error::custom(e.message().trim())),
            other => Err(D::Error::custom(format!(
                "a MIG instance is a profile name or a table, not {}",
                other.type_str()
            ))),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMigEntry {
    profile: String,
    #[serde(default)]
    load: f64,
    placement: Option<u32>,
    gpu_instance_id: Option<u32>,
    uuid: Option<String>,
    memory_used_mib: Option<u64>,
    compute_instances: Option<Vec<RawCi>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCi {
    id: u32,
    /// Default: the whole GPU instance.
    slices: Option<u32>,
    uuid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProc {
    pid: Option<u32>,
    name: String,
    memory_mib: Val<u64>,
    #[serde(default = "compute")]
    kind: ProcKind,
    mig_instance: Option<usize>,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    sm_percent: Option<f64>,
    memory_percent: Option<f64>,
    encoder_percent: Option<f64>,
    decoder_percent: Option<f64>,
}

fn compute() -> ProcKind {
    ProcKind::Compute
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReadings {
    temperature_c: Option<Val<u32>>,
    memory_temperature_c: Option<Val<u32>>,
    tlimit_c: Option<Val<i32>>,
    power_w: Option<Val<f64>>,
    module_power_w: Option<Val<f64>>,
    memory_power_w: Option<Val<f64>>,
    graphics_clock_mhz: Option<Val<u32>>,
    sm_clock_mhz: Option<Val<u32>>,
    memory_clock_mhz: Option<Val<u32>>,
    video_clock_mhz: Option<Val<u32>>,
    pstate: Option<Val<u32>>,
    fan_percent: Option<Val<OneOrMany>>,
    utilization: Option<RawUtilization>,
    pcie_tx_kbps: Option<Val<u32>>,
    pcie_rx_kbps: Option<Val<u32>>,
    pcie_generation: Option<Val<u32>>,
    pcie_width: Option<u32>,
    memory_used_mib: Option<u64>,
    memory_free_mib: Option<u64>,
    bar1_used_mib: Option<u64>,
    power_smoothing_lifetime_percent: Option<Val<f64>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawUtilization {
    gpu: Option<Val<u32>>,
    memory: Option<Val<u32>>,
    encoder: Option<Val<u32>>,
    decoder: Option<Val<u32>>,
    jpeg: Option<Val<u32>>,
    ofa: Option<Val<u32>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCounters {
    ecc: Option<RawEcc>,
    sram: Option<SramCounts>,
    retired_pages: Option<Val<Vec<RetiredSpec>>>,
    retired_pending: Option<bool>,
    remapped_rows: Option<Val<RemapSpec>>,
    clock_event_reasons: Option<Vec<Reason>>,
    supported_clock_event_reasons: Option<Vec<Reason>>,
    clock_event_durations_us: Option<RawDurations>,
    pcie_replays: Option<Val<u32>>,
    recovery_action: Option<Val<RecoveryAction>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEcc {
    volatile: Option<RawEccScope>,
    aggregate: Option<RawEccScope>,
    /// The locations that have counters, by error type (default: L1, L2,
    /// DRAM, register file and SRAM; texture and CBU answer NOT_SUPPORTED).
    locations: Option<RawEccLocationSets>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEccLocationSets {
    #[serde(default)]
    corrected: Vec<EccLocation>,
    #[serde(default)]
    uncorrected: Vec<EccLocation>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum EccLocation {
    L1,
    L2,
    Dram,
    RegisterFile,
    Texture,
    TextureShm,
    Cbu,
    Sram,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEccScope {
    corrected: Option<RawEccLocations>,
    uncorrected: Option<RawEccLocations>,
}

/// Counts by `nvmlMemoryLocation_t`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawEccLocations {
    l1: u64,
    l2: u64,
    dram: u64,
    register_file: u64,
    texture: u64,
    texture_shm: u64,
    cbu: u64,
    sram: u64,
}

impl RawEccLocations {
    fn array(&self) -> [u64; 8] {
        [
            self.l1,
            self.l2,
            self.dram,
            self.register_file,
            self.texture,
            self.texture_shm,
            self.cbu,
            self.sram,
        ]
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawDurations {
    sw_power_cap: u64,
    sync_boost: u64,
    sw_thermal_slowdown: u64,
    hw_thermal_slowdown: u64,
    hw_power_brake_slowdown: u64,
}

// ---- from the file to the spec -------------------------------------------------

/// An error at a byte offset of the file (`None`: the `[[gpu]]` table).
pub(super) type Fail = (Option<usize>, String);

fn percent(v: Option<Val<u32>>, what: &str) -> Result<(), String> {
    match v {
        Some(Val::Is(p)) if p > 100 => Err(format!("{what} = {p} is outside 0..=100 percent")),
        _ => Ok(()),
    }
}

fn watts(v: Option<Val<f64>>, what: &str) -> Result<Option<Val<u32>>, String> {
    match v {
        None => Ok(None),
        Some(Val::NotSupported) => Ok(Some(Val::NotSupported)),
        Some(Val::Is(w)) if (0.0..=100_000.0).contains(&w) => {
            Ok(Some(Val::Is((w * 1000.0).round() as u32)))
        }
        Some(Val::Is(w)) => Err(format!("{what} = {w} W is outside 0..=100000")),
    }
}

impl RawReadings {
    fn resolve(self, model: &Model) -> Result<Readings, String> {
        let u = self.utilization.unwrap_or_default();
        let utilization = [u.gpu, u.memory, u.encoder, u.decoder, u.jpeg, u.ofa];
        for (v, what) in utilization
            .iter()
            .zip(["gpu", "memory", "encoder", "decoder", "jpeg", "ofa"])
        {
            percent(*v, &format!("utilization.{what}"))?;
        }
        let fans_percent = self.fan_percent.map(|f| match f {
            Val::NotSupported => Val::NotSupported,
            Val::Is(OneOrMany::One(p)) => Val::Is(vec![p]),
            Val::Is(OneOrMany::Many(v)) => Val::Is(v),
        });
        if let Some(Val::Is(v)) = &fans_percent {
            if let Some(p) = v.iter().find(|p| **p > 100) {
                return Err(format!("fan_percent {p} is outside 0..=100"));
            }
            if v.is_empty() || (v.len() > 1 && v.len() != model.fans as usize) {
                return Err(format!(
                    "fan_percent gives {} values; {} has {} fans (give one value for all)",
                    v.len(),
                    model.name,
                    model.fans
                ));
            }
        }
        if let Some(Val::Is(p)) = self.pstate {
            if p > 15 {
                return Err(format!("pstate {p} is outside 0..=15 (P0..P15)"));
            }
        }
        if let Some(Val::Is(g)) = self.pcie_generation {
            if g == 0 || g > model.pcie_gen {
                return Err(format!(
                    "pcie_generation {g} is outside 1..={} for {}",
                    model.pcie_gen, model.name
                ));
            }
        }
        if let Some(w) = self.pcie_width {
            if w == 0 || w > model.pcie_width {
                return Err(format!(
                    "pcie_width {w} is outside 1..={} for {}",
                    model.pcie_width, model.name
                ));
            }
        }
        if let Some(m) = self.memory_used_mib {
            if m > model.memory_mib - model.reserved_mib {
                return Err(format!(
                    "memory_used_mib {m} is more than the {} MiB {} has outside its reserve",
                    model.memory_mib - model.reserved_mib,
                    model.name
                ));
            }
        }
        if let Some(f) = self.memory_free_mib {
            if f > model.memory_mib {
                return Err(format!(
                    "memory_free_mib {f} is more than the {} MiB {} has",
                    model.memory_mib, model.name
                ));
            }
        }
        if let Some(Val::Is(p)) = self.power_smoothing_lifetime_percent {
            if !model.power_smoothing {
                return Err(format!(
                    "{} has no power smoothing (power_smoothing_lifetime_percent)",
                    model.name
                ));
            }
            if !(0.0..=100.0).contains(&p) {
                return Err(format!(
                    "power_smoothing_lifetime_percent {p} is outside 0..=100"
                ));
            }
        }
        if let Some(m) = self.bar1_used_mib {
            if m > model.bar1_mib {
                return Err(format!(
                    "bar1_used_mib {m} is more than the board's {} MiB",
                    model.bar1_mib
                ));
            }
        }
        Ok(Readings {
            temperature_c: self.temperature_c,
            memory_temperature_c: self.memory_temperature_c,
            tlimit_c: self.tlimit_c,
            power_mw: watts(self.power_w, "power_w")?,
            module_power_mw: watts(self.module_power_w, "module_power_w")?,
            memory_power_mw: watts(self.memory_power_w, "memory_power_w")?,
            clocks_mhz: [
                self.graphics_clock_mhz,
                self.sm_clock_mhz,
                self.memory_clock_mhz,
                self.video_clock_mhz,
            ],
            pstate: self.pstate,
            fans_percent,
            utilization,
            pcie_tx_kbps: self.pcie_tx_kbps,
            pcie_rx_kbps: self.pcie_rx_kbps,
            pcie_generation: self.pcie_generation,
            pcie_width: self.pcie_width,
            memory_used_mib: self.memory_used_mib,
            memory_free_mib: self.memory_free_mib,
            bar1_used_mib: self.bar1_used_mib,
            power_smoothing_lifetime_percent: self.power_smoothing_lifetime_percent,
        })
    }
}

impl RawCounters {
    fn resolve(self, model: &Model) -> Result<Counters, String> {
        let mask = |l: &[EccLocation]| l.iter().fold(0u8, |m, loc| m | 1 << (*loc as u8));
        let ecc_locations = self
            .ecc
            .as_ref()
            .and_then(|e| e.locations.as_ref())
            .map(|l| [mask(&l.corrected), mask(&l.uncorrected)]);
        let ecc = self.ecc.map(|e| {
            let mut out = [[[0u64; 8]; 2]; 2];
            for (scope, raw) in [e.volatile, e.aggregate].into_iter().enumerate() {
                let raw = raw.unwrap_or_default();
                for (et, locs) in [raw.corrected, raw.uncorrected].into_iter().enumerate() {
                    out[et][scope] = locs.unwrap_or_default().array();
                }
            }
            out
        });
        if let Some(e) = &ecc {
            for by_scope in e {
                if let Some(l) = (0..8).find(|&l| by_scope[1][l] < by_scope[0][l]) {
                    return Err(format!(
                        "ECC counters: an aggregate count is never below the volatile one (location {l})"
                    ));
                }
            }
        }
        if let Some(Val::Is(pages)) = &self.retired_pages {
            if !model.page_retirement {
                return Err(format!(
                    "{} remaps rows, it does not retire pages (retired_pages = \"N/A\")",
                    model.name
                ));
            }
            if pages.len() > 4096 {
                return Err(format!("{} retired pages: at most 4096", pages.len()));
            }
        }
        if let Some(Val::Is(r)) = &self.remapped_rows {
            if !model.row_remapping {
                return Err(format!(
                    "{} does not remap rows (remapped_rows = \"N/A\")",
                    model.name
                ));
            }
            if let Some(h) = r.histogram {
                if h.iter().map(|&v| u64::from(v)).sum::<u64>() > 1 << 20 {
                    return Err("remapped_rows.histogram: more than 2^20 banks".into());
                }
            }
        }
        let d = self.clock_event_durations_us.unwrap_or_default();
        let durations = [
            d.sw_power_cap,
            d.sync_boost,
            d.sw_thermal_slowdown,
            d.hw_thermal_slowdown,
            d.hw_power_brake_slowdown,
        ];
        // Nanoseconds must fit NVML's u64 counters.
        if durations.iter().any(|us| *us > u64::MAX / 1000 / 4) {
            return Err("clock_event_durations_us: too large".into());
        }
        Ok(Counters {
            ecc,
            ecc_locations,
            supported_clock_event_reasons: self.supported_clock_event_reasons,
            sram: self.sram,
            retired_pages: self.retired_pages,
            retired_pending: self.retired_pending.unwrap_or(false),
            remapped_rows: self.remapped_rows,
            clock_event_reasons: self.clock_event_reasons,
            clock_event_durations_us: durations,
            pcie_replays: self.pcie_replays,
            recovery_action: self.recovery_action.map(|a| match a {
                Val::NotSupported => Val::NotSupported,
                Val::Is(a) => Val::Is(a as u32),
            }),
        })
    }
}

/// Places the MIG entries of a GPU: fixed placements and GPU instance
/// ids where given, the driver's choice elsewhere.
fn mig_specs(model: &Model, raw: &[RawMig]) -> Result<Vec<MigSpec>, String> {
    let entries: Vec<(String, Option<&RawMigEntry>)> = raw
        .iter()
        .map(|m| match m {
            RawMig::Name(n) => (n.clone(), None),
            RawMig::Full(e) => (e.profile.clone(), Some(e)),
        })
        .collect();
    let mut wanted = Vec::new();
    for (name, e) in &entries {
        let mut start = e.and_then(|e| e.placement);
        if let Some(id) = e.and_then(|e| e.gpu_instance_id) {
            // A capture gives the id, not the placement: the placement
            // whose id it is.
            let p = model
                .profile_by_name(name)
                .ok_or_else(|| format!("unknown MIG profile `{name}` for {}", model.name))?;
            let at = p
                .starts
                .iter()
                .copied()
                .find(|&s| p.instance_id_for(s) == id)
                .ok_or_else(|| {
                    format!(
                        "no placement of `{name}` on {} has GPU instance id {id} (ids: {:?})",
                        model.name,
                        p.starts
                            .iter()
                            .map(|&s| p.instance_id_for(s))
                            .collect::<Vec<_>>()
                    )
                })?;
            if start.is_some_and(|s| s != at) {
                return Err(format!(
                    "`{name}`: GPU instance id {id} is the one at memory slice {at}, not at {}",
                    start.unwrap_or(0)
                ));
            }
            start = Some(at);
        }
        wanted.push(Placement {
            profile: name,
            start,
        });
    }
    let placed = model::place(model, &wanted)?;
    let mut out = Vec::new();
    for ((name, e), (profile, start)) in entries.iter().zip(placed) {
        if let Some(load) = e.map(|e| e.load) {
            if !(0.0..=100.0).contains(&load) {
                return Err(format!("MIG instance load {load} is outside 0..=100"));
            }
        }
        let compute_instances = match e.and_then(|e| e.compute_instances.as_ref()) {
            None => vec![CiSpec {
                id: 0,
                slices: profile.slices,
                uuid: None,
            }],
            Some(list) => {
                let mut cis = Vec::new();
                for ci in list {
                    let slices = ci.slices.unwrap_or(profile.slices);
                    if slices == 0 || ci.id > 7 || cis.iter().any(|c: &CiSpec| c.id == ci.id) {
                        return Err(format!(
                            "`{name}`: compute instance {} (ids are 0..=7, each once; at least one slice)",
                            ci.id
                        ));
                    }
                    cis.push(CiSpec {
                        id: ci.id,
                        slices,
                        uuid: ci.uuid.clone(),
                    });
                }
                let used: u32 = cis.iter().map(|c| c.slices).sum();
                if cis.is_empty() || used > profile.slices {
                    return Err(format!(
                        "`{name}`: its compute instances take {used} slices of its {}",
                        profile.slices
                    ));
                }
                cis
            }
        };
        if let Some(m) = e.and_then(|e| e.memory_used_mib) {
            if m > profile.memory_mib {
                return Err(format!(
                    "`{name}`: memory_used_mib {m} is more than its {} MiB",
                    profile.memory_mib
                ));
            }
        }
        out.push(MigSpec {
            profile: name.clone(),
            load: e.map_or(0.0, |e| e.load),
            start,
            uuid: e.and_then(|e| e.uuid.clone()),
            memory_used_mib: e.and_then(|e| e.memory_used_mib),
            compute_instances,
        });
    }
    Ok(out)
}

impl RawGpu {
    /// The spec of the GPUs of this table, on board `model`; their
    /// identities are the caller's to derive and de-duplicate.
    pub(super) fn resolve(mut self, model: &Arc<Model>) -> Result<GpuSpec, Fail> {
        let readings_at = self.readings.as_ref().map(|r| r.span().start);
        let readings = self.readings.take().map(toml::Spanned::into_inner);
        let counters = self.counters.take();
        let at_table = |m: String| (None, m);
        if !(0.0..=100.0).contains(&self.load) {
            return Err(at_table(format!(
                "load {} is outside 0..=100 percent",
                self.load
            )));
        }
        let mig = match &self.mig {
            None => None,
            Some(list) => {
                Some(mig_specs(model, list.get_ref()).map_err(|m| (Some(list.span().start), m))?)
            }
        };
        let mut processes = Vec::new();
        for p in &self.processes {
            let n = mig.as_ref().map_or(0, Vec::len);
            let mig_instance = match (p.mig_instance, p.gpu_instance) {
                (Some(_), Some(_)) => {
                    return Err(at_table(format!(
                        "process `{}`: give mig_instance or gpu_instance, not both",
                        p.name
                    )))
                }
                (Some(i), None) if i >= n => {
                    return Err(at_table(format!(
                        "process `{}` names mig_instance {i}, but this GPU has {n} MIG instances",
                        p.name
                    )))
                }
                (Some(i), None) => Some(i),
                (None, Some(gi)) => {
                    let specs = mig.as_deref().unwrap_or_default();
                    let found = specs.iter().position(|m| {
                        model
                            .profile_by_name(&m.profile)
                            .is_some_and(|p| p.instance_id_for(m.start) == gi)
                    });
                    Some(found.ok_or_else(|| {
                        at_table(format!(
                            "process `{}` names gpu_instance {gi}, which this GPU does not have",
                            p.name
                        ))
                    })?)
                }
                (None, None) => None,
            };
            if mig_instance.is_none() && mig.is_some() {
                return Err(at_table(format!(
                    "process `{}` runs on a MIG-enabled GPU and must name its mig_instance (or gpu_instance)",
                    p.name
                )));
            }
            let compute_instance = p.compute_instance.unwrap_or(0);
            if let Some(i) = mig_instance {
                let spec = &mig.as_ref().expect("checked above")[i];
                if !spec
                    .compute_instances
                    .iter()
                    .any(|c| c.id == compute_instance)
                {
                    return Err(at_table(format!(
                        "process `{}` names compute_instance {compute_instance}, which its GPU instance does not have",
                        p.name
                    )));
                }
            } else if p.compute_instance.is_some() {
                return Err(at_table(format!(
                    "process `{}`: compute_instance on a GPU without MIG",
                    p.name
                )));
            }
            let usage = ProcUse::declared(
                p.sm_percent,
                p.memory_percent,
                p.encoder_percent,
                p.decoder_percent,
            )
            .map_err(|m| at_table(format!("process `{}`: {m}", p.name)))?;
            processes.push(ProcSpec {
                pid: p.pid,
                name: p.name.clone(),
                memory_mib: p.memory_mib.get(),
                kind: p.kind,
                mig_instance,
                compute_instance,
                usage,
            });
        }
        if self.mig_pending.is_some() && !model.mig_capable() {
            return Err(at_table(format!(
                "{} does not support MIG (mig_pending)",
                model.name
            )));
        }
        let display_active = self.display.unwrap_or(Val::Is(false));
        if display_active == Val::Is(true) && !model.display_capable {
            return Err(at_table(format!("{} has no display output", model.name)));
        }
        let ecc = match self.ecc {
            Some(Val::NotSupported) => None,
            _ if !model.ecc => {
                if matches!(self.ecc, Some(Val::Is(true))) || self.ecc_pending == Some(true) {
                    return Err(at_table(format!("{} has no ECC", model.name)));
                }
                None
            }
            Some(Val::Is(current)) => Some((current, self.ecc_pending.unwrap_or(current))),
            None => Some((
                model.ecc_default,
                self.ecc_pending.unwrap_or(model.ecc_default),
            )),
        };
        let limit_mw = |w: &Option<toml::Spanned<f64>>, key: &str| -> Result<Option<u32>, Fail> {
            let Some(w) = w else { return Ok(None) };
            let mw = (w.get_ref() * 1000.0).round();
            if !(f64::from(model.power_min_mw)..=f64::from(model.power_max_mw)).contains(&mw) {
                return Err((
                    Some(w.span().start),
                    format!(
                        "{key} {} is outside {}'s limits {}..={} W",
                        w.get_ref(),
                        model.name,
                        f64::from(model.power_min_mw) / 1000.0,
                        f64::from(model.power_max_mw) / 1000.0
                    ),
                ));
            }
            Ok(Some(mw as u32))
        };
        let power_limit_mw = limit_mw(&self.power_limit_w, "power_limit_w")?;
        let enforced_power_limit_mw =
            limit_mw(&self.enforced_power_limit_w, "enforced_power_limit_w")?;
        let driver_model = match (self.driver_model, self.driver_model_pending) {
            (None, None) => None,
            (Some(c), p) => Some((c.nvml(), p.unwrap_or(c).nvml())),
            (None, Some(_)) => {
                return Err(at_table("driver_model_pending without driver_model".into()))
            }
        };
        let settings = Settings {
            persistence: self.persistence.unwrap_or(Val::Is(!model.display_capable)),
            display_active,
            display_mode: self.display_mode.unwrap_or(display_active),
            compute_mode: self.compute_mode.map_or(Val::Is(0), |m| match m {
                Val::NotSupported => Val::NotSupported,
                Val::Is(m) => Val::Is(m as u32),
            }),
            ecc,
            power_limit_mw,
            enforced_power_limit_mw,
            virtualization_mode: self.virtualization_mode.map_or(Val::Is(0), |m| match m {
                Val::NotSupported => Val::NotSupported,
                Val::Is(m) => Val::Is(m as u32),
            }),
            driver_model,
        };
        let call_errors = match &self.errors {
            Some(e) => call_errors(e)?,
            None => Vec::new(),
        };
        let mut field_pins = Vec::new();
        if let Some(fields) = &self.fields {
            for (key, v) in fields.get_ref() {
                let bad = |m: String| (Some(fields.span().start), m);
                let (id, scope) = match key.split_once(':') {
                    Some((i, s)) => (i.parse::<u32>(), s.parse::<u32>()),
                    None => (key.parse::<u32>(), Ok(0)),
                };
                let (Ok(id), Ok(scope)) = (id, scope) else {
                    return Err(bad(format!(
                        "fields: `{key}` is not a field id (`83`) or id:scope (`202:3`)"
                    )));
                };
                let answer = match v {
                    toml::Value::Integer(i) => Ok(*i),
                    other => Err(crate::value::nvml_error(other).ok_or_else(|| {
                        bad(format!(
                            "fields.\"{key}\" = {other}: a number or an NVML error name"
                        ))
                    })?),
                };
                field_pins.push(FieldPin { id, scope, answer });
            }
        }
        let readings = readings
            .map(|r| r.resolve(model))
            .transpose()
            .map_err(|m| (readings_at, m))?
            .unwrap_or_default();
        let counters = counters
            .map(|c| c.resolve(model))
            .transpose()
            .map_err(at_table)?
            .unwrap_or_default();
        let fabric = match &self.fabric {
            Some(f) => f
                .get_ref()
                .resolve(model)
                .map_err(|m| (Some(f.span().start), m))?,
            None => FabricSpec {
                health: model.fabric_health,
                ..FabricSpec::default()
            },
        };
        Ok(GpuSpec {
            model: model.clone(),
            load: self.load,
            mig,
            processes,
            mig_pending: self.mig_pending,
            mps: self.mps,
            identity: Identity {
                uuid: String::new(),
                serial: None,
                pci: PciAddr::on_bus(0),
                minor: None,
            },
            identity_given: super::IdentityGiven::default(),
            settings,
            readings,
            counters,
            call_errors,
            fabric,
            field_pins,
        })
    }
}
