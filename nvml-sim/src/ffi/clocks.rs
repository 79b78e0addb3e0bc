//! Clocks, P-state, clock event (throttle) reasons and violation time
//! (NVML reference, "Device Queries").

use super::*;
use crate::fleet::now_us;
use std::ffi::c_ulonglong;

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

nvml_fn! {
    fn nvmlDeviceGetCurrentClocksEventReasons(device: nvmlDevice_t, clocksEventReasons: *mut c_ulonglong) {
        nonnull(clocksEventReasons)?;
        let v = with_gpu(device, |g, t| Ok(g.clock_event_reasons(t)))?;
        out(clocksEventReasons, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetCurrentClocksThrottleReasons(device: nvmlDevice_t, clocksThrottleReasons: *mut c_ulonglong) {
        nonnull(clocksThrottleReasons)?;
        let v = with_gpu(device, |g, t| Ok(g.clock_event_reasons(t)))?;
        out(clocksThrottleReasons, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetSupportedClocksEventReasons(device: nvmlDevice_t, supportedClocksEventReasons: *mut c_ulonglong) {
        nonnull(supportedClocksEventReasons)?;
        let v = with_gpu(device, |g, _| Ok(g.supported_reasons))?;
        out(supportedClocksEventReasons, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetSupportedClocksThrottleReasons(device: nvmlDevice_t, supportedClocksThrottleReasons: *mut c_ulonglong) {
        nonnull(supportedClocksThrottleReasons)?;
        let v = with_gpu(device, |g, _| Ok(g.supported_reasons))?;
        out(supportedClocksThrottleReasons, v)
    }
}

nvml_fn! {
    /// Violation time in ns since init for a perf policy; TOTAL_* sum the others.
    fn nvmlDeviceGetViolationStatus(device: nvmlDevice_t, perfPolicyType: nvmlPerfPolicyType_t, violTime: *mut nvmlViolationTime_t) {
        nonnull(violTime)?;
        let v = with_gpu(device, |g, t| match perfPolicyType {
            0..=5 => Ok(g.violation_ns(perfPolicyType as usize, t)),
            10 | 11 => Ok((0..6).map(|p| g.violation_ns(p, t)).sum()),
            _ => Err(INVALID_ARGUMENT),
        })?;
        out(violTime, nvmlViolationTime_t { referenceTime: now_us(), violationTime: v })
    }
}
