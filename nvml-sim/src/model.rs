//! Static descriptions of the GPU boards the simulator can present.
//!
//! Numbers come from NVIDIA's product briefs, `nvidia-smi -q` output of the
//! real boards and the MIG user guide (profile tables and placements). They
//! are fixed per model; what moves over time lives in `fleet`.

use nvml_wrapper_sys::bindings as sys;

/// One GPU instance profile of a MIG-capable board (MIG user guide,
/// "Supported MIG Profiles"; NVML `nvmlGpuInstanceProfileInfo_v2_t`).
#[derive(Debug)]
pub struct MigProfile {
    /// Short name as NVML and nvidia-smi print it, e.g. `1g.10gb`.
    pub name: &'static str,
    /// `NVML_GPU_INSTANCE_PROFILE_*` index used by `nvmlDeviceGetGpuInstanceProfileInfo`.
    pub profile_index: u32,
    /// Profile id as reported in the info struct (19 for 1g.10gb, ...).
    pub id: u32,
    /// Compute slices (sevenths of the GPU).
    pub slices: u32,
    /// Memory slices (eighths of the GPU); placements are in these units.
    pub mem_slices: u32,
    /// How many instances of this profile fit on one GPU.
    pub instance_count: u32,
    /// Valid placement starts (in memory slices).
    pub starts: &'static [u32],
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
        match self.slices {
            7 => 0,
            4 => 1,
            3 => 1 + start / 4,
            2 => 3 + start / 2,
            _ if self.mem_slices == 2 => 3 + start / 2,
            _ => 7 + start,
        }
    }

    /// `NVML_COMPUTE_INSTANCE_PROFILE_*` index of the compute instance that
    /// spans the whole GPU instance.
    pub fn full_ci_profile_index(&self) -> u32 {
        match self.slices {
            1 => sys::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
            2 => sys::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
            3 => sys::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
            4 => sys::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
            _ => sys::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
        }
    }
}

#[derive(Debug)]
pub struct Model {
    /// Key used in scenario files.
    pub key: &'static str,
    pub name: &'static str,
    pub brand: u32,
    pub arch: u32,
    pub cuda_cc: (i32, i32),
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub board_part: &'static str,
    pub vbios: &'static str,
    pub memory_mib: u64,
    /// Reserved by the driver and firmware, reported apart by memory info v2.
    pub reserved_mib: u64,
    pub bar1_mib: u64,
    pub power_default_mw: u32,
    pub power_min_mw: u32,
    pub power_max_mw: u32,
    pub power_idle_mw: u32,
    pub max_graphics_mhz: u32,
    pub max_sm_mhz: u32,
    pub max_mem_mhz: u32,
    pub max_video_mhz: u32,
    pub busy_graphics_mhz: u32,
    pub idle_graphics_mhz: u32,
    pub idle_mem_mhz: u32,
    pub idle_video_mhz: u32,
    pub temp_shutdown: u32,
    pub temp_slowdown: u32,
    pub temp_gpu_max: u32,
    /// `None` where the board has no HBM temperature sensor.
    pub temp_mem_max: Option<u32>,
    pub fans: u32,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    pub nvlinks: u32,
    /// Per-link NVLink line rate in Mbps (`NVML_FI_DEV_NVLINK_SPEED_MBPS_*`).
    pub nvlink_mbps: u32,
    pub ecc: bool,
    /// Page retirement (Kepler..Volta) versus row remapping (Ampere and newer).
    pub page_retirement: bool,
    pub row_remapping: bool,
    /// Memory banks in the row remapper histogram (0 without row remapping).
    pub remapper_banks: u32,
    pub mig_profiles: &'static [MigProfile],
    /// Profile pairs that cannot coexist on one GPU although slices would
    /// allow it (MIG user guide, A100 40GB: 4g.20gb + 3g.20gb is not a valid layout).
    pub mig_exclusions: &'static [(&'static str, &'static str)],
    pub gpm: bool,
    pub display_capable: bool,
    pub sm_count: u32,
    pub encoders: bool,
}

