//! The scenario file format as types: what a scenario file may say, read
//! by `scenario/` and written by the two writers, the nvidia-smi importer
//! (`import/`) and `nvml-sim capture` (`capture/`). A key is one field
//! here: renamed or retyped, every reader and writer of it fails to
//! compile until it follows. Boards are `model::BoardFile`.
//!
//! Every key is optional where a file may leave it out; writers fill what
//! they know and serialize (`to_toml`), absent keys left out. Where a value
//! may be `"N/A"` it is a `Val` (NVML answers NOT_SUPPORTED for it).
//! Spans (`Spanned`) are where the reader names a key's line in an error;
//! a writer gives them no place (`at`).

// The keys carry their units (`memory_mib`, `power_w`), as the format does.
#![allow(clippy::struct_field_names)]

use crate::fault::{Fault, ProcKind, Reason, RetireCause};
use crate::model::{BoardFile, FabricHealthSection};
use crate::value::{Mib, NvmlErrorCode, Val};
use serde::de::Error as _;
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use toml::Spanned;

/// A value a writer puts where the reader keeps its span: writers have no
/// file position to give.
pub fn at<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// More GPUs than any node holds (NVML indexes them in 32 bits, but a
/// scenario or capture asking for billions would exhaust memory building
/// them).
pub const MAX_GPUS: usize = 64;

/// A scenario file (README.md, "Scenario file format").
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: Option<String>,
    pub description: Option<String>,
    /// Another scenario (built-in name) whose GPUs this one starts from.
    pub base: Option<Spanned<String>>,
    /// Boards this scenario defines, by the key its `[[gpu]]` tables use.
    #[serde(default)]
    pub board: BTreeMap<String, Spanned<BoardFile>>,
    #[serde(default)]
    pub gpu: Vec<Spanned<GpuFile>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Spanned<TimelineEntry>>,
    pub driver: Option<Spanned<String>>,
    pub privileged: Option<bool>,
    pub denied: Option<Spanned<Vec<u32>>>,
    pub host_pid_namespace: Option<bool>,
    pub gpm_absent_engines: Option<GpmAbsentEngines>,
    /// Where each GPU sits on the host (`scenario/topology.rs`).
    pub topology: Option<Spanned<TopologyFile>>,
    /// System calls that answered an error (a capture's record).
    pub errors: Option<Spanned<CallErrors>>,
    /// Exports the captured driver lacked.
    pub absent_functions: Option<Spanned<Vec<String>>>,
}

impl ScenarioFile {
    /// The file's TOML text, keys in order (what the writers print).
    pub fn to_toml(&self) -> Result<String, crate::value::Invalid> {
        // Through a table: its keys are sorted, so the text does not
        // depend on the order fields are declared in.
        let table = toml::Table::try_from(self).map_err(|e| e.to_string())?;
        Ok(toml::to_string(&table).map_err(|e| e.to_string())?)
    }
}

/// A scenario's `[topology]` table, as written (what it means:
/// `scenario/topology.rs`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa: Vec<NumaSet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_numa: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie: Vec<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvswitches: Vec<String>,
}

/// A GPU's NUMA Affinity: one node, or a list as nvidia-smi prints it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum NumaSet {
    One(u32),
    Set(String),
}

/// What `nvmlGpmMetricsGet` answers for engines a GPU lacks
/// (`gpm_absent_engines`): NVIDIA does not document which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum GpmAbsentEngines {
    /// 0 with SUCCESS.
    Zero,
    /// NOT_SUPPORTED.
    NotSupported,
}

impl TryFrom<String> for GpmAbsentEngines {
    type Error = crate::value::Invalid;
    fn try_from(v: String) -> Result<Self, Self::Error> {
        match v.as_str() {
            "zero" => Ok(Self::Zero),
            "not_supported" => Ok(Self::NotSupported),
            other => Err(format!(
                "gpm_absent_engines = \"{other}\": expected \"zero\" or \"not_supported\""
            )
            .into()),
        }
    }
}

impl From<GpmAbsentEngines> for String {
    fn from(v: GpmAbsentEngines) -> String {
        match v {
            GpmAbsentEngines::Zero => "zero",
            GpmAbsentEngines::NotSupported => "not_supported",
        }
        .into()
    }
}

