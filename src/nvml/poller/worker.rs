//! A GPU's worker thread: gets the device handle, reads the identity, then
//! samples every interval and records the outcome on the GPU's slot until
//! its generation stops (or the driver goes away underneath it).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::super::calls::Calls;
use super::super::errors::{error_name, ErrorBook};
use super::super::sampler::GpuSampler;
use super::super::watchdog::lock;
use super::{Generation, GpuSlot};
use crate::family::FamilySet;
use crate::snapshot::{GpuIdentity, GpuReadings, Health};

pub fn run(
    nvml: Arc<Nvml>,
    slot: Arc<GpuSlot>,
    generation: Arc<Generation>,
    families: FamilySet,
    interval: Duration,
) {
    let nvml: &Nvml = &nvml;
    let Some(device) = open(nvml, &slot, &generation, interval) else {
        return;
    };
    let mut sampler = GpuSampler::new(nvml, device, slot.index, families, &slot.tracker);
    sampler.calls.errors = lock(&slot.state).errors.clone();
    // Read again after every (re-)initialization: a driver reload may have
    // renumbered the GPUs.
    let mut identity_known = false;
    let mut was_lost = lock(&slot.state).health == Some(Health::Lost);

    while !generation.stop.is_stopped() {
        let started = Instant::now();
        sampler.calls.lost = false;
        if !identity_known {
            identity_known = read_identity(&mut sampler, &slot);
        }
        let readings = sampler.sample();
        let took = started.elapsed();
        record(
            &slot,
            &generation,
            &sampler.calls,
            readings,
            took,
            &mut was_lost,
        );
        slot.sampled(&generation);
        if sampler.calls.driver_gone {
            return;
        }
        if generation
            .stop
            .wait(interval.saturating_sub(started.elapsed()))
        {
            break;
        }
    }
}

/// The GPU's handle; without one, records why, waits an interval (the
/// supervisor then starts another worker) and returns `None`.
fn open<'n>(
    nvml: &'n Nvml,
    slot: &GpuSlot,
    generation: &Generation,
    interval: Duration,
) -> Option<Device<'n>> {
    slot.tracker.enter("info");
    let device = nvml.device_by_index(slot.index);
    slot.tracker.exit();
    let e = match device {
        Ok(d) => return Some(d),
        Err(e) => e,
    };
    let mut st = lock(&slot.state);
    let first = st.errors.record("info", &error_name(&e));
    st.health = Some(if matches!(e, NvmlError::GpuLost) {
        Health::Lost
    } else {
        Health::Failing
    });
    st.readings = None;
    if first {
        tracing::warn!(gpu = slot.index, error = %e, "cannot get a handle for this GPU; retrying every interval");
    }
    drop(st);
    slot.sampled(generation);
    generation.stop.wait(interval);
    None
}

/// Reads the identity; true once the UUID is known. A different UUID at
/// this index is another GPU: its counts start afresh.
fn read_identity(sampler: &mut GpuSampler<'_>, slot: &GpuSlot) -> bool {
    let (uuid, identity) = sampler.identity();
    let mut st = lock(&slot.state);
    if let Some(u) = uuid {
        if st.uuid.as_ref().is_some_and(|old| *old != u) {
            tracing::warn!(gpu = slot.index, old = st.uuid.as_deref().unwrap_or(""), new = %u,
                "a different GPU now has this index; its counts start afresh");
            st.xids.clear();
            st.xid_other = None;
            st.errors = ErrorBook::default();
            sampler.calls.errors = ErrorBook::default();
        }
        st.uuid = Some(u);
        st.identity = identity;
        true
    } else {
        if st.identity == GpuIdentity::default() {
            st.identity = identity;
        }
        false
    }
}

/// Records a sample's outcome on the slot: lost, driver gone, failing
/// (every call failed), or up with its readings.
fn record(
    slot: &GpuSlot,
    generation: &Generation,
    calls: &Calls<'_>,
    readings: Option<GpuReadings>,
    took: Duration,
    was_lost: &mut bool,
) {
    let mut st = lock(&slot.state);
    st.errors = calls.errors.clone();
    if calls.lost {
        if !*was_lost {
            tracing::error!(
                gpu = slot.index,
                uuid = st.uuid.as_deref().unwrap_or(""),
                "GPU is lost (fell off the bus): readings withdrawn until it answers again"
            );
            *was_lost = true;
        }
        st.health = Some(Health::Lost);
        st.readings = None;
    } else if calls.driver_gone {
        generation.driver_gone.store(true, Ordering::SeqCst);
        st.health = Some(Health::Failing);
        st.readings = None;
    } else if calls.answered_this_sample == 0 && calls.failed_this_sample > 0 {
        st.health = Some(Health::Failing);
        st.readings = None;
    } else if let Some(r) = readings {
        if *was_lost {
            tracing::info!(gpu = slot.index, "GPU answers again after being lost");
            *was_lost = false;
        }
        st.mig_enabled = r.mig_mode.is_some_and(|m| m.current);
        st.health = Some(Health::Up);
        st.readings = Some(r);
        st.last_sample = Some(SystemTime::now());
        st.sample_duration = Some(took);
    }
}
