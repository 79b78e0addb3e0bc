//! The real binary on every built-in simulated fleet: it starts, gets
//! ready, and serves the metric contract of the nvml-exporter issue, with the
//! families a fleet cannot have absent rather than 0.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{families, samples, Exporter, Sample};

fn by_family(samples: &[Sample]) -> BTreeMap<&str, Vec<&Sample>> {
    let mut m: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        m.entry(s.name.as_str()).or_default().push(s);
    }
    m
}

fn gpus_of(series: &[&Sample]) -> BTreeSet<u32> {
    series
        .iter()
        .filter_map(|s| s.label("gpu"))
        .map(|g| g.parse().expect("numeric gpu label"))
        .collect()
}

#[test]
fn every_builtin_scenario_starts_and_serves_valid_output() {
    let scenarios = common::sim_listing("scenarios");
    assert!(
        scenarios.len() >= 5 && scenarios.iter().any(|s| s == "dgx-h100"),
        "{scenarios:?}"
    );
    for scenario in &scenarios {
        let gpus = common::sim_gpu_count(scenario);
        let e = Exporter::ready(scenario, &[]);
        let text = e.scrape();
        let all = samples(&text);
        let fams = by_family(&all);
        assert_eq!(
            fams["nvml_exporter_nvml_up"][0].value, "1",
            "{scenario}: NVML should be up"
        );
        assert_eq!(
            fams["nvidia_gpu_info"].len(),
            gpus,
            "{scenario}: one nvidia_gpu_info per GPU"
        );
        assert_eq!(
            gpus_of(&fams["nvidia_gpu_up"]),
            (0..gpus as u32).collect(),
            "{scenario}"
        );
        if let Err(problems) = common::promtool_check(&text) {
            panic!("{scenario}: {problems}");
        }
        let om = e.scrape_openmetrics();
        if let Err(problems) = common::openmetrics_parse(&om) {
            panic!("{scenario}: {problems}");
        }
        // Every label name is lower snake case.
        for s in &all {
            for (k, _) in &s.labels {
                assert!(
                    k.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                    "{scenario}: label {k} on {}",
                    s.name
                );
            }
        }
    }
}

/// Family, GPUs expected to carry it, labels every series must have
/// (besides `gpu` and `uuid`).
type Expect = (&'static str, &'static [u32], &'static [&'static str]);

const ALL8: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7];
const MIG: &[u32] = &[0, 1];
const WHOLE: &[u32] = &[2, 3, 4, 5, 6, 7];

