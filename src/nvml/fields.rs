//! Field ids for the batched `nvmlDeviceGetFieldValues` calls. Ids are sent
//! raw (not through nvml-wrapper's renumbering), so the driver's numbering
//! scheme is applied here, where the ids are chosen.

use nvml_wrapper::FieldIdScheme;

pub const MEMORY_TEMP: u32 = 82; // NVML_FI_DEV_MEMORY_TEMP, celsius
pub const NVLINK_LINK_COUNT: u32 = 91;
pub const PCIE_TX_BYTES: u32 = 197; // NVML_FI_DEV_PCIE_COUNT_TX_BYTES
pub const PCIE_RX_BYTES: u32 = 198;
pub const RECOVERY_ACTION: u32 = 230; // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

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

/// Cumulative clock-event (throttle) durations in nanoseconds.
pub const REASON_SW_POWER_CAP: u32 = 74;
pub const REASON_SYNC_BOOST: u32 = 76;
/// NVML_FI_DEV_PERF_POLICY_THERMAL: thermal violation time, nanoseconds.
pub const PERF_POLICY_THERMAL: u32 = 75;

/// SW thermal, HW thermal and HW power brake durations moved from 251-253
/// to 269-271 in drivers >= 580.82 (CUDA 13.0 Update 1).
pub fn thermal_and_brake_reason_ids(scheme: FieldIdScheme) -> [u32; 3] {
    match scheme {
        FieldIdScheme::V12 => [251, 252, 253],
        FieldIdScheme::V13Update1 => [269, 270, 271],
    }
}

/// Per-link NVLink fields, sent with `scopeId` = link.
pub const NVLINK_STATE: u32 = 165; // NVML_FI_DEV_NVLINK_GET_STATE
pub const NVLINK_REPLAY: u32 = 161; // NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY
pub const NVLINK_RECOVERY: u32 = 162; // NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY
pub const NVLINK_CRC_FLIT: u32 = 163; // NVML_FI_DEV_NVLINK_ERROR_DL_CRC
pub const NVLINK_TX_BYTES: u32 = 202; // NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES
pub const NVLINK_RX_BYTES: u32 = 204; // NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES
pub const NVLINK_TX_KIB: u32 = 138; // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
pub const NVLINK_RX_KIB: u32 = 139;

pub const PER_LINK: [u32; 8] = [
    NVLINK_STATE,
    NVLINK_REPLAY,
    NVLINK_RECOVERY,
    NVLINK_CRC_FLIT,
    NVLINK_TX_BYTES,
    NVLINK_RX_BYTES,
    NVLINK_TX_KIB,
    NVLINK_RX_KIB,
];

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
    fn thermal_reason_ids_follow_the_driver_scheme() {
        assert_eq!(
            thermal_and_brake_reason_ids(FieldIdScheme::V12),
            [251, 252, 253]
        );
        assert_eq!(
            thermal_and_brake_reason_ids(FieldIdScheme::V13Update1),
            [269, 270, 271]
        );
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
