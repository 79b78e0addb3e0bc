//! The binary's command line: bad input ends in one clear error and a
//! non-zero exit, never a panic; environment variables configure it too.

use crate::common;

use std::net::TcpListener;
use std::time::Duration;

use common::{run_to_exit, Exporter};

/// Runs with bad arguments; checks the exit code and that the output names
/// the problem and is not a panic.
fn rejects(args: &[&str], code: i32, must_mention: &[&str]) {
    let (status, out) = run_to_exit(args, &[]);
    assert_eq!(status.code(), Some(code), "{args:?}: {out}");
    for m in must_mention {
        assert!(
            out.contains(m),
            "{args:?}: output should mention {m:?}:\n{out}"
        );
    }
    assert!(!out.contains("panicked"), "{args:?} panicked:\n{out}");
    assert!(!out.contains("RUST_BACKTRACE"), "{args:?} panicked:\n{out}");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    rejects(&["--no-such-flag"], 2, &["--no-such-flag"]);
    rejects(
        &["--web.listen-address", "nope"],
        2,
        &["--web.listen-address", "nope"],
    );
    rejects(
        &["--web.listen-address", ":70000"],
        2,
        &["--web.listen-address", "70000"],
    );
    rejects(
        &["--web.telemetry-path", "metrics"],
        2,
        &["--web.telemetry-path"],
    );
    rejects(
        &["--web.telemetry-path", "/-/ready"],
        2,
        &["--web.telemetry-path"],
    );
    rejects(
        &["--collect.interval", "fast"],
        2,
        &["--collect.interval", "fast"],
    );
    rejects(&["--collect.interval", "0s"], 2, &["--collect.interval"]);
    rejects(&["--collect.interval", "1.5s"], 2, &["--collect.interval"]);
    rejects(
        &["--collect.stuck-deadline=-1s"],
        2,
        &["--collect.stuck-deadline"],
    );
    rejects(&["--web.max-requests=-3"], 2, &["--web.max-requests"]);
    rejects(
        &["--web.read-header-timeout", "10"],
        2,
        &["--web.read-header-timeout"],
    );
    rejects(&["--log.level", "loud"], 2, &["--log.level", "loud"]);
    rejects(&["--log.format", "xml"], 2, &["--log.format", "xml"]);
    rejects(&["--collector.nonsense"], 2, &["--collector.nonsense"]);
    rejects(
        &["--collector.ecc=perhaps"],
        2,
        &["--collector.ecc", "perhaps"],
    );
    rejects(
        &["--simulate", "--nvml.library", "/tmp/x.so"],
        2,
        &["--simulate", "--nvml.library"],
    );
    rejects(&["--simulate="], 2, &["--simulate"]);
}

#[test]
fn bad_environment_values_name_the_variable_flag() {
    let (status, out) = run_to_exit(&[], &[("NVML_EXPORTER_COLLECT_INTERVAL", "soon")]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("--collect.interval") && out.contains("soon"),
        "{out}"
    );
}

#[test]
fn missing_nvml_library_file_is_fatal() {
    let missing = "/nonexistent/dir/libnvidia-ml.so.1";
    rejects(
        &[
            "--nvml.library",
            missing,
            "--web.listen-address=127.0.0.1:0",
        ],
        1,
        &[missing],
    );
}

