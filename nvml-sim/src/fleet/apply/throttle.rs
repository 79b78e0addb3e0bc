//! Throttle reasons, with their clock event.

use super::super::Sim;
use crate::fault::Reason;
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::nvmlEventTypeClock;

impl Sim {
    pub(super) fn throttle(
        &mut self,
        gpu: u32,
        reasons: &[Reason],
        t: f64,
    ) -> Result<String, Invalid> {
        if let Some(r) = reasons.iter().find(|r| !r.throttles()) {
            return Err(Invalid::from(format!(
                "{r:?} is not a throttle reason a fault can set"
            )));
        }
        let mask = reasons.iter().fold(0, |m, r| m | r.bit());
        self.gpus[gpu as usize].set_throttle(mask, t);
        self.device_event(gpu, nvmlEventTypeClock);
        Ok(format!("GPU {gpu} throttle reasons {mask:#x}"))
    }
}
