//! ECC: errors (volatile and aggregate counters, and their event) and the
//! SRAM error threshold. Retired pages and remapped rows are
//! `retirement.rs`.

use super::super::Sim;
use crate::fault::{EccLocation, EccType};
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::{nvmlEventTypeDoubleBitEccError, nvmlEventTypeSingleBitEccError};

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
        g.ecc.counts[et][0][loc] += count;
        g.ecc.counts[et][1][loc] += count;
        self.device_event(gpu, event);
        Ok(format!(
            "{count} {error_type:?} ECC error(s) at {location:?} on GPU {gpu}"
        ))
    }

    pub(super) fn sram_threshold(&mut self, gpu: u32, exceeded: bool) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if !g.model.ecc.row_remapping {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) reports no SRAM error status",
                g.model.name
            )));
        }
        g.ecc.sram.threshold_exceeded = exceeded;
        Ok(format!("GPU {gpu} SRAM threshold exceeded: {exceeded}"))
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
            g.ecc.counts[et][0] = [0; 8];
        }
        Ok(format!("GPU {gpu} volatile ECC counters cleared"))
    }
}
