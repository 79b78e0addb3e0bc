//! Fans (NVML reference, "Device Queries").

use super::*;

nvml_fn! {
    fn nvmlDeviceGetNumFans(device: nvmlDevice_t, numFans: *mut c_uint) {
        nonnull(numFans)?;
        let v = with_gpu(device, |g, _| Ok(g.model.thermal.fans))?;
        out(numFans, v)
    }
}

nvml_fn! {
    /// Passively cooled boards have no fan to report (nvidia-smi shows N/A).
    fn nvmlDeviceGetFanSpeed(device: nvmlDevice_t, speed: *mut c_uint) {
        nonnull(speed)?;
        let v = with_gpu(device, |g, t| if g.model.thermal.fans == 0 { Err(NOT_SUPPORTED) } else { g.fan_percent(0, t).ok_or(NOT_SUPPORTED) })?;
        out(speed, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, speed: *mut c_uint) {
        nonnull(speed)?;
        let v = with_gpu(device, |g, t| {
            if g.model.thermal.fans == 0 {
                Err(NOT_SUPPORTED)
            } else if fan >= g.model.thermal.fans {
                Err(INVALID_ARGUMENT)
            } else {
                g.fan_percent(fan, t).ok_or(NOT_SUPPORTED)
            }
        })?;
        out(speed, v)
    }
}
