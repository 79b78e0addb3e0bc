//! Where the GPU sits on the host (`nvidia_gpu_topology_*`, the GPU's row
//! of `nvidia-smi topo -m`): the PCIe level to each other GPU
//! (`nvmlDeviceGetTopologyCommonAncestor`), the CPUs and NUMA nodes near
//! it, and what each active NVLink link reaches
//! (`nvmlDeviceGetNvLinkRemoteDeviceType`, `..RemotePciInfo_v2`).
//!
//! None of it changes while the driver is loaded (nvml.h; a driver reload
//! starts a new sampler), except which links are up: it is read on the
//! first poll, and again only when this poll's NVLink readings
//! (`nvlink.rs`, which reads link states anyway) show a link whose state
//! differs from the last read. Every other poll shares the last reading
//! and makes no call, so a node whose topology does not change pays
//! nothing per poll.
//!
//! Cost of one read, on a GPU with `n - 1` peers and `l` NVLink links:
//! `2 (n - 1) + 1` calls for the PCIe levels (a handle and the level per
//! peer, the device count), 3 for the affinities and the NUMA id, and one
//! state, one remote type and, for links to a GPU, one remote PCI read
//! per link: 69 calls on a DGX H100 GPU, once.

use std::sync::Arc;

use super::super::calls::Got;
use super::super::raw;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, GpuTopology, NvlinkReach};

/// `NVML_NVLINK_DEVICE_TYPE_GPU` and `_SWITCH` (nvml.h).
const REMOTE_GPU: u32 = 0;
const REMOTE_SWITCH: u32 = 2;

/// Each NVLink link's number and whether it was up.
type LinkStates = Vec<(u32, bool)>;

#[derive(Default)]
pub struct State {
    /// The last reading, and the link states it was read with.
    held: Option<(LinkStates, Arc<GpuTopology>)>,
}

impl State {
    /// Runs after NVLink, whose link states say when to read again; `on`:
    /// the family is switched on.
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, on: bool, r: &mut GpuReadings) {
        if !on {
            return;
        }
        let links: Vec<(u32, bool)> = r.nvlinks.iter().map(|l| (l.link, l.up)).collect();
        if let Some((read_with, held)) = &self.held {
            // No NVLink readings this poll (the nvlink family off, or its
            // read failed): nothing says a link changed.
            if links.is_empty() || *read_with == links {
                r.topology = Some(held.clone());
                return;
            }
        }
        let Some(topology) = read(g, &links) else {
            return;
        };
        let topology = Arc::new(topology);
        self.held = Some((links, topology.clone()));
        r.topology = Some(topology);
    }
}

/// One read of the GPU's topology; `None` when the device count could
/// not be read (tried again next poll).
fn read(g: &mut Gpu<'_, '_>, links: &[(u32, bool)]) -> Option<GpuTopology> {
    let fam = Family::Topology.name();
    let (nvml, h, me) = (g.nvml, g.handle, g.calls.gpu);
    let count = g.calls.run(fam, || nvml.device_count()).value()?;
    let mut pcie = Vec::new();
    for peer in (0..count).filter(|&p| p != me) {
        let Some(ph) = g
            .calls
            .run(fam, || raw::handle_by_index(nvml, peer))
            .value()
        else {
            continue;
        };
        if let Some(level) = g
            .calls
            .run(fam, || raw::common_ancestor(nvml, h, ph))
            .value()
        {
            pcie.push((peer, level));
        }
    }
    let c = &mut *g.calls;
    let cpus = c.run(fam, || raw::cpu_affinity(nvml, h)).value();
    let numa_nodes = c.run(fam, || raw::memory_affinity(nvml, h)).value();
    let numa_node = c.run(fam, || raw::numa_node_id(nvml, h)).value();
    Some(GpuTopology {
        pcie,
        // An empty mask is no answer (a cgroup that hides the CPUs).
        cpus: cpus.filter(|c| !c.is_empty()).map(|c| ranges(&c)),
        numa_nodes: numa_nodes.filter(|n| !n.is_empty()).map(|n| ranges(&n)),
        numa_node,
        nvlink: nvlink_reach(g, links),
    })
}

/// Where the GPU's active links go; `None` on a GPU without NVLink.
fn nvlink_reach(g: &mut Gpu<'_, '_>, links: &[(u32, bool)]) -> Option<NvlinkReach> {
    let fam = Family::Topology.name();
    let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
    let links: Vec<(u32, bool)> = if links.is_empty() {
        // The nvlink family is off: probe the states until a link does
        // not exist.
        let mut found = Vec::new();
        for n in 0..nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS {
            match c.run(fam, || raw::nvlink_active(nvml, h, n)) {
                Got::Value(up) => found.push((n, up)),
                _ => break,
            }
        }
        found
    } else {
        links.to_vec()
    };
    if links.is_empty() {
        return None;
    }
    let mut reach = NvlinkReach::default();
    for &(link, _) in links.iter().filter(|(_, up)| *up) {
        match c
            .run(fam, || raw::nvlink_remote_type(nvml, h, link))
            .value()
        {
            Some(REMOTE_SWITCH) => reach.to_switch += 1,
            Some(REMOTE_GPU) => {
                if let Some(bus) = c
                    .run(fam, || raw::nvlink_remote_bus_id(nvml, h, link))
                    .value()
                {
                    let bus = bus.to_ascii_uppercase();
                    match reach.to_gpu.iter_mut().find(|(b, _)| *b == bus) {
                        Some((_, n)) => *n += 1,
                        None => reach.to_gpu.push((bus, 1)),
                    }
                }
            }
            // An IBM NPU (a CPU), unknown, or no answer: no GPU peer.
            _ => {}
        }
    }
    Some(reach)
}

/// `[0, 1, 2, 5]` as nvidia-smi prints CPU lists: `0-2,5`.
pub fn ranges(items: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < items.len() {
        let start = items[i];
        let mut end = start;
        while i + 1 < items.len() && items[i + 1] == end + 1 {
            i += 1;
            end = items[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn cpu_lists_print_as_nvidia_smi_prints_them() {
        let dgx: Vec<u32> = (0..=55).chain(112..=167).collect();
        assert_eq!(ranges(&dgx), "0-55,112-167");
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[]), "");
    }
}
