//! Persistence, display and compute mode (NVML reference, "Device Queries").

use super::*;

nvml_fn! {
    fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, mode: *mut nvmlEnableState_t) {
        nonnull(mode)?;
        let v = with_gpu(device, |g, _| g.settings.persistence.get().map(u32::from).ok_or(NOT_SUPPORTED))?;
        out(mode, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDisplayActive(device: nvmlDevice_t, isActive: *mut nvmlEnableState_t) {
        nonnull(isActive)?;
        let v = with_gpu(device, |g, _| g.settings.display_active.get().map(u32::from).ok_or(NOT_SUPPORTED))?;
        out(isActive, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDisplayMode(device: nvmlDevice_t, display: *mut nvmlEnableState_t) {
        nonnull(display)?;
        let v = with_gpu(device, |g, _| g.settings.display_mode.get().map(u32::from).ok_or(NOT_SUPPORTED))?;
        out(display, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut nvmlComputeMode_t) {
        nonnull(mode)?;
        let v = with_gpu(device, |g, _| g.settings.compute_mode.get().ok_or(NOT_SUPPORTED))?;
        out(mode, v)
    }
}

nvml_fn! {
    /// `nvmlGpuVirtualizationMode_t`: none on bare metal, pass-through in
    /// a VM that owns the GPU, vGPU in a guest of a shared one.
    fn nvmlDeviceGetVirtualizationMode(device: nvmlDevice_t, pVirtualMode: *mut nvmlGpuVirtualizationMode_t) {
        nonnull(pVirtualMode)?;
        let v = with_gpu(device, |g, _| g.settings.virtualization_mode.get().ok_or(NOT_SUPPORTED))?;
        out(pVirtualMode, v)
    }
}
