//! `nvmlDeviceGetFieldValues` (NVML reference, "Field Value Queries"): the
//! field ids of the header of the branch this library claims (driver.rs),
//! per scope.

use super::*;
use crate::fleet::{now_us, Gpu};
use std::ffi::c_int;

#[derive(Debug, PartialEq)]
enum FieldValue {
    U32(u32),
    U64(u64),
    I32(i32),
}

/// What `id` (the claimed branch's meaning resolved) answers in scope
/// `scope` at fleet time `t`. The ids go by group (ECC and retired pages,
/// NVLink, power and thermal, the rest); an id no group answers is
/// NOT_SUPPORTED.
fn field_value(
    g: &Gpu,
    driver: &crate::personality::Personality,
    id: u32,
    scope: u32,
    t: f64,
) -> R<FieldValue> {
    use crate::personality::Field;
    // Ids are the claimed branch's: absent past its NVML_FI_MAX, and some
    // mean different things from branch to branch.
    let id = match driver.field(id) {
        Field::Absent => return Err(NOT_SUPPORTED),
        Field::Deprecated => return Err(DEPRECATED),
        Field::ThrottleDuration(reason) => {
            return Ok(FieldValue::U64(g.throttle.event_ns(reason, t)))
        }
        // HW circuitry % lifetime remaining, the eighth of the block; the
        // other power smoothing fields are settings and profiles, not
        // modelled.
        Field::PowerSmoothing(7) => {
            return g
                .power
                .smoothing_lifetime
                .map(|p| FieldValue::U32(p.round() as u32))
                .ok_or(NOT_SUPPORTED)
        }
        Field::PowerSmoothing(_) => return Err(NOT_SUPPORTED),
        Field::Id(id) => id,
    };
    let groups: [&dyn Fn() -> R<FieldValue>; 6] = [
        &|| ecc_field(g, id),
        &|| c2c_field(g, id, scope),
        &|| nvlink_error_field(g, id, scope),
        &|| nvlink_field(g, id, scope, t),
        &|| power_field(g, id, scope, t),
        &|| other_field(g, id, t),
    ];
    for group in groups {
        let answer = group();
        if answer != Err(NOT_MINE) {
            return answer;
        }
    }
    Err(NOT_SUPPORTED)
}

/// What a group answers for an id that is not one of its own (no NVML
/// return code has this value).
const NOT_MINE: u32 = u32::MAX;

/// NVLink-C2C, the GPU's links to its Grace CPU (boards with `c2c_links`),
/// `scope` the link as NCCL and UCX ask 171 and 172. The count, status and
/// speed (170-172) are in every modelled header (12.2 on; the NVML change
/// log puts them in R520); the error counters and power state (231-234)
/// arrive with the 12.9 header (R575): the branch table leaves them out
/// before. A board without C2C links answers NOT_SUPPORTED, as the H200
/// capture's "C2C Mode: Disabled" board does.
fn c2c_field(g: &Gpu, id: u32, scope: u32) -> R<FieldValue> {
    use FieldValue::{U32, U64};
    const COUNT: u32 = 170;
    const STATUS: u32 = 171;
    const MAX_BW: u32 = 172;
    const ERRORS: std::ops::RangeInclusive<u32> = 231..=233;
    const POWER_STATE: u32 = 234;
    /// MB/s of an active link [inference: 900 GB/s of NVLink-C2C over the
    /// model's links and two directions; no capture prints it].
    const LINK_MBPS: u32 = 45_000;
    if !(id == COUNT || id == STATUS || id == MAX_BW || ERRORS.contains(&id) || id == POWER_STATE) {
        return Err(NOT_MINE);
    }
    let c2c = &g.c2c;
    if c2c.links() == 0 {
        return Err(NOT_SUPPORTED);
    }
    if id == COUNT {
        return Ok(U32(c2c.links()));
    }
    if scope >= c2c.links() {
        return Err(INVALID_ARGUMENT);
    }
    let active = c2c.active(scope);
    match id {
        STATUS => Ok(U32(u32::from(active))),
        // "C2C Link Speed in MBps for active links".
        MAX_BW if active => Ok(U32(LINK_MBPS)),
        MAX_BW => Err(NOT_SUPPORTED),
        // NVML_C2C_POWER_STATE_FULL_POWER (0); low power (1) is not modelled.
        POWER_STATE => Ok(U32(0)),
        _ => Ok(U64(c2c.errors[scope as usize][(id - 231) as usize])),
    }
}

