//! The selection file (`--config.file`) on the real binary: it selects
//! what is served, a change is followed and SIGHUP reloads it, a bad one
//! keeps the last good one and is logged and counted, a bad one at start
//! stops the start naming its line, and `--config.check` tells what a file
//! costs in series, the same count a scrape of the exporter running with
//! it gives.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{run_to_exit, samples, signal, Exporter};

/// Rewrites `path` the way editors and ConfigMap updates do (a new file
/// renamed over the old), so the follower sees a new inode.
fn rewrite(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn value(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(str::to_string)
}

#[test]
fn a_running_exporter_follows_the_file_keeps_the_last_good_and_counts_failures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selection.yml");
    std::fs::write(&path, "version: 1\nfamilies:\n  deny: [fan]\n").unwrap();
    let e = Exporter::ready(
        "workstation",
        &[
            &format!("--config.file={}", path.display()),
            "--log.level=debug",
        ],
    );
    let text = e.scrape();
    assert!(!text.contains("nvidia_gpu_fan_speed_ratio"), "fan denied");
    assert_eq!(
        value(&text, "nvml_exporter_config_last_reload_successful").as_deref(),
        Some("1")
    );

    // A change is followed: the fan family comes back, a metric goes.
    rewrite(
        &path,
        "version: 1\nmetrics:\n  deny: [nvidia_gpu_clock_max_hertz]\n",
    );
    let text = e.scrape_until("the fan family", |t| {
        t.contains("nvidia_gpu_fan_speed_ratio{")
    });
    assert!(!text.contains("nvidia_gpu_clock_max_hertz"));

    // Garbage: the last good selection stays, the error is logged with its
    // line and counted once.
    rewrite(
        &path,
        "version: 1\nmetrics:\n  deny: [nvidia_gpu_clock_max_hertz]\nfamilies:\n  deny: [fann]\n",
    );
    let text = e.scrape_until("the failed reload", |t| {
        value(t, "nvml_exporter_config_last_reload_successful").as_deref() == Some("0")
    });
    assert!(
        text.contains("nvidia_gpu_fan_speed_ratio{"),
        "last good kept"
    );
    assert!(
        !text.contains("nvidia_gpu_clock_max_hertz"),
        "last good kept"
    );
    assert!(e.wait_log("line 5", Duration::from_secs(10)), "{}", e.log());
    assert!(e.log().contains("keeping the last good selection"));
    e.wait_polls(2);
    let text = e.scrape();
    assert_eq!(
        value(
            &text,
            "nvml_exporter_config_reloads_total{result=\"failure\"}"
        )
        .as_deref(),
        Some("1"),
        "one failure however often it is retried"
    );
    // SIGHUP finds it still bad: counted again, someone asked.
    signal(e.pid(), "HUP");
    e.scrape_until("the SIGHUP failure", |t| {
        value(t, "nvml_exporter_config_reloads_total{result=\"failure\"}").as_deref() == Some("2")
    });

    rewrite(&path, "version: 1\n");
    let text = e.scrape_until("the fixed file", |t| {
        value(t, "nvml_exporter_config_last_reload_successful").as_deref() == Some("1")
    });
    assert_eq!(
        value(
            &text,
            "nvml_exporter_config_reloads_total{result=\"success\"}"
        )
        .as_deref(),
        Some("2")
    );
    let text = e.scrape_until("every metric again", |t| {
        t.contains("nvidia_gpu_clock_max_hertz{")
    });
    assert!(text.contains("nvidia_gpu_fan_speed_ratio{"));
}

#[test]
fn a_bad_file_at_start_stops_it_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selection.yml");
    std::fs::write(&path, "version: 1\nintervals:\n  ecc: 60s\n  verdict: 1m\n").unwrap();
    let (status, out) = run_to_exit(
        &[
            "--simulate",
            &format!("--config.file={}", path.display()),
            &format!("--web.listen-address=127.0.0.1:{}", common::free_port()),
        ],
        &[],
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("selection.yml: line 4: intervals: verdict"),
        "{out}"
    );
}

/// Series per GPU of a scrape, counted as `--config.check` counts them.
fn per_gpu(text: &str) -> f64 {
    let gpu: Vec<_> = samples(text)
        .into_iter()
        .filter(|s| s.label("gpu").is_some())
        .collect();
    let gpus: std::collections::BTreeSet<_> = gpu
        .iter()
        .map(|s| s.label("gpu").unwrap().to_string())
        .collect();
    gpu.len() as f64 / gpus.len() as f64
}

#[test]
fn config_check_prints_what_the_running_exporter_then_serves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selection.yml");
    std::fs::write(
        &path,
        "version: 1\nfamilies:\n  deny: [mode, fabric]\nmetrics:\n  deny: [nvidia_gpu_power_limit_watts]\n\
         intervals:\n  ecc: 60s\ndcgm:\n  fields: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_DEV_FB_USED]\n",
    )
    .unwrap();
    let file = format!("--config.file={}", path.display());
    let check = format!("--config.check={}", path.display());
    let (status, out) = run_to_exit(&["--simulate=dgx-h100", "--compat.dcgm", &check], &[]);
    assert!(status.success(), "{out}");
    let row = |name: &str| -> Vec<f64> {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{out}"));
        line[name.len()..]
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let mean = row("series per GPU (mean)");
    assert!(mean[1] < mean[0], "the file costs less: {out}");
    assert!(
        out.contains("DCGM fields served (4.8): DCGM_FI_DEV_GPU_UTIL"),
        "{out}"
    );

    // The exporter running with the file serves what the check counted.
    let e = Exporter::ready("dgx-h100", &["--compat.dcgm", &file]);
    let text = e.scrape_until("GPM on every GPU", |t| {
        common::dgx_h100_gpm_complete(t) && t.contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")
    });
    let served = per_gpu(&text);
    assert!(
        (served - mean[1]).abs() < 0.01,
        "check said {}, a scrape has {served}",
        mean[1]
    );

    // A bad file: exit 1, the line named, no report.
    std::fs::write(&path, "version: 1\nlabels:\n  drop: [uuid, gpu]\n").unwrap();
    let (status, out) = run_to_exit(&["--simulate", &check], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("line 3") && out.contains("gpu") && out.contains("cannot be dropped"),
        "{out}"
    );
    assert!(!out.contains("series per GPU"));
}
