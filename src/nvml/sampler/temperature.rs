//! Temperatures and their thresholds (`nvidia_gpu_temperature_celsius`,
//! `nvidia_gpu_temperature_threshold_celsius`). Memory temperature comes
//! from the field batch; thresholds are cached.

use nvml_wrapper::enum_wrappers::device::{TemperatureSensor, TemperatureThreshold};

use super::super::calls::{Batch, Cached};
use super::super::fields;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, Sensor, Threshold};

#[derive(Default)]
pub struct State {
    thresholds: Cached<Vec<(Threshold, f64)>>,
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
        let (d, c) = (g.device, &mut *g.calls);
        if let Some(t) = c.run(fam, || d.temperature(TemperatureSensor::Gpu)).value() {
            r.temperatures.push((Sensor::Gpu, f64::from(t)));
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
    }
}