/// ECC counters and retired pages.
fn ecc_field(g: &Gpu, id: u32) -> R<FieldValue> {
    use nvml_wrapper_sys::bindings::field_id::*;
    use FieldValue::{U32, U64};
    let m = &*g.model;
    let ecc = |et: usize, c: usize, loc: Option<usize>| -> R<FieldValue> {
        if !g.ecc_enabled() {
            return Err(NOT_SUPPORTED);
        }
        Ok(U64(match loc {
            Some(l) if g.ecc.locations[et] & (1 << l) == 0 => return Err(NOT_SUPPORTED),
            Some(l) => g.ecc.counts[et][c][l],
            None => g.ecc.total(et, c),
        }))
    };
    match id {
        NVML_FI_DEV_ECC_CURRENT | NVML_FI_DEV_ECC_PENDING => match g.settings.ecc {
            Some((current, pending)) => Ok(U32(u32::from(if id == NVML_FI_DEV_ECC_CURRENT {
                current
            } else {
                pending
            }))),
            None => Err(NOT_SUPPORTED),
        },
        NVML_FI_DEV_ECC_SBE_VOL_TOTAL => ecc(0, 0, None),
        NVML_FI_DEV_ECC_DBE_VOL_TOTAL => ecc(1, 0, None),
        NVML_FI_DEV_ECC_SBE_AGG_TOTAL => ecc(0, 1, None),
        NVML_FI_DEV_ECC_DBE_AGG_TOTAL => ecc(1, 1, None),
        NVML_FI_DEV_ECC_SBE_VOL_L1 => ecc(0, 0, Some(0)),
        NVML_FI_DEV_ECC_DBE_VOL_L1 => ecc(1, 0, Some(0)),
        NVML_FI_DEV_ECC_SBE_VOL_L2 => ecc(0, 0, Some(1)),
        NVML_FI_DEV_ECC_DBE_VOL_L2 => ecc(1, 0, Some(1)),
        NVML_FI_DEV_ECC_SBE_VOL_DEV => ecc(0, 0, Some(2)),
        NVML_FI_DEV_ECC_DBE_VOL_DEV => ecc(1, 0, Some(2)),
        NVML_FI_DEV_ECC_SBE_VOL_REG => ecc(0, 0, Some(3)),
        NVML_FI_DEV_ECC_DBE_VOL_REG => ecc(1, 0, Some(3)),
        NVML_FI_DEV_ECC_SBE_AGG_L1 => ecc(0, 1, Some(0)),
        NVML_FI_DEV_ECC_DBE_AGG_L1 => ecc(1, 1, Some(0)),
        NVML_FI_DEV_ECC_SBE_AGG_L2 => ecc(0, 1, Some(1)),
        NVML_FI_DEV_ECC_DBE_AGG_L2 => ecc(1, 1, Some(1)),
        NVML_FI_DEV_ECC_SBE_AGG_DEV => ecc(0, 1, Some(2)),
        NVML_FI_DEV_ECC_DBE_AGG_DEV => ecc(1, 1, Some(2)),
        NVML_FI_DEV_ECC_SBE_AGG_REG => ecc(0, 1, Some(3)),
        NVML_FI_DEV_ECC_DBE_AGG_REG => ecc(1, 1, Some(3)),
        NVML_FI_DEV_RETIRED_SBE | NVML_FI_DEV_RETIRED_DBE => {
            if !m.ecc.page_retirement || g.ecc.retired_unsupported {
                return Err(NOT_SUPPORTED);
            }
            let cause = u32::from(id != NVML_FI_DEV_RETIRED_SBE);
            Ok(U64(g
                .ecc
                .retired
                .iter()
                .filter(|p| p.cause as u32 == cause)
                .count() as u64))
        }
        NVML_FI_DEV_RETIRED_PENDING
        | NVML_FI_DEV_RETIRED_PENDING_SBE
        | NVML_FI_DEV_RETIRED_PENDING_DBE => {
            if m.ecc.page_retirement && !g.ecc.retired_unsupported {
                Ok(U32(g.ecc.retired_pending as u32))
            } else {
                Err(NOT_SUPPORTED)
            }
        }
        _ => Err(NOT_MINE),
    }
}

