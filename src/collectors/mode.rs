//! Persistence, display and compute mode.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Mode),
    metrics: &[
        Metric {
            name: "nvidia_gpu_persistence_mode_enabled",
            help: "1 if persistence mode is on (the driver stays loaded with no client).",
            kind: Kind::Gauge,
            collect: persistence,
        },
        Metric {
            name: "nvidia_gpu_display_active",
            help: "1 if a display is initialized on the GPU.",
            kind: Kind::Gauge,
            collect: display,
        },
        Metric {
            name: "nvidia_gpu_compute_mode",
            help: "Compute mode of the GPU: one series, labelled with the current mode, value 1.",
            kind: Kind::Gauge,
            collect: compute_mode,
        },
    ],
};

fn persistence<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(on) = r.persistence_mode {
            out.gpu(g).set(on);
        }
    }
}

fn display<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(on) = r.display_active {
            out.gpu(g).set(on);
        }
    }
}

fn compute_mode<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        // The current mode alone: the other three would be a series
        // each per GPU that is always 0 (the mode rarely changes, and the
        // old mode's series goes stale when it does).
        if let Some(current) = r.compute_mode {
            out.gpu(g).label("mode", current.as_label()).set(1u64);
        }
    }
}
