//! The state file (`--state.path`) on the real binary, against what an
//! operator or an accident leaves beside it (issue 41; probe 5, D4, D8, D9
//! and D14): whatever lies at the temporary file's name is removed without
//! being opened, a directory or a state another exporter holds is refused
//! by name at start, and a write that fails is counted.

use std::time::Duration;

use crate::common::{free_port, run_to_exit, sim_control, value, xid_counts, Exporter};

fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.expect("mkfifo runs").success());
}

/// Before: a FIFO at `state.json.tmp` blocked the poller in open() before
/// NVML started, never ready, no line logged; a link there had its target
/// truncated and overwritten.
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
        } else {
            std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        }
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
    let mut gpus = Vec::new();
    for g in 0..records {
        let mut xids = Vec::new();
        let mut latest = Vec::new();
        for i in 0..entries {
            let (code, gi) = (1 + i % 999, i / 999);
            xids.push(format!(
                "{{\"code\":{code},\"gpu_instance\":{gi},\"count\":{},\"last_seen\":{}}}",
                1 + i,
                1.7e9 + i as f64
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
/// flocked). A FIFO or a link at each neither hangs the exporter nor is
/// followed: what it would name stays as it was (issue 41: "a FIFO or
/// symlink at every path the exporter writes neither hangs nor follows").
#[test]
fn a_fifo_or_a_link_at_any_path_the_state_uses_neither_hangs_nor_is_followed() {
    let listen = || format!("--web.listen-address=127.0.0.1:{}", free_port());
    for what in ["fifo", "link"] {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        let put = |at: &std::path::Path| {
            std::fs::write(&victim, "an operator's file").unwrap();
            if what == "fifo" {
                mkfifo(at);
            } else {
                std::os::unix::fs::symlink(&victim, at).unwrap();
            }
        };
        let untouched = || {
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "an operator's file",
                "{what}: the link's target is untouched"
            );
        };
        let state = dir.path().join("state.json");
        let flag = format!("--state.path={}", state.display());

        // At the state path: not a state file, so moved aside (the entry,
        // not what it names) and replaced by the exporter's file.
        put(&state);
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
        assert!(!aside.is_file(), "{what}: the entry itself kept aside");
        drop(e);
        untouched();

        // At the name a bad file is kept as: replaced, never followed.
        std::fs::remove_file(dir.path().join("state.json.bad")).unwrap();
        std::fs::write(&state, "not a state file").unwrap();
        put(&dir.path().join("state.json.bad"));
        let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
        e.wait_ready();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("state.json.bad")).unwrap(),
            "not a state file"
        );
        drop(e);
        untouched();

        // At the lock: refused by name at start, at once, not waited on.
        let lock = dir.path().join("state.json.lock");
        std::fs::remove_file(&lock).unwrap();
        put(&lock);
        let (status, out) = run_to_exit(&["--simulate", flag.as_str(), listen().as_str()], &[]);
        assert!(!status.success(), "{what}: {out}");
        assert!(
            out.contains("cannot use the lock file") && out.contains("state.json.lock"),
            "{what}: {out}"
        );
        untouched();
    }
}
