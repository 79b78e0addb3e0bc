//! Issue 23's acceptance test: the kernel log as a second XID source and
//! the verdict per GPU, on the real binary with the simulated driver
//! writing its XIDs to a kernel-log file (`NVML_SIM_KMSG`), as NVRM writes
//! them to /dev/kmsg.
//!
//! dgx-h100's PCI buses (nvml-sim's DGX_BUSES): GPU 2 is 3a, GPU 3 5d,
//! GPU 4 9a, GPU 5 ab, GPU 6 ba, GPU 7 db.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{samples, Exporter};
use nvml_exporter::kmsg;

/// A /dev/kmsg record logged `ago` seconds before now.
fn record(seq: u64, ago: f64, message: &str) -> String {
    let ts = ((kmsg::uptime().unwrap() - ago).max(0.0) * 1e6) as u64;
    kmsg::format_record(4, seq, ts, message)
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// What a node's log holds before the exporter starts: the boot, the
/// driver loading, GPU 2 falling off the bus, a GSP timeout on GPU 3, an
/// NVSwitch SXID, and garbage.
fn boot_log(path: &Path) {
    let lines = [
        record(1, 900.0, "Linux version 6.1.0-28-amd64"),
        record(2, 880.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  Fri Aug 16 21:39:15 UTC 2024"),
        record(3, 120.0, "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        record(4, 60.0, "NVRM: Xid (PCI:0000:5d:00): 119, pid=4242, name=python3, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL)."),
        record(5, 50.0, "nvidia-nvswitch1: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX Short Error Rate"),
        // Garbage: not a record, an XID line that does not parse, an XID of
        // a GPU this node does not have, and a line past the record limit.
        "this is not a kernel log record\n".to_string(),
        record(6, 40.0, "NVRM: Xid (PCI:0000:3a:00): seventy-nine"),
        record(7, 40.0, "NVRM: Xid (PCI:0000:ee:00): 48, An uncorrectable double bit error"),
        format!("4,8,1,-;NVRM: Xid (PCI:0000:db:00): 79, {}\n", "x".repeat(10_000)),
    ];
    append(path, &lines.concat());
}

fn scenario(dir: &Path, timeline: &str) -> String {
    let path = dir.join("node.toml");
    std::fs::write(
        &path,
        format!("name = \"dgx-h100\"\nbase = \"dgx-h100\"\n{timeline}"),
    )
    .unwrap();
    path.display().to_string()
}

/// (gpu, xid) -> count.
fn xids(text: &str) -> BTreeMap<(String, String), f64> {
    samples(text)
        .into_iter()
        .filter(|s| s.name == "nvidia_gpu_xid_errors_total")
        .map(|s| {
            (
                (
                    s.label("gpu").unwrap().to_string(),
                    s.label("xid").unwrap().to_string(),
                ),
                s.value.parse().unwrap(),
            )
        })
        .collect()
}

/// gpu -> (action, reason) of each GPU's own verdict.
fn verdicts(text: &str) -> BTreeMap<String, (String, String)> {
    samples(text)
        .into_iter()
        .filter(|s| s.name == "nvidia_gpu_recommended_action" && s.label("gpu_instance").is_none())
        .map(|s| {
            (
                s.label("gpu").unwrap().to_string(),
                (
                    s.label("action").unwrap().to_string(),
                    s.label("reason").unwrap().to_string(),
                ),
            )
        })
        .collect()
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value.parse().unwrap())
}

fn verdict(action: &str, reason: &str) -> (String, String) {
    (action.to_string(), reason.to_string())
}

#[test]
fn xids_from_before_the_start_from_the_log_alone_and_from_both_sources_each_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    boot_log(&kmsg);
    // After the start: an application fault on GPU 4 and an uncorrectable
    // ECC error on GPU 5, each raised through NVML and logged; a GSP error
    // on GPU 6 that only the log shows, as on real drivers.
    let node = scenario(
        dir.path(),
        "[[timeline]]\nat = 2\naction = \"xid\"\ngpu = 4\ncode = 13\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 5\ncode = 48\n\
         [[timeline]]\nat = 4\naction = \"xid\"\ngpu = 6\ncode = 120\nlog_only = true\n",
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate_env(
        &node,
        &["--collector.xid.kmsg", &kmsg_flag],
        &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())],
    );
    exporter.wait_ready();

    // Logged before the exporter started: counted, on the right GPUs.
    let text = exporter.scrape_until("the XIDs logged before the start", |t| xids(t).len() >= 2);
    let info = |gpu: &str| {
        samples(&text)
            .into_iter()
            .find(|s| s.name == "nvidia_gpu_info" && s.label("gpu") == Some(gpu))
            .and_then(|s| s.label("pci_bus_id").map(str::to_string))
    };
    assert_eq!(
        info("2").as_deref(),
        Some("00000000:3A:00.0"),
        "the bus ids this test is written for"
    );
    assert_eq!(info("3").as_deref(), Some("00000000:5D:00.0"));

    // The log-only XID, within a poll of being logged.
    let deadline = Instant::now() + Duration::from_secs(30);
    let logged = loop {
        if std::fs::read_to_string(&kmsg).unwrap().contains("): 120, ") {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the simulator never logged XID 120"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    exporter.scrape_until("the log-only XID 120 of GPU 6", |t| {
        xids(t).contains_key(&("6".into(), "120".into()))
    });
    // A poll (200 ms) and a follow period (250 ms) are enough; the bound
    // is far above them so that a loaded CI machine cannot fail it, and
    // far below what a collector that read the log only at start (never)
    // or on a slow timer would take.
    let took = logged.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "XID 120 counted {took:?} after it was logged: the log is not being followed"
    );
    // Both sources saw GPU 5's and GPU 4's: each once. Their log lines
    // come before XID 120's, so the log's copies were taken by now; two more
    // polls give a second count, if there were one, time to show.
    exporter.wait_polls(2);
    let text = exporter.scrape();
    let got = xids(&text);
    let key = |g: &str, x: &str| (g.to_string(), x.to_string());
    assert_eq!(
        got,
        BTreeMap::from([
            (key("2", "79"), 1.0),
            (key("3", "119"), 1.0),
            (key("4", "13"), 1.0),
            (key("5", "48"), 1.0),
            (key("6", "120"), 1.0),
        ]),
        "log:\n{}",
        exporter.log()
    );
    assert!(
        std::fs::read_to_string(&kmsg)
            .unwrap()
            .contains("NVRM: Xid (PCI:0000:ab:00): 48, "),
        "the simulator logged GPU 5's XID too, so the dedupe had two copies to pair"
    );

    // Garbage changed nothing but the self-metric.
    let problem = |reason: &str| {
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(problem("malformed"), Some(2.0));
    assert_eq!(problem("unknown_gpu"), Some(1.0));
    assert_eq!(problem("oversized"), Some(1.0));
    assert_eq!(value(&text, "nvml_exporter_kernel_log_up", &[]), Some(1.0));
    assert_eq!(
        value(
            &text,
            "nvidia_nvswitch_sxid_errors_total",
            &[("nvswitch", "0000:c3:00.0"), ("sxid", "20009")]
        ),
        Some(1.0)
    );

    // The verdict: a reboot for the GPU off the bus, a reset for the GSP
    // timeouts and the ECC error, a restart of the application only for the
    // application fault, nothing for the healthy GPU.
    let v = verdicts(&text);
    assert_eq!(v["2"], verdict("reboot", "xid_restart_bm"));
    assert_eq!(v["3"], verdict("reset_gpu", "xid_reset_gpu"));
    assert_eq!(v["4"], verdict("restart_app", "xid_restart_app"));
    assert_eq!(v["5"], verdict("reset_gpu", "xid_workflow_xid_48"));
    assert_eq!(v["6"], verdict("reset_gpu", "xid_reset_gpu"));
    assert_eq!(v["7"], verdict("none", "none"));
    assert_eq!(
        value(&text, "nvidia_gpu_recommended_action", &[("gpu", "2")]),
        Some(3.0),
        "the value is the action's rank"
    );
    common::promtool_check(&text).unwrap();
}

