//! Memory per process. Opt-in: every pid is a new series, which churns
//! the TSDB on busy machines.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::ProcessKind;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::ProcessMemory),
    metrics: &[Metric {
        name: "nvidia_gpu_process_memory_used_bytes",
        help: "GPU memory used by a process; MIG processes carry their instance.",
        kind: Kind::Gauge,
        collect: process_memory,
    }],
};

fn process_memory<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for (kind, list) in [
            (ProcessKind::Compute, &r.compute_processes),
            (ProcessKind::Graphics, &r.graphics_processes),
        ] {
            for p in list.iter().flatten() {
                if let Some(bytes) = p.used_memory_bytes {
                    out.gpu(g)
                        .label("pid", p.pid)
                        .label_opt("process_name", p.name.as_ref())
                        .label("type", kind.as_label())
                        .label_opt("gpu_instance", p.gpu_instance)
                        .label_opt("compute_instance", p.compute_instance)
                        .set(bytes);
                }
            }
        }
    }
}
