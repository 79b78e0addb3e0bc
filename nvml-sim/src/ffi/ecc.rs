//! ECC mode, error counters and SRAM error status (NVML reference, "Device
//! Queries"); retired pages and remapped rows are `retirement.rs`.

use super::*;
use crate::fleet::Gpu;
use std::ffi::c_ulonglong;

/// Runs `f` on a GPU whose ECC is on: counters are NOT_SUPPORTED on
/// boards without ECC and while ECC is disabled (the RTX A5000 capture
/// prints N/A for every counter with ECC off).
fn ecc_gpu<T>(device: nvmlDevice_t, f: impl FnOnce(&Gpu) -> R<T>) -> R<T> {
    with_gpu(device, |g, _| match g.settings.ecc {
        Some((true, _)) => f(g),
        _ => Err(NOT_SUPPORTED),
    })
}

nvml_fn! {
    fn nvmlDeviceGetEccMode(device: nvmlDevice_t, current: *mut nvmlEnableState_t, pending: *mut nvmlEnableState_t) {
        nonnull(current)?;
        nonnull(pending)?;
        let (c, p) = with_gpu(device, |g, _| g.settings.ecc.ok_or(NOT_SUPPORTED))?;
        out(current, u32::from(c))?;
        out(pending, u32::from(p))
    }
}

nvml_fn! {
    fn nvmlDeviceGetDefaultEccMode(device: nvmlDevice_t, defaultMode: *mut nvmlEnableState_t) {
        nonnull(defaultMode)?;
        let v = with_gpu(device, |g, _| if g.model.ecc.supported { Ok(u32::from(g.model.ecc.default)) } else { Err(NOT_SUPPORTED) })?;
        out(defaultMode, v)
    }
}

fn check_ecc_args(error_type: u32, counter: u32) -> R {
    if error_type > 1 || counter > 1 {
        Err(INVALID_ARGUMENT)
    } else {
        Ok(())
    }
}

nvml_fn! {
    fn nvmlDeviceGetTotalEccErrors(device: nvmlDevice_t, errorType: nvmlMemoryErrorType_t, counterType: nvmlEccCounterType_t, eccCounts: *mut c_ulonglong) {
        nonnull(eccCounts)?;
        check_ecc_args(errorType, counterType)?;
        let v = ecc_gpu(device, |g| Ok(g.ecc.total(errorType as usize, counterType as usize)))?;
        out(eccCounts, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMemoryErrorCounter(device: nvmlDevice_t, errorType: nvmlMemoryErrorType_t, counterType: nvmlEccCounterType_t, locationType: nvmlMemoryLocation_t, count: *mut c_ulonglong) {
        nonnull(count)?;
        check_ecc_args(errorType, counterType)?;
        if locationType >= 8 {
            return Err(INVALID_ARGUMENT);
        }
        let v = ecc_gpu(device, |g| {
            if g.ecc.locations[errorType as usize] & (1 << locationType) == 0 {
                return Err(NOT_SUPPORTED);
            }
            Ok(g.ecc.counts[errorType as usize][counterType as usize][locationType as usize])
        })?;
        out(count, v)
    }
}

nvml_fn! {
    /// The SRAM counters are the scenario's (`counters.sram`), zero by
    /// default; only the RMA flag moves (fault `sram-threshold`).
    fn nvmlDeviceGetSramEccErrorStatus(device: nvmlDevice_t, status: *mut nvmlEccSramErrorStatus_t) {
        nonnull(status)?;
        let version = (*status).version;
        if version != struct_version::<nvmlEccSramErrorStatus_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        let c = ecc_gpu(device, |g| {
            if g.model.ecc.row_remapping {
                Ok(g.ecc.sram)
            } else {
                Err(NOT_SUPPORTED)
            }
        })?;
        let mut v: nvmlEccSramErrorStatus_v1_t = std::mem::zeroed();
        v.version = version;
        v.aggregateUncParity = c.aggregate_uncorrected_parity;
        v.aggregateUncSecDed = c.aggregate_uncorrected_secded;
        v.aggregateCor = c.aggregate_corrected;
        v.volatileUncParity = c.volatile_uncorrected_parity;
        v.volatileUncSecDed = c.volatile_uncorrected_secded;
        v.volatileCor = c.volatile_corrected;
        v.aggregateUncBucketL2 = c.l2;
        v.aggregateUncBucketSm = c.sm;
        v.aggregateUncBucketPcie = c.pcie;
        v.aggregateUncBucketMcu = c.microcontroller;
        v.aggregateUncBucketOther = c.other;
        v.bThresholdExceeded = u32::from(c.threshold_exceeded);
        out(status, v)
    }
}
