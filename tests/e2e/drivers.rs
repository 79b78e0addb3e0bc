//! The real binary on each driver personality of nvml-sim (R535 to R610):
//! process lists in the entry layout each branch writes, and field-backed
//! families present exactly where the branch defines their field ids
//! (docs/metrics.md, "Driver branches").

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::{samples, Exporter, Sample};

/// One H100 running `n` compute processes (an MPS server's clients, say),
/// pids 5000.., memory 100 + i MiB, on driver `driver`.
fn many_processes(dir: &tempfile::TempDir, driver: &str, n: u32) -> PathBuf {
    let procs: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "  {{ pid = {}, name = \"worker-{i}\", memory_mib = {} }}",
                5000 + i,
                100 + i
            )
        })
        .collect();
    let path = dir.path().join("mps.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"mps\"\ndriver = \"{driver}\"\n\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nload = 50\nprocesses = [\n{}\n]\n",
            procs.join(",\n")
        ),
    )
    .unwrap();
    path
}

fn process_memory(text: &str) -> BTreeSet<(u32, u64)> {
    samples(text)
        .iter()
        .filter(|s| s.name == "nvidia_gpu_process_memory_used_bytes")
        .map(|s| {
            (
                s.label("pid").unwrap().parse().unwrap(),
                s.value.parse::<f64>().unwrap() as u64,
            )
        })
        .collect()
}

fn value(samples: &[Sample], name: &str, label: (&str, &str)) -> Option<String> {
    samples
        .iter()
        .find(|s| s.name == name && s.label(label.0) == Some(label.1))
        .map(|s| s.value.clone())
}

#[test]
fn every_process_of_a_busy_gpu_with_its_memory_on_each_branch() {
    // R535 writes 32-byte `_v3` entries; nvml-wrapper reads 24 and sizes
    // its buffer for 24: with 20 processes the driver overran it and
    // every pid after the first was garbage.
    for driver in ["535.104.05", "545.29.06", "550.127.05", "570.133.20"] {
        let dir = tempfile::tempdir().unwrap();
        let scenario = many_processes(&dir, driver, 20);
        let e = Exporter::simulate(scenario.to_str().unwrap(), &["--collector.process_memory"]);
        e.wait_ready();
        let text = e.scrape_until("process memory series", |t| {
            t.contains("nvidia_gpu_process_memory_used_bytes{")
        });
        let want: BTreeSet<(u32, u64)> = (0..20)
            .map(|i| (5000 + i, u64::from(100 + i) << 20))
            .collect();
        assert_eq!(
            process_memory(&text),
            want,
            "driver {driver}; log:\n{}",
            e.log()
        );
        assert_eq!(
            value(&samples(&text), "nvidia_gpu_processes", ("type", "compute")).as_deref(),
            Some("20"),
            "driver {driver}"
        );
        assert!(
            e.log().lines().all(|l| !l.contains("panicked")),
            "{}",
            e.log()
        );
    }
}

/// A driver that lists one pid twice on a GPU: one process, one series
/// (two with one label set would fail the scrape in Prometheus).
#[test]
fn a_pid_the_driver_lists_twice_is_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("twice.toml");
    std::fs::write(
        &path,
        "name = \"twice\"\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nload = 10\nprocesses = [\n\
         { pid = 4242, name = \"train\", memory_mib = 1000 },\n\
         { pid = 4242, name = \"train\", memory_mib = 1000 },\n\
         { pid = 4243, name = \"eval\", memory_mib = 10 },\n]\n",
    )
    .unwrap();
    let e = Exporter::simulate(path.to_str().unwrap(), &["--collector.process_memory"]);
    e.wait_ready();
    let text = e.scrape_until("process memory series", |t| {
        t.contains("nvidia_gpu_process_memory_used_bytes{")
    });
    let pids: Vec<String> = samples(&text)
        .iter()
        .filter(|s| s.name == "nvidia_gpu_process_memory_used_bytes")
        .map(|s| s.label("pid").unwrap().to_string())
        .collect();
    assert_eq!(pids, ["4242", "4243"], "{text}");
    assert_eq!(
        value(&samples(&text), "nvidia_gpu_processes", ("type", "compute")).as_deref(),
        Some("2")
    );
    common::promtool_check(&text).unwrap();
}

