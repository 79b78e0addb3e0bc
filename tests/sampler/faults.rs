//! The `faults` timeline, sped up 5x: GPU 2 lost (XID 79), GPU 3 hung and
//! recovering, GPU 0 MIG reconfigured; the other GPUs stay fresh, counters
//! never go backwards and the thread count stays bounded.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::snapshot::*;

const SCALE: f64 = 5.0;

#[allow(
    clippy::too_many_lines,
    reason = "one timeline of faults in one process, whose driver state is per process"
)]
#[test]
fn faults_timeline() {
    in_own_process!(faults_timeline);
    let logs = Logs::install();
    std::env::set_var("NVML_SIM_TIME_SCALE", SCALE.to_string());
    let interval = Duration::from_millis(100);
    let (poller, snaps) = start_sim("faults", interval, Duration::from_secs(1), FamilySet::all());
    let t0 = Instant::now();

    let first = snaps.wait_for("first full sample", Duration::from_secs(20), |s| s.ready);
    let initial_gpu0: Vec<String> = first.gpus[0]
        .readings
        .as_ref()
        .map(|r| r.mig.iter().map(|g| g.profile.clone()).collect())
        .unwrap_or_default();
    let baseline_threads = thread_count();

    // t=10/5: GPU 2 falls off the bus after XID 79.
    let s = snaps.wait_for(
        "GPU 2 lost with XID 79 counted",
        Duration::from_secs(20),
        |s| {
            gpu(s, 2).is_some_and(|g| {
                g.health == Health::Lost && g.xids.iter().any(|x| x.xid == 79 && x.count >= 1)
            })
        },
    );
    let g2 = &s.gpus[2];
    assert!(g2.readings.is_none(), "a lost GPU's readings are withdrawn");
    assert!(
        g2.uuid.starts_with("GPU-") && g2.identity.name.is_some(),
        "identity kept"
    );
    assert_eq!(g2.uuid, first.gpus[2].uuid);
    assert!(g2.nvml_errors.iter().any(|e| e.error == "gpu_is_lost"));
    for g in s.gpus.iter().filter(|g| g.index != 2 && g.index != 3) {
        assert_eq!(
            g.health,
            Health::Up,
            "GPU {} untouched by GPU 2's loss",
            g.index
        );
    }

    // t=15/5: every call on GPU 3 blocks.
    let hung = snaps.wait_for("GPU 3 hung", Duration::from_secs(20), |s| {
        gpu(s, 3).is_some_and(|g| g.health == Health::Hung)
    });
    let g3 = &hung.gpus[3];
    assert!(g3.readings.is_none(), "a hung GPU's readings are withdrawn");
    assert!(g3.stuck_call.is_some(), "the stuck call is named");
    assert_eq!(g3.uuid, first.gpus[3].uuid, "identity kept while hung");
    let frozen = g3.last_sample;

    // While GPU 3 hangs: others keep being sampled, its sample time stays
    // put, and no threads pile up.
    let mut max_threads = 0;
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        max_threads = max_threads.max(thread_count());
        std::thread::sleep(Duration::from_millis(50));
    }
    let later = snaps.latest().unwrap();
    assert_eq!(
        later.gpus[3].health,
        Health::Hung,
        "still hung 2 s later (the hang lasts {} s)",
        60.0 / SCALE
    );
    assert_eq!(
        later.gpus[3].last_sample, frozen,
        "last sample of a hung GPU does not advance"
    );
    for i in [1usize, 4, 5, 6, 7] {
        let (before, after) = (
            hung.gpus[i].last_sample.unwrap(),
            later.gpus[i].last_sample.unwrap(),
        );
        assert!(after > before, "GPU {i} stays fresh while GPU 3 hangs");
        assert_eq!(later.gpus[i].health, Health::Up);
    }
    assert!(
        max_threads <= baseline_threads + 2,
        "thread count bounded while GPU 3 hangs: baseline {baseline_threads}, max {max_threads}"
    );

    // t=25/5: GPU 0's MIG layout changes.
    let s = snaps.wait_for("GPU 0 MIG re-enumerated", Duration::from_secs(20), |s| {
        gpu(s, 0)
            .and_then(|g| g.readings.as_ref())
            .is_some_and(|r| {
                let p: Vec<&str> = r.mig.iter().map(|g| g.profile.as_str()).collect();
                !p.is_empty() && p != initial_gpu0.iter().map(String::as_str).collect::<Vec<_>>()
            })
    });
    let mut p: Vec<String> = readings(&s.gpus[0])
        .mig
        .iter()
        .map(|g| g.profile.clone())
        .collect();
    p.sort();
    assert_eq!(p, vec!["1g.20gb", "2g.20gb", "3g.40gb"]);
    let old_uuids: Vec<String> = first.gpus[0]
        .readings
        .as_ref()
        .unwrap()
        .mig
        .iter()
        .flat_map(|g| g.compute_instances.iter().map(|c| c.mig_uuid.clone()))
        .collect();
    for gi in &readings(&s.gpus[0]).mig {
        for ci in &gi.compute_instances {
            assert!(
                !old_uuids.contains(&ci.mig_uuid),
                "vanished instances are gone"
            );
        }
    }

    // The hang ends after 60/5 s: GPU 3 recovers by itself, sampled again.
    // The readings withdrawn while the call was stuck come back when it
    // returns (`publish.rs`), and are the pre-hang ones until the sample it
    // was part of completes: waiting for Up alone raced that sample (seen
    // once in a full run of this binary).
    let back = snaps.wait_for("GPU 3 recovered", Duration::from_secs(30), |s| {
        gpu(s, 3).is_some_and(|g| {
            g.health == Health::Up && g.readings.is_some() && g.last_sample > frozen
        })
    });
    assert!(back.gpus[3].stuck_call.is_none());
    assert!(t0.elapsed() >= Duration::from_secs_f64(60.0 / SCALE));

    let end = snaps.latest().unwrap();
    assert!(
        end.gpus[1].xids.iter().any(|x| x.xid == 48),
        "XID 48 on GPU 1"
    );
    assert!(
        end.gpus[4].xids.iter().any(|x| x.xid == 43),
        "XID 43 on GPU 4"
    );
    assert!(readings(&end.gpus[1])
        .ecc_errors
        .iter()
        .any(|e| e.error == EccError::Uncorrected
            && e.scope == EccScope::Volatile
            && e.location == EccLocation::Dram
            && e.count >= 1));
    assert!(readings(&end.gpus[5])
        .remapped_rows
        .is_some_and(|r| r.pending));
    assert!(readings(&end.gpus[6])
        .throttle_active
        .iter()
        .any(|(r, on)| *r == ThrottleReason::HwThermal && *on));
    assert_eq!(end.gpus[7].health, Health::Up);
    poller.shutdown(Duration::from_secs(5));

    assert_counters_monotonic(&snaps.all());

    // GPU 2 stayed lost for many polls: the log says so once.
    let lost = logs.lines_containing("GPU is lost");
    assert_eq!(lost.len(), 1, "lost GPU logged once: {lost:#?}");
    assert!(lost[0].contains("gpu=2"), "{}", lost[0]);
    let hung = logs.lines_containing("GPU is hung");
    assert_eq!(hung.len(), 1, "hang logged once: {hung:#?}");
    assert!(hung[0].contains("gpu=3"));
    assert_eq!(logs.lines_containing("after a hung driver call").len(), 1);
    // Every failing call is counted, but each (gpu, family, error) logged once.
    let failures = logs.lines_containing("NVML call failed");
    let mut distinct = std::collections::HashSet::new();
    for line in &failures {
        let key: Vec<&str> = line
            .split_whitespace()
            .filter(|w| {
                w.starts_with("gpu=") || w.starts_with("family=") || w.starts_with("error=")
            })
            .collect();
        assert!(distinct.insert(key.join(" ")), "logged twice: {line}");
    }
}

