//! NVLink state, errors and traffic per link: the detail behind
//! `--collector.nvlink.per-link`, for finding the one link that
//! misbehaves once `nvlink.rs`'s per-GPU sums show that one does. Separate
//! families (with a `link` label) so that no family's labels depend on a
//! flag.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::NvlinkPerLink),
    metrics: &[
        Metric {
            name: "nvidia_gpu_nvlink_link_up",
            help: "1 if the NVLink link is active.",
            kind: Kind::Gauge,
            collect: up,
        },
        Metric {
            name: "nvidia_gpu_nvlink_link_errors_total",
            help: "NVLink errors by link and kind.",
            kind: Kind::Counter,
            collect: errors,
        },
        Metric {
            name: "nvidia_gpu_nvlink_link_bytes_total",
            help: "Bytes moved over the NVLink link by direction.",
            kind: Kind::Counter,
            collect: bytes,
        },
        Metric {
            name: "nvidia_gpu_nvlink_link_bit_error_ratio",
            help:
                "NVLink5 bit error rate of the link by kind: effective (after FEC) or symbol (raw).",
            kind: Kind::Gauge,
            collect: bit_error_rates,
        },
    ],
};

fn up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.nvlinks {
            out.gpu(g).label("link", l.link).set(l.up);
        }
    }
}

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.nvlinks {
            for &(e, n) in &l.errors {
                out.gpu(g)
                    .label("link", l.link)
                    .label("error", e.as_label())
                    .set(n);
            }
        }
    }
}

fn bytes<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.nvlinks {
            for (direction, v) in [("tx", l.tx_bytes), ("rx", l.rx_bytes)] {
                if let Some(v) = v {
                    out.gpu(g)
                        .label("link", l.link)
                        .label("direction", direction)
                        .set(v);
                }
            }
        }
    }
}

fn bit_error_rates<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.nvlinks {
            for &(kind, v) in &l.bit_error_rates {
                out.gpu(g)
                    .label("link", l.link)
                    .label("kind", kind.as_label())
                    .set(v);
            }
        }
    }
}
