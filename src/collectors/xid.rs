//! XID error events, counted by the event thread as they happen and, with
//! `--collector.xid.kmsg`, from the kernel log (`xid_kmsg.rs`), each event
//! once. Kept for lost and hung GPUs: an XID 79 is exactly how a GPU gets
//! lost.
//!
//! Bounded: a GPU gets at most `--collector.xid.max-codes` label sets; the
//! events beyond, and codes outside NVIDIA's range, are counted in one
//! `xid="other"` series of the same families (so `sum()` over a family
//! still counts every event), and why they were folded in
//! `nvml_exporter_xid_events_folded_total`.

use super::unix_seconds;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Xid),
    metrics: &[
        Metric {
            name: "nvidia_gpu_xid_errors_total",
            help: "XID error events since the exporter started (with --collector.xid.kmsg, since boot as far back as the kernel log goes; an event NVML and the log both report counts once), by XID code and, when the event names one, MIG instance.",
            kind: Kind::Counter,
            collect: errors,
        },
        Metric {
            name: "nvidia_gpu_xid_last_timestamp_seconds",
            help: "Unix time of the most recent event of this XID code on the GPU.",
            kind: Kind::Gauge,
            collect: last,
        },
        Metric {
            name: "nvml_exporter_xid_last_wait_timestamp_seconds",
            help: "Unix time the XID event thread last completed a wait on NVML's event set (every 200 ms while it runs); one that stops moving is a stuck thread, whose GPUs' XIDs NVML no longer delivers. Absent while NVML is down.",
            kind: Kind::Gauge,
            collect: last_wait,
        },
        Metric {
            name: "nvml_exporter_xid_events_folded_total",
            help: "XID events counted as xid=\"other\" instead of under their own code, by reason (out_of_range: code not in NVIDIA's range; over_limit: the GPU already had --collector.xid.max-codes label sets).",
            kind: Kind::Counter,
            collect: folded,
        },
    ],
};

/// The `xid` label of the overflow series.
const OTHER: &str = "other";

fn errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for x in &g.xids {
            out.gpu(g)
                .label("xid", x.xid)
                .label_opt("gpu_instance", x.gpu_instance)
                .label_opt("compute_instance", x.compute_instance)
                .set(x.count);
        }
        if let Some(o) = &g.xid_other {
            out.gpu(g).label("xid", OTHER).set(o.count());
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
        if let Some(t) = g.xid_other.as_ref().and_then(|o| unix_seconds(o.last_seen)) {
            out.gpu(g).label("xid", OTHER).set(t);
        }
    }
}

fn last_wait<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(t) = scope.snapshot.xid_last_wait.and_then(unix_seconds) {
        out.sample().set(t);
    }
}

/// Present once a GPU has folded an event, one series per reason seen.
fn folded<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        let Some(o) = &g.xid_other else { continue };
        for (reason, n) in [
            ("out_of_range", o.out_of_range),
            ("over_limit", o.over_limit),
        ] {
            if n > 0 {
                out.gpu(g).label("reason", reason).set(n);
            }
        }
    }
}
