//! The GPU boards the simulator can present. A board is data: the built-in
//! ones are the TOML files in `boards/` (one per board, compiled in; adding
//! a board is adding a file), and a scenario can describe its own in the
//! same keys (`file.rs` reads them). Numbers come from NVIDIA's product
//! briefs, real `nvidia-smi -q` captures of the boards and the MIG user
//! guide (profile tables and placements). They are fixed per board; what
//! moves over time lives in `fleet`.

mod arch;
mod brand;
mod file;
mod named;
mod overlay;

pub use arch::Architecture;
pub use brand::Brand;
#[cfg(test)]
pub use file::merge_tables;
pub use file::{
    architecture_name, brand_name, gi_profile_name, BoardFile, ClocksSection, EccSection,
    FabricHealthSection, HealthSummary, IncorrectConfiguration, InforomSection, MemorySection,
    MigSection, NvlinkSection, PcieSection, PowerSection, ProfileEntry, ScopeSection,
    ThermalSection, BUILTIN_BOARDS, BUILTIN_SCENARIOS,
};
pub use overlay::Overlay;

use crate::value::Invalid;
use nvml_wrapper_sys::bindings as sys;
use std::sync::{Arc, OnceLock};

/// One GPU instance profile of a MIG-capable board (MIG user guide,
/// "Supported MIG Profiles"; NVML `nvmlGpuInstanceProfileInfo_v2_t`).
#[derive(Debug, Clone, PartialEq)]
pub struct MigProfile {
    /// Short name as NVML and nvidia-smi print it, e.g. `1g.10gb`.
    pub name: String,
    /// `NVML_GPU_INSTANCE_PROFILE_*` index used by `nvmlDeviceGetGpuInstanceProfileInfo`.
    pub profile_index: u32,
    /// Profile id as reported in the info struct (19 for 1g.10gb, ...).
    pub id: u32,
    /// Compute slices (of the board's `mig.compute_slices`).
    pub slices: u32,
    /// Memory slices (of the board's `mig.memory_slices`); placements are in these units.
    pub mem_slices: u32,
    /// How many instances of this profile fit on one GPU.
    pub instance_count: u32,
    /// Valid placement starts (in memory slices).
    pub starts: Vec<u32>,
    /// The GPU instance id the driver gives each placement, if the board
    /// says (else the A100/H100 rule of [`MigProfile::instance_id_for`]).
    pub gpu_instance_ids: Option<Vec<u32>>,
    pub memory_mib: u64,
    pub sm_count: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpegs: u32,
    pub ofas: u32,
}

impl MigProfile {
    /// GPU instance id a real driver hands out for this placement: ids are a
    /// function of the placement (7x1g gives 7..13, 3g at 0/4 gives 1/2, ...).
    pub fn instance_id_for(&self, start: u32) -> u32 {
        if let Some(ids) = &self.gpu_instance_ids {
            if let Some(i) = self.starts.iter().position(|&s| s == start) {
                return ids[i];
            }
        }
        rule_instance_id(self.slices, self.mem_slices, start)
    }
}

/// The GPU instance id A100 and H100 drivers give a placement of a profile
/// of `slices` compute and `mem_slices` memory slices starting at `start`.
pub fn rule_instance_id(slices: u32, mem_slices: u32, start: u32) -> u32 {
    match slices {
        7 => 0,
        4 => 1,
        3 => 1 + start / 4,
        2 => 3 + start / 2,
        _ if mem_slices == 2 => 3 + start / 2,
        _ => 7 + start,
    }
}

/// `NVML_COMPUTE_INSTANCE_PROFILE_*` index of a compute instance of `slices`.
pub fn ci_profile_index(slices: u32) -> u32 {
    match slices {
        1 => sys::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2 => sys::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3 => sys::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4 => sys::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        6 => sys::NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
        8 => sys::NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
        _ => sys::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    }
}

/// Power limits of one scope, milliwatts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerLimits {
    pub default_mw: u32,
    pub min_mw: u32,
    pub max_mw: u32,
}

/// A power scope other than the GPU's: `NVML_POWER_SCOPE_MODULE` (Grace
/// superchips: CPU, GPU and memory) or `_MEMORY` (the GPU's memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerScope {
    /// `None`: the limits fields answer NOT_SUPPORTED (real captures print
    /// no limits for the memory scope).
    pub limits: Option<PowerLimits>,
    /// Draw at 0 % and at 100 % load, milliwatts.
    pub idle_mw: u32,
    pub busy_mw: u32,
}

