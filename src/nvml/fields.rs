//! Field ids for the batched `nvmlDeviceGetFieldValues` calls. Ids are sent
//! raw (not through nvml-wrapper's renumbering), so the driver's numbering
//! is applied here, where the ids are chosen, from the driver branch
//! (`DriverBranch`, parsed from `nvmlSystemGetDriverVersion`).

pub const MEMORY_TEMP: u32 = 82; // NVML_FI_DEV_MEMORY_TEMP, celsius
pub const NVLINK_LINK_COUNT: u32 = 91;
pub const PCIE_TX_BYTES: u32 = 197; // NVML_FI_DEV_PCIE_COUNT_TX_BYTES, R555+
pub const PCIE_RX_BYTES: u32 = 198;
pub const RECOVERY_ACTION: u32 = 230; // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R570+

/// NVLink-C2C, a Grace board's GPU-to-CPU link, per link (`scopeId` =
/// link, as NCCL and UCX ask 171 and 172). 170-172 are in every header
/// R535 on (go-nvml 075f45f, 12.2: "Number of C2C Links present on the
/// device", "C2C Link Status 0=INACTIVE 1=ACTIVE"); the error counters
/// 231-233 come with the 12.9 header, R575 (62ce1e3:2578-2581): 231
/// `NVML_FI_DEV_C2C_LINK_ERROR_INTR` is "C2C Link CRC Error Counter", 232
/// replays, 233 back-to-back replays. 234, the link's power state, is not
/// read: a link in low power is not a fault.
pub const C2C_LINK_COUNT: u32 = 170;
pub const C2C_LINK_STATUS: u32 = 171;
pub const C2C_ERROR_CRC: u32 = 231;
pub const C2C_ERROR_REPLAY: u32 = 232;
pub const C2C_ERROR_REPLAY_B2B: u32 = 233;

pub const TOTAL_ENERGY: u32 = 83; // NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
pub const PCIE_REPLAY: u32 = 94; // NVML_FI_DEV_PCIE_REPLAY_COUNTER
pub const RETIRED_SBE: u32 = 29;
pub const RETIRED_DBE: u32 = 30;
pub const RETIRED_PENDING: u32 = 31;
pub const REMAPPED_COR: u32 = 142;
pub const REMAPPED_UNC: u32 = 143;
pub const REMAPPED_PENDING: u32 = 144;
pub const REMAPPED_FAILURE: u32 = 145;

/// ECC counters available as fields: (id, uncorrected, aggregate,
/// location). Location indexes the sampler's ECC location table (0 L1,
/// 1 L2, 2 device memory, 3 register file, 4 texture, 6 CBU); `None` is
/// the total over all locations. SBE counts are NVML's corrected errors,
/// DBE its uncorrected ones.
pub const ECC_FIELDS: [(u32, bool, bool, Option<usize>); 26] = [
    (3, false, false, None),
    (4, true, false, None),
    (5, false, true, None),
    (6, true, true, None),
    (7, false, false, Some(0)),
    (8, true, false, Some(0)),
    (9, false, false, Some(1)),
    (10, true, false, Some(1)),
    (11, false, false, Some(2)),
    (12, true, false, Some(2)),
    (13, false, false, Some(3)),
    (14, true, false, Some(3)),
    (15, false, false, Some(4)),
    (16, true, false, Some(4)),
    (17, true, false, Some(6)),
    (18, false, true, Some(0)),
    (19, true, true, Some(0)),
    (20, false, true, Some(1)),
    (21, true, true, Some(1)),
    (22, false, true, Some(2)),
    (23, true, true, Some(2)),
    (24, false, true, Some(3)),
    (25, true, true, Some(3)),
    (26, false, true, Some(4)),
    (27, true, true, Some(4)),
    (28, true, true, Some(6)),
];

