//! Where a GPU sits on the host, as `nvidia-smi topo -m` shows it (NVML
//! reference, "Topology Queries" and the NvLink remote queries): the PCIe
//! level between two GPUs, the CPUs and NUMA nodes near a GPU, and what
//! each NVLink link reaches. The answers come from the scenario's
//! `[topology]` table (`scenario/topology.rs`).
//!
//! Every NVLink link of a built-in board reaches an NVSwitch: the DGX and
//! HGX boards (A100, H100, H200, B200) and the NVL72 trays join their GPUs
//! through NVSwitches, never GPU to GPU.

use super::*;
use crate::scenario::Placement;
use std::ffi::c_ulong;

/// Bits per `unsigned long` on the LP64 hosts the driver runs on.
const BITS: usize = c_ulong::BITS as usize;

/// Sets the bits of `items` in the caller's `size`-word mask.
unsafe fn out_mask(mask: *mut c_ulong, size: c_uint, items: &[u32]) -> R {
    if mask.is_null() || size == 0 {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller gives `size` words (nvml.h).
    let words = std::slice::from_raw_parts_mut(mask, size as usize);
    words.fill(0);
    for &i in items {
        // nvml.h: bits past the caller's array are left out.
        if let Some(w) = words.get_mut(i as usize / BITS) {
            *w |= 1 << (i as usize % BITS);
        }
    }
    Ok(())
}

fn placement(device: nvmlDevice_t) -> R<Placement> {
    with_dev(device, |sim, d, _| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        sim.topology
            .gpus
            .get(d.gpu as usize)
            .cloned()
            .ok_or(INVALID_ARGUMENT)
    })
}

fn cpus(device: nvmlDevice_t) -> R<Vec<u32>> {
    let p = placement(device)?;
    if p.cpus.is_empty() {
        // No table (or no `cpus`): a host whose affinity is not modelled.
        return Err(NOT_SUPPORTED);
    }
    Ok(p.cpus)
}

nvml_fn! {
    fn nvmlDeviceGetTopologyCommonAncestor(device1: nvmlDevice_t, device2: nvmlDevice_t, pathInfo: *mut nvmlGpuTopologyLevel_t) {
        nonnull(pathInfo)?;
        let a = decode_device(device1).ok_or(INVALID_ARGUMENT)?;
        let b = decode_device(device2).ok_or(INVALID_ARGUMENT)?;
        if a.mig.is_some() || b.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        // Both handles must be live GPUs (lost, hung, denied: as any call).
        with_gpu(device2, |_, _| Ok(()))?;
        let level = with_dev(device1, |sim, _, _| {
            let n = sim.topology.gpus.len();
            if a.gpu as usize >= n || b.gpu as usize >= n {
                return Err(INVALID_ARGUMENT);
            }
            Ok(sim.topology.level(a.gpu as usize, b.gpu as usize))
        })?;
        out(pathInfo, level as nvmlGpuTopologyLevel_t)
    }
}

nvml_fn! {
    /// nvml.h: "the NUMA node of the given GPU device. This only applies to
    /// platforms where the GPUs are NUMA nodes" (coherent Grace systems,
    /// the table's `gpu_numa`); elsewhere NOT_SUPPORTED, as nvidia-smi's
    /// "GPU NUMA ID" column reads N/A on x86 hosts.
    fn nvmlDeviceGetNumaNodeId(device: nvmlDevice_t, node: *mut c_uint) {
        nonnull(node)?;
        let n = placement(device)?.gpu_numa.ok_or(NOT_SUPPORTED)?;
        out(node, n)
    }
}

nvml_fn! {
    fn nvmlDeviceGetCpuAffinity(device: nvmlDevice_t, cpuSetSize: c_uint, cpuSet: *mut c_ulong) {
        let set = cpus(device)?;
        out_mask(cpuSet, cpuSetSize, &set)
    }
}

nvml_fn! {
    /// Scope NODE (0) or SOCKET (1): the same CPUs, as on the built-in
    /// hosts a NUMA node is a whole socket or the table says the node's.
    fn nvmlDeviceGetCpuAffinityWithinScope(device: nvmlDevice_t, cpuSetSize: c_uint, cpuSet: *mut c_ulong, scope: nvmlAffinityScope_t) {
        if scope > 1 {
            return Err(INVALID_ARGUMENT);
        }
        let set = cpus(device)?;
        out_mask(cpuSet, cpuSetSize, &set)
    }
}

nvml_fn! {
    /// The NUMA nodes near the GPU: nvidia-smi's "NUMA Affinity" column.
    fn nvmlDeviceGetMemoryAffinity(device: nvmlDevice_t, nodeSetSize: c_uint, nodeSet: *mut c_ulong, scope: nvmlAffinityScope_t) {
        if scope > 1 {
            return Err(INVALID_ARGUMENT);
        }
        let nodes = placement(device)?.numa;
        if nodes.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        out_mask(nodeSet, nodeSetSize, &nodes)
    }
}

/// The NVSwitch NVLink `link` of `device` reaches.
fn remote(device: nvmlDevice_t, link: c_uint) -> R<crate::identity::PciAddr> {
    with_dev(device, |sim, d, _| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        let g = &sim.gpus[d.gpu as usize];
        if g.model.nvlink.links == 0 {
            Err(NOT_SUPPORTED)
        } else if link >= g.model.nvlink.links {
            Err(INVALID_ARGUMENT)
        } else {
            Ok(sim.topology.nvswitch(link))
        }
    })
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkRemoteDeviceType(device: nvmlDevice_t, link: c_uint, pNvLinkDeviceType: *mut nvmlIntNvLinkDeviceType_t) {
        nonnull(pNvLinkDeviceType)?;
        remote(device, link)?;
        out(pNvLinkDeviceType, nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH)
    }
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkRemotePciInfo_v2(device: nvmlDevice_t, link: c_uint, pci: *mut nvmlPciInfo_t) {
        nonnull(pci)?;
        let addr = remote(device, link)?;
        // SAFETY: plain C struct of integers and char arrays; all-zero is valid.
        let mut p: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        fill_chars(&mut p.busIdLegacy, &addr.bus_id_legacy());
        fill_chars(&mut p.busId, &addr.bus_id());
        p.domain = addr.domain;
        p.bus = addr.bus;
        p.device = addr.device;
        out(pci, p)
    }
}
