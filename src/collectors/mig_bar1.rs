//! BAR1 memory per MIG GPU instance, behind `--collector.mig.bar1`: each
//! instance's own, from its MIG device handle, as DCGM serves
//! DCGM_FI_DEV_BAR1_* on a GPU instance. Off by default: one call per
//! instance and poll, and no shipped panel or alert reads it.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::Bar1Memory;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::MigBar1),
    metrics: &[
        Metric {
            name: "nvidia_gpu_mig_bar1_memory_total_bytes",
            help: "BAR1 memory of the MIG GPU instance.",
            kind: Kind::Gauge,
            collect: |s, o| bar1(s, o, |b| b.total_bytes),
        },
        Metric {
            name: "nvidia_gpu_mig_bar1_memory_used_bytes",
            help: "BAR1 memory used in the MIG GPU instance.",
            kind: Kind::Gauge,
            collect: |s, o| bar1(s, o, |b| b.used_bytes),
        },
    ],
};

fn bar1<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>, field: fn(&Bar1Memory) -> u64) {
    for (g, r) in scope.readings() {
        for gi in &r.mig {
            if let Some(b) = &gi.bar1 {
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .set(field(b));
            }
        }
    }
}
