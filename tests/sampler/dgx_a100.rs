//! A100 MIG: instances, profiles and memory are there; per-instance
//! activity is absent because A100 has no GPM.

use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::FamilySet;

#[test]
fn dgx_a100_mig_without_activity() {
    in_own_process!(dgx_a100_mig_without_activity);
    let (poller, snaps) = start_sim(
        "dgx-a100",
        Duration::from_millis(100),
        Duration::from_secs(5),
        FamilySet::all(),
    );
    // Three rounds after the first: GPM would have had its two samples.
    snaps.wait_for("all 8 GPUs sampled", Duration::from_secs(20), |s| {
        all_up_with_readings(s, 8)
    });
    let first = snaps.len();
    let s = snaps.wait_for("three more polls", Duration::from_secs(20), |s| {
        all_up_with_readings(s, 8) && snaps.len() > first + 3
    });
    for g in &s.gpus {
        assert_eq!(g.identity.architecture.as_deref(), Some("Ampere"));
        let r = readings(g);
        assert!(r.activity.is_empty(), "no GPM on A100");
        assert!(
            r.mig.iter().all(|gi| gi.activity.is_empty()),
            "no per-instance activity on A100"
        );
        assert!(
            g.nvml_errors.is_empty(),
            "GPU {}: {:?}",
            g.index,
            g.nvml_errors
        );
    }
    let profiles = |i: usize| -> Vec<String> {
        let mut p: Vec<String> = readings(&s.gpus[i])
            .mig
            .iter()
            .map(|gi| gi.profile.clone())
            .collect();
        p.sort();
        p
    };
    assert_eq!(
        profiles(0),
        vec!["1g.10gb", "2g.20gb", "2g.20gb", "2g.20gb"]
    );
    assert_eq!(profiles(1), vec!["3g.40gb", "4g.40gb"]);
    for i in 0..2 {
        for gi in &readings(&s.gpus[i]).mig {
            assert!(gi.memory.is_some_and(|m| m.total_bytes > 0));
            assert!(gi
                .compute_instances
                .iter()
                .all(|ci| ci.mig_uuid.starts_with("MIG-")));
        }
    }
    assert!(readings(&s.gpus[3]).mig.is_empty());
    assert!(readings(&s.gpus[3])
        .utilization
        .iter()
        .any(|(e, _)| *e == nvml_exporter::snapshot::Engine::Gpu));
    poller.shutdown(Duration::from_secs(5));
}
