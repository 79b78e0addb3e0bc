//! The state file (`--state.path`) on the real binary, against what an
//! operator or an accident leaves beside it (issue 41; probe 5, D4, D8, D9
//! and D14): whatever lies at the temporary file's name is removed without
//! being opened, a directory or a state another exporter holds is refused
//! by name at start, and a write that fails is counted.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::Duration;

use crate::common::{free_port, run_to_exit, sim_control, value, xid_counts, Exporter};

fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.expect("mkfifo runs").success());
}

/// Before: a FIFO at `state.json.tmp` blocked the poller in open() before
/// NVML started, never ready, no line logged; a link there had its target
/// truncated and overwritten. A link is removed (not what it names); a
/// FIFO is refused at start and left as it is (issue 51).
#[test]
fn a_fifo_or_a_link_at_the_temporary_name_neither_hangs_nor_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let tmp = dir.path().join("state.json.tmp");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "an operator's file").unwrap();
    let flag = format!("--state.path={}", state.display());
    for what in ["fifo", "link"] {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&state);
        if what == "fifo" {
            mkfifo(&tmp);
            let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
            let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen.as_str()], &[]);
            assert!(!status.success(), "{out}");
            assert!(out.contains("state.json.tmp is a FIFO"), "{out}");
            assert!(std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.file_type().is_fifo()));
            continue;
        }
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
        e.wait_ready();
        e.scrape_until("the state written, no write failed", |t| {
            value(t, "nvml_exporter_state_write_errors_total", &[]) == Some(0.0) && state.is_file()
        });
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(text.starts_with("{\"version\":1"), "{what}: {text}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "an operator's file",
            "{what}: the link's target is untouched"
        );
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "{what}: removed");
    }
}

/// Before: the directory, with its contents, was renamed to
/// `mystate.json.bad` and a file put in its place.
#[test]
fn a_directory_as_the_state_path_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mystate");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("keep.txt"), "mine").unwrap();
    let flag = format!("--state.path={}", mine.display());
    let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
    let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen.as_str()], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "--state.path {} is a directory: give the path of the file to keep",
            mine.display()
        )),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("keep.txt")).unwrap(),
        "mine"
    );
    assert!(!dir.path().join("mystate.json.bad").exists());
}

/// Before: two exporters on one path stole each other's temporary file,
/// logged a misleading "cannot write" by turns, and the last writer won.
#[test]
fn a_second_exporter_on_the_same_state_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let flag = format!("--state.path={}", state.display());
    let first = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    first.wait_ready();
    let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
    let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen.as_str()], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("another exporter keeps its state there"),
        "{out}"
    );
    assert!(out.contains("state.json.lock"), "{out}");
    // The first goes on writing.
    assert_eq!(
        value(
            &first.scrape(),
            "nvml_exporter_state_write_errors_total",
            &[]
        ),
        Some(0.0)
    );
}

/// Before: a state that cannot be written was one warn line and nothing
/// on /metrics.
#[test]
fn a_state_that_cannot_be_written_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("no/such/dir/state.json");
    let flag = format!("--state.path={}", state.display());
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    e.scrape_until("the failed write counted", |t| {
        value(t, "nvml_exporter_state_write_errors_total", &[]).is_some_and(|v| v >= 1.0)
    });
    assert!(
        e.wait_log("cannot write the state file", Duration::from_secs(10)),
        "{}",
        e.log()
    );
    // Without --state.path under --simulate, no state and no series.
    let none = Exporter::ready("dgx-h100", &[]);
    assert_eq!(
        value(
            &none.scrape(),
            "nvml_exporter_state_write_errors_total",
            &[]
        ),
        None
    );
}

