//! The XID event thread (`nvidia_gpu_xid_errors_total`): one NVML event
//! set for every GPU, waited on in 200 ms steps with a raw
//! `nvmlEventSetWait_v2` so MIG instance ids are kept, each event counted
//! on its GPU's slot when it happens.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::raw::{self, EventSet};
use super::{Generation, GpuSlot};

const WAIT_MS: u32 = 200;

pub fn run(
    nvml: Arc<Nvml>,
    slots: Vec<Arc<GpuSlot>>,
    generation: Arc<Generation>,
    interval: Duration,
    max_codes: usize,
) {
    let nvml: &Nvml = &nvml;
    let set = match EventSet::create(nvml) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create an NVML event set: XID errors will not be counted");
            return;
        }
    };
    let handles = register(nvml, &set, slots);
    if handles.is_empty() {
        return;
    }
    let mut logged_failure = false;
    while !generation.stop.is_stopped() {
        match set.wait(WAIT_MS) {
            Ok(ev) => {
                if ev.event_type & raw::XID_EVENT == 0 {
                    continue;
                }
                let id = |v: u32| if v == u32::MAX { None } else { Some(v) };
                match handles.iter().find(|(h, _)| *h == ev.device as usize) {
                    Some((_, slot)) => slot.record_xid(
                        ev.data,
                        id(ev.gpu_instance),
                        id(ev.compute_instance),
                        SystemTime::now(),
                        max_codes,
                    ),
                    None => {
                        tracing::warn!(xid = ev.data, "XID event from an unknown device handle")
                    }
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                if !logged_failure {
                    tracing::warn!(error = %e, "waiting for NVML events failed; retrying");
                    logged_failure = true;
                }
                if generation.stop.wait(interval) {
                    break;
                }
            }
        }
    }
}

/// Registers every GPU for XID events; returns the device handles (as
/// events name them) with their slots.
fn register(
    nvml: &Nvml,
    set: &EventSet<'_>,
    slots: Vec<Arc<GpuSlot>>,
) -> Vec<(usize, Arc<GpuSlot>)> {
    let mut handles = Vec::new();
    for slot in slots {
        let registered = nvml
            .device_by_index(slot.index)
            .map(|d| raw::device_handle(&d))
            .and_then(|h| set.register(h, raw::XID_EVENT).map(|()| h));
        match registered {
            Ok(h) => handles.push((h as usize, slot)),
            Err(e) => {
                tracing::warn!(gpu = slot.index, error = %e, "cannot register for XID events on this GPU")
            }
        }
    }
    handles
}
