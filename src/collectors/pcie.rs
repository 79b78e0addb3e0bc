//! PCIe link, replay errors and cumulative traffic.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::Pcie;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Pcie),
    metrics: &[
        Metric {
            name: "nvidia_gpu_pcie_link_generation",
            help: "PCIe link generation, current and the maximum the GPU and system support.",
            kind: Kind::Gauge,
            collect: |s, o| pair(s, o, |p| (p.link_generation_current, p.link_generation_max)),
        },
        Metric {
            name: "nvidia_gpu_pcie_link_width",
            help: "PCIe link width in lanes, current and maximum.",
            kind: Kind::Gauge,
            collect: |s, o| pair(s, o, |p| (p.link_width_current, p.link_width_max)),
        },
        Metric {
            name: "nvidia_gpu_pcie_replay_errors_total",
            help: "PCIe replays (retransmitted packets) since the driver was loaded.",
            kind: Kind::Counter,
            collect: replay,
        },
        Metric {
            name: "nvidia_gpu_pcie_bytes_total",
            help: "Bytes moved over PCIe by direction, from NVML's cumulative counters.",
            kind: Kind::Counter,
            collect: bytes,
        },
    ],
};

fn pair<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    field: fn(&Pcie) -> (Option<u32>, Option<u32>),
) {
    for (g, r) in scope.readings() {
        let (current, max) = field(&r.pcie);
        for (which, v) in [("current", current), ("max", max)] {
            if let Some(v) = v {
                out.gpu(g).label("which", which).set(v);
            }
        }
    }
}

fn replay<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(v) = r.pcie.replay_errors {
            out.gpu(g).set(v);
        }
    }
}

fn bytes<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        for (direction, v) in [("tx", r.pcie.tx_bytes), ("rx", r.pcie.rx_bytes)] {
            if let Some(v) = v {
                out.gpu(g).label("direction", direction).set(v);
            }
        }
    }
}
