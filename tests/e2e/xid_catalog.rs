//! The XID catalog (`src/xid_catalog.rs`) is the one source of the XID
//! alert rules' regular expressions and of the runbook's severity table.
//! This test renders both from it and fails while the files differ;
//! `UPDATE_GOLDEN=1 cargo test --test e2e xid_catalog::` (run by
//! `scripts/regenerate`) rewrites them. `tests/test_alerts.py` checks the
//! rendered table against the rules once more, and runs them in promtool.

use std::path::{Path, PathBuf};

use nvml_exporter::verdict::{xid_action, UNLISTED};
use nvml_exporter::xid_catalog::nvlink5::{Resolution, RULES};
use nvml_exporter::xid_catalog::{codes_of, regex_of, Source, XidAlert, CATALOG};

const TABLE_BEGIN: &str =
    "<!-- BEGIN generated from src/xid_catalog.rs by tests/e2e/xid_catalog.rs: edit the catalog, then scripts/regenerate -->";
const TABLE_END: &str = "<!-- END generated -->";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The verdict's answer for a code judged by its code alone (issue 46:
/// the table says what the verdict does, from the verdict itself).
fn verdict_of((action, reason): (nvml_exporter::snapshot::Action, &str)) -> String {
    if reason == "none" {
        format!("`{}`", action.as_label())
    } else {
        format!("`{}` (`{reason}`)", action.as_label())
    }
}

/// The runbook's XID severity table, header to the catch-all row.
fn runbook_table() -> String {
    let mut out = String::new();
    out.push_str(
        "| XID | Meaning (NVIDIA XID catalog) | Catalog action | Alert | Severity | Verdict by code | What to do |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for x in CATALOG {
        let action = match x.source {
            Source::Catalog(b) => b.as_str().to_string(),
            Source::Departs(b) => format!("{}, departed", b.as_str()),
            Source::Ours(b) => format!("none, ours {}", b.as_str()),
        };
        let verdict = xid_action(u64::from(x.code)).expect("every catalogued code has a verdict");
        out.push_str(&format!(
            "| {} | `{}`: {} | {} | {} | {} | {} | {} |\n",
            x.code,
            x.mnemonic,
            x.meaning,
            action,
            x.alert.rule(),
            x.alert.severity().as_str(),
            verdict_of(verdict),
            x.action
        ));
    }
    out.push_str(&format!(
        "| any other | not in the catalog (177-184, past 185): NVSentinel's default for a code without a bucket, CONTACT_SUPPORT | | NvidiaGpuXidUnlisted | warning | {} | drained until a person decides: look it up in NVIDIA's catalog and release notes; add it to src/xid_catalog.rs and run scripts/regenerate |\n",
        verdict_of(UNLISTED)
    ));
    out
}

const NVLINK5_BEGIN: &str =
    "<!-- BEGIN NVLink5 decode generated from src/xid_catalog/nvlink5.rs by tests/e2e/xid_catalog.rs: edit the table, then scripts/regenerate -->";

/// The runbook's NVLink5 decode table: NVIDIA's sheet, row by row, and
/// what the verdict does with each.
fn nvlink5_table() -> String {
    let mut out = String::new();
    out.push_str("| XID | Unit | IntrInfo V1 (< R575) | IntrInfo V2 (>= R575) | Error status | NVIDIA's resolution | Severity | Ours |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    let ours = |res| match res {
        Resolution::ResetGpu => "reset_gpu",
        Resolution::Ignore => "none",
        Resolution::Xid154Eval => "none; the recovery action decides",
    };
    for r in RULES {
        let status = r
            .error_status
            .map_or_else(|| "any (blank)".to_string(), |s| format!("`{s:#010x}`"));
        let mut line = format!(
            "| {} | {} | `{}` | `{}` | {} | {} | {} | {} |\n",
            r.xid,
            r.unit,
            r.v1,
            r.v2,
            status,
            r.resolution.as_str(),
            r.severity.replace('*', "\\*"),
            ours(r.resolution)
        );
        // The sheet's "Action 2": a second pattern pair on the same row.
        if let Some(a) = r.action2 {
            line.push_str(&format!(
                "| {} | {}, action 2 | `{}` | `{}` | {} | {} | {} | {} |\n",
                r.xid,
                r.unit,
                a.v1,
                a.v2,
                status,
                a.resolution.as_str(),
                r.severity.replace('*', "\\*"),
                ours(a.resolution)
            ));
        }
        out.push_str(&line);
    }
    out
}

/// Replaces what lies between `begin` and the next END marker.
fn between(text: &str, begin: &str, table: &str) -> String {
    let (head, rest) = text
        .split_once(begin)
        .unwrap_or_else(|| panic!("docs/runbooks.md lacks the marker {begin}"));
    let (_, tail) = rest
        .split_once(TABLE_END)
        .expect("docs/runbooks.md lacks an END marker after it");
    format!("{head}{begin}\n{table}{TABLE_END}{tail}")
}

fn render_runbook(text: &str) -> String {
    let text = between(text, TABLE_BEGIN, &runbook_table());
    between(&text, NVLINK5_BEGIN, &nvlink5_table())
}

