//! ECC mode and error counters, retired pages and remapped rows (NVML
//! reference, "Device Queries" and "Page Retirement").

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
        let v = ecc_gpu(device, |g| Ok(g.ecc_total(errorType as usize, counterType as usize)))?;
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
            if g.ecc_locations[errorType as usize] & (1 << locationType) == 0 {
                return Err(NOT_SUPPORTED);
            }
            Ok(g.ecc[errorType as usize][counterType as usize][locationType as usize])
        })?;
        out(count, v)
    }
}

fn retired_gpu<T>(device: nvmlDevice_t, f: impl FnOnce(&Gpu) -> R<T>) -> R<T> {
    // Ampere and newer replaced page retirement with row remapping.
    with_gpu(device, |g, _| {
        if g.model.ecc.page_retirement && !g.retired_unsupported {
            f(g)
        } else {
            Err(NOT_SUPPORTED)
        }
    })
}

unsafe fn retired_pages(
    device: nvmlDevice_t,
    cause: u32,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> R {
    nonnull(page_count)?;
    if cause > 1 {
        return Err(INVALID_ARGUMENT);
    }
    let pages = retired_gpu(device, |g| {
        Ok(g.retired
            .iter()
            .filter(|p| p.cause as u32 == cause)
            .map(|p| (p.address, p.timestamp_us))
            .collect::<Vec<_>>())
    })?;
    let cap = *page_count as usize;
    *page_count = pages.len() as u32;
    if pages.is_empty() {
        return Ok(());
    }
    if cap < pages.len() || addresses.is_null() {
        return Err(INSUFFICIENT_SIZE);
    }
    for (i, (a, ts)) in pages.into_iter().enumerate() {
        addresses.add(i).write(a);
        if !timestamps.is_null() {
            timestamps.add(i).write(ts);
        }
    }
    Ok(())
}

nvml_fn! {
    fn nvmlDeviceGetRetiredPages(device: nvmlDevice_t, cause: nvmlPageRetirementCause_t, pageCount: *mut c_uint, addresses: *mut c_ulonglong) {
        retired_pages(device, cause, pageCount, addresses, std::ptr::null_mut())
    }
}

nvml_fn! {
    fn nvmlDeviceGetRetiredPages_v2(device: nvmlDevice_t, cause: nvmlPageRetirementCause_t, pageCount: *mut c_uint, addresses: *mut c_ulonglong, timestamps: *mut c_ulonglong) {
        retired_pages(device, cause, pageCount, addresses, timestamps)
    }
}

nvml_fn! {
    fn nvmlDeviceGetRetiredPagesPendingStatus(device: nvmlDevice_t, isPending: *mut nvmlEnableState_t) {
        nonnull(isPending)?;
        let v = retired_gpu(device, |g| Ok(g.retired_pending as u32))?;
        out(isPending, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetRemappedRows(device: nvmlDevice_t, corrRows: *mut c_uint, uncRows: *mut c_uint, isPending: *mut c_uint, failureOccurred: *mut c_uint) {
        nonnull(corrRows)?;
        nonnull(uncRows)?;
        nonnull(isPending)?;
        nonnull(failureOccurred)?;
        // NVML does not report remapped rows on a GPU in MIG mode (issue 16's
        // blind spot): NOT_SUPPORTED there, as on boards without remapping.
        let v = with_gpu(device, |g, _| {
            if g.remaps_rows() {
                Ok((g.remap_corr, g.remap_unc, g.remap_pending as u32, g.remap_failure as u32))
            } else {
                Err(NOT_SUPPORTED)
            }
        })?;
        out(corrRows, v.0)?;
        out(uncRows, v.1)?;
        out(isPending, v.2)?;
        out(failureOccurred, v.3)
    }
}

nvml_fn! {
    /// Not supported on a GPU in MIG mode, like `nvmlDeviceGetRemappedRows`
    /// there (issue 16's blind spot).
    fn nvmlDeviceGetRowRemapperHistogram(device: nvmlDevice_t, values: *mut nvmlRowRemapperHistogramValues_t) {
        nonnull(values)?;
        let [max, high, partial, low, none] = with_gpu(device, |g, _| {
            if g.remaps_rows() {
                Ok(g.remapper_histogram())
            } else {
                Err(NOT_SUPPORTED)
            }
        })?;
        out(values, nvmlRowRemapperHistogramValues_t { max, high, partial, low, none })
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
        let (c, exceeded) = ecc_gpu(device, |g| {
            if g.model.ecc.row_remapping {
                Ok((g.sram, g.sram_threshold_exceeded))
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
        v.bThresholdExceeded = u32::from(exceeded);
        out(status, v)
    }
}
