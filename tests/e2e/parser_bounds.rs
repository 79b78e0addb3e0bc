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

/// User plus system CPU time of process `pid` so far, in seconds
/// (`/proc/PID/stat`, fields 14 and 15, in clock ticks).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces: fields count from after its ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Clock ticks per second, as getconf says.
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks as f64 / hz
}

/// Before: a 200 KB file of nested brackets swapped in as the running
/// exporter's `--config.file` burned 25.7 s of CPU in 30 s, parsed again
/// at every 3 s check, with the retries not counted (probe 5, D5). Now it
/// is refused before parsing, an unchanged bad file is loaded again only
/// once a minute, and each load that fails is counted: the whole process
/// spends under a second of CPU over the swap and the checks after it.
#[test]
fn a_bad_nested_selection_file_costs_under_a_second_of_cpu_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selection.yml");
    std::fs::write(&path, "version: 1\nfamilies:\n  deny: [fan]\n").unwrap();
    let e = crate::common::Exporter::ready(
        "workstation",
        &[&format!("--config.file={}", path.display())],
    );
    let before = cpu_seconds(e.pid());
    let tmp = dir.path().join("selection.tmp");
    std::fs::write(&tmp, nested("version: 1\nfamilies: ", 100_000)).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let failures = "nvml_exporter_config_reloads_total{result=\"failure\"} ";
    e.scrape_until("the failed load counted", |t| {
        t.lines().any(|l| l == format!("{failures}1"))
    });
    // Three more checks of the unchanged file (every 3 s).
    std::thread::sleep(std::time::Duration::from_secs(10));
    let spent = cpu_seconds(e.pid()) - before;
    let text = e.scrape();
    assert!(
        text.lines().any(|l| l == format!("{failures}1")),
        "loaded once, not at every check: {:?}",
        text.lines().find(|l| l.starts_with(failures))
    );
    assert!(
        text.contains("nvml_exporter_config_last_reload_successful 0"),
        "the failure is shown"
    );
    assert!(spent < 1.0, "{spent} s of CPU\n{}", e.log());
}
