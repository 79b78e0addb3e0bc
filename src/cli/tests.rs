//! The flags as a user gives them: values, variables, conflicts.

use super::values::*;
use super::*;
use crate::kubernetes;

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    let mut v = vec!["nvml-exporter"];
    v.extend_from_slice(args);
    parse_from(v)
}

#[test]
fn command_is_well_formed() {
    command().debug_assert();
}

#[test]
fn defaults() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.listen_addresses.len(), 1);
    assert_eq!(c.listen_addresses[0].to_string(), ":9445");
    assert_eq!(c.listen_addresses[0].port, DEFAULT_PORT);
    assert!(!c.systemd_socket);
    assert_eq!(c.telemetry_path, "/metrics");
    assert_eq!(c.collect_interval, Duration::from_secs(5));
    assert_eq!(c.stuck_deadline, Duration::from_secs(15));
    assert_eq!(
        c.library,
        Library::System {
            rootfs: PathBuf::from("/")
        }
    );
    // The family table's defaults, and the kernel log (issue 36).
    let mut families = FamilySet::defaults();
    families.set(Family::XidKmsg, true);
    assert_eq!(c.families, families);
    assert_eq!(c.log_level, LogLevel::Info);
    assert_eq!(c.log_format, LogFormat::Logfmt);
}

#[test]
fn simulate_bare_and_named() {
    let bare = parse(&["--simulate"]).unwrap();
    assert_eq!(
        bare.library,
        Library::Simulated {
            scenario: "dgx-h100".into()
        }
    );
    let bare_then_flag = parse(&["--simulate", "--log.level", "debug"]).unwrap();
    assert_eq!(bare_then_flag.library, bare.library);
    let named = parse(&["--simulate", "workstation"]).unwrap();
    assert_eq!(
        named.library,
        Library::Simulated {
            scenario: "workstation".into()
        }
    );
    let eq = parse(&["--simulate=faults"]).unwrap();
    assert_eq!(
        eq.library,
        Library::Simulated {
            scenario: "faults".into()
        }
    );
}

#[test]
fn simulate_and_library_conflict() {
    let e = parse(&["--simulate", "--nvml.library", "/x.so"]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
}

#[test]
fn collector_flags() {
    let c = parse(&["--no-collector.ecc", "--collector.process_memory"]).unwrap();
    assert!(!c.families.contains(Family::Ecc));
    assert!(c.families.contains(Family::ProcessMemory));
    let c = parse(&["--collector.ecc=false"]).unwrap();
    assert!(!c.families.contains(Family::Ecc));
    // Last one on the command line wins.
    let c = parse(&["--no-collector.ecc", "--collector.ecc"]).unwrap();
    assert!(c.families.contains(Family::Ecc));
    let c = parse(&["--collector.ecc", "--no-collector.ecc"]).unwrap();
    assert!(!c.families.contains(Family::Ecc));
    assert!(parse(&["--collector.nonsense"]).is_err());
    assert!(parse(&["--collector.ecc=maybe"]).is_err());
}

#[test]
fn every_family_has_a_switch() {
    for &f in Family::ALL {
        let on = format!("--collector.{}", f.name());
        let off = format!("--no-collector.{}", f.name());
        assert!(parse(&[&on]).unwrap().families.contains(f));
        assert!(!parse(&[&off]).unwrap().families.contains(f));
    }
}

#[test]
fn intervals_and_deadlines_have_floors() {
    for (flag, bad) in [
        ("--collect.interval", "1ms"),
        ("--collect.interval", "99ms"),
        ("--collect.stuck-deadline", "10ms"),
    ] {
        let e = parse(&[flag, bad]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        assert!(msg.contains(flag) && msg.contains("100ms"), "{msg}");
    }
    let c = parse(&["--collect.interval", "100ms"]).unwrap();
    assert_eq!(c.collect_interval, MIN_COLLECT_INTERVAL);
    // Three intervals would be 300ms: the derived deadline is 1s.
    assert_eq!(c.stuck_deadline, MIN_DERIVED_STUCK_DEADLINE);
    let c = parse(&[
        "--collect.interval",
        "100ms",
        "--collect.stuck-deadline",
        "200ms",
    ])
    .unwrap();
    assert_eq!(c.stuck_deadline, Duration::from_millis(200));
}

#[test]
fn the_state_is_kept_by_default_on_a_real_driver_and_only_when_asked_with_simulate() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.state.map(|s| (s.path, s.procfs)),
        Some((
            PathBuf::from("/var/lib/nvml-exporter/state.json"),
            PathBuf::from("/proc")
        ))
    );
    assert_eq!(parse(&["--simulate"]).unwrap().state, None);
    assert_eq!(
        parse(&["--state.path="]).unwrap().state,
        None,
        "empty: nothing kept"
    );
    assert_eq!(parse(&["--state.path"]).unwrap().state, None);
    let c = parse(&[
        "--simulate",
        "--state.path",
        "/tmp/s.json",
        "--path.procfs",
        "/host/proc",
    ])
    .unwrap();
    assert_eq!(
        c.state.map(|s| (s.path, s.procfs)),
        Some((PathBuf::from("/tmp/s.json"), PathBuf::from("/host/proc")))
    );
}

