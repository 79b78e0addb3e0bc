//! Engine utilization over NVML's last sample period.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Utilization),
    metrics: &[Metric {
        name: "nvidia_gpu_utilization_ratio",
        help: "Fraction of the last sample period the engine was busy (not reported on MIG-enabled GPUs).",
        kind: Kind::Gauge,
        collect: utilization,
    }],
};

fn utilization<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(engine, v) in &r.utilization {
            out.gpu(g).label("engine", engine.as_label()).set(v);
        }
    }
}
