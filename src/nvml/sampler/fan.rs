//! Fan speeds (`nvidia_gpu_fan_speed_ratio`). The fan count is cached;
//! passively cooled boards report none and get no fan series at all.

use super::super::calls::Cached;
use super::super::units::percent_to_ratio;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::GpuReadings;

#[derive(Default)]
pub struct State {
    count: Cached<u32>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, r: &mut GpuReadings) {
        let fam = Family::Fan.name();
        let (d, c) = (g.device, &mut *g.calls);
        let Some(n) = self.count.get(g.poll, || c.run(fam, || d.num_fans())) else {
            return;
        };
        for i in 0..n {
            if let Some(s) = c.run(fam, || d.fan_speed(i)).value() {
                r.fan_speeds.push((i, percent_to_ratio(f64::from(s))));
            }
        }
    }
}
