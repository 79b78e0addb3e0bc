//! Engine utilization (NVML reference, "Device Queries"): GPU and memory,
//! encoder, decoder, JPEG, OFA and per-process samples.

use super::*;
use crate::fleet::{now_us, Gpu};
use std::ffi::c_ulonglong;

/// NVML reference, nvmlDeviceGetUtilizationRates: not supported on MIG-enabled
/// GPUs nor on MIG device handles; the same holds for the engine utilizations.
fn util_gpu<T>(device: nvmlDevice_t, f: impl FnOnce(&Gpu, f64) -> R<T>) -> R<T> {
    with_gpu(device, |g, t| {
        if g.mig.is_some() {
            Err(NOT_SUPPORTED)
        } else {
            f(g, t)
        }
    })
}

nvml_fn! {
    fn nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, utilization: *mut nvmlUtilization_t) {
        nonnull(utilization)?;
        let (gpu, mem) = util_gpu(device, |g, t| {
            let u = g.util(t);
            Ok((u.round() as u32, (u * 0.62).round() as u32))
        })?;
        out(utilization, nvmlUtilization_t { gpu, memory: mem })
    }
}

const SAMPLING_PERIOD_US: u32 = 167_000;

unsafe fn engine_util(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period: *mut c_uint,
    share: f64,
    needs: fn(&Gpu) -> bool,
) -> R {
    nonnull(utilization)?;
    nonnull(period)?;
    let v = util_gpu(device, |g, t| {
        if needs(g) {
            Ok((g.util(t) * share).round() as u32)
        } else {
            Ok(0)
        }
    })?;
    out(utilization, v)?;
    out(period, SAMPLING_PERIOD_US)
}

nvml_fn! {
    fn nvmlDeviceGetEncoderUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 0.2, |g| g.model.engines.encoders > 0)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDecoderUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 0.15, |_| true)
    }
}

nvml_fn! {
    fn nvmlDeviceGetJpgUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 0.05, |_| true)
    }
}

nvml_fn! {
    fn nvmlDeviceGetOfaUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 0.03, |_| true)
    }
}

nvml_fn! {
    /// Per-process samples newer than `lastSeenTimeStamp`; the two-call size
    /// protocol of the reference (null buffer: count written, INSUFFICIENT_SIZE).
    fn nvmlDeviceGetProcessUtilization(device: nvmlDevice_t, utilization: *mut nvmlProcessUtilizationSample_t, processSamplesCount: *mut c_uint, lastSeenTimeStamp: c_ulonglong) {
        nonnull(processSamplesCount)?;
        let samples = util_gpu(device, |g, t| {
            let now = now_us();
            let total: u64 = g.procs.iter().map(|p| p.memory).sum::<u64>().max(1);
            Ok(g.procs
                .iter()
                .filter(|_| now > lastSeenTimeStamp)
                .map(|p| nvmlProcessUtilizationSample_t {
                    pid: p.pid,
                    timeStamp: now,
                    smUtil: (g.util(t) * p.memory as f64 / total as f64).round() as u32,
                    memUtil: (g.util(t) * 0.62 * p.memory as f64 / total as f64).round() as u32,
                    encUtil: 0,
                    decUtil: 0,
                })
                .collect::<Vec<_>>())
        })?;
        if samples.is_empty() {
            return Err(NOT_FOUND);
        }
        let cap = *processSamplesCount as usize;
        *processSamplesCount = samples.len() as u32;
        if utilization.is_null() || cap < samples.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, s) in samples.into_iter().enumerate() {
            utilization.add(i).write(s);
        }
        Ok(())
    }
}
