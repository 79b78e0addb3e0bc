//! Persistence, display and compute mode (NVML reference, "Device Queries"),
//! and vGPU software licensing ("vGPU Management"), which the exporter reads
//! with the modes: what DCGM reads for `DCGM_FI_DEV_VGPU_LICENSE_STATUS`.

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

nvml_fn! {
    /// Whether the system supports vGPU software licensing and, where it
    /// does, its licensable features (`nvmlGridLicensableFeatures_t`, no
    /// struct version; the unversioned name is this `_v4` in nvml.h).
    /// nvml.h (R535 to R610) lists SUCCESS, INVALID_ARGUMENT and UNKNOWN
    /// only: a GPU without vGPU software answers SUCCESS with
    /// `isGridLicenseSupported` 0 and no feature. That is what DCGM turns
    /// into 0 (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe,
    /// case DCGM_FI_DEV_VGPU_LICENSE_STATUS: an error is a blank, which
    /// dcgm-exporter drops) and what dcgm-exporter's users see on
    /// bare-metal GPUs (`DCGM_FI_DEV_VGPU_LICENSE_STATUS 0` in the output
    /// lists of NVIDIA/dcgm-exporter #646). A pass-through VM runs the
    /// bare-metal driver and answers the same. A vGPU guest supports
    /// licensing and lists the vGPU feature, licensed (nvml.h:
    /// `featureState` non-zero "if feature is currently licensed"); an
    /// unlicensed guest is not modelled. A hypervisor host's answer is not
    /// known here: NOT_SUPPORTED, rather than a made-up licence state.
    fn nvmlDeviceGetGridLicensableFeatures_v4(device: nvmlDevice_t, pGridLicensableFeatures: *mut nvmlGridLicensableFeatures_t) {
        nonnull(pGridLicensableFeatures)?;
        let mode = with_gpu(device, |g, _| Ok(g.settings.virtualization_mode.get()))?;
        let bare = [
            nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_NONE,
            nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
        ];
        let guest = mode == Some(nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_VGPU);
        if !guest && mode.is_some_and(|m| !bare.contains(&m)) {
            return Err(NOT_SUPPORTED);
        }
        // SAFETY: plain old data; all zeros is "unsupported, no feature".
        let mut v: nvmlGridLicensableFeatures_t = unsafe { std::mem::zeroed() };
        if guest {
            v.isGridLicenseSupported = 1;
            v.licensableFeaturesCount = 1;
            let f = &mut v.gridLicensableFeatures[0];
            f.featureCode = nvmlGridLicenseFeatureCode_t_NVML_GRID_LICENSE_FEATURE_CODE_VGPU;
            f.featureState = 1;
            f.featureEnabled = 1;
        }
        out(pGridLicensableFeatures, v)
    }
}
