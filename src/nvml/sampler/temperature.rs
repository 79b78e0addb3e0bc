//! Temperatures and their thresholds (`nvidia_gpu_temperature_celsius`,
//! `nvidia_gpu_temperature_threshold_celsius`), and, where NVML reports no
//! absolute slowdown threshold, the distance to T.Limit and the thresholds
//! as T.Limit margins (`nvidia_gpu_temperature_margin_celsius`,
//! `nvidia_gpu_temperature_margin_threshold_celsius`). Memory temperature
//! comes from the field batch; thresholds are cached.

use nvml_wrapper::enum_wrappers::device::{TemperatureSensor, TemperatureThreshold};

use super::super::calls::{Batch, Cached, Got};
use super::super::fields;
use super::super::raw::{self, FieldValue};
use super::scalar::{read_apart, Scalar};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, Sensor, Threshold};

#[derive(Default)]
pub struct State {
    thresholds: Cached<Vec<(Threshold, f64)>>,
    margin_thresholds: Cached<Vec<(Threshold, f64)>>,
}

/// The T.Limit field read, and the threshold it is a margin for: the
/// slowdown margin, which the temperature alert and the T.Limit panel
/// compare the GPU's margin with. The shutdown margin is a fixed setting
/// of the board (-8 on H100/H200, -5 on Blackwell, as nvidia-smi -q
/// prints it), and the max operating margins (GPU and memory) are 0 by
/// definition, T.Limit being the max operating temperature: not read, to
/// keep a GB200 within the series budget.
const MARGIN_THRESHOLDS: [((u32, u32), Threshold); 1] =
    [((fields::TLIMIT_SLOWDOWN, 0), Threshold::Slowdown)];

/// A T.Limit field as signed degrees. The captures print negative values
/// (-8, -2); a driver that types the field unsigned still sends the 32-bit
/// two's complement.
pub fn signed_degrees(v: FieldValue) -> f64 {
    match v {
        FieldValue::Signed(n) => n as f64,
        FieldValue::Unsigned(n) => match u32::try_from(n) {
            Ok(n32) => f64::from(n32 as i32),
            Err(_) => n as f64,
        },
        FieldValue::Double(d) => d,
    }
}

const THRESHOLDS: [(TemperatureThreshold, Threshold); 7] = [
    (TemperatureThreshold::Shutdown, Threshold::Shutdown),
    (TemperatureThreshold::Slowdown, Threshold::Slowdown),
    (TemperatureThreshold::MemoryMax, Threshold::MemoryMax),
    (TemperatureThreshold::GpuMax, Threshold::GpuMax),
    (TemperatureThreshold::AcousticMin, Threshold::AcousticMin),
    (
        TemperatureThreshold::AcousticCurr,
        Threshold::AcousticCurrent,
    ),
    (TemperatureThreshold::AcousticMax, Threshold::AcousticMax),
];

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let fam = Family::Temperature.name();
        let (nvml, h, d, c) = (g.nvml, g.handle, g.device, &mut *g.calls);
        // nvmlDeviceGetTemperature is DEPRECATED(13.0): its successor
        // where the driver exports it (R570+), else the old call.
        let gpu = if raw::exports_temperature_v(nvml) {
            match c.run(fam, || raw::temperature_v(nvml, h)) {
                Got::Value(t) => Some(f64::from(t)),
                Got::Absent => c
                    .run(fam, || d.temperature(TemperatureSensor::Gpu))
                    .value()
                    .map(f64::from),
                Got::Failed => None,
            }
        } else {
            c.run(fam, || d.temperature(TemperatureSensor::Gpu))
                .value()
                .map(f64::from)
        };
        if let Some(t) = gpu {
            r.temperatures.push((Sensor::Gpu, t));
        }
        if let Some(v) = scalar.get(fields::MEMORY_TEMP) {
            r.temperatures.push((Sensor::Memory, v.as_f64()));
        }
        r.temperature_thresholds = self
            .thresholds
            .get(g.poll, || {
                let mut batch = Batch::new();
                for (nv, ours) in THRESHOLDS {
                    if let Some(v) = batch.take(c.run(fam, || d.temperature_threshold(nv))) {
                        batch.push((ours, f64::from(v)));
                    }
                }
                batch.finish()
            })
            .unwrap_or_default();
        // Hopper and Blackwell captures print thresholds only as T.Limit
        // margins: where the absolute slowdown threshold is missing, the
        // temperature alert works on the margins instead.
        let has_slowdown = r
            .temperature_thresholds
            .iter()
            .any(|(t, _)| *t == Threshold::Slowdown);
        if has_slowdown {
            return;
        }
        r.temperature_margin_thresholds = self
            .margin_thresholds
            .get(g.poll, || {
                read_apart(g, fam, &MARGIN_THRESHOLDS).map(|got| {
                    got.into_iter()
                        .map(|(t, v)| (t, signed_degrees(v)))
                        .collect()
                })
            })
            .unwrap_or_default();
        let (nvml, h) = (g.nvml, g.handle);
        r.temperature_margin = g
            .calls
            .run_unless_absent("margin_temperature", fam, || {
                raw::margin_temperature(nvml, h)
            })
            .map(f64::from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_limit_fields_are_signed() {
        assert_eq!(signed_degrees(FieldValue::Signed(-8)), -8.0);
        // -2 sent as an unsigned 32-bit value.
        assert_eq!(
            signed_degrees(FieldValue::Unsigned(u64::from(u32::MAX - 1))),
            -2.0
        );
        assert_eq!(signed_degrees(FieldValue::Unsigned(0)), 0.0);
        assert_eq!(signed_degrees(FieldValue::Double(-5.0)), -5.0);
    }
}
