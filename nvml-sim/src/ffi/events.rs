//! Event sets (NVML reference, "Event Handling Methods"): XIDs and ECC,
//! clock and MIG change events, delivered to the sets registered for them.

use super::*;
use crate::fleet::{EventSet, Gpu};
use std::time::Instant;

fn supported_events(g: &Gpu) -> u64 {
    let mut mask =
        (nvmlEventTypeXidCriticalError | nvmlEventTypePState | nvmlEventTypeClock) as u64;
    if g.ecc_enabled() {
        mask |= (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError) as u64;
    }
    if g.model.mig_capable() {
        mask |= nvmlEventMigConfigChange as u64;
    }
    if g.model.ecc.page_retirement {
        mask |= (nvmlEventTypeDramRetirementEvent | nvmlEventTypeDramRetirementFailure) as u64;
    }
    mask
}

nvml_fn! {
    fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) {
        nonnull(set)?;
        let mut st = initialized()?;
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        let id = sim.next_event_set;
        sim.next_event_set += 1;
        sim.event_sets.insert(id, EventSet::default());
        out(set, event_set_handle(id))
    }
}

nvml_fn! {
    /// Works after shutdown too: nvml-wrapper frees sets in `Drop`.
    fn nvmlEventSetFree(set: nvmlEventSet_t) {
        let id = decode_event_set(set).ok_or(INVALID_ARGUMENT)?;
        let mut st = lock();
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        sim.event_sets.remove(&id).map(|_| ()).ok_or(INVALID_ARGUMENT)
    }
}

nvml_fn! {
    fn nvmlDeviceGetSupportedEventTypes(device: nvmlDevice_t, eventTypes: *mut std::ffi::c_ulonglong) {
        nonnull(eventTypes)?;
        let v = with_gpu(device, |g, _| Ok(supported_events(g)))?;
        out(eventTypes, v)
    }
}

nvml_fn! {
    /// NOT_SUPPORTED if any requested type is unsupported on the device.
    fn nvmlDeviceRegisterEvents(device: nvmlDevice_t, eventTypes: std::ffi::c_ulonglong, set: nvmlEventSet_t) {
        let id = decode_event_set(set).ok_or(INVALID_ARGUMENT)?;
        with_dev(device, |sim, d, _| {
            if d.mig.is_some() {
                return Err(NOT_SUPPORTED);
            }
            let supported = supported_events(&sim.gpus[d.gpu as usize]);
            if eventTypes & !supported != 0 {
                return Err(NOT_SUPPORTED);
            }
            let es = sim.event_sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
            es.registered.retain(|(g, _)| *g != d.gpu);
            es.registered.push((d.gpu, eventTypes));
            Ok(())
        })
    }
}

/// Blocks up to `timeout_ms` for an event; TIMEOUT if none arrives.
fn wait(set: nvmlEventSet_t, timeout_ms: u32) -> R<crate::fleet::Event> {
    let id = decode_event_set(set).ok_or(INVALID_ARGUMENT)?;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms as u64);
    let mut st = initialized()?;
    loop {
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        if sim.advance() {
            CHANGED.notify_all();
        }
        let es = sim.event_sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
        if let Some(ev) = es.queue.pop_front() {
            return Ok(ev);
        }
        // nvml.h: GPU_IS_LOST "if a GPU has fallen off the bus"; it stays
        // lost, so every later wait answers the same. Events queued before
        // it fell off are delivered first.
        if es
            .registered
            .iter()
            .any(|(g, _)| sim.gpus[*g as usize].lost)
        {
            return Err(GPU_IS_LOST);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(TIMEOUT);
        }
        let mut step = deadline - now;
        if let Some(due) = sim.next_due_in() {
            step = step.min(Duration::from_secs_f64(due + 0.001));
        }
        st = CHANGED
            .wait_timeout(st, step)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        if st.refcount == 0 {
            return Err(UNINITIALIZED);
        }
    }
}

nvml_fn! {
    fn nvmlEventSetWait_v2(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeoutms: c_uint) {
        nonnull(data)?;
        let ev = wait(set, timeoutms)?;
        out(data, nvmlEventData_t {
            device: device_handle(Dev { gpu: ev.gpu, mig: None }),
            eventType: ev.event_type,
            eventData: ev.data,
            gpuInstanceId: ev.gpu_instance,
            computeInstanceId: ev.compute_instance,
        })
    }
}

nvml_fn! {
    /// The v1 struct ends after `eventData`; the instance ids are not written.
    fn nvmlEventSetWait(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeoutms: c_uint) {
        nonnull(data)?;
        let ev = wait(set, timeoutms)?;
        let d = &mut *data;
        d.device = device_handle(Dev { gpu: ev.gpu, mig: None });
        d.eventType = ev.event_type;
        d.eventData = ev.data;
        Ok(())
    }
}
