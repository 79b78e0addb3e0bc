//! Clock event (throttle) reasons: which are active, and for how long the
//! GPU has been held back by each.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Throttle),
    metrics: &[
        Metric {
            name: "nvidia_gpu_clock_throttle_active",
            help: "1 while the reason holds clocks down, 0 otherwise; only reasons the GPU supports appear.",
            kind: Kind::Gauge,
            collect: active,
        },
        Metric {
            name: "nvidia_gpu_clock_throttle_seconds_total",
            help: "Time clocks were held down by the reason, where NVML reports it (violation time).",
            kind: Kind::Counter,
            collect: seconds,
        },
    ],
};

fn active<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(reason, on) in &r.throttle_active {
            out.gpu(g).label("reason", reason.as_label()).set(on);
        }
    }
}

fn seconds<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(reason, v) in &r.throttle_seconds {
            out.gpu(g).label("reason", reason.as_label()).set(v);
        }
    }
}
