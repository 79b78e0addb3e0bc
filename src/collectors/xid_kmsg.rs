//! The kernel log as an XID source (`--collector.xid.kmsg`): NVSwitch SXIDs
//! (`nvidia_nvswitch_sxid_errors_total`, bounded like the XIDs), and how
//! reading the log goes. The GPUs' XIDs from the log are counted in
//! `nvidia_gpu_xid_errors_total` (`xid.rs`).

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::XidKmsg),
    metrics: &[
        Metric {
            name: "nvidia_nvswitch_sxid_errors_total",
            help: "NVSwitch SXID errors in the kernel log since boot, by switch (PCI address) and SXID code; codes past --collector.xid.max-codes per switch are counted as sxid=\"other\".",
            kind: Kind::Counter,
            collect: sxids,
        },
        Metric {
            name: "nvml_exporter_kernel_log_up",
            help: "1 while the kernel log (--path.kmsg) is open and followed, 0 while it cannot be opened or a read is stuck.",
            kind: Kind::Gauge,
            collect: up,
        },
        Metric {
            name: "nvml_exporter_kernel_log_problems_total",
            help: "Problems reading the kernel log since start, by kind (unreadable, read_error, stalled, malformed, oversized, out_of_order, overrun, rotated, truncated, unknown_gpu, too_many_switches, user_space); each kind is logged once.",
            kind: Kind::Counter,
            collect: problems,
        },
    ],
};

fn sxids<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    let Some(log) = &scope.snapshot.kernel_log else {
        return;
    };
    for s in &log.sxids {
        let sample = out.sample().label("nvswitch", s.switch.as_str());
        match s.sxid {
            Some(code) => sample.label("sxid", code),
            None => sample.label("sxid", "other"),
        }
        .set(s.count);
    }
}

fn up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(log) = &scope.snapshot.kernel_log {
        out.sample().set(log.up);
    }
}

fn problems<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    let Some(log) = &scope.snapshot.kernel_log else {
        return;
    };
    for (p, n) in &log.problems {
        out.sample().label("reason", p.as_label()).set(*n);
    }
}
