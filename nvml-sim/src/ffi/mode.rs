//! Persistence, display and compute mode (NVML reference, "Device Queries").

use super::*;

nvml_fn! {
    fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, mode: *mut nvmlEnableState_t) {
        nonnull(mode)?;
        let v = with_gpu(device, |g, _| Ok(g.persistence as u32))?;
        out(mode, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDisplayActive(device: nvmlDevice_t, isActive: *mut nvmlEnableState_t) {
        nonnull(isActive)?;
        let v = with_gpu(device, |g, _| Ok(g.display as u32))?;
        out(isActive, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDisplayMode(device: nvmlDevice_t, display: *mut nvmlEnableState_t) {
        nonnull(display)?;
        let v = with_gpu(device, |g, _| Ok(g.display as u32))?;
        out(display, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut nvmlComputeMode_t) {
        nonnull(mode)?;
        with_gpu(device, |_, _| Ok(()))?;
        out(mode, nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT)
    }
}
