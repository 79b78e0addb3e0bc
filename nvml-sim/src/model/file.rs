//! The board file format: `boards/<key>.toml`, `[board.<key>]` and
//! `[gpu.board]` in a scenario (README.md, "Boards"). Every key is
//! optional in the file so that a board can start from another (`base`)
//! and change only what differs; [`BoardFile::resolve`] then names what is
//! still missing.

// The keys carry their units (`total_mib`, `default_limit_w`), as the
// file format does.
#![allow(clippy::struct_field_names)]

use super::{Engines, FabricHealth, MigProfile, Model, PowerLimits, PowerScope};
use crate::value::Invalid;
use crate::value::{Mib, Val};
use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

include!(concat!(env!("OUT_DIR"), "/builtin_files.rs"));

/// `NVML_GPU_INSTANCE_PROFILE_*` by their nvml.h suffixes.
const GI_PROFILES: &[(&str, u32)] = &[
    ("1_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE),
    ("2_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE),
    ("3_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE),
    ("4_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE),
    ("7_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE),
    ("8_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_8_SLICE),
    ("6_SLICE", sys::NVML_GPU_INSTANCE_PROFILE_6_SLICE),
    ("1_SLICE_REV1", sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1),
    ("2_SLICE_REV1", sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1),
    ("1_SLICE_REV2", sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2),
    ("1_SLICE_GFX", sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX),
    ("2_SLICE_GFX", sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX),
    ("4_SLICE_GFX", sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX),
    (
        "1_SLICE_NO_ME",
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME,
    ),
    (
        "2_SLICE_NO_ME",
        sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME,
    ),
    (
        "1_SLICE_ALL_ME",
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME,
    ),
    (
        "2_SLICE_ALL_ME",
        sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME,
    ),
];

/// A brand's board-file name from its `NVML_BRAND_*` value.
pub fn brand_name(code: u32) -> Option<&'static str> {
    super::Brand::from_nvml(code).map(super::Brand::name)
}

/// An architecture's board-file name from its `NVML_DEVICE_ARCH_*` value.
pub fn architecture_name(code: u32) -> Option<&'static str> {
    super::Architecture::from_nvml(code).map(super::Architecture::name)
}

/// A GPU instance profile's board-file name (`1_SLICE`) from its
/// `NVML_GPU_INSTANCE_PROFILE_*` index.
pub fn gi_profile_name(index: u32) -> Option<&'static str> {
    GI_PROFILES
        .iter()
        .find(|(_, c)| *c == index)
        .map(|(n, _)| *n)
}

fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// A board file. `None` everywhere the file says nothing.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardFile {
    /// A built-in board (or one the scenario defines) this one starts from.
    pub base: Option<String>,
    pub name: Option<String>,
    pub brand: Option<super::Brand>,
    pub architecture: Option<super::Architecture>,
    pub cuda_compute_capability: Option<String>,
    pub pci_device_id: Option<u32>,
    pub pci_subsystem_id: Option<u32>,
    pub board_part_number: Option<Val<String>>,
    pub vbios_version: Option<Val<String>>,
    pub inforom: Option<InforomSection>,
    pub serial_number: Option<bool>,
    pub display: Option<bool>,
    pub sm_count: Option<u32>,
    pub gpm: Option<bool>,
    pub power_smoothing: Option<bool>,
    pub memory: Option<MemorySection>,
    pub ecc: Option<EccSection>,
    pub power: Option<PowerSection>,
    pub clocks: Option<ClocksSection>,
    pub thermal: Option<ThermalSection>,
    pub pcie: Option<PcieSection>,
    pub nvlink: Option<NvlinkSection>,
    pub engines: Option<EnginesSection>,
    pub mig: Option<MigSection>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InforomSection {
    pub image: Option<Val<String>>,
    pub oem: Option<Val<String>>,
    pub ecc: Option<Val<String>>,
    pub power: Option<Val<String>>,
    pub den: Option<Val<String>>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    pub total_mib: Option<u64>,
    pub reserved_mib: Option<Mib>,
    pub bar1_mib: Option<u64>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccSection {
    pub supported: Option<bool>,
    pub default: Option<bool>,
    pub page_retirement: Option<bool>,
    pub row_remapping: Option<bool>,
    pub remapper_banks: Option<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub default_limit_w: Option<f64>,
    pub min_limit_w: Option<f64>,
    pub max_limit_w: Option<f64>,
}

/// `[power.module]`, `[power.memory]`: limits where NVML reports them, and
/// the draw at idle and at full load.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeSection {
    pub default_limit_w: Option<f64>,
    pub min_limit_w: Option<f64>,
    pub max_limit_w: Option<f64>,
    pub idle_w: Option<f64>,
    pub busy_w: Option<f64>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSection {
    pub default_limit_w: Option<f64>,
    pub min_limit_w: Option<f64>,
    pub max_limit_w: Option<f64>,
    pub idle_w: Option<f64>,
    /// `NVML_POWER_SCOPE_MODULE` (Grace superchips: GPU, CPU and memory).
    pub module: Option<ScopeSection>,
    /// `NVML_POWER_SCOPE_MEMORY`.
    pub memory: Option<ScopeSection>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClocksSection {
    pub max_graphics_mhz: Option<u32>,
    pub max_sm_mhz: Option<u32>,
    pub max_memory_mhz: Option<u32>,
    pub max_video_mhz: Option<u32>,
    pub busy_graphics_mhz: Option<u32>,
    pub idle_graphics_mhz: Option<u32>,
    pub idle_memory_mhz: Option<u32>,
    pub idle_video_mhz: Option<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThermalSection {
    pub shutdown_c: Option<Val<u32>>,
    pub slowdown_c: Option<Val<u32>>,
    pub gpu_max_c: Option<Val<u32>>,
    pub memory_max_c: Option<Val<u32>>,
    pub tlimit: Option<bool>,
    /// T.Limit itself, where the board reports no absolute threshold: what
    /// the margins and the current margin count from.
    pub tlimit_temperature_c: Option<u32>,
    /// The thresholds as T.Limit margins, where a capture prints only
    /// those (Hopper and Blackwell on recent drivers); default: derived
    /// from the absolute ones.
    pub shutdown_tlimit_c: Option<Val<i32>>,
    pub slowdown_tlimit_c: Option<Val<i32>>,
    pub memory_max_tlimit_c: Option<Val<i32>>,
    pub gpu_max_tlimit_c: Option<Val<i32>>,
    pub fans: Option<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSection {
    pub generation: Option<u32>,
    pub width: Option<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvlinkSection {
    pub links: Option<u32>,
    pub speed_mbps: Option<u32>,
    pub version: Option<u32>,
    pub fabric: Option<bool>,
    pub fabric_health: Option<FabricHealthSection>,
}

/// What the fabric manager's health rows say (`nvidia-smi -q`, "Fabric" >
/// "Health"); every key defaults to "N/A" (not supported).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricHealthSection {
    pub summary: Option<Val<HealthSummary>>,
    pub degraded_bandwidth: Option<Val<bool>>,
    pub route_recovery: Option<Val<bool>>,
    pub route_unhealthy: Option<Val<bool>>,
    pub access_timeout_recovery: Option<Val<bool>>,
    pub incorrect_configuration: Option<Val<IncorrectConfiguration>>,
}

/// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*` (nvml.h 13.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthSummary {
    Healthy,
    Unhealthy,
    LimitedCapacity,
}

impl HealthSummary {
    pub fn nvml(self) -> u8 {
        match self {
            HealthSummary::Healthy => 1,
            HealthSummary::Unhealthy => 2,
            HealthSummary::LimitedCapacity => 3,
        }
    }
}

/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*` (nvml.h 13.0
/// to 13.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IncorrectConfiguration {
    None,
    IncorrectSysguid,
    IncorrectChassisSn,
    NoPartition,
    InsufficientNvlinks,
    IncompatibleGpuFw,
    InvalidLocation,
    GpuStateInvalid,
}

impl IncorrectConfiguration {
    pub fn nvml(self) -> u8 {
        self as u8 + 1
    }
}

impl FabricHealthSection {
    /// Applies the keys this section gives over `h`.
    pub fn apply(&self, h: &mut FabricHealth) {
        let flag = |v: Val<bool>| v.get().map_or(0, |t| if t { 1 } else { 2 });
        if let Some(v) = self.summary {
            h.summary = v.get().map_or(0, HealthSummary::nvml);
        }
        for (i, v) in [
            self.degraded_bandwidth,
            self.route_recovery,
            self.route_unhealthy,
            self.access_timeout_recovery,
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(v) = v {
                h.fields[i] = flag(v);
            }
        }
        if let Some(v) = self.incorrect_configuration {
            h.fields[4] = v.get().map_or(0, IncorrectConfiguration::nvml);
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnginesSection {
    pub encoders: Option<u32>,
    pub decoders: Option<u32>,
    pub jpegs: Option<u32>,
    pub ofas: Option<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSection {
    /// MIG mode can be queried (disabled) even where no profile is known
    /// (a capture of a board the simulator has no table for); default:
    /// whether it has profiles.
    pub supported: Option<bool>,
    pub compute_slices: Option<u32>,
    pub memory_slices: Option<u32>,
    pub exclusions: Option<Vec<[String; 2]>>,
    pub profile: Option<Vec<ProfileEntry>>,
}

/// One `[[mig.profile]]`: every key required (a profile list replaces the
/// base board's whole list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEntry {
    pub name: String,
    pub profile: String,
    pub id: u32,
    pub slices: u32,
    pub memory_slices: u32,
    pub instances: u32,
    pub placements: Vec<u32>,
    pub gpu_instance_ids: Option<Vec<u32>>,
    pub memory_mib: u64,
    pub sm_count: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    #[serde(default)]
    pub encoders: u32,
    pub jpegs: u32,
    pub ofas: u32,
}

/// Deep merge: `over`'s keys replace `base`'s; tables merge key by key,
/// anything else (arrays included) is replaced whole.
pub fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn mw(w: f64, what: &str) -> Result<u32, Invalid> {
    if !(0.0..=100_000.0).contains(&w) {
        return Err(Invalid::from(format!(
            "{what} = {w} W is outside 0..=100000"
        )));
    }
    Ok((w * 1000.0).round() as u32)
}

fn scope(s: &ScopeSection, name: &str) -> Result<PowerScope, Invalid> {
    let limits = match s.default_limit_w {
        Some(_) => Some(limits(
            &LimitsSection {
                default_limit_w: s.default_limit_w,
                min_limit_w: s.min_limit_w,
                max_limit_w: s.max_limit_w,
            },
            name,
        )?),
        None if s.min_limit_w.is_some() || s.max_limit_w.is_some() => {
            return Err(Invalid::from(format!(
                "power.{name}: min_limit_w and max_limit_w need default_limit_w"
            )))
        }
        None => None,
    };
    let share = |f: f64| limits.map(|l| (f64::from(l.default_mw) * f) as u32);
    let idle_mw = match s.idle_w {
        Some(w) => mw(w, &format!("power.{name}.idle_w"))?,
        None => share(0.2).ok_or_else(|| {
            format!("power.{name} needs idle_w (or default_limit_w to derive it from)")
        })?,
    };
    let busy_mw = match s.busy_w {
        Some(w) => mw(w, &format!("power.{name}.busy_w"))?,
        None => share(0.8).unwrap_or(idle_mw).max(idle_mw),
    };
    if busy_mw < idle_mw {
        return Err(Invalid::from(format!(
            "power.{name}: busy_w is below idle_w"
        )));
    }
    Ok(PowerScope {
        limits,
        idle_mw,
        busy_mw,
    })
}

fn limits(l: &LimitsSection, scope: &str) -> Result<PowerLimits, Invalid> {
    let default = l
        .default_limit_w
        .ok_or_else(|| format!("power.{scope}.default_limit_w is missing"))?;
    let default_mw = mw(default, &format!("power.{scope}.default_limit_w"))?;
    Ok(PowerLimits {
        default_mw,
        min_mw: l
            .min_limit_w
            .map_or(Ok(default_mw), |w| mw(w, "min_limit_w"))?,
        max_mw: l
            .max_limit_w
            .map_or(Ok(default_mw), |w| mw(w, "max_limit_w"))?,
    })
}

fn text(v: &Option<Val<String>>) -> Option<String> {
    v.as_ref().and_then(|v| v.as_ref()).cloned()
}

impl BoardFile {
    /// The board this file describes, or what is missing or wrong.
    #[allow(
        clippy::too_many_lines,
        reason = "the flat Model built section by section; to be split with the sectioned Model (issue 40, left for later)"
    )]
    pub fn resolve(&self, key: &str) -> Result<Model, Invalid> {
        let need = |v: Option<&str>, what: &str| {
            v.map(str::to_string)
                .ok_or_else(|| format!("board `{key}` has no `{what}`"))
        };
        let name = need(self.name.as_deref(), "name")?;
        let brand = self
            .brand
            .ok_or_else(|| format!("board `{key}` has no `brand`"))?
            .nvml();
        let architecture = self
            .architecture
            .ok_or_else(|| format!("board `{key}` has no `architecture`"))?;
        let (arch, default_cc) = (
            architecture.nvml(),
            architecture.default_compute_capability(),
        );
        let cuda_cc = match &self.cuda_compute_capability {
            None => default_cc,
            Some(t) => {
                let bad = || format!("cuda_compute_capability `{t}` is not MAJOR.MINOR");
                let (a, b) = t.split_once('.').ok_or_else(bad)?;
                (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
            }
        };
        let after_ada =
            |a: u32| a != sys::NVML_DEVICE_ARCH_UNKNOWN && a >= sys::NVML_DEVICE_ARCH_ADA;
        let memory = self.memory.clone().unwrap_or_default();
        let memory_mib = memory
            .total_mib
            .ok_or_else(|| format!("board `{key}` has no `memory.total_mib`"))?;
        let reserved = memory.reserved_mib.unwrap_or_default();
        if reserved >= Mib::whole(memory_mib) || memory_mib > 1 << 30 {
            return Err(Invalid::from(format!(
                "memory: reserved_mib {reserved} must be below total_mib {memory_mib} (at most 1 PiB)"
            )));
        }
        let ecc = self.ecc.clone().unwrap_or_default();
        let ecc_supported = ecc.supported.unwrap_or(false);
        let row_remapping = ecc.row_remapping.unwrap_or(false);
        let power = self.power.clone().unwrap_or_default();
        let gpu_limits = limits(
            &LimitsSection {
                default_limit_w: power.default_limit_w,
                min_limit_w: power.min_limit_w,
                max_limit_w: power.max_limit_w,
            },
            "gpu",
        )
        .map_err(|e| e.replace("power.gpu.", "power."))?;
        let power_idle_mw = power
            .idle_w
            .map_or(Ok(gpu_limits.default_mw / 10), |w| mw(w, "power.idle_w"))?;
        if power_idle_mw > gpu_limits.default_mw || gpu_limits.min_mw > gpu_limits.max_mw {
            return Err(Invalid::from(format!(
                "power: want idle_w <= default_limit_w and min_limit_w <= max_limit_w (board `{key}`)"
            )));
        }
        let clocks = self.clocks.clone().unwrap_or_default();
        let max_graphics_mhz = clocks
            .max_graphics_mhz
            .ok_or_else(|| format!("board `{key}` has no `clocks.max_graphics_mhz`"))?;
        let max_mem_mhz = clocks
            .max_memory_mhz
            .ok_or_else(|| format!("board `{key}` has no `clocks.max_memory_mhz`"))?;
        let thermal = self.thermal.clone().unwrap_or_default();
        let threshold = |v: &Option<Val<u32>>| v.as_ref().and_then(Val::get);
        let pcie = self.pcie.clone().unwrap_or_default();
        let pcie_gen = pcie
            .generation
            .ok_or_else(|| format!("board `{key}` has no `pcie.generation`"))?;
        let pcie_width = pcie
            .width
            .ok_or_else(|| format!("board `{key}` has no `pcie.width`"))?;
        if !(1..=6).contains(&pcie_gen) || !matches!(pcie_width, 1 | 2 | 4 | 8 | 16 | 32) {
            return Err(Invalid::from(format!(
                "pcie: generation {pcie_gen} / width {pcie_width}: want 1..=6 and 1, 2, 4, 8, 16 or 32 lanes"
            )));
        }
        let nvlink = self.nvlink.clone().unwrap_or_default();
        let nvlinks = nvlink.links.unwrap_or(0);
        if nvlinks > 36 {
            return Err(Invalid::from(format!(
                "nvlink.links = {nvlinks}: at most 36"
            )));
        }
        let engines = self.engines.clone().unwrap_or_default();
        let mig = self.mig.clone().unwrap_or_default();
        let mig_compute_slices = mig.compute_slices.unwrap_or(7);
        let mig_memory_slices = mig.memory_slices.unwrap_or(8);
        if !(1..=8).contains(&mig_compute_slices) || !(1..=8).contains(&mig_memory_slices) {
            return Err("mig: compute_slices and memory_slices must be 1..=8".into());
        }
        let mut mig_profiles = Vec::new();
        for p in mig.profile.clone().unwrap_or_default() {
            let profile_index = GI_PROFILES
                .iter()
                .find(|(n, _)| *n == p.profile)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    format!(
                        "MIG profile `{}`: unknown profile `{}` (known: {})",
                        p.name,
                        p.profile,
                        names(GI_PROFILES)
                    )
                })?;
            let fits = p.slices >= 1
                && p.slices <= mig_compute_slices
                && p.memory_slices >= 1
                && p.placements
                    .iter()
                    .all(|s| s + p.memory_slices <= mig_memory_slices)
                && !p.placements.is_empty();
            if !fits {
                return Err(Invalid::from(format!(
                    "MIG profile `{}`: {} compute slices, {} memory slices at {:?} do not fit a GPU of {mig_compute_slices} and {mig_memory_slices}",
                    p.name, p.slices, p.memory_slices, p.placements
                )));
            }
            if let Some(ids) = &p.gpu_instance_ids {
                if ids.len() != p.placements.len() {
                    return Err(Invalid::from(format!(
                        "MIG profile `{}`: gpu_instance_ids needs one id per placement",
                        p.name
                    )));
                }
            }
            mig_profiles.push(MigProfile {
                name: p.name,
                profile_index,
                id: p.id,
                slices: p.slices,
                mem_slices: p.memory_slices,
                instance_count: p.instances,
                starts: p.placements,
                gpu_instance_ids: p.gpu_instance_ids,
                memory_mib: p.memory_mib,
                sm_count: p.sm_count,
                copy_engines: p.copy_engines,
                decoders: p.decoders,
                encoders: p.encoders,
                jpegs: p.jpegs,
                ofas: p.ofas,
            });
        }
        let inforom = self.inforom.clone().unwrap_or_default();
        Ok(Model {
            key: key.to_string(),
            name,
            brand,
            arch,
            cuda_cc,
            pci_device_id: self.pci_device_id.unwrap_or(0),
            pci_subsystem_id: self.pci_subsystem_id.unwrap_or(0),
            board_part: text(&self.board_part_number),
            vbios: text(&self.vbios_version),
            inforom: [
                text(&inforom.oem),
                text(&inforom.ecc),
                text(&inforom.power),
                text(&inforom.den),
            ],
            has_serial: self.serial_number.unwrap_or(true),
            memory_mib,
            reserved_bytes: reserved.bytes,
            bar1_mib: memory.bar1_mib.unwrap_or(256),
            power_default_mw: gpu_limits.default_mw,
            power_min_mw: gpu_limits.min_mw,
            power_max_mw: gpu_limits.max_mw,
            power_idle_mw,
            module_power: power
                .module
                .as_ref()
                .map(|s| scope(s, "module"))
                .transpose()?,
            memory_power: power
                .memory
                .as_ref()
                .map(|s| scope(s, "memory"))
                .transpose()?,
            power_smoothing: self.power_smoothing.unwrap_or(false),
            max_graphics_mhz,
            max_sm_mhz: clocks.max_sm_mhz.unwrap_or(max_graphics_mhz),
            max_mem_mhz,
            max_video_mhz: clocks.max_video_mhz.unwrap_or(max_graphics_mhz),
            busy_graphics_mhz: clocks.busy_graphics_mhz.unwrap_or(max_graphics_mhz),
            idle_graphics_mhz: clocks
                .idle_graphics_mhz
                .unwrap_or(max_graphics_mhz.min(210)),
            idle_mem_mhz: clocks.idle_memory_mhz.unwrap_or(max_mem_mhz),
            idle_video_mhz: clocks
                .idle_video_mhz
                .unwrap_or(clocks.max_video_mhz.unwrap_or(max_graphics_mhz) / 2),
            temp_shutdown: threshold(&thermal.shutdown_c),
            temp_slowdown: threshold(&thermal.slowdown_c),
            temp_gpu_max: threshold(&thermal.gpu_max_c),
            temp_mem_max: threshold(&thermal.memory_max_c),
            tlimit_temperature: thermal.tlimit_temperature_c,
            tlimit_margins: {
                let temp_gpu_max = threshold(&thermal.gpu_max_c);
                let explicit = [
                    &thermal.shutdown_tlimit_c,
                    &thermal.slowdown_tlimit_c,
                    &thermal.memory_max_tlimit_c,
                    &thermal.gpu_max_tlimit_c,
                ];
                let tlimit = thermal
                    .tlimit
                    .unwrap_or(after_ada(arch) || explicit.iter().any(|e| e.is_some()));
                let derived = [
                    threshold(&thermal.shutdown_c),
                    threshold(&thermal.slowdown_c),
                    None,
                    temp_gpu_max,
                ]
                .map(|abs| Some(temp_gpu_max? as i32 - abs? as i32));
                let mut margins = [None; 4];
                for (i, m) in margins.iter_mut().enumerate() {
                    *m = match explicit[i] {
                        Some(v) => v.get(),
                        None if !tlimit => None,
                        // The memory margin is to the memory's own maximum.
                        None if i == 2 => threshold(&thermal.memory_max_c).map(|_| 0),
                        None => derived[i],
                    };
                }
                margins
            },
            fans: thermal.fans.unwrap_or(0),
            pcie_gen,
            pcie_width,
            nvlinks,
            nvlink_mbps: nvlink.speed_mbps.unwrap_or(0),
            nvlink_version: nvlink.version.unwrap_or(0),
            nvswitch: nvlink.fabric.unwrap_or(
                arch != sys::NVML_DEVICE_ARCH_UNKNOWN
                    && arch >= sys::NVML_DEVICE_ARCH_HOPPER
                    && nvlinks > 0,
            ),
            fabric_health: {
                let mut h = FabricHealth::default();
                if let Some(section) = &nvlink.fabric_health {
                    section.apply(&mut h);
                }
                h
            },
            ecc: ecc_supported,
            ecc_default: ecc.default.unwrap_or(ecc_supported),
            page_retirement: ecc.page_retirement.unwrap_or(false),
            row_remapping,
            remapper_banks: if row_remapping {
                ecc.remapper_banks.unwrap_or(0)
            } else {
                0
            },
            mig_compute_slices,
            mig_memory_slices,
            mig_supported: mig.supported.unwrap_or(!mig_profiles.is_empty()),
            mig_profiles,
            mig_exclusions: mig
                .exclusions
                .unwrap_or_default()
                .into_iter()
                .map(|[a, b]| (a, b))
                .collect(),
            gpm: self.gpm.unwrap_or(
                arch != sys::NVML_DEVICE_ARCH_UNKNOWN && arch >= sys::NVML_DEVICE_ARCH_HOPPER,
            ),
            display_capable: self.display.unwrap_or(false),
            sm_count: self.sm_count.unwrap_or(0),
            engines: Engines {
                encoders: engines.encoders.unwrap_or(0),
                decoders: engines.decoders.unwrap_or(0),
                jpegs: engines.jpegs.unwrap_or(0),
                ofas: engines.ofas.unwrap_or(0),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_board_starts_from_another_and_changes_what_differs() {
        let mut table = super::super::builtin_table("h100-sxm5-80gb").unwrap();
        let over: toml::Table = toml::from_str(
            "name = \"NVIDIA H100 NVL\"\n[memory]\ntotal_mib = 95830\n[thermal]\nmemory_max_c = \"N/A\"\n",
        )
        .unwrap();
        merge_tables(&mut table, over);
        let file: BoardFile = toml::Value::Table(table).try_into().unwrap();
        let m = file.resolve("h100-nvl").unwrap();
        assert_eq!(m.name, "NVIDIA H100 NVL");
        assert_eq!(m.memory_mib, 95830);
        assert_eq!(m.bar1_mib, 131_072, "kept from the base");
        assert_eq!(m.temp_mem_max, None);
        assert_eq!(m.mig_profiles.len(), 6);
    }

    #[test]
    fn a_file_round_trips_through_a_table() {
        // What merging relies on: a parsed file serializes back to the
        // same keys, absent ones left out.
        for (key, _) in BUILTIN_BOARDS {
            let table = super::super::builtin_table(key).unwrap();
            let file: BoardFile = toml::Value::Table(table).try_into().unwrap();
            let again: BoardFile = toml::Value::try_from(&file).unwrap().try_into().unwrap();
            assert_eq!(file.resolve(key).unwrap(), again.resolve(key).unwrap());
        }
    }

    #[test]
    fn missing_and_wrong_keys_are_named() {
        let file: BoardFile =
            toml::from_str("name = \"x\"\nbrand = \"nvidia\"\narchitecture = \"hopper\"\n")
                .unwrap();
        assert!(file.resolve("x").unwrap_err().contains("memory.total_mib"));
        // A brand is a `Brand` when the file is read.
        let e = toml::from_str::<BoardFile>("brand = \"nvidea\"\nname = \"x\"\n").unwrap_err();
        assert!(e.message().contains("unknown brand `nvidea`"), "{e}");
        let e = toml::from_str::<BoardFile>("[memory]\ntotal = 3\n").unwrap_err();
        assert!(e.message().contains("unknown field `total`"), "{e}");
    }
}