/// Power by scope (`NVML_FI_DEV_POWER_*`, nvml.h 12.2 / R535 on): the
/// `scopeId` says whose power, 0 the GPU's, [`POWER_SCOPE_MODULE`]
/// (Grace superchips: CPU + GPU + memory) or [`POWER_SCOPE_MEMORY`]
/// (NVIDIA/go-nvml gen/nvml/nvml.h at f420a32, lines 2277-2294; the scope
/// constants `NVML_POWER_SCOPE_*` at 9da9e13:1586-1588). Milliwatts.
pub const POWER_AVERAGE: u32 = 185; // NVML_FI_DEV_POWER_AVERAGE, over 1 s
pub const POWER_INSTANT: u32 = 186; // NVML_FI_DEV_POWER_INSTANT, no averaging
pub const POWER_CURRENT_LIMIT: u32 = 190; // enforced, out-of-band limits included
pub const POWER_SCOPE_MODULE: u32 = 1;
pub const POWER_SCOPE_MEMORY: u32 = 2;

/// T.Limit thresholds (`NVML_FI_DEV_TEMPERATURE_*_TLIMIT`, 12.2 on): "supported
/// on Ada and later ... supersedes nvmlDeviceGetTemperatureThreshold". Real
/// Hopper captures print them as signed margins to T.Limit (H100 and H200
/// on 590.48.01: shutdown -8 C, slowdown -2 C, max operating 0 C), never as
/// absolute degrees.
pub const TLIMIT_SLOWDOWN: u32 = 194;

/// Cumulative clock-event (throttle) durations in nanoseconds.
pub const REASON_SW_POWER_CAP: u32 = 74;
pub const REASON_SYNC_BOOST: u32 = 76;
/// NVML_FI_DEV_PERF_POLICY_THERMAL: thermal violation time, nanoseconds.
pub const PERF_POLICY_THERMAL: u32 = 75;

/// The driver's version as branch and minor number: `570.133.20` is
/// branch 570, minor 133. Field ids and struct layouts differ by branch
/// (nvml-sim/README.md, "The driver it claims to be", cites the headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverBranch {
    /// 0: the version string could not be read or parsed.
    pub major: u32,
    pub minor: u32,
}

impl DriverBranch {
    pub fn parse(version: &str) -> DriverBranch {
        let mut parts = version.trim().split('.').map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => DriverBranch { major, minor },
            _ => DriverBranch::default(),
        }
    }

    pub fn known(self) -> bool {
        self.major != 0
    }

    /// Whether the branch's header defines field `id` for what this
    /// exporter reads there. PCIe byte counters (197/198) arrive in R555,
    /// the recovery action (230) in R570; an unknown version is asked
    /// everything (an id it lacks just comes back absent).
    pub fn has_field(self, id: u32) -> bool {
        if !self.known() {
            return true;
        }
        match id {
            PCIE_TX_BYTES | PCIE_RX_BYTES => self.major >= 555,
            // 202-222 (NVLink5 byte and error counters) first appear in
            // the 12.6 header (go-nvml 7ec3ff8; 5f61a8a, 12.5, has none).
            NVLINK_TX_BYTES..=NVLINK5_SYMBOL_BER => self.major >= 560,
            RECOVERY_ACTION => self.major >= 570,
            C2C_ERROR_CRC..=C2C_ERROR_REPLAY_B2B => self.major >= 575,
            _ => true,
        }
    }

    /// `NVML_FI_PWR_SMOOTHING_HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING`, whose id
    /// moved twice: 258 in the R570 header (go-nvml f420a32:2371), 263 in
    /// R575 and R580 before 580.82 (62ce1e3:2622, 9da9e13:2717: the
    /// clock-event durations took 251-253 and shifted power smoothing by
    /// five), 258 again from 580.82 (2a1f6c3:2740, where 263 is a ramp-down
    /// hysteresis). nvml-wrapper-sys 0.10's constant is 263, right only
    /// for the middle span. Before R570 no branch has it.
    pub fn power_smoothing_lifetime_id(self) -> Option<u32> {
        match (self.major, self.minor) {
            (570..=574, _) => Some(258),
            (575..=579, _) | (580, 0..=81) => Some(263),
            (580, _) | (581.., _) => Some(258),
            _ => None,
        }
    }

    /// SW thermal, HW thermal and HW power brake clock-event durations.
    /// R575 and R580 before 580.82 define them at 251-253; from 580.82
    /// (CUDA 13.0 Update 1) they are 269-271. In R570 251-253 are power
    /// smoothing fields, and no branch before R575 has the durations:
    /// `None`, and the thermal time comes from field 75 instead. Unlike
    /// nvml-wrapper's two-way `FieldIdScheme`, an unknown version gets
    /// `None` rather than a guess that could read another field.
    pub fn throttle_duration_ids(self) -> Option<[u32; 3]> {
        match (self.major, self.minor) {
            (575..=579, _) | (580, 0..=81) => Some([251, 252, 253]),
            (580, _) | (581.., _) => Some([269, 270, 271]),
            _ => None,
        }
    }
}

