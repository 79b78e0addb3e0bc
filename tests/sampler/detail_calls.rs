//! A detail switch that is off costs no driver work: the sampler does not
//! read what only that switch's families export. Counted by the simulator
//! (its `calls` control request) on dgx-h100, default families against
//! every detail switch on, one after the other in one process (the fleet,
//! and so the counters, are per process).

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::{Family, FamilySet};
use nvml_exporter::snapshot::{EccLocation, GpmMetric, Snapshot};

struct Run {
    /// NVML calls per GPU poll, by function.
    per_poll: BTreeMap<String, f64>,
    snapshots: Vec<Arc<Snapshot>>,
}

/// Polls dgx-h100 with `families` for a few intervals past warm-up and
/// returns the calls made per GPU poll.
fn run(socket: &Path, families: FamilySet) -> Run {
    let interval = Duration::from_millis(300);
    let (poller, snaps) = start_dgx_h100_ready(interval, families);
    // Past the first polls, which also read identity and static values.
    let warm = snaps.len();
    snaps.wait_for("warm", Duration::from_secs(30), |_| snaps.len() > warm + 3);
    control(socket, r#"{ action = "reset-calls" }"#);
    std::thread::sleep(interval * 6);
    let calls = parse_calls(&control(socket, r#"{ action = "calls" }"#));
    poller.shutdown(Duration::from_secs(5));
    // Every poll of every GPU reads power usage exactly once.
    let polls = calls.get("nvmlDeviceGetPowerUsage").copied().unwrap_or(0);
    assert!(polls >= 8 * 3, "{polls} GPU polls counted");
    Run {
        per_poll: calls
            .into_iter()
            .map(|(k, v)| (k, v as f64 / polls as f64))
            .collect(),
        snapshots: snaps.all(),
    }
}

#[test]
fn detail_switches_that_are_off_skip_their_driver_reads() {
    in_own_process!(detail_switches_that_are_off_skip_their_driver_reads);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);

    let off = run(&socket, FamilySet::defaults());
    let mut all_details = FamilySet::defaults();
    for f in [
        Family::EccByLocation,
        Family::GpmAllMetrics,
        Family::NvlinkPerLink,
        Family::MigMemoryFree,
    ] {
        all_details.set(f, true);
    }
    let on = run(&socket, all_details);

    let per = |r: &Run, f: &str| r.per_poll.get(f).copied().unwrap_or(0.0);
    let total = |r: &Run| r.per_poll.values().sum::<f64>();
    println!(
        "calls per GPU poll: detail switches off {:.1}, on {:.1}",
        total(&off),
        total(&on)
    );
    for (name, n) in &on.per_poll {
        println!("  {name:<48} off {:>6.2}  on {n:>6.2}", per(&off, name));
    }

    // ECC by location: H100 SRAM counters are not in the field batch, so
    // with the switch on they take nvmlDeviceGetMemoryErrorCounter calls;
    // with it off, none.
    let counter = "nvmlDeviceGetMemoryErrorCounter";
    assert!(per(&on, counter) >= 1.0, "on: {:.2}", per(&on, counter));
    assert!(per(&off, counter) == 0.0, "off: {:.2}", per(&off, counter));
    assert!(total(&off) < total(&on));

    // Nor are the location counters of the field batch read: the readings
    // hold the totals only (on: the locations as well).
    let located = |r: &Run| {
        r.snapshots.iter().any(|s| {
            s.gpus
                .iter()
                .filter_map(|g| g.readings.as_ref())
                .any(|r| r.ecc_errors.iter().any(|e| e.location != EccLocation::All))
        })
    };
    assert!(!located(&off) && located(&on));
    let totals = off
        .snapshots
        .last()
        .and_then(|s| s.gpus[2].readings.as_ref())
        .map_or(0, |r| r.ecc_errors.len());
    assert_eq!(totals, 4, "error x scope totals stay");

    // GPM: the metrics asked of nvmlGpmMetricsGet are the exported ones
    // (the simulator computes whatever is asked).
    let metrics = |r: &Run| {
        let mut seen = std::collections::BTreeSet::new();
        for s in &r.snapshots {
            for rd in s.gpus.iter().filter_map(|g| g.readings.as_ref()) {
                seen.extend(rd.activity.iter().map(|(m, _)| *m));
                for gi in &rd.mig {
                    seen.extend(gi.activity.iter().map(|(m, _)| *m));
                }
            }
        }
        seen
    };
    let default: std::collections::BTreeSet<GpmMetric> =
        GpmMetric::DEFAULT.iter().copied().collect();
    assert_eq!(metrics(&off), default);
    assert!(metrics(&on).contains(&GpmMetric::Fp16));
}
