//! The verdict: what to do with each GPU now, and why
//! (`nvidia_gpu_recommended_action`). One series per GPU, plus one per MIG
//! instance the GPU has whose own application fault asks for a restart;
//! the value is the action's rank, so `max by (instance)` gives a node's
//! worst. A GPU the exporter cannot name (lost or failing every call since
//! before it started) gets one keyed by the `pci_bus_id` its kernel-log
//! lines give, with no `gpu` or `uuid`. The rules, and when each action
//! clears, are in `crate::verdict`.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Verdict),
    metrics: &[Metric {
        name: "nvidia_gpu_recommended_action",
        help: "What to do with the GPU (or MIG instance) now, in the action label (none, restart_app, reset_gpu, reboot, check_hardware, rma; the value is its rank, 0 to 5), and the signal that decided it in the reason label. Absent while the GPU cannot be judged (NVML down, not yet sampled, denied, failing), except for a GPU NVML cannot name whose kernel-log lines ask for an action: that one is keyed by pci_bus_id.",
        kind: Kind::Gauge,
        collect: recommended_action,
    }],
};

fn recommended_action<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for v in &g.verdicts {
            out.gpu(g)
                .label_opt("gpu_instance", v.gpu_instance)
                .label_opt("compute_instance", v.compute_instance)
                .label("action", v.action.as_label())
                .label("reason", v.reason)
                .set(v.action as u64);
        }
    }
    let Some(log) = &scope.snapshot.kernel_log else {
        return;
    };
    for v in &log.unnamed_gpus {
        out.sample()
            .label("pci_bus_id", v.pci_bus_id.as_str())
            .label("action", v.action.as_label())
            .label("reason", v.reason)
            .set(v.action as u64);
    }
}
