//! Frame buffer and BAR1 memory of the whole GPU (`nvidia_gpu_memory_*`,
//! `nvidia_gpu_bar1_memory_*`); MIG instances read theirs in `mig.rs`.

use nvml_wrapper::Nvml;

use super::super::calls::{Calls, Got};
use super::super::raw::{self, DeviceHandle};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{Bar1Memory, GpuReadings, Memory};

pub fn sample(g: &mut Gpu<'_, '_>, r: &mut GpuReadings) {
    let fam = Family::Memory.name();
    let d = g.device;
    r.memory = read(g.nvml, g.handle, g.calls, fam);
    r.bar1 = g
        .calls
        .run(fam, || d.bar1_memory_info())
        .value()
        .map(|b| Bar1Memory {
            total_bytes: b.total,
            used_bytes: b.used,
        });
}

/// Frame buffer memory: v2 (reserved reported apart) where the driver has
/// it, else v1 (where `used` includes reserved memory).
pub fn read(nvml: &Nvml, h: DeviceHandle, c: &mut Calls<'_>, fam: &'static str) -> Option<Memory> {
    match c.run(fam, || raw::memory_v2(nvml, h)) {
        Got::Value((total, reserved, free, used)) => Some(Memory {
            total_bytes: total,
            used_bytes: used,
            free_bytes: free,
            reserved_bytes: Some(reserved),
        }),
        Got::Absent => c
            .run(fam, || raw::memory_v1(nvml, h))
            .value()
            .map(|(total, free, used)| Memory {
                total_bytes: total,
                used_bytes: used,
                free_bytes: free,
                reserved_bytes: None,
            }),
        Got::Failed => None,
    }
}
