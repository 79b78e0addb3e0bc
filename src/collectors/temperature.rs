//! Temperatures and the thresholds the driver acts on.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Temperature),
    metrics: &[
        Metric {
            name: "nvidia_gpu_temperature_celsius",
            help: "Temperature by sensor.",
            kind: Kind::Gauge,
            collect: temperature,
        },
        Metric {
            name: "nvidia_gpu_temperature_threshold_celsius",
            help: "Temperature at which the driver slows down or shuts down the GPU, and the other thresholds NVML reports.",
            kind: Kind::Gauge,
            collect: threshold,
        },
    ],
};

fn temperature<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(sensor, v) in &r.temperatures {
            out.gpu(g).label("sensor", sensor.as_label()).set(v);
        }
    }
}

fn threshold<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(t, v) in &r.temperature_thresholds {
            out.gpu(g).label("threshold", t.as_label()).set(v);
        }
    }
}