/// A row of docs/metrics.md's "Driver branches" table: the family, the
/// `reason` label values it is about (none: the whole family), and the
/// first branch that has it.
struct NeedsDriver {
    family: String,
    reasons: Vec<String>,
    major: u32,
}

fn driver_branch_table() -> Vec<NeedsDriver> {
    let text = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let section = text
        .split("\n## Driver branches\n")
        .nth(1)
        .expect("docs/metrics.md has a Driver branches section");
    let section = section.split("\n## ").next().unwrap();
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Some(major) = cells[1]
            .strip_prefix('R')
            .and_then(|r| r.get(..3))
            .and_then(|r| r.parse().ok())
        else {
            continue;
        };
        let ticks: Vec<&str> = cells[0].split('`').skip(1).step_by(2).collect();
        let family = ticks
            .iter()
            .find(|t| t.starts_with("nvidia_"))
            .expect("a family in each row")
            .to_string();
        let reasons = match ticks.iter().position(|t| *t == "reason") {
            Some(i) => ticks[i + 1..]
                .iter()
                .take_while(|t| !t.starts_with("nvidia_"))
                .map(|t| t.to_string())
                .collect(),
            None => Vec::new(),
        };
        rows.push(NeedsDriver {
            family,
            reasons,
            major,
        });
    }
    rows
}

/// Families backed by a field id that only some branches define: present
/// exactly from the branch docs/metrics.md names.
#[test]
fn field_backed_families_follow_the_driver_branch_as_documented() {
    let table = driver_branch_table();
    assert!(
        table.len() >= 3,
        "pcie bytes, recovery action and throttle durations are documented"
    );
    for driver in common::driver_versions() {
        let major: u32 = driver[..3].parse().unwrap();
        let e = Exporter::simulate_env("faults", &[], &[("NVML_SIM_DRIVER", driver.as_str())]);
        e.wait_ready();
        let text = e.scrape_until("GPU 6's throttle series", |t| {
            t.contains("nvidia_gpu_clock_throttle_seconds_total{") && t.contains("gpu=\"6\"")
        });
        let s = samples(&text);
        for row in &table {
            let present = s.iter().any(|x| {
                x.name == row.family
                    && (row.reasons.is_empty()
                        || x.label("reason")
                            .is_some_and(|r| row.reasons.iter().any(|w| w == r)))
            });
            assert_eq!(
                present,
                major >= row.major,
                "driver {driver}: {} {:?} documented from R{}",
                row.family,
                row.reasons,
                row.major
            );
        }
        // One meaning per label: the thermal policy time (any thermal
        // slowdown) is `thermal` exactly where the driver has no separate
        // SW and HW thermal durations, and never passes for sw_thermal.
        let has_reason = |reason: &str| {
            s.iter().any(|x| {
                x.name == "nvidia_gpu_clock_throttle_seconds_total"
                    && x.label("reason") == Some(reason)
            })
        };
        assert_eq!(has_reason("thermal"), major < 575, "driver {driver}");
        assert_eq!(has_reason("sw_thermal"), major >= 575, "driver {driver}");
        if major >= 570 {
            // GPU 5 has an uncorrectable remapped row pending: reset.
            let gpu5 = s
                .iter()
                .find(|x| x.name == "nvidia_gpu_recovery_action" && x.label("gpu") == Some("5"))
                .map(|x| x.value.as_str());
            assert_eq!(gpu5, Some("1"), "{driver}");
        }
        let info = s
            .iter()
            .find(|x| x.name == "nvidia_gpu_driver_info")
            .unwrap_or_else(|| panic!("no driver info; {text}"));
        assert_eq!(info.label("driver_version"), Some(driver.as_str()));
    }
}

/// No NVML error counted in this exposition, by family and kind.
fn assert_no_nvml_error(s: &[Sample], driver: &str) {
    let errors: Vec<_> = s
        .iter()
        .filter(|x| x.name == "nvml_exporter_nvml_errors_total")
        .map(|x| format!("{:?} {:?}", x.label("family"), x.label("error")))
        .collect();
    assert!(
        errors.is_empty(),
        "driver {driver} counted errors: {errors:?}"
    );
}

