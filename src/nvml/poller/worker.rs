//! A GPU's worker thread: gets the device handle, reads the identity, then
//! samples every interval and records the outcome on the GPU's slot until
//! its generation stops (or the driver goes away underneath it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::super::calls::Calls;
use super::super::driver_time::DriverTime;
use super::super::errors::{error_name, ErrorBook};
use super::super::fields::DriverBranch;
use super::super::sampler::GpuSampler;
use super::super::watchdog::lock;
use super::{Generation, GpuSlot};
use crate::schedule::SharedSchedule;
use crate::snapshot::{GpuIdentity, GpuReadings, Health};

/// The missing MIG privilege is the process's: said once, not per GPU.
static MIG_UNPRIVILEGED_LOGGED: AtomicBool = AtomicBool::new(false);

pub fn run(
    nvml: Arc<Nvml>,
    slot: Arc<GpuSlot>,
    generation: Arc<Generation>,
    schedule: SharedSchedule,
    branch: DriverBranch,
    interval: Duration,
) {
    let nvml: &Nvml = &nvml;
    let Some(device) = open(nvml, &slot, &generation, interval) else {
        return;
    };
    let mut sampler = GpuSampler::new(nvml, device, slot.index, branch, &slot.tracker);
    sampler.calls.errors = lock(&slot.state).errors.clone();
    sampler.calls.driver_time = lock(&slot.state).driver_time.clone();
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
        let readings = sampler.sample(&schedule.load());
        let took = started.elapsed();
        if readings.as_ref().and_then(|r| r.mig_privileged) == Some(false)
            && !MIG_UNPRIVILEGED_LOGGED.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                gpu = slot.index,
                "NVML withholds MIG privileges from this process: XID events of MIG instances and \
                 whole-GPU memory and process totals of MIG-enabled GPUs are not visible \
                 (nvml_exporter_mig_privileged 0). Run as root, or give the container the \
                 nvidia-capabilities mig/monitor device (docs/operations.md)"
            );
        }
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
    if matches!(e, NvmlError::NoPermission) {
        // NVML counts GPUs this process may not open (nvml.h,
        // nvmlDeviceGetCount_v2): a permission setting, not a fault. Not
        // counted as an error every interval, and not reported as lost.
        if st.health != Some(Health::Denied) {
            tracing::warn!(
                gpu = slot.index,
                "NVML denies access to this GPU (NO_PERMISSION on its handle): its device node is not \
                 available to this process; exported as nvml_exporter_gpu_access_denied, not as lost. \
                 Retrying every interval"
            );
        }
        st.health = Some(Health::Denied);
        st.readings = None;
        drop(st);
        slot.sampled(generation);
        generation.stop.wait(interval);
        return None;
    }
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
            st.ledger.forget_counts();
            st.errors = ErrorBook::default();
            sampler.calls.errors = ErrorBook::default();
            st.driver_time = DriverTime::default();
            sampler.calls.driver_time = DriverTime::default();
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

/// What in two consecutive samples shows that the GPU was reset in
/// between (or the driver reloaded): a counter no tool but a reset starts
/// again, and pending memory repairs that only a reset applies. Not the
/// volatile ECC counters: `nvidia-smi -p 0` (`nvmlDeviceClearEccErrorCounts`,
/// "takes effect immediately") zeroes them with no reset at all.
pub(super) fn reset_evidence(old: &GpuReadings, new: &GpuReadings) -> Option<&'static str> {
    // A joule of slack: the counter is read in millijoules. Total energy
    // counts "since the driver was last reloaded" (nvml.h,
    // nvmlDeviceGetTotalEnergyConsumption) and no NVML call sets it.
    if let (Some(a), Some(b)) = (old.energy_joules, new.energy_joules) {
        if b + 1.0 < a {
            return Some("the energy counter started again");
        }
    }
    if old.remapped_rows.is_some_and(|m| m.pending) && new.remapped_rows.is_some_and(|m| !m.pending)
    {
        return Some("the pending row remap was applied");
    }
    if old.retired_pages_pending == Some(true) && new.retired_pages_pending == Some(false) {
        return Some("the pending page retirement was applied");
    }
    None
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
    st.driver_time = calls.driver_time.clone();
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
        let evidence = if *was_lost {
            tracing::info!(gpu = slot.index, "GPU answers again after being lost");
            *was_lost = false;
            Some("the GPU answers again after being lost")
        } else if let Some(old) = &st.readings {
            reset_evidence(old, &r)
        } else {
            // The first sample: against what an earlier run of this boot
            // last read (`crate::state`).
            st.baseline
                .take()
                .and_then(|old| reset_evidence(&old, &r))
                .map(|_| {
                    "readings only a reset changes back changed while the exporter was stopped"
                })
        };
        if let Some(evidence) = evidence {
            drop(st);
            slot.note_reset(Instant::now(), evidence);
            st = lock(&slot.state);
        }
        st.mig_enabled = r.mig_mode.is_some_and(|m| m.current);
        if r.remapped_rows.is_some_and(|m| m.failed) {
            st.remembered.remap_failed = true;
        }
        st.health = Some(Health::Up);
        st.readings = Some(Arc::new(r));
        st.last_sample = Some(SystemTime::now());
        st.sample_duration = Some(took);
    }
}

#[cfg(test)]
mod tests {
    use super::reset_evidence;
    use crate::snapshot::{EccCount, EccError, EccLocation, EccScope, GpuReadings, RemappedRows};

    fn volatile(corrected: u64) -> EccCount {
        EccCount {
            error: EccError::Corrected,
            scope: EccScope::Volatile,
            location: EccLocation::All,
            count: corrected,
        }
    }

    #[test]
    fn counters_that_start_again_and_repairs_applied_mean_a_reset() {
        let before = GpuReadings {
            energy_joules: Some(5_000.0),
            ecc_errors: vec![volatile(7)],
            remapped_rows: Some(RemappedRows {
                correctable: 0,
                uncorrectable: 1,
                pending: true,
                failed: false,
            }),
            retired_pages_pending: Some(true),
            ..GpuReadings::default()
        };
        // Counters that grew and a repair still pending: no reset.
        let mut after = before.clone();
        after.energy_joules = Some(5_100.0);
        after.ecc_errors = vec![volatile(8)];
        assert_eq!(reset_evidence(&before, &after), None);

        let mut after = before.clone();
        after.energy_joules = Some(12.0);
        assert!(reset_evidence(&before, &after).is_some_and(|e| e.contains("energy")));
        // Volatile ECC counters back at 0: `nvidia-smi -p 0` does that
        // without a reset.
        let mut after = before.clone();
        after.ecc_errors = vec![volatile(0)];
        assert_eq!(reset_evidence(&before, &after), None);
        let mut after = before.clone();
        after.remapped_rows = after.remapped_rows.map(|r| RemappedRows {
            pending: false,
            ..r
        });
        assert!(reset_evidence(&before, &after).is_some_and(|e| e.contains("remap")));
        let mut after = before.clone();
        after.retired_pages_pending = Some(false);
        assert!(reset_evidence(&before, &after).is_some_and(|e| e.contains("retirement")));
        // A reading that went missing is not a reset.
        assert_eq!(reset_evidence(&before, &GpuReadings::default()), None);
    }
}
