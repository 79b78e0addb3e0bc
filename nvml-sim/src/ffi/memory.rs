//! Frame buffer and BAR1 memory (NVML reference, "Device Queries"), v1 and
//! v2; MIG device handles see their GPU instance's share.

use super::*;
use crate::fleet::{Sim, MIB};

fn memory_of(sim: &Sim, d: Dev) -> R<(u64, u64, u64, u64)> {
    let g = &sim.gpus[d.gpu as usize];
    match d.mig {
        Some((gi, _, _)) => Ok(g.instance_memory(g.instance(gi).ok_or(INVALID_ARGUMENT)?)),
        None if sim.aggregate_withheld(d.gpu) => Err(NO_PERMISSION),
        None => Ok(g.memory()),
    }
}

nvml_fn! {
    /// v1: `used` includes memory reserved by the driver (NVML reference, nvmlMemory_t).
    fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) {
        nonnull(memory)?;
        let (total, reserved, used, free) = with_dev(device, |sim, d, _| memory_of(sim, d))?;
        out(memory, nvmlMemory_t { total, free, used: used + reserved })
    }
}

nvml_fn! {
    /// v2 reports reserved apart: total = reserved + used + free.
    fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) {
        nonnull(memory)?;
        if (*memory).version != struct_version::<nvmlMemory_v2_t>(2) {
            return Err(VERSION_MISMATCH);
        }
        let (total, reserved, used, free) = with_dev(device, |sim, d, _| memory_of(sim, d))?;
        out(memory, nvmlMemory_v2_t { version: (*memory).version, total, reserved, free, used })
    }
}

nvml_fn! {
    /// Supported on MIG devices too, which get their share of the aperture.
    fn nvmlDeviceGetBAR1MemoryInfo(device: nvmlDevice_t, bar1Memory: *mut nvmlBAR1Memory_t) {
        nonnull(bar1Memory)?;
        let v = with_dev(device, |sim, d, _| {
            let g = &sim.gpus[d.gpu as usize];
            let (total_mib, procs) = match d.mig {
                Some((gi, _, _)) => {
                    let inst = g.instance(gi).ok_or(INVALID_ARGUMENT)?;
                    let n = g.procs.iter().filter(|p| p.mig.map(|m| m.0) == Some(gi)).count() as u64;
                    (g.model.memory.bar1_mib * inst.profile.mem_slices as u64 / u64::from(g.model.mig.memory_slices), n)
                }
                None => (g.model.memory.bar1_mib, g.procs.len() as u64),
            };
            let total = total_mib * MIB;
            let used = match (d.mig, g.readings.bar1_used) {
                (None, Some(used)) => used.min(total),
                _ => (2 + procs * 2).min(total_mib) * MIB,
            };
            Ok(nvmlBAR1Memory_t { bar1Total: total, bar1Free: total - used, bar1Used: used })
        })?;
        out(bar1Memory, v)
    }
}