/// NVLink error counters: NVLink 1-4's DL counters (totals, legacy per-link
/// ids, per link in `scope`) and NVLink5's (per link in `scope`).
fn nvlink_error_field(g: &Gpu, id: u32, scope: u32) -> R<FieldValue> {
    use crate::fault::NvlinkCounter as C;
    use nvml_wrapper_sys::bindings::field_id::*;
    use FieldValue::U64;
    let m = &*g.model;
    let links = m.nvlink.links;
    let link_in = |lo: u32, hi: u32| link_in(id, lo, hi);
    // The DL counters (161-163 and the legacy ids) on NVLink 1-4; the
    // NVLink5 ones (213-222) on Blackwell, where nvml.h calls the others
    // "unsupported for Blackwell+" (12.8 header on).
    let nvl_err = |counter: C, link: Option<u32>| -> R<FieldValue> {
        if links == 0 || !counter.counted_by(m.nvlink5()) {
            return Err(NOT_SUPPORTED);
        }
        let counter = counter.index();
        match link {
            Some(l) if l < links => Ok(U64(g.nvlink_errors(l)[counter])),
            Some(_) => Err(NOT_SUPPORTED),
            None => Ok(U64((0..links).map(|l| g.nvlink_errors(l)[counter]).sum())),
        }
    };
    let count_scope = (scope != u32::MAX).then_some(scope);
    match id {
        NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL => nvl_err(C::CrcFlit, None),
        NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL => nvl_err(C::CrcData, None),
        NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL => nvl_err(C::Replay, None),
        NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL if !m.nvlink5() => nvl_err(C::Recovery, None),
        NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL => nvl_err(C::EccData, None),
        _ if link_in(
            NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
            NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6,
        )
        .is_some() =>
        {
            nvl_err(
                C::CrcFlit,
                link_in(
                    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
                    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6,
                ),
            )
        }
        _ if link_in(
            NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0,
            NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6,
        )
        .is_some() =>
        {
            nvl_err(
                C::CrcData,
                link_in(
                    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0,
                    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6,
                ),
            )
        }
        _ if link_in(
            NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0,
            NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6,
        )
        .is_some() =>
        {
            nvl_err(
                C::Replay,
                link_in(
                    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0,
                    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6,
                ),
            )
        }
        _ if !m.nvlink5()
            && link_in(
                NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0,
                NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6,
            )
            .is_some() =>
        {
            nvl_err(
                C::Recovery,
                link_in(
                    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0,
                    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6,
                ),
            )
        }
        _ if (NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0
            ..=NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L11)
            .contains(&id) =>
        {
            nvl_err(
                C::EccData,
                Some(id - NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0),
            )
        }
        NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY => nvl_err(C::Replay, Some(scope)),
        NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY if !m.nvlink5() => nvl_err(C::Recovery, Some(scope)),
        NVML_FI_DEV_NVLINK_ERROR_DL_CRC => nvl_err(C::CrcFlit, Some(scope)),
        // NVLink5, per link in scopeId (go-nvml 2a1f6c3:2670-2696): link
        // recovery successful, failed and either; errors left after FEC and
        // raw symbol errors; their bit error rates, packed. A scopeId of
        // UINT_MAX sums the counts over all links, as NVIDIA's DCGM asks
        // them for a GPU's total on Blackwell (DCGM 72fa3fe,
        // dcgmlib/src/DcgmCMUtils.cpp, NvmlFieldRequiresNvLinkAggregate).
        NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS if m.nvlink5() => {
            nvl_err(C::Recovery, count_scope)
        }
        NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS => {
            nvl_err(C::RecoveryFailed, count_scope)
        }
        NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS if m.nvlink5() => {
            let ok = nvl_err(C::Recovery, count_scope)?;
            let failed = nvl_err(C::RecoveryFailed, count_scope)?;
            match (ok, failed) {
                (U64(a), U64(b)) => Ok(U64(a + b)),
                _ => Err(NOT_SUPPORTED),
            }
        }
        NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS => nvl_err(C::Effective, count_scope),
        NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS => nvl_err(C::Symbol, count_scope),
        NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER | NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER => {
            let counter = if id == NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER {
                C::Effective
            } else {
                C::Symbol
            };
            match nvl_err(counter, Some(scope))? {
                U64(errors) => Ok(U64(packed_ber(errors))),
                _ => Err(NOT_SUPPORTED),
            }
        }
        _ => Err(NOT_MINE),
    }
}

