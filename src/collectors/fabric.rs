//! NVLink fabric registration and health of each GPU on NVSwitch systems
//! (Hopper and newer): until the fabric manager has registered a GPU, CUDA
//! cannot use it, and a registered GPU of an NVL72 rack can still be
//! unhealthy. Absent on GPUs without a fabric. The outcome of a completed
//! registration is a label of the state, not a second series, because it
//! means nothing before the state is completed.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::FabricHealth;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Fabric),
    metrics: &[
        Metric {
            name: "nvidia_gpu_fabric_state",
            help: "NVLink fabric registration state: 1 not started, 2 in progress, 3 completed.",
            kind: Kind::Gauge,
            collect: state,
        },
        Metric {
            name: "nvidia_gpu_fabric_health",
            help: "NVML's NVLink fabric health summary: 1 healthy, 2 unhealthy, 3 limited capacity.",
            kind: Kind::Gauge,
            collect: summary,
        },
        Metric {
            name: "nvidia_gpu_fabric_health_issue",
            help: "1 while an NVLink fabric health condition the driver reports holds for the GPU; absent while none does.",
            kind: Kind::Gauge,
            collect: issues,
        },
        Metric {
            name: "nvidia_gpu_fabric_info",
            help: "The NVLink partition of the GPU in a multi-node NVLink cluster (NVL72): clique id and cluster UUID.",
            kind: Kind::Gauge,
            collect: info,
        },
    ],
};

fn state<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(f) = &r.fabric {
            let status = match (f.state, f.registered) {
                (3, true) => "success",
                (3, false) => "failure",
                _ => "pending",
            };
            out.gpu(g).label("status", status).set(f.state);
        }
    }
}

fn summary<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(s) = r.fabric.as_ref().and_then(|f| f.health_summary) {
            // NVML's own code as the value, its name as the label.
            let code: u32 = match s {
                FabricHealth::Healthy => 1,
                FabricHealth::Unhealthy => 2,
                FabricHealth::LimitedCapacity => 3,
            };
            out.gpu(g).label("summary", s.as_label()).set(code);
        }
    }
}

fn issues<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        // Only the conditions that hold: a healthy NVL72 GPU reports four
        // or five that do not, which would cost every GPU of the rack as
        // many series (docs/metrics.md, "Default set and switches").
        for &(issue, holds) in r.fabric.iter().flat_map(|f| &f.health_issues) {
            if holds {
                out.gpu(g).label("issue", issue.as_label()).set(1u32);
            }
        }
    }
}

fn info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(p) = r.fabric.as_ref().and_then(|f| f.partition.as_ref()) {
            out.gpu(g)
                .label("clique_id", p.clique_id)
                .label("cluster_uuid", p.cluster_uuid.as_str())
                .set(1u32);
        }
    }
}
