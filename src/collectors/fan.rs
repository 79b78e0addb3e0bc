//! Fan speeds. Passively cooled data-center GPUs have no fans: absent.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Fan),
    metrics: &[Metric {
        name: "nvidia_gpu_fan_speed_ratio",
        help: "Fan speed as a fraction of its maximum, by fan index.",
        kind: Kind::Gauge,
        collect: fan_speed,
    }],
};

fn fan_speed<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(fan, v) in &r.fan_speeds {
            out.gpu(g).label("fan", fan).set(v);
        }
    }
}