macro_rules! profile {
    ($name:expr, $idx:expr, $id:expr, $sl:expr, $ms:expr, $cnt:expr, $starts:expr, $mib:expr, $sm:expr, $ce:expr, $dec:expr, $jpg:expr, $ofa:expr) => {
        MigProfile {
            name: $name,
            profile_index: $idx,
            id: $id,
            slices: $sl,
            mem_slices: $ms,
            instance_count: $cnt,
            starts: $starts,
            memory_mib: $mib,
            sm_count: $sm,
            copy_engines: $ce,
            decoders: $dec,
            encoders: 0,
            jpegs: $jpg,
            ofas: $ofa,
        }
    };
}

/// H100 80GB profile table (MIG user guide, "H100 MIG Profiles").
pub static H100_80GB_PROFILES: [MigProfile; 6] = [
    profile!(
        "1g.10gb",
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        19,
        1,
        1,
        7,
        &[0, 1, 2, 3, 4, 5, 6],
        9856,
        16,
        1,
        1,
        1,
        0
    ),
    profile!(
        "1g.20gb",
        // The memory-doubled single slice is REV2; REV1 is `1g.10gb+me`
        // (media extensions), which no simulated layout uses.
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
        15,
        1,
        2,
        4,
        &[0, 2, 4, 6],
        19968,
        26,
        1,
        1,
        1,
        0
    ),
    profile!(
        "2g.20gb",
        sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        14,
        2,
        2,
        3,
        &[0, 2, 4],
        19968,
        32,
        2,
        2,
        2,
        0
    ),
    profile!(
        "3g.40gb",
        sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        9,
        3,
        4,
        2,
        &[0, 4],
        40192,
        60,
        3,
        3,
        3,
        0
    ),
    profile!(
        "4g.40gb",
        sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
        5,
        4,
        4,
        1,
        &[0],
        40192,
        64,
        4,
        4,
        4,
        0
    ),
    profile!(
        "7g.80gb",
        sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
        0,
        7,
        8,
        1,
        &[0],
        80768,
        132,
        8,
        7,
        7,
        1
    ),
];

/// A100 80GB profile table (MIG user guide, "A100 MIG Profiles").
pub static A100_80GB_PROFILES: [MigProfile; 6] = [
    profile!(
        "1g.10gb",
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        19,
        1,
        1,
        7,
        &[0, 1, 2, 3, 4, 5, 6],
        9728,
        14,
        1,
        0,
        0,
        0
    ),
    profile!(
        "1g.20gb",
        // The memory-doubled single slice is REV2; REV1 is `1g.10gb+me`
        // (media extensions), which no simulated layout uses.
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
        15,
        1,
        2,
        4,
        &[0, 2, 4, 6],
        19968,
        14,
        1,
        1,
        0,
        0
    ),
    profile!(
        "2g.20gb",
        sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        14,
        2,
        2,
        3,
        &[0, 2, 4],
        19968,
        28,
        2,
        1,
        0,
        0
    ),
    profile!(
        "3g.40gb",
        sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        9,
        3,
        4,
        2,
        &[0, 4],
        40192,
        42,
        3,
        2,
        0,
        0
    ),
    profile!(
        "4g.40gb",
        sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
        5,
        4,
        4,
        1,
        &[0],
        40192,
        56,
        4,
        2,
        0,
        0
    ),
    profile!(
        "7g.80gb",
        sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
        0,
        7,
        8,
        1,
        &[0],
        80384,
        98,
        7,
        5,
        1,
        1
    ),
];

