//! MIG reconfiguration: every GPU instance (and its processes) destroyed,
//! the new ones created, and the MIG config change event.

use super::super::gpu::Mig;
use super::super::Sim;
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::nvmlEventMigConfigChange;

impl Sim {
    pub(super) fn mig_reconfigure(
        &mut self,
        gpu: u32,
        profiles: &[String],
        t: f64,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.mig_capable() {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) does not support MIG",
                g.model.name
            )));
        }
        if g.mig.is_none() {
            return Err(Invalid::from(format!("GPU {gpu} is not in MIG mode")));
        }
        // Loads for the new instances, so that they differ from each other.
        let loads: Vec<f64> = (0..profiles.len())
            .map(|i| [60.0, 25.0, 0.0, 45.0][i % 4])
            .collect();
        g.advance_energy(t);
        g.set_mig_layout(profiles, &loads)?;
        // Destroying an instance ends the processes in it.
        g.procs.retain(|p| p.mig.is_none());
        self.device_event(gpu, nvmlEventMigConfigChange);
        Ok(format!(
            "GPU {gpu} MIG layout is now {}",
            profiles.join(" + ")
        ))
    }

    /// `nvidia-smi -mig 1|0`: the pending mode, and the current one when
    /// the change is activated. NVML refuses to activate it on a GPU that
    /// is not idle (`NVML_ERROR_IN_USE`, nvml.h nvmlDeviceSetMigMode), and
    /// nvidia-smi disables MIG only once its GPU instances are destroyed.
    pub(super) fn mig_mode(
        &mut self,
        gpu: u32,
        enabled: bool,
        activate: bool,
        t: f64,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.mig_capable() {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) does not support MIG",
                g.model.name
            )));
        }
        if activate && g.mig.is_some() != enabled {
            if !g.procs.is_empty() {
                return Err(Invalid::from(format!(
                    "GPU {gpu} is not idle ({} processes): NVML answers IN_USE",
                    g.procs.len()
                )));
            }
            if g.mig.as_ref().is_some_and(|m| !m.instances.is_empty()) {
                return Err(Invalid::from(format!(
                    "GPU {gpu} has GPU instances: destroy them first (mig-reconfigure with profiles = [])"
                )));
            }
            g.advance_energy(t);
            g.mig = enabled.then(|| Mig {
                generation: 0,
                instances: Vec::new(),
            });
        }
        g.mig_pending = enabled;
        let state = |on: bool| if on { "enabled" } else { "disabled" };
        Ok(format!(
            "GPU {gpu} MIG mode: current {}, pending {}",
            state(g.mig.is_some()),
            state(enabled)
        ))
    }
}
