//! Frame buffer and BAR1 memory of the whole GPU. MIG instances have their
//! own `nvidia_gpu_mig_memory_*` families so sums never double count.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Memory),
    metrics: &[
        Metric {
            name: "nvidia_gpu_memory_total_bytes",
            help: "Total frame buffer memory.",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| Some(m.total_bytes)),
        },
        Metric {
            name: "nvidia_gpu_memory_used_bytes",
            help: "Frame buffer memory in use by processes (excludes reserved memory where NVML reports it apart).",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| Some(m.used_bytes)),
        },
        Metric {
            name: "nvidia_gpu_memory_free_bytes",
            help: "Free frame buffer memory.",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| Some(m.free_bytes)),
        },
        Metric {
            name: "nvidia_gpu_memory_reserved_bytes",
            help: "Frame buffer memory reserved by the driver and firmware.",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| m.reserved_bytes),
        },
        Metric {
            name: "nvidia_gpu_bar1_memory_total_bytes",
            help: "Total BAR1 memory (the GPU memory window mapped for the CPU and peers).",
            kind: Kind::Gauge,
            collect: |s, o| bar1(s, o, |m| m.total_bytes),
        },
        Metric {
            name: "nvidia_gpu_bar1_memory_used_bytes",
            help: "BAR1 memory in use.",
            kind: Kind::Gauge,
            collect: |s, o| bar1(s, o, |m| m.used_bytes),
        },
    ],
};

fn memory<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    field: fn(&crate::snapshot::Memory) -> Option<u64>,
) {
    for (g, r) in scope.readings() {
        if let Some(v) = r.memory.as_ref().and_then(field) {
            out.gpu(g).set(v);
        }
    }
}

fn bar1<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    field: fn(&crate::snapshot::Bar1Memory) -> u64,
) {
    for (g, r) in scope.readings() {
        if let Some(m) = &r.bar1 {
            out.gpu(g).set(field(m));
        }
    }
}
