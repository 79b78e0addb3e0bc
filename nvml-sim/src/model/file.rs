//! The board file format: `boards/<key>.toml`, `[board.<key>]` and
//! `[gpu.board]` in a scenario (README.md, "Boards"). Every key is
//! optional in the file so that a board can start from another (`base`)
//! and change only what differs; [`BoardFile::resolve`] then names what is
//! still missing.

// The keys carry their units (`total_mib`, `default_limit_w`), as the
// file format does.
#![allow(clippy::struct_field_names)]

use super::{
    Clocks, Ecc, Engines, FabricHealth, Memory, Mig, MigProfile, Model, Nvlink, Pcie, Power,
    PowerLimits, PowerScope, Thermal,
};
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
    /// NVLink-C2C links to a Grace CPU (`NVML_FI_DEV_C2C_LINK_COUNT`).
    pub c2c_links: Option<u32>,
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
/// anything else (arrays included) is replaced whole. The tests' reference
/// for the typed overlay (`overlay.rs`), which boards are merged by.
#[cfg(test)]
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
    /// The board this file describes, or what is missing or wrong: the
    /// keys at the top, then each section by its own resolver, in the
    /// order the errors are named.
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
        let arch = architecture.nvml();
        let cuda_cc = match &self.cuda_compute_capability {
            None => architecture.default_compute_capability(),
            Some(t) => {
                let bad = || format!("cuda_compute_capability `{t}` is not MAJOR.MINOR");
                let (a, b) = t.split_once('.').ok_or_else(bad)?;
                (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
            }
        };
        let memory = self.memory.clone().unwrap_or_default().resolve(key)?;
        let ecc = self.ecc.clone().unwrap_or_default().resolve();
        let power = self.power.clone().unwrap_or_default().resolve(key)?;
        let clocks = self.clocks.clone().unwrap_or_default().resolve(key)?;
        let thermal = self.thermal.clone().unwrap_or_default().resolve(arch);
        let pcie = self.pcie.clone().unwrap_or_default().resolve(key)?;
        let nvlink = self.nvlink.clone().unwrap_or_default().resolve(arch)?;
        let engines = self.engines.clone().unwrap_or_default().resolve();
        let mig = self.mig.clone().unwrap_or_default().resolve()?;
        let inforom = self.inforom.clone().unwrap_or_default();
        // nvml.h's GPM metric ids name C2C links 0-13 (NVML_GPM_METRIC_C2C_LINK0_* to LINK13_*).
        let c2c_links = self.c2c_links.unwrap_or(0);
        if c2c_links > 14 {
            return Err(Invalid::from(format!(
                "board `{key}`: c2c_links = {c2c_links}: at most 14"
            )));
        }
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
            power_smoothing: self.power_smoothing.unwrap_or(false),
            gpm: self.gpm.unwrap_or(
                arch != sys::NVML_DEVICE_ARCH_UNKNOWN && arch >= sys::NVML_DEVICE_ARCH_HOPPER,
            ),
            display_capable: self.display.unwrap_or(false),
            sm_count: self.sm_count.unwrap_or(0),
            c2c_links,
            memory,
            power,
            clocks,
            thermal,
            pcie,
            nvlink,
            ecc,
            engines,
            mig,
        })
    }
}

impl MemorySection {
    fn resolve(&self, key: &str) -> Result<Memory, Invalid> {
        let total_mib = self
            .total_mib
            .ok_or_else(|| format!("board `{key}` has no `memory.total_mib`"))?;
        let reserved = self.reserved_mib.unwrap_or_default();
        if reserved >= Mib::whole(total_mib) || total_mib > 1 << 30 {
            return Err(Invalid::from(format!(
                "memory: reserved_mib {reserved} must be below total_mib {total_mib} (at most 1 PiB)"
            )));
        }
        Ok(Memory {
            total_mib,
            reserved_bytes: reserved.bytes,
            bar1_mib: self.bar1_mib.unwrap_or(256),
        })
    }
}