/// The fabric health a board reports before any fault, as
/// `nvmlGpuFabricInfo_v3_t` codes: the health mask's fields (degraded
/// bandwidth, route recovery, route unhealthy, access timeout recovery:
/// 0 not supported, 1 true, 2 false; incorrect configuration: 0 not
/// supported, 1 none, 2.. which check failed) and the summary (0 not
/// supported, 1 healthy, 2 unhealthy, 3 limited capacity).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricHealth {
    pub fields: [u8; 5],
    pub summary: u8,
}

impl FabricHealth {
    /// Bit shift of each mask field (nvml.h 13.0, `NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*`).
    pub const SHIFTS: [u32; 5] = [0, 2, 4, 6, 8];

    /// The mask as a branch that defines its first `fields` fields reports it.
    pub fn mask(&self, fields: u32) -> u32 {
        self.fields
            .iter()
            .zip(Self::SHIFTS)
            .take(fields as usize)
            .fold(0, |m, (&v, shift)| m | (u32::from(v) << shift))
    }
}

/// Engine counts of the whole GPU (`[engines]` of a board file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Engines {
    pub encoders: u32,
    pub decoders: u32,
    pub jpegs: u32,
    pub ofas: u32,
}

/// A board, resolved: every key of its file checked and converted to the
/// units NVML answers in. `None` where the board does not support a query
/// (NOT_SUPPORTED). Its sections are the board file's (`[memory]`,
/// `[power]`, ...), each resolved by a function of its own (`file.rs`);
/// the keys at the top of the file are the fields at the top.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The name scenarios use for it (`model = "h100-sxm5-80gb"`).
    pub key: String,
    pub name: String,
    pub brand: u32,
    pub arch: u32,
    pub cuda_cc: (i32, i32),
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub board_part: Option<String>,
    pub vbios: Option<String>,
    /// `nvmlDeviceGetInforomVersion` per `nvmlInforomObject_t` (OEM, ECC,
    /// power, DEN).
    pub inforom: [Option<String>; 4],
    /// The board has an inforom serial number (`nvmlDeviceGetSerial`).
    pub has_serial: bool,
    /// Power smoothing (Blackwell data-center boards): the circuitry's
    /// lifetime field answers.
    pub power_smoothing: bool,
    pub gpm: bool,
    pub display_capable: bool,
    pub sm_count: u32,
    /// NVLink-C2C links to the Grace CPU; 0: none (field 170 NOT_SUPPORTED).
    pub c2c_links: u32,
    pub memory: Memory,
    pub power: Power,
    pub clocks: Clocks,
    pub thermal: Thermal,
    pub pcie: Pcie,
    pub nvlink: Nvlink,
    pub ecc: Ecc,
    pub engines: Engines,
    pub mig: Mig,
}

/// `[memory]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub total_mib: u64,
    /// Reserved by the driver and firmware, reported apart by memory info v2.
    /// Bytes (NVML's unit; not always whole MiB).
    pub reserved_bytes: u64,
    pub bar1_mib: u64,
}

/// `[power]`: the GPU's limits and idle draw, milliwatts, and the other
/// scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Power {
    pub default_mw: u32,
    pub min_mw: u32,
    pub max_mw: u32,
    pub idle_mw: u32,
    /// `NVML_POWER_SCOPE_MODULE` (Grace superchips) and `_MEMORY`.
    pub module: Option<PowerScope>,
    pub memory: Option<PowerScope>,
}

/// `[clocks]`, MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    pub max_graphics_mhz: u32,
    pub max_sm_mhz: u32,
    pub max_mem_mhz: u32,
    pub max_video_mhz: u32,
    pub busy_graphics_mhz: u32,
    pub idle_graphics_mhz: u32,
    pub idle_mem_mhz: u32,
    pub idle_video_mhz: u32,
}

