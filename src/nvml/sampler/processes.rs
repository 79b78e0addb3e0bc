//! Compute and graphics processes (`nvidia_gpu_processes`, and with
//! `process_memory` on, `nvidia_gpu_process_memory_used_bytes` with each
//! process's name, read once per pid).

use std::collections::{HashMap, HashSet};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::super::raw;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, Process};

#[derive(Default)]
pub struct State {
    /// Names of live processes by pid.
    names: HashMap<u32, String>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, with_names: bool, r: &mut GpuReadings) {
        let fam = Family::Processes.name();
        let (nvml, d, c) = (g.nvml, g.device, &mut *g.calls);
        let compute = c.run(fam, || d.running_compute_processes()).value();
        let graphics = c.run(fam, || d.running_graphics_processes()).value();
        let live: HashSet<u32> = compute
            .iter()
            .chain(graphics.iter())
            .flatten()
            .map(|p| p.pid)
            .collect();
        self.names.retain(|pid, _| live.contains(pid));
        let names = &mut self.names;
        let mut name_of = |pid: u32| -> Option<String> {
            if let Some(n) = names.get(&pid) {
                return Some(n.clone());
            }
            let n = c
                .run(Family::ProcessMemory.name(), || {
                    raw::process_name(nvml, pid)
                })
                .value();
            if let Some(n) = &n {
                names.insert(pid, n.clone());
            }
            n
        };
        let mut convert = |list: Vec<ProcessInfo>| -> Vec<Process> {
            list.into_iter()
                .map(|p| Process {
                    pid: p.pid,
                    name: if with_names { name_of(p.pid) } else { None },
                    used_memory_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                    gpu_instance: p.gpu_instance_id,
                    compute_instance: p.compute_instance_id,
                })
                .collect()
        };
        r.compute_processes = compute.map(&mut convert);
        r.graphics_processes = graphics.map(&mut convert);
    }
}
