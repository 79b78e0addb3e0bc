//! Per-group intervals on the real poller and the simulated driver: a
//! family given a longer interval costs the driver its calls only on the
//! polls that read it, its series stay in every snapshot in between
//! (carried), and a schedule swapped in while the poller runs (a reload
//! of the selection file) is followed from the next poll.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::{Family, FamilySet};
use nvml_exporter::schedule::Schedule;

/// NVML calls of `function` per call of nvmlDeviceGetPowerUsage (one per
/// GPU poll) over `polls` ticks.
fn ratio(socket: &Path, function: &str, tick: Duration, polls: u32) -> f64 {
    control(socket, r#"{ action = "reset-calls" }"#);
    std::thread::sleep(tick * polls);
    let calls = parse_calls(&control(socket, r#"{ action = "calls" }"#));
    let power = calls.get("nvmlDeviceGetPowerUsage").copied().unwrap_or(0);
    assert!(
        power >= 8 * u64::from(polls / 2),
        "{power} GPU polls counted"
    );
    calls.get(function).copied().unwrap_or(0) as f64 / power as f64
}

#[test]
fn a_slow_family_is_read_every_nth_poll_carried_between_and_reloadable() {
    in_own_process!(a_slow_family_is_read_every_nth_poll_carried_between_and_reloadable);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    let tick = Duration::from_millis(200);
    let families = FamilySet::defaults();
    let slow_clocks = Schedule::new(families.clone(), tick, tick, &[(Family::Clocks, tick * 4)]);
    let schedule = Arc::new(arc_swap::ArcSwap::from_pointee(slow_clocks));
    let (poller, snaps) = start_scheduled(
        "dgx-h100",
        tick,
        Duration::from_secs(5),
        families.clone(),
        schedule.clone(),
    );
    snaps.wait_for("ready", Duration::from_secs(30), |s| {
        all_up_with_readings(s, 8)
    });
    let from = snaps.len();

    // nvmlDeviceGetPerformanceState is one of the clocks family's calls
    // of every poll (the ECC mode this test counted before is read at the
    // slow cadence of settings, SLOW_REFRESH_POLLS).
    let slow = ratio(&socket, "nvmlDeviceGetPerformanceState", tick, 16);
    assert!(
        (0.15..=0.4).contains(&slow),
        "clocks read on {slow:.2} of the polls, want about 1 in 4"
    );
    // Every snapshot since ready has every GPU's clock readings: the polls
    // that skip clocks carry the last ones.
    let later = snaps.all();
    let mut carried = 0;
    for s in &later[from..] {
        for g in s.gpus.iter().filter(|g| g.readings.is_some()) {
            let r = readings(g);
            // Said so, for whoever derives a rate (the DCGM output).
            assert!(
                r.carried.iter().all(|f| *f == Family::Clocks),
                "{:?}",
                r.carried
            );
            carried += usize::from(r.carried.contains(&Family::Clocks));
            assert!(
                r.performance_state.is_some(),
                "GPU {} lost its P-state",
                g.index
            );
            assert!(
                !r.clocks_hertz.is_empty(),
                "GPU {} lost its clocks",
                g.index
            );
        }
    }

    assert!(carried > 0, "no snapshot says clocks were carried forward");

    // A reload puts clocks back on every poll.
    schedule.store(Arc::new(Schedule::uniform(families, tick)));
    std::thread::sleep(tick * 2);
    let every = ratio(&socket, "nvmlDeviceGetPerformanceState", tick, 8);
    assert!(
        (0.9..=1.1).contains(&every),
        "clocks read on {every:.2} of the polls after the reload, want every one"
    );
    poller.shutdown(Duration::from_secs(5));
}