/// Per-link NVLink fields, sent with `scopeId` = link.
///
/// [`NVLINK_ALL_LINKS`] as the scope asks a GPU's sum over all its links:
/// nvml.h says so of the throughput counters 138-141 in every header
/// since CUDA 11 ("A scopeId of UINT_MAX returns aggregate value summed up
/// across all links", go-nvml 56658d6 to 8b8585b), and NVIDIA's DCGM asks
/// the NVLink5 counters (201-222) so for a GPU's total on Blackwell
/// ("NVLink5 COUNT fields return per-link data by default. Setting scopeId
/// to UINT_MAX returns aggregate data across all NVLinks": NVIDIA/DCGM
/// 72fa3fe, dcgmlib/src/DcgmCMUtils.h and DcgmCMUtils.cpp,
/// `NvmlFieldRequiresNvLinkAggregate`).
pub const NVLINK_ALL_LINKS: u32 = u32::MAX;
pub const NVLINK_STATE: u32 = 165; // NVML_FI_DEV_NVLINK_GET_STATE
pub const NVLINK_REPLAY: u32 = 161; // NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY
pub const NVLINK_RECOVERY: u32 = 162; // NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY
pub const NVLINK_CRC_FLIT: u32 = 163; // NVML_FI_DEV_NVLINK_ERROR_DL_CRC
pub const NVLINK_TX_BYTES: u32 = 202; // NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES
pub const NVLINK_RX_BYTES: u32 = 204; // NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES
pub const NVLINK_TX_KIB: u32 = 138; // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
pub const NVLINK_RX_KIB: u32 = 139;

/// NVLink5 (Blackwell) error counters, per link, in the 12.6 header (R560)
/// on (the 12.5 header raised `NVML_FI_MAX` to 223 without defining them). nvml.h since 12.8 says of 161-163: "This is unsupported for
/// Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*"
/// (go-nvml f420a32:2239-2255).
// 213, link went Up -> recovery -> Up, is not read: 215 counts it too.
pub const NVLINK5_RECOVERY_FAILED: u32 = 214; // ... -> recovery -> declared down
pub const NVLINK5_RECOVERY: u32 = 215; // Up -> recovery, whatever the result
pub const NVLINK5_EFFECTIVE_ERRORS: u32 = 219; // "errors in each Nvlink packet", after FEC
pub const NVLINK5_EFFECTIVE_BER: u32 = 220; // packed, see `nvlink_ber`
pub const NVLINK5_SYMBOL_ERRORS: u32 = 221; // "errors in rx symbols", before FEC
pub const NVLINK5_SYMBOL_BER: u32 = 222;

/// Per-link traffic: exact bytes (NVLink5 headers on), else KiB.
pub const PER_LINK_TRAFFIC: [u32; 4] = [
    NVLINK_TX_BYTES,
    NVLINK_RX_BYTES,
    NVLINK_TX_KIB,
    NVLINK_RX_KIB,
];
pub const PER_LINK_LEGACY_ERRORS: [u32; 3] = [NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC_FLIT];
/// The NVLink5 counters the per-GPU sums use (`nvidia_gpu_nvlink_errors_total`).
pub const PER_LINK_NVLINK5_ERRORS: [u32; 2] = [NVLINK5_RECOVERY, NVLINK5_EFFECTIVE_ERRORS];
/// NVLink5 counters exported per link only: for `nvlink.per-link`.
pub const PER_LINK_NVLINK5_DETAIL: [u32; 2] = [NVLINK5_RECOVERY_FAILED, NVLINK5_SYMBOL_ERRORS];

