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
            merge_duplicates(list)
                .into_iter()
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

/// One entry per process and device: a driver that lists a pid twice on
/// the same GPU (or MIG compute instance) would otherwise make two series
/// with one label set, which Prometheus rejects, and count the process
/// twice. The copies describe one process, so the larger memory reading
/// is kept rather than a sum that would double it. Order is the driver's.
fn merge_duplicates(list: Vec<RawProcess>) -> Vec<RawProcess> {
    let mut out: Vec<RawProcess> = Vec::with_capacity(list.len());
    for p in list {
        let same = |q: &RawProcess| {
            (q.pid, q.gpu_instance, q.compute_instance)
                == (p.pid, p.gpu_instance, p.compute_instance)
        };
        match out.iter_mut().find(|q| same(q)) {
            Some(q) => {
                q.used_memory = match (q.used_memory, p.used_memory) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                }
            }
            None => out.push(p),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, mib: Option<u64>, mig: Option<(u32, u32)>) -> RawProcess {
        RawProcess {
            pid,
            used_memory: mib.map(|m| m << 20),
            gpu_instance: mig.map(|m| m.0),
            compute_instance: mig.map(|m| m.1),
        }
    }

    #[test]
    fn a_pid_listed_twice_on_one_device_is_one_process() {
        let merged = merge_duplicates(vec![
            p(7, Some(100), None),
            p(8, None, None),
            p(7, Some(120), None),
            p(8, Some(5), None),
            // The same pid in two MIG compute instances is two entries.
            p(9, Some(1), Some((1, 0))),
            p(9, Some(2), Some((2, 0))),
        ]);
        let got: Vec<_> = merged
            .iter()
            .map(|q| (q.pid, q.used_memory.map(|b| b >> 20), q.gpu_instance))
            .collect();
        assert_eq!(
            got,
            [
                (7, Some(120), None),
                (8, Some(5), None),
                (9, Some(1), Some(1)),
                (9, Some(2), Some(2))
            ]
        );
    }
}
