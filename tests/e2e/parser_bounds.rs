//! Every YAML file the exporter parses is bounded in CPU as well as bytes
//! (issue 41; probe 5, D5): the YAML parser takes time quadratic in flow
//! nesting (100,000 `[`, 200 KB, took 16 s under `--config.check`, 2.5 s
//! for 50,000 in a web config), so a file nested deeper than 64 levels is
//! refused, naming its line, before it is parsed. Times are in the commit
//! and BENCHMARKS.md, not asserted here.

use crate::common::{refuses_web_config, run_to_exit};

fn nested(head: &str, n: usize) -> String {
    format!("{head}{}{}\n", "[".repeat(n), "]".repeat(n))
}

#[test]
fn a_deeply_nested_selection_file_is_refused_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.yml");
    std::fs::write(&path, nested("version: 1\nfamilies: ", 100_000)).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() >= 200_000);
    let check = format!("--config.check={}", path.display());
    let (status, out) = run_to_exit(&["--simulate", &check], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("line 2")
            && out.contains("nested deeper than 64 levels: refused before parsing"),
        "{out}"
    );
}

#[test]
fn a_deeply_nested_web_config_is_refused_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, nested("basic_auth_users: ", 50_000)).unwrap();
    let (status, out) = refuses_web_config(&path);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("nested deeper than 64 levels: refused before parsing"),
        "{out}"
    );
}

/// Before: a 500,000-character metric name came back as one 500,203
/// character log line (probe 5, D12); what a message quotes of a file is
/// now a bounded, escaped excerpt.
#[test]
fn an_error_quotes_a_bounded_excerpt_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.yml");
    let name = "x".repeat(500_000);
    std::fs::write(
        &path,
        format!("version: 1\nmetrics:\n  deny: [\"{name}\"]\n"),
    )
    .unwrap();
    let check = format!("--config.check={}", path.display());
    let (status, out) = run_to_exit(&["--simulate", &check], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("more characters)"),
        "{}",
        &out[..out.len().min(2000)]
    );
    let longest = out.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2_000, "a line of {longest} characters");
}
