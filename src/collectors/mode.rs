//! Persistence, display and compute mode.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::ComputeMode;

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
            help: "Compute mode as a state set: 1 on the current mode, 0 on the others.",
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
        if let Some(current) = r.compute_mode {
            // Every mode, so `== 1` on any of them is a valid alert.
            for &mode in ComputeMode::ALL {
                out.gpu(g)
                    .label("mode", mode.as_label())
                    .set(mode == current);
            }
        }
    }
}
