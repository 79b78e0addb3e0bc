//! Retired pages and remapped rows (NVML reference, "Page Retirement" and
//! "Device Queries").

use super::*;
use crate::fleet::Gpu;
use std::ffi::c_ulonglong;

fn retired_gpu<T>(device: nvmlDevice_t, f: impl FnOnce(&Gpu) -> R<T>) -> R<T> {
    // Ampere and newer replaced page retirement with row remapping.
    with_gpu(device, |g, _| {
        if g.model.ecc.page_retirement && !g.ecc.retired_unsupported {
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
        Ok(g.ecc
            .retired
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
        let v = retired_gpu(device, |g| Ok(g.ecc.retired_pending as u32))?;
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
                Ok((g.ecc.remap_corr, g.ecc.remap_unc, g.ecc.remap_pending as u32, g.ecc.remap_failure as u32))
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
