//! Processes and load: a process started (in its MIG instance) or
//! stopped, what a process does, and a GPU's base load.

use super::super::gpu::{Proc, MIB};
use super::super::Sim;
use crate::fault::{ProcKind, ProcUse};
use crate::value::Invalid;

/// A process to start (`process-start`).
pub struct Start<'a> {
    pub pid: Option<u32>,
    pub name: &'a str,
    pub memory_mib: u64,
    pub kind: ProcKind,
    /// The GPU instance and compute instance it runs in.
    pub instance: (Option<u32>, Option<u32>),
    pub usage: Option<ProcUse>,
}

impl Sim {
    pub(super) fn process_start(&mut self, gpu: u32, p: Start) -> Result<String, Invalid> {
        let pid = match p.pid {
            Some(pid) => pid,
            None => {
                self.next_pid += 1;
                self.next_pid
            }
        };
        let g = &mut self.gpus[gpu as usize];
        let mig = match (&g.mig, p.instance) {
            (Some(_), (Some(gi), ci)) => {
                let Some(inst) = g.instance(gi) else {
                    return Err(Invalid::from(format!("GPU {gpu} has no GPU instance {gi}")));
                };
                let ci = ci.unwrap_or(0);
                if inst.compute_instance(ci).is_none() {
                    return Err(Invalid::from(format!(
                        "GPU instance {gi} on GPU {gpu} has no compute instance {ci}"
                    )));
                }
                Some((gi, ci))
            }
            (Some(_), (None, _)) => {
                return Err(Invalid::from(format!(
                    "GPU {gpu} is in MIG mode: name a gpu_instance"
                )))
            }
            (None, (Some(_), _)) => {
                return Err(Invalid::from(format!("GPU {gpu} is not in MIG mode")))
            }
            (None, (None, _)) => None,
        };
        g.procs.push(Proc {
            pid,
            name: p.name.to_string(),
            memory: p.memory_mib * MIB,
            kind: p.kind,
            mig,
            usage: p.usage,
        });
        Ok(format!("process {pid} started on GPU {gpu}"))
    }

    pub(super) fn process_stop(&mut self, pid: u32) -> Result<String, Invalid> {
        let mut found = false;
        for g in &mut self.gpus {
            let before = g.procs.len();
            g.procs.retain(|p| p.pid != pid);
            found |= g.procs.len() != before;
        }
        if found {
            Ok(format!("process {pid} stopped"))
        } else {
            Err(Invalid::from(format!("no process {pid}")))
        }
    }

    /// `percent`: SM, memory, encoder, decoder; absent ones unchanged.
    pub(super) fn process_use(
        &mut self,
        pid: u32,
        percent: [Option<f64>; 4],
    ) -> Result<String, Invalid> {
        let p = self
            .gpus
            .iter_mut()
            .flat_map(|g| g.procs.iter_mut())
            .find(|p| p.pid == pid)
            .ok_or_else(|| format!("no process {pid}"))?;
        let [sm, memory, encoder, decoder] = percent;
        let u = p
            .usage
            .unwrap_or_default()
            .with(sm, memory, encoder, decoder)?;
        p.usage = Some(u);
        Ok(format!(
            "process {pid} uses SM {}%, memory {}%, encoder {}%, decoder {}%",
            u.sm, u.memory, u.encoder, u.decoder
        ))
    }

    pub(super) fn load(&mut self, gpu: u32, percent: f64, t: f64) -> Result<String, Invalid> {
        if !(0.0..=100.0).contains(&percent) {
            return Err(Invalid::from(format!("load {percent} is outside 0..=100")));
        }
        let g = &mut self.gpus[gpu as usize];
        g.advance_energy(t);
        // Keep the waveform continuous-ish: only the level changes.
        g.load = percent;
        // On a MIG-enabled GPU the activity lives in the instances.
        if let Some(m) = &mut g.mig {
            for i in &mut m.instances {
                i.load = percent;
            }
        }
        g.power.energy_t = t;
        Ok(format!("GPU {gpu} load {percent}%"))
    }
}
