//! NVLink per GPU: how many links are up and down, and errors and traffic
//! summed over the GPU's links. GPUs without NVLink have no links listed:
//! absent. The per-link series are `nvlink_link.rs`, behind
//! `--collector.nvlink.per-link` (18 links make an H100 120 series).
//!
//! The sums are taken here from the per-link readings of the snapshot, so
//! the two views always agree. A sum covers the links that reported that
//! error kind or direction in this poll: CRC data errors, for one, exist
//! only for links 0-11 (legacy field ids). A link whose counters vanish
//! lowers the sum, which Prometheus reads as a counter reset, as it does
//! for the per-link counters when the driver reloads.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope, Value};
use crate::snapshot::NvLinkError;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Nvlink),
    metrics: &[
        Metric {
            name: "nvidia_gpu_nvlink_links",
            help: "NVLink links of the GPU by state (up or down).",
            kind: Kind::Gauge,
            collect: links,
        },
        Metric {
            name: "nvidia_gpu_nvlink_errors_total",
            help: "NVLink errors by kind (DL counters up to NVLink4, link recovery and effective errors on NVLink5), summed over the GPU's links.",
            kind: Kind::Counter,
            collect: errors,
        },
        Metric {
            name: "nvidia_gpu_nvlink_bytes_total",
            help: "Bytes moved over NVLink by direction, summed over the GPU's links.",
            kind: Kind::Counter,
            collect: bytes,
        },
    ],
};

fn links<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if r.nvlinks.is_empty() {
            continue;
        }
        let up = r.nvlinks.iter().filter(|l| l.up).count();
        // Both states always, so `{state="down"} > 0` alerts from zero.
        out.gpu(g).label("state", "up").set(up);
        out.gpu(g).label("state", "down").set(r.nvlinks.len() - up);
    }
}

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &kind in NvLinkError::ALL.iter().filter(|k| k.summed_by_default()) {
            let per_link = r
                .nvlinks
                .iter()
                .filter_map(|l| l.errors.iter().find(|(k, _)| *k == kind).map(|&(_, n)| n));
            if let Some(total) = sum(per_link) {
                out.gpu(g).label("error", kind.as_label()).set(total);
            }
        }
    }
}

fn bytes<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for (direction, tx) in [("tx", true), ("rx", false)] {
            if let Some(total) = sum(r.nvlink_bytes(tx).into_iter()) {
                out.gpu(g).label("direction", direction).set(total);
            }
        }
    }
}

/// The sum of the readings, `None` when there are none (absent, not 0).
/// Exact while it fits in a u64; beyond (18 links of byte counters can
/// pass 2^64 together long before one does) it goes on as a float rather
/// than wrapping, which would read as a counter reset.
fn sum(readings: impl Iterator<Item = u64>) -> Option<Value> {
    let mut any = false;
    let mut total: u128 = 0;
    for n in readings {
        any = true;
        total += u128::from(n);
    }
    any.then(|| match u64::try_from(total) {
        Ok(n) => Value::Uint(n),
        Err(_) => Value::Float(total as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_is_absent_without_readings_and_exact_within_u64() {
        assert_eq!(sum(std::iter::empty()), None);
        assert_eq!(sum([0u64].into_iter()), Some(Value::Uint(0)));
        assert_eq!(sum([3u64, 4, 5].into_iter()), Some(Value::Uint(12)));
        assert_eq!(
            sum([u64::MAX - 1, 1].into_iter()),
            Some(Value::Uint(u64::MAX))
        );
        assert_eq!(
            sum([u64::MAX, u64::MAX].into_iter()),
            Some(Value::Float(2.0 * u64::MAX as f64))
        );
    }
}
