//! The exporter's own driver time (`nvml_exporter_driver_seconds_total`,
//! `nvml_exporter_driver_calls_total`) against the simulated driver's own
//! account of it: with the H200's latencies charged and slept
//! (`NVML_SIM_LATENCY=h200`, `NVML_SIM_LATENCY_SLEEP=1`), every call the
//! sampler makes is counted once, the time it measured is at least what
//! the driver charged, and the family it says costs most is the one the
//! profile makes most expensive.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::snapshot::Snapshot;

/// Calls and seconds per family, summed over the GPUs.
fn exporter_account(s: &Snapshot) -> BTreeMap<&'static str, (u64, f64)> {
    let mut out = BTreeMap::new();
    for g in &s.gpus {
        for t in &g.driver_time {
            let e = out.entry(t.family).or_insert((0, 0.0));
            e.0 += t.calls;
            e.1 += t.seconds;
        }
    }
    out
}

/// The simulator's calls and charged microseconds, by function.
fn sim_account(socket: &Path) -> (BTreeMap<String, u64>, BTreeMap<String, f64>) {
    let calls = parse_calls(&control(socket, r#"{ action = "calls" }"#));
    let times = parse_inline(&control(socket, r#"{ action = "driver-time" }"#));
    (calls, times)
}

/// Functions the sampler's workers do not call: the XID event thread's
/// waits and the supervisor's device count and handles (not per-GPU
/// driver time of a poll).
fn outside_the_sampler(function: &str) -> bool {
    function.starts_with("nvmlEventSet")
        || matches!(
            function,
            "nvmlDeviceGetCount_v2" | "nvmlDeviceGetHandleByIndex_v2" | "nvmlDeviceRegisterEvents"
        )
}

#[test]
fn the_exporters_driver_time_agrees_with_the_drivers() {
    in_own_process!(the_exporters_driver_time_agrees_with_the_drivers);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::set_var("NVML_SIM_LATENCY", "h200");
    std::env::set_var("NVML_SIM_LATENCY_SLEEP", "1");
    // Long enough that the workers are idle between a published round and
    // the next tick (a dgx-h100 GPU's poll sleeps about 15 ms here).
    let tick = Duration::from_millis(400);
    let (poller, snaps) = start_dgx_h100_ready(tick, FamilySet::defaults());
    // Between two rounds the workers are idle: a published round that no
    // later one has replaced over a quarter tick in which the driver
    // answered no sampler call, and whose GPUs were all sampled in the same
    // tick, holds the same calls as the driver's account at its end. (A
    // round published while some GPUs' polls of the next tick had already
    // ended stays published until all have polled again: on a loaded
    // machine the workers' polls straddle the supervisor's publish.)
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    let sampler_calls = |calls: &BTreeMap<String, u64>| -> u64 {
        calls
            .iter()
            .filter(|(f, _)| !outside_the_sampler(f))
            .map(|(_, n)| n)
            .sum()
    };
    let one_tick = |s: &Snapshot| {
        let times: Vec<_> = s.gpus.iter().filter_map(|g| g.last_sample).collect();
        match (times.iter().min(), times.iter().max()) {
            (Some(a), Some(b)) => b.duration_since(*a).unwrap_or_default() < tick / 2,
            _ => false,
        }
    };
    let quiet = || loop {
        assert!(
            std::time::Instant::now() < give_up,
            "no quiet round in 2 minutes"
        );
        let s = snaps.wait_for("a round", Duration::from_secs(30), |s| {
            s.gpus.len() == 8 && s.gpus.iter().all(|g| g.readings.is_some())
        });
        let before = sim_account(&socket);
        std::thread::sleep(tick / 4);
        let sim = sim_account(&socket);
        let later = snaps.latest().unwrap();
        let times = |s: &Snapshot| s.gpus.iter().map(|g| g.last_sample).collect::<Vec<_>>();
        if times(&s) == times(&later)
            && one_tick(&later)
            && sampler_calls(&before.0) == sampler_calls(&sim.0)
        {
            return (later, sim);
        }
    };
    let (s1, (c1, t1)) = quiet();
    std::thread::sleep(tick * 5);
    let (s2, (c2, t2)) = quiet();
    poller.shutdown(Duration::from_secs(10));

    let (e1, e2) = (exporter_account(&s1), exporter_account(&s2));
    let exporter_calls: u64 =
        e2.values().map(|v| v.0).sum::<u64>() - e1.values().map(|v| v.0).sum::<u64>();
    let exporter_secs: f64 =
        e2.values().map(|v| v.1).sum::<f64>() - e1.values().map(|v| v.1).sum::<f64>();
    let delta_calls: u64 = c2
        .iter()
        .filter(|(f, _)| !outside_the_sampler(f))
        .map(|(f, n)| n - c1.get(f).copied().unwrap_or(0))
        .sum();
    let charged_us: f64 = t2
        .iter()
        .filter(|(f, _)| !outside_the_sampler(f))
        .map(|(f, us)| us - t1.get(f).copied().unwrap_or(0.0))
        .sum();
    eprintln!(
        "calls {exporter_calls} vs {delta_calls}; {exporter_secs} s vs {charged_us} us; {e2:?}"
    );
    assert!(exporter_calls > 0, "{e2:?}");
    assert_eq!(
        exporter_calls, delta_calls,
        "every sampler call counted once: exporter {e1:?} -> {e2:?}; driver {c1:?} -> {c2:?}"
    );
    assert!(
        exporter_secs * 1e6 >= charged_us * 0.999,
        "the exporter measured {exporter_secs} s around calls the driver charged {charged_us} us"
    );
    // The costliest family over the window, as the exporter tells it: on
    // the H200 profile, one of those priced at about a millisecond a poll:
    // the scalar field batch, the P-state (clocks), or an H100 board's
    // per-link NVLink batch where the window holds one of its slow polls.
    let costliest = e2
        .iter()
        .map(|(f, v)| (*f, v.1 - e1.get(f).map_or(0.0, |v| v.1)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    assert!(
        ["field_values", "clocks", "nvlink"].contains(&costliest.0),
        "{costliest:?} {e2:?}"
    );
}