/// One `[[gpu]]` table: everything `nvidia-smi -q` shows of a GPU.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFile {
    /// A board: built-in or one of the file's `[board.<key>]`.
    pub model: Option<Spanned<String>>,
    /// A board for this table only (on `model`, if given).
    pub board: Option<Spanned<BoardFile>>,
    /// This many identical GPUs (default 1).
    pub count: Option<usize>,
    /// Base utilization, percent (default 0).
    pub load: Option<f64>,
    pub mig: Option<Spanned<Vec<MigEntry>>>,
    pub processes: Option<Vec<ProcEntry>>,
    pub display: Option<Val<bool>>,
    pub display_mode: Option<Val<bool>>,
    pub persistence: Option<Val<bool>>,
    pub mig_pending: Option<bool>,
    pub mps: Option<bool>,
    pub uuid: Option<Spanned<String>>,
    pub serial: Option<Spanned<Val<String>>>,
    pub pci_bus_id: Option<Spanned<String>>,
    pub minor_number: Option<Val<u32>>,
    pub compute_mode: Option<Val<ComputeMode>>,
    pub ecc: Option<Val<bool>>,
    pub ecc_pending: Option<bool>,
    pub power_limit_w: Option<Spanned<f64>>,
    pub enforced_power_limit_w: Option<Spanned<f64>>,
    pub virtualization_mode: Option<Val<VirtualizationMode>>,
    pub driver_model: Option<DriverModel>,
    pub driver_model_pending: Option<DriverModel>,
    pub readings: Option<Spanned<ReadingsFile>>,
    pub counters: Option<CountersFile>,
    pub fabric: Option<Spanned<FabricFile>>,
    /// `nvmlDeviceGetModuleId` (default: the GPU's index + 1).
    pub module_id: Option<u32>,
    /// `nvmlDeviceGetPlatformInfo` (NVL72 trays, HGX B200); absent:
    /// NOT_SUPPORTED.
    pub platform: Option<PlatformFile>,
    /// Calls on this GPU's handle that answer an error, by function name.
    pub errors: Option<Spanned<CallErrors>>,
    /// Field values answered as they are: "ID" or "ID:SCOPE".
    pub fields: Option<Spanned<FieldPins>>,
}

/// One `[[timeline]]` entry: a fault (its `action` and keys, as the
/// control socket takes it) and `at`, when, in seconds after `nvmlInit`.
/// Both are checked when the file is read (times and percentages in
/// range); whether the GPU it names exists is the scenario's to check.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEntry {
    pub at: f64,
    pub fault: Fault,
}

impl<'de> Deserialize<'de> for TimelineEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a table: `at` sits among the fault's keys, which the
        // fault refuses (`deny_unknown_fields`), and these messages are
        // the format's own.
        let mut table = toml::Table::deserialize(d)?;
        let at = match table.remove("at") {
            Some(toml::Value::Float(f)) => f,
            Some(toml::Value::Integer(i)) => i as f64,
            Some(_) => return Err(D::Error::custom("`at` must be a number of seconds")),
            None => {
                return Err(D::Error::custom(
                    "timeline entry without `at` (seconds after nvmlInit)",
                ))
            }
        };
        crate::fault::check_seconds("at", at).map_err(D::Error::custom)?;
        let fault: Fault = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                D::Error::custom(format!("bad timeline entry: {}", e.message()))
            })?;
        fault
            .check()
            .map_err(|m| D::Error::custom(format!("bad timeline entry: {m}")))?;
        Ok(TimelineEntry { at, fault })
    }
}

impl Serialize for TimelineEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut table = toml::Table::try_from(&self.fault).map_err(S::Error::custom)?;
        table.insert("at".into(), toml::Value::Float(self.at));
        table.serialize(s)
    }
}

/// `errors = { nvmlFunction = "NOT_SUPPORTED", ... }`: what calls answer
/// instead of their value (a capture's record of a real driver), by
/// function name.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct CallErrors(BTreeMap<String, NvmlErrorCode>);

impl CallErrors {
    pub fn insert(&mut self, function: impl Into<String>, error: NvmlErrorCode) {
        self.0.insert(function.into(), error);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// By function name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, NvmlErrorCode)> {
        self.0.iter().map(|(f, e)| (f.as_str(), *e))
    }
}

impl<'de> Deserialize<'de> for CallErrors {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a table: the messages name the key and the value.
        let mut out = CallErrors::default();
        for (name, v) in toml::Table::deserialize(d)? {
            let ok_name = name.starts_with("nvml")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok_name {
                return Err(D::Error::custom(format!(
                    "errors: `{name}` is not an NVML function name"
                )));
            }
            let code = NvmlErrorCode::from_value(&v).ok_or_else(|| {
                D::Error::custom(format!(
                    "errors.{name} = {v}: an NVML error name (NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST, UNKNOWN, ...) or a non-zero code"
                ))
            })?;
            out.0.insert(name, code);
        }
        Ok(out)
    }
}