/// NVLink speeds, link count, state, version and throughput.
fn nvlink_field(g: &Gpu, id: u32, scope: u32, t: f64) -> R<FieldValue> {
    use nvml_wrapper_sys::bindings::field_id::*;
    use FieldValue::{U32, U64};
    let m = &*g.model;
    let links = m.nvlink.links;
    let link_in = |lo: u32, hi: u32| link_in(id, lo, hi);
    match id {
        _ if (NVML_FI_DEV_NVLINK_SPEED_MBPS_L0..=NVML_FI_DEV_NVLINK_SPEED_MBPS_L5)
            .contains(&id)
            || (NVML_FI_DEV_NVLINK_SPEED_MBPS_L6..=NVML_FI_DEV_NVLINK_SPEED_MBPS_L11)
                .contains(&id) =>
        {
            let link = link_in(
                NVML_FI_DEV_NVLINK_SPEED_MBPS_L0,
                NVML_FI_DEV_NVLINK_SPEED_MBPS_L6,
            )
            .unwrap_or(0);
            if links == 0 || link >= links {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(m.nvlink.speed_mbps))
            }
        }
        NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON => {
            if links == 0 {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(m.nvlink.speed_mbps))
            }
        }
        NVML_FI_DEV_NVLINK_LINK_COUNT => {
            if links == 0 {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(links))
            }
        }
        NVML_FI_DEV_NVLINK_GET_SPEED => {
            if links == 0 || scope >= links {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(m.nvlink.speed_mbps))
            }
        }
        NVML_FI_DEV_NVLINK_GET_STATE => {
            if links == 0 || scope >= links {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(u32::from(g.nvlink.active(scope))))
            }
        }
        NVML_FI_DEV_NVLINK_GET_VERSION => {
            if links == 0 || scope >= links {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(m.nvlink.version))
            }
        }
        NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT => {
            if links == 0 {
                Err(NOT_SUPPORTED)
            } else {
                Ok(U32(links))
            }
        }
        // NVML header: "Link ID needs to be specified in the scopeId field";
        // UINT_MAX returns the sum over all links. Counters are in KiB.
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX..=NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX => {
            if links == 0 {
                return Err(NOT_SUPPORTED);
            }
            let pick = |l: u32| {
                let (tx, rx) = g.nvlink_kib(l, t);
                let raw = |v: u64| v + v / 16;
                match id {
                    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX => tx,
                    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX => rx,
                    NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX => raw(tx),
                    _ => raw(rx),
                }
            };
            if scope == u32::MAX {
                Ok(U64((0..links).map(pick).sum()))
            } else if scope < links {
                Ok(U64(pick(scope)))
            } else {
                Err(INVALID_ARGUMENT)
            }
        }
        _ => Err(NOT_MINE),
    }
}

/// Throttle time, memory temperature, energy, power by scope and limits, and
/// T.Limit margins.
fn power_field(g: &Gpu, id: u32, scope: u32, t: f64) -> R<FieldValue> {
    use nvml_wrapper_sys::bindings::field_id::*;
    use FieldValue::{I32, U32, U64};
    let m = &*g.model;
    match id {
        NVML_FI_DEV_PERF_POLICY_POWER..=NVML_FI_DEV_PERF_POLICY_RELIABILITY => Ok(U64(g
            .throttle
            .violation_ns((id - NVML_FI_DEV_PERF_POLICY_POWER) as usize, t))),
        NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS | NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS => {
            Ok(U64((0..6).map(|p| g.throttle.violation_ns(p, t)).sum()))
        }
        NVML_FI_DEV_MEMORY_TEMP => g.memory_temperature(t).map(U32).ok_or(NOT_SUPPORTED),
        NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION | NVML_FI_DEV_ENERGY => {
            Ok(U64(g.power.energy_mj as u64))
        }
        // scopeId: NVML_POWER_SCOPE_GPU (0), _MODULE (1), _MEMORY (2).
        NVML_FI_DEV_POWER_INSTANT | NVML_FI_DEV_POWER_AVERAGE => match scope {
            0 if crate::fleet::unsupported(&g.readings.power_mw) => Err(NOT_SUPPORTED),
            0 => Ok(U32(g.power_mw(t).round() as u32)),
            1 | 2 => g.scope_power_mw(scope, t).map(U32).ok_or(NOT_SUPPORTED),
            _ => Err(INVALID_ARGUMENT),
        },
        NVML_FI_DEV_POWER_MIN_LIMIT
        | NVML_FI_DEV_POWER_MAX_LIMIT
        | NVML_FI_DEV_POWER_DEFAULT_LIMIT
        | NVML_FI_DEV_POWER_CURRENT_LIMIT
        | NVML_FI_DEV_POWER_REQUESTED_LIMIT => {
            let limits = match scope {
                0 => crate::model::PowerLimits {
                    default_mw: m.power.default_mw,
                    min_mw: m.power.min_mw,
                    max_mw: m.power.max_mw,
                },
                1 => m.power.module.and_then(|s| s.limits).ok_or(NOT_SUPPORTED)?,
                2 => m.power.memory.and_then(|s| s.limits).ok_or(NOT_SUPPORTED)?,
                _ => return Err(INVALID_ARGUMENT),
            };
            Ok(U32(match id {
                NVML_FI_DEV_POWER_MIN_LIMIT => limits.min_mw,
                NVML_FI_DEV_POWER_MAX_LIMIT => limits.max_mw,
                NVML_FI_DEV_POWER_DEFAULT_LIMIT => limits.default_mw,
                _ if scope == 0 => g.power_limit_mw(),
                _ => limits.default_mw,
            }))
        }
        // Signed T.Limit margins below the maximum operating temperature
        // (nvidia-smi on Hopper: shutdown -8, slowdown -2, max operating 0);
        // boards before Ada have none (the A100 capture prints N/A).
        NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT => {
            m.thermal.tlimit_margins[0].map(I32).ok_or(NOT_SUPPORTED)
        }
        NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT => {
            m.thermal.tlimit_margins[1].map(I32).ok_or(NOT_SUPPORTED)
        }
        NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT => {
            m.thermal.tlimit_margins[2].map(I32).ok_or(NOT_SUPPORTED)
        }
        NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT => {
            m.thermal.tlimit_margins[3].map(I32).ok_or(NOT_SUPPORTED)
        }
        _ => Err(NOT_MINE),
    }
}

