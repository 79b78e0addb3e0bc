//! Workload attribution: which Slurm job, container, systemd service or
//! user holds each GPU and MIG device, and the memory it uses there
//! (`--workloads`).
//!
//! As with pod attribution, a separate family to join on, not labels on
//! every GPU series. The share is 1 for a device held by one workload and
//! 1/N for one shared by N, so that
//! `sum by (slurm_job) (metric * on(gpu, uuid) group_right nvidia_gpu_workload_share_ratio)`
//! splits a shared GPU instead of counting it N times. The workload's
//! labels are `kind` plus those its cgroup names (`slurm_job`,
//! `slurm_step`, `container_id`, `pod_uid`, `systemd_unit`, `cgroup`), the
//! processes' `uid` and `user`, and `container_name` where an engine
//! socket is given; never `job` or `instance`, which Prometheus owns.

use super::unix_seconds;
use crate::metric::{Collector, Kind, Metric, SampleBuilder, SampleSink, Scope};
use crate::snapshot::{GpuState, Workload, WorkloadHolding};

pub static COLLECTOR: Collector = Collector {
    // Switched by `--workloads`, not by a collector flag: without it the
    // snapshot carries no attribution and nothing is emitted.
    family: None,
    metrics: &[
        Metric {
            name: "nvidia_gpu_workload_share_ratio",
            help: "Share of a whole GPU held by a workload (Slurm job, container, service, user session) running processes on it: 1 when alone, 1/N when N share it.",
            kind: Kind::Gauge,
            collect: whole_gpu,
        },
        Metric {
            name: "nvidia_gpu_mig_workload_share_ratio",
            help: "Share of a MIG GPU instance held by a workload running processes on one of its compute instances: 1/N when N hold it.",
            kind: Kind::Gauge,
            collect: mig,
        },
        Metric {
            name: "nvidia_gpu_workload_memory_used_bytes",
            help: "GPU memory used by a workload's processes on a GPU or MIG device.",
            kind: Kind::Gauge,
            collect: memory,
        },
        Metric {
            name: "nvml_exporter_workloads_dropped",
            help: "Workload holdings (workload on device) left out of this exposition because the node has more than --workloads.limit.",
            kind: Kind::Gauge,
            collect: dropped,
        },
        Metric {
            name: "nvml_exporter_workloads_last_refresh_timestamp_seconds",
            help: "Unix time workload attribution last finished reading every process's cgroup and uid; it stops moving if attribution stalls.",
            kind: Kind::Gauge,
            collect: last_refresh,
        },
        Metric {
            name: "nvml_exporter_workload_read_errors_total",
            help: "Failed reads of workload attribution's sources (procfs entries, passwd, Slurm mapping files, container engine), by source and reason.",
            kind: Kind::Counter,
            collect: read_errors,
        },
    ],
};

/// Each holding with the GPU it is on.
fn holdings<'a>(scope: &Scope<'a>) -> impl Iterator<Item = (&'a GpuState, &'a WorkloadHolding)> {
    let gpus = &scope.snapshot.gpus;
    scope
        .snapshot
        .workloads
        .iter()
        .flat_map(|w| w.holdings.iter())
        .filter_map(move |h| gpus.iter().find(|g| g.index == h.gpu).map(|g| (g, h)))
}

fn labelled<'s, 'a>(b: SampleBuilder<'s, 'a>, h: &'a WorkloadHolding) -> SampleBuilder<'s, 'a> {
    workload_labels(b, &h.workload)
}

/// A workload's labels: `kind` and whatever else is known of it.
pub(super) fn workload_labels<'s, 'a>(
    b: SampleBuilder<'s, 'a>,
    w: &'a Workload,
) -> SampleBuilder<'s, 'a> {
    let b = b
        .label("kind", w.kind.as_label())
        .label_opt("slurm_job", w.slurm_job.as_ref())
        .label_opt("slurm_step", w.slurm_step.as_ref())
        .label_opt("container_id", w.container_id.as_ref())
        .label_opt("container_name", w.container_name.as_ref())
        .label_opt("pod_uid", w.pod_uid.as_ref())
        .label_opt("systemd_unit", w.systemd_unit.as_ref())
        .label_opt("cgroup", w.cgroup.as_ref())
        .label_opt("uid", w.uid)
        .label_opt("user", w.user.as_ref())
        .label_opt("namespace", w.namespace.as_ref())
        .label_opt("pod", w.pod.as_ref())
        .label_opt("container", w.container.as_ref());
    super::kubernetes::pod_labels(b, &w.pod_labels)
}

fn whole_gpu<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, h) in holdings(scope).filter(|(_, h)| h.gpu_instance.is_none()) {
        labelled(out.gpu(g), h).set(h.share);
    }
}

fn mig<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, h) in holdings(scope) {
        if let Some(gi) = h.gpu_instance {
            let b = out
                .gpu(g)
                .label("gpu_instance", gi)
                .label_opt("compute_instance", h.compute_instance);
            labelled(b, h).set(h.share);
        }
    }
}

fn memory<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, h) in holdings(scope) {
        if let Some(bytes) = h.memory_used_bytes {
            let b = out
                .gpu(g)
                .label_opt("gpu_instance", h.gpu_instance)
                .label_opt("compute_instance", h.compute_instance);
            labelled(b, h).set(bytes);
        }
    }
}

fn dropped<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(w) = &scope.snapshot.workloads {
        out.sample().set(w.dropped);
    }
}

fn last_refresh<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(t) = scope
        .snapshot
        .workloads
        .as_ref()
        .and_then(|w| w.last_refresh)
        .and_then(unix_seconds)
    {
        out.sample().set(t);
    }
}

fn read_errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for e in scope.snapshot.workloads.iter().flat_map(|w| &w.read_errors) {
        out.sample()
            .label("source", e.source.as_label())
            .label("reason", e.reason.as_label())
            .set(e.count);
    }
}