#[test]
fn without_the_kernel_log_nvml_alone_never_sees_log_only_xids() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    boot_log(&kmsg);
    let node = scenario(
        dir.path(),
        "[[timeline]]\nat = 1\naction = \"xid\"\ngpu = 6\ncode = 120\nlog_only = true\n\
         [[timeline]]\nat = 1\naction = \"xid\"\ngpu = 5\ncode = 48\n",
    );
    let exporter = Exporter::simulate_env(&node, &[], &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())]);
    exporter.wait_ready();
    exporter.scrape_until("XID 48 through NVML", |t| !xids(t).is_empty());
    // Logged with XID 48: two polls after 48, a 120 would have shown.
    exporter.wait_polls(2);
    let text = exporter.scrape();
    assert_eq!(
        xids(&text).keys().cloned().collect::<Vec<_>>(),
        [("5".to_string(), "48".to_string())],
        "79, 119 and 120 reach only the log"
    );
    assert_eq!(value(&text, "nvml_exporter_kernel_log_up", &[]), None);
    assert_eq!(verdicts(&text)["6"], verdict("none", "none"));
}

#[test]
fn each_action_clears_when_it_should() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    boot_log(&kmsg);
    // An application fault on GPU 4 at 1 s; the driver reloaded between 3
    // and 5 s (every GPU reset, the module's load line logged).
    let node = scenario(
        dir.path(),
        "[[timeline]]\nat = 1\naction = \"xid\"\ngpu = 4\ncode = 31\n\
         [[timeline]]\nat = 3\naction = \"driver-unload\"\n\
         [[timeline]]\nat = 5\naction = \"driver-load\"\n",
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate_env(
        &node,
        &[
            "--collector.xid.kmsg",
            &kmsg_flag,
            "--collector.verdict.restart-app-window=2s",
        ],
        &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())],
    );
    exporter.wait_ready();
    let text = exporter.scrape_until("the application fault's verdict", |t| {
        verdicts(t).get("4") == Some(&verdict("restart_app", "xid_restart_app"))
    });
    assert_eq!(verdicts(&text)["3"], verdict("reset_gpu", "xid_reset_gpu"));
    // The window passes: the application is the application's business.
    exporter.scrape_until("restart_app to clear after the window", |t| {
        verdicts(t).get("4") == Some(&verdict("none", "none"))
    });
    // The driver reload resets every GPU: GPU 3's GSP timeout no longer
    // asks for a reset; GPU 2's fall off the bus still asks for a reboot.
    let text = exporter.scrape_until("the reset to clear GPU 3", |t| {
        verdicts(t).get("3") == Some(&verdict("none", "none"))
    });
    assert_eq!(verdicts(&text)["2"], verdict("reboot", "xid_restart_bm"));
    assert!(
        std::fs::read_to_string(&kmsg)
            .unwrap()
            .contains("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  (nvml-sim)"),
        "the simulator logs the driver's load"
    );
    assert!(exporter.log().contains("GPU reset"), "{}", exporter.log());
}