/// `[thermal]`: thresholds in degrees C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thermal {
    pub shutdown_c: Option<u32>,
    pub slowdown_c: Option<u32>,
    pub gpu_max_c: Option<u32>,
    /// `None` where the board has no HBM temperature sensor.
    pub memory_max_c: Option<u32>,
    /// T.Limit where no absolute max operating temperature is reported.
    pub tlimit_temperature_c: Option<u32>,
    /// The thresholds as signed T.Limit margins (fields 193-196: shutdown,
    /// slowdown, memory max, GPU max), as Ada and newer boards serve them;
    /// `None` where not supported.
    pub tlimit_margins: [Option<i32>; 4],
    pub fans: u32,
}

/// `[pcie]`: the link's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pcie {
    pub generation: u32,
    pub width: u32,
}

/// `[nvlink]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nvlink {
    pub links: u32,
    /// Per-link NVLink line rate in Mbps (`NVML_FI_DEV_NVLINK_SPEED_MBPS_*`).
    pub speed_mbps: u32,
    /// What `NVML_FI_DEV_NVLINK_GET_VERSION` answers.
    pub version: u32,
    /// The board registers with an NVSwitch fabric manager
    /// (`nvmlDeviceGetGpuFabricInfo`).
    pub fabric: bool,
    /// Its fabric health rows before any fault.
    pub fabric_health: FabricHealth,
}

/// `[ecc]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ecc {
    pub supported: bool,
    /// ECC mode out of the factory (`nvmlDeviceGetDefaultEccMode`).
    pub default: bool,
    /// Page retirement (Kepler..Volta) versus row remapping (Ampere and newer).
    pub page_retirement: bool,
    pub row_remapping: bool,
    /// Memory banks in the row remapper histogram (0 without row remapping).
    pub remapper_banks: u32,
}

/// `[mig]`: the geometry (compute and memory slices of the whole GPU) and
/// the profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct Mig {
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub profiles: Vec<MigProfile>,
    /// MIG mode answers (profiles or not: `mig.supported`).
    pub supported: bool,
    /// Profile pairs that cannot coexist on one GPU although slices would
    /// allow it (MIG user guide, A100 40GB: 4g.20gb + 3g.20gb is not a valid layout).
    pub exclusions: Vec<(String, String)>,
}

/// The built-in boards, read once from `boards/` (the unit tests prove each
/// one reads).
pub fn builtins() -> &'static [Arc<Model>] {
    static BOARDS: OnceLock<Vec<Arc<Model>>> = OnceLock::new();
    BOARDS.get_or_init(|| {
        BUILTIN_BOARDS
            .iter()
            .map(|(key, _)| {
                let file = builtin_file(key).expect("a built-in board");
                Arc::new(
                    file.resolve(key)
                        .unwrap_or_else(|e| panic!("boards/{key}.toml: {e}")),
                )
            })
            .collect()
    })
}

/// A built-in board file, laid over its `base` (a built-in board too: a
/// variant says only what differs, as scenarios' boards do); `None` if no
/// built-in has that key. The unit tests prove every file reads and every
/// base exists.
pub fn builtin_file(key: &str) -> Option<BoardFile> {
    let text = BUILTIN_BOARDS.iter().find(|(k, _)| *k == key)?.1;
    let file: BoardFile = toml::from_str(text)
        .unwrap_or_else(|e: toml::de::Error| panic!("boards/{key}.toml: {}", e.message()));
    match &file.base {
        Some(base) if base != key => {
            let under = builtin_file(base)
                .unwrap_or_else(|| panic!("boards/{key}.toml: no built-in base `{base}`"));
            Some(file.over(under))
        }
        Some(base) => panic!("boards/{key}.toml: base \"{base}\" is not another built-in board"),
        None => Some(file),
    }
}

/// A built-in board file as a table, merged over its `base`: how boards
/// were merged before [`builtin_file`], kept as the reference its tests
/// hold the typed overlay to.
#[cfg(test)]
pub fn builtin_table(key: &str) -> Option<toml::Table> {
    let text = BUILTIN_BOARDS.iter().find(|(k, _)| *k == key)?.1;
    let mut table: toml::Table = text
        .parse()
        .unwrap_or_else(|e: toml::de::Error| panic!("boards/{key}.toml: {}", e.message()));
    match table.remove("base") {
        Some(toml::Value::String(base)) if base != key => {
            let mut merged = builtin_table(&base)
                .unwrap_or_else(|| panic!("boards/{key}.toml: no built-in base `{base}`"));
            merge_tables(&mut merged, table);
            Some(merged)
        }
        Some(other) => panic!("boards/{key}.toml: base {other} is not another built-in board"),
        None => Some(table),
    }
}