/// Configuration the exporter cannot run with ends it at once, exit 1,
/// with one structured log line naming the problem: never a process that
/// serves `nvml_up 0` for ever, never the simulator's own stderr line in
/// the middle of JSON logs.
#[test]
fn a_scenario_or_library_that_cannot_load_is_fatal_with_a_structured_message() {
    common::sim_library();
    let dir = tempfile::tempdir().unwrap();
    let not_a_library = dir.path().join("libnvidia-ml.so.1");
    std::fs::write(&not_a_library, b"not a shared object").unwrap();
    let bad_load = dir.path().join("bad.toml");
    std::fs::write(
        &bad_load,
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nload = 150\n",
    )
    .unwrap();
    let lib_flag = format!("--nvml.library={}", not_a_library.display());
    let scenario_flag = format!("--simulate={}", bad_load.display());
    for (args, env, mentions) in [
        (
            vec!["--simulate=dgx-h1OO"],
            vec![],
            vec!["dgx-h1OO", "built-in scenarios are"],
        ),
        (
            vec![scenario_flag.as_str()],
            vec![],
            vec!["bad.toml", "load 150 is outside"],
        ),
        (
            vec!["--simulate=workstation"],
            vec![("NVML_SIM_DRIVER", "banana")],
            vec!["NVML_SIM_DRIVER"],
        ),
        (
            vec![lib_flag.as_str()],
            vec![],
            vec!["libnvidia-ml.so.1", "cannot be loaded"],
        ),
    ] {
        let mut argv = args.clone();
        argv.extend(["--log.format=json", "--web.listen-address=127.0.0.1:0"]);
        let (status, out) = run_to_exit(&argv, &env);
        assert_eq!(status.code(), Some(1), "{args:?}: {out}");
        let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
        for l in &lines {
            assert!(
                l.starts_with('{') && l.ends_with('}'),
                "{args:?}: not JSON: {l}"
            );
        }
        let error = lines
            .iter()
            .find(|l| l.contains("\"level\":\"ERROR\""))
            .unwrap_or_else(|| panic!("{args:?}: no error line:\n{out}"));
        for m in &mentions {
            assert!(error.contains(m), "{args:?}: should mention {m:?}: {error}");
        }
    }
}

#[test]
fn collect_interval_and_stuck_deadline_have_floors() {
    rejects(
        &["--collect.interval=1ms"],
        2,
        &["--collect.interval", "100ms"],
    );
    rejects(
        &["--collect.stuck-deadline=5ms"],
        2,
        &["--collect.stuck-deadline", "100ms"],
    );
}

#[test]
fn port_in_use_is_fatal() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let flag = format!("--web.listen-address={addr}");
    common::sim_library();
    rejects(&[&flag, "--simulate"], 1, &[&addr, "--web.listen-address"]);
}

#[test]
fn unresolvable_host_is_fatal() {
    rejects(
        &[
            "--web.listen-address=no-such-host.invalid:9445",
            "--simulate",
        ],
        1,
        &["no-such-host.invalid"],
    );
}

