//! A consumer card: ECC, MIG, NVLink and memory temperature are not
//! supported, so they are absent (never 0) and not counted as errors.

use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::snapshot::*;

#[test]
fn workstation_unsupported_families_are_absent() {
    in_own_process!(workstation_unsupported_families_are_absent);
    let (poller, snaps) = start_sim(
        "workstation",
        Duration::from_millis(100),
        Duration::from_secs(5),
        FamilySet::all(),
    );
    let s = snaps.wait_for("the one GPU sampled twice", Duration::from_secs(20), |s| {
        all_up_with_readings(s, 1)
            && gpu(s, 0)
                .and_then(|g| g.readings.as_ref())
                .is_some_and(|r| r.power_usage_watts.is_some())
    });
    let g = &s.gpus[0];
    assert!(
        g.identity
            .name
            .as_deref()
            .is_some_and(|n| n.contains("4090")),
        "{:?}",
        g.identity.name
    );
    let r = readings(g);
    assert!(r.ecc_mode.is_none(), "no ECC on a consumer card");
    assert!(r.ecc_errors.is_empty());
    assert!(r.mig_mode.is_none() && r.mig.is_empty(), "no MIG");
    assert!(r.nvlinks.is_empty(), "no NVLink");
    assert!(r.remapped_rows.is_none());
    assert!(
        !r.temperatures.iter().any(|(s, _)| *s == Sensor::Memory),
        "no memory temperature"
    );
    assert!(r.activity.is_empty(), "no GPM before Hopper");
    assert!(r.temperatures.iter().any(|(s, _)| *s == Sensor::Gpu));
    assert!(r.utilization.iter().any(|(e, _)| *e == Engine::Gpu));
    assert!(r.memory.is_some() && r.power_usage_watts.is_some());
    assert_eq!(r.display_active, Some(true));
    assert!(!r.fan_speeds.is_empty(), "a consumer card has fans");
    assert!(r.fan_speeds.iter().all(|(_, v)| (0.0..=1.0).contains(v)));
    let graphics = r
        .graphics_processes
        .as_ref()
        .expect("graphics processes listed");
    assert!(!graphics.is_empty());
    assert!(
        g.nvml_errors.is_empty(),
        "not supported is not an error: {:?}",
        g.nvml_errors
    );
    poller.shutdown(Duration::from_secs(5));
}
