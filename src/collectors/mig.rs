//! MIG mode, instances and per-instance memory. Per-instance values live in
//! their own families so that `sum()` over a GPU family never counts memory
//! twice. Per-instance activity is in `gpm.rs` (Hopper and newer only),
//! free memory (total minus used) in `mig_memory_free.rs`, off by default.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::MigMemory;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Mig),
    metrics: &[
        Metric {
            name: "nvidia_gpu_mig_enabled",
            help:
                "1 if MIG mode is on: current, and pending (what applies after the next GPU reset).",
            kind: Kind::Gauge,
            collect: enabled,
        },
        Metric {
            name: "nvidia_gpu_mig_info",
            help: "MIG device (GPU instance and compute instance) identity; always 1.",
            kind: Kind::Gauge,
            collect: info,
        },
        Metric {
            name: "nvidia_gpu_mig_memory_total_bytes",
            help: "Memory of the MIG GPU instance.",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| m.total_bytes),
        },
        Metric {
            name: "nvidia_gpu_mig_memory_used_bytes",
            help: "Memory in use in the MIG GPU instance.",
            kind: Kind::Gauge,
            collect: |s, o| memory(s, o, |m| m.used_bytes),
        },
    ],
};

fn enabled<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(m) = r.mig_mode {
            out.gpu(g).label("state", "current").set(m.current);
            out.gpu(g).label("state", "pending").set(m.pending);
        }
    }
}

fn info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for gi in &r.mig {
            if gi.compute_instances.is_empty() {
                // A GPU instance with no compute instance yet still exists
                // and holds memory.
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .label("profile", &gi.profile)
                    .set(1u64);
            }
            for ci in &gi.compute_instances {
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .label("compute_instance", ci.compute_instance)
                    .label("profile", &gi.profile)
                    .label("mig_uuid", &ci.mig_uuid)
                    .set(1u64);
            }
        }
    }
}

pub(super) fn memory<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    field: fn(&MigMemory) -> u64,
) {
    for (g, r) in scope.readings() {
        for gi in &r.mig {
            if let Some(m) = &gi.memory {
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .set(field(m));
            }
        }
    }
}