/// Remapped rows, PCIe counters, MIG capabilities and the recovery action.
fn other_field(g: &Gpu, id: u32, t: f64) -> R<FieldValue> {
    use nvml_wrapper_sys::bindings::field_id::*;
    use FieldValue::{U32, U64};
    let m = &*g.model;
    match id {
        NVML_FI_DEV_REMAPPED_COR
        | NVML_FI_DEV_REMAPPED_UNC
        | NVML_FI_DEV_REMAPPED_PENDING
        | NVML_FI_DEV_REMAPPED_FAILURE => {
            // Not supported on a GPU in MIG mode, like nvmlDeviceGetRemappedRows.
            if !g.remaps_rows() {
                return Err(NOT_SUPPORTED);
            }
            Ok(U32(match id {
                NVML_FI_DEV_REMAPPED_COR => g.ecc.remap_corr,
                NVML_FI_DEV_REMAPPED_UNC => g.ecc.remap_unc,
                NVML_FI_DEV_REMAPPED_PENDING => g.ecc.remap_pending as u32,
                _ => g.ecc.remap_failure as u32,
            }))
        }
        NVML_FI_DEV_PCIE_REPLAY_COUNTER => g.pcie.replay.map(U32).ok_or(NOT_SUPPORTED),
        NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER => Ok(U32(0)),
        NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER => Ok(U32(g.index % 2)),
        NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS..=NVML_FI_DEV_PCIE_COUNT_LANE_ERROR => Ok(U32(0)),
        NVML_FI_DEV_PCIE_COUNT_TX_BYTES => Ok(U64(g.pcie_bytes(t).0)),
        NVML_FI_DEV_PCIE_COUNT_RX_BYTES => Ok(U64(g.pcie_bytes(t).1)),
        NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED => Ok(U32(0)),
        NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE => Ok(U32(m.mig_capable() as u32)),
        // nvmlGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset.
        NVML_FI_DEV_GET_GPU_RECOVERY_ACTION => {
            let pending = g.ecc.remap_pending || g.ecc.retired_pending;
            match g.ecc.recovery_action {
                None => Ok(U32(u32::from(pending))),
                Some(crate::value::Val::NotSupported) => Err(NOT_SUPPORTED),
                // As captured, until a fault makes a reset pending.
                Some(crate::value::Val::Is(a)) => {
                    Ok(U32(if pending && !g.ecc.reset_pending_at_start {
                        a.max(1)
                    } else {
                        a
                    }))
                }
            }
        }
        NVML_FI_DEV_RESET_STATUS | NVML_FI_DEV_DRAIN_AND_RESET_STATUS => {
            Ok(U32((g.ecc.remap_pending || g.ecc.retired_pending) as u32))
        }
        _ => Err(NOT_MINE),
    }
}

