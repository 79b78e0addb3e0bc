//! Power usage, limits and energy (`nvidia_gpu_power_usage_watts`,
//! `nvidia_gpu_power_limit_watts`, `nvidia_gpu_energy_joules_total`).
//! Energy comes from the field batch; default, min and max limits are
//! cached.

use super::super::calls::{Batch, Cached};
use super::super::fields;
use super::super::units::{millijoules_to_joules, milliwatts_to_watts};
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, PowerLimit};

#[derive(Default)]
pub struct State {
    static_limits: Cached<Vec<(PowerLimit, f64)>>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let fam = Family::Power.name();
        let (d, c) = (g.device, &mut *g.calls);
        r.power_usage_watts = c
            .run(fam, || d.power_usage())
            .value()
            .map(milliwatts_to_watts);
        if let Some(v) = c.run(fam, || d.enforced_power_limit()).value() {
            r.power_limits
                .push((PowerLimit::Enforced, milliwatts_to_watts(v)));
        }
        if let Some(v) = c.run(fam, || d.power_management_limit()).value() {
            r.power_limits
                .push((PowerLimit::Management, milliwatts_to_watts(v)));
        }
        r.energy_joules = match scalar.u64(fields::TOTAL_ENERGY) {
            Some(mj) => Some(millijoules_to_joules(mj)),
            None => c
                .run_unless_absent("energy", fam, || d.total_energy_consumption())
                .map(millijoules_to_joules),
        };
        let statics = self
            .static_limits
            .get(g.poll, || {
                let mut batch = Batch::new();
                if let Some(v) = batch.take(c.run(fam, || d.power_management_limit_default())) {
                    batch.push((PowerLimit::Default, milliwatts_to_watts(v)));
                }
                if let Some(v) = batch.take(c.run(fam, || d.power_management_limit_constraints())) {
                    batch.push((PowerLimit::Min, milliwatts_to_watts(v.min_limit)));
                    batch.push((PowerLimit::Max, milliwatts_to_watts(v.max_limit)));
                }
                batch.finish()
            })
            .unwrap_or_default();
        r.power_limits.extend(statics);
    }
}