/// Before: live counting wrapped, so a restored count at u64::MAX went to
/// 0 at the next event (probe 5, D10).
#[test]
fn a_restored_count_at_its_most_saturates_instead_of_wrapping() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let socket = dir.path().join("sim.sock");
    let flag = format!("--state.path={}", state.display());
    let env = [("NVML_SIM_CONTROL", socket.to_str().unwrap())];
    let e = Exporter::simulate_env("dgx-h100", &[flag.as_str()], &env);
    e.wait_ready();
    let text = e.scrape();
    let uuid = crate::common::samples(&text)
        .into_iter()
        .find(|s| s.name == "nvidia_gpu_info" && s.label("gpu") == Some("4"))
        .and_then(|s| s.label("uuid").map(str::to_string))
        .expect("GPU 4's uuid");
    drop(e);
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    std::fs::write(
        &state,
        format!(
            "{{\"version\":1,\"boot_id\":\"{}\",\"gpus\":[{{\"uuid\":\"{uuid}\",\"xids\":[{{\"code\":48,\"count\":{},\"last_seen\":1700000000.0}}],\"latest\":[]}}]}}",
            boot.trim(),
            u64::MAX
        ),
    )
    .unwrap();
    let e = Exporter::simulate_env("dgx-h100", &[flag.as_str()], &env);
    e.wait_ready();
    sim_control(&socket, &["xid", "--gpu", "4", "--code", "48"]);
    sim_control(&socket, &["xid", "--gpu", "4", "--code", "31"]);
    let text = e.scrape_until("both events counted", |t| {
        xid_counts(t).get(&("4".to_string(), "31".to_string())) == Some(&1.0)
    });
    assert_eq!(
        xid_counts(&text).get(&("4".to_string(), "48".to_string())),
        Some(&(u64::MAX as f64)),
        "saturated, not wrapped to 0"
    );
}

/// A state file of this boot whose records are all of GPUs absent from
/// this run, `records` of them, each with `entries` XID label sets and as
/// many latest events: valid, under `MAX_ENTRIES`.
fn absent_gpus_state(records: usize, entries: usize) -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    // Events of the last day (absent GPUs' records older than a week go),
    // written as whole seconds: the same length as before.
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 86_400;
    let mut gpus = Vec::new();
    for g in 0..records {
        let mut xids = Vec::new();
        let mut latest = Vec::new();
        for i in 0..entries {
            let (code, gi) = (1 + i % 999, i / 999);
            xids.push(format!(
                "{{\"code\":{code},\"gpu_instance\":{gi},\"count\":{},\"last_seen\":{}}}",
                1 + i,
                since as f64 + i as f64
            ));
            latest.push(format!(
                "{{\"code\":{code},\"class\":\"code\",\"gpu_instance\":{gi},\"at_s\":{}}}",
                10.0 + i as f64
            ));
        }
        gpus.push(format!(
            "{{\"uuid\":\"GPU-absent-{g:04}\",\"xids\":[{}],\"latest\":[{}]}}",
            xids.join(","),
            latest.join(",")
        ));
    }
    format!(
        "{{\"version\":1,\"boot_id\":\"{}\",\"gpus\":[{}]}}",
        boot.trim(),
        gpus.join(",")
    )
}