/// A100 40GB profile table (MIG user guide, "A100 MIG Profiles").
pub static A100_40GB_PROFILES: [MigProfile; 5] = [
    profile!(
        "1g.5gb",
        sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        19,
        1,
        1,
        7,
        &[0, 1, 2, 3, 4, 5, 6],
        4864,
        14,
        1,
        0,
        0,
        0
    ),
    profile!(
        "2g.10gb",
        sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        14,
        2,
        2,
        3,
        &[0, 2, 4],
        9856,
        28,
        2,
        1,
        0,
        0
    ),
    profile!(
        "3g.20gb",
        sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        9,
        3,
        4,
        2,
        &[0, 4],
        19968,
        42,
        3,
        2,
        0,
        0
    ),
    profile!(
        "4g.20gb",
        sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
        5,
        4,
        4,
        1,
        &[0],
        19968,
        56,
        4,
        2,
        0,
        0
    ),
    profile!(
        "7g.40gb",
        sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
        0,
        7,
        8,
        1,
        &[0],
        40192,
        98,
        7,
        5,
        1,
        1
    ),
];

pub static MODELS: [Model; 5] = [
    Model {
        key: "h100-sxm5-80gb",
        name: "NVIDIA H100 80GB HBM3",
        brand: sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA,
        arch: sys::NVML_DEVICE_ARCH_HOPPER,
        cuda_cc: (9, 0),
        pci_device_id: 0x2330_10DE,
        pci_subsystem_id: 0x16C1_10DE,
        board_part: "692-2G520-0200-000",
        vbios: "96.00.99.00.01",
        memory_mib: 81559,
        reserved_mib: 529,
        bar1_mib: 131_072,
        power_default_mw: 700_000,
        power_min_mw: 200_000,
        power_max_mw: 700_000,
        power_idle_mw: 72_000,
        max_graphics_mhz: 1980,
        max_sm_mhz: 1980,
        max_mem_mhz: 2619,
        max_video_mhz: 1545,
        busy_graphics_mhz: 1980,
        idle_graphics_mhz: 345,
        idle_mem_mhz: 2619,
        idle_video_mhz: 765,
        temp_shutdown: 92,
        temp_slowdown: 89,
        temp_gpu_max: 87,
        temp_mem_max: Some(95),
        fans: 0,
        pcie_gen: 5,
        pcie_width: 16,
        nvlinks: 18,
        nvlink_mbps: 53125,
        ecc: true,
        page_retirement: false,
        row_remapping: true,
        remapper_banks: BANKS_HBM,
        mig_profiles: &H100_80GB_PROFILES,
        mig_exclusions: &[],
        gpm: true,
        display_capable: false,
        sm_count: 132,
        encoders: false,
    },
    Model {
        key: "a100-sxm4-80gb",
        name: "NVIDIA A100-SXM4-80GB",
        brand: sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA,
        arch: sys::NVML_DEVICE_ARCH_AMPERE,
        cuda_cc: (8, 0),
        pci_device_id: 0x20B2_10DE,
        pci_subsystem_id: 0x1463_10DE,
        board_part: "692-2G506-0212-002",
        vbios: "92.00.45.00.06",
        memory_mib: 81920,
        reserved_mib: 567,
        bar1_mib: 131_072,
        power_default_mw: 400_000,
        power_min_mw: 100_000,
        power_max_mw: 400_000,
        power_idle_mw: 62_000,
        max_graphics_mhz: 1410,
        max_sm_mhz: 1410,
        max_mem_mhz: 1593,
        max_video_mhz: 1290,
        busy_graphics_mhz: 1410,
        idle_graphics_mhz: 210,
        idle_mem_mhz: 1593,
        idle_video_mhz: 585,
        temp_shutdown: 92,
        temp_slowdown: 89,
        temp_gpu_max: 87,
        temp_mem_max: Some(95),
        fans: 0,
        pcie_gen: 4,
        pcie_width: 16,
        nvlinks: 12,
        nvlink_mbps: 50000,
        ecc: true,
        page_retirement: false,
        row_remapping: true,
        remapper_banks: BANKS_HBM,
        mig_profiles: &A100_80GB_PROFILES,
        mig_exclusions: &[],
        gpm: false,
        display_capable: false,
        sm_count: 108,
        encoders: false,
    },
    Model {
        key: "a100-sxm4-40gb",
        name: "NVIDIA A100-SXM4-40GB",
        brand: sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA,
        arch: sys::NVML_DEVICE_ARCH_AMPERE,
        cuda_cc: (8, 0),
        pci_device_id: 0x20B0_10DE,
        pci_subsystem_id: 0x134F_10DE,
        board_part: "692-2G506-0200-006",
        vbios: "92.00.19.00.10",
        memory_mib: 40960,
        reserved_mib: 423,
        bar1_mib: 65536,
        power_default_mw: 400_000,
        power_min_mw: 100_000,
        power_max_mw: 400_000,
        power_idle_mw: 55_000,
        max_graphics_mhz: 1410,
        max_sm_mhz: 1410,
        max_mem_mhz: 1215,
        max_video_mhz: 1290,
        busy_graphics_mhz: 1410,
        idle_graphics_mhz: 210,
        idle_mem_mhz: 1215,
        idle_video_mhz: 585,
        temp_shutdown: 92,
        temp_slowdown: 89,
        temp_gpu_max: 87,
        temp_mem_max: Some(95),
        fans: 0,
        pcie_gen: 4,
        pcie_width: 16,
        nvlinks: 12,
        nvlink_mbps: 50000,
        ecc: true,
        page_retirement: false,
        row_remapping: true,
        remapper_banks: BANKS_HBM,
        mig_profiles: &A100_40GB_PROFILES,
        mig_exclusions: &[("4g.20gb", "3g.20gb")],
        gpm: false,
        display_capable: false,
        sm_count: 108,
        encoders: false,
    },
    Model {
        key: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090",
        brand: sys::nvmlBrandType_enum_NVML_BRAND_GEFORCE_RTX,
        arch: sys::NVML_DEVICE_ARCH_ADA,
        cuda_cc: (8, 9),
        pci_device_id: 0x2684_10DE,
        pci_subsystem_id: 0x16F3_10DE,
        board_part: "900-1G136-2530-000",
        vbios: "95.02.18.80.5F",
        memory_mib: 24564,
        reserved_mib: 331,
        bar1_mib: 256,
        power_default_mw: 450_000,
        power_min_mw: 150_000,
        power_max_mw: 600_000,
        power_idle_mw: 21_000,
        max_graphics_mhz: 3120,
        max_sm_mhz: 3120,
        max_mem_mhz: 10501,
        max_video_mhz: 2415,
        busy_graphics_mhz: 2520,
        idle_graphics_mhz: 210,
        idle_mem_mhz: 405,
        idle_video_mhz: 1185,
        temp_shutdown: 95,
        temp_slowdown: 92,
        temp_gpu_max: 90,
        temp_mem_max: None,
        fans: 2,
        pcie_gen: 4,
        pcie_width: 16,
        nvlinks: 0,
        nvlink_mbps: 0,
        ecc: false,
        page_retirement: false,
        row_remapping: false,
        remapper_banks: 0,
        mig_profiles: &[],
        mig_exclusions: &[],
        gpm: false,
        display_capable: true,
        sm_count: 128,
        encoders: true,
    },
    Model {
        key: "v100-sxm2-32gb",
        name: "Tesla V100-SXM2-32GB",
        brand: sys::nvmlBrandType_enum_NVML_BRAND_TESLA,
        arch: sys::NVML_DEVICE_ARCH_VOLTA,
        cuda_cc: (7, 0),
        pci_device_id: 0x1DB5_10DE,
        pci_subsystem_id: 0x1249_10DE,
        board_part: "900-2G503-0430-000",
        vbios: "88.00.98.00.01",
        memory_mib: 32768,
        reserved_mib: 262,
        bar1_mib: 32768,
        power_default_mw: 300_000,
        power_min_mw: 150_000,
        power_max_mw: 300_000,
        power_idle_mw: 42_000,
        max_graphics_mhz: 1530,
        max_sm_mhz: 1530,
        max_mem_mhz: 877,
        max_video_mhz: 1372,
        busy_graphics_mhz: 1530,
        idle_graphics_mhz: 135,
        idle_mem_mhz: 877,
        idle_video_mhz: 555,
        temp_shutdown: 90,
        temp_slowdown: 87,
        temp_gpu_max: 83,
        temp_mem_max: Some(85),
        fans: 0,
        pcie_gen: 3,
        pcie_width: 16,
        nvlinks: 6,
        nvlink_mbps: 25781,
        ecc: true,
        page_retirement: true,
        row_remapping: false,
        remapper_banks: 0,
        mig_profiles: &[],
        mig_exclusions: &[],
        gpm: false,
        display_capable: false,
        sm_count: 80,
        encoders: false,
    },
];