const DGX_H100: &[Expect] = &[
    (
        "nvidia_gpu_info",
        ALL8,
        &[
            "name",
            "brand",
            "architecture",
            "pci_bus_id",
            "serial",
            "vbios_version",
            "compute_capability",
            "board_part_number",
        ],
    ),
    ("nvidia_gpu_up", ALL8, &[]),
    // Not supported on MIG-enabled GPUs (NVML reference).
    ("nvidia_gpu_utilization_ratio", WHOLE, &["engine"]),
    ("nvidia_gpu_activity_ratio", WHOLE, &["metric"]),
    ("nvidia_gpu_memory_total_bytes", ALL8, &[]),
    ("nvidia_gpu_memory_used_bytes", ALL8, &[]),
    ("nvidia_gpu_memory_free_bytes", ALL8, &[]),
    ("nvidia_gpu_memory_reserved_bytes", ALL8, &[]),
    ("nvidia_gpu_bar1_memory_total_bytes", ALL8, &[]),
    ("nvidia_gpu_bar1_memory_used_bytes", ALL8, &[]),
    ("nvidia_gpu_temperature_celsius", ALL8, &["sensor"]),
    (
        "nvidia_gpu_temperature_threshold_celsius",
        ALL8,
        &["threshold"],
    ),
    ("nvidia_gpu_power_usage_watts", ALL8, &[]),
    ("nvidia_gpu_power_limit_watts", ALL8, &["limit"]),
    ("nvidia_gpu_energy_joules_total", ALL8, &[]),
    ("nvidia_gpu_performance_state", ALL8, &[]),
    ("nvidia_gpu_clock_hertz", ALL8, &["clock"]),
    ("nvidia_gpu_clock_max_hertz", ALL8, &["clock"]),
    ("nvidia_gpu_clock_throttle_active", ALL8, &["reason"]),
    ("nvidia_gpu_clock_throttle_seconds_total", ALL8, &["reason"]),
    ("nvidia_gpu_pcie_link_generation", ALL8, &["which"]),
    ("nvidia_gpu_pcie_link_width", ALL8, &["which"]),
    ("nvidia_gpu_pcie_replay_errors_total", ALL8, &[]),
    ("nvidia_gpu_pcie_bytes_total", ALL8, &["direction"]),
    ("nvidia_gpu_persistence_mode_enabled", ALL8, &[]),
    ("nvidia_gpu_display_active", ALL8, &[]),
    ("nvidia_gpu_compute_mode", ALL8, &["mode"]),
    ("nvidia_gpu_ecc_enabled", ALL8, &["state"]),
    ("nvidia_gpu_ecc_errors_total", ALL8, &["error", "scope"]),
    // NVML reports no row remapper state on a GPU in MIG mode (issue 16).
    ("nvidia_gpu_remapped_rows", WHOLE, &["cause"]),
    ("nvidia_gpu_remapped_rows_pending", WHOLE, &[]),
    ("nvidia_gpu_remapped_rows_failed", WHOLE, &[]),
    ("nvidia_gpu_remapper_banks", WHOLE, &["spare_rows"]),
    (
        "nvidia_gpu_sram_uncorrectable_threshold_exceeded",
        ALL8,
        &[],
    ),
    ("nvidia_gpu_recovery_action", ALL8, &[]),
    ("nvidia_gpu_fabric_state", ALL8, &["status"]),
    ("nvidia_gpu_xid_errors_total", &[3], &["xid"]),
    ("nvidia_gpu_xid_last_timestamp_seconds", &[3], &["xid"]),
    ("nvidia_gpu_nvlink_links", ALL8, &["state"]),
    ("nvidia_gpu_nvlink_errors_total", ALL8, &["error"]),
    ("nvidia_gpu_nvlink_bytes_total", ALL8, &["direction"]),
    ("nvidia_gpu_processes", ALL8, &["type"]),
    (
        "nvidia_gpu_process_memory_used_bytes",
        &[0, 1, 2, 3, 4, 5, 6],
        &["pid", "process_name", "type"],
    ),
    ("nvidia_gpu_mig_enabled", ALL8, &["state"]),
    (
        "nvidia_gpu_mig_info",
        MIG,
        &["gpu_instance", "compute_instance", "profile", "mig_uuid"],
    ),
    ("nvidia_gpu_mig_memory_total_bytes", MIG, &["gpu_instance"]),
    ("nvidia_gpu_mig_memory_used_bytes", MIG, &["gpu_instance"]),
    (
        "nvidia_gpu_mig_activity_ratio",
        MIG,
        &["gpu_instance", "metric"],
    ),
    ("nvml_exporter_last_sample_timestamp_seconds", ALL8, &[]),
    ("nvml_exporter_sample_duration_seconds", ALL8, &[]),
];

/// Contract families dgx-h100 rightly lacks: SXM boards have no fans, and
/// Hopper reports row remapping instead of page retirement. The detail
/// families behind `--collector.<family>.<detail>` switches are off by
/// default.
const DGX_H100_ABSENT: &[&str] = &[
    "nvidia_gpu_fan_speed_ratio",
    "nvidia_gpu_retired_pages",
    "nvidia_gpu_retired_pages_pending",
    "nvidia_gpu_nvlink_link_up",
    "nvidia_gpu_nvlink_link_errors_total",
    "nvidia_gpu_nvlink_link_bytes_total",
    "nvidia_gpu_ecc_location_errors_total",
    "nvidia_gpu_mig_memory_free_bytes",
];

