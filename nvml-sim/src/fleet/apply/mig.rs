//! MIG reconfiguration: every GPU instance (and its processes) destroyed,
//! the new ones created, and the MIG config change event.

use super::super::Sim;
use nvml_wrapper_sys::bindings::nvmlEventMigConfigChange;

impl Sim {
    pub(super) fn mig_reconfigure(
        &mut self,
        gpu: u32,
        profiles: &[String],
        t: f64,
    ) -> Result<String, String> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.mig_capable() {
            return Err(format!("GPU {gpu} ({}) does not support MIG", g.model.name));
        }
        if g.mig.is_none() {
            return Err(format!("GPU {gpu} is not in MIG mode"));
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
}