/// The most the process has held resident (VmHWM), in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// Before: a valid 31.6 MB state file (25 absent GPUs of 10,000 entries
/// each, under the 32 MiB cap) cost 164 MB resident, 183 MB at its peak,
/// so the exporter was OOM-killed under the chart's 128 MiB limit at
/// every start (probe 5, D6). The file is now read only up to 16 MiB,
/// parsed as it is read, and absent GPUs' records are held to what live
/// counting keeps: the whole process's peak stays under half the limit,
/// for a file just under the cap and for one over it.
#[test]
fn a_large_valid_state_file_fits_the_charts_memory_limit() {
    const CHART_LIMIT: u64 = 128 << 20;
    for (records, over_the_cap) in [(13, false), (25, true)] {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        std::fs::write(&state, absent_gpus_state(records, 10_000)).unwrap();
        let size = std::fs::metadata(&state).unwrap().len();
        assert_eq!(size > 16 << 20, over_the_cap, "{size} bytes");
        let flag = format!("--state.path={}", state.display());
        let e = Exporter::simulate("dgx-h100", &[flag.as_str(), "--collect.interval=100ms"]);
        e.wait_ready();
        e.wait_polls(5);
        let peak = peak_resident(e.pid());
        assert!(
            peak < CHART_LIMIT / 2,
            "{records} absent GPUs ({size} bytes): peak resident {peak} bytes\n{}",
            e.log()
        );
        // The file written again: the 8 GPUs of this run and, held to the
        // defaults, the absent ones (none of a file refused by its size).
        e.scrape_until("the state written again", |_| {
            std::fs::metadata(&state).is_ok_and(|m| m.len() < 2 << 20)
        });
        let text = std::fs::read_to_string(&state).unwrap();
        let absent = text.matches("GPU-absent-").count();
        assert_eq!(
            absent,
            if over_the_cap { 0 } else { records },
            "{}",
            e.log()
        );
        if over_the_cap {
            assert!(
                e.log().contains("larger than 16777216 bytes"),
                "{}",
                e.log()
            );
        }
    }
}

/// Every path the exporter writes, given `--state.path P`: `P` itself
/// (renamed over), `P.tmp` (created; the test above), `P.bad` (a file
/// that cannot be used is renamed there) and `P.lock` (created and
/// flocked). A link at `P` or `P.bad` is moved or replaced, never
/// followed; at `P.lock` it is refused. A FIFO at any of them is refused
/// at start and left as it is (issue 51; before, one at `P` or `P.bad`
/// was renamed over).
#[test]
fn a_fifo_or_a_link_at_any_path_the_state_uses_neither_hangs_nor_is_followed() {
    let listen = || format!("--web.listen-address=127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    let state = dir.path().join("state.json");
    let flag = format!("--state.path={}", state.display());
    // What a crash could leave of a state file: moved aside, not refused.
    let damaged = "{\"version\":1,\"boot_";
    let untouched = || {
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            damaged,
            "the link's target is untouched"
        );
    };
    std::fs::write(&victim, damaged).unwrap();

    // A link at the state path: the entry moved aside, its target kept.
    std::os::unix::fs::symlink(&victim, &state).unwrap();
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    e.scrape_until("the state written", |_| {
        std::fs::symlink_metadata(&state).is_ok_and(|m| m.is_file())
    });
    assert!(
        e.log().contains("the state file cannot be used"),
        "{}",
        e.log()
    );
    let aside = std::fs::symlink_metadata(dir.path().join("state.json.bad")).unwrap();
    assert!(
        aside.file_type().is_symlink(),
        "the entry itself kept aside"
    );
    drop(e);
    untouched();

    // A link at the name a bad file is kept as: replaced, never followed.
    std::fs::remove_file(dir.path().join("state.json.bad")).unwrap();
    std::fs::write(&state, damaged).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("state.json.bad")).unwrap();
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("state.json.bad")).unwrap(),
        damaged
    );
    assert!(std::fs::symlink_metadata(dir.path().join("state.json.bad"))
        .unwrap()
        .is_file());
    drop(e);
    untouched();

    // A link or a FIFO at the lock, a FIFO at the state or the bad name:
    // refused by name at start, at once, not waited on, left as it is.
    let lock = dir.path().join("state.json.lock");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen().as_str()], &[]);
    assert!(!status.success(), "{out}");
    assert!(out.contains("state.json.lock is a symbolic link"), "{out}");
    untouched();
    std::fs::remove_file(&lock).unwrap();
    for name in ["state.json", "state.json.bad", "state.json.lock"] {
        let at = dir.path().join(name);
        let _ = std::fs::remove_file(&at);
        mkfifo(&at);
        let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen().as_str()], &[]);
        assert!(!status.success(), "{name}: {out}");
        assert!(out.contains(&format!("{name} is a FIFO")), "{out}");
        assert!(std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_fifo()));
        std::fs::remove_file(&at).unwrap();
    }
}