/// Families whose field ids a driver branch must define, with the first
/// branch that does (docs/metrics.md, "Driver branches").
const NEEDS_BRANCH: &[(&str, u32)] = &[
    ("nvidia_gpu_sram_uncorrectable_threshold_exceeded", 550),
    ("nvidia_gpu_pcie_bytes_total", 555),
    ("nvidia_gpu_recovery_action", 570),
];

/// The contract on every driver personality nvml-sim has: the same
/// families everywhere, less those the branch cannot have.
#[test]
fn dgx_h100_serves_every_contract_family() {
    for driver in common::driver_versions() {
        dgx_h100_contract(&driver);
    }
}

fn dgx_h100_contract(driver_version: &str) {
    let major: u32 = driver_version[..3].parse().unwrap();
    let lacks = |family: &str| {
        NEEDS_BRANCH
            .iter()
            .any(|(f, from)| *f == family && major < *from)
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &["--collector.process_memory"],
        &[
            ("NVML_SIM_CONTROL", socket.to_str().unwrap()),
            ("NVML_SIM_DRIVER", driver_version),
        ],
    );
    e.wait_ready();
    // XIDs are events: make one happen, on a whole GPU and on a MIG device.
    common::sim_control(&socket, &["xid", "--gpu", "3", "--code", "13"]);
    common::sim_control(
        &socket,
        &[
            "xid",
            "--gpu",
            "0",
            "--code",
            "31",
            "--gpu-instance",
            "7",
            "--compute-instance",
            "0",
        ],
    );
    let text = e.scrape_until("XIDs and GPM rates", |t| {
        t.contains("nvidia_gpu_xid_errors_total{gpu=\"0\"")
            && t.contains("nvidia_gpu_xid_errors_total{gpu=\"3\"")
            && common::dgx_h100_gpm_complete(t)
    });
    let all = samples(&text);
    let fams = by_family(&all);
    let uuids: BTreeMap<&str, &str> = fams["nvidia_gpu_info"]
        .iter()
        .map(|s| (s.label("gpu").unwrap(), s.label("uuid").unwrap()))
        .collect();
    assert_eq!(uuids.len(), 8);

    let mut problems = Vec::new();
    for (family, gpus, labels) in DGX_H100 {
        if lacks(family) {
            if fams.contains_key(family) {
                problems.push(format!("{family}: present on R{major}, expected absent"));
            }
            continue;
        }
        let Some(series) = fams.get(family) else {
            problems.push(format!("{family}: missing"));
            continue;
        };
        let seen = gpus_of(series);
        let want: BTreeSet<u32> = gpus.iter().copied().collect();
        // XIDs: GPU 0 also got one (MIG); the others must match exactly.
        let ok = if family.starts_with("nvidia_gpu_xid") {
            want.is_subset(&seen)
        } else {
            seen == want
        };
        if !ok {
            problems.push(format!("{family}: GPUs {seen:?}, expected {want:?}"));
        }
        for s in series {
            let gpu = s.label("gpu").unwrap_or("?");
            if s.label("uuid") != uuids.get(gpu).copied() {
                problems.push(format!(
                    "{family}: uuid of gpu {gpu} is {:?}",
                    s.label("uuid")
                ));
            }
            for l in *labels {
                if s.label(l).is_none() {
                    problems.push(format!("{family}: series without {l}: {:?}", s.labels));
                }
            }
        }
    }
    for family in DGX_H100_ABSENT {
        if fams.contains_key(family) {
            problems.push(format!("{family}: present, expected absent"));
        }
    }
    for family in [
        "nvidia_gpu_driver_info",
        "nvml_exporter_build_info",
        "nvml_exporter_nvml_up",
    ] {
        match fams.get(family) {
            Some(s) if s.len() == 1 && s[0].label("gpu").is_none() => {}
            other => problems.push(format!(
                "{family}: expected one series without gpu, got {other:?}"
            )),
        }
    }
    let driver = fams["nvidia_gpu_driver_info"][0];
    for l in ["driver_version", "nvml_version", "cuda_driver_version"] {
        if !matches!(driver.label(l), Some(v) if !v.is_empty()) {
            problems.push(format!("nvidia_gpu_driver_info: no {l}"));
        }
    }
    if driver.label("driver_version") != Some(driver_version) {
        problems.push(format!(
            "driver version {:?}",
            driver.label("driver_version")
        ));
    }
    if let Err(p) = common::promtool_check(&text) {
        problems.push(format!("promtool: {p}"));
    }
    if let Err(p) = common::openmetrics_parse(&e.scrape_openmetrics()) {
        problems.push(format!("OpenMetrics parser: {p}"));
    }
    assert!(
        problems.is_empty(),
        "driver {driver_version}:\n{}\n\n{text}",
        problems.join("\n")
    );

    // Whole GPUs are up; each GPU is on exactly one compute mode.
    assert!(fams["nvidia_gpu_up"].iter().all(|s| s.value == "1"));
    for g in 0..8 {
        let on: Vec<_> = fams["nvidia_gpu_compute_mode"]
            .iter()
            .filter(|s| s.label("gpu") == Some(&g.to_string()) && s.value == "1")
            .collect();
        assert_eq!(on.len(), 1, "gpu {g} compute modes");
    }
}

