//! XIDs are counted from the event set as they happen, with the MIG
//! instance the driver names, and injected faults show in the snapshot.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::snapshot::*;

fn xid(g: &GpuState, code: u64) -> Vec<&XidCount> {
    g.xids.iter().filter(|x| x.xid == code).collect()
}

#[test]
fn xids_with_mig_attribution_and_injected_faults() {
    in_own_process!(xids_with_mig_attribution_and_injected_faults);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    // A long interval: XIDs must not wait for a poll to be counted.
    let (poller, snaps) = start_sim(
        "dgx-h100",
        Duration::from_millis(300),
        Duration::from_secs(5),
        FamilySet::defaults(),
    );
    let s = snaps.wait_for("ready", Duration::from_secs(20), |s| {
        all_up_with_readings(s, 8)
    });
    let gi = readings(&s.gpus[0]).mig[2].gpu_instance;

    control(
        &socket,
        &format!(
            "{{ action = \"xid\", gpu = 0, code = 31, gpu_instance = {gi}, compute_instance = 0 }}"
        ),
    );
    control(
        &socket,
        &format!(
            "{{ action = \"xid\", gpu = 0, code = 31, gpu_instance = {gi}, compute_instance = 0 }}"
        ),
    );
    control(&socket, r#"{ action = "xid", gpu = 5, code = 13 }"#);
    let s = snaps.wait_for("XIDs counted", Duration::from_secs(10), |s| {
        gpu(s, 0).is_some_and(|g| xid(g, 31).iter().any(|x| x.count == 2))
            && gpu(s, 5).is_some_and(|g| !xid(g, 13).is_empty())
    });
    let on_mig = xid(&s.gpus[0], 31);
    assert_eq!(on_mig.len(), 1);
    assert_eq!(on_mig[0].gpu_instance, Some(gi));
    assert_eq!(on_mig[0].compute_instance, Some(0));
    let whole = xid(&s.gpus[5], 13);
    assert_eq!(whole.len(), 1);
    assert_eq!(
        (
            whole[0].count,
            whole[0].gpu_instance,
            whole[0].compute_instance
        ),
        (1, None, None)
    );
    assert!(s
        .gpus
        .iter()
        .filter(|g| g.index != 0 && g.index != 5)
        .all(|g| g.xids.is_empty()));

    // An injected ECC error moves the counters at the next poll.
    let before = readings(&s.gpus[4])
        .ecc_errors
        .iter()
        .find(|e| {
            e.error == EccError::Corrected
                && e.scope == EccScope::Volatile
                && e.location == EccLocation::All
        })
        .map(|e| e.count)
        .expect("corrected volatile total");
    control(
        &socket,
        r#"{ action = "ecc", gpu = 4, error_type = "corrected", location = "dram", count = 3 }"#,
    );
    snaps.wait_for("ECC error counted", Duration::from_secs(10), |s| {
        gpu(s, 4)
            .and_then(|g| g.readings.as_ref())
            .is_some_and(|r| {
                r.ecc_errors.iter().any(|e| {
                    e.error == EccError::Corrected
                        && e.scope == EccScope::Volatile
                        && e.location == EccLocation::All
                        && e.count >= before + 3
                })
            })
    });
    poller.shutdown(Duration::from_secs(5));
}
