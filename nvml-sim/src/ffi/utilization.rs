//! Engine utilization (NVML reference, "Device Queries"): GPU and memory,
//! encoder, decoder, JPEG, OFA and per-process samples.

use super::*;
use crate::fleet::usage::{self, Answer};
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
            let declared = usage::declared_engine(g, None, 1);
            Ok((u.round() as u32, pinned(*mem).unwrap_or(declared.unwrap_or(u * 0.62).round() as u32)))
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
        if let Some(v) = usage::declared_engine(g, None, engine) {
            return Ok(v.round() as u32);
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

/// Per-process samples newer than `last_seen` on a whole, MIG-disabled
/// GPU (see `fleet/usage.rs`); NOT_FOUND when no process was active since.
fn process_samples(device: nvmlDevice_t, last_seen: u64) -> R<Vec<Answer>> {
    with_gpu(device, |g, _| {
        if g.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        usage::query(g, now_us(), last_seen).ok_or(NOT_FOUND)
    })
}

nvml_fn! {
    /// The two-call size protocol of the reference: a null buffer or a
    /// count too small gets INSUFFICIENT_SIZE with the needed count.
    fn nvmlDeviceGetProcessUtilization(device: nvmlDevice_t, utilization: *mut nvmlProcessUtilizationSample_t, processSamplesCount: *mut c_uint, lastSeenTimeStamp: c_ulonglong) {
        nonnull(processSamplesCount)?;
        let samples = process_samples(device, lastSeenTimeStamp)?;
        let cap = *processSamplesCount as usize;
        *processSamplesCount = samples.len() as u32;
        if utilization.is_null() || cap < samples.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, s) in samples.into_iter().enumerate() {
            utilization.add(i).write(nvmlProcessUtilizationSample_t {
                pid: s.pid,
                timeStamp: s.timestamp_us,
                smUtil: s.util[0],
                memUtil: s.util[1],
                encUtil: s.util[2],
                decUtil: s.util[3],
            });
        }
        Ok(())
    }
}

nvml_fn! {
    /// R550 and later (absent from R535/R545 personalities, drivers.toml):
    /// the versioned call, with JPEG and OFA beside the four engines.
    fn nvmlDeviceGetProcessesUtilizationInfo(device: nvmlDevice_t, procesesUtilInfo: *mut nvmlProcessesUtilizationInfo_t) {
        nonnull(procesesUtilInfo)?;
        let info = &mut *procesesUtilInfo;
        if info.version != struct_version::<nvmlProcessesUtilizationInfo_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        let samples = process_samples(device, info.lastSeenTimeStamp)?;
        let cap = info.processSamplesCount as usize;
        info.processSamplesCount = samples.len() as u32;
        if info.procUtilArray.is_null() || cap < samples.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, s) in samples.into_iter().enumerate() {
            info.procUtilArray.add(i).write(nvmlProcessUtilizationInfo_v1_t {
                timeStamp: s.timestamp_us,
                pid: s.pid,
                smUtil: s.util[0],
                memUtil: s.util[1],
                encUtil: s.util[2],
                decUtil: s.util[3],
                jpgUtil: s.util[4],
                ofaUtil: s.util[5],
            });
        }
        Ok(())
    }
}