pub fn model_by_key(key: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.key == key)
}

/// Banks in the simulated row remapper histogram of an HBM board. A
/// plausible size, not a measured one: only the shape (every bank at `max`
/// until rows are remapped) matters to clients.
const BANKS_HBM: u32 = 2560;

impl Model {
    /// Hopper and newer boards with NVLink sit on an NVSwitch fabric that
    /// the fabric manager registers them with (`nvmlDeviceGetGpuFabricInfo`).
    pub fn nvswitch_fabric(&self) -> bool {
        self.arch >= sys::NVML_DEVICE_ARCH_HOPPER && self.nvlinks > 0
    }

    pub fn mig_capable(&self) -> bool {
        !self.mig_profiles.is_empty()
    }

    pub fn profile_by_name(&self, name: &str) -> Option<&'static MigProfile> {
        // `mig_profiles` is a `&'static` slice, so the item outlives `self`.
        let profiles: &'static [MigProfile] = self.mig_profiles;
        profiles.iter().find(|p| p.name == name)
    }

    pub fn profile_by_index(&self, index: u32) -> Option<&'static MigProfile> {
        let profiles: &'static [MigProfile] = self.mig_profiles;
        profiles.iter().find(|p| p.profile_index == index)
    }

    pub fn profile_by_id(&self, id: u32) -> Option<&'static MigProfile> {
        let profiles: &'static [MigProfile] = self.mig_profiles;
        profiles.iter().find(|p| p.id == id)
    }
}

