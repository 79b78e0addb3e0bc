//! Power: the limit and the power smoothing circuitry's lifetime. Throttle
//! reasons are `throttle.rs`.

use super::super::Sim;
use crate::value::Invalid;

impl Sim {
    pub(super) fn power_limit(&mut self, gpu: u32, watts: f64) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        let (min, max) = (g.model.power.min_mw, g.model.power.max_mw);
        let mw = watts * 1000.0;
        if !mw.is_finite() || mw < f64::from(min) || mw > f64::from(max) {
            return Err(Invalid::from(format!(
                "watts {watts} is outside GPU {gpu}'s limits ({} to {} W)",
                f64::from(min) / 1000.0,
                f64::from(max) / 1000.0
            )));
        }
        g.settings.power_limit_mw = Some(mw.round() as u32);
        g.settings.enforced_power_limit_mw = None;
        Ok(format!("GPU {gpu} power limit {watts} W"))
    }

    pub(super) fn power_smoothing(
        &mut self,
        gpu: u32,
        lifetime_percent: f64,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.power_smoothing {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) has no power smoothing",
                g.model.name
            )));
        }
        if !(0.0..=100.0).contains(&lifetime_percent) {
            return Err(Invalid::from(format!(
                "lifetime_percent {lifetime_percent} is outside 0..=100"
            )));
        }
        g.power.smoothing_lifetime = Some(lifetime_percent);
        Ok(format!(
            "GPU {gpu} power smoothing circuitry at {lifetime_percent}% of its lifetime"
        ))
    }
}
