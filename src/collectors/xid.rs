//! XID error events, counted by the event thread as they happen. Kept for
//! lost and hung GPUs: an XID 79 is exactly how a GPU gets lost.

use super::unix_seconds;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Xid),
    metrics: &[
        Metric {
            name: "nvidia_gpu_xid_errors_total",
            help: "XID error events since the exporter started, by XID code and, when the event names one, MIG instance.",
            kind: Kind::Counter,
            collect: errors,
        },
        Metric {
            name: "nvidia_gpu_xid_last_timestamp_seconds",
            help: "Unix time of the most recent event of this XID code on the GPU.",
            kind: Kind::Gauge,
            collect: last,
        },
    ],
};

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for x in &g.xids {
            out.gpu(g)
                .label("xid", x.xid)
                .label_opt("gpu_instance", x.gpu_instance)
                .label_opt("compute_instance", x.compute_instance)
                .set(x.count);
        }
    }
}

fn last<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for (i, x) in g.xids.iter().enumerate() {
            // One series per code: the latest over its MIG instances. The
            // list is short, so a quadratic scan beats allocating a map.
            if g.xids[..i].iter().any(|y| y.xid == x.xid) {
                continue;
            }
            let latest = g.xids[i..]
                .iter()
                .filter(|y| y.xid == x.xid)
                .map(|y| y.last_seen)
                .max();
            if let Some(t) = latest.and_then(unix_seconds) {
                out.gpu(g).label("xid", x.xid).set(t);
            }
        }
    }
}