fn placed_names(placed: &[(&'static MigProfile, u32)]) -> Vec<&'static str> {
    placed.iter().map(|(p, _)| p.name).collect()
}

/// Chooses placements for a list of profiles the way `nvidia-smi mig -cgi`
/// does when no placement is given: first free start, in list order.
/// Errors name the profile that does not fit.
pub fn place_layout(
    model: &Model,
    names: &[String],
) -> Result<Vec<(&'static MigProfile, u32)>, String> {
    let mut used_mem = [false; 8];
    let mut used_slices = 0;
    let mut out = Vec::new();
    for name in names {
        let profile = model.profile_by_name(name).ok_or_else(|| {
            let known: Vec<&str> = model.mig_profiles.iter().map(|p| p.name).collect();
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
        if let Some((a, b)) = model.mig_exclusions.iter().find(|(a, b)| {
            (profile.name == *a && placed_names(&out).contains(b))
                || (profile.name == *b && placed_names(&out).contains(a))
        }) {
            return Err(format!(
                "MIG profiles `{a}` and `{b}` cannot share a {} (not a valid MIG layout)",
                model.name
            ));
        }
        if used_slices + profile.slices > 7 {
            return Err(format!(
                "MIG profile `{name}` does not fit: compute slices exhausted (7 per GPU)"
            ));
        }
        let start = profile
            .starts
            .iter()
            .copied()
            .find(|&s| (s..s + profile.mem_slices).all(|m| !used_mem[m as usize]))
            .ok_or_else(|| {
                format!("MIG profile `{name}` does not fit: no free placement left on the GPU")
            })?;
        for m in start..start + profile.mem_slices {
            used_mem[m as usize] = true;
        }
        used_slices += profile.slices;
        out.push((profile, start));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_follow_profile_tables() {
        let h100 = model_by_key("h100-sxm5-80gb").unwrap();
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
    }
}
