//! Settings read at the slow cadence (docs/metrics.md, "Freshness"): an
//! operator's change reaches the readings within `SLOW_REFRESH_POLLS` polls,
//! at once when the power throttle reasons say the limit moved, and the
//! calls behind them are made about once per that many polls, not every
//! poll. MIG mode likewise, at once when the utilization rates say the
//! current mode flipped; NVLink link states and per-link error counters
//! likewise, at once when the GPU's error totals move.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::nvml::SLOW_REFRESH_POLLS;
use nvml_exporter::snapshot::{NvLinkError, PowerLimit, Snapshot};

fn enforced_watts(s: &Snapshot, gpu: usize) -> Option<f64> {
    let g = s.gpus.get(gpu)?;
    let r = g.readings.as_ref()?;
    r.power_limits
        .iter()
        .find(|(l, _)| *l == PowerLimit::Enforced)
        .map(|(_, w)| *w)
}

/// GPU `gpu`'s polls published after `from` (their sample times).
fn polls_since(snaps: &Snapshots, gpu: usize, from: SystemTime) -> usize {
    let mut times: Vec<SystemTime> = snaps
        .all()
        .iter()
        .filter_map(|s| s.gpus.get(gpu).and_then(|g| g.last_sample))
        .filter(|t| *t > from)
        .collect();
    times.sort();
    times.dedup();
    times.len()
}