#[test]
fn the_kernel_log_is_read_by_default_with_the_xid_family_but_not_with_simulate() {
    assert_eq!(
        parse(&[]).unwrap().kernel_log.map(|k| k.path),
        Some(PathBuf::from("/dev/kmsg")),
        "read by default (issue 36)"
    );
    assert_eq!(
        parse(&["--no-collector.xid.kmsg"]).unwrap().kernel_log,
        None
    );
    assert_eq!(parse(&["--simulate"]).unwrap().kernel_log, None);
    assert!(parse(&["--simulate", "--collector.xid.kmsg"])
        .unwrap()
        .kernel_log
        .is_some());
    let c = parse(&["--collector.xid.kmsg", "--collector.xid.max-codes=9"]).unwrap();
    assert_eq!(
        c.kernel_log,
        Some(KernelLogConfig {
            path: PathBuf::from("/dev/kmsg"),
            max_codes: 9,
            resume_after: None,
        })
    );
    let c = parse(&["--collector.xid.kmsg", "--path.kmsg", "/tmp/kmsg"]).unwrap();
    assert_eq!(
        c.kernel_log.map(|k| k.path),
        Some(PathBuf::from("/tmp/kmsg"))
    );
    // A detail switch shows nothing while its family is off; asked for by
    // name, it is said at start (`app::warn_kernel_log_unused`).
    let c = parse(&["--collector.xid.kmsg", "--no-collector.xid"]).unwrap();
    assert_eq!(c.kernel_log, None);
    assert_eq!(c.kernel_log_asked_by, Some("--collector.xid.kmsg"));
    let asked = |args: &[&str]| parse(args).unwrap().kernel_log_asked_by;
    assert_eq!(
        asked(&["--no-collector.xid"]),
        None,
        "the default asks nothing"
    );
    assert_eq!(asked(&["--simulate"]), None);
    assert_eq!(
        asked(&["--no-collector.xid", "--path.kmsg=/tmp/k"]),
        Some("--path.kmsg")
    );
    assert_eq!(
        asked(&["--no-collector.xid.kmsg", "--path.kmsg=/tmp/k"]),
        None,
        "switched off by name: the path is moot on purpose"
    );
    assert!(
        c.families.contains(Family::Verdict),
        "the verdict is on by default"
    );
}