#[test]
fn dgx_h100_mig_instances_and_their_labels() {
    let e = Exporter::ready(
        "dgx-h100",
        &["--collector.process_memory", "--collector.mig.memory-free"],
    );
    let text = e.scrape_until("MIG activity", common::dgx_h100_gpm_complete);
    let all = samples(&text);
    let fams = by_family(&all);

    // GPU 0: seven 1g.10gb; GPU 1: 3g.40gb + 2g.20gb + 1g.10gb.
    let mut profiles: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut instances: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &fams["nvidia_gpu_mig_info"] {
        assert_eq!(s.value, "1");
        let gpu = s.label("gpu").unwrap();
        profiles
            .entry(gpu)
            .or_default()
            .push(s.label("profile").unwrap());
        instances
            .entry(gpu)
            .or_default()
            .insert(s.label("gpu_instance").unwrap());
        assert!(s.label("mig_uuid").unwrap().starts_with("MIG-"), "{s:?}");
        assert_eq!(s.label("compute_instance"), Some("0"));
    }
    assert_eq!(profiles["0"], vec!["1g.10gb"; 7]);
    let mut p1 = profiles["1"].clone();
    p1.sort_unstable();
    assert_eq!(p1, vec!["1g.10gb", "2g.20gb", "3g.40gb"]);
    assert_eq!(profiles.len(), 2, "MIG only on GPUs 0 and 1");

    // Per-instance memory and activity name the same instances.
    for family in [
        "nvidia_gpu_mig_memory_total_bytes",
        "nvidia_gpu_mig_memory_used_bytes",
        "nvidia_gpu_mig_memory_free_bytes",
        "nvidia_gpu_mig_activity_ratio",
    ] {
        let mut seen: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for s in &fams[family] {
            seen.entry(s.label("gpu").unwrap())
                .or_default()
                .insert(s.label("gpu_instance").unwrap());
        }
        assert_eq!(seen, instances, "{family}");
    }
    // An instance's memory adds up; a 1g.10gb slice is about 10 GB.
    let mig_mem = |family: &str, gpu: &str, gi: &str| -> f64 {
        fams[family]
            .iter()
            .find(|s| s.label("gpu") == Some(gpu) && s.label("gpu_instance") == Some(gi))
            .unwrap()
            .value
            .parse()
            .unwrap()
    };
    for gi in &instances["0"] {
        let total = mig_mem("nvidia_gpu_mig_memory_total_bytes", "0", gi);
        let used = mig_mem("nvidia_gpu_mig_memory_used_bytes", "0", gi);
        let free = mig_mem("nvidia_gpu_mig_memory_free_bytes", "0", gi);
        assert!((9e9..12e9).contains(&total), "1g.10gb total {total}");
        assert!(
            (used + free - total).abs() < 1.0 * 1024.0 * 1024.0,
            "{used}+{free}!={total}"
        );
    }
    // MIG mode reads enabled, current and pending, on 0 and 1 only.
    for s in &fams["nvidia_gpu_mig_enabled"] {
        let want = if matches!(s.label("gpu"), Some("0" | "1")) {
            "1"
        } else {
            "0"
        };
        assert_eq!(s.value, want, "{s:?}");
    }
    // Processes inside MIG instances carry the instance.
    let in_mig: Vec<_> = fams["nvidia_gpu_process_memory_used_bytes"]
        .iter()
        .filter(|s| matches!(s.label("gpu"), Some("0" | "1")))
        .collect();
    assert_eq!(in_mig.len(), 5);
    assert!(in_mig
        .iter()
        .all(|s| s.label("gpu_instance").is_some() && s.label("compute_instance").is_some()));
}

