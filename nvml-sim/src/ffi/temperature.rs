//! Temperatures and their thresholds (NVML reference, "Device Queries"); the
//! fans are `fan.rs`.

use super::*;
use crate::fleet::{unsupported, Gpu};
use std::ffi::c_int;

fn gpu_temperature(g: &Gpu, t: f64) -> R<u32> {
    if unsupported(&g.readings.temperature_c) {
        return Err(NOT_SUPPORTED);
    }
    Ok(g.temperature(t))
}

nvml_fn! {
    fn nvmlDeviceGetTemperature(device: nvmlDevice_t, sensorType: nvmlTemperatureSensors_t, temp: *mut c_uint) {
        nonnull(temp)?;
        if sensorType != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        let v = with_gpu(device, |g, t| gpu_temperature(g, t))?;
        out(temp, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetTemperatureV(device: nvmlDevice_t, temperature: *mut nvmlTemperature_t) {
        nonnull(temperature)?;
        if (*temperature).version != struct_version::<nvmlTemperature_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        if (*temperature).sensorType != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        let v = with_gpu(device, |g, t| gpu_temperature(g, t))?;
        (*temperature).temperature = v as c_int;
        Ok(())
    }
}

nvml_fn! {
    /// How far the GPU is below T.Limit, its max operating temperature
    /// (from the 12.8 header, R570: absent before, by drivers.toml);
    /// NOT_SUPPORTED on boards without T.Limit readings.
    fn nvmlDeviceGetMarginTemperature(device: nvmlDevice_t, marginTempInfo: *mut nvmlMarginTemperature_t) {
        nonnull(marginTempInfo)?;
        if (*marginTempInfo).version != struct_version::<nvmlMarginTemperature_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        let v = with_gpu(device, |g, t| g.tlimit_margin(t).ok_or(NOT_SUPPORTED))?;
        (*marginTempInfo).marginTemperature = v;
        Ok(())
    }
}

nvml_fn! {
    fn nvmlDeviceGetTemperatureThreshold(device: nvmlDevice_t, thresholdType: nvmlTemperatureThresholds_t, temp: *mut c_uint) {
        nonnull(temp)?;
        let v = with_gpu(device, |g, _| match thresholdType {
            0 => g.model.thermal.shutdown_c.ok_or(NOT_SUPPORTED),
            1 => g.model.thermal.slowdown_c.ok_or(NOT_SUPPORTED),
            2 => g.model.thermal.memory_max_c.ok_or(NOT_SUPPORTED),
            3 => g.model.thermal.gpu_max_c.ok_or(NOT_SUPPORTED),
            4..=7 => Err(NOT_SUPPORTED),
            _ => Err(INVALID_ARGUMENT),
        })?;
        out(temp, v)
    }
}
