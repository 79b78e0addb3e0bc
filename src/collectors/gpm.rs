//! GPM activity (Hopper and newer), per GPU and per MIG GPU instance.
//! A100 has no GPM: there these families are absent, not zero.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Gpm),
    metrics: &[
        Metric {
            name: "nvidia_gpu_activity_ratio",
            help: "GPM activity of the whole GPU as a fraction of its peak, by metric.",
            kind: Kind::Gauge,
            collect: activity,
        },
        Metric {
            name: "nvidia_gpu_mig_activity_ratio",
            help: "GPM activity of one MIG GPU instance as a fraction of its peak, by metric.",
            kind: Kind::Gauge,
            collect: mig_activity,
        },
    ],
};

fn activity<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(metric, v) in &r.activity {
            out.gpu(g).label("metric", metric.as_label()).set(v);
        }
    }
}

fn mig_activity<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for gi in &r.mig {
            for &(metric, v) in &gi.activity {
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .label("metric", metric.as_label())
                    .set(v);
            }
        }
    }
}