#[test]
fn workstation_has_no_ecc_mig_or_nvlink_families() {
    let e = Exporter::ready("workstation", &[]);
    let text = e.scrape_until("a full sample", |t| {
        t.contains("\nnvidia_gpu_fan_speed_ratio{")
    });
    let fams = families(&text);
    let present: Vec<_> = fams
        .iter()
        .filter(|f| {
            f.starts_with("nvidia_gpu_ecc_")
                || f.starts_with("nvidia_gpu_mig_")
                || f.starts_with("nvidia_gpu_nvlink_")
        })
        .collect();
    assert!(
        present.is_empty(),
        "present on a workstation: {present:?}\n{text}"
    );
    for s in ["nvidia_gpu_ecc", "nvidia_gpu_mig", "nvidia_gpu_nvlink"] {
        assert!(!text.contains(s), "{s} mentioned:\n{text}");
    }
    // What a GeForce does have.
    for f in [
        "nvidia_gpu_fan_speed_ratio",
        "nvidia_gpu_utilization_ratio",
        "nvidia_gpu_temperature_celsius",
        "nvidia_gpu_power_usage_watts",
        "nvidia_gpu_display_active",
        "nvidia_gpu_processes",
    ] {
        assert!(fams.contains(f), "{f} missing on workstation:\n{text}");
    }
    let all = samples(&text);
    let display = all
        .iter()
        .find(|s| s.name == "nvidia_gpu_display_active")
        .unwrap();
    assert_eq!(display.value, "1");
    // No HBM: no memory temperature sensor series.
    assert!(
        !all.iter()
            .any(|s| s.name == "nvidia_gpu_temperature_celsius"
                && s.label("sensor") == Some("memory"))
    );
}

#[test]
fn collector_switches_remove_families() {
    let e = Exporter::ready(
        "dgx-h100",
        &[
            "--no-collector.ecc",
            "--no-collector.nvlink",
            "--collector.mig=false",
        ],
    );
    let text = e.scrape();
    let fams = families(&text);
    for prefix in ["nvidia_gpu_ecc_", "nvidia_gpu_nvlink_", "nvidia_gpu_mig_"] {
        assert!(
            !fams.iter().any(|f| f.starts_with(prefix)),
            "{prefix}* present though switched off"
        );
    }
    assert!(fams.contains("nvidia_gpu_power_usage_watts"));
    // Opt-in family stays off by default.
    assert!(!fams.contains("nvidia_gpu_process_memory_used_bytes"));
}