/// Calls of `function` per GPU poll (nvmlDeviceGetPowerUsage: one per GPU
/// poll) over `polls` ticks.
fn per_poll(socket: &Path, tick: Duration, polls: u32) -> (u64, impl Fn(&str) -> f64) {
    control(socket, r#"{ action = "reset-calls" }"#);
    std::thread::sleep(tick * polls);
    let calls = parse_calls(&control(socket, r#"{ action = "calls" }"#));
    let gpu_polls = calls.get("nvmlDeviceGetPowerUsage").copied().unwrap_or(0);
    (gpu_polls, move |f: &str| {
        calls.get(f).copied().unwrap_or(0) as f64 / gpu_polls.max(1) as f64
    })
}

#[test]
fn settings_are_read_at_the_slow_cadence_and_a_change_is_seen_within_it() {
    in_own_process!(settings_are_read_at_the_slow_cadence_and_a_change_is_seen_within_it);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    let tick = Duration::from_millis(150);
    let (poller, snaps) = start_dgx_h100_ready(tick, FamilySet::defaults());
    assert_eq!(enforced_watts(&snaps.latest().unwrap(), 0), Some(700.0));

    // Over 3 slow periods each setting is read about once a period, the
    // draw every poll.
    let polls = 3 * SLOW_REFRESH_POLLS as u32;
    let (gpu_polls, ratio) = per_poll(&socket, tick, polls);
    assert!(
        gpu_polls >= 8 * u64::from(polls) / 2,
        "{gpu_polls} GPU polls counted"
    );
    let most = 2.0 / SLOW_REFRESH_POLLS as f64;
    for f in [
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetDisplayActive",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetMigMode",
    ] {
        let r = ratio(f);
        assert!(
            r > 0.0 && r <= most,
            "{f}: {r:.3} calls per GPU poll, want at most {most:.3}"
        );
    }
    assert!((0.9..=1.1).contains(&ratio("nvmlDeviceGetPerformanceState")));

    // An operator's `nvidia-smi -pl 500`: seen within the slow period.
    let from = SystemTime::now();
    control(
        &socket,
        r#"{ action = "power-limit", gpu = 0, watts = 500.0 }"#,
    );
    snaps.wait_for(
        "GPU 0's new limit",
        tick * (SLOW_REFRESH_POLLS as u32 + 8),
        |s| enforced_watts(s, 0) == Some(500.0),
    );
    let took = polls_since(&snaps, 0, from);
    assert!(
        took <= SLOW_REFRESH_POLLS as usize + 1,
        "the new limit took {took} polls, more than the {SLOW_REFRESH_POLLS} documented"
    );

    // The same change with the power cap engaging: read at the next poll.
    let from = SystemTime::now();
    control(
        &socket,
        r#"{ action = "power-limit", gpu = 1, watts = 400.0 }"#,
    );
    control(
        &socket,
        r#"{ action = "throttle", gpu = 1, reasons = ["sw-power-cap"] }"#,
    );
    snaps.wait_for(
        "GPU 1's new limit",
        tick * (SLOW_REFRESH_POLLS as u32 + 8),
        |s| enforced_watts(s, 1) == Some(400.0),
    );
    let took = polls_since(&snaps, 1, from);
    assert!(
        took <= 2,
        "the new limit took {took} polls with the power cap engaged"
    );

    // MIG mode: an operator enables it on the idle GPU 7. The utilization
    // rates stop answering at once, and the mode is re-read at that poll.
    let mig = |s: &Snapshot, gpu: usize| {
        s.gpus
            .get(gpu)
            .and_then(|g| g.readings.as_ref())
            .and_then(|r| r.mig_mode)
            .map(|m| (m.current, m.pending))
    };
    assert_eq!(mig(&snaps.latest().unwrap(), 7), Some((false, false)));
    for (enabled, want) in [("true", (true, true)), ("false", (false, false))] {
        let from = SystemTime::now();
        control(
            &socket,
            &format!(r#"{{ action = "mig-mode", gpu = 7, enabled = {enabled} }}"#),
        );
        snaps.wait_for(
            "GPU 7's new MIG mode",
            tick * (SLOW_REFRESH_POLLS as u32 + 8),
            |s| mig(s, 7) == Some(want),
        );
        let took = polls_since(&snaps, 7, from);
        assert!(
            took <= 2,
            "MIG mode {enabled} took {took} polls; the utilization rates said it moved"
        );
    }
    // A change that waits for a reset moves only the pending mode, which no
    // cheap reading shows: seen within the slow period.
    let from = SystemTime::now();
    control(
        &socket,
        r#"{ action = "mig-mode", gpu = 7, enabled = true, activate = false }"#,
    );
    snaps.wait_for(
        "GPU 7's pending MIG mode",
        tick * (SLOW_REFRESH_POLLS as u32 + 8),
        |s| mig(s, 7) == Some((false, true)),
    );
    let took = polls_since(&snaps, 7, from);
    assert!(
        took <= SLOW_REFRESH_POLLS as usize + 1,
        "the pending MIG mode took {took} polls, more than the {SLOW_REFRESH_POLLS} documented"
    );
    nvlink_per_link_reads_follow_the_totals(&socket, &snaps, tick, gpu_polls, &ratio);
    poller.shutdown(Duration::from_secs(5));
}

/// NVLink (docs/metrics.md, "Freshness"): the per-link states and error
/// counters are read in a batch of their own about once per slow period,
/// the error totals and traffic every poll in the scalar batch; an error
/// is seen at the next poll (its total moved), a link going down within
/// the slow period.
fn nvlink_per_link_reads_follow_the_totals(
    socket: &Path,
    snaps: &Snapshots,
    tick: Duration,
    gpu_polls: u64,
    ratio: &impl Fn(&str) -> f64,
) {
    // One scalar batch per poll, the NVLink batch once per slow period,
    // thresholds and module limits at the static refresh (every field
    // batch was two per poll before).
    let batches = ratio("nvmlDeviceGetFieldValues");
    let most = 1.0 + 2.0 / SLOW_REFRESH_POLLS as f64 + 0.1;
    assert!(
        batches <= most,
        "{batches:.3} field batches per GPU poll over {gpu_polls} GPU polls, want at most {most:.3}"
    );
    let errors = |s: &Snapshot, gpu: usize, kind: NvLinkError| -> u64 {
        s.gpus[gpu]
            .readings
            .as_ref()
            .map(|r| {
                r.nvlinks
                    .iter()
                    .flat_map(|l| &l.errors)
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, n)| n)
                    .sum()
            })
            .unwrap_or(0)
    };
    let links_up = |s: &Snapshot, gpu: usize| -> usize {
        s.gpus[gpu]
            .readings
            .as_ref()
            .map(|r| r.nvlinks.iter().filter(|l| l.up).count())
            .unwrap_or(0)
    };
    let latest = snaps.latest().unwrap();
    let before = errors(&latest, 2, NvLinkError::Replay);
    assert_eq!(links_up(&latest, 3), 18);
    // Link 5 of GPU 2 replays: the legacy total moves, the links are read.
    let from = SystemTime::now();
    control(
        socket,
        r#"{ action = "nvlink-errors", gpu = 2, link = 5, counter = "replay", count = 7 }"#,
    );
    snaps.wait_for(
        "GPU 2's replays",
        tick * (SLOW_REFRESH_POLLS as u32 + 8),
        |s| errors(s, 2, NvLinkError::Replay) >= before + 7,
    );
    let took = polls_since(snaps, 2, from);
    assert!(
        took <= 2,
        "NVLink replays took {took} polls; their total moved at once"
    );
    // Link 4 of GPU 3 goes down, no counter moving: within the slow period.
    let from = SystemTime::now();
    control(
        socket,
        r#"{ action = "nvlink-state", gpu = 3, link = 4, up = false }"#,
    );
    snaps.wait_for(
        "GPU 3's link down",
        tick * (SLOW_REFRESH_POLLS as u32 + 8),
        |s| links_up(s, 3) == 17,
    );
    let took = polls_since(snaps, 3, from);
    assert!(
        took <= SLOW_REFRESH_POLLS as usize + 1,
        "a link down took {took} polls, more than the {SLOW_REFRESH_POLLS} documented"
    );
}
