//! Power usage, limits and energy (`nvidia_gpu_power_usage_watts`,
//! `nvidia_gpu_power_limit_watts`, `nvidia_gpu_energy_joules_total`), the
//! module and memory power scopes where NVML reports them
//! (`nvidia_gpu_module_power_*`, `nvidia_gpu_memory_power_usage_watts`) and
//! the power smoothing circuitry's lifetime, and the instantaneous draw
//! (`nvidia_gpu_power_instant_watts`, family `power.instant`). Energy, scoped draw and the
//! lifetime come from the field batch; the limits are cached.

use super::super::calls::{Batch, Cached, SLOW_REFRESH_POLLS};
use super::super::fields;
use super::super::raw::FieldValue;
use super::super::units::{millijoules_to_joules, milliwatts_to_watts, percent_to_ratio};
use super::scalar::{read_apart, Scalar};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, PowerLimit};

#[derive(Default)]
pub struct State {
    /// The limit in force and the one set (an operator's `nvidia-smi -pl`,
    /// or out of band): 2.0 and 0.2 ms a call on an H200, so read every
    /// `SLOW_REFRESH_POLLS` polls, and at once when the draw passes the
    /// cached limit or the power throttle reasons change.
    enforced: Cached<u32>,
    management: Cached<u32>,
    static_limits: Cached<Vec<(PowerLimit, f64)>>,
    module_limits: Cached<Vec<(PowerLimit, f64)>>,
}

/// The module scope's limit in force (nvidia-smi's "Module Power Readings",
/// current power limit): what the module's draw is held to. Its default,
/// min, max and requested limits are settings that never move on their
/// own; left out of the default set to keep a GB200 within the series
/// budget (docs/metrics.md, "Default set and switches").
const MODULE_LIMITS: [((u32, u32), PowerLimit); 1] = [(
    (fields::POWER_CURRENT_LIMIT, fields::POWER_SCOPE_MODULE),
    PowerLimit::Enforced,
)];

/// A power field in watts (NVML gives milliwatts).
fn watts(v: FieldValue) -> Option<f64> {
    v.as_u64()
        .and_then(|mw| u32::try_from(mw).ok())
        .map(milliwatts_to_watts)
}

impl State {
    /// `moved`: the power throttle reasons changed this poll.
    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, '_>,
        scalar: &Scalar,
        moved: bool,
        r: &mut GpuReadings,
    ) {
        let fam = Family::Power.name();
        let (d, c, poll) = (g.device, &mut *g.calls, g.poll);
        let usage = c.run(fam, || d.power_usage()).value();
        r.power_usage_watts = usage.map(milliwatts_to_watts);
        // A draw above the limit in force says the limit moved (a short
        // excursion re-reads it once more, at 2 ms: cheap insurance).
        let over = matches!((usage, self.enforced.peek()), (Some(u), Some(&l)) if u > l);
        let moved = moved || over;
        let every = SLOW_REFRESH_POLLS;
        let enforced = self.enforced.get_every(poll, every, moved, || {
            c.run(fam, || d.enforced_power_limit())
        });
        if let Some(v) = enforced {
            r.power_limits
                .push((PowerLimit::Enforced, milliwatts_to_watts(v)));
        }
        let management = self.management.get_every(poll, every, moved, || {
            c.run(fam, || d.power_management_limit())
        });
        if let Some(v) = management {
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

        r.power_instant_watts = scalar.get(fields::POWER_INSTANT).and_then(watts);
        r.module_power_watts = scalar
            .scoped(fields::POWER_AVERAGE, fields::POWER_SCOPE_MODULE)
            .and_then(watts);
        r.memory_power_watts = scalar
            .scoped(fields::POWER_AVERAGE, fields::POWER_SCOPE_MEMORY)
            .and_then(watts);
        // Module limits only where the module reports its draw: elsewhere
        // (every board but a Grace superchip) the whole scope is absent.
        if r.module_power_watts.is_some() {
            r.module_power_limits = self
                .module_limits
                .get(g.poll, || {
                    read_apart(g, fam, &MODULE_LIMITS).map(|got| {
                        got.into_iter()
                            .filter_map(|(limit, v)| watts(v).map(|w| (limit, w)))
                            .collect()
                    })
                })
                .unwrap_or_default();
        }
        r.power_smoothing_lifetime_remaining = g
            .driver
            .power_smoothing_lifetime_id()
            .and_then(|id| scalar.get(id))
            .map(|v| percent_to_ratio(v.as_f64()));
    }
}
