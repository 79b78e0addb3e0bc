//! Measured use per workload (`workload_usage`, with `--workloads`):
//! counters of SM and engine time, energy and device time held, per
//! workload and device, and how long a held device has been idle. Computed
//! in `src/workloads/usage.rs` from what `src/nvml/sampler/workload_usage/`
//! reads; the labels are those of `nvidia_gpu_workload_share_ratio`.

use super::workloads::workload_labels;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleBuilder, SampleSink, Scope};
use crate::snapshot::{GpuState, UsageAccount, WorkloadUsage};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::WorkloadUsage),
    metrics: &[
        Metric {
            name: "nvidia_gpu_workload_sm_seconds_total",
            help: "SM busy time of a workload's processes on a GPU or MIG device, in seconds of the whole GPU, as NVML measured it (the driver's samples by per-process utilization; on MIG the instance's GPM graphics activity); estimate=\"mps\": an MPS client's part of its server's time, split by CPU time.",
            kind: Kind::Counter,
            collect: sm,
        },
        Metric {
            name: "nvidia_gpu_workload_engine_seconds_total",
            help: "Memory, encoder and decoder busy time of a workload's processes on a GPU, in seconds, from NVML's per-process utilization.",
            kind: Kind::Counter,
            collect: engines,
        },
        Metric {
            name: "nvidia_gpu_workload_energy_joules_total",
            help: "A workload's part of its GPU's energy by use: the GPU's energy counter apportioned by SM time (estimate=\"mps\": by an MPS client's estimated SM time); the rest is unattributed.",
            kind: Kind::Counter,
            collect: energy,
        },
        Metric {
            name: "nvidia_gpu_workload_held_energy_joules_total",
            help: "A workload's part of its GPU's energy by holding: the GPU's energy counter apportioned by held share (a MIG device by its slices), idle time included, so a workload holding a GPU alone pays all of it.",
            kind: Kind::Counter,
            collect: held_energy,
        },
        Metric {
            name: "nvidia_gpu_unattributed_energy_joules_total",
            help: "A GPU's energy charged to no workload: idle (SM time no workload used), over_limit (workloads beyond --workloads.limit), unknown (measured use no workload is known to hold). With the workloads' energy it adds up to the GPU's.",
            kind: Kind::Counter,
            collect: unattributed,
        },
        Metric {
            name: "nvidia_gpu_workload_held_seconds_total",
            help: "Device time a workload held a GPU or MIG device, in GPU-seconds: elapsed time times its share of the device, a MIG device counted as its part of the GPU.",
            kind: Kind::Counter,
            collect: held,
        },
        Metric {
            name: "nvml_exporter_process_utilization_dropped_total",
            help: "Entries of NVML's per-process utilization answers (and device samples) left out as garbage, by reason: stale (not newer than the last counted), future (stamped far ahead), unlisted (a pid NVML does not list on the GPU), over_100 (a percent above 100); from 0 on every GPU whose per-process use is read.",
            kind: Kind::Counter,
            collect: dropped,
        },
        Metric {
            name: "nvidia_gpu_workload_held_idle_seconds",
            help: "How long a workload has held a GPU or MIG device idle (measured SM use below --workloads.idle-threshold, or no process where use is not measured); present only while it is.",
            kind: Kind::Gauge,
            collect: held_idle,
        },
    ],
};

fn usage<'a>(scope: &Scope<'a>) -> Option<&'a WorkloadUsage> {
    scope.snapshot.workloads.as_ref()?.usage.as_ref()
}

/// Each account with its GPU.
fn accounts<'a>(scope: &Scope<'a>) -> impl Iterator<Item = (&'a GpuState, &'a UsageAccount)> {
    let gpus = &scope.snapshot.gpus;
    usage(scope)
        .into_iter()
        .flat_map(|u| &u.accounts)
        .filter_map(move |a| gpus.iter().find(|g| g.index == a.gpu).map(|g| (g, a)))
}

/// A sample of an account's device and workload.
fn account<'s, 'a>(
    out: &'s mut SampleSink<'a>,
    g: &'a GpuState,
    a: &'a UsageAccount,
) -> SampleBuilder<'s, 'a> {
    let b = out
        .gpu(g)
        .label_opt("gpu_instance", a.gpu_instance)
        .label_opt("compute_instance", a.compute_instance);
    workload_labels(b, &a.workload)
}

fn sm<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        if let Some(v) = a.sm_seconds {
            account(out, g, a).set(v);
        }
        if let Some(v) = a.mps_sm_seconds {
            account(out, g, a).label("estimate", "mps").set(v);
        }
    }
}

fn engines<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        for (engine, v) in &a.engine_seconds {
            account(out, g, a)
                .label("engine", engine.as_label())
                .set(*v);
        }
    }
}

fn energy<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        if let Some(v) = a.energy_joules {
            account(out, g, a).set(v);
        }
        if let Some(v) = a.mps_energy_joules {
            account(out, g, a).label("estimate", "mps").set(v);
        }
    }
}

fn held_energy<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        if let Some(v) = a.held_energy_joules {
            account(out, g, a).set(v);
        }
    }
}

fn dropped<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for (reason, n) in r.usage.iter().flat_map(|u| &u.dropped) {
            out.gpu(g).label("reason", reason.as_label()).set(*n as f64);
        }
    }
}

fn held<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        account(out, g, a).set(a.held_seconds);
    }
}

fn held_idle<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, a) in accounts(scope) {
        if let Some(v) = a.idle_seconds {
            account(out, g, a).set(v);
        }
    }
}

fn unattributed<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for e in usage(scope).iter().flat_map(|u| &u.unattributed) {
        if let Some(g) = scope.snapshot.gpus.iter().find(|g| g.index == e.gpu) {
            out.gpu(g)
                .label("reason", e.reason.as_label())
                .set(e.joules);
        }
    }
}
