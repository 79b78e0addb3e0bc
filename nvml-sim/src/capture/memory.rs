//! Memory (`ffi/memory.rs`): the frame buffer's total and reserved size
//! and BAR1 (the board's), and what is in use (pinned readings).

use super::{version, GpuOut, Walker, MIB, NOT_FOUND_FN};
use crate::model::MemorySection;
use crate::value::Mib;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn memory(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        // SAFETY: plain C structs; zero is a valid value.
        let mut mem: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
        mem.version = version::<nvmlMemory_v2_t>(2);
        let mut memory = MemorySection::default();
        if call!(self, nvmlDeviceGetMemoryInfo_v2(d, &raw mut mem)).is_ok() {
            memory.total_mib = Some(mem.total / MIB);
            // Bytes, exactly: NVML's reserve is not whole MiB (615.0625 on
            // an H200 at 580.159.04).
            memory.reserved_mib = Some(Mib {
                bytes: mem.reserved,
            });
            out.readings.memory_used_mib = Some(Mib { bytes: mem.used });
            out.readings.memory_free_mib = Some(Mib { bytes: mem.free });
        } else {
            // SAFETY: as above.
            let mut m1: nvmlMemory_t = unsafe { std::mem::zeroed() };
            if call!(self, nvmlDeviceGetMemoryInfo(d, &raw mut m1)).is_ok() {
                memory.total_mib = Some(m1.total / MIB);
            }
        }
        // SAFETY: as above.
        let mut bar1: nvmlBAR1Memory_t = unsafe { std::mem::zeroed() };
        match call!(self, nvmlDeviceGetBAR1MemoryInfo(d, &raw mut bar1)) {
            Ok(()) => {
                memory.bar1_mib = Some(bar1.bar1Total / MIB);
                out.readings.bar1_used_mib = Some(Mib {
                    bytes: bar1.bar1Used,
                });
            }
            Err(e) => out.failed("nvmlDeviceGetBAR1MemoryInfo", e),
        }
        out.board.memory = Some(memory);
    }
}