/// One `fields` entry: a field id and scope id (`"83"`, `"202:3"`) and
/// what `nvmlDeviceGetFieldValues` answers for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldPin {
    pub id: u32,
    pub scope: u32,
    pub answer: FieldAnswer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldAnswer {
    Value(i64),
    Error(NvmlErrorCode),
}

/// `fields = { "ID" = value, "ID:SCOPE" = "NOT_SUPPORTED", ... }`, in the
/// order of their keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldPins(Vec<FieldPin>);

impl FieldPins {
    /// Pins a field (again: the new answer).
    pub fn insert(&mut self, id: u32, scope: u32, answer: FieldAnswer) {
        match self.0.iter_mut().find(|p| p.id == id && p.scope == scope) {
            Some(p) => p.answer = answer,
            None => self.0.push(FieldPin { id, scope, answer }),
        }
    }

    /// The answer pinned for a field (the first, as the driver finds it).
    pub fn get(&self, id: u32, scope: u32) -> Option<FieldAnswer> {
        self.iter()
            .find(|p| p.id == id && p.scope == scope)
            .map(|p| p.answer)
    }

    pub fn iter(&self) -> impl Iterator<Item = &FieldPin> {
        self.0.iter()
    }
}

/// A pin's key: the id alone for scope 0.
fn field_key(id: u32, scope: u32) -> String {
    if scope == 0 {
        id.to_string()
    } else {
        format!("{id}:{scope}")
    }
}

impl Serialize for FieldPins {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for p in &self.0 {
            let key = field_key(p.id, p.scope);
            match p.answer {
                FieldAnswer::Value(v) => map.serialize_entry(&key, &v)?,
                FieldAnswer::Error(e) => map.serialize_entry(&key, &e)?,
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for FieldPins {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a table: the messages name the key and the value, and
        // `"83"` and `"083"` stay two entries, as written.
        let mut out = Vec::new();
        for (key, v) in toml::Table::deserialize(d)? {
            let (id, scope) = match key.split_once(':') {
                Some((i, s)) => (i.parse::<u32>(), s.parse::<u32>()),
                None => (key.parse::<u32>(), Ok(0)),
            };
            let (Ok(id), Ok(scope)) = (id, scope) else {
                return Err(D::Error::custom(format!(
                    "fields: `{key}` is not a field id (`83`) or id:scope (`202:3`)"
                )));
            };
            let answer = match &v {
                toml::Value::Integer(i) => FieldAnswer::Value(*i),
                other => FieldAnswer::Error(NvmlErrorCode::from_value(other).ok_or_else(|| {
                    D::Error::custom(format!(
                        "fields.\"{key}\" = {other}: a number or an NVML error name"
                    ))
                })?),
            };
            out.push(FieldPin { id, scope, answer });
        }
        Ok(FieldPins(out))
    }
}

/// `fabric = { state, status, clique_id, cluster_uuid, health }`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricFile {
    pub state: Option<FabricState>,
    pub status: Option<FabricStatus>,
    pub clique_id: Option<u32>,
    pub cluster_uuid: Option<String>,
    pub health: Option<FabricHealthSection>,
}

/// `platform = { chassis_serial, slot, tray, host_id, peer_type }`: the
/// bytes of `nvmlPlatformInfo_v2_t` (module id is `module_id`); a slot or
/// tray left out answers 0xFF, what nvidia-smi prints as N/A
/// (`ffi/info.rs`), any other key 0.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformFile {
    /// At most 16 bytes (13 on Blackwell).
    pub chassis_serial: Option<String>,
    pub slot: Option<u8>,
    pub tray: Option<u8>,
    pub host_id: Option<u8>,
    /// NVML's raw `peerType` byte: nvml.h does not name its values.
    pub peer_type: Option<u8>,
}

/// `NVML_GPU_FABRIC_STATE_*` as a capture prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricState {
    NotStarted,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricStatus {
    Success,
    Failure,
}

/// `nvmlGpuRecoveryAction_t` (field 230), in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
}

impl RecoveryAction {
    /// By `nvmlGpuRecoveryAction_t` value.
    pub const ALL: [RecoveryAction; 5] = [
        RecoveryAction::None,
        RecoveryAction::GpuReset,
        RecoveryAction::NodeReboot,
        RecoveryAction::DrainP2p,
        RecoveryAction::DrainAndReset,
    ];
}