/// Every counter, per GPU and label set, never decreases from one snapshot
/// to the next in which it is present.
fn assert_counters_monotonic(all: &[std::sync::Arc<Snapshot>]) {
    let mut last: BTreeMap<(u32, String), f64> = BTreeMap::new();
    let mut checked = 0usize;
    for s in all {
        for g in &s.gpus {
            let mut counters: Vec<(String, f64)> = Vec::new();
            for x in &g.xids {
                counters.push((
                    format!("xid{}/{:?}/{:?}", x.xid, x.gpu_instance, x.compute_instance),
                    x.count as f64,
                ));
            }
            for e in &g.nvml_errors {
                counters.push((format!("err/{}/{}", e.family, e.error), e.count as f64));
            }
            if let Some(r) = &g.readings {
                if let Some(j) = r.energy_joules {
                    counters.push(("energy".into(), j));
                }
                for e in &r.ecc_errors {
                    counters.push((
                        format!("ecc/{:?}/{:?}/{:?}", e.error, e.scope, e.location),
                        e.count as f64,
                    ));
                }
                for (reason, secs) in &r.throttle_seconds {
                    counters.push((format!("throttle/{reason:?}"), *secs));
                }
                for (name, v) in [
                    ("pcie_tx", r.pcie.tx_bytes),
                    ("pcie_rx", r.pcie.rx_bytes),
                    ("replay", r.pcie.replay_errors),
                ] {
                    if let Some(v) = v {
                        counters.push((name.into(), v as f64));
                    }
                }
                for l in &r.nvlinks {
                    for (name, v) in [("tx", l.tx_bytes), ("rx", l.rx_bytes)] {
                        if let Some(v) = v {
                            counters.push((format!("nvlink{}/{name}", l.link), v as f64));
                        }
                    }
                    for (e, v) in &l.errors {
                        counters.push((format!("nvlink{}/{e:?}", l.link), *v as f64));
                    }
                }
            }
            for (key, value) in counters {
                if let Some(prev) = last.insert((g.index, key.clone()), value) {
                    assert!(
                        value >= prev,
                        "GPU {} counter {key} went backwards: {prev} -> {value}",
                        g.index
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "enough counter pairs compared ({checked})");
}