#[test]
fn version_and_help() {
    let (status, out) = run_to_exit(&["--version"], &[]);
    assert!(status.success());
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    // Built from a git checkout: the commit, as Prometheus exporters print
    // theirs, and the same in build_info.
    let revision = out
        .split("(revision ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no revision: {out}"));
    assert!(
        revision.len() == 12 && revision.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out}"
    );
    for line in ["build date: 20", "rustc:      rustc 1.", "target:     "] {
        assert!(out.contains(line), "{line}: {out}");
    }
    // The triple the binary was built for: what scripts/cross's aarch64
    // build says under qemu, and what a fleet's package inventory reads.
    let triple = format!("target:     {}-unknown-linux-gnu", std::env::consts::ARCH);
    assert!(
        out.lines().any(|l| l.trim_end() == format!("  {triple}")),
        "{triple}: {out}"
    );
    let e = Exporter::ready("workstation", &[]);
    assert!(
        e.scrape().contains(&format!(
            "nvml_exporter_build_info{{version=\"{}\",revision=\"{revision}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "build_info carries the revision"
    );
    let (status, out) = run_to_exit(&["--help"], &[]);
    assert!(status.success());
    for f in [
        "--web.listen-address",
        "--web.telemetry-path",
        "--collect.interval",
        "--collect.stuck-deadline",
        "--nvml.library",
        "--simulate",
        "--web.max-requests",
        "--web.read-header-timeout",
        "--web.config.file",
        "--log.level",
        "--log.format",
        "--collector.ecc",
        "--collector.process_memory",
        "NVML_EXPORTER_WEB_LISTEN_ADDRESS",
        "9445",
    ] {
        assert!(out.contains(f), "--help should mention {f}:\n{out}");
    }
}

#[test]
fn flags_from_environment() {
    common::sim_library();
    let e = Exporter::start::<&str>(
        &[],
        &[
            ("NVML_EXPORTER_SIMULATE", "workstation"),
            ("NVML_EXPORTER_WEB_TELEMETRY_PATH", "/gpu-metrics"),
            ("NVML_EXPORTER_COLLECT_INTERVAL", "200ms"),
            ("NVML_EXPORTER_COLLECTOR_ECC", "false"),
            ("NVML_EXPORTER_LOG_LEVEL", "debug"),
        ],
    );
    e.wait_status("/gpu-metrics", 200);
    assert_eq!(e.get("/metrics").status, 404);
    assert!(
        e.wait_log("telemetry_path=/gpu-metrics", Duration::from_secs(10)),
        "{}",
        e.log()
    );
}

/// Boolean variables take what collector variables take (1, true, yes,
/// on...); a variable that is no flag's is warned about, not ignored in
/// silence.
#[test]
fn environment_booleans_alike_and_unknown_variables_warned() {
    common::sim_library();
    let dir = tempfile::tempdir().unwrap();
    let procfs = dir.path().to_str().unwrap();
    for yes in ["1", "true", "yes", "on"] {
        let e = Exporter::start(
            &["--simulate=workstation", "--collect.interval=200ms"],
            &[
                ("NVML_EXPORTER_WORKLOADS", yes),
                ("NVML_EXPORTER_PATH_PROCFS", procfs),
                ("NVML_EXPORTER_WORKLAODS_LIMIT", "3"),
                // A release script's setting, left exported by the shell
                // that ran scripts/cross: no flag's, yet no mistake.
                ("NVML_EXPORTER_CROSS_CACHE", "/var/cache/x"),
            ],
        );
        e.wait_serving();
        e.scrape_until("workload attribution on", |t| {
            t.contains("nvml_exporter_workloads_dropped")
        });
        let log = e.log();
        assert!(
            log.lines()
                .any(|l| l.contains("level=warn") && l.contains("NVML_EXPORTER_WORKLAODS_LIMIT")),
            "{yes}: {log}"
        );
        assert!(!log.contains("NVML_EXPORTER_CROSS_CACHE"), "{yes}: {log}");
    }
    let (status, out) = run_to_exit(
        &["--simulate=workstation"],
        &[("NVML_EXPORTER_WORKLOADS", "maybe")],
    );
    assert_eq!(status.code(), Some(2), "{out}");
}

#[test]
fn command_line_wins_over_environment() {
    common::sim_library();
    let e = Exporter::start(
        &[
            "--simulate=workstation",
            "--web.telemetry-path=/cli",
            "--collect.interval=200ms",
        ],
        &[("NVML_EXPORTER_WEB_TELEMETRY_PATH", "/env")],
    );
    e.wait_status("/cli", 200);
    assert_eq!(e.get("/env").status, 404);
}

#[test]
fn json_logs_are_one_object_per_line() {
    common::sim_library();
    // The harness reads the address from logfmt; start in JSON and check
    // the lines without needing the port.
    let (status, out) = run_to_exit(
        &[
            "--log.format=json",
            "--nvml.library=/nonexistent/libnvidia-ml.so.1",
            "--web.listen-address=127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(1));
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty());
    for l in lines {
        assert!(l.starts_with('{') && l.ends_with('}'), "not JSON: {l}");
        assert!(l.contains("\"level\":\"ERROR\""), "{l}");
        assert!(l.contains("/nonexistent/libnvidia-ml.so.1"), "{l}");
    }
}

#[test]
fn log_level_filters() {
    common::sim_library();
    let listen = format!("--web.listen-address=127.0.0.1:{}", common::free_port());
    let mut e = Exporter::simulate("workstation", &["--log.level=warn", &listen]);
    e.wait_serving();
    let status = e.terminate(Duration::from_secs(30));
    assert!(status.success());
    let log = e.log();
    assert!(
        !log.contains("level=info"),
        "--log.level=warn wrote info lines:\n{log}"
    );
}

/// `--help` names every scenario `--simulate` takes by name: the
/// simulator's own list, so a scenario added there cannot be missing here
/// (it listed five of nine).
#[test]
fn help_names_every_built_in_scenario() {
    let (status, out) = run_to_exit(&["--help"], &[]);
    assert!(status.success());
    // clap wraps the help text: compare without line breaks.
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    let scenarios = common::sim_listing("scenarios");
    assert!(scenarios.len() >= 9, "{scenarios:?}");
    for name in scenarios {
        assert!(
            [" ", "("].iter().any(|p| [",", ")"]
                .iter()
                .any(|s| flat.contains(&format!("{p}{name}{s}")))),
            "--help does not name the built-in scenario {name}:\n{out}"
        );
    }
}
