//! Pod attribution: which namespace, pod and container holds each GPU and
//! MIG device (`--kubernetes`).
//!
//! Attribution is a separate family to join on, not labels on every GPU
//! series: pods come and go far more often than GPUs, and labels on the
//! device series would start a new series for every measurement each time
//! a pod changes, and leave series of GPUs held by nobody unlabelled. The
//! value is the holder's share of the device (1 for a GPU held alone, 1/N
//! for one time-sliced among N containers) so that
//! `sum by (namespace) (metric * on(gpu, uuid) group_right nvidia_gpu_pod_share_ratio)`
//! splits a shared GPU's power or memory instead of counting it N times.

use std::collections::BTreeMap;

use super::unix_seconds;
use crate::metric::{Collector, Kind, Metric, SampleBuilder, SampleSink, Scope};
use crate::snapshot::{GpuState, PodLabels};

pub static COLLECTOR: Collector = Collector {
    // Switched by `--kubernetes`, not by a collector flag: without it the
    // snapshot carries no attribution and nothing is emitted.
    family: None,
    metrics: &[
        Metric {
            name: "nvidia_gpu_pod_share_ratio",
            help: "Share of a whole GPU held by a Kubernetes container: 1 when held alone, 1/N when shared by N (time-slicing, MPS).",
            kind: Kind::Gauge,
            collect: whole_gpu,
        },
        Metric {
            name: "nvidia_gpu_mig_pod_share_ratio",
            help: "Share of a MIG GPU instance held by a Kubernetes container through one of its MIG devices: 1/N when N containers hold devices of the instance.",
            kind: Kind::Gauge,
            collect: mig,
        },
        Metric {
            name: "nvml_exporter_kubernetes_up",
            help: "1 if the last call to the kubelet's pod-resources API succeeded.",
            kind: Kind::Gauge,
            collect: up,
        },
        Metric {
            name: "nvml_exporter_kubernetes_refresh_errors_total",
            help: "Failed calls to the kubelet's pod-resources API.",
            kind: Kind::Counter,
            collect: refresh_errors,
        },
        Metric {
            name: "nvml_exporter_kubernetes_last_refresh_timestamp_seconds",
            help: "When pod attribution was last refreshed from the kubelet.",
            kind: Kind::Gauge,
            collect: last_refresh,
        },
        Metric {
            name: "nvml_exporter_kubernetes_claimed_devices",
            help: "Devices of the DRA claims in the kubelet's last answer, by state: resolved to a GPU or MIG device, unresolved (NVIDIA's GPU driver's, but not found), or another driver's.",
            kind: Kind::Gauge,
            collect: claimed_devices,
        },
        Metric {
            name: "nvml_exporter_kubernetes_read_errors_total",
            help: "Reads for pod attribution that failed, by source (cdi, kubelet_dra, resource_slices, pod_labels) and reason; each is logged once.",
            kind: Kind::Counter,
            collect: read_errors,
        },
    ],
};

fn whole_gpu<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        let holders: Vec<_> = g.pods.iter().filter(|p| p.gpu_instance.is_none()).collect();
        for p in &holders {
            let b = out
                .gpu(g)
                .label("namespace", &p.namespace)
                .label("pod", &p.pod)
                .label("container", &p.container);
            pod_labels(b, &p.labels).set(1.0 / holders.len() as f64);
        }
    }
}

/// The pod's allowlisted labels (`--kubernetes.pod-labels`), after the
/// exporter's own.
pub(super) fn pod_labels<'s, 'a>(
    mut b: SampleBuilder<'s, 'a>,
    labels: &'a PodLabels,
) -> SampleBuilder<'s, 'a> {
    // The DRA attributes (--kubernetes.dra-labels) are dcgm-exporter's, for
    // the DCGM series only.
    for (name, value) in labels.iter().filter(|(n, _)| !n.starts_with("dra_")) {
        b = b.label(name, value);
    }
    b
}

fn mig<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for (gpu_instance, holders) in mig_holders(g) {
            for p in &holders {
                let b = out
                    .gpu(g)
                    .label("gpu_instance", gpu_instance)
                    .label_opt("compute_instance", p.compute_instance)
                    .label("namespace", &p.namespace)
                    .label("pod", &p.pod)
                    .label("container", &p.container);
                pod_labels(b, &p.labels).set(1.0 / holders.len() as f64);
            }
        }
    }
}

fn mig_holders(g: &GpuState) -> BTreeMap<u32, Vec<&crate::snapshot::PodAttribution>> {
    let mut by_instance: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    for p in &g.pods {
        if let Some(gi) = p.gpu_instance {
            by_instance.entry(gi).or_default().push(p);
        }
    }
    by_instance
}

fn up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(k) = &scope.snapshot.kubernetes {
        out.sample().set(k.up);
    }
}

fn claimed_devices<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(k) = &scope.snapshot.kubernetes {
        for (state, n) in &k.claimed_devices {
            out.sample().label("state", state.as_label()).set(*n);
        }
    }
}

fn read_errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(k) = &scope.snapshot.kubernetes {
        for (source, reason, n) in &k.read_errors {
            out.sample()
                .label("source", source.as_label())
                .label("reason", reason.as_label())
                .set(*n);
        }
    }
}

fn refresh_errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(k) = &scope.snapshot.kubernetes {
        out.sample().set(k.refresh_errors);
    }
}

fn last_refresh<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    let at = scope
        .snapshot
        .kubernetes
        .as_ref()
        .and_then(|k| k.last_refresh);
    if let Some(seconds) = at.and_then(unix_seconds) {
        out.sample().set(seconds);
    }
}