#[test]
fn the_restart_app_window_is_a_positive_duration() {
    assert_eq!(
        parse(&[]).unwrap().restart_app_window,
        crate::verdict::DEFAULT_RESTART_APP_WINDOW
    );
    let c = parse(&["--collector.verdict.restart-app-window", "90s"]).unwrap();
    assert_eq!(c.restart_app_window, Duration::from_secs(90));
    let err = parse(&["--collector.verdict.restart-app-window", "0s"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--collector.verdict.restart-app-window"),
        "{err}"
    );
}

#[test]
fn stuck_deadline_follows_interval_unless_set() {
    let c = parse(&["--collect.interval", "1s"]).unwrap();
    assert_eq!(c.stuck_deadline, Duration::from_secs(3));
    let c = parse(&[
        "--collect.interval",
        "1s",
        "--collect.stuck-deadline",
        "10s",
    ])
    .unwrap();
    assert_eq!(c.stuck_deadline, Duration::from_secs(10));
}

#[test]
fn xid_max_codes_is_bounded_and_leaves_the_xid_switch_alone() {
    assert_eq!(parse(&[]).unwrap().xid_max_codes, DEFAULT_XID_MAX_CODES);
    let c = parse(&["--collector.xid.max-codes", "8", "--no-collector.xid"]).unwrap();
    assert_eq!(c.xid_max_codes, 8);
    assert!(!c.families.contains(Family::Xid));
    let c = parse(&["--collector.xid.max-codes=3", "--collector.xid"]).unwrap();
    assert_eq!(c.xid_max_codes, 3);
    assert!(c.families.contains(Family::Xid));
    for bad in ["0", "-1", "10001", "18446744073709551615", "lots"] {
        let arg = format!("--collector.xid.max-codes={bad}");
        let e = parse(&[&arg]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("--collector.xid.max-codes") && msg.contains("from 1 to 10000"),
            "{bad}: {msg}"
        );
        assert_eq!(e.exit_code(), 2);
    }
}

#[test]
fn durations() {
    let ok = [
        ("0", 0),
        ("500ms", 500),
        ("1s", 1000),
        ("1m", 60_000),
        ("1h30m", 5_400_000),
        ("1m500ms", 60_500),
        ("2d", 172_800_000),
        ("1y", 31_536_000_000),
    ];
    for (s, ms) in ok {
        assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
    }
    for s in [
        "",
        "5",
        "s",
        "1.5s",
        "1s1m",
        "1s1s",
        "-1s",
        "1x",
        "1 s",
        "99999999999999y",
    ] {
        assert!(parse_duration(s).is_err(), "{s:?} should be rejected");
    }
    assert!(parse(&["--collect.interval", "0s"]).is_err());
    assert!(parse(&["--collect.interval", "fast"]).is_err());
}

#[test]
fn listen_addresses() {
    let ok = [
        (":9445", None, 9445),
        ("127.0.0.1:0", Some("127.0.0.1"), 0),
        ("localhost:80", Some("localhost"), 80),
        ("[::1]:9445", Some("::1"), 9445),
    ];
    for (s, host, port) in ok {
        let a = parse_listen_address(s).unwrap();
        assert_eq!(a.host.as_deref(), host, "{s}");
        assert_eq!(a.port, port, "{s}");
        assert_eq!(a.to_string(), s);
    }
    assert_eq!(
        parse_listen_address("[::1]:1").unwrap().to_socket_string(),
        "[::1]:1"
    );
    for s in [
        "9445", "host:", ":99999", "::1:80", "[::1:80", "[zz]:80", "a b:1",
    ] {
        assert!(parse_listen_address(s).is_err(), "{s:?} should be rejected");
    }
}

#[test]
fn every_listen_address_is_kept() {
    let c = parse(&[
        "--web.listen-address",
        "127.0.0.1:1",
        "--web.listen-address",
        "[::1]:2",
    ])
    .unwrap();
    let all: Vec<String> = c.listen_addresses.iter().map(ToString::to_string).collect();
    assert_eq!(all, ["127.0.0.1:1", "[::1]:2"]);
    assert_eq!(
        parse_listen_address(":9445").unwrap().to_socket_string(),
        "[::]:9445"
    );
}

#[test]
fn telemetry_paths() {
    assert!(parse_telemetry_path("/metrics").is_ok());
    assert!(parse_telemetry_path("/gpu/metrics").is_ok());
    for s in ["metrics", "/", "/-/ready", "/m?x", "/a b"] {
        assert!(parse_telemetry_path(s).is_err(), "{s:?} should be rejected");
    }
}

#[test]
fn repeatable_flags_accumulate_while_others_override() {
    let c = parse(&[
        "--kubernetes",
        "--kubernetes.resource-name",
        "example.com/gpu",
        "--kubernetes.resource-name",
        "other.io/mig-*",
        "--collect.interval",
        "1s",
        "--collect.interval",
        "2s",
    ])
    .unwrap();
    let names = c.kubernetes.expect("--kubernetes given");
    assert!(names.resource_names.iter().any(|n| n == "example.com/gpu"));
    assert!(names.resource_names.iter().any(|n| n == "other.io/mig-*"));
    assert_eq!(c.collect_interval, Duration::from_secs(2));
}

#[test]
fn pod_labels_and_resource_slices_are_checked_at_start() {
    let c = parse(&[
        "--kubernetes",
        "--kubernetes.pod-labels=team,app.kubernetes.io/*",
        "--kubernetes.kubelet-url=https://10.0.0.7:10250",
        "--kubernetes.resource-slices",
        "--kubernetes.node-name=node-1",
        "--kubernetes.api-server=https://10.96.0.1:443",
        "--path.rootfs=/host",
    ])
    .unwrap();
    let k = c.kubernetes.expect("--kubernetes given");
    let labels = k.pod_labels.expect("--kubernetes.pod-labels given");
    assert!(matches!(labels.source, kubernetes::LabelSource::Kubelet(_)));
    let (api, node) = k
        .resource_slices
        .expect("--kubernetes.resource-slices given");
    assert_eq!(
        (api.to_string().as_str(), node.as_str()),
        ("https://10.96.0.1:443/", "node-1")
    );
    assert_eq!(k.rootfs, PathBuf::from("/host"));

    let refused = |args: &[&str], says: &str| {
        let e = parse(args).unwrap_err().to_string();
        assert!(e.contains(says), "{args:?}: {e}");
    };
    refused(&["--kubernetes.pod-labels=team"], "add --kubernetes");
    // The whole sentence, so that a line continuation that lost its
    // backslash (a run of spaces in the middle) shows.
    refused(
        &["--kubernetes", "--kubernetes.pod-labels=team"],
        "--kubernetes.pod-labels.source=kubelet needs --kubernetes.kubelet-url \
         (https://<node IP>:10250)",
    );
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        refused(
            &[
                "--kubernetes",
                "--kubernetes.resource-slices",
                "--kubernetes.node-name=node-1",
            ],
            "the API server is not known: set --kubernetes.api-server (outside a pod, \
             KUBERNETES_SERVICE_HOST and _PORT are not set)",
        );
    }
    refused(
        &[
            "--kubernetes",
            "--kubernetes.pod-labels=pod",
            "--kubernetes.kubelet-url=https://n:10250",
        ],
        "already carry",
    );
    refused(
        &[
            "--kubernetes",
            "--kubernetes.pod-labels=team",
            "--kubernetes.kubelet-url=http://n:10250",
        ],
        "https",
    );
    refused(
        &[
            "--kubernetes",
            "--kubernetes.pod-labels=team",
            "--kubernetes.pod-labels.source=api-server",
            "--kubernetes.api-server=https://a:6443",
        ],
        "--kubernetes.node-name",
    );
    refused(
        &[
            "--kubernetes",
            "--kubernetes.resource-slices",
            "--kubernetes.api-server=https://a:6443",
        ],
        "--kubernetes.node-name",
    );
}