impl EccSection {
    fn resolve(&self) -> Ecc {
        let supported = self.supported.unwrap_or(false);
        let row_remapping = self.row_remapping.unwrap_or(false);
        Ecc {
            supported,
            default: self.default.unwrap_or(supported),
            page_retirement: self.page_retirement.unwrap_or(false),
            row_remapping,
            remapper_banks: if row_remapping {
                self.remapper_banks.unwrap_or(0)
            } else {
                0
            },
        }
    }
}

impl PowerSection {
    fn resolve(&self, key: &str) -> Result<Power, Invalid> {
        let gpu_limits = limits(
            &LimitsSection {
                default_limit_w: self.default_limit_w,
                min_limit_w: self.min_limit_w,
                max_limit_w: self.max_limit_w,
            },
            "gpu",
        )
        .map_err(|e| e.replace("power.gpu.", "power."))?;
        let idle_mw = self
            .idle_w
            .map_or(Ok(gpu_limits.default_mw / 10), |w| mw(w, "power.idle_w"))?;
        if idle_mw > gpu_limits.default_mw || gpu_limits.min_mw > gpu_limits.max_mw {
            return Err(Invalid::from(format!(
                "power: want idle_w <= default_limit_w and min_limit_w <= max_limit_w (board `{key}`)"
            )));
        }
        Ok(Power {
            default_mw: gpu_limits.default_mw,
            min_mw: gpu_limits.min_mw,
            max_mw: gpu_limits.max_mw,
            idle_mw,
            module: self
                .module
                .as_ref()
                .map(|s| scope(s, "module"))
                .transpose()?,
            memory: self
                .memory
                .as_ref()
                .map(|s| scope(s, "memory"))
                .transpose()?,
        })
    }
}

impl ClocksSection {
    fn resolve(&self, key: &str) -> Result<Clocks, Invalid> {
        let max_graphics_mhz = self
            .max_graphics_mhz
            .ok_or_else(|| format!("board `{key}` has no `clocks.max_graphics_mhz`"))?;
        let max_mem_mhz = self
            .max_memory_mhz
            .ok_or_else(|| format!("board `{key}` has no `clocks.max_memory_mhz`"))?;
        let max_video_mhz = self.max_video_mhz.unwrap_or(max_graphics_mhz);
        Ok(Clocks {
            max_graphics_mhz,
            max_sm_mhz: self.max_sm_mhz.unwrap_or(max_graphics_mhz),
            max_mem_mhz,
            max_video_mhz,
            busy_graphics_mhz: self.busy_graphics_mhz.unwrap_or(max_graphics_mhz),
            idle_graphics_mhz: self.idle_graphics_mhz.unwrap_or(max_graphics_mhz.min(210)),
            idle_mem_mhz: self.idle_memory_mhz.unwrap_or(max_mem_mhz),
            idle_video_mhz: self.idle_video_mhz.unwrap_or(max_video_mhz / 2),
        })
    }
}

impl ThermalSection {
    fn resolve(&self, arch: u32) -> Thermal {
        let threshold = |v: &Option<Val<u32>>| v.as_ref().and_then(Val::get);
        Thermal {
            shutdown_c: threshold(&self.shutdown_c),
            slowdown_c: threshold(&self.slowdown_c),
            gpu_max_c: threshold(&self.gpu_max_c),
            memory_max_c: threshold(&self.memory_max_c),
            tlimit_temperature_c: self.tlimit_temperature_c,
            tlimit_margins: self.tlimit_margins(arch),
            fans: self.fans.unwrap_or(0),
        }
    }

    /// The thresholds as T.Limit margins: as the file gives them, else
    /// derived from the absolute ones where the board serves margins (Ada
    /// and newer, or a file that gives any).
    fn tlimit_margins(&self, arch: u32) -> [Option<i32>; 4] {
        let threshold = |v: &Option<Val<u32>>| v.as_ref().and_then(Val::get);
        let after_ada = arch != sys::NVML_DEVICE_ARCH_UNKNOWN && arch >= sys::NVML_DEVICE_ARCH_ADA;
        let temp_gpu_max = threshold(&self.gpu_max_c);
        let explicit = [
            &self.shutdown_tlimit_c,
            &self.slowdown_tlimit_c,
            &self.memory_max_tlimit_c,
            &self.gpu_max_tlimit_c,
        ];
        let tlimit = self
            .tlimit
            .unwrap_or(after_ada || explicit.iter().any(|e| e.is_some()));
        let derived = [
            threshold(&self.shutdown_c),
            threshold(&self.slowdown_c),
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
                None if i == 2 => threshold(&self.memory_max_c).map(|_| 0),
                None => derived[i],
            };
        }
        margins
    }
}

