//! A scenario's `[topology]` table: where each GPU sits on the host, as
//! `nvidia-smi topo -m` shows it. NVML answers from it
//! (`ffi/topology.rs`): the PCIe level between two GPUs
//! (`nvmlDeviceGetTopologyCommonAncestor`), each GPU's CPU and NUMA
//! affinity, and what each NVLink link reaches.
//!
//! ```toml
//! [topology]
//! # Per GPU, in index order: the NUMA node its CPUs and memory are on,
//! # nvidia-smi's "CPU Affinity" list, and its PCIe path from the CPU
//! # socket down: [socket, host bridge, switch, switch, ...].
//! numa = [0, 0, 1, 1]              # or lists: ["0,3-9", ...]
//! gpu_numa = [2, 10, 18, 26]        # optional: GPUs that are NUMA nodes
//! cpus = ["0-55,112-167", "0-55,112-167", "56-111,168-223", "56-111,168-223"]
//! pcie = [[0, 0, 1], [0, 0, 1], [1, 2, 3], [1, 3, 4]]
//! # NVLink links reach NVSwitches at these PCI addresses (link n: switch
//! # n mod count). Absent: the links reach the other GPUs' switch fabric
//! # at addresses of the simulator's own making.
//! nvswitches = ["00000000:C4:00.0", "00000000:C5:00.0"]
//! ```
//!
//! A scenario without the table gives every GPU its own root port under
//! one host bridge on a host without NUMA (nvidia-smi: PHB between any two
//! GPUs; no NUMA node, no CPU affinity).

use crate::identity::PciAddr;
pub use crate::schema::{NumaSet, TopologyFile};
use std::sync::Arc;

/// `nvmlGpuTopologyLevel_t`: how far apart two GPUs are on PCIe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The same GPU (`NVML_TOPOLOGY_INTERNAL`).
    Internal = 0,
    /// PIX: at most one PCIe switch between them.
    Single = 10,
    /// PXB: several switches, no host bridge.
    Multiple = 20,
    /// PHB: through a host bridge.
    HostBridge = 30,
    /// NODE: between host bridges of one NUMA node.
    Node = 40,
    /// SYS: across the SMP interconnect between sockets.
    System = 50,
}

/// One GPU's place on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// NUMA nodes near the GPU (nvidia-smi's NUMA Affinity), sorted.
    pub numa: Vec<u32>,
    /// The GPU's own NUMA node (nvidia-smi's GPU NUMA ID; Grace).
    pub gpu_numa: Option<u32>,
    /// CPU numbers near the GPU, sorted.
    pub cpus: Vec<u32>,
    /// `[socket, host bridge, switch, ...]`.
    pub pcie: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    pub gpus: Vec<Placement>,
    pub nvswitches: Vec<PciAddr>,
}

impl Topology {
    /// No table: each GPU on its own root port of host bridge 0.
    pub fn flat(gpus: usize) -> Topology {
        Topology {
            gpus: (0..gpus)
                .map(|i| Placement {
                    numa: Vec::new(),
                    gpu_numa: None,
                    cpus: Vec::new(),
                    pcie: vec![0, 0, 1000 + i as u32],
                })
                .collect(),
            nvswitches: Vec::new(),
        }
    }

    /// The PCIe level between GPUs `a` and `b`.
    pub fn level(&self, a: usize, b: usize) -> Level {
        if a == b {
            return Level::Internal;
        }
        let (pa, pb) = (&self.gpus[a].pcie, &self.gpus[b].pcie);
        if pa.first() != pb.first() {
            return Level::System;
        }
        if pa.get(1) != pb.get(1) {
            return Level::Node;
        }
        let common = pa.iter().zip(pb.iter()).take_while(|(x, y)| x == y).count();
        if common <= 2 {
            Level::HostBridge
        } else if pa == pb {
            // Both right below the same switch.
            Level::Single
        } else {
            Level::Multiple
        }
    }

    /// The NVSwitch NVLink `link` of a GPU with `links` links reaches.
    pub fn nvswitch(&self, link: u32) -> PciAddr {
        match self.nvswitches.len() {
            0 => PciAddr::on_bus(0xC4 + link % 4),
            n => self.nvswitches[link as usize % n],
        }
    }
}