/// The legacy per-GPU totals of the DL error counters ("total for all
/// Lanes", ids 38, 45, 52, 59: every header R535-R610). Read every poll to
/// say whether the per-link counters moved, not exported: which links a
/// driver sums into them is not documented.
pub const NVLINK_CRC_FLIT_TOTAL: u32 = 38;
pub const NVLINK_CRC_DATA_TOTAL: u32 = 45;
pub const NVLINK_REPLAY_TOTAL: u32 = 52;
pub const NVLINK_RECOVERY_TOTAL: u32 = 59;
/// Bit error rates: only for `nvlink.per-link`.
pub const PER_LINK_NVLINK5_BER: [u32; 2] = [NVLINK5_EFFECTIVE_BER, NVLINK5_SYMBOL_BER];

/// A packed NVLink5 bit error rate (fields 220 and 222): "Bit [0:7]: BER
/// Exponent value, Bit [8:11]: BER MANTISSA value" (nvml.h at 9da9e13,
/// lines 2645-2662, `NVML_NVLINK_ERROR_COUNTER_BER_GET` at 8852-8866),
/// read as mantissa x 10^-exponent, as NVIDIA's DCGM decodes it into
/// `DCGM_FI_DEV_NVLINK_COUNT_*_BER_FLOAT` (its tests: 0x401 is 4e-1, 0x3E8
/// is 3e-232, 0xFFF is 15e-255, the floor a clean link reports).
pub fn nvlink_ber(packed: u64) -> f64 {
    let exponent = (packed & 0xff) as i32;
    let mantissa = ((packed >> 8) & 0xf) as f64;
    mantissa * 10f64.powi(-exponent)
}

/// Legacy per-link data CRC counters (no scope id, links 0-11 only).
pub fn nvlink_crc_data_id(link: u32) -> Option<u32> {
    match link {
        0..=5 => Some(39 + link),
        6..=11 => Some(102 + link - 6),
        _ => None,
    }
}

