//! Memory health: ECC errors (volatile and aggregate counters, and their
//! event), retired pages, remapped rows and the SRAM error threshold.

use super::super::gpu::RetiredPage;
use super::super::{now_us, Sim};
use crate::fault::{EccLocation, EccType, RetireCause, RowKind};
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::{
    nvmlEventTypeDoubleBitEccError, nvmlEventTypeDramRetirementEvent,
    nvmlEventTypeSingleBitEccError,
};

impl Sim {
    pub(super) fn ecc(
        &mut self,
        gpu: u32,
        error_type: EccType,
        location: EccLocation,
        count: u64,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.supported {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) has no ECC",
                g.model.name
            )));
        }
        if !g.ecc_enabled() {
            return Err(Invalid::from(format!("GPU {gpu} has ECC disabled")));
        }
        let (et, event) = match error_type {
            EccType::Corrected => (0, nvmlEventTypeSingleBitEccError),
            EccType::Uncorrected => (1, nvmlEventTypeDoubleBitEccError),
        };
        let loc = location.nvml();
        g.ecc[et][0][loc] += count;
        g.ecc[et][1][loc] += count;
        self.device_event(gpu, event);
        Ok(format!(
            "{count} {error_type:?} ECC error(s) at {location:?} on GPU {gpu}"
        ))
    }

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
        let address = 0x3_2000_0000 + g.retired.len() as u64 * 0x1000 + u64::from(gpu) * 0x10_0000;
        g.retired.push(RetiredPage {
            address,
            cause,
            timestamp_us: now_us(),
        });
        g.retired_pending |= pending;
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
            RowKind::Correctable => g.remap_corr += 1,
            RowKind::Uncorrectable => g.remap_unc += 1,
        }
        g.remap_pending |= pending;
        g.remap_failure |= failure;
        Ok(format!("row remapped on GPU {gpu}"))
    }

    pub(super) fn sram_threshold(&mut self, gpu: u32, exceeded: bool) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.row_remapping {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) reports no SRAM error status",
                g.model.name
            )));
        }
        g.sram_threshold_exceeded = exceeded;
        Ok(format!("GPU {gpu} SRAM threshold exceeded: {exceeded}"))
    }

    /// The GPU recovery action the driver reports (field 230), set by hand:
    /// what the driver asks, pending repairs or not.
    pub(super) fn recovery_action(&mut self, gpu: u32, value: u32) -> String {
        let g = &mut self.gpus[gpu as usize];
        g.recovery_action = Some(crate::value::Val::Is(value));
        g.reset_pending_at_start = true;
        format!("GPU {gpu} recovery action {value}")
    }

    /// `nvidia-smi -p 0`: the volatile ECC counters set to 0 at once
    /// (`nvmlDeviceClearEccErrorCounts`); aggregate counters stay.
    pub(super) fn clear_ecc(&mut self, gpu: u32) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.supported {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) has no ECC",
                g.model.name
            )));
        }
        for et in 0..2 {
            g.ecc[et][0] = [0; 8];
        }
        Ok(format!("GPU {gpu} volatile ECC counters cleared"))
    }
}
