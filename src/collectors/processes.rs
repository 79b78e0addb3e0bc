//! How many processes use each GPU.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::ProcessKind;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Processes),
    metrics: &[Metric {
        name: "nvidia_gpu_processes",
        help: "Processes running on the GPU, by type (compute or graphics).",
        kind: Kind::Gauge,
        collect: processes,
    }],
};

fn processes<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for (kind, list) in [
            (ProcessKind::Compute, &r.compute_processes),
            (ProcessKind::Graphics, &r.graphics_processes),
        ] {
            if let Some(list) = list {
                out.gpu(g).label("type", kind.as_label()).set(list.len());
            }
        }
    }
}
