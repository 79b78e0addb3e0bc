//! The exporter's own driver time per GPU and family
//! (`--collector.driver_time`, off by default): where the time of
//! `nvml_exporter_sample_duration_seconds` goes, call by call, as the
//! sampler measured it around each NVML call (`src/nvml/driver_time.rs`).

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::DriverTime),
    metrics: &[
        Metric {
            name: "nvml_exporter_driver_seconds_total",
            help: "Time the exporter's NVML calls on the GPU took since start, by family (field_values: the batched field call; info: identity).",
            kind: Kind::Counter,
            collect: seconds,
        },
        Metric {
            name: "nvml_exporter_driver_calls_total",
            help: "NVML calls the exporter made on the GPU since start, by family (field_values: the batched field call; info: identity).",
            kind: Kind::Counter,
            collect: calls,
        },
    ],
};

fn seconds<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for t in &g.driver_time {
            out.gpu(g).label("family", t.family).set(t.seconds);
        }
    }
}

fn calls<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for t in &g.driver_time {
            out.gpu(g).label("family", t.family).set(t.calls);
        }
    }
}