/// Makes `what` at `at`: a copy of /dev/null (mknod 1:3, never the real
/// one), a FIFO or a unix socket. `None` where this user may not mknod.
fn put_special(what: &str, at: &Path) -> Option<std::os::unix::net::UnixListener> {
    match what {
        "device" => {
            let made = std::process::Command::new("mknod")
                .arg(at)
                .args(["c", "1", "3"])
                .output()
                .expect("mknod runs");
            assert!(made.status.success(), "mknod (run as root): {made:?}");
            None
        }
        "fifo" => {
            mkfifo(at);
            None
        }
        _ => Some(std::os::unix::net::UnixListener::bind(at).unwrap()),
    }
}

/// Issue 51 (probe 6, D1): `--state.path=/dev/null` as root renamed the
/// device to `/dev/null.bad` and wrote a root-only JSON file in its
/// place; a FIFO or a socket got the same. Now a device, FIFO or socket
/// at any path the state uses is refused at start, by its name and what
/// it is, with the way to keep no state, and nothing in the directory is
/// renamed, written or made.
#[test]
fn a_device_fifo_or_socket_at_any_path_the_state_uses_is_refused_and_left_as_it_is() {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let listen = || format!("--web.listen-address=127.0.0.1:{}", free_port());
    for what in ["device", "fifo", "socket"] {
        if what == "device" && !root {
            eprintln!("skipped: mknod needs root");
            continue;
        }
        for suffix in ["", ".lock", ".tmp", ".bad"] {
            let dir = tempfile::tempdir().unwrap();
            let state = dir.path().join("null");
            let at = dir.path().join(format!("null{suffix}"));
            let _listener = put_special(what, &at);
            let before = std::fs::symlink_metadata(&at).unwrap();
            let flag = format!("--state.path={}", state.display());
            let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen().as_str()], &[]);
            assert!(!status.success(), "{what} at {suffix:?}: {out}");
            let is = match what {
                "device" => "a character device",
                "fifo" => "a FIFO",
                _ => "a socket",
            };
            assert!(
                out.contains(&format!("{} is {is}, not a regular file", at.display())),
                "{what} at {suffix:?}: {out}"
            );
            assert!(
                out.contains("an empty --state.path to keep no state"),
                "{out}"
            );
            let after = std::fs::symlink_metadata(&at).unwrap();
            assert_eq!(
                (after.file_type(), after.ino(), after.rdev(), after.mode()),
                (
                    before.file_type(),
                    before.ino(),
                    before.rdev(),
                    before.mode()
                ),
                "{what} at {suffix:?}: left as it is"
            );
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                names.len(),
                1,
                "{what} at {suffix:?}: nothing made: {names:?}"
            );
        }
    }
}

/// Issue 51 (probe 6, D1): a regular file that is not a state file (the
/// web config named by mistake) was moved aside and replaced by JSON.
/// Now it is refused and left as it is; what a crash can leave of a
/// state file (empty, NUL bytes, cut short) is still moved aside.
#[test]
fn a_file_that_is_not_a_state_file_is_refused_and_a_damaged_one_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("web.yml");
    let config = "tls_server_config:\n  cert_file: a.pem\n";
    std::fs::write(&state, config).unwrap();
    let flag = format!("--state.path={}", state.display());
    let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
    let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen.as_str()], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "--state.path {} is a file that is not a state file",
            state.display()
        )),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&state).unwrap(), config);
    assert!(!dir.path().join("web.yml.bad").exists());
    assert!(!dir.path().join("web.yml.lock").exists());
    std::fs::write(&state, [0u8; 64]).unwrap();
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    assert!(e.wait_log("the state file cannot be used", Duration::from_secs(10)));
    assert_eq!(
        std::fs::read(dir.path().join("web.yml.bad")).unwrap(),
        [0u8; 64]
    );
}

