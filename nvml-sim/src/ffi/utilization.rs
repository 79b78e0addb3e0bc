//! Engine utilization (NVML reference, "Device Queries"): GPU and memory,
//! encoder, decoder, JPEG, OFA, the driver's sample ring and per-process
//! samples.

use super::*;
use crate::fleet::ring::{Answer, Rounding};
use crate::fleet::usage;
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
/// GPU (see `fleet/usage.rs`); NOT_FOUND when no sample since names a
/// process.
fn process_samples(device: nvmlDevice_t, last_seen: u64, rounding: Rounding) -> R<Vec<Answer>> {
    with_gpu(device, |g, _| {
        if g.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        usage::query(g, now_us(), last_seen, rounding).ok_or(NOT_FOUND)
    })
}

nvml_fn! {
    /// The two-call protocol of the reference: a null buffer or a count
    /// too small gets INSUFFICIENT_SIZE with the needed count. The mean is
    /// rounded up, as the H200 (580.159.04) answered this call.
    fn nvmlDeviceGetProcessUtilization(device: nvmlDevice_t, utilization: *mut nvmlProcessUtilizationSample_t, processSamplesCount: *mut c_uint, lastSeenTimeStamp: c_ulonglong) {
        nonnull(processSamplesCount)?;
        let samples = process_samples(device, lastSeenTimeStamp, Rounding::Up)?;
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
    /// the versioned call, with JPEG and OFA beside the four engines. The
    /// mean is truncated: the exporter's totals on the H200 (580.159.04)
    /// matched a truncated mean, not a rounded-up one.
    fn nvmlDeviceGetProcessesUtilizationInfo(device: nvmlDevice_t, procesesUtilInfo: *mut nvmlProcessesUtilizationInfo_t) {
        nonnull(procesesUtilInfo)?;
        let info = &mut *procesesUtilInfo;
        if info.version != struct_version::<nvmlProcessesUtilizationInfo_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        let samples = process_samples(device, info.lastSeenTimeStamp, Rounding::Down)?;
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

/// The engine of each utilization sample type, in `fleet/usage.rs` order.
// bindgen spells the C enum constants in lower case; matched as constants.
#[allow(non_upper_case_globals)]
fn sampled_engine(kind: nvmlSamplingType_t) -> Option<usize> {
    match kind {
        nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES => Some(0),
        nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES => Some(1),
        nvmlSamplingType_enum_NVML_ENC_UTILIZATION_SAMPLES => Some(2),
        nvmlSamplingType_enum_NVML_DEC_UTILIZATION_SAMPLES => Some(3),
        nvmlSamplingType_enum_NVML_JPG_UTILIZATION_SAMPLES => Some(4),
        nvmlSamplingType_enum_NVML_OFA_UTILIZATION_SAMPLES => Some(5),
        _ => None,
    }
}

nvml_fn! {
    /// The driver's sample ring of one engine (`fleet/usage.rs`): whole
    /// percents, `NVML_VALUE_TYPE_UNSIGNED_INT`, newer than
    /// `lastSeenTimeStamp`. A null buffer asks for the count; a short one
    /// (a sample was taken after the caller asked for the count) gets the
    /// oldest that fit, so that a caller going on from the newest it got
    /// loses none; nothing newer is NOT_FOUND. Power
    /// and clock sample types are not modelled (NOT_SUPPORTED); a GPU with
    /// a pinned (replayed) utilization answers that value in every sample;
    /// MIG-enabled GPUs answer NOT_SUPPORTED, as for the utilization rates.
    fn nvmlDeviceGetSamples(device: nvmlDevice_t, type_: nvmlSamplingType_t, lastSeenTimeStamp: c_ulonglong, sampleValType: *mut nvmlValueType_t, sampleCount: *mut c_uint, samples: *mut nvmlSample_t) {
        nonnull(sampleValType)?;
        nonnull(sampleCount)?;
        let engine = sampled_engine(type_).ok_or(NOT_SUPPORTED)?;
        let got = with_gpu(device, |g, _| {
            let pin = g.readings.utilization[engine];
            if g.mig.is_some() || unsupported(&pin) {
                return Err(NOT_SUPPORTED);
            }
            let mut got = usage::device_samples(g, now_us(), lastSeenTimeStamp, engine);
            if let Some(v) = pinned(pin) {
                for s in &mut got {
                    s.1 = v;
                }
            }
            Ok(got)
        })?;
        *sampleValType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
        let cap = *sampleCount as usize;
        *sampleCount = got.len() as u32;
        if samples.is_null() {
            return Ok(());
        }
        if got.is_empty() {
            return Err(NOT_FOUND);
        }
        *sampleCount = got.len().min(cap) as u32;
        for (i, (at, v)) in got.into_iter().take(cap).enumerate() {
            samples.add(i).write(nvmlSample_t {
                timeStamp: at,
                sampleValue: nvmlValue_t { uiVal: v },
            });
        }
        Ok(())
    }
}
