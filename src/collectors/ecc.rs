//! ECC mode and error counters. Consumer GPUs have no ECC: absent.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Ecc),
    metrics: &[
        Metric {
            name: "nvidia_gpu_ecc_enabled",
            help: "1 if ECC is on: current, and pending (what applies after the next reboot).",
            kind: Kind::Gauge,
            collect: enabled,
        },
        Metric {
            name: "nvidia_gpu_ecc_errors_total",
            help: "ECC errors by kind, counter scope (volatile: since driver load; aggregate: lifetime) and memory location.",
            kind: Kind::Counter,
            collect: errors,
        },
    ],
};

fn enabled<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(m) = r.ecc_mode {
            out.gpu(g).label("state", "current").set(m.current);
            out.gpu(g).label("state", "pending").set(m.pending);
        }
    }
}

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for e in &r.ecc_errors {
            out.gpu(g)
                .label("error", e.error.as_label())
                .label("scope", e.scope.as_label())
                .label("location", e.location.as_label())
                .set(e.count);
        }
    }
}