/// `nvmlComputeMode_t`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

impl ComputeMode {
    pub const ALL: [ComputeMode; 4] = [
        ComputeMode::Default,
        ComputeMode::ExclusiveThread,
        ComputeMode::Prohibited,
        ComputeMode::ExclusiveProcess,
    ];
}

/// `nvmlGpuVirtualizationMode_t`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VirtualizationMode {
    None,
    PassThrough,
    Vgpu,
    HostVgpu,
    HostVsga,
}

impl VirtualizationMode {
    pub const ALL: [VirtualizationMode; 5] = [
        VirtualizationMode::None,
        VirtualizationMode::PassThrough,
        VirtualizationMode::Vgpu,
        VirtualizationMode::HostVgpu,
        VirtualizationMode::HostVsga,
    ];
}

/// `nvmlDriverModel_t`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverModel {
    Wddm,
    /// TCC (nvml.h calls it WDM).
    Tcc,
    Mcdm,
}

impl DriverModel {
    pub const ALL: [DriverModel; 3] = [DriverModel::Wddm, DriverModel::Tcc, DriverModel::Mcdm];

    pub fn nvml(self) -> u32 {
        self as u32
    }
}

/// A MIG entry: a profile name, or a table.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum MigEntry {
    Name(String),
    Full(MigInstance),
}

impl<'de> Deserialize<'de> for MigEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) => Ok(MigEntry::Name(s)),
            v @ toml::Value::Table(_) => v
                .try_into()
                .map(MigEntry::Full)
                .map_err(|e: toml::de::Error| D::Error::custom(e.message().trim())),
            other => Err(D::Error::custom(format!(
                "a MIG instance is a profile name or a table, not {}",
                other.type_str()
            ))),
        }
    }
}

/// A GPU instance: `{ profile, placement | gpu_instance_id, ... }`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstance {
    pub profile: String,
    /// Percent (default 0).
    pub load: Option<f64>,
    pub placement: Option<u32>,
    pub gpu_instance_id: Option<u32>,
    pub uuid: Option<String>,
    pub memory_used_mib: Option<u64>,
    pub compute_instances: Option<Vec<ComputeInstance>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeInstance {
    pub id: u32,
    /// Default: the whole GPU instance.
    pub slices: Option<u32>,
    pub uuid: Option<String>,
}