/// A script that runs the exporter as 65532 (the chart's user), as
/// `setpriv` does; `None` where this test does not run as root or 65532
/// cannot run this checkout's binary.
fn as_65532(dir: &Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        eprintln!("skipped: switching users needs root");
        return None;
    }
    let priv_ = ["--reuid=65532", "--regid=65532", "--clear-groups"];
    let exe = crate::common::EXE;
    let lib = crate::common::sim_library();
    let can = std::process::Command::new("setpriv")
        .args(priv_)
        .args(["test", "-x", exe, "-a", "-r"])
        .arg(&lib)
        .status()
        .is_ok_and(|s| s.success());
    if !can {
        eprintln!("skipped: 65532 cannot run this checkout's exporter");
        return None;
    }
    let script = dir.join("as-65532");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec setpriv {} {exe} \"$@\"\n", priv_.join(" ")),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(script)
}

fn chown(args: &[&str], path: &Path) {
    let ok = std::process::Command::new("chown")
        .args(args)
        .arg(path)
        .status();
    assert!(
        ok.is_ok_and(|s| s.success()),
        "chown {args:?} {}",
        path.display()
    );
}

/// The exporter as 65532 on `flag`, expected to refuse: what it said.
fn refused_as_65532(script: &Path, flag: &str) -> String {
    let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
    let mut child = std::process::Command::new(script)
        .args(["--simulate", flag, listen.as_str()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = crate::common::wait_timeout(&mut child, Duration::from_secs(30));
    if status.is_none() {
        let _ = child.kill();
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut out).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "kept running: {out}");
    out
}

/// Issue 51 (probe 6, D3): after a root run (the chart's kernel-log
/// default), the same state under the chart's non-root user moved the
/// root-only state aside (its XID counts lost) and, unable to open the
/// lock, ran without it beside a second exporter. Now files a root run
/// makes belong to the directory's owner, so the non-root run reads them
/// and holds the lock; and where they are root's and unreadable (made by
/// an older version) the non-root run refuses to start, naming them,
/// until they are given to it (the chart's init container: chown -R).
#[test]
fn a_root_run_then_a_non_root_run_keeps_the_counts_and_the_lock() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let scratch = tempfile::tempdir().unwrap();
    let Some(script) = as_65532(scratch.path()) else {
        return;
    };
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = scratch.path().join("sim.sock");
    let env = [("NVML_SIM_CONTROL", socket.to_str().unwrap())];
    let d = scratch.path().join("d");
    std::fs::create_dir(&d).unwrap();
    chown(&["65532:65532"], &d);
    let state = d.join("state.json");
    let flag = format!("--state.path={}", state.display());
    let xid_48 = |t: &str| {
        xid_counts(t)
            .get(&("3".to_string(), "48".to_string()))
            .copied()
    };

    let root = Exporter::simulate_env("dgx-h100", &[flag.as_str()], &env);
    root.wait_ready();
    sim_control(&socket, &["xid", "--gpu", "3", "--code", "48"]);
    root.scrape_until("XID 48 counted", |t| xid_48(t) == Some(1.0));
    root.scrape_until("XID 48 in the state file", |_| {
        std::fs::read_to_string(&state).is_ok_and(|t| t.contains("\"code\":48"))
    });
    drop(root);
    for f in [&state, &d.join("state.json.lock")] {
        let m = std::fs::metadata(f).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o777),
            (65532, 65532, 0o600),
            "{}",
            f.display()
        );
    }
    let _ = std::fs::remove_file(&socket);
    let args = [
        "--simulate=dgx-h100".to_string(),
        format!("--collect.interval={}", crate::common::TEST_INTERVAL),
        flag.clone(),
    ];
    let user = Exporter::start_exe(&script, &args, &env);
    user.wait_ready();
    user.scrape_until("the root run's count kept", |t| xid_48(t) == Some(1.0));
    let out = refused_as_65532(&script, &flag);
    assert!(
        out.contains("another exporter keeps its state there"),
        "{out}"
    );
    drop(user);

    // Root's files, as an older version left them: refused by name, left
    // as they are, the state file first, then the lock.
    chown(&["-R", "0:0"], &d);
    chown(&["65532:65532"], &d);
    let out = refused_as_65532(&script, &flag);
    assert!(
        out.contains(&format!("--state.path {}: cannot read it", state.display()))
            && out.contains("owner uid 0")
            && out.contains("chown -R"),
        "{out}"
    );
    assert_eq!(std::fs::metadata(&state).unwrap().uid(), 0, "left as it is");
    assert!(!d.join("state.json.bad").exists(), "not moved aside");
    chown(&["65532:65532"], &state);
    let out = refused_as_65532(&script, &flag);
    assert!(
        out.contains("cannot use the lock file") && out.contains("state.json.lock"),
        "{out}"
    );
    // Given to the user, as the chart's init container does.
    chown(&["-R", "-h", "65532:65532"], &d);
    let user = Exporter::start_exe(&script, &args, &env);
    user.wait_ready();
    user.scrape_until("the count kept", |t| xid_48(t) == Some(1.0));
}

