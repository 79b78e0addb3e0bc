//! The CLI's offline commands: validating scenario files and listing the
//! built-ins, without a running simulator.

use crate::common;

use std::process::Command;

#[test]
fn check_and_list_scenarios() {
    let out = Command::new(common::cli_path())
        .args(["check", "faults"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "faults: ok: 8 GPUs, 10 MIG instances, 9 timeline entries"
    );

    let dir = std::env::temp_dir().join(format!("nvml-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[gpu]]\nmodel = \"a100-sxm4-80gb\"\nmig = [\"4g.40gb\", \"4g.40gb\"]\n",
    )
    .unwrap();
    let out = Command::new(common::cli_path())
        .arg("check")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "{}:3: MIG profile `4g.40gb` does not fit",
            bad.display()
        )),
        "{err}"
    );

    let out = Command::new(common::cli_path())
        .arg("scenarios")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    for name in [
        "dgx-h100",
        "dgx-a100",
        "workstation",
        "faults",
        "large",
        "hgx-h200",
        "hgx-b200",
        "gb200-nvl72",
        "rtx-pro-6000",
    ] {
        assert!(list.lines().any(|l| l.starts_with(name)), "{list}");
    }
    // The data the tests walk: boards and driver behaviours.
    let out = Command::new(common::cli_path())
        .arg("boards")
        .output()
        .unwrap();
    let boards = String::from_utf8_lossy(&out.stdout);
    assert!(
        boards
            .lines()
            .any(|l| l.starts_with("h100-sxm5-80gb ") && l.ends_with("NVIDIA H100 80GB HBM3")),
        "{boards}"
    );
    let out = Command::new(common::cli_path())
        .arg("drivers")
        .output()
        .unwrap();
    let drivers = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = drivers
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(first.first(), Some(&"535.183.01"), "{drivers}");
    assert_eq!(first.last(), Some(&"610.57.04"), "{drivers}");
    assert!(drivers.contains("580.82 <= v < 590"), "{drivers}");
    assert!(drivers.contains("v >= 610"), "{drivers}");
    // A control command without a socket is a usage error, not a hang.
    let out = Command::new(common::cli_path())
        .env_remove("NVML_SIM_CONTROL")
        .args(["xid", "--gpu", "0", "--code", "13"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// What would break the simulator at run time is refused by `check` (and
/// so by `nvmlInit`), naming the line and the problem: times no clock can
/// hold (an `at` of 1e300 made every event wait panic), negative or NaN
/// durations, and keys nothing reads, MIG entries included.
#[test]
fn check_refuses_what_would_break_the_simulator() {
    let dir = std::env::temp_dir().join(format!("nvml-sim-absurd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gpu = "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n";
    for (body, want) in [
        (
            "[[timeline]]\nat = 1e300\naction = \"xid\"\ngpu = 0\ncode = 79\n",
            "at = 1e300",
        ),
        (
            "[[timeline]]\nat = nan\naction = \"xid\"\ngpu = 0\ncode = 79\n",
            "at = NaN",
        ),
        (
            "[[timeline]]\nat = -1\naction = \"xid\"\ngpu = 0\ncode = 79\n",
            "at = -1",
        ),
        (
            "[[timeline]]\nat = 1\naction = \"hang\"\ngpu = 0\nseconds = -5\n",
            "seconds = -5",
        ),
        (
            "[[timeline]]\nat = 1\naction = \"hang\"\ngpu = 0\nseconds = nan\n",
            "seconds = NaN",
        ),
        (
            "[[timeline]]\nat = 1\naction = \"hang\"\ngpu = 0\nseconds = 1e300\n",
            "seconds = 1e300",
        ),
        (
            "[[timeline]]\nat = 1\naction = \"load\"\ngpu = 0\npercent = 1e9\n",
            "percent = 1e9",
        ),
        (
            "mig = [{ profile = \"3g.40gb\", laod = 60 }]\n",
            "unknown field `laod`",
        ),
        ("mig = [7]\n", "a MIG instance is a profile name or a table"),
    ] {
        let path = dir.join("absurd.toml");
        let text = format!("{gpu}{body}");
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(common::cli_path())
            .arg("check")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
        assert!(
            err.contains(want) && err.contains("absurd.toml:"),
            "{text}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
