//! NVLink state, errors and traffic, per link. GPUs without NVLink have
//! no links listed: absent.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Nvlink),
    metrics: &[
        Metric {
            name: "nvidia_gpu_nvlink_up",
            help: "1 if the NVLink link is active.",
            kind: Kind::Gauge,
            collect: up,
        },
        Metric {
            name: "nvidia_gpu_nvlink_errors_total",
            help: "NVLink errors by link and kind.",
            kind: Kind::Counter,
            collect: errors,
        },
        Metric {
            name: "nvidia_gpu_nvlink_bytes_total",
            help: "Bytes moved over the NVLink link by direction.",
            kind: Kind::Counter,
            collect: bytes,
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