/// Issue 21: every branch serves a clean exposition, whatever calls it
/// deprecated or lacks: fabric info through the newest struct version the
/// branch knows (v3 on R580, v2 on R550-R570, the unversioned call before:
/// a version mismatch or a missing function falls back, uncounted),
/// temperature through `nvmlDeviceGetTemperatureV` where exported, clock
/// event reasons through their ClocksEventReasons successors. No NVML
/// error is counted on a healthy node.
#[test]
fn every_branch_serves_fabric_temperature_and_throttle_with_no_error_counted() {
    for driver in common::driver_versions() {
        let e = Exporter::simulate_env("dgx-h100", &[], &[("NVML_SIM_DRIVER", driver.as_str())]);
        e.wait_ready();
        let text = e.scrape_until("every GPU's fabric state", |t| {
            t.matches("nvidia_gpu_fabric_state{").count() == 8
        });
        let s = samples(&text);
        let count = |name: &str| s.iter().filter(|x| x.name == name).count();
        assert_eq!(count("nvidia_gpu_fabric_state"), 8, "{driver}");
        assert!(
            s.iter()
                .filter(|x| x.name == "nvidia_gpu_fabric_state")
                .all(|x| x.value == "3" && x.label("status") == Some("success")),
            "{driver}"
        );
        // A single-node HGX reports no health rows and no partition, on
        // every branch (real HGX H100 on 590.48.01 print them N/A).
        assert_eq!(count("nvidia_gpu_fabric_health"), 0, "{driver}");
        assert_eq!(count("nvidia_gpu_fabric_health_issue"), 0, "{driver}");
        assert_eq!(count("nvidia_gpu_fabric_info"), 0, "{driver}");
        assert_eq!(
            s.iter()
                .filter(|x| x.name == "nvidia_gpu_temperature_celsius"
                    && x.label("sensor") == Some("gpu"))
                .count(),
            8,
            "{driver}"
        );
        assert!(count("nvidia_gpu_clock_throttle_active") >= 8, "{driver}");
        assert_no_nvml_error(&s, &driver);
    }
}

/// Issue 21: a GB200 tray on every branch that drives Blackwell (R570 on:
/// the B200/GB200 minimum is 570.133.20) serves a clean exposition, the
/// deprecated calls of R580.82-R610 included: module power, power
/// smoothing lifetime (its field id moves with the branch), NVLink5 error
/// counters instead of the DL ones, the fabric partition, and the health
/// summary where the branch's struct has it (v3, R580+). No NVML error is
/// counted.
#[test]
fn a_gb200_tray_is_clean_on_every_blackwell_branch() {
    for driver in common::driver_versions() {
        let major: u32 = driver[..3].parse().unwrap();
        if major < 570 {
            continue;
        }
        let e = Exporter::simulate_env("gb200-nvl72", &[], &[("NVML_SIM_DRIVER", driver.as_str())]);
        e.wait_ready();
        let text = e.scrape_until("every GPU's module power and fabric", |t| {
            t.matches("nvidia_gpu_module_power_usage_watts{").count() == 4
                && t.matches("nvidia_gpu_fabric_info{").count() == 4
        });
        let s = samples(&text);
        let count = |name: &str| s.iter().filter(|x| x.name == name).count();
        assert_eq!(count("nvidia_gpu_module_power_limit_watts"), 4, "{driver}");
        assert_eq!(
            count("nvidia_gpu_power_smoothing_lifetime_remaining_ratio"),
            4,
            "{driver}"
        );
        assert_eq!(
            count("nvidia_gpu_fabric_health"),
            if major >= 580 { 4 } else { 0 },
            "{driver}: the summary is v3's (R580+)"
        );
        assert!(
            s.iter()
                .filter(|x| x.name == "nvidia_gpu_fabric_info")
                .all(|x| x.label("clique_id") == Some("2")),
            "{driver}"
        );
        let kinds: BTreeSet<&str> = s
            .iter()
            .filter(|x| x.name == "nvidia_gpu_nvlink_errors_total")
            .filter_map(|x| x.label("error"))
            .collect();
        assert_eq!(
            kinds,
            BTreeSet::from(["effective", "recovery"]),
            "{driver}: NVLink5 counters only"
        );
        assert_no_nvml_error(&s, &driver);
    }
}
