//! The NVSwitch fabric: a GPU's registration and its health rows.

use super::super::gpu::Gpu;
use super::super::Sim;
use crate::fault::FabricState;
use crate::model::{HealthSummary, IncorrectConfiguration};
use crate::value::Invalid;
use crate::value::Val;

impl Sim {
    /// A GPU that registers with an NVSwitch fabric, for the fabric faults.
    fn fabric_gpu(&mut self, gpu: u32) -> Result<&mut Gpu, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if g.model.nvswitch_fabric() {
            Ok(g)
        } else {
            Err(Invalid::from(format!(
                "GPU {gpu} ({}) is not on an NVSwitch fabric",
                g.model.name
            )))
        }
    }

    pub(super) fn fabric(
        &mut self,
        gpu: u32,
        state: FabricState,
        registered: bool,
    ) -> Result<String, Invalid> {
        let g = self.fabric_gpu(gpu)?;
        g.fabric.state = state.nvml();
        // NVML_ERROR_UNKNOWN (999) stands for a failed registration.
        g.fabric.status = if registered { 0 } else { 999 };
        Ok(format!(
            "GPU {gpu} fabric {state:?}, registered {registered}"
        ))
    }

    /// `rows`: degraded bandwidth, route recovery, route unhealthy, access
    /// timeout recovery; absent ones unchanged.
    pub(super) fn fabric_health(
        &mut self,
        gpu: u32,
        summary: Option<HealthSummary>,
        rows: [Option<Val<bool>>; 4],
        incorrect_configuration: Option<IncorrectConfiguration>,
    ) -> Result<String, Invalid> {
        let g = self.fabric_gpu(gpu)?;
        let h = &mut g.fabric.health;
        if let Some(s) = summary {
            h.summary = s.nvml();
        }
        for (i, flag) in rows.into_iter().enumerate() {
            if let Some(f) = flag {
                h.fields[i] = f.get().map_or(0, |t| if t { 1 } else { 2 });
            }
        }
        if let Some(c) = incorrect_configuration {
            h.fields[4] = c.nvml();
        }
        Ok(format!(
            "GPU {gpu} fabric health summary {}, mask {:#x}",
            h.summary,
            h.mask(5)
        ))
    }
}
