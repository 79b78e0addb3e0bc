//! Temperatures and the thresholds the driver acts on, as absolute
//! degrees or, where NVML reports only those (Hopper and Blackwell on
//! recent drivers), as distances to the GPU's T.Limit.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::Threshold;

use super::{per_gpu, per_gpu_labelled};

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
        Metric {
            name: "nvidia_gpu_temperature_margin_celsius",
            help: "How far the GPU is below its T.Limit temperature (negative past it); reported where NVML gives no absolute slowdown threshold.",
            kind: Kind::Gauge,
            collect: margin,
        },
        Metric {
            name: "nvidia_gpu_temperature_margin_threshold_celsius",
            help: "The thresholds as T.Limit margins: the GPU slows down or shuts down when its margin falls to the value.",
            kind: Kind::Gauge,
            collect: margin_threshold,
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
    per_gpu_labelled(
        scope,
        out,
        "threshold",
        |r| &r.temperature_thresholds,
        Threshold::as_label,
    );
}

fn margin<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu(scope, out, |r| r.temperature_margin);
}

fn margin_threshold<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    per_gpu_labelled(
        scope,
        out,
        "threshold",
        |r| &r.temperature_margin_thresholds,
        Threshold::as_label,
    );
}
