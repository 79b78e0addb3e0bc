//! Power draw, limits and energy (NVML reference, "Device Queries").

use super::*;
use std::ffi::c_ulonglong;

nvml_fn! {
    fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) {
        nonnull(power)?;
        let v = with_gpu(device, |g, t| {
            if crate::fleet::unsupported(&g.readings.power_mw) {
                return Err(NOT_SUPPORTED);
            }
            Ok(g.power_mw(t).round() as u32)
        })?;
        out(power, v)
    }
}

nvml_fn! {
    /// mJ since the driver loaded; here since the first nvmlInit.
    fn nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, energy: *mut c_ulonglong) {
        nonnull(energy)?;
        let v = with_gpu(device, |g, _| Ok(g.power.energy_mj as u64))?;
        out(energy, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPowerManagementMode(device: nvmlDevice_t, mode: *mut nvmlEnableState_t) {
        nonnull(mode)?;
        with_gpu(device, |_, _| Ok(()))?;
        out(mode, nvmlEnableState_enum_NVML_FEATURE_ENABLED)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        nonnull(limit)?;
        let v = with_gpu(device, |g, _| Ok(g.power_limit_mw()))?;
        out(limit, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPowerManagementDefaultLimit(device: nvmlDevice_t, defaultLimit: *mut c_uint) {
        nonnull(defaultLimit)?;
        let v = with_gpu(device, |g, _| Ok(g.model.power.default_mw))?;
        out(defaultLimit, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPowerManagementLimitConstraints(device: nvmlDevice_t, minLimit: *mut c_uint, maxLimit: *mut c_uint) {
        nonnull(minLimit)?;
        nonnull(maxLimit)?;
        let (a, b) = with_gpu(device, |g, _| Ok((g.model.power.min_mw, g.model.power.max_mw)))?;
        out(minLimit, a)?;
        out(maxLimit, b)
    }
}

nvml_fn! {
    fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        nonnull(limit)?;
        let v = with_gpu(device, |g, _| Ok(g.enforced_power_limit_mw()))?;
        out(limit, v)
    }
}