/// Issue 51 (probe 6, D10): once the state's directory was removed and
/// made again, the first exporter's flock held the unlinked lock file and
/// a second exporter started beside it. Now the first takes the lock
/// again on the new file, writes its state there, and the second is
/// refused.
#[test]
fn a_second_exporter_is_refused_after_the_directory_is_made_again() {
    let scratch = tempfile::tempdir().unwrap();
    let v = scratch.path().join("v");
    std::fs::create_dir(&v).unwrap();
    let state = v.join("state.json");
    let flag = format!("--state.path={}", state.display());
    let first = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    first.wait_ready();
    first.scrape_until("the state written", |_| state.is_file());
    // The writer may put a file there meanwhile: removed until it is gone.
    for _ in 0..100 {
        if std::fs::remove_dir_all(&v).is_ok() || !v.exists() {
            break;
        }
    }
    assert!(!v.exists());
    assert!(
        first.wait_log("the state's lock file is gone", Duration::from_secs(30)),
        "{}",
        first.log()
    );
    std::fs::create_dir(&v).unwrap();
    assert!(
        first.wait_log("the state's lock is taken again", Duration::from_secs(30)),
        "{}",
        first.log()
    );
    first.scrape_until("the state written again", |_| state.is_file());
    let listen = format!("--web.listen-address=127.0.0.1:{}", free_port());
    let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen.as_str()], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("another exporter keeps its state there"),
        "{out}"
    );
}

/// Issue 51 (left from issue 41): the records of GPUs absent from this run
/// were capped by number but never aged. Now one whose latest event is
/// over 7 days old is dropped when the file is written; a recent one is
/// kept.
#[test]
fn an_absent_gpus_record_older_than_a_week_is_dropped_and_a_recent_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let record = |uuid: &str, last_seen: f64| {
        format!("{{\"uuid\":\"{uuid}\",\"xids\":[{{\"code\":48,\"count\":2,\"last_seen\":{last_seen}}}],\"latest\":[]}}")
    };
    std::fs::write(
        &state,
        format!(
            "{{\"version\":1,\"boot_id\":\"{}\",\"gpus\":[{},{}]}}",
            boot.trim(),
            record("GPU-absent-old", now - 8.0 * 86_400.0),
            record("GPU-absent-new", now - 86_400.0),
        ),
    )
    .unwrap();
    let flag = format!("--state.path={}", state.display());
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    let text = std::fs::read_to_string(&state).unwrap();
    e.scrape_until("the state written without the old record", |_| {
        std::fs::read_to_string(&state).is_ok_and(|t| !t.contains("GPU-absent-old"))
    });
    let written = std::fs::read_to_string(&state).unwrap();
    assert!(written.contains("GPU-absent-new"), "{written}");
    assert!(
        e.wait_log("dropped from the state file", Duration::from_secs(10)),
        "{}\n{text}",
        e.log()
    );
}
