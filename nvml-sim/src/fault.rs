//! Faults: the one vocabulary shared by scenario timelines, the control
//! socket and the `nvml-sim` CLI. A fault is a TOML table whose `action` key
//! names the variant (see README, "Faults").

use crate::value::Invalid;
use crate::value::Val;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EccType {
    Corrected,
    Uncorrected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EccLocation {
    L1,
    L2,
    Dram,
    RegisterFile,
    Sram,
}

impl EccLocation {
    /// `nvmlMemoryLocation_t` value.
    pub fn nvml(self) -> usize {
        match self {
            EccLocation::L1 => 0,
            EccLocation::L2 => 1,
            EccLocation::Dram => 2,
            EccLocation::RegisterFile => 3,
            EccLocation::Sram => 7,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetireCause {
    /// Multiple single-bit errors on the page.
    Sbe,
    /// A double-bit error on the page.
    Dbe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    Correctable,
    Uncorrectable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcKind {
    Compute,
    Graphics,
    /// Both contexts (nvidia-smi type `C+G`): in both process lists.
    #[serde(rename = "compute+graphics")]
    ComputeGraphics,
}

impl ProcKind {
    /// Whether a process of this kind is in the list of `kind`'s processes.
    pub fn listed_as(self, kind: ProcKind) -> bool {
        self == kind || self == ProcKind::ComputeGraphics
    }
}

/// Clock event (throttle) reasons by the names nvidia-smi prints. A
/// `throttle` fault sets the throttle ones; a scenario may say any of them
/// is active at start (`counters.clock_event_reasons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
}

impl Reason {
    /// `nvmlClocksEventReason*` bit.
    pub fn bit(self) -> u64 {
        match self {
            Reason::GpuIdle => 0x1,
            Reason::ApplicationsClocksSetting => 0x2,
            Reason::SwPowerCap => 0x4,
            Reason::HwSlowdown => 0x8,
            Reason::SyncBoost => 0x10,
            Reason::SwThermalSlowdown => 0x20,
            Reason::HwThermalSlowdown => 0x40,
            Reason::HwPowerBrakeSlowdown => 0x80,
            Reason::DisplayClockSetting => 0x100,
        }
    }

    /// Whether a `throttle` fault may set it: the idle, applications
    /// clocks and display clock reasons are settings, not throttling.
    pub fn throttles(self) -> bool {
        !matches!(
            self,
            Reason::GpuIdle | Reason::ApplicationsClocksSetting | Reason::DisplayClockSetting
        )
    }
}

/// An NVLink error counter: the DL counters of NVLink 1-4
/// (`nvmlNvLinkErrorCounter_t`, fields 161-163 and the legacy per-link
/// ids) and the NVLink5 ones (fields 213-222; Blackwell). `recovery` is
/// both generations' link recovery: a successful one on NVLink5 (213 and
/// 215 grow); `recovery-failed` one that declared the link down (214 and
/// 215).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NvlinkCounter {
    Replay,
    Recovery,
    CrcFlit,
    CrcData,
    EccData,
    RecoveryFailed,
    Effective,
    Symbol,
}

impl NvlinkCounter {
    pub const COUNT: usize = 8;

    /// Index into a link's counters; the first five are
    /// `nvmlNvLinkErrorCounter_t` values.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether an NVLink generation counts this: NVLink5 (`true`) has no
    /// replay or CRC counters, older links no NVLink5 ones.
    pub fn counted_by(self, nvlink5: bool) -> bool {
        match self {
            NvlinkCounter::Recovery => true,
            NvlinkCounter::RecoveryFailed | NvlinkCounter::Effective | NvlinkCounter::Symbol => {
                nvlink5
            }
            _ => !nvlink5,
        }
    }
}

/// The NVLink-C2C error counters (nvml.h 12.9 / R575 on, go-nvml 62ce1e3):
/// `crc` is `NVML_FI_DEV_C2C_LINK_ERROR_INTR` (231, "C2C Link CRC Error
/// Counter"), `replay` 232, `replay-b2b` 233 ("Back to Back Replay").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum C2cCounter {
    Crc,
    Replay,
    ReplayB2b,
}

impl C2cCounter {
    pub const COUNT: usize = 3;

    /// Index into a link's counters: the field id less 231.
    pub fn index(self) -> usize {
        self as usize
    }
}

fn c2c_replay() -> C2cCounter {
    C2cCounter::Replay
}

/// `NVML_GPU_FABRIC_STATE_*` a fault can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricState {
    NotStarted,
    InProgress,
    Completed,
}

impl FabricState {
    pub fn nvml(self) -> u8 {
        match self {
            FabricState::NotStarted => 1,
            FabricState::InProgress => 2,
            FabricState::Completed => 3,
        }
    }
}

fn one() -> u64 {
    1
}
fn replay() -> NvlinkCounter {
    NvlinkCounter::Replay
}
fn yes() -> bool {
    true
}
fn uncorrected() -> EccType {
    EccType::Uncorrected
}
fn dram() -> EccLocation {
    EccLocation::Dram
}
fn dbe() -> RetireCause {
    RetireCause::Dbe
}
fn uncorrectable() -> RowKind {
    RowKind::Uncorrectable
}
// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}
fn compute() -> ProcKind {
    ProcKind::Compute
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fault {
    /// An XID error event, optionally attributed to a MIG instance. With
    /// `log_only`, it reaches only the kernel log (`NVML_SIM_KMSG`), not
    /// NVML's event sets, as 79, 119 and 120 do on real drivers.
    Xid {
        gpu: u32,
        code: u64,
        gpu_instance: Option<u32>,
        compute_instance: Option<u32>,
        #[serde(default, skip_serializing_if = "is_false")]
        log_only: bool,
        /// What the kernel-log line says after the code and the process,
        /// in place of the simulator's wording: an NVLink5 XID's `RLW_REMAP
        /// Nonfatal XC0 i0 Link 08 (0x00000004 0x00000100 ...)`, say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// The recovery action the driver asks for (field 230, R570 on), any
    /// value: the ones of newer drivers (5 recover the IMEX domain, 6 reset
    /// the PCIe bus, 7 reboot the system) and ones no driver has given yet.
    RecoveryAction {
        gpu: u32,
        value: u32,
    },
    /// `nvidia-smi -p 0` (`nvmlDeviceClearEccErrorCounts`): the volatile ECC
    /// counters go back to 0 at once, with no reset of the GPU.
    ClearEcc {
        gpu: u32,
    },
    /// ECC errors: both the volatile and the aggregate counter move.
    Ecc {
        gpu: u32,
        #[serde(default = "uncorrected")]
        error_type: EccType,
        #[serde(default = "dram")]
        location: EccLocation,
        #[serde(default = "one")]
        count: u64,
    },
    /// A retired page (boards with page retirement, e.g. V100).
    RetirePage {
        gpu: u32,
        #[serde(default = "dbe")]
        cause: RetireCause,
        #[serde(default = "yes")]
        pending: bool,
    },
    /// A remapped row (Ampere and newer).
    RemapRow {
        gpu: u32,
        #[serde(default = "uncorrectable")]
        kind: RowKind,
        #[serde(default = "yes")]
        pending: bool,
        #[serde(default)]
        failure: bool,
    },
    /// The GPU falls off the bus: every later call on it answers GPU_IS_LOST.
    Lose {
        gpu: u32,
    },
    /// Every call on the GPU blocks, for `seconds` (scaled) or until `release`.
    Hang {
        gpu: u32,
        seconds: Option<f64>,
    },
    Release {
        gpu: u32,
    },
    /// Every call on the GPU takes `ms` milliseconds longer (0 restores).
    Slow {
        gpu: u32,
        ms: u64,
    },
    /// The kernel driver goes away: nvmlInit fails with DRIVER_NOT_LOADED.
    DriverUnload,
    DriverLoad,
    /// Destroys every GPU instance and creates these (empty list: none).
    MigReconfigure {
        gpu: u32,
        profiles: Vec<String>,
    },
    /// An operator sets the MIG mode (`nvidia-smi -i N -mig 1|0`,
    /// `nvmlDeviceSetMigMode`): the pending mode always; the current one
    /// too when `activate` (default), as the call does when it can reset
    /// the idle GPU ("This API may unbind or reset the device to activate
    /// the requested mode", nvml.h). Without it the change waits for a
    /// reset (`NVML_ERROR_RESET_REQUIRED` in a pass-through VM).
    MigMode {
        gpu: u32,
        enabled: bool,
        #[serde(default = "yes")]
        activate: bool,
    },
    /// Replaces the GPU's active throttle reasons (empty list: none).
    Throttle {
        gpu: u32,
        reasons: Vec<Reason>,
    },
    ProcessStart {
        gpu: u32,
        pid: Option<u32>,
        name: String,
        memory_mib: u64,
        #[serde(default = "compute")]
        kind: ProcKind,
        gpu_instance: Option<u32>,
        compute_instance: Option<u32>,
        /// What it does, percent per engine (see `usage.rs`); none given:
        /// it takes a share of the GPU's load.
        sm_percent: Option<f64>,
        memory_percent: Option<f64>,
        encoder_percent: Option<f64>,
        decoder_percent: Option<f64>,
    },
    ProcessStop {
        pid: u32,
    },
    /// Changes what a running process does; the engines not given keep
    /// their declared use (0 when it declared none).
    ProcessUse {
        pid: u32,
        sm_percent: Option<f64>,
        memory_percent: Option<f64>,
        encoder_percent: Option<f64>,
        decoder_percent: Option<f64>,
    },
    /// Sets the GPU's base utilization in percent.
    Load {
        gpu: u32,
        percent: f64,
    },
    /// One NVLink link goes inactive (`up = false`), as after a link failure
    /// (XID 74), or trains up again.
    NvlinkState {
        gpu: u32,
        link: u32,
        up: bool,
    },
    /// One NVLink link's error counter grows by `count`.
    NvlinkErrors {
        gpu: u32,
        link: u32,
        #[serde(default = "replay")]
        counter: NvlinkCounter,
        #[serde(default = "one")]
        count: u64,
    },
    /// One NVLink-C2C link to the Grace CPU goes inactive (`up = false`:
    /// field 171 answers 0), as before XID 173, or trains up again.
    C2cState {
        gpu: u32,
        link: u32,
        up: bool,
    },
    /// One NVLink-C2C link's error counter grows by `count`.
    C2cErrors {
        gpu: u32,
        link: u32,
        #[serde(default = "c2c_replay")]
        counter: C2cCounter,
        #[serde(default = "one")]
        count: u64,
    },
    /// The GPU's NVLink fabric registration (NVSwitch boards): its state,
    /// and whether a completed registration succeeded.
    Fabric {
        gpu: u32,
        state: FabricState,
        #[serde(default = "yes")]
        registered: bool,
    },
    /// The fabric health a GPU reports (`nvmlDeviceGetGpuFabricInfoV`):
    /// its summary (v3, R580+) and the health mask's rows (true, false, or
    /// "N/A": not supported); absent keys keep their value.
    FabricHealth {
        gpu: u32,
        summary: Option<crate::model::HealthSummary>,
        degraded_bandwidth: Option<Val<bool>>,
        route_recovery: Option<Val<bool>>,
        route_unhealthy: Option<Val<bool>>,
        access_timeout_recovery: Option<Val<bool>>,
        incorrect_configuration: Option<crate::model::IncorrectConfiguration>,
    },
    /// The power smoothing circuitry's lifetime remaining (percent) on
    /// boards with power smoothing.
    PowerSmoothing {
        gpu: u32,
        lifetime_percent: f64,
    },
    /// An operator sets the power limit (`nvidia-smi -pl WATTS`): the
    /// management limit, and the enforced one with it.
    PowerLimit {
        gpu: u32,
        watts: f64,
    },
    /// Uncorrectable SRAM errors cross (or, `exceeded = false`, no longer
    /// cross) NVIDIA's RMA threshold.
    SramThreshold {
        gpu: u32,
        #[serde(default = "yes")]
        exceeded: bool,
    },
    /// The PCIe link retrains to `width` lanes (absent: unchanged) and
    /// `replays` more replays are counted.
    Pcie {
        gpu: u32,
        width: Option<u32>,
        #[serde(default)]
        replays: u32,
    },
}

/// What a process does with its GPU (scenario keys and fault
/// `process-use`), percent of each engine. See `fleet/usage.rs`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcUse {
    pub sm: f64,
    pub memory: f64,
    pub encoder: f64,
    pub decoder: f64,
}

impl ProcUse {
    /// SM, memory, encoder, decoder, JPEG, OFA: the order of
    /// `nvmlProcessUtilizationInfo_v1_t`.
    pub fn engines(&self) -> [f64; 6] {
        [self.sm, self.memory, self.encoder, self.decoder, 0.0, 0.0]
    }

    /// The fields given override, the rest keep `self`'s values.
    pub fn with(
        self,
        sm: Option<f64>,
        memory: Option<f64>,
        encoder: Option<f64>,
        decoder: Option<f64>,
    ) -> Result<ProcUse, Invalid> {
        let u = ProcUse {
            sm: sm.unwrap_or(self.sm),
            memory: memory.unwrap_or(self.memory),
            encoder: encoder.unwrap_or(self.encoder),
            decoder: decoder.unwrap_or(self.decoder),
        };
        for (name, v) in [
            ("sm_percent", u.sm),
            ("memory_percent", u.memory),
            ("encoder_percent", u.encoder),
            ("decoder_percent", u.decoder),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err(Invalid::from(format!("{name} {v} is outside 0..=100")));
            }
        }
        Ok(u)
    }

    /// A declaration from optional keys: `None` when none is given.
    pub fn declared(
        sm: Option<f64>,
        memory: Option<f64>,
        encoder: Option<f64>,
        decoder: Option<f64>,
    ) -> Result<Option<ProcUse>, Invalid> {
        if [sm, memory, encoder, decoder].iter().all(Option::is_none) {
            return Ok(None);
        }
        ProcUse::default()
            .with(sm, memory, encoder, decoder)
            .map(Some)
    }
}

/// The longest time a scenario or fault may name: a year. Far beyond any
/// test or drill, and far inside what a `Duration` holds (an `at` of 1e300
/// seconds made every event wait panic).
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A number of seconds a scenario or fault may name: finite, not negative,
/// at most a year.
pub fn check_seconds(what: &str, s: f64) -> Result<(), Invalid> {
    if s.is_finite() && (0.0..=MAX_SECONDS).contains(&s) {
        Ok(())
    } else {
        Err(Invalid::from(format!(
            "{what} = {} must be a number of seconds from 0 to {MAX_SECONDS} (a year)",
            short(s)
        )))
    }
}

/// A number as a person would write it: `1e300`, not three hundred digits.
fn short(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e9 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

impl Fault {
    /// The checks serde's types cannot express: times and percentages in
    /// range. Every way in (scenario timeline, control socket, CLI) runs it.
    pub fn check(&self) -> Result<(), Invalid> {
        match self {
            Fault::Hang {
                seconds: Some(s), ..
            } => check_seconds("seconds", *s),
            Fault::Load { percent, .. } if !(0.0..=100.0).contains(percent) => Err(Invalid::from(
                format!("percent = {} is outside 0..=100", short(*percent)),
            )),
            _ => Ok(()),
        }
    }

    pub fn gpu(&self) -> Option<u32> {
        match self {
            Fault::Xid { gpu, .. }
            | Fault::RecoveryAction { gpu, .. }
            | Fault::ClearEcc { gpu }
            | Fault::Ecc { gpu, .. }
            | Fault::RetirePage { gpu, .. }
            | Fault::RemapRow { gpu, .. }
            | Fault::Lose { gpu }
            | Fault::Hang { gpu, .. }
            | Fault::Release { gpu }
            | Fault::Slow { gpu, .. }
            | Fault::MigReconfigure { gpu, .. }
            | Fault::MigMode { gpu, .. }
            | Fault::Throttle { gpu, .. }
            | Fault::ProcessStart { gpu, .. }
            | Fault::Load { gpu, .. }
            | Fault::NvlinkState { gpu, .. }
            | Fault::NvlinkErrors { gpu, .. }
            | Fault::C2cState { gpu, .. }
            | Fault::C2cErrors { gpu, .. }
            | Fault::Pcie { gpu, .. }
            | Fault::Fabric { gpu, .. }
            | Fault::FabricHealth { gpu, .. }
            | Fault::PowerSmoothing { gpu, .. }
            | Fault::PowerLimit { gpu, .. }
            | Fault::SramThreshold { gpu, .. } => Some(*gpu),
            Fault::DriverUnload
            | Fault::DriverLoad
            | Fault::ProcessStop { .. }
            | Fault::ProcessUse { .. } => None,
        }
    }

    /// Whether the fault changes what a GPU's processes do (and with it the
    /// GPU's utilization and energy).
    pub fn changes_use(&self) -> bool {
        matches!(
            self,
            Fault::ProcessStart { .. }
                | Fault::ProcessStop { .. }
                | Fault::ProcessUse { .. }
                | Fault::Load { .. }
                | Fault::MigReconfigure { .. }
                | Fault::MigMode { .. }
        )
    }

    /// A fault from its table (`action` and its keys), checked: what the
    /// control socket and the CLI accept.
    pub fn from_table(table: toml::Table) -> Result<Fault, Invalid> {
        let fault: Fault = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?;
        fault.check()?;
        Ok(fault)
    }
}

/// Parses `{ key = value, ... }` into a table.
pub fn parse_inline(line: &str) -> Result<toml::Table, Invalid> {
    let doc = format!("request = {}", line.trim());
    let mut outer: toml::Table = doc.parse().map_err(|e: toml::de::Error| {
        format!("request is not a TOML inline table: {}", e.message())
    })?;
    match outer.remove("request") {
        Some(toml::Value::Table(t)) => Ok(t),
        _ => Err(Invalid::from(
            "request is not a TOML inline table".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request line as the control socket reads it.
    fn from_line(line: &str) -> Result<Fault, Invalid> {
        Fault::from_table(parse_inline(line)?)
    }

    #[test]
    fn line_round_trip() {
        let f = Fault::Xid {
            gpu: 4,
            code: 43,
            gpu_instance: Some(1),
            compute_instance: None,
            log_only: false,
            detail: None,
        };
        let line = toml::Value::try_from(&f).unwrap().to_string();
        assert!(!line.contains('\n'));
        assert_eq!(from_line(&line).unwrap(), f);
        let parsed = from_line(r#"{ action = "ecc", gpu = 1 }"#).unwrap();
        assert_eq!(
            parsed,
            Fault::Ecc {
                gpu: 1,
                error_type: EccType::Uncorrected,
                location: EccLocation::Dram,
                count: 1
            }
        );
        assert!(
            !line.contains("log_only"),
            "the default stays out of the line"
        );
        assert_eq!(
            from_line(r#"{ action = "xid", gpu = 2, code = 79, log_only = true }"#),
            Ok(Fault::Xid {
                gpu: 2,
                code: 79,
                gpu_instance: None,
                compute_instance: None,
                log_only: true,
                detail: None,
            })
        );
        assert!(from_line(r#"{ action = "explode", gpu = 1 }"#).is_err());
        assert!(from_line(r#"{ action = "xid", gpu = 1, code = 43, bogus = 1 }"#).is_err());
        assert!(from_line("not toml").is_err());
    }
}
