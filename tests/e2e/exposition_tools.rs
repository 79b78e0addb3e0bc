//! The encoders' output checked by the real tools: `promtool check metrics`
//! (Prometheus text 0.0.4) and the strict OpenMetrics parser of Python's
//! prometheus_client. Both must be installed (`scripts/install-test-deps`);
//! a missing tool fails the test rather than skipping it.

use crate::common;
use crate::snapshots;

use std::process::Command;

use common::{run_with_stdin, venv_python as python};

use nvml_exporter::exposition::Exposition;
use nvml_exporter::family::FamilySet;
use nvml_exporter::render::{render_at, RenderContext};

fn render_all(s: &nvml_exporter::snapshot::Snapshot) -> Exposition {
    let ctx = RenderContext {
        families: FamilySet::all(),
        ..RenderContext::default()
    };
    render_at(s, &ctx, snapshots::now())
}

fn promtool_check(text: &[u8]) {
    let mut cmd = Command::new("promtool");
    cmd.args(["check", "metrics"]);
    let (code, output) = run_with_stdin(cmd, text);
    assert!(
        code == 0 && output.trim().is_empty(),
        "promtool check metrics exited {code}:\n{output}\n--- input ---\n{}",
        String::from_utf8_lossy(text)
    );
}

/// Parses with the strict parser and prints `family type sample_count`.
const OPENMETRICS_CHECK: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
text = sys.stdin.buffer.read().decode("utf-8")
for fam in text_string_to_metric_families(text):
    print(fam.name, fam.type, len(fam.samples))
"#;

fn openmetrics_check(om: &[u8]) -> String {
    let mut cmd = Command::new(python());
    cmd.args(["-c", OPENMETRICS_CHECK]);
    let (code, output) = run_with_stdin(cmd, om);
    assert!(
        code == 0,
        "OpenMetrics parser exited {code}:\n{output}\n--- input ---\n{}",
        String::from_utf8_lossy(om)
    );
    output
}

/// Every fixture, with every family on and with the defaults.
fn cases() -> Vec<(&'static str, nvml_exporter::snapshot::Snapshot, FamilySet)> {
    let mut out = Vec::new();
    for (name, snap) in [
        ("fully_populated", snapshots::fully_populated()),
        ("dgx_fleet", snapshots::dgx_fleet()),
        ("workstation", snapshots::workstation()),
        ("large_fleet", snapshots::large_fleet()),
        ("nvml_down", nvml_exporter::snapshot::Snapshot::default()),
    ] {
        out.push((name, snap.clone(), FamilySet::all()));
        out.push((name, snap, FamilySet::defaults()));
    }
    out
}

fn render_with(s: &nvml_exporter::snapshot::Snapshot, families: FamilySet) -> Exposition {
    let ctx = RenderContext {
        families,
        ..RenderContext::default()
    };
    render_at(s, &ctx, snapshots::now())
}

#[test]
fn text_output_passes_promtool_check_metrics() {
    for (name, snap, families) in cases() {
        eprintln!("promtool: {name}");
        promtool_check(&render_with(&snap, families).text);
    }
}

#[test]
fn openmetrics_output_passes_the_strict_parser() {
    for (name, snap, families) in cases() {
        eprintln!("openmetrics: {name}");
        let e = render_with(&snap, families);
        let out = openmetrics_check(&e.openmetrics);
        let families_in_text = e
            .text
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(b"# TYPE "))
            .count();
        assert_eq!(
            out.lines().count(),
            families_in_text,
            "{name}: parser saw a different number of families:\n{out}"
        );
        let samples_in_text = e
            .text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .count();
        let parsed: usize = out
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(
            parsed, samples_in_text,
            "{name}: parser saw a different number of samples"
        );
    }
}

/// The tools really are strict: output they must reject is rejected (a
/// check that cannot fail proves nothing).
#[test]
fn the_checkers_reject_broken_output() {
    let e = render_all(&snapshots::dgx_fleet());
    let mut bad_text = e.text.to_vec();
    bad_text.extend_from_slice(b"# TYPE nvidia_gpu_bogus counter\nnvidia_gpu_bogus 1\n");
    let mut cmd = Command::new("promtool");
    cmd.args(["check", "metrics"]);
    let (code, output) = run_with_stdin(cmd, &bad_text);
    assert!(
        code != 0 && output.contains("nvidia_gpu_bogus"),
        "promtool accepted a counter without _total: {code} {output}"
    );

    // OpenMetrics without the final # EOF is invalid.
    let truncated = &e.openmetrics[..e.openmetrics.len() - b"# EOF\n".len()];
    let mut cmd = Command::new(python());
    cmd.args(["-c", OPENMETRICS_CHECK]);
    let (code, _) = run_with_stdin(cmd, truncated);
    assert_ne!(
        code, 0,
        "the OpenMetrics parser accepted output without # EOF"
    );
}

#[test]
fn dgx_fleet_openmetrics_names_counters_without_total() {
    let e = render_all(&snapshots::dgx_fleet());
    let out = openmetrics_check(&e.openmetrics);
    assert!(out.contains("nvidia_gpu_energy_joules counter"), "{out}");
    assert!(out.contains("nvidia_gpu_xid_errors counter"), "{out}");
}
