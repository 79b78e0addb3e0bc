//! The encoders' output checked by the real tools: `promtool check metrics`
//! (Prometheus text 0.0.4) and the strict OpenMetrics parser of Python's
//! prometheus_client. Both must be installed (`scripts/install-test-deps`);
//! a missing tool fails the test rather than skipping it.

#[path = "common/snapshots.rs"]
mod snapshots;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nvml_exporter::exposition::{render_at, Exposition, RenderContext};
use nvml_exporter::family::FamilySet;

fn render_all(s: &nvml_exporter::snapshot::Snapshot) -> Exposition {
    let ctx = RenderContext {
        families: FamilySet::all(),
        ..RenderContext::default()
    };
    render_at(s, &ctx, snapshots::now())
}

fn run_with_stdin(mut cmd: Command, input: &[u8]) -> (i32, String) {
    let program = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (install it with scripts/install-test-deps): {e}")
        });
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
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

fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "{} missing: run scripts/install-test-deps",
        venv.display()
    );
    venv
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

#[test]
fn dgx_fleet_text_passes_promtool() {
    let e = render_all(&snapshots::dgx_fleet());
    promtool_check(&e.text);
}

#[test]
fn dgx_fleet_openmetrics_parses_strictly() {
    let e = render_all(&snapshots::dgx_fleet());
    let out = openmetrics_check(&e.openmetrics);
    assert!(out.contains("nvidia_gpu_energy_joules counter"), "{out}");
}
