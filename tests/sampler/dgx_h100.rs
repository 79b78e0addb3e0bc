//! The sampler on the simulated DGX H100: every family read, in base units,
//! for 8 GPUs and the MIG instances of GPUs 0 and 1.

use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::{Family, FamilySet};
use nvml_exporter::snapshot::*;

#[test]
fn dgx_h100_every_family() {
    in_own_process!(dgx_h100_every_family);
    let (poller, snaps) = start_sim(
        "dgx-h100",
        Duration::from_millis(100),
        Duration::from_secs(5),
        FamilySet::all(),
    );
    // Two polls with readings everywhere, so GPM has two samples to compare.
    let s = snaps.wait_for(
        "all 8 GPUs sampled with GPM activity",
        Duration::from_secs(20),
        |s| {
            // Whole GPUs need two GPM samples; MIG GPUs two per instance.
            all_up_with_readings(s, 8)
                && s.gpus.iter().all(|g| {
                    g.readings.as_ref().is_some_and(|r| {
                        if r.mig.is_empty() {
                            !r.activity.is_empty()
                        } else {
                            r.mig.iter().all(|gi| !gi.activity.is_empty())
                        }
                    })
                })
        },
    );

    assert!(s.nvml_up && s.ready);
    let driver = s.driver.as_ref().expect("driver info");
    assert!(!driver.driver_version.is_empty() && !driver.nvml_version.is_empty());
    assert!(driver
        .cuda_driver_version
        .as_deref()
        .is_some_and(|v| v.contains('.')));

    every_gpu_reads_every_family(&s);

    // Whole GPUs: utilization and GPM activity; MIG GPUs: per instance.
    for g in &s.gpus[2..] {
        let r = readings(g);
        assert_eq!(r.mig_mode.map(|m| m.current), Some(false));
        assert!(r.mig.is_empty());
        assert!(r
            .utilization
            .iter()
            .any(|(e, v)| *e == Engine::Gpu && (0.0..=1.0).contains(v)));
        for m in [GpmMetric::Sm, GpmMetric::Tensor, GpmMetric::Dram] {
            let v = r
                .activity
                .iter()
                .find(|(have, _)| *have == m)
                .unwrap_or_else(|| panic!("GPU {} GPM {m:?}", g.index))
                .1;
            assert!((0.0..=1.0).contains(&v), "{m:?} ratio {v}");
        }
        let procs = r.compute_processes.as_ref().unwrap();
        assert!(procs
            .iter()
            .all(|p| p.gpu_instance.is_none() && p.compute_instance.is_none()));
        // GPU 7 is the idle one in the scenario.
        assert_eq!(procs.is_empty(), g.index == 7, "GPU {} processes", g.index);
    }

    let profiles = |g: &GpuState| -> Vec<String> {
        readings(g)
            .mig
            .iter()
            .map(|gi| gi.profile.clone())
            .collect()
    };
    assert_eq!(profiles(&s.gpus[0]), vec!["1g.10gb"; 7]);
    let mut p1 = profiles(&s.gpus[1]);
    p1.sort();
    assert_eq!(p1, vec!["1g.10gb", "2g.20gb", "3g.40gb"]);
    for g in &s.gpus[..2] {
        let r = readings(g);
        assert_eq!(r.mig_mode.map(|m| m.current), Some(true));
        assert!(
            r.activity.is_empty(),
            "whole-GPU GPM is not read with MIG on"
        );
        assert!(
            !r.utilization.iter().any(|(e, _)| *e == Engine::Gpu),
            "utilization is unsupported under MIG"
        );
        let mut gi_ids = std::collections::HashSet::new();
        for gi in &r.mig {
            assert!(gi_ids.insert(gi.gpu_instance));
            let mem = gi.memory.expect("per-instance memory");
            assert!(mem.total_bytes > 0 && mem.total_bytes < 80 * 1024 * 1024 * 1024);
            assert!(!gi.compute_instances.is_empty());
            assert!(gi
                .compute_instances
                .iter()
                .all(|ci| ci.mig_uuid.starts_with("MIG-")));
            assert!(
                gi.activity
                    .iter()
                    .any(|(m, v)| *m == GpmMetric::Sm && (0.0..=1.0).contains(v)),
                "GI {} GPM",
                gi.gpu_instance
            );
        }
        let procs = r.compute_processes.as_ref().unwrap();
        assert!(!procs.is_empty());
        assert!(
            procs
                .iter()
                .all(|p| p.gpu_instance.is_some_and(|id| gi_ids.contains(&id))),
            "processes carry GI ids"
        );
        assert!(procs.iter().all(|p| p.compute_instance.is_some()));
    }
    // 3g.40gb holds more memory than 1g.10gb on GPU 1.
    let gi_mem = |profile: &str| {
        readings(&s.gpus[1])
            .mig
            .iter()
            .find(|g| g.profile == profile)
            .unwrap()
            .memory
            .unwrap()
            .total_bytes
    };
    assert!(gi_mem("3g.40gb") > gi_mem("2g.20gb") && gi_mem("2g.20gb") > gi_mem("1g.10gb"));

    // process_memory is on (FamilySet::all): names come with it.
    let p = &readings(&s.gpus[2]).compute_processes.as_ref().unwrap()[0];
    assert!(p.name.as_deref().is_some_and(|n| !n.is_empty()));
    assert!(p.used_memory_bytes.is_some_and(|b| b > 1024 * 1024));
    poller.shutdown(Duration::from_secs(5));

    // Switched-off families are not read at all: their readings are absent.
    let mut few = FamilySet::all();
    for f in Family::ALL {
        if !matches!(f, Family::Power | Family::Memory) {
            few.set(*f, false);
        }
    }
    let (poller, snaps) = start_sim(
        "dgx-h100",
        Duration::from_millis(100),
        Duration::from_secs(5),
        few,
    );
    let s = snaps.wait_for("sampled with two families", Duration::from_secs(20), |s| {
        all_up_with_readings(s, 8)
    });
    for g in &s.gpus {
        let r = readings(g);
        assert!(r.power_usage_watts.is_some() && r.memory.is_some());
        assert!(
            r.ecc_mode.is_none()
                && r.ecc_errors.is_empty()
                && r.nvlinks.is_empty()
                && r.mig.is_empty()
        );
        assert!(r.temperatures.is_empty() && r.clocks_hertz.is_empty() && r.utilization.is_empty());
        assert!(r.compute_processes.is_none() && r.pcie.tx_bytes.is_none() && r.mig_mode.is_none());
        assert!(g.xids.is_empty());
    }
    poller.shutdown(Duration::from_secs(5));
}

