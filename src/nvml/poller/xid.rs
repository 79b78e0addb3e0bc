//! The XID event thread (`nvidia_gpu_xid_errors_total`): one NVML event
//! set for every GPU, waited on in 200 ms steps with a raw
//! `nvmlEventSetWait_v2` so MIG instance ids are kept, each event counted
//! on its GPU's slot when it happens.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::raw::{self, EventSet};
use super::{Generation, GpuSlot, XidEvent, XidSource};
use crate::verdict::{self, XidClass};

const WAIT_MS: u32 = 200;

pub fn run(
    nvml: Arc<Nvml>,
    slots: Vec<Arc<GpuSlot>>,
    generation: Arc<Generation>,
    interval: Duration,
    max_codes: usize,
) {
    let nvml: &Nvml = &nvml;
    let Some((mut set, mut handles)) = build(nvml, slots) else {
        return;
    };
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
                        XidEvent {
                            code: ev.data,
                            // NVML's event carries the code alone; an
                            // NVLink5 code waits for its log line
                            // (`GpuSlot::record_xid`).
                            class: if verdict::is_nvlink5(ev.data) {
                                XidClass::Nvlink5Undecoded
                            } else {
                                XidClass::Code
                            },
                            gpu_instance: id(ev.gpu_instance),
                            compute_instance: id(ev.compute_instance),
                            source: XidSource::Nvml,
                            at: Instant::now(),
                            wall: SystemTime::now(),
                        },
                        max_codes,
                    ),
                    None => {
                        tracing::warn!(xid = ev.data, "XID event from an unknown device handle")
                    }
                }
            }
            Err(NvmlError::Timeout) => {}
            // nvml.h: a registered GPU fell off the bus, and every later
            // wait on this set says so: without a new set, the other GPUs'
            // XIDs would never arrive again.
            Err(NvmlError::GpuLost) => {
                let (lost, kept): (Vec<_>, Vec<_>) = handles
                    .into_iter()
                    .map(|(_, slot)| slot)
                    .partition(|slot| is_lost(nvml, slot.index));
                for slot in &lost {
                    tracing::warn!(
                        gpu = slot.index,
                        "GPU fell off the bus: XID events of the other GPUs continue on an event set without it"
                    );
                }
                drop(set);
                let rebuilt = if kept.is_empty() {
                    None
                } else {
                    build(nvml, kept)
                };
                let Some((new_set, new_handles)) = rebuilt else {
                    return;
                };
                (set, handles) = (new_set, new_handles);
                // If no GPU could be named lost, do not spin on the set.
                if lost.is_empty() && generation.stop.wait(interval) {
                    break;
                }
            }
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

type Registered = Vec<(usize, Arc<GpuSlot>)>;

/// A new event set with every GPU of `slots` that can be registered.
fn build(nvml: &Nvml, slots: Vec<Arc<GpuSlot>>) -> Option<(EventSet<'_>, Registered)> {
    let set = match EventSet::create(nvml) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create an NVML event set: XID errors will not be counted");
            return None;
        }
    };
    let handles = register(nvml, &set, slots);
    if handles.is_empty() {
        return None;
    }
    Some((set, handles))
}

/// Whether NVML says the GPU at `index` fell off the bus.
fn is_lost(nvml: &Nvml, index: u32) -> bool {
    matches!(
        nvml.device_by_index(index)
            .and_then(|d| d.supported_event_types()),
        Err(NvmlError::GpuLost)
    )
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
            // A GPU this process may not open is reported by its worker.
            Err(NvmlError::NoPermission) => {}
            Err(e) => {
                tracing::warn!(gpu = slot.index, error = %e, "cannot register for XID events on this GPU")
            }
        }
    }
    handles
}