pub fn model_by_key(key: &str) -> Option<Arc<Model>> {
    builtins().iter().find(|m| m.key == key).cloned()
}

impl Model {
    /// Boards that register with an NVSwitch fabric manager answer
    /// `nvmlDeviceGetGpuFabricInfo`.
    pub fn nvswitch_fabric(&self) -> bool {
        self.nvlink.fabric
    }

    /// NVLink5 (Blackwell and newer): link recovery, effective and symbol
    /// error counters (fields 213-222) instead of the DL replay, recovery
    /// and CRC ones, which nvml.h calls "unsupported for Blackwell+" (12.8
    /// header on).
    pub fn nvlink5(&self) -> bool {
        self.nvlink.links > 0
            && self.arch != sys::NVML_DEVICE_ARCH_UNKNOWN
            && self.arch >= sys::NVML_DEVICE_ARCH_BLACKWELL
    }

    pub fn mig_capable(&self) -> bool {
        self.mig.supported
    }

    pub fn profile_by_name(&self, name: &str) -> Option<&MigProfile> {
        self.mig.profiles.iter().find(|p| p.name == name)
    }

    pub fn profile_by_index(&self, index: u32) -> Option<&MigProfile> {
        self.mig.profiles.iter().find(|p| p.profile_index == index)
    }

    pub fn profile_by_id(&self, id: u32) -> Option<&MigProfile> {
        self.mig.profiles.iter().find(|p| p.id == id)
    }

    /// Slowdown temperature, or the nearest a board without one would slow
    /// down at (for the thermal-throttle physics).
    pub fn slowdown_c(&self) -> u32 {
        self.thermal
            .slowdown_c
            .or_else(|| Some((self.tlimit_c()? as i32 - self.thermal.tlimit_margins[1]?) as u32))
            .or(self.thermal.gpu_max_c.map(|t| t + 2))
            .unwrap_or(90)
    }

    /// The maximum operating temperature T.Limit margins count from: the
    /// absolute one, the board's T.Limit, or the slowdown threshold less
    /// its margin.
    pub fn tlimit_c(&self) -> Option<u32> {
        let t = &self.thermal;
        t.gpu_max_c.or(t.tlimit_temperature_c).or_else(|| {
            let slowdown_margin = t.tlimit_margins[1]?;
            Some((t.slowdown_c? as i32 + slowdown_margin) as u32)
        })
    }
}

fn placed_names(placed: &[(MigProfile, u32)]) -> Vec<&str> {
    placed.iter().map(|(p, _)| p.name.as_str()).collect()
}

/// A GPU instance to place: a profile, and where the scenario put it
/// (`None`: where `nvidia-smi mig -cgi` would, the first free start).
pub struct Placement<'a> {
    pub profile: &'a str,
    pub start: Option<u32>,
}

/// Chooses placements for a list of profiles the way `nvidia-smi mig -cgi`
/// does when no placement is given: first free start, in list order.
/// Errors name the profile that does not fit.
pub fn place_layout(model: &Model, names: &[String]) -> Result<Vec<(MigProfile, u32)>, Invalid> {
    let wanted: Vec<Placement> = names
        .iter()
        .map(|n| Placement {
            profile: n,
            start: None,
        })
        .collect();
    place(model, &wanted)
}