impl PcieSection {
    fn resolve(&self, key: &str) -> Result<Pcie, Invalid> {
        let generation = self
            .generation
            .ok_or_else(|| format!("board `{key}` has no `pcie.generation`"))?;
        let width = self
            .width
            .ok_or_else(|| format!("board `{key}` has no `pcie.width`"))?;
        if !(1..=6).contains(&generation) || !matches!(width, 1 | 2 | 4 | 8 | 16 | 32) {
            return Err(Invalid::from(format!(
                "pcie: generation {generation} / width {width}: want 1..=6 and 1, 2, 4, 8, 16 or 32 lanes"
            )));
        }
        Ok(Pcie { generation, width })
    }
}

impl NvlinkSection {
    fn resolve(&self, arch: u32) -> Result<Nvlink, Invalid> {
        let links = self.links.unwrap_or(0);
        if links > 36 {
            return Err(Invalid::from(format!("nvlink.links = {links}: at most 36")));
        }
        let mut fabric_health = FabricHealth::default();
        if let Some(section) = &self.fabric_health {
            section.apply(&mut fabric_health);
        }
        Ok(Nvlink {
            links,
            speed_mbps: self.speed_mbps.unwrap_or(0),
            version: self.version.unwrap_or(0),
            fabric: self.fabric.unwrap_or(
                arch != sys::NVML_DEVICE_ARCH_UNKNOWN
                    && arch >= sys::NVML_DEVICE_ARCH_HOPPER
                    && links > 0,
            ),
            fabric_health,
        })
    }
}

impl EnginesSection {
    fn resolve(&self) -> Engines {
        Engines {
            encoders: self.encoders.unwrap_or(0),
            decoders: self.decoders.unwrap_or(0),
            jpegs: self.jpegs.unwrap_or(0),
            ofas: self.ofas.unwrap_or(0),
        }
    }
}

impl MigSection {
    fn resolve(self) -> Result<Mig, Invalid> {
        let compute_slices = self.compute_slices.unwrap_or(7);
        let memory_slices = self.memory_slices.unwrap_or(8);
        if !(1..=8).contains(&compute_slices) || !(1..=8).contains(&memory_slices) {
            return Err("mig: compute_slices and memory_slices must be 1..=8".into());
        }
        let profiles = self
            .profile
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.resolve(compute_slices, memory_slices))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mig {
            compute_slices,
            memory_slices,
            supported: self.supported.unwrap_or(!profiles.is_empty()),
            profiles,
            exclusions: self
                .exclusions
                .unwrap_or_default()
                .into_iter()
                .map(|[a, b]| (a, b))
                .collect(),
        })
    }
}

impl ProfileEntry {
    /// The profile, checked to fit a GPU of `compute_slices` and
    /// `memory_slices`.
    fn resolve(self, compute_slices: u32, memory_slices: u32) -> Result<MigProfile, Invalid> {
        let p = self;
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
            && p.slices <= compute_slices
            && p.memory_slices >= 1
            && p.placements
                .iter()
                .all(|s| s + p.memory_slices <= memory_slices)
            && !p.placements.is_empty();
        if !fits {
            return Err(Invalid::from(format!(
                "MIG profile `{}`: {} compute slices, {} memory slices at {:?} do not fit a GPU of {compute_slices} and {memory_slices}",
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
        Ok(MigProfile {
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
        assert_eq!(m.memory.total_mib, 95830);
        assert_eq!(m.memory.bar1_mib, 131_072, "kept from the base");
        assert_eq!(m.thermal.memory_max_c, None);
        assert_eq!(m.mig.profiles.len(), 6);
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