/// Identity, readings and counters of each of the 8 GPUs, in base units.
fn every_gpu_reads_every_family(s: &Snapshot) {
    let mut uuids = std::collections::HashSet::new();
    for g in &s.gpus {
        assert!(g.uuid.starts_with("GPU-"), "uuid {}", g.uuid);
        assert!(uuids.insert(g.uuid.clone()), "uuids are unique");
        let id = &g.identity;
        assert_eq!(id.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(id.architecture.as_deref(), Some("Hopper"));
        assert_eq!(id.compute_capability.as_deref(), Some("9.0"));
        for (field, v) in [
            ("brand", &id.brand),
            ("pci_bus_id", &id.pci_bus_id),
            ("serial", &id.serial),
            ("vbios", &id.vbios_version),
            ("board_part_number", &id.board_part_number),
        ] {
            assert!(
                v.as_deref().is_some_and(|v| !v.is_empty()),
                "GPU {} {field} missing",
                g.index
            );
        }
        assert!(g.last_sample.is_some() && g.sample_duration.is_some());
        assert!(g.stuck_call.is_none());
        assert!(
            g.nvml_errors.is_empty(),
            "GPU {} errors: {:?}",
            g.index,
            g.nvml_errors
        );

        let r = readings(g);
        let m = r.memory.expect("memory");
        let gib = 1024 * 1024 * 1024;
        assert!(
            (79 * gib..=80 * gib).contains(&m.total_bytes),
            "about 80 GB, in bytes: {}",
            m.total_bytes
        );
        let reserved = m.reserved_bytes.expect("v2 memory reports reserved apart");
        assert_eq!(m.used_bytes + m.free_bytes + reserved, m.total_bytes);
        assert!(r.bar1.is_some());
        let power = r.power_usage_watts.expect("power");
        assert!(
            (20.0..=800.0).contains(&power),
            "power {power} W is in watts"
        );
        assert!(r
            .power_limits
            .iter()
            .any(|(l, w)| *l == PowerLimit::Enforced && (100.0..=800.0).contains(w)));
        for l in [
            PowerLimit::Management,
            PowerLimit::Default,
            PowerLimit::Min,
            PowerLimit::Max,
        ] {
            assert!(
                r.power_limits.iter().any(|(have, _)| *have == l),
                "power limit {l:?}"
            );
        }
        assert!(r.energy_joules.is_some_and(|j| j > 0.0));
        assert!(r
            .temperatures
            .iter()
            .any(|(s, c)| *s == Sensor::Gpu && (10.0..=110.0).contains(c)));
        assert!(
            r.temperatures.iter().any(|(s, _)| *s == Sensor::Memory),
            "HBM temperature via field values"
        );
        assert!(r
            .temperature_thresholds
            .iter()
            .any(|(t, _)| *t == Threshold::Shutdown));
        let sm = r
            .clocks_hertz
            .iter()
            .find(|(c, _)| *c == Clock::Sm)
            .expect("sm clock")
            .1;
        assert!(sm >= 1e8, "clocks in hertz, got {sm}");
        assert!(r
            .max_clocks_hertz
            .iter()
            .any(|(c, hz)| *c == Clock::Sm && *hz >= sm));
        assert!(r.performance_state.is_some_and(|p| p <= 15));
        assert!(!r.throttle_active.is_empty(), "supported throttle reasons");
        assert!(r.pcie.link_generation_current.is_some() && r.pcie.link_width_max.is_some());
        assert!(
            r.pcie.tx_bytes.is_some() && r.pcie.rx_bytes.is_some(),
            "PCIe byte counters via field values"
        );
        assert!(r.persistence_mode.is_some() && r.compute_mode.is_some());
        assert_eq!(
            r.ecc_mode,
            Some(ModePair {
                current: true,
                pending: true
            })
        );
        for e in [EccError::Corrected, EccError::Uncorrected] {
            for sc in [EccScope::Volatile, EccScope::Aggregate] {
                assert!(r
                    .ecc_errors
                    .iter()
                    .any(|c| c.error == e && c.scope == sc && c.location == EccLocation::All));
                assert!(r
                    .ecc_errors
                    .iter()
                    .any(|c| c.error == e && c.scope == sc && c.location == EccLocation::Dram));
            }
        }
        // NVML reports no remapper state on a GPU in MIG mode (GPUs 0 and 1).
        let mig = r.mig_mode.is_some_and(|m| m.current);
        assert_eq!(r.remapped_rows.is_some(), !mig, "Hopper remaps rows");
        assert_eq!(!r.remapper_banks.is_empty(), !mig, "remapper histogram");
        assert!(
            r.sram_threshold_exceeded == Some(false),
            "SRAM error status"
        );
        assert!(
            r.fabric
                .as_ref()
                .is_some_and(|f| f.state == 3 && f.registered),
            "registered with the NVSwitch fabric"
        );
        // R560 has no fabric info v3: the exporter falls back to v2, whose
        // health rows an HGX H100 reports as not supported (as the real
        // ones print N/A), and a single-node fabric has no partition.
        let fabric = r.fabric.as_ref().unwrap();
        assert_eq!(fabric.health_summary, None);
        assert!(fabric.health_issues.is_empty());
        assert_eq!(fabric.partition, None);
        // The default personality is R560, whose header ends field ids at
        // 229: no recovery action (tests/e2e/drivers.rs covers R570+).
        assert!(r.recovery_action.is_none());
        assert!(!r.nvlinks.is_empty(), "NVLink links");
        for l in &r.nvlinks {
            assert!(l.up);
            assert!(
                l.tx_bytes.is_some() && l.rx_bytes.is_some(),
                "link {} traffic",
                l.link
            );
            assert!(l.errors.iter().any(|(e, _)| *e == NvLinkError::Replay));
        }
        assert!(r.compute_processes.is_some());
    }
}