#[test]
fn a_restarted_exporter_counts_since_boot_and_honours_a_reset_done_while_it_was_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    boot_log(&kmsg);
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let args = ["--collector.xid.kmsg", kmsg_flag.as_str()];
    let mut first = Exporter::simulate("dgx-h100", &args);
    first.wait_ready();
    let before = first.scrape_until("the logged XIDs", |t| xids(t).len() == 2);
    assert_eq!(
        verdicts(&before)["3"],
        verdict("reset_gpu", "xid_reset_gpu")
    );
    first.terminate(Duration::from_secs(10));

    // The reset procedure (docs/operations.md) stops the exporter, resets
    // GPU 3 and records it in the kernel log.
    append(
        &kmsg,
        &record(100, 0.0, "nvml-exporter: GPU reset (PCI:0000:5d:00)"),
    );
    let second = Exporter::simulate("dgx-h100", &args);
    second.wait_ready();
    let after = second.scrape_until("the logged XIDs again", |t| xids(t).len() == 2);
    assert_eq!(
        xids(&after),
        xids(&before),
        "since boot: the same counts after a restart"
    );
    let after = second.scrape_until("GPU 3's reset to be read", |t| {
        verdicts(t).get("3") == Some(&verdict("none", "none"))
    });
    assert_eq!(verdicts(&after)["2"], verdict("reboot", "xid_restart_bm"));
}
