//! Golden test of the whole exposition of the real binary on the simulated
//! dgx-h100 fleet, in both formats. Values that move with time (load
//! waveforms, counters, timestamps) are masked; everything else (names,
//! help, types, units, label sets, order, static values) must match
//! byte for byte.
//!
//! On a mismatch the test prints a unified diff. If the change is intended:
//! `UPDATE_GOLDEN=1 cargo test --test e2e golden::` rewrites the files; review
//! and commit them with the change.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::Exporter;

/// Sample names whose values follow the simulated load or the clock.
const VOLATILE: &[&str] = &[
    "nvidia_gpu_utilization_ratio",
    "nvidia_gpu_activity_ratio",
    "nvidia_gpu_mig_activity_ratio",
    "nvidia_gpu_temperature_celsius",
    // Follows the temperature (scenarios without an absolute slowdown
    // threshold: hgx-b200 and others; not dgx-h100).
    "nvidia_gpu_temperature_margin_celsius",
    "nvidia_gpu_fan_speed_ratio",
    "nvidia_gpu_power_usage_watts",
    "nvidia_gpu_memory_power_usage_watts",
    "nvidia_gpu_module_power_usage_watts",
    "nvidia_gpu_energy_joules_total",
    "nvidia_gpu_performance_state",
    "nvidia_gpu_clock_hertz",
    "nvidia_gpu_clock_throttle_active",
    "nvidia_gpu_clock_throttle_seconds_total",
    "nvidia_gpu_pcie_bytes_total",
    "nvidia_gpu_nvlink_bytes_total",
    "nvidia_gpu_xid_last_timestamp_seconds",
    "nvml_exporter_xid_last_wait_timestamp_seconds",
    "nvml_exporter_last_sample_timestamp_seconds",
    "nvml_exporter_sample_duration_seconds",
    "nvml_exporter_stuck_call_seconds",
];

const MASK: &str = "<volatile>";

/// Masks volatile values, and the build revision (set by whoever builds).
fn mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let masked = if line.starts_with('#') {
            line.to_string()
        } else {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..name_end];
            let mut l = line.to_string();
            if VOLATILE.contains(&name) || common::PROCESS_SAMPLES.contains(&name) {
                let value_start = l.rfind(' ').expect("sample has a value") + 1;
                l.replace_range(value_start.., MASK);
            }
            if name == "nvml_exporter_build_info" {
                if let Some(start) = l.find("revision=\"") {
                    let v = start + "revision=\"".len();
                    let end = v + l[v..].find('"').expect("closed label value");
                    l.replace_range(v..end, MASK);
                }
            }
            l
        };
        out.push_str(&masked);
        out.push('\n');
    }
    out
}

/// Scrapes until two scrapes in a row mask to the same text, so the golden
/// is taken once every reading (GPM needs two polls) has settled, and the
/// exporter's own scrape counter is in it. That counter counts the scrapes
/// before the last poll (`src/collectors/exporter/http.rs`), so it appears
/// only once a poll has followed the first scrape. Two scrapes inside one
/// poll interval agree without it: on a slow machine (qemu in CI) the
/// first two scrapes came after GPM had settled and before the next poll.
fn settled(e: &Exporter, accept: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let get = || {
        let r = e.request("GET", "/metrics", &[("Accept", accept)]);
        assert_eq!(r.status, 200);
        mask(&r.text())
    };
    let mut last = get();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = get();
        if now == last
            && common::dgx_h100_gpm_complete(&now)
            && now.contains("\npromhttp_metric_handler_requests_total{code=\"200\"} ")
        {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "exposition never settled; log:\n{}",
            e.log()
        );
        last = now;
    }
}

