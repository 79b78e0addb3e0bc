//! Clocks and performance state.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::{Clock, GpuReadings};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Clocks),
    metrics: &[
        Metric {
            name: "nvidia_gpu_clock_hertz",
            help: "Current clock frequency by clock domain.",
            kind: Kind::Gauge,
            collect: |s, o| clocks(s, o, |r| &r.clocks_hertz),
        },
        Metric {
            name: "nvidia_gpu_clock_max_hertz",
            help: "Maximum clock frequency by clock domain.",
            kind: Kind::Gauge,
            collect: |s, o| clocks(s, o, |r| &r.max_clocks_hertz),
        },
        Metric {
            name: "nvidia_gpu_performance_state",
            help: "Performance state: 0 (P0, maximum performance) to 15 (P15, minimum).",
            kind: Kind::Gauge,
            collect: pstate,
        },
    ],
};

fn clocks<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    field: fn(&GpuReadings) -> &Vec<(Clock, f64)>,
) {
    for (g, r) in scope.readings() {
        for &(clock, v) in field(r) {
            out.gpu(g).label("clock", clock.as_label()).set(v);
        }
    }
}

fn pstate<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(p) = r.performance_state {
            out.gpu(g).set(p);
        }
    }
}
