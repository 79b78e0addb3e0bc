//! Power draw, limits and energy.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

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
    ],
};

fn usage<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(v) = r.power_usage_watts {
            out.gpu(g).set(v);
        }
    }
}

fn limit<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(l, v) in &r.power_limits {
            out.gpu(g).label("limit", l.as_label()).set(v);
        }
    }
}

fn energy<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(v) = r.energy_joules {
            out.gpu(g).set(v);
        }
    }
}
