//! Memory health after ECC errors: retired pages (before Ampere), remapped
//! rows and the row remapper histogram (Ampere and newer), the SRAM error
//! threshold, and the driver's recovery action. The histogram and the SRAM
//! threshold are NVIDIA's explicit RMA signals.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::RemappedRows;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Retirement),
    metrics: &[
        Metric {
            name: "nvidia_gpu_retired_pages",
            help: "Memory pages retired, by the ECC error that caused it.",
            kind: Kind::Gauge,
            collect: retired,
        },
        Metric {
            name: "nvidia_gpu_retired_pages_pending",
            help: "1 if a page is waiting to be retired at the next reboot.",
            kind: Kind::Gauge,
            collect: retired_pending,
        },
        Metric {
            name: "nvidia_gpu_remapped_rows",
            help: "Memory rows remapped, by the error that caused it.",
            kind: Kind::Gauge,
            collect: remapped,
        },
        Metric {
            name: "nvidia_gpu_remapped_rows_pending",
            help: "1 if a row remap is waiting for the GPU to be reset.",
            kind: Kind::Gauge,
            collect: |s, o| remap_flag(s, o, |r| r.pending),
        },
        Metric {
            name: "nvidia_gpu_remapped_rows_failed",
            help: "1 if a row remap failed: the GPU needs service.",
            kind: Kind::Gauge,
            collect: |s, o| remap_flag(s, o, |r| r.failed),
        },
        Metric {
            name: "nvidia_gpu_remapper_banks",
            help: "Memory banks by spare rows left for remapping (max, high, partial, low, none).",
            kind: Kind::Gauge,
            collect: remapper_banks,
        },
        Metric {
            name: "nvidia_gpu_sram_uncorrectable_threshold_exceeded",
            help: "1 if uncorrectable SRAM errors crossed NVIDIA's RMA threshold.",
            kind: Kind::Gauge,
            collect: sram_threshold,
        },
        Metric {
            name: "nvidia_gpu_recovery_action",
            help: "Recovery the driver asks for (NVML's nvmlGpuRecoveryAction_t): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover the IMEX domain, 6 PCIe bus reset, 7 system reboot.",
            kind: Kind::Gauge,
            collect: recovery,
        },
    ],
};

fn retired<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(cause, n) in &r.retired_pages {
            out.gpu(g).label("cause", cause.as_label()).set(n);
        }
    }
}

fn retired_pending<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(p) = r.retired_pages_pending {
            out.gpu(g).set(p);
        }
    }
}

fn remapped<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(rows) = &r.remapped_rows {
            out.gpu(g)
                .label("cause", "correctable")
                .set(rows.correctable);
            out.gpu(g)
                .label("cause", "uncorrectable")
                .set(rows.uncorrectable);
        }
    }
}

fn remap_flag<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>, flag: fn(&RemappedRows) -> bool) {
    for (g, r) in scope.readings() {
        if let Some(rows) = &r.remapped_rows {
            out.gpu(g).set(flag(rows));
        }
    }
}

fn recovery<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(a) = r.recovery_action {
            out.gpu(g).set(a);
        }
    }
}

fn remapper_banks<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for &(level, n) in &r.remapper_banks {
            out.gpu(g).label("spare_rows", level.as_label()).set(n);
        }
    }
}

fn sram_threshold<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(exceeded) = r.sram_threshold_exceeded {
            out.gpu(g).set(exceeded);
        }
    }
}
