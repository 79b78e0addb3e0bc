//! Compute and graphics processes (`nvidia_gpu_processes`, and with
//! `process_memory` on, `nvidia_gpu_process_memory_used_bytes` with each
//! process's name, read once per pid).

use std::collections::{HashMap, HashSet};

use nvml_wrapper::error::NvmlError;

use super::super::calls::Got;
use super::super::raw::{self, ProcessList, RawProcess};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, Process};

#[derive(Default)]
pub struct State {
    /// Names of live processes by pid; `None` for a pid NVML cannot name
    /// from this PID namespace.
    names: HashMap<u32, Option<String>>,
}

impl State {
    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, '_>,
        with_names: bool,
        mig_enabled: bool,
        r: &mut GpuReadings,
    ) {
        let fam = Family::Processes.name();
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        let compute = c
            .run_aggregate(fam, mig_enabled, || {
                raw::running_processes(nvml, h, ProcessList::Compute)
            })
            .value();
        let graphics = c
            .run_aggregate(fam, mig_enabled, || {
                raw::running_processes(nvml, h, ProcessList::Graphics)
            })
            .value();
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
                return n.clone();
            }
            // NOT_FOUND: NVML looks the pid up in our PID namespace, and a
            // container without hostPID does not have it. Not an error,
            // and not asked again for the life of the pid.
            let got = c.run(Family::ProcessMemory.name(), || {
                match raw::process_name(nvml, pid) {
                    Err(NvmlError::NotFound) => Ok(None),
                    other => other.map(Some),
                }
            });
            match got {
                Got::Value(n) => {
                    names.insert(pid, n.clone());
                    n
                }
                Got::Absent | Got::Failed => None,
            }
        };
        let mut convert = |list: Vec<RawProcess>| -> Vec<Process> {
            list.into_iter()
                .map(|p| Process {
                    pid: p.pid,
                    name: if with_names { name_of(p.pid) } else { None },
                    used_memory_bytes: p.used_memory,
                    gpu_instance: p.gpu_instance,
                    compute_instance: p.compute_instance,
                })
                .collect()
        };
        r.compute_processes = compute.map(&mut convert);
        r.graphics_processes = graphics.map(&mut convert);
    }
}