/// The GI profile name inside a MIG device name, e.g. `3g.40gb` from
/// `NVIDIA H100 80GB HBM3 MIG 3g.40gb` or from `... MIG 1c.3g.40gb` (a
/// compute instance smaller than its GPU instance).
pub fn mig_profile_from_name(name: &str) -> Option<String> {
    let tail = name
        .rsplit_once("MIG ")
        .map(|(_, t)| t)
        .unwrap_or(name)
        .trim();
    let tail = tail.split_whitespace().next()?;
    let parts: Vec<&str> = tail.split('.').collect();
    let profile = match parts.as_slice() {
        [c, g, mem] if c.ends_with('c') && g.ends_with('g') => format!("{g}.{mem}"),
        [g, mem] if g.ends_with('g') => format!("{g}.{mem}"),
        [g, mem, extra @ ..] if g.ends_with('g') => {
            // e.g. `1g.10gb+me`: keep the whole suffix as the profile name.
            let mut s = format!("{g}.{mem}");
            for e in extra {
                s.push('.');
                s.push_str(e);
            }
            s
        }
        _ => return None,
    };
    let digits_then = |s: &str, unit: char| {
        s.strip_suffix(unit)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    let first = profile.split('.').next()?;
    if digits_then(first, 'g') {
        Some(profile)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thermal_reason_ids_follow_the_driver_branch() {
        let ids = |v: &str| DriverBranch::parse(v).throttle_duration_ids();
        assert_eq!(ids("535.104.05"), None);
        assert_eq!(ids("560.35.03"), None);
        // 251-253 are power smoothing in R570, not durations.
        assert_eq!(ids("570.133.20"), None);
        assert_eq!(ids("575.51.03"), Some([251, 252, 253]));
        assert_eq!(ids("580.65.06"), Some([251, 252, 253]));
        assert_eq!(ids("580.82.07"), Some([269, 270, 271]));
        assert_eq!(ids("590.44.01"), Some([269, 270, 271]));
        assert_eq!(ids("garbage"), None);
    }

    #[test]
    fn power_smoothing_lifetime_id_follows_the_branch() {
        let id = |v: &str| DriverBranch::parse(v).power_smoothing_lifetime_id();
        assert_eq!(id("560.35.03"), None);
        assert_eq!(id("570.133.20"), Some(258));
        assert_eq!(id("575.51.03"), Some(263));
        assert_eq!(id("580.65.06"), Some(263));
        assert_eq!(id("580.81.99"), Some(263));
        assert_eq!(id("580.82.07"), Some(258));
        assert_eq!(id("590.48.01"), Some(258));
        assert_eq!(id("595.71.05"), Some(258));
        assert_eq!(id("610.57.04"), Some(258));
        assert_eq!(id(""), None);
        // Never a clock-event duration id of the same branch.
        for v in ["575.51.03", "580.65.06", "580.95.05", "610.57.04"] {
            let b = DriverBranch::parse(v);
            let durations = b.throttle_duration_ids().unwrap();
            assert!(!durations.contains(&b.power_smoothing_lifetime_id().unwrap()));
        }
    }

    #[test]
    fn nvlink_ber_unpacks_mantissa_and_exponent() {
        // The cases NVIDIA's DCGM tests its decoding with.
        let close = |a: f64, b: f64| (a - b).abs() <= b.abs() * 1e-12;
        assert!(close(nvlink_ber(1025), 4e-1));
        assert!(close(nvlink_ber(513), 2e-1));
        assert!(close(nvlink_ber(2048), 8.0));
        assert!(close(nvlink_ber(3072), 12.0));
        assert!(close(nvlink_ber(1000), 3e-232));
        assert!(close(nvlink_ber(4095), 15e-255));
        assert_eq!(nvlink_ber(0), 0.0);
        // Bits above 11 are not part of the value.
        assert!(close(nvlink_ber(0xF000 | 0x0401), 4e-1));
    }

    #[test]
    fn fields_a_branch_lacks_are_not_asked() {
        let b = DriverBranch::parse;
        assert!(!b("535.183.01").has_field(PCIE_TX_BYTES));
        assert!(b("560.35.03").has_field(PCIE_RX_BYTES));
        assert!(!b("560.35.03").has_field(RECOVERY_ACTION));
        assert!(b("570.133.20").has_field(RECOVERY_ACTION));
        assert!(b("").has_field(RECOVERY_ACTION));
        assert!(b("535.183.01").has_field(MEMORY_TEMP));
        assert!(!b("555.42.02").has_field(NVLINK5_RECOVERY));
        assert!(b("570.133.20").has_field(NVLINK5_SYMBOL_ERRORS));
        // NVLink byte counters: 12.6 header on; the KiB ones everywhere.
        assert!(!b("555.42.02").has_field(NVLINK_TX_BYTES));
        assert!(b("560.35.03").has_field(NVLINK_RX_BYTES));
        assert!(b("535.183.01").has_field(NVLINK_TX_KIB));
        // C2C: the link status in every branch, its error counters R575 on.
        assert!(b("535.183.01").has_field(C2C_LINK_STATUS));
        assert!(!b("570.133.20").has_field(C2C_ERROR_CRC));
        assert!(b("575.57.08").has_field(C2C_ERROR_REPLAY_B2B));
    }

    #[test]
    fn ecc_field_table_covers_each_counter_once() {
        let mut seen = std::collections::HashSet::new();
        for (id, unc, agg, loc) in ECC_FIELDS {
            assert!((3..=28).contains(&id));
            assert!(
                seen.insert((unc, agg, loc)),
                "duplicate counter for field {id}"
            );
        }
        // Totals: every error x scope combination.
        assert_eq!(ECC_FIELDS.iter().filter(|f| f.3.is_none()).count(), 4);
    }

    #[test]
    fn legacy_crc_data_ids() {
        assert_eq!(nvlink_crc_data_id(0), Some(39));
        assert_eq!(nvlink_crc_data_id(5), Some(44));
        assert_eq!(nvlink_crc_data_id(6), Some(102));
        assert_eq!(nvlink_crc_data_id(11), Some(107));
        assert_eq!(nvlink_crc_data_id(12), None);
    }

    #[test]
    fn profile_names_from_mig_device_names() {
        assert_eq!(
            mig_profile_from_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb").as_deref(),
            Some("3g.40gb")
        );
        assert_eq!(
            mig_profile_from_name("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb").as_deref(),
            Some("3g.20gb")
        );
        assert_eq!(
            mig_profile_from_name("NVIDIA H100 MIG 1g.10gb+me").as_deref(),
            Some("1g.10gb+me")
        );
        assert_eq!(mig_profile_from_name("NVIDIA H100 80GB HBM3"), None);
        assert_eq!(mig_profile_from_name(""), None);
    }
}
