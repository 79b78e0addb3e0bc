//! Replaying a file (issue 31, items 5-7), on the real binaries: what
//! `--simulate FILE` and `nvml-sim import FILE` take and refuse, that a
//! replay serves what its capture says and nothing else, that what the
//! import changed reaches the log, and that the simulator's byte counters
//! never go back.

use crate::common::{
    self, repo_root, run_to_exit, sim_cli, sim_control, sim_library, value, Exporter,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn corpus(path: &str) -> std::path::PathBuf {
    repo_root().join("tests/corpus").join(path)
}

/// `nvml-sim import FILE`: exit status, stdout, stderr; killed (and
/// failed) past `within`.
fn import(file: &Path, within: Duration) -> (Option<i32>, String, String) {
    let mut child = Command::new(sim_cli())
        .arg("import")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nvml-sim");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nvml-sim import {} ran past {within:?}", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The exporter on `--simulate file`, expected to refuse it: what it wrote.
fn refused(file: &Path) -> String {
    sim_library();
    let (status, out) = run_to_exit(
        &[
            "--simulate",
            file.to_str().unwrap(),
            &format!("--web.listen-address=127.0.0.1:{}", common::free_port()),
        ],
        &[],
    );
    assert_eq!(status.code(), Some(1), "{out}");
    out
}

#[test]
fn simulate_refuses_a_fifo_and_import_a_device_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("host.xml");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Nothing writes to it: reading it would block for good, with the
    // listeners bound and SIGTERM caught (run_to_exit fails past 30 s).
    let out = refused(&fifo);
    assert!(out.contains("not a regular file (a FIFO)"), "{out}");
    // A device never ends: refused at the size bound, not read into memory
    // until the system runs out.
    let (code, _, err) = import(Path::new("/dev/zero"), Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("larger than 16777216 bytes"), "{err}");
}

#[test]
fn windows_captures_in_utf16_and_utf8_with_a_bom_replay_as_utf8_does() {
    let dir = tempfile::tempdir().unwrap();
    let original = corpus("telegraf/rtx-3080-v12.xml");
    let text = std::fs::read_to_string(&original).unwrap();
    let crlf = text.replace('\n', "\r\n");
    let plain = dir.path().join("plain");
    let forms: [(&str, Vec<u8>); 3] = [
        // Windows PowerShell 5.1's `>`: UTF-16LE with a BOM, CRLF.
        ("utf16le", {
            let mut b = vec![0xFF, 0xFE];
            b.extend(crlf.encode_utf16().flat_map(u16::to_le_bytes));
            b
        }),
        ("utf16be", {
            let mut b = vec![0xFE, 0xFF];
            b.extend(crlf.encode_utf16().flat_map(u16::to_be_bytes));
            b
        }),
        (
            "utf8bom",
            [&[0xEF, 0xBB, 0xBF][..], crlf.as_bytes()].concat(),
        ),
    ];
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("host.xml"), &text).unwrap();
    let (code, want, err) = import(&plain.join("host.xml"), Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    for (name, bytes) in forms {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let file = sub.join("host.xml");
        std::fs::write(&file, bytes).unwrap();
        let (code, got, err) = import(&file, Duration::from_secs(20));
        assert_eq!(code, Some(0), "{name}: {err}");
        assert_eq!(got, want, "{name}: the same scenario as the UTF-8 capture");
        let e = Exporter::ready(file.to_str().unwrap(), &[]);
        let text = e.scrape();
        assert!(
            text.contains("name=\"NVIDIA GeForce RTX 3080\""),
            "{name}: the replay serves the capture's GPU"
        );
    }
}

#[test]
fn what_the_import_changed_reaches_the_log_and_stderr() {
    // Two GPUs masked to one UUID: made unique, and said so, at the
    // capture's line of the second GPU.
    let masked = corpus("telegraf/dual_2080-v13.xml");
    let (code, _, err) = import(&masked, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    let unique = "GPU 1: uuid GPU-12345678-aaaa-bbbb-cccc-0123456789ab repeats an earlier GPU's";
    assert!(
        err.contains(&format!("dual_2080-v13.xml:820: warning: <gpu>: {unique}")),
        "{err}"
    );
    let e = Exporter::ready(masked.to_str().unwrap(), &[]);
    assert!(
        e.log()
            .contains(&format!("dual_2080-v13.xml:820: <gpu>: {unique}")),
        "{}",
        e.log()
    );
    assert!(e.log().contains("level=warn"), "{}", e.log());
    // An excerpt: one GPU of four.
    let excerpt = corpus("telegraf/a100-sxm4-v12.xml");
    let e = Exporter::ready(excerpt.to_str().unwrap(), &[]);
    assert!(
        e.log()
            .contains("a100-sxm4-v12.xml:7: attached_gpus says 4, the capture holds 1 <gpu>"),
        "{}",
        e.log()
    );
}

#[test]
fn a_text_capture_cut_inside_a_gpu_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(corpus("gls/H100SXMx8_smi.out_a.txt")).unwrap();
    // Cut 40 lines after the fifth GPU's memory section, as an upload or a
    // `head` would: it replayed as 4 GPUs with invented NOT_SUPPORTED limits.
    let lines: Vec<&str> = text.lines().collect();
    let fifth = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("GPU 0000"))
        .nth(4)
        .unwrap()
        .0;
    let memory = fifth
        + lines[fifth..]
            .iter()
            .position(|l| l.trim() == "FB Memory Usage")
            .unwrap();
    let cut = dir.path().join("cut.txt");
    std::fs::write(&cut, lines[..memory + 40].join("\n")).unwrap();
    let (code, out, err) = import(&cut, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{out}");
    let line = format!("cut.txt:{}: <gpu>: the section of GPU", memory + 40);
    assert!(err.contains(&line), "{err}");
    assert!(err.contains("cut short"), "{err}");
    let out = refused(&cut);
    assert!(
        out.contains(&line[..line.find(": <gpu>").unwrap()]),
        "{out}"
    );
}

#[test]
fn a_file_that_is_neither_scenario_nor_capture_is_named_for_what_it_looks_like() {
    let dir = tempfile::tempdir().unwrap();
    // An XML capture that lost its first byte: once a TOML error
    // ("key with no value, expected `=`").
    let text = std::fs::read_to_string(corpus("k8s-test-infra/qx-a100.xml")).unwrap();
    let cut = dir.path().join("cut.xml");
    std::fs::write(&cut, &text[1..]).unwrap();
    let out = refused(&cut);
    assert!(
        out.contains("cut.xml:1: expected the root element, found `?xml version"),
        "{out}"
    );
    assert!(out.contains("first bytes lost"), "{out}");
    assert!(!out.contains("expected `=`"), "{out}");
    // `nvidia-smi --query-gpu` CSV.
    let out = refused(&corpus("nvidia_gpu_exporter/query.txt"));
    assert!(
        out.contains("neither a scenario (TOML) nor an nvidia-smi capture")
            && out.contains("it looks like `nvidia-smi --query-gpu` CSV"),
        "{out}"
    );
}

#[test]
fn a_section_a_capture_collapses_to_one_string_is_absent_not_the_boards() {
    // Every real GB200 prints `<power_smoothing>Insufficient
    // Permissions</power_smoothing>`: the lifetime is not known, and was
    // served from the built-in board (1.00, 0.99, 0.98, 0.97).
    let e = Exporter::ready(corpus("k8s-test-infra/qx-gb200.xml").to_str().unwrap(), &[]);
    let text = e.scrape();
    assert!(value(&text, "nvidia_gpu_up", &[("gpu", "0")]).is_some());
    assert!(
        !text.contains("\nnvidia_gpu_power_smoothing_lifetime_remaining_ratio{"),
        "{text}"
    );
}

#[test]
fn pcie_and_nvlink_byte_counters_never_go_back_when_the_load_changes() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sim.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &["--collect.interval", "100ms"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    let counters = |text: &str| -> Vec<f64> {
        [
            "nvidia_gpu_pcie_bytes_total",
            "nvidia_gpu_nvlink_bytes_total",
        ]
        .iter()
        .flat_map(|name| {
            ["tx", "rx"].map(|d| {
                value(text, name, &[("gpu", "2"), ("direction", d)])
                    .unwrap_or_else(|| panic!("no {name} {d} on GPU 2"))
            })
        })
        .collect()
    };
    let mut last = counters(&e.scrape());
    // Up and down, as the README's drills do: each change restarted the
    // counters' integral with the new wave, and they fell by up to 90 %.
    for percent in ["95", "3", "80", "0", "60"] {
        sim_control(&socket, &["load", "--gpu", "2", "--percent", percent]);
        e.wait_polls(2);
        let now = counters(&e.scrape());
        for (i, (a, b)) in last.iter().zip(&now).enumerate() {
            assert!(
                b >= a,
                "counter {i} went back after load {percent}%: {a} -> {b}"
            );
        }
        last = now;
    }
}