fn compute() -> ProcKind {
    ProcKind::Compute
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcEntry {
    pub pid: Option<u32>,
    pub name: String,
    pub memory_mib: Val<u64>,
    #[serde(default = "compute")]
    pub kind: ProcKind,
    pub mig_instance: Option<usize>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub sm_percent: Option<f64>,
    pub memory_percent: Option<f64>,
    pub encoder_percent: Option<f64>,
    pub decoder_percent: Option<f64>,
}

impl ProcEntry {
    /// A process as a capture lists it: no declared use.
    pub fn listed(pid: u32, name: String, memory_mib: Val<u64>, kind: ProcKind) -> ProcEntry {
        ProcEntry {
            pid: Some(pid),
            name,
            memory_mib,
            kind,
            mig_instance: None,
            gpu_instance: None,
            compute_instance: None,
            sm_percent: None,
            memory_percent: None,
            encoder_percent: None,
            decoder_percent: None,
        }
    }
}

/// `[gpu.readings]`: pinned readings.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadingsFile {
    pub temperature_c: Option<Val<u32>>,
    pub memory_temperature_c: Option<Val<u32>>,
    pub tlimit_c: Option<Val<i32>>,
    pub power_w: Option<Val<f64>>,
    pub module_power_w: Option<Val<f64>>,
    pub memory_power_w: Option<Val<f64>>,
    pub graphics_clock_mhz: Option<Val<u32>>,
    pub sm_clock_mhz: Option<Val<u32>>,
    pub memory_clock_mhz: Option<Val<u32>>,
    pub video_clock_mhz: Option<Val<u32>>,
    pub pstate: Option<Val<u32>>,
    pub fan_percent: Option<Val<OneOrMany>>,
    pub utilization: Option<UtilizationFile>,
    pub pcie_tx_kbps: Option<Val<u32>>,
    pub pcie_rx_kbps: Option<Val<u32>>,
    pub pcie_generation: Option<Val<u32>>,
    pub pcie_width: Option<u32>,
    pub memory_used_mib: Option<Mib>,
    pub memory_free_mib: Option<Mib>,
    pub bar1_used_mib: Option<Mib>,
    pub power_smoothing_lifetime_percent: Option<Val<f64>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationFile {
    pub gpu: Option<Val<u32>>,
    pub memory: Option<Val<u32>>,
    pub encoder: Option<Val<u32>>,
    pub decoder: Option<Val<u32>>,
    pub jpeg: Option<Val<u32>>,
    pub ofa: Option<Val<u32>>,
}

/// `[gpu.counters]`: where the host's counters were.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountersFile {
    pub ecc: Option<EccFile>,
    pub sram: Option<SramFile>,
    pub retired_pages: Option<Val<Vec<RetiredPage>>>,
    pub retired_pending: Option<bool>,
    pub remapped_rows: Option<Val<RemapFile>>,
    pub clock_event_reasons: Option<Vec<Reason>>,
    pub supported_clock_event_reasons: Option<Vec<Reason>>,
    pub clock_event_durations_us: Option<DurationsFile>,
    pub pcie_replays: Option<Val<u32>>,
    pub recovery_action: Option<Val<RecoveryAction>>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccFile {
    pub volatile: Option<EccScope>,
    pub aggregate: Option<EccScope>,
    /// The locations that have counters, by error type (default: L1, L2,
    /// DRAM, register file and SRAM; texture and CBU answer NOT_SUPPORTED).
    pub locations: Option<EccLocationSets>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccLocationSets {
    #[serde(default)]
    pub corrected: Vec<MemoryLocation>,
    #[serde(default)]
    pub uncorrected: Vec<MemoryLocation>,
}

/// `nvmlMemoryLocation_t`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryLocation {
    L1,
    L2,
    Dram,
    RegisterFile,
    Texture,
    TextureShm,
    Cbu,
    Sram,
}

impl MemoryLocation {
    pub const ALL: [MemoryLocation; 8] = [
        MemoryLocation::L1,
        MemoryLocation::L2,
        MemoryLocation::Dram,
        MemoryLocation::RegisterFile,
        MemoryLocation::Texture,
        MemoryLocation::TextureShm,
        MemoryLocation::Cbu,
        MemoryLocation::Sram,
    ];
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccScope {
    pub corrected: Option<EccCounts>,
    pub uncorrected: Option<EccCounts>,
}

/// Counts by `nvmlMemoryLocation_t` (absent: 0).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccCounts {
    pub l1: Option<u64>,
    pub l2: Option<u64>,
    pub dram: Option<u64>,
    pub register_file: Option<u64>,
    pub texture: Option<u64>,
    pub texture_shm: Option<u64>,
    pub cbu: Option<u64>,
    pub sram: Option<u64>,
}

impl EccCounts {
    /// The count at a location (`nvmlMemoryLocation_t` order).
    pub fn slot(&mut self, at: MemoryLocation) -> &mut Option<u64> {
        match at {
            MemoryLocation::L1 => &mut self.l1,
            MemoryLocation::L2 => &mut self.l2,
            MemoryLocation::Dram => &mut self.dram,
            MemoryLocation::RegisterFile => &mut self.register_file,
            MemoryLocation::Texture => &mut self.texture,
            MemoryLocation::TextureShm => &mut self.texture_shm,
            MemoryLocation::Cbu => &mut self.cbu,
            MemoryLocation::Sram => &mut self.sram,
        }
    }

    /// Every location's count, absent ones 0.
    pub fn array(&self) -> [u64; 8] {
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
        .map(|c| c.unwrap_or_default())
    }
}

/// `nvmlEccSramErrorStatus_v1_t`'s counters (absent: 0, not exceeded).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SramFile {
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected_parity: Option<u64>,
    pub volatile_uncorrected_secded: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected_parity: Option<u64>,
    pub aggregate_uncorrected_secded: Option<u64>,
    pub l2: Option<u64>,
    pub sm: Option<u64>,
    pub microcontroller: Option<u64>,
    pub pcie: Option<u64>,
    pub other: Option<u64>,
    pub threshold_exceeded: Option<bool>,
}

