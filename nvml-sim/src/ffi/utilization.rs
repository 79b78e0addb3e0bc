//! Engine utilization (NVML reference, "Device Queries"): GPU and memory,
//! encoder, decoder, JPEG, OFA and per-process samples.

use super::*;
use crate::fleet::{now_us, unsupported, Gpu};
use crate::value::pinned;

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
            let [gpu, mem, ..] = &g.readings.utilization;
            if unsupported(gpu) || unsupported(mem) {
                return Err(NOT_SUPPORTED);
            }
            let u = g.util(t);
            Ok((u.round() as u32, pinned(*mem).unwrap_or((u * 0.62).round() as u32)))
        })?;
        out(utilization, nvmlUtilization_t { gpu, memory: mem })
    }
}

const SAMPLING_PERIOD_US: u32 = 167_000;

/// `engine`: index into the scenario's pinned utilizations (2 encoder, 3
/// decoder, 4 JPEG, 5 OFA).
unsafe fn engine_util(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period: *mut c_uint,
    engine: usize,
    share: f64,
    needs: fn(&Gpu) -> bool,
) -> R {
    nonnull(utilization)?;
    nonnull(period)?;
    let v = util_gpu(device, |g, t| {
        let pin = &g.readings.utilization[engine];
        if unsupported(pin) {
            return Err(NOT_SUPPORTED);
        }
        if let Some(v) = pinned(*pin) {
            return Ok(v);
        }
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
        engine_util(device, utilization, samplingPeriodUs, 2, 0.2, |g| g.model.engines.encoders > 0)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDecoderUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 3, 0.15, |_| true)
    }
}

nvml_fn! {
    fn nvmlDeviceGetJpgUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 4, 0.05, |_| true)
    }
}

nvml_fn! {
    fn nvmlDeviceGetOfaUtilization(device: nvmlDevice_t, utilization: *mut c_uint, samplingPeriodUs: *mut c_uint) {
        engine_util(device, utilization, samplingPeriodUs, 5, 0.03, |_| true)
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
