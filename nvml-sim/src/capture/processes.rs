//! Processes (`ffi/processes.rs`): the compute and graphics lists, each
//! process with its name (`nvmlSystemGetProcessName`), memory and, on MIG
//! GPUs, its GPU and compute instance.

use super::{text, Walker, NOT_FOUND_FN};
use crate::fault::ProcKind;
use crate::schema::ProcEntry;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_char, c_uint};
use std::time::Instant;

impl Walker {
    /// One list's entries (graphics or compute), read with the two-call
    /// protocol; `None` where the call failed.
    fn process_list(&mut self, d: nvmlDevice_t, graphics: bool) -> Option<Vec<nvmlProcessInfo_t>> {
        let mut count: c_uint = 0;
        let first = if graphics {
            call!(
                self,
                nvmlDeviceGetGraphicsRunningProcesses_v3(d, &raw mut count, std::ptr::null_mut())
            )
        } else {
            call!(
                self,
                nvmlDeviceGetComputeRunningProcesses_v3(d, &raw mut count, std::ptr::null_mut())
            )
        };
        if first.is_err() && first != Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE) {
            return None;
        }
        // R535 and R545 write 32-byte `_v3` entries (with protected
        // memory) where the detail list is not exported, as the exporter
        // reads them; every later branch 24.
        let stride = if self.lib.nvmlDeviceGetRunningProcessDetailList.is_err()
            && self.lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok()
        {
            32
        } else {
            24
        };
        let cap = count as usize + 4;
        let mut raw = vec![0u64; cap * stride / 8];
        let mut n = cap as c_uint;
        let r = if graphics {
            call!(
                self,
                nvmlDeviceGetGraphicsRunningProcesses_v3(d, &raw mut n, raw.as_mut_ptr().cast())
            )
        } else {
            call!(
                self,
                nvmlDeviceGetComputeRunningProcesses_v3(d, &raw mut n, raw.as_mut_ptr().cast())
            )
        };
        r.ok()?;
        Some(
            (0..(n as usize).min(cap))
                .map(|i| {
                    let e = &raw[i * stride / 8..];
                    nvmlProcessInfo_t {
                        pid: e[0] as u32,
                        usedGpuMemory: e[1],
                        gpuInstanceId: e[2] as u32,
                        computeInstanceId: (e[2] >> 32) as u32,
                    }
                })
                .collect(),
        )
    }

    pub(super) fn processes(&mut self, d: nvmlDevice_t, mig: bool) -> Vec<ProcEntry> {
        let mut out: Vec<ProcEntry> = Vec::new();
        for (kind, graphics) in [(ProcKind::Compute, false), (ProcKind::Graphics, true)] {
            let Some(list) = self.process_list(d, graphics) else {
                continue;
            };
            for p in &list {
                if let Some(existing) = out.iter_mut().find(|e| e.pid == Some(p.pid)) {
                    existing.kind = ProcKind::ComputeGraphics;
                    continue;
                }
                let mut name = [0 as c_char; 256];
                let name = if call!(
                    self,
                    nvmlSystemGetProcessName(p.pid, name.as_mut_ptr(), 256)
                )
                .is_ok()
                {
                    text(&name)
                } else {
                    format!("pid {}", p.pid)
                };
                let memory = if p.usedGpuMemory == u64::MAX {
                    Val::NotSupported
                } else {
                    Val::Is(p.usedGpuMemory >> 20)
                };
                let mut e = ProcEntry::listed(p.pid, name, memory, kind);
                if mig {
                    e.gpu_instance = Some(p.gpuInstanceId);
                    e.compute_instance = Some(p.computeInstanceId);
                }
                out.push(e);
            }
        }
        out
    }
}
