//! Clock event (throttle) reasons and violation time (NVML reference,
//! "Device Queries").

use super::*;
use crate::fleet::now_us;
use std::ffi::c_ulonglong;

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
        let v = with_gpu(device, |g, _| Ok(g.throttle.supported_reasons))?;
        out(supportedClocksEventReasons, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetSupportedClocksThrottleReasons(device: nvmlDevice_t, supportedClocksThrottleReasons: *mut c_ulonglong) {
        nonnull(supportedClocksThrottleReasons)?;
        let v = with_gpu(device, |g, _| Ok(g.throttle.supported_reasons))?;
        out(supportedClocksThrottleReasons, v)
    }
}

nvml_fn! {
    /// Violation time in ns since init for a perf policy; TOTAL_* sum the others.
    fn nvmlDeviceGetViolationStatus(device: nvmlDevice_t, perfPolicyType: nvmlPerfPolicyType_t, violTime: *mut nvmlViolationTime_t) {
        nonnull(violTime)?;
        let v = with_gpu(device, |g, t| match perfPolicyType {
            0..=5 => Ok(g.throttle.violation_ns(perfPolicyType as usize, t)),
            10 | 11 => Ok((0..6).map(|p| g.throttle.violation_ns(p, t)).sum()),
            _ => Err(INVALID_ARGUMENT),
        })?;
        out(violTime, nvmlViolationTime_t { referenceTime: now_us(), violationTime: v })
    }
}
