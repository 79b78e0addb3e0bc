//! Power draw, limits and energy; the module and memory power scopes where
//! NVML reports them; the power smoothing circuitry's lifetime.
//!
//! Each scope is a family of its own, never a `scope` label on the GPU's:
//! the module (a Grace superchip: CPU, GPUs and memory) contains the GPU,
//! and the GPU's draw contains its memory's, so a `sum()` over one family
//! mixing scopes would count the same watts twice.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::PowerLimit;

use super::{per_gpu, per_gpu_labelled};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Power),
    metrics: &[
        Metric {
            name: "nvidia_gpu_power_usage_watts",
            help: "Power draw of the GPU board.",
            kind: Kind::Gauge,
            collect: usage,
        },
        Metric {
            name: "nvidia_gpu_power_limit_watts",
            help: "Power limits: enforced, management (set by the operator), default, and the allowed min and max.",
            kind: Kind::Gauge,
            collect: limit,
        },
        Metric {
            name: "nvidia_gpu_energy_joules_total",
            help: "Energy consumed since the driver was loaded.",
            kind: Kind::Counter,
            collect: energy,
        },
        Metric {
            name: "nvidia_gpu_module_power_usage_watts",
            help: "Power draw of the module the GPU belongs to (Grace superchips: CPU, GPUs and memory), averaged over 1 s.",
            kind: Kind::Gauge,
            collect: module_usage,
        },
        Metric {
            name: "nvidia_gpu_module_power_limit_watts",
            help: "Power limits of the module the GPU belongs to: enforced, management (requested), default, min and max.",
            kind: Kind::Gauge,
            collect: module_limit,
        },
        Metric {
            name: "nvidia_gpu_memory_power_usage_watts",
            help: "Power draw of the GPU's memory, averaged over 1 s (part of the GPU's own draw).",
            kind: Kind::Gauge,
            collect: memory_usage,
        },
        Metric {
            name: "nvidia_gpu_power_smoothing_lifetime_remaining_ratio",
            help: "Lifetime left of the GPU's power smoothing hardware circuitry (Blackwell); at 0 the driver disables power smoothing.",
            kind: Kind::Gauge,
            collect: smoothing_lifetime,
        },
    ],
};

fn usage<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.power_usage_watts);
}

fn limit<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu_labelled(
        scope,
        out,
        "limit",
        |r| &r.power_limits,
        PowerLimit::as_label,
    );
}

fn energy<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.energy_joules);
}

fn module_usage<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.module_power_watts);
}

fn module_limit<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu_labelled(
        scope,
        out,
        "limit",
        |r| &r.module_power_limits,
        PowerLimit::as_label,
    );
}

fn memory_usage<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.memory_power_watts);
}

fn smoothing_lifetime<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.power_smoothing_lifetime_remaining);
}