/// The table checked against a fleet of `gpus` GPUs.
pub fn resolve(file: &TopologyFile, gpus: usize) -> Result<Topology, String> {
    let check = |what: &str, len: usize| {
        if len == gpus {
            Ok(())
        } else {
            Err(format!(
                "[topology] {what} has {len} entries, but the fleet has {gpus} GPUs"
            ))
        }
    };
    check("pcie", file.pcie.len())?;
    if !file.numa.is_empty() {
        check("numa", file.numa.len())?;
    }
    if !file.cpus.is_empty() {
        check("cpus", file.cpus.len())?;
    }
    if !file.gpu_numa.is_empty() {
        check("gpu_numa", file.gpu_numa.len())?;
    }
    if let Some(short) = file.pcie.iter().position(|p| p.len() < 2) {
        return Err(format!(
            "[topology] pcie entry {short} needs at least a socket and a host bridge"
        ));
    }
    let numa = file
        .numa
        .iter()
        .map(|n| match n {
            NumaSet::One(n) => Ok(vec![*n]),
            NumaSet::Set(s) => parse_cpu_list(s).map_err(|_| {
                format!("[topology] numa: {s:?} is not a NUMA node list such as \"0,3-9\"")
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cpus = file
        .cpus
        .iter()
        .map(|c| parse_cpu_list(c))
        .collect::<Result<Vec<_>, _>>()?;
    let nvswitches = file
        .nvswitches
        .iter()
        .map(|s| {
            PciAddr::parse(s)
                .ok_or_else(|| format!("[topology] nvswitches: {s:?} is not a PCI address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Topology {
        gpus: (0..gpus)
            .map(|i| Placement {
                numa: numa.get(i).cloned().unwrap_or_default(),
                gpu_numa: file.gpu_numa.get(i).copied(),
                cpus: cpus.get(i).cloned().unwrap_or_default(),
                pcie: file.pcie[i].clone(),
            })
            .collect(),
        nvswitches,
    })
}

/// The scenario's topology: its own table, else its base scenario's where
/// the fleet kept the base's size, else [`Topology::flat`].
pub(super) fn build(
    file: Option<&toml::Spanned<TopologyFile>>,
    base: Option<Arc<Topology>>,
    gpus: usize,
    err: &dyn Fn(Option<usize>, String) -> super::ScenarioError,
) -> Result<Arc<Topology>, super::ScenarioError> {
    if let Some(f) = file {
        return resolve(f.get_ref(), gpus)
            .map(Arc::new)
            .map_err(|m| err(Some(f.span().start), m));
    }
    Ok(base
        .filter(|b| b.gpus.len() == gpus)
        .unwrap_or_else(|| Arc::new(Topology::flat(gpus))))
}

/// `0-55,112-167` into the CPU numbers (at most 4096, as no host has more).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let bad = || format!("[topology] cpus: {text:?} is not a CPU list such as \"0-55,112-167\"");
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
        if lo > hi || hi >= 4096 {
            return Err(bad());
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(pcie: Vec<Vec<u32>>) -> Topology {
        let file = TopologyFile {
            pcie,
            ..TopologyFile::default()
        };
        let n = file.pcie.len();
        resolve(&file, n).unwrap()
    }

    #[test]
    fn levels_follow_the_pcie_paths_as_nvidia_smi_names_them() {
        // GPU 0, 1 under one switch; 2 under a second switch below the
        // same upstream switch; 3 on another host bridge; 4 another socket.
        let t = topo(vec![
            vec![0, 0, 1, 2],
            vec![0, 0, 1, 2],
            vec![0, 0, 1, 3],
            vec![0, 1, 4],
            vec![1, 2, 5],
            vec![0, 0, 9],
        ]);
        assert_eq!(t.level(0, 0), Level::Internal);
        assert_eq!(t.level(0, 1), Level::Single);
        assert_eq!(t.level(0, 2), Level::Multiple);
        assert_eq!(t.level(0, 3), Level::Node);
        assert_eq!(t.level(0, 4), Level::System);
        assert_eq!(t.level(0, 5), Level::HostBridge);
        assert_eq!(t.level(5, 0), Level::HostBridge);
    }

    #[test]
    fn cpu_lists_parse_as_nvidia_smi_prints_them_and_bad_ones_are_named() {
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("3-1").unwrap_err().contains("\"3-1\""));
        assert!(parse_cpu_list("x").is_err());
    }

    #[test]
    fn a_table_for_another_fleet_size_is_refused() {
        let file = TopologyFile {
            pcie: vec![vec![0, 0]],
            ..TopologyFile::default()
        };
        assert!(resolve(&file, 2).unwrap_err().contains("2 GPUs"));
    }
}
