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