#[test]
fn limits_are_bounded_at_parse_time() {
    let c = parse(&[
        "--web.max-connections",
        "0",
        "--web.max-requests",
        "1000000",
    ])
    .unwrap();
    assert_eq!((c.max_connections, c.max_requests), (0, MAX_LIMIT));
    for flag in ["--web.max-connections", "--web.max-requests"] {
        for bad in ["18446744073709551615", "1000001", "-1", "many", ""] {
            let e = parse(&[&format!("{flag}={bad}")]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{flag} {bad:?}");
            assert_eq!(e.exit_code(), 2);
            let msg = e.to_string();
            assert!(msg.contains(flag), "{msg}");
        }
    }
}

#[test]
fn write_timeout() {
    assert_eq!(parse(&[]).unwrap().write_timeout, Duration::from_secs(10));
    let c = parse(&["--web.write-timeout", "30s"]).unwrap();
    assert_eq!(c.write_timeout, Duration::from_secs(30));
    assert!(parse(&["--web.write-timeout", "0s"]).is_err());
}

#[test]
fn errors_name_the_flag() {
    let e = parse(&["--web.listen-address", "nope"]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("--web.listen-address"), "{msg}");
    assert!(msg.contains("nope"), "{msg}");
    let e = parse(&["--log.level", "loud"]).unwrap_err();
    assert!(e.to_string().contains("--log.level"));
}

#[test]
fn workloads_flags() {
    assert_eq!(parse(&[]).unwrap().workloads, None);
    let c = parse(&["--workloads"]).unwrap().workloads.unwrap();
    assert_eq!(c.procfs, PathBuf::from("/proc"));
    assert_eq!(c.rootfs, PathBuf::from("/"));
    assert_eq!(c.limit, 256);
    assert_eq!(c.slurm_mapping_dir, None);
    let c = parse(&[
        "--workloads.slurm-mapping-dir",
        "/run/dcgm-job-map",
        "--path.procfs",
        "/host/proc",
        "--workloads.limit",
        "0",
    ])
    .unwrap()
    .workloads
    .expect("a mapping dir turns attribution on");
    assert_eq!(c.procfs, PathBuf::from("/host/proc"));
    assert_eq!(c.limit, usize::MAX);
    // Measured use comes with it, unless switched off by name.
    assert!(parse(&["--workloads"])
        .unwrap()
        .families
        .contains(Family::WorkloadUsage));
    assert!(!parse(&[]).unwrap().families.contains(Family::WorkloadUsage));
    let c = parse(&["--workloads", "--no-collector.workload_usage"]).unwrap();
    assert!(!c.families.contains(Family::WorkloadUsage));
    let e = parse(&["--workloads", "--no-collector.processes"]).unwrap_err();
    assert!(e.to_string().contains("processes collector"), "{e}");
    // A poll longer than the driver's per-process sample ring.
    assert!(parse(&["--workloads", "--collect.interval", "10s"]).is_ok());
    let e = parse(&["--workloads", "--collect.interval", "15s"]).unwrap_err();
    assert!(e.to_string().contains("--collect.interval 15s"), "{e}");
    assert!(parse(&[
        "--workloads",
        "--collect.interval",
        "15s",
        "--no-collector.workload_usage"
    ])
    .is_ok());
    assert!(parse(&[
        "--workloads",
        "--no-collector.processes",
        "--collector.process_memory"
    ])
    .is_ok());
    assert!(parse(&["--workloads.limit", "many"]).is_err());
    let c = parse(&[
        "--workloads.container-engine-socket",
        "/var/run/docker.sock,/run/podman/podman.sock",
    ])
    .unwrap()
    .workloads
    .expect("an engine socket turns attribution on");
    assert_eq!(c.container_engine_sockets.len(), 2);
}

#[test]
fn nvsentinel_is_off_unless_its_socket_is_given() {
    assert_eq!(parse(&[]).unwrap().nvsentinel, None);
    let c = parse(&[
        "--nvsentinel.socket",
        "/var/run/nvsentinel/nvsentinel.sock",
        "--nvsentinel.node-name",
        "node-7",
        "--nvsentinel.dry-run",
        "--nvsentinel.timeout",
        "2s",
    ])
    .unwrap();
    let n = c.nvsentinel.unwrap();
    assert_eq!(
        n.socket,
        PathBuf::from("/var/run/nvsentinel/nvsentinel.sock")
    );
    assert_eq!(n.node_name, "node-7");
    assert!(n.dry_run);
    assert_eq!(n.timeout, Duration::from_secs(2));
    let e = parse(&["--nvsentinel.dry-run"]).unwrap_err().to_string();
    assert!(e.contains("--nvsentinel.socket"), "{e}");
}
