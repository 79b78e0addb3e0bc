//! NVLink-C2C, the link between a Grace CPU and its GPU, per link: the
//! state and the error counters that show a link degrading before it
//! fails (XID 173, "C2C Fatal Link Failure"). Absent on boards without
//! C2C, and the counters before R575 (`docs/metrics.md`).

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::C2c),
    metrics: &[
        Metric {
            name: "nvidia_gpu_c2c_link_up",
            help: "1 if the NVLink-C2C link between the Grace CPU and the GPU is active.",
            kind: Kind::Gauge,
            collect: up,
        },
        Metric {
            name: "nvidia_gpu_c2c_link_errors_total",
            help: "NVLink-C2C errors by link and kind: crc, replay, replay_b2b (back-to-back replays).",
            kind: Kind::Counter,
            collect: errors,
        },
    ],
};

fn up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.c2c_links {
            if let Some(up) = l.up {
                out.gpu(g).label("link", l.link).set(up);
            }
        }
    }
}

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for l in &r.c2c_links {
            for &(e, n) in &l.errors {
                out.gpu(g)
                    .label("link", l.link)
                    .label("error", e.as_label())
                    .set(n);
            }
        }
    }
}
