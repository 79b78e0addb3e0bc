//! A GPU's power state, following the model's power section: the energy
//! counter and the power smoothing circuitry's remaining lifetime.

use crate::scenario::GpuSpec;

/// What the energy counter has counted, and up to when.
#[derive(Debug, Clone)]
pub struct PowerState {
    /// Energy since the simulator started, millijoules, up to `energy_t`.
    pub energy_mj: f64,
    pub energy_t: f64,
    /// Power smoothing circuitry lifetime remaining, percent; `None` on
    /// boards without power smoothing or where the scenario says "N/A".
    pub smoothing_lifetime: Option<f64>,
}

impl PowerState {
    /// Nothing counted yet; the smoothing lifetime the scenario pins, or on
    /// boards with the circuitry one that has seen a little use (100, 99,
    /// 98, 97 % by GPU index).
    pub fn from_spec(index: u32, spec: &GpuSpec) -> PowerState {
        PowerState {
            energy_mj: 0.0,
            energy_t: 0.0,
            smoothing_lifetime: match spec.readings.power_smoothing_lifetime_percent {
                Some(v) => v.get(),
                None => spec
                    .model
                    .power_smoothing
                    .then(|| 100.0 - f64::from(index % 4)),
            },
        }
    }
}