/// A copy of a real host (issue 20): what the scenario pins is served as
/// written (after conversion), what it calls N/A is absent, and timeline
/// faults still fire on it, so alerts can be drilled on the copy.
#[test]
fn a_pinned_host_is_served_as_written_and_takes_faults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.toml");
    std::fs::write(
        &path,
        r#"
name = "host"
driver = "590.48.01"

[[gpu]]
model = "h100-sxm5-80gb"
uuid = "GPU-00000000-0000-0000-0000-000000000001"
pci_bus_id = "00000000:00:09.0"
power_limit_w = 650

[gpu.readings]
temperature_c = 41
power_w = 69.62
utilization = { gpu = 7, memory = 3, decoder = "N/A" }

[gpu.counters]
pcie_replays = 9

[[gpu]]
model = "h100-sxm5-80gb"

[gpu.readings]
temperature_c = "N/A"

[[gpu]]
model = "h100-sxm5-80gb"

[gpu.board]
thermal = { shutdown_c = "N/A", slowdown_c = "N/A", gpu_max_c = "N/A", shutdown_tlimit_c = -8, slowdown_tlimit_c = -2, gpu_max_tlimit_c = 0 }

[gpu.readings]
tlimit_c = 46

[[timeline]]
at = 1
action = "xid"
gpu = 0
code = 79

[[timeline]]
at = 1
action = "ecc"
gpu = 0
count = 3
"#,
    )
    .unwrap();
    let e = Exporter::ready(path.to_str().unwrap(), &[]);
    let text = e.scrape_until("the timeline's XID and ECC errors", |t| {
        t.contains("nvidia_gpu_xid_errors_total{")
            && t.contains("error=\"uncorrected\",scope=\"volatile\"} 3")
    });
    let all = samples(&text);
    let value = |name: &str, gpu: &str, label: Option<(&str, &str)>| {
        all.iter()
            .find(|s| {
                s.name == name
                    && s.label("gpu") == Some(gpu)
                    && label.is_none_or(|(k, v)| s.label(k) == Some(v))
            })
            .map(|s| s.value.clone())
    };
    let info = all
        .iter()
        .find(|s| s.name == "nvidia_gpu_info" && s.label("gpu") == Some("0"))
        .unwrap();
    assert_eq!(
        info.label("uuid"),
        Some("GPU-00000000-0000-0000-0000-000000000001")
    );
    assert_eq!(info.label("pci_bus_id"), Some("00000000:00:09.0"));
    let driver = all
        .iter()
        .find(|s| s.name == "nvidia_gpu_driver_info")
        .unwrap();
    assert_eq!(driver.label("driver_version"), Some("590.48.01"));
    assert_eq!(driver.label("cuda_driver_version"), Some("13.1"));
    assert_eq!(
        value(
            "nvidia_gpu_temperature_celsius",
            "0",
            Some(("sensor", "gpu"))
        )
        .as_deref(),
        Some("41")
    );
    assert_eq!(
        value(
            "nvidia_gpu_temperature_celsius",
            "1",
            Some(("sensor", "gpu"))
        ),
        None,
        "N/A is absent"
    );
    assert_eq!(
        value("nvidia_gpu_power_usage_watts", "0", None).as_deref(),
        Some("69.62")
    );
    assert_eq!(
        value(
            "nvidia_gpu_power_limit_watts",
            "0",
            Some(("limit", "enforced"))
        )
        .as_deref(),
        Some("650")
    );
    assert_eq!(
        value("nvidia_gpu_utilization_ratio", "0", Some(("engine", "gpu"))).as_deref(),
        Some("0.07")
    );
    assert_eq!(
        value(
            "nvidia_gpu_utilization_ratio",
            "0",
            Some(("engine", "decoder"))
        ),
        None
    );
    assert_eq!(
        value("nvidia_gpu_pcie_replay_errors_total", "0", None).as_deref(),
        Some("9")
    );
    assert_eq!(
        value("nvidia_gpu_xid_errors_total", "0", Some(("xid", "79"))).as_deref(),
        Some("1")
    );
    // A Hopper capture on a recent driver prints thresholds only as T.Limit
    // margins: the exporter falls back to them, as on such a host.
    assert_eq!(
        value(
            "nvidia_gpu_temperature_threshold_celsius",
            "2",
            Some(("threshold", "slowdown"))
        ),
        None
    );
    assert_eq!(
        value("nvidia_gpu_temperature_margin_celsius", "2", None).as_deref(),
        Some("46")
    );
    assert_eq!(
        value(
            "nvidia_gpu_temperature_margin_threshold_celsius",
            "2",
            Some(("threshold", "slowdown"))
        )
        .as_deref(),
        Some("-2")
    );
}