/// Legacy per-link ids: L0..L5 then L6..L11 live in separate ranges.
fn link_in(id: u32, base_lo: u32, base_hi: u32) -> Option<u32> {
    if (base_lo..base_lo + 6).contains(&id) {
        Some(id - base_lo)
    } else if (base_hi..base_hi + 6).contains(&id) {
        Some(id - base_hi + 6)
    } else {
        None
    }
}

/// A bit error rate as fields 220 and 222 pack it: "Bit [0:7]: BER
/// Exponent value, Bit [8:11]: BER MANTISSA value" (go-nvml 9da9e13,
/// `NVML_NVLINK_ERROR_COUNTER_BER_GET`), mantissa x 10^-exponent. A link
/// without errors reports the floor 15e-255 (0xFFF); each error raises the
/// rate by a decade from 1e-15 (the simulator's own scale: NVIDIA does not
/// say how the driver estimates it).
fn packed_ber(errors: u64) -> u64 {
    if errors == 0 {
        return 0xFFF;
    }
    let exponent = 15u64.saturating_sub(errors.ilog10() as u64 + 1).max(1);
    (1 << 8) | exponent
}

/// What one entry answers: what a capture recorded for the id in this
/// scope, in the type the id answers, else the model's value. A scopeId of
/// UINT_MAX on a per-link id whose links a capture recorded is the sum of
/// those links' answers, as the driver sums what it reports per link: a
/// replay serves no total its capture does not imply, and the total of a
/// replay's capture is the replay's.
fn entry_value(
    g: &Gpu,
    driver: &crate::personality::Personality,
    id: u32,
    scope: u32,
    t: f64,
) -> R<FieldValue> {
    if let Some(p) = g.field_pins.iter().find(|p| p.id == id && p.scope == scope) {
        return p
            .answer
            .map(|v| match field_value(g, driver, id, scope, t) {
                Ok(FieldValue::U32(_)) => FieldValue::U32(v as u32),
                Ok(FieldValue::I32(_)) => FieldValue::I32(v as i32),
                _ if v < 0 => FieldValue::I32(v as i32),
                _ => FieldValue::U64(v as u64),
            });
    }
    let per_link_pinned = g
        .field_pins
        .iter()
        .any(|p| p.id == id && p.scope != u32::MAX);
    if scope == u32::MAX && per_link_pinned {
        if let Ok(FieldValue::U64(_)) = field_value(g, driver, id, scope, t) {
            let mut sum = 0u64;
            for link in 0..g.model.nvlink.links {
                match entry_value(g, driver, id, link, t)? {
                    FieldValue::U64(v) => sum = sum.wrapping_add(v),
                    FieldValue::U32(v) => sum = sum.wrapping_add(u64::from(v)),
                    FieldValue::I32(_) => return Err(NOT_SUPPORTED),
                }
            }
            return Ok(FieldValue::U64(sum));
        }
    }
    field_value(g, driver, id, scope, t)
}

nvml_fn! {
    /// Each entry gets its own nvmlReturn; the call succeeds as a whole.
    fn nvmlDeviceGetFieldValues(device: nvmlDevice_t, valuesCount: c_int, values: *mut nvmlFieldValue_t) {
        if valuesCount <= 0 || values.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let entries = std::slice::from_raw_parts_mut(values, valuesCount as usize);
        // A batch costs a real driver by its fields (latency.rs).
        crate::latency::batch(entries.iter().map(|e| e.fieldId));
        let driver = crate::driver::current();
        with_gpu(device, |g, t| {
            let ts = now_us() as i64;
            for e in entries.iter_mut() {
                e.timestamp = ts;
                e.latencyUsec = 0;
                let value = entry_value(g, &driver, e.fieldId, e.scopeId, t);
                match value {
                    Ok(FieldValue::U32(v)) => {
                        e.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
                        e.value = nvmlValue_t { ullVal: 0 };
                        e.value.uiVal = v;
                        e.nvmlReturn = SUCCESS;
                    }
                    Ok(FieldValue::I32(v)) => {
                        e.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT;
                        e.value = nvmlValue_t { ullVal: 0 };
                        e.value.siVal = v;
                        e.nvmlReturn = SUCCESS;
                    }
                    Ok(FieldValue::U64(v)) => {
                        e.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                        e.value = nvmlValue_t { ullVal: v };
                        e.nvmlReturn = SUCCESS;
                    }
                    Err(code) => {
                        e.nvmlReturn = code;
                        e.value = nvmlValue_t { ullVal: 0 };
                    }
                }
            }
            Ok(())
        })
    }
}