fn check_golden(file: &str, live: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, live).unwrap();
        eprintln!("rewrote {}", path.display());
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nCreate it with UPDATE_GOLDEN=1 cargo test --test e2e golden::",
            path.display()
        )
    });
    if golden != live {
        let diff = similar::TextDiff::from_lines(golden.as_str(), live);
        panic!(
            "the exposition differs from {} (- golden, + live):\n{}\n\
             If the change is intended, rewrite it: UPDATE_GOLDEN=1 cargo test --test e2e golden::",
            path.display(),
            diff.unified_diff()
                .context_radius(2)
                .header("golden", "live")
        );
    }
}

#[test]
fn dgx_h100_exposition_matches_golden() {
    let e = Exporter::ready("dgx-h100", &["--collector.process_memory"]);
    check_golden("dgx-h100.prom", &settled(&e, "text/plain"));
    check_golden(
        "dgx-h100.openmetrics",
        &settled(&e, "application/openmetrics-text"),
    );
}

#[test]
fn masking_keeps_structure_and_hides_only_volatile_values() {
    let text = "# HELP nvidia_gpu_power_usage_watts Power.\n\
                # TYPE nvidia_gpu_power_usage_watts gauge\n\
                nvidia_gpu_power_usage_watts{gpu=\"0\",uuid=\"GPU-1\"} 431.5\n\
                nvidia_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-1\"} 85899345920\n\
                nvml_exporter_build_info{version=\"0.1.0\",revision=\"abc123\"} 1\n";
    assert_eq!(
        mask(text),
        "# HELP nvidia_gpu_power_usage_watts Power.\n\
         # TYPE nvidia_gpu_power_usage_watts gauge\n\
         nvidia_gpu_power_usage_watts{gpu=\"0\",uuid=\"GPU-1\"} <volatile>\n\
         nvidia_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-1\"} 85899345920\n\
         nvml_exporter_build_info{version=\"0.1.0\",revision=\"<volatile>\"} 1\n"
    );
}

/// Masked text exposition of `e`, once two scrapes in a row agree.
fn settled_any(e: &Exporter, deadline: Instant) -> String {
    let get = || {
        let r = e.request("GET", "/metrics", &[("Accept", "text/plain")]);
        assert_eq!(r.status, 200);
        mask(&r.text())
    };
    let mut last = get();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = get();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Run by scripts/cross, inside its aarch64 test run under qemu, with
/// `NVML_EXPORTER_OTHER_ARCH_EXE` naming the x86_64 build: on every
/// built-in scenario both builds serve the same masked exposition (the
/// masks of the golden test: values that follow the clock, the process's
/// own metrics, the revision). What differs is a struct layout, a `c_char`
/// or a float that one architecture reads differently.
#[test]
#[ignore = "needs two builds of the exporter: scripts/cross runs it"]
fn other_arch_matches_on_every_scenario() {
    let other = PathBuf::from(
        std::env::var_os("NVML_EXPORTER_OTHER_ARCH_EXE")
            .expect("NVML_EXPORTER_OTHER_ARCH_EXE names the other architecture's nvml-exporter"),
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("nvml-sim/scenarios");
    let mut scenarios: Vec<String> = std::fs::read_dir(&dir)
        .expect("nvml-sim/scenarios")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".toml")?.to_string())
        })
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 9, "{scenarios:?}");
    for scenario in &scenarios {
        let args = [
            format!("--simulate={scenario}"),
            format!("--collect.interval={}", common::TEST_INTERVAL),
        ];
        let here = Exporter::start(&args, &[]);
        let there = Exporter::start_exe(&other, &args, &[]);
        here.wait_ready();
        there.wait_ready();
        // Both settle, then must agree; a reading still in flight on the
        // slower (emulated) one gets until the deadline to arrive.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let a = settled_any(&here, deadline);
            let b = settled_any(&there, deadline);
            if a == b {
                eprintln!("{scenario}: {} lines equal", a.lines().count());
                break;
            }
            if Instant::now() > deadline {
                let diff = similar::TextDiff::from_lines(b.as_str(), a.as_str());
                panic!(
                    "{scenario}: the expositions differ (- {}, + this build):\n{}",
                    other.display(),
                    diff.unified_diff().context_radius(2)
                );
            }
        }
    }
}
