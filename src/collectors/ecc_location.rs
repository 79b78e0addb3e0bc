//! ECC error counters by memory location: the detail behind
//! `--collector.ecc.by-location`, for telling DRAM errors (row remaps)
//! from SRAM and cache errors once `ecc.rs`'s totals show errors. A family
//! of its own, so that `nvidia_gpu_ecc_errors_total`'s labels never depend
//! on a flag.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::EccLocation;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::EccByLocation),
    metrics: &[Metric {
        name: "nvidia_gpu_ecc_location_errors_total",
        help: "ECC errors by memory location, kind and counter scope (volatile: since driver load; aggregate: lifetime).",
        kind: Kind::Counter,
        collect: errors,
    }],
};

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for e in r
            .ecc_errors
            .iter()
            .filter(|e| e.location != EccLocation::All)
        {
            out.gpu(g)
                .label("error", e.error.as_label())
                .label("scope", e.scope.as_label())
                .label("location", e.location.as_label())
                .set(e.count);
        }
    }
}
