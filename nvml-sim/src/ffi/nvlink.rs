//! NVLink state and error counters (NVML reference, "NvLink Methods").

use super::*;
use crate::fleet::Gpu;
use std::ffi::c_ulonglong;

fn nvlink_gpu<T>(device: nvmlDevice_t, link: u32, f: impl FnOnce(&Gpu, f64) -> R<T>) -> R<T> {
    with_gpu(device, |g, t| {
        if g.model.nvlink.links == 0 {
            Err(NOT_SUPPORTED)
        } else if link >= g.model.nvlink.links {
            Err(INVALID_ARGUMENT)
        } else {
            f(g, t)
        }
    })
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkState(device: nvmlDevice_t, link: c_uint, isActive: *mut nvmlEnableState_t) {
        nonnull(isActive)?;
        let active = nvlink_gpu(device, link, |g, _| Ok(g.nvlink.active(link)))?;
        out(isActive, u32::from(active))
    }
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkErrorCounter(device: nvmlDevice_t, link: c_uint, counter: nvmlNvLinkErrorCounter_t, counterValue: *mut c_ulonglong) {
        nonnull(counterValue)?;
        if counter > 4 {
            return Err(INVALID_ARGUMENT);
        }
        // The DL counters: NVLink5 (Blackwell) has none (nvml.h 12.8 on:
        // "unsupported for Blackwell+"; the call is assumed to answer as the
        // fields do).
        let v = nvlink_gpu(device, link, |g, _| {
            if g.model.nvlink5() {
                Err(NOT_SUPPORTED)
            } else {
                Ok(g.nvlink_errors(link)[counter as usize])
            }
        })?;
        out(counterValue, v)
    }
}