/// Replaces every `<matcher>"..."` inside the named alert's rule with the
/// alternation.
fn set_matchers(rules: &str, alert: &str, matcher: &str, alternation: &str) -> String {
    let start = rules
        .find(&format!("- alert: {alert}\n"))
        .unwrap_or_else(|| panic!("no rule {alert}"));
    let end = rules[start + 1..]
        .find("- alert: ")
        .map_or(rules.len(), |i| start + 1 + i);
    let mut block = String::new();
    let mut rest = &rules[start..end];
    let mut replaced = 0;
    while let Some(i) = rest.find(matcher) {
        let value_start = i + matcher.len();
        let value_len = rest[value_start..].find('"').expect("unterminated matcher");
        block.push_str(&rest[..value_start]);
        block.push_str(alternation);
        rest = &rest[value_start + value_len..];
        replaced += 1;
    }
    block.push_str(rest);
    assert!(replaced > 0, "{alert} has no {matcher}");
    format!("{}{block}{}", &rules[..start], &rules[end..])
}

fn render_rules(text: &str) -> String {
    let mut out = text.to_string();
    let mut listed = Vec::new();
    for &alert in XidAlert::ALL {
        let codes = codes_of(alert);
        listed.extend(codes.iter().copied());
        if alert != XidAlert::None {
            out = set_matchers(&out, alert.rule(), "xid=~\"", &regex_of(&codes));
        }
    }
    listed.sort_unstable();
    set_matchers(&out, "NvidiaGpuXidUnlisted", "xid!~\"", &regex_of(&listed))
}

fn check(path: &Path, render: fn(&str) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let want = render(&text);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "{} is stale against src/xid_catalog.rs: run scripts/regenerate",
        path.display()
    );
}

#[test]
fn runbook_table_is_the_catalog() {
    check(&root().join("docs/runbooks.md"), render_runbook);
}

#[test]
fn rule_expressions_are_the_catalog() {
    check(&root().join("alerts/nvidia-gpu.rules.yml"), render_rules);
}

#[test]
fn rendering_moves_a_code_between_rules() {
    // The rendering is what the check compares: a code in the wrong rule
    // is rewritten into the right one.
    let rules = "      - alert: NvidiaGpuXidCritical\n        expr: x{xid=~\"46|8\"} or y{xid=~\"46|8\"}\n      - alert: NvidiaGpuXidStoppedProcessing\n        expr: x{xid=~\"46\"}\n";
    let out = set_matchers(rules, "NvidiaGpuXidStoppedProcessing", "xid=~\"", "8");
    assert!(out.ends_with("expr: x{xid=~\"8\"}\n"), "{out}");
    assert!(
        out.contains("x{xid=~\"46|8\"} or y{xid=~\"46|8\"}"),
        "{out}"
    );
    let out = set_matchers(&out, "NvidiaGpuXidCritical", "xid=~\"", "46");
    assert_eq!(out.matches("xid=~\"46\"").count(), 2, "{out}");
    assert!(!out.contains("46|8"), "{out}");
}

#[test]
fn the_table_marks_where_the_bucket_is_ours_or_departs() {
    let table = runbook_table();
    assert!(table.contains("| 167 | `PCIE_FATAL_TIMEOUT`: "));
    assert!(table.contains("| none, ours RESET_GPU | NvidiaGpuXidCritical | critical | `reset_gpu` (`xid_reset_gpu`) |"));
    assert!(table.contains("| IGNORE, departed | NvidiaGpuXidWarning | warning | `none` |"));
    // Issue 46: the verdict's own answer, manual triage as one.
    assert!(table.contains("| 78 | `VGPU_START_ERROR`: "));
    assert!(table.contains("| UPDATE_SWFW | NvidiaGpuXidWarning | warning | `check_hardware` (`xid_update_swfw`) | drained until a person decides: "));
    assert!(table.contains("| 185 | `SPARING_EVENT`: "));
    assert!(table.contains("| `check_hardware` (`xid_unlisted`) |"));
    assert_eq!(table.lines().count(), 2 + CATALOG.len() + 1);
}

#[test]
fn the_nvlink5_table_has_every_row_of_the_sheet() {
    let table = nvlink5_table();
    let action2 = RULES.iter().filter(|r| r.action2.is_some()).count();
    assert_eq!(action2, 3);
    assert_eq!(table.lines().count(), 2 + RULES.len() + action2);
    assert!(table.contains(
        "| 145 | RLW_RXPIPE, action 2 | `------000000---------10011000010` | `------000000------------10000110` | `0x00000001` | RESET_GPU | Non-fatal\\* | reset_gpu |"
    ));
    assert!(table.contains("| 149 | NETIR/NETIR_INT | `------000000----------0000000110` | `------000000-------------0011000` | any (blank) | RESET_GPU |"));
    assert!(table.contains(
        "| 145 | RLW_REMAP | `------000000----------0010000010` | `------000000-------------0000100` | `0x00000100` | IGNORE | Non-fatal | none |"
    ));
}
