//! XIDs: an event to every event set registered for it, and the NVRM line
//! of the kernel log (`crate::kmsg`); `log_only` XIDs reach the log alone,
//! as 79, 119 and 120 do on real drivers.

use super::super::{Event, Sim};
use crate::value::Invalid;
use nvml_wrapper_sys::bindings::nvmlEventTypeXidCriticalError;

impl Sim {
    /// `instance`: the GPU instance and compute instance it names, if any;
    /// `detail`: the text after the code in the kernel log's line.
    pub(super) fn xid(
        &mut self,
        gpu: u32,
        code: u64,
        instance: (Option<u32>, Option<u32>),
        log_only: bool,
        detail: Option<&str>,
    ) -> Result<String, Invalid> {
        let (gpu_instance, compute_instance) = instance;
        let g = &self.gpus[gpu as usize];
        if let Some(gi) = gpu_instance {
            if g.instance(gi).is_none() {
                return Err(Invalid::from(format!("GPU {gpu} has no GPU instance {gi}")));
            }
        }
        let process = g
            .procs
            .iter()
            .find(|p| gpu_instance.is_none_or(|gi| p.mig.is_some_and(|(i, _)| i == gi)))
            .map(|p| (p.pid, p.name.as_str()));
        crate::kmsg::xid(
            &g.pci,
            code,
            gpu_instance,
            compute_instance,
            process,
            detail,
        );
        if log_only {
            return Ok(format!("XID {code} on GPU {gpu} (kernel log only)"));
        }
        self.push_event(Event {
            gpu,
            event_type: u64::from(nvmlEventTypeXidCriticalError),
            data: code,
            gpu_instance: gpu_instance.unwrap_or(u32::MAX),
            // An XID in a GPU instance names compute instance 0 unless told.
            compute_instance: compute_instance.unwrap_or(if gpu_instance.is_some() {
                0
            } else {
                u32::MAX
            }),
        });
        Ok(format!("XID {code} on GPU {gpu}"))
    }
}
