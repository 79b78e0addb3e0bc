//! ECC mode and error counters, as NVML totals them over every memory
//! location. Consumer GPUs have no ECC: absent. Counters by location are
//! `ecc_location.rs`, behind `--collector.ecc.by-location`.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::EccLocation;

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
            help: "ECC errors over all memory locations by kind and counter scope (volatile: since driver load; aggregate: lifetime).",
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
        // NVML's own total, not a sum of the locations: it counts
        // locations that have no counter of their own.
        for e in r
            .ecc_errors
            .iter()
            .filter(|e| e.location == EccLocation::All)
        {
            out.gpu(g)
                .label("error", e.error.as_label())
                .label("scope", e.scope.as_label())
                .set(e.count);
        }
    }
}