/// [`place_layout`] with placements the scenario may fix: a fixed start
/// must be one of the profile's valid placements and free.
pub fn place(model: &Model, wanted: &[Placement]) -> Result<Vec<(MigProfile, u32)>, Invalid> {
    let mut used_mem = vec![false; model.mig.memory_slices as usize];
    let mut used_slices = 0;
    let mut out: Vec<(MigProfile, u32)> = Vec::new();
    for w in wanted {
        let name = w.profile;
        let profile = model.profile_by_name(name).ok_or_else(|| {
            let known: Vec<&str> = model.mig.profiles.iter().map(|p| p.name.as_str()).collect();
            if known.is_empty() {
                format!("{} does not support MIG", model.name)
            } else {
                format!(
                    "unknown MIG profile `{name}` for {} (known: {})",
                    model.name,
                    known.join(", ")
                )
            }
        })?;
        if let Some((a, b)) = model.mig.exclusions.iter().find(|(a, b)| {
            (profile.name == *a && placed_names(&out).contains(&b.as_str()))
                || (profile.name == *b && placed_names(&out).contains(&a.as_str()))
        }) {
            return Err(Invalid::from(format!(
                "MIG profiles `{a}` and `{b}` cannot share a {} (not a valid MIG layout)",
                model.name
            )));
        }
        if used_slices + profile.slices > model.mig.compute_slices {
            return Err(Invalid::from(format!(
                "MIG profile `{name}` does not fit: compute slices exhausted ({} per GPU)",
                model.mig.compute_slices
            )));
        }
        let free = |s: u32| {
            (s..s + profile.mem_slices).all(|m| used_mem.get(m as usize).is_some_and(|u| !u))
        };
        let start = match w.start {
            Some(s) => {
                if !profile.starts.contains(&s) {
                    return Err(Invalid::from(format!(
                        "MIG profile `{name}` cannot start at memory slice {s} (valid: {:?})",
                        profile.starts
                    )));
                }
                if !free(s) {
                    return Err(Invalid::from(format!(
                        "MIG profile `{name}` at memory slice {s} overlaps another GPU instance"
                    )));
                }
                s
            }
            None => profile
                .starts
                .iter()
                .copied()
                .find(|&s| free(s))
                .ok_or_else(|| {
                    format!("MIG profile `{name}` does not fit: no free placement left on the GPU")
                })?,
        };
        for m in start..start + profile.mem_slices {
            used_mem[m as usize] = true;
        }
        used_slices += profile.slices;
        out.push((profile.clone(), start));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_board_reads() {
        assert!(builtins().len() >= 5);
        for m in builtins() {
            assert!(!m.name.is_empty(), "{}", m.key);
            assert!(
                m.memory.reserved_bytes < m.memory.total_mib << 20,
                "{}",
                m.key
            );
            for p in &m.mig.profiles {
                assert!(p.slices <= m.mig.compute_slices, "{} {}", m.key, p.name);
                for s in &p.starts {
                    assert!(
                        s + p.mem_slices <= m.mig.memory_slices,
                        "{} {}",
                        m.key,
                        p.name
                    );
                }
            }
        }
    }

    #[test]
    fn layouts_follow_profile_tables() {
        let h100 = model_by_key("h100-sxm5-80gb").unwrap();
        let h100 = &*h100;
        let seven: Vec<String> = (0..7).map(|_| "1g.10gb".to_string()).collect();
        let placed = place_layout(h100, &seven).unwrap();
        let ids: Vec<u32> = placed.iter().map(|(p, s)| p.instance_id_for(*s)).collect();
        assert_eq!(ids, vec![7, 8, 9, 10, 11, 12, 13]);
        let mut eight = seven.clone();
        eight.push("1g.10gb".into());
        assert!(place_layout(h100, &eight).is_err());
        let mixed: Vec<String> = ["3g.40gb", "2g.20gb", "1g.10gb"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let placed = place_layout(h100, &mixed).unwrap();
        assert_eq!(
            placed.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            vec![0, 4, 6]
        );
        let bad: Vec<String> = ["4g.40gb", "4g.40gb"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(place_layout(h100, &bad).is_err());
        assert!(place_layout(h100, &["2g.10gb".to_string()])
            .unwrap_err()
            .contains("unknown MIG profile"));
        // Placements a real driver chose (the H100 MIG capture: 2g at 0, 1g
        // at 2 and 3, 3g at 4) and their GPU instance ids.
        let fixed = [
            ("3g.40gb", 4),
            ("2g.20gb", 0),
            ("1g.10gb", 2),
            ("1g.10gb", 3),
        ];
        let wanted: Vec<Placement> = fixed
            .iter()
            .map(|(p, s)| Placement {
                profile: p,
                start: Some(*s),
            })
            .collect();
        let placed = place(h100, &wanted).unwrap();
        let ids: Vec<u32> = placed.iter().map(|(p, s)| p.instance_id_for(*s)).collect();
        assert_eq!(ids, vec![2, 3, 9, 10]);
        let clash = [
            Placement {
                profile: "2g.20gb",
                start: Some(0),
            },
            Placement {
                profile: "1g.10gb",
                start: Some(1),
            },
        ];
        assert!(place(h100, &clash).unwrap_err().contains("overlaps"));
    }
}
