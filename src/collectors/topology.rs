//! The GPU topology as `nvidia-smi topo -m` shows it: per ordered pair of
//! GPUs the connection nvidia-smi prints (`NV<n>`, else the PCIe level)
//! and its NVLink count, per GPU the CPUs and NUMA nodes near it. Each
//! GPU's row comes from its own readings (`sampler/topology.rs`); the pair
//! is joined here with the peer's row, as nvidia-smi joins them.
//!
//! The NVLink count of a pair follows nvidia-smi: a link that reaches the
//! peer GPU itself counts for that peer; on NVSwitch systems a link that
//! reaches an NVSwitch counts for every GPU on the fabric (every GPU with
//! a link to an NVSwitch), so an HGX H100's GPUs each show NV18 to every
//! other (all 18 links into the switches). A GPU with a link down shows
//! NV17 in its row to every peer.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::{GpuState, GpuTopology};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Topology),
    metrics: &[
        Metric {
            name: "nvidia_gpu_topology_link_info",
            help: "How the GPU reaches peer_gpu, as nvidia-smi topo -m prints it: link is NV<n> (n NVLink links), else the PCIe level PIX, PXB, PHB, NODE or SYS.",
            kind: Kind::Gauge,
            collect: link_info,
        },
        Metric {
            name: "nvidia_gpu_topology_nvlinks",
            help: "Active NVLink links by which the GPU reaches peer_gpu (directly or through NVSwitches), as nvidia-smi counts them; 0: PCIe only. Absent on GPUs without NVLink.",
            kind: Kind::Gauge,
            collect: nvlinks,
        },
        Metric {
            name: "nvidia_gpu_cpu_affinity_info",
            help: "The CPUs (cpus) and NUMA nodes (numa_nodes) near the GPU, as nvidia-smi topo -m prints its CPU Affinity and NUMA Affinity columns.",
            kind: Kind::Gauge,
            collect: affinity,
        },
        Metric {
            name: "nvidia_gpu_numa_node",
            help: "The GPU's own NUMA node, on platforms where the GPU memory is one (nvidia-smi's GPU NUMA ID); absent elsewhere.",
            kind: Kind::Gauge,
            collect: numa_node,
        },
    ],
};

/// `NV1` .. `NV18`: label values must outlive the scrape's borrow of the
/// snapshot; NVML has at most `NVML_NVLINK_MAX_LINKS` (18) links a GPU.
const NV: [&str; 19] = [
    "NV0", "NV1", "NV2", "NV3", "NV4", "NV5", "NV6", "NV7", "NV8", "NV9", "NV10", "NV11", "NV12",
    "NV13", "NV14", "NV15", "NV16", "NV17", "NV18",
];

/// `nvmlGpuTopologyLevel_t` as nvidia-smi's legend names it.
pub fn pcie_label(level: u32) -> Option<&'static str> {
    match level {
        10 => Some("PIX"),
        20 => Some("PXB"),
        30 => Some("PHB"),
        40 => Some("NODE"),
        50 => Some("SYS"),
        // INTERNAL (two GPUs on one board) has no column label.
        _ => None,
    }
}

/// Links by which `me` reaches `peer`; `None` when `me` has no NVLink or
/// the peer's row is unknown (lost, not read yet).
pub fn nvlinks_to(me: &GpuTopology, peer: &GpuState) -> Option<u32> {
    let mine = me.nvlink.as_ref()?;
    let theirs = peer.readings.as_ref()?.topology.as_ref()?;
    let direct = peer.identity.pci_bus_id.as_ref().map_or(0, |bus| {
        mine.to_gpu
            .iter()
            .filter(|(b, _)| b.eq_ignore_ascii_case(bus))
            .map(|(_, n)| n)
            .sum::<u32>()
    });
    let on_fabric = theirs.nvlink.as_ref().is_some_and(|t| t.to_switch > 0);
    Some(direct + if on_fabric { mine.to_switch } else { 0 })
}

/// Every (GPU, its row, peer, peer's PCIe level) the scrape knows.
fn pairs<'a>(scope: &Scope<'a>) -> Vec<(&'a GpuState, &'a GpuTopology, &'a GpuState, u32)> {
    let mut out = Vec::new();
    for (g, r) in scope.readings() {
        let Some(t) = r.topology.as_deref() else {
            continue;
        };
        for &(peer, level) in &t.pcie {
            if let Some(p) = scope.gpus().find(|p| p.index == peer) {
                out.push((g, t, p, level));
            }
        }
    }
    out
}

fn link_info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, t, p, level) in pairs(scope) {
        let label = match nvlinks_to(t, p) {
            Some(n) if n > 0 => NV.get(n as usize).copied(),
            // The peer's row unknown: whether NVLink reaches it is too.
            None if t.nvlink.is_some() => None,
            _ => pcie_label(level),
        };
        if let Some(link) = label {
            out.gpu(g)
                .label("peer_gpu", p.index)
                .label("peer_uuid", &p.uuid)
                .label("link", link)
                .set(1u32);
        }
    }
}

fn nvlinks<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, t, p, _) in pairs(scope) {
        if let Some(n) = nvlinks_to(t, p) {
            out.gpu(g)
                .label("peer_gpu", p.index)
                .label("peer_uuid", &p.uuid)
                .set(n);
        }
    }
}

fn affinity<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        let Some(t) = r.topology.as_deref() else {
            continue;
        };
        if t.cpus.is_none() && t.numa_nodes.is_none() {
            continue;
        }
        out.gpu(g)
            .label_opt("cpus", t.cpus.as_ref())
            .label_opt("numa_nodes", t.numa_nodes.as_ref())
            .set(1u32);
    }
}

fn numa_node<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(n) = r.topology.as_deref().and_then(|t| t.numa_node) {
            out.gpu(g).set(n);
        }
    }
}
