//! GPM activity (Hopper and newer), per GPU and per MIG GPU instance.
//! A100 has no GPM: there these families are absent, not zero.
//!
//! By default only the four metrics the dashboards and the per-instance
//! view need ([`DEFAULT_METRICS`]); `--collector.gpm.all-metrics` adds the
//! pipe (fp64, fp32, fp16, integer), occupancy and media engine ones. On a
//! 16 x 7 MIG node that is 448 series instead of 1,344.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::GpmMetric;

/// Without the detail switch the sampler reads only these, too.
pub const DEFAULT_METRICS: &[GpmMetric] = GpmMetric::DEFAULT;

fn wanted(scope: &Scope<'_>) -> impl Fn(&GpmMetric) -> bool {
    let all = scope.families.contains(Family::GpmAllMetrics);
    move |m| all || DEFAULT_METRICS.contains(m)
}

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
    let wanted = wanted(scope);
    for (g, r) in scope.readings() {
        for &(metric, v) in r.activity.iter().filter(|(m, _)| wanted(m)) {
            out.gpu(g).label("metric", metric.as_label()).set(v);
        }
    }
}

fn mig_activity<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    let wanted = wanted(scope);
    for (g, r) in scope.readings() {
        for gi in &r.mig {
            for &(metric, v) in gi.activity.iter().filter(|(m, _)| wanted(m)) {
                out.gpu(g)
                    .label("gpu_instance", gi.gpu_instance)
                    .label("metric", metric.as_label())
                    .set(v);
            }
        }
    }
}