impl SramFile {
    /// Whether the file says nothing.
    pub fn is_empty(&self) -> bool {
        [
            self.volatile_corrected,
            self.volatile_uncorrected_parity,
            self.volatile_uncorrected_secded,
            self.aggregate_corrected,
            self.aggregate_uncorrected_parity,
            self.aggregate_uncorrected_secded,
            self.l2,
            self.sm,
            self.microcontroller,
            self.pcie,
            self.other,
        ]
        .iter()
        .all(Option::is_none)
            && self.threshold_exceeded.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPage {
    pub address: u64,
    pub cause: RetireCause,
    pub timestamp_us: Option<u64>,
}

/// `remapped_rows = { correctable, uncorrectable, pending, failure, histogram }`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemapFile {
    pub correctable: Option<u32>,
    pub uncorrectable: Option<u32>,
    pub pending: Option<bool>,
    pub failure: Option<bool>,
    /// Absent: every bank at max.
    pub histogram: Option<Histogram>,
}

/// Banks by spare rows left (`nvmlRowRemapperHistogramValues_t`).
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Histogram {
    pub max: u32,
    pub high: u32,
    pub partial: u32,
    pub low: u32,
    pub none: u32,
}

/// Time spent in each clock-event reason, microseconds (absent: 0).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurationsFile {
    pub sw_power_cap: Option<u64>,
    pub sync_boost: Option<u64>,
    pub sw_thermal_slowdown: Option<u64>,
    pub hw_thermal_slowdown: Option<u64>,
    pub hw_power_brake_slowdown: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_keys_stay_out_of_the_text_and_keys_are_sorted() {
        let mut file = ScenarioFile {
            name: Some("x".into()),
            ..ScenarioFile::default()
        };
        file.gpu.push(at(GpuFile {
            model: Some(at("h100-sxm5-80gb".into())),
            readings: Some(at(ReadingsFile {
                temperature_c: Some(Val::Is(41)),
                power_w: Some(Val::NotSupported),
                ..ReadingsFile::default()
            })),
            ..GpuFile::default()
        }));
        let text = file.to_toml().unwrap();
        assert_eq!(
            text,
            "name = \"x\"\n\n[board]\n\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n\n[gpu.readings]\npower_w = \"N/A\"\ntemperature_c = 41\n"
        );
        let back: ScenarioFile = toml::from_str(&text).unwrap();
        assert_eq!(back.gpu.len(), 1);
    }

    /// Timeline entries, call errors and field pins are types once the
    /// file is read, and written back as the format spells them.
    #[test]
    fn timeline_errors_and_fields_are_typed_when_read() {
        let text = "errors = { nvmlSystemGetCudaDriverVersion = \"NOT_FOUND\" }\n\n[[gpu]]\nerrors = { nvmlDeviceGetFanSpeed = 3, nvmlDeviceGetPowerUsage = 77 }\nfields = { \"83\" = -5, \"202:3\" = \"GPU_IS_LOST\" }\n\n[[timeline]]\nat = 2\naction = \"lose\"\ngpu = 0\n";
        let file: ScenarioFile = toml::from_str(text).unwrap();
        let entry = file.timeline[0].get_ref();
        assert_eq!((entry.at, &entry.fault), (2.0, &Fault::Lose { gpu: 0 }));
        let top: Vec<_> = file.errors.as_ref().unwrap().get_ref().iter().collect();
        assert_eq!(
            top,
            [("nvmlSystemGetCudaDriverVersion", NvmlErrorCode::NOT_FOUND)]
        );
        let gpu = file.gpu[0].get_ref();
        let codes: Vec<u32> = gpu
            .errors
            .as_ref()
            .unwrap()
            .get_ref()
            .iter()
            .map(|(_, e)| e.code())
            .collect();
        assert_eq!(codes, [3, 77]);
        let fields = gpu.fields.as_ref().unwrap().get_ref();
        assert_eq!(
            fields.get(202, 3),
            Some(FieldAnswer::Error(NvmlErrorCode::new(15).unwrap()))
        );
        assert_eq!(fields.get(83, 0), Some(FieldAnswer::Value(-5)));
        let written = file.to_toml().unwrap();
        for line in [
            "nvmlSystemGetCudaDriverVersion = \"NOT_FOUND\"",
            "nvmlDeviceGetFanSpeed = \"NOT_SUPPORTED\"",
            "nvmlDeviceGetPowerUsage = 77",
            "83 = -5",
            "\"202:3\" = \"GPU_IS_LOST\"",
            "action = \"lose\"",
        ] {
            assert!(written.contains(line), "{line}\n{written}");
        }
        let again: ScenarioFile = toml::from_str(&written).unwrap();
        assert_eq!(again.timeline[0].get_ref(), entry);
        assert_eq!(
            again.gpu[0].get_ref().fields.as_ref().unwrap().get_ref(),
            fields
        );
    }
}
