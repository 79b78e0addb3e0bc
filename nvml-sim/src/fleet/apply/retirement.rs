//! Memory health after ECC errors: retired pages, remapped rows and the
//! recovery action the driver asks for.

use super::super::gpu::RetiredPage;
use super::super::{now_us, Sim};
use crate::fault::{RetireCause, RowKind};
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::nvmlEventTypeDramRetirementEvent;

impl Sim {
    pub(super) fn retire_page(
        &mut self,
        gpu: u32,
        cause: RetireCause,
        pending: bool,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.page_retirement {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) uses row remapping, not page retirement: use remap-row",
                g.model.name
            )));
        }
        let address =
            0x3_2000_0000 + g.ecc.retired.len() as u64 * 0x1000 + u64::from(gpu) * 0x10_0000;
        g.ecc.retired.push(RetiredPage {
            address,
            cause,
            timestamp_us: now_us(),
        });
        g.ecc.retired_pending |= pending;
        self.device_event(gpu, nvmlEventTypeDramRetirementEvent);
        Ok(format!("page {address:#x} retired on GPU {gpu}"))
    }

    pub(super) fn remap_row(
        &mut self,
        gpu: u32,
        kind: RowKind,
        pending: bool,
        failure: bool,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.row_remapping {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) does not remap rows",
                g.model.name
            )));
        }
        match kind {
            RowKind::Correctable => g.ecc.remap_corr += 1,
            RowKind::Uncorrectable => g.ecc.remap_unc += 1,
        }
        g.ecc.remap_pending |= pending;
        g.ecc.remap_failure |= failure;
        Ok(format!("row remapped on GPU {gpu}"))
    }

    /// The GPU recovery action the driver reports (field 230), set by hand:
    /// what the driver asks, pending repairs or not.
    pub(super) fn recovery_action(&mut self, gpu: u32, value: u32) -> String {
        let g = &mut self.gpus[gpu as usize];
        g.ecc.recovery_action = Some(crate::value::Val::Is(value));
        g.ecc.reset_pending_at_start = true;
        format!("GPU {gpu} recovery action {value}")
    }
}
