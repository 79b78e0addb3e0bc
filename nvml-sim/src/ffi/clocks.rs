//! Clocks and P-state (NVML reference, "Device Queries"); the clock event
//! (throttle) reasons and violation time are `throttle.rs`.

use super::*;

nvml_fn! {
    fn nvmlDeviceGetClockInfo(device: nvmlDevice_t, type_: nvmlClockType_t, clock: *mut c_uint) {
        nonnull(clock)?;
        if type_ > 3 {
            return Err(INVALID_ARGUMENT);
        }
        let v = with_gpu(device, |g, t| g.clock(type_, t).ok_or(NOT_SUPPORTED))?;
        out(clock, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, type_: nvmlClockType_t, clock: *mut c_uint) {
        nonnull(clock)?;
        let v = with_gpu(device, |g, _| g.max_clock(type_).ok_or(INVALID_ARGUMENT))?;
        out(clock, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetClock(device: nvmlDevice_t, clockType: nvmlClockType_t, clockId: nvmlClockId_t, clockMHz: *mut c_uint) {
        nonnull(clockMHz)?;
        let v = with_gpu(device, |g, t| match clockId {
            0 if clockType <= 3 => g.clock(clockType, t).ok_or(NOT_SUPPORTED),
            0 => Err(INVALID_ARGUMENT),
            1..=3 => g.max_clock(clockType).ok_or(INVALID_ARGUMENT),
            _ => Err(INVALID_ARGUMENT),
        })?;
        out(clockMHz, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetApplicationsClock(device: nvmlDevice_t, clockType: nvmlClockType_t, clockMHz: *mut c_uint) {
        nonnull(clockMHz)?;
        let v = with_gpu(device, |g, _| g.max_clock(clockType).ok_or(INVALID_ARGUMENT))?;
        out(clockMHz, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDefaultApplicationsClock(device: nvmlDevice_t, clockType: nvmlClockType_t, clockMHz: *mut c_uint) {
        nonnull(clockMHz)?;
        let v = with_gpu(device, |g, _| g.max_clock(clockType).ok_or(INVALID_ARGUMENT))?;
        out(clockMHz, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMaxCustomerBoostClock(device: nvmlDevice_t, clockType: nvmlClockType_t, clockMHz: *mut c_uint) {
        nonnull(clockMHz)?;
        let v = with_gpu(device, |g, _| g.max_clock(clockType).ok_or(INVALID_ARGUMENT))?;
        out(clockMHz, v)
    }
}

nvml_fn! {
    /// Idle GPUs drop to P8; busy ones run at P0 (MIG-enabled GPUs stay at P0).
    fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pState: *mut nvmlPstates_t) {
        nonnull(pState)?;
        let v = with_gpu(device, |g, t| Ok(g.pstate(t)))?;
        out(pState, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPowerState(device: nvmlDevice_t, pState: *mut nvmlPstates_t) {
        nonnull(pState)?;
        let v = with_gpu(device, |g, t| Ok(g.pstate(t)))?;
        out(pState, v)
    }
}
