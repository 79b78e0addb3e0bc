//! Turns what the threads know into the published `Snapshot`: health per
//! GPU (hung, lost, failing, pending or up), readings only for GPUs that
//! are up, XID and error counts always, the evidence each GPU's verdict is
//! judged from (by the join step, `crate::join`), and readiness.

use std::time::{Duration, Instant};

use super::super::watchdog::lock;
use super::Shared;
use crate::snapshot::{DriverInfo, GpuState, Health, Snapshot, VerdictEvidence, XidCount};

/// `device_count` is `None` while NVML is down; `deadline` is the
/// stuck-call deadline, `interval` the collect interval.
pub fn build_snapshot(
    shared: &Shared,
    device_count: Option<u32>,
    driver: Option<DriverInfo>,
    deadline: Duration,
    interval: Duration,
) -> Snapshot {
    let now = Instant::now();
    let nvml_up = device_count.is_some();
    let slots = lock(&shared.slots).clone();
    let mut gpus = Vec::with_capacity(slots.len());
    for slot in &slots {
        let st = lock(&slot.state);
        let stuck_call = slot.tracker.stuck(now, deadline);
        slot.report_hang(stuck_call.as_ref(), deadline);
        let (health, readings) = if stuck_call.is_some() {
            (Health::Hung, None)
        } else if !nvml_up || device_count.is_some_and(|n| slot.index >= n) {
            (
                if st.health.is_some() {
                    Health::Failing
                } else {
                    Health::Pending
                },
                None,
            )
        } else {
            let h = st.health.unwrap_or(Health::Pending);
            (
                h,
                if h == Health::Up {
                    st.readings.clone()
                } else {
                    None
                },
            )
        };
        // NVML down: every GPU reads failing, which says nothing of it.
        let evidence = nvml_up.then(|| VerdictEvidence {
            xids: st.ledger.xids_seen(),
            remembered: st.remembered,
            // The instances of the last readings (kept while hung): an XID
            // naming another is judged on the GPU.
            instances: st
                .readings
                .iter()
                .flat_map(|r| &r.mig)
                .flat_map(|gi| {
                    gi.compute_instances
                        .iter()
                        .map(|ci| (gi.gpu_instance, ci.compute_instance))
                })
                .collect(),
            last_reset: st.last_reset,
        });
        gpus.push(GpuState {
            index: slot.index,
            uuid: st.uuid.clone().unwrap_or_default(),
            identity: st.identity.clone(),
            health,
            last_sample: st.last_sample,
            sample_duration: st.sample_duration,
            stuck_call,
            readings,
            xids: st
                .ledger
                .counts()
                .map(|((xid, gi, ci), count, last_seen)| XidCount {
                    xid,
                    gpu_instance: gi,
                    compute_instance: ci,
                    count,
                    last_seen,
                })
                .collect(),
            xid_other: st.ledger.other().cloned(),
            nvml_errors: st.errors.counts(),
            driver_time: st.driver_time.counts(),
            pods: Vec::new(),
            evidence,
            verdicts: Vec::new(),
        });
    }
    let ready = match device_count {
        Some(n) => {
            gpus.len() as u32 >= n
                && gpus
                    .iter()
                    .take(n as usize)
                    .all(|g| g.health != Health::Pending)
        }
        None => false,
    };
    Snapshot {
        nvml_up,
        ready,
        driver,
        interval,
        gpus,
        kubernetes: None,
        workloads: None,
        process: None,
        http: None,
        kernel_log: None,
        config: None,
        state_write_errors: None,
        nvsentinel: None,
        xid_last_wait: if nvml_up {
            *lock(&shared.xid_last_wait)
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::SystemTime;

    use super::super::GpuSlot;
    use super::*;
    use crate::snapshot::{Action, GpuReadings};

    #[test]
    fn a_hung_gpu_is_reported_without_readings_and_others_stay_up() {
        let shared = Shared::new();
        for i in 0..2 {
            let slot = Arc::new(GpuSlot::new(i));
            {
                let mut st = lock(&slot.state);
                st.uuid = Some(format!("GPU-{i}"));
                st.health = Some(Health::Up);
                st.readings = Some(Arc::new(GpuReadings {
                    power_usage_watts: Some(100.0),
                    ..Default::default()
                }));
            }
            lock(&shared.slots).push(slot);
        }
        let slot1 = lock(&shared.slots)[1].clone();
        slot1.tracker.enter_at(
            "power",
            Instant::now()
                .checked_sub(Duration::from_secs(10))
                .expect("uptime above 10 s"),
            SystemTime::now(),
        );
        // A snapshot of the device count given: calls stuck over 5 s, 1 s
        // interval.
        let round = |gpus| {
            build_snapshot(
                &shared,
                gpus,
                None,
                Duration::from_secs(5),
                Duration::from_secs(1),
            )
        };
        let snap = round(Some(2));
        assert!(snap.nvml_up && snap.ready);
        assert_eq!(snap.gpus[0].health, Health::Up);
        assert!(snap.gpus[0].readings.is_some());
        assert!(
            Arc::ptr_eq(
                snap.gpus[0].readings.as_ref().unwrap(),
                lock(&shared.slots)[0]
                    .state
                    .lock()
                    .unwrap()
                    .readings
                    .as_ref()
                    .unwrap()
            ),
            "the snapshot shares the slot's readings"
        );
        assert_eq!(snap.gpus[1].health, Health::Hung);
        assert!(snap.gpus[1].readings.is_none());
        // As the join step judges the evidence.
        let verdict = |g: &GpuState| {
            crate::verdict::judge_gpu(g, &[], Instant::now(), Duration::from_secs(600))
                .first()
                .map(|v| (v.action, v.reason))
        };
        assert_eq!(verdict(&snap.gpus[0]), Some((Action::None, "none")));
        assert_eq!(verdict(&snap.gpus[1]), Some((Action::ResetGpu, "hung")));
        assert_eq!(snap.gpus[1].uuid, "GPU-1");
        assert_eq!(
            snap.gpus[1].stuck_call.as_ref().map(|s| s.family),
            Some("power")
        );

        slot1.tracker.exit();
        let snap = round(Some(2));
        assert_eq!(snap.gpus[1].health, Health::Up);
        assert_eq!(
            verdict(&snap.gpus[1]),
            Some((Action::None, "none")),
            "clears when the call returns"
        );

        let down = round(None);
        assert!(!down.nvml_up && !down.ready);
        assert!(down
            .gpus
            .iter()
            .all(|g| g.health == Health::Failing && g.readings.is_none() && g.evidence.is_none()));
        assert!(down.gpus.iter().all(|g| verdict(g).is_none()));
    }
}
