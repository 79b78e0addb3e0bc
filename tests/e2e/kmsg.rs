//! Issue 23's acceptance test: the kernel log as a second XID source and
//! the verdict per GPU, on the real binary with the simulated driver
//! writing its XIDs to a kernel-log file (`NVML_SIM_KMSG`), as NVRM writes
//! them to /dev/kmsg.
//!
//! dgx-h100's PCI buses (nvml-sim's DGX_BUSES): GPU 2 is 3a, GPU 3 5d,
//! GPU 4 9a, GPU 5 ab, GPU 6 ba, GPU 7 db.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    append, gpu_verdicts, kmsg_record as record, samples, value, verdict, xid_counts, Exporter,
};
use nvml_exporter::kmsg;

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
    let text = exporter.scrape_until("the XIDs logged before the start", |t| {
        xid_counts(t).len() >= 2
    });
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
        xid_counts(t).contains_key(&("6".into(), "120".into()))
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
    let got = xid_counts(&text);
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
    let v = gpu_verdicts(&text);
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

/// Issue 51 (probe 6, D9): `--collector.xid.kmsg` with the `xid` family
/// off, by flag or by the selection file, was dropped without a word. It is
/// warned about once at start; the default asks nothing and says nothing.
#[test]
fn a_kernel_log_flag_with_the_xid_family_off_is_warned_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    boot_log(&kmsg);
    let selection = dir.path().join("selection.yml");
    std::fs::write(&selection, "version: 1\nfamilies:\n  deny: [xid]\n").unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let selection_flag = format!("--config.file={}", selection.display());
    let warning = "--collector.xid.kmsg has no effect: the xid family is off";
    for off in ["--no-collector.xid", selection_flag.as_str()] {
        let e = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag, off]);
        e.wait_ready();
        assert!(
            e.wait_log(warning, Duration::from_secs(10)),
            "{off}: {}",
            e.log()
        );
        e.wait_polls(2);
        let text = e.scrape();
        assert_eq!(
            value(&text, "nvml_exporter_kernel_log_up", &[]),
            None,
            "{off}"
        );
        assert_eq!(
            e.log().matches("has no effect").count(),
            1,
            "{off}: {}",
            e.log()
        );
    }
    let e = Exporter::simulate("dgx-h100", &["--no-collector.xid"]);
    e.wait_ready();
    e.wait_polls(1);
    assert!(!e.log().contains("has no effect"), "{}", e.log());
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
    exporter.scrape_until("XID 48 through NVML", |t| !xid_counts(t).is_empty());
    // Logged with XID 48: two polls after 48, a 120 would have shown.
    exporter.wait_polls(2);
    let text = exporter.scrape();
    assert_eq!(
        xid_counts(&text).keys().cloned().collect::<Vec<_>>(),
        [("5".to_string(), "48".to_string())],
        "79, 119 and 120 reach only the log"
    );
    assert_eq!(value(&text, "nvml_exporter_kernel_log_up", &[]), None);
    assert_eq!(gpu_verdicts(&text)["6"], verdict("none", "none"));
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
        gpu_verdicts(t).get("4") == Some(&verdict("restart_app", "xid_restart_app"))
    });
    assert_eq!(
        gpu_verdicts(&text)["3"],
        verdict("reset_gpu", "xid_reset_gpu")
    );
    // The window passes: the application is the application's business.
    exporter.scrape_until("restart_app to clear after the window", |t| {
        gpu_verdicts(t).get("4") == Some(&verdict("none", "none"))
    });
    // The driver reload resets every GPU: GPU 3's GSP timeout no longer
    // asks for a reset; GPU 2's fall off the bus still asks for a reboot.
    let text = exporter.scrape_until("the reset to clear GPU 3", |t| {
        gpu_verdicts(t).get("3") == Some(&verdict("none", "none"))
    });
    assert_eq!(
        gpu_verdicts(&text)["2"],
        verdict("reboot", "xid_restart_bm")
    );
    assert!(
        std::fs::read_to_string(&kmsg).unwrap().contains(&format!(
            "NVRM: loading NVIDIA UNIX {} Kernel Module  560.35.03  (nvml-sim)",
            std::env::consts::ARCH
        )),
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
    let before = first.scrape_until("the logged XIDs", |t| xid_counts(t).len() == 2);
    assert_eq!(
        gpu_verdicts(&before)["3"],
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
    let after = second.scrape_until("the logged XIDs again", |t| xid_counts(t).len() == 2);
    assert_eq!(
        xid_counts(&after),
        xid_counts(&before),
        "since boot: the same counts after a restart"
    );
    let after = second.scrape_until("GPU 3's reset to be read", |t| {
        gpu_verdicts(t).get("3") == Some(&verdict("none", "none"))
    });
    assert_eq!(
        gpu_verdicts(&after)["2"],
        verdict("reboot", "xid_restart_bm")
    );
}

/// A record of priority `priority` (facility times 8 plus level).
fn record_at(priority: u8, seq: u64, ago: f64, message: &str) -> String {
    let ts = ((kmsg::uptime().unwrap() - ago).max(0.0) * 1e6) as u64;
    kmsg::format_record(priority, seq, ts, message)
}

/// Issue 28, item 1: an NVLink5 XID asks for what NVIDIA's decode sheet
/// says of its line, by the driver's encoding; a line that cannot be read
/// asks for nothing of its own (issue 36: once a reset). hgx-b200's buses: GPU 1 2a, 2 3a, 3 5d,
/// 4 9a, 5 ab.
#[test]
fn nvlink5_xids_are_decoded_from_their_line_by_the_drivers_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    // R570 printed these (the V1 encoding): GB200 lines as gpud's tests
    // quote them, on this node's buses.
    let lines = [
        record(1, 300.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.148.08  Release Build"),
        // IGNORE (RLW_RXPIPE, status 0x8).
        record(2, 200.0, "NVRM: Xid (PCI:0000:2a:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"),
        // XID_154_EVAL (RLW_SRC_TRACK, 0x8): the recovery action decides.
        record(3, 190.0, "NVRM: Xid (PCI:0000:3a:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"),
        // RESET_GPU (NETIR, link -1).
        record(4, 180.0, "NVRM: Xid (PCI:0000:5d:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
        // A NETIR_LINK_EVT whose reason (bits 25:20 = 0x26) the sheet
        // resolves IGNORE though the line says Fatal.
        record(5, 170.0, "NVRM: Xid (PCI:0000:9a:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
    ];
    append(&kmsg, &lines.concat());
    // After the start, through NVML and the log both: GPU 6's non-fatal
    // RLW_REMAP (V1 IntrInfo 0x82), and GPU 7's event whose line has no
    // decoding words (the simulator's own wording).
    let node = dir.path().join("b200.toml");
    std::fs::write(
        &node,
        "name = \"b200\"\nbase = \"hgx-b200\"\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 6\ncode = 145\n\
         detail = \"RLW_REMAP Nonfatal XC0 i0 Link 08 (0x00000082 0x00000100 0x00000000 0x00000000)\"\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 7\ncode = 149\n",
    )
    .unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate_env(
        node.to_str().unwrap(),
        &["--collector.xid.kmsg", &kmsg_flag],
        &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())],
    );
    exporter.wait_ready();
    let text = exporter.scrape_until("the NVLink5 events of GPUs 6 and 7 judged", |t| {
        gpu_verdicts(t).get("7").is_some_and(|v| v.1 != "none")
    });
    let v = gpu_verdicts(&text);
    assert_eq!(v["1"], verdict("none", "none"), "IGNORE");
    assert_eq!(v["2"], verdict("none", "none"), "XID_154_EVAL");
    assert_eq!(
        v["3"],
        verdict("reset_gpu", "xid_nvlink5_fatal"),
        "RESET_GPU"
    );
    assert_eq!(v["4"], verdict("none", "none"), "the sheet, not the word");
    assert_eq!(
        v["6"],
        verdict("none", "none"),
        "NVML's event waited for its line, which says non-fatal"
    );
    assert_eq!(
        v["7"],
        verdict("none", "xid_nvlink5_undecoded"),
        "a line without the words: nothing of its own, the reason says why (issue 36)"
    );
    let got = xid_counts(&text);
    for (gpu, code) in [
        ("1", "145"),
        ("2", "145"),
        ("3", "149"),
        ("4", "149"),
        ("6", "145"),
        ("7", "149"),
    ] {
        assert_eq!(
            got.get(&(gpu.into(), code.into())),
            Some(&1.0),
            "GPU {gpu}: every event counted, once"
        );
    }
    common::promtool_check(&text).unwrap();
}

/// The research's reproduction on the built-in B200 fleet (driver 580, the
/// V2 encoding): a non-fatal RLW_REMAP once gave reset_gpu.
#[test]
fn a_non_fatal_rlw_remap_on_a_b200_asks_for_nothing_and_a_fatal_one_for_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(
        &kmsg,
        &[
            record(1, 20.0, "NVRM: Xid (PCI:0000:2a:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 08 (0x00000004 0x00000100 0x00000000 0x00000000 0x00000000 0x00000000)"),
            record(2, 20.0, "NVRM: Xid (PCI:0000:3a:00): 145, RLW_REMAP Fatal XC0 i0 Link 08 (0x00000004 0x00000040 0x00000000 0x00000000 0x00000000 0x00000000)"),
        ]
        .concat(),
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate("hgx-b200", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    let text = exporter.scrape_until("both lines counted", |t| xid_counts(t).len() == 2);
    assert_eq!(gpu_verdicts(&text)["1"], verdict("none", "none"));
    assert_eq!(
        gpu_verdicts(&text)["2"],
        verdict("reset_gpu", "xid_nvlink5_fatal")
    );
}

/// Issue 28, item 4: bus-fall lines without an XID count as 79 (once where
/// the driver also printed the XID line); records written from user space
/// are not the driver's. Issue 31, item 3: instance ids the driver never
/// hands out are refused.
#[test]
fn bus_fall_lines_count_as_79_and_user_space_records_do_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let lines = [
        // GPU 2: the newer driver's single line.
        record(1, 60.0, "NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus."),
        // GPU 3: an older driver prints the XID and the line for one fall.
        record(2, 50.0, "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        record(3, 50.0, "NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."),
        // GPU 4: the three-line report, split into records by the kernel.
        record(4, 40.0, "NVRM: The NVIDIA GPU 0000:9a:00.0"),
        record(5, 40.0, "NVRM: (PCI ID: 10de:2330) installed in this system has"),
        record(6, 40.0, "NVRM: fallen off the bus and is not responding to commands."),
        // GPU 5: `echo ... > /dev/kmsg` from a container (facility user),
        // and a made-up driver load that would clear every reset.
        record_at(12, 7, 30.0, "NVRM: Xid (PCI:0000:ab:00): 48, An uncorrectable double bit error"),
        record_at(14, 8, 29.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05"),
        // GPU 0 (MIG): an instance id past the driver's maximum.
        record(9, 20.0, "NVRM: Xid (PCI:0000:18:00 GPU-I:1000 GPU-CI:4294967295): 13, pid=1, name=x, y"),
        // GPU 6: the driver's own XID 48, and a reset marker written from
        // user space, as the runbook's procedure writes it: accepted.
        record(10, 10.0, "NVRM: Xid (PCI:0000:ba:00): 48, An uncorrectable double bit error"),
    ];
    append(&kmsg, &lines.concat());
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    let text = exporter.scrape_until("the falls counted", |t| xid_counts(t).len() >= 4);
    let key = |g: &str, x: &str| (g.to_string(), x.to_string());
    assert_eq!(
        xid_counts(&text),
        BTreeMap::from([
            (key("2", "79"), 1.0),
            (key("3", "79"), 1.0),
            (key("4", "79"), 1.0),
            (key("6", "48"), 1.0),
        ]),
        "log:\n{}",
        exporter.log()
    );
    let v = gpu_verdicts(&text);
    for gpu in ["2", "3", "4"] {
        assert_eq!(v[gpu], verdict("reboot", "xid_restart_bm"), "GPU {gpu}");
    }
    assert_eq!(v["5"], verdict("none", "none"), "user space is not NVRM");
    assert_eq!(v["6"], verdict("reset_gpu", "xid_workflow_xid_48"));
    let problem = |reason: &str| {
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(problem("user_space"), Some(2.0));
    assert_eq!(problem("malformed"), Some(1.0), "GPU-I:1000");
    assert!(
        exporter.log().contains("written from user space"),
        "{}",
        exporter.log()
    );
    append(
        &kmsg,
        &record_at(12, 11, 0.0, "nvml-exporter: GPU reset (PCI:0000:ba:00)"),
    );
    exporter.scrape_until("the user-space reset marker to clear GPU 6", |t| {
        gpu_verdicts(t).get("6") == Some(&verdict("none", "none"))
    });
}

/// Issue 31, item 3: 2,000 XIDs naming made-up MIG instances once gave
/// 2,008 verdict series on one GPU; only the instances the GPU has get
/// their own.
#[test]
fn verdict_series_are_bounded_by_the_instances_the_gpu_has() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let mut text = String::new();
    let mut seq = 1;
    for gi in 0..=14 {
        for ci in 0..=7 {
            for _ in 0..17 {
                text += &record(
                    seq,
                    5.0,
                    &format!("NVRM: Xid (PCI:0000:18:00 GPU-I:{gi:02} GPU-CI:{ci:02}): 13, pid=1, name=x, y"),
                );
                seq += 1;
            }
        }
    }
    append(&kmsg, &text);
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    let text = exporter.scrape_until("GPU 0's application faults", |t| {
        gpu_verdicts(t).get("0") == Some(&verdict("restart_app", "xid_restart_app"))
    });
    let series: Vec<_> = samples(&text)
        .into_iter()
        .filter(|s| s.name == "nvidia_gpu_recommended_action" && s.label("gpu") == Some("0"))
        .collect();
    let instances = samples(&text)
        .into_iter()
        .filter(|s| s.name == "nvidia_gpu_mig_info" && s.label("gpu") == Some("0"))
        .count();
    assert!(instances > 0, "GPU 0 is in MIG mode");
    assert!(
        series.len() <= 1 + instances,
        "{} verdict series for a GPU with {instances} MIG devices:\n{:#?}",
        series.len(),
        series
            .iter()
            .map(|s| (s.label("gpu_instance"), s.label("compute_instance")))
            .collect::<Vec<_>>()
    );
    assert!(
        series.len() > 1,
        "the instances it has keep their own verdict"
    );
}

/// Issue 31, item 5: `/dev/zero` is not the kernel log (it once burned a
/// core for ever with `kernel_log_up 1`); a file of garbage is read on
/// more slowly; a file cut and refilled past its old length between two
/// reads is read again.
#[test]
fn only_the_kernel_log_device_or_a_file_is_read() {
    let exporter = Exporter::simulate(
        "dgx-h100",
        &["--collector.xid.kmsg", "--path.kmsg=/dev/zero"],
    );
    exporter.wait_ready();
    let text = exporter.scrape_until("the device refused", |t| {
        value(
            t,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", "unreadable")],
        )
        .is_some()
    });
    assert_eq!(value(&text, "nvml_exporter_kernel_log_up", &[]), Some(0.0));
    assert_eq!(
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", "malformed")]
        ),
        None
    );
    assert!(
        exporter
            .log()
            .contains("a character device 1:5, not the kernel log (/dev/kmsg is 1:11)"),
        "{}",
        exporter.log()
    );
}

#[test]
fn a_file_of_garbage_is_read_on_slowly_and_a_refilled_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(
        &kmsg,
        &"this is a syslog line, not a kernel log record\n".repeat(5000),
    );
    append(
        &kmsg,
        &record(
            1,
            5.0,
            "NVRM: Xid (PCI:0000:3a:00): 94, pid=1, name=x, Contained",
        ),
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    assert!(
        exporter.wait_log(
            "lines in a row are not /dev/kmsg records: pausing",
            Duration::from_secs(10)
        ),
        "{}",
        exporter.log()
    );
    let text = exporter.scrape();
    let malformed = value(
        &text,
        "nvml_exporter_kernel_log_problems_total",
        &[("reason", "malformed")],
    )
    .unwrap();
    assert!(malformed < 5000.0, "{malformed}: read on at full speed");
    drop(exporter);

    // copytruncate faster than a poll: the file is cut and six records
    // written at once, more bytes than the reader had read.
    std::fs::write(
        &kmsg,
        record(
            1,
            5.0,
            "NVRM: Xid (PCI:0000:3a:00): 94, pid=1, name=x, Contained",
        ),
    )
    .unwrap();
    let exporter = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    exporter.scrape_until("the first record", |t| {
        xid_counts(t).get(&("2".to_string(), "94".to_string())) == Some(&1.0)
    });
    let refill: String = (2..=7)
        .map(|seq| record(seq, 0.0, "NVRM: Xid (PCI:0000:3a:00): 94, pid=1, name=x, Contained: SM (0x1). RST: No, D-RST: No"))
        .collect();
    std::fs::write(&kmsg, refill).unwrap();
    let text = exporter.scrape_until("all six refilled records", |t| {
        xid_counts(t).get(&("2".to_string(), "94".to_string())) == Some(&7.0)
    });
    assert_eq!(
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", "truncated")]
        ),
        Some(1.0)
    );
}

/// The UUID of GPU `gpu` in a scrape.
fn uuid(text: &str, gpu: &str) -> String {
    samples(text)
        .into_iter()
        .find(|s| s.name == "nvidia_gpu_info" && s.label("gpu") == Some(gpu))
        .and_then(|s| s.label("uuid").map(str::to_string))
        .unwrap()
}

/// A procfs holding only a boot id, for a test that plays a reboot.
fn procfs_of_boot(dir: &Path, boot_id: &str) -> String {
    let p = dir.join(format!("proc-{boot_id}"));
    std::fs::create_dir_all(p.join("sys/kernel/random")).unwrap();
    std::fs::write(p.join("sys/kernel/random/boot_id"), format!("{boot_id}\n")).unwrap();
    p.display().to_string()
}

/// Issue 28, item 2: a restart neither lowers an XID counter nor forgets
/// what an event asks for, though the kernel's ring has dropped the
/// oldest records meanwhile; without the state file the counter drops, as
/// it used to.
#[test]
fn a_restart_on_a_wrapped_kernel_log_keeps_the_counts_with_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    let lines: Vec<String> = (1..=4)
        .map(|seq| record(seq, 600.0 - seq as f64, "NVRM: Xid (PCI:0000:5d:00): 74, pid=1, name=x, NVLink: fatal error detected on link 3"))
        .collect();
    append(&kmsg, &lines.concat());
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let state_flag = format!("--state.path={}", state.display());
    let args = [
        "--collector.xid.kmsg",
        kmsg_flag.as_str(),
        state_flag.as_str(),
    ];
    let key = ("3".to_string(), "74".to_string());

    let mut first = Exporter::simulate("dgx-h100", &args);
    first.wait_ready();
    first.scrape_until("the four XIDs", |t| xid_counts(t).get(&key) == Some(&4.0));
    first.terminate(Duration::from_secs(10));
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(saved.contains("\"read_to\":4"), "{saved}");

    // The ring wraps while the exporter is down: the two oldest go.
    std::fs::write(&kmsg, lines[2..].concat()).unwrap();
    let mut second = Exporter::simulate("dgx-h100", &args);
    second.wait_ready();
    second.scrape_until("GPU 3's verdict", |t| gpu_verdicts(t).contains_key("3"));
    second.wait_polls(2);
    let text = second.scrape();
    assert_eq!(
        xid_counts(&text).get(&key),
        Some(&4.0),
        "never lower:\n{}",
        second.log()
    );
    // A 74 line without its registers: the code-wide action (issue 46:
    // DCGM, gpud and NVSentinel all act on the bare code).
    assert_eq!(
        gpu_verdicts(&text)["3"],
        verdict("check_hardware", "xid_nvlink_err_undecoded")
    );
    assert!(
        second.log().contains("state of this boot restored"),
        "{}",
        second.log()
    );
    assert_eq!(
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", "out_of_order")]
        ),
        None,
        "records counted by the earlier run are skipped without a word"
    );
    second.terminate(Duration::from_secs(10));

    // Without a state file: the counter comes back lower, as before.
    let third = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", kmsg_flag.as_str()]);
    third.wait_ready();
    let text = third.scrape_until("the two XIDs left", |t| xid_counts(t).contains_key(&key));
    assert_eq!(xid_counts(&text).get(&key), Some(&2.0));
}

/// Issue 28, item 2: a GPU reset made while the exporter was stopped, by
/// a tool that writes no line of ours, does not bring `reset_gpu` back:
/// NVSentinel's `GPU reset executed: GPU-<uuid>` line, or a pending repair
/// applied (what only a reset does). A new boot starts clean.
#[test]
fn resets_by_other_tools_while_stopped_are_known_and_a_new_boot_starts_clean() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    append(
        &kmsg,
        &[
            record(1, 300.0, "NVRM: Xid (PCI:0000:5d:00): 119, pid=1, name=x, Timeout after 6s of waiting for RPC response"),
            record(2, 290.0, "NVRM: Xid (PCI:0000:ab:00): 48, An uncorrectable double bit error"),
        ]
        .concat(),
    );
    let socket = dir.path().join("sim.sock");
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let state_flag = format!("--state.path={}", state.display());
    let args = [
        "--collector.xid.kmsg",
        kmsg_flag.as_str(),
        state_flag.as_str(),
    ];
    let mut first = Exporter::simulate_env(
        "dgx-h100",
        &args,
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    first.wait_ready();
    // GPU 5 also has a row remap waiting for a reset.
    common::sim_control(&socket, &["remap-row", "--gpu", "5", "--pending", "true"]);
    let text = first.scrape_until("both resets asked for", |t| {
        gpu_verdicts(t).get("3") == Some(&verdict("reset_gpu", "xid_reset_gpu"))
            && gpu_verdicts(t).get("5") == Some(&verdict("reset_gpu", "remap_pending"))
    });
    let uuid3 = uuid(&text, "3");
    first.wait_polls(2);
    first.terminate(Duration::from_secs(10));

    // NVSentinel resets GPU 3 (`logger -p daemon.err`: facility daemon,
    // forwarded to the kernel log); GPU 5 is reset by a tool that writes
    // nothing, and its pending remap is applied.
    append(
        &kmsg,
        &kmsg::format_record(
            27,
            3,
            ((kmsg::uptime().unwrap()) * 1e6) as u64,
            &format!("nvsentinel: GPU reset executed: {uuid3}"),
        ),
    );
    let second = Exporter::simulate("dgx-h100", &args);
    second.wait_ready();
    let text = second.scrape_until("the resets known", |t| {
        gpu_verdicts(t).get("3") == Some(&verdict("none", "none"))
            && gpu_verdicts(t).get("5") == Some(&verdict("none", "none"))
    });
    assert_eq!(
        xid_counts(&text).len(),
        2,
        "still counted: {:?}",
        xid_counts(&text)
    );
    let log = second.log();
    assert!(log.contains("NVSentinel"), "{log}");
    assert!(
        log.contains("changed while the exporter was stopped"),
        "{log}"
    );
    drop(second);

    // A reboot: another boot id. The earlier boot's state is not this one's.
    let procfs = format!(
        "--path.procfs={}",
        procfs_of_boot(dir.path(), "another-boot")
    );
    let third = Exporter::simulate("dgx-h100", &[args[0], args[1], args[2], procfs.as_str()]);
    third.wait_ready();
    third.scrape_until("the log read from its start", |t| xid_counts(t).len() == 2);
    assert!(
        third.log().contains("of an earlier boot: starting clean"),
        "{}",
        third.log()
    );
}

/// A state file that is not one is moved aside, said, and the exporter
/// starts clean; one it cannot write is said at start.
#[test]
fn a_garbage_or_unwritable_state_file_is_said_and_survived() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(&state, "{\"version\": 1, \"boot_id\": 5}").unwrap();
    let flag = format!("--state.path={}", state.display());
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    assert!(
        e.wait_log(
            "the state file cannot be used: starting clean",
            Duration::from_secs(10)
        ),
        "{}",
        e.log()
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("state.json.bad")).unwrap(),
        "{\"version\": 1, \"boot_id\": 5}"
    );
    assert!(e.wait_log("state_path=", Duration::from_secs(1)));
    drop(e);
    let flag = format!(
        "--state.path={}",
        dir.path().join("no/such/dir/state.json").display()
    );
    let e = Exporter::simulate("dgx-h100", &[flag.as_str()]);
    e.wait_ready();
    assert!(
        e.wait_log("cannot write the state file", Duration::from_secs(10)),
        "{}",
        e.log()
    );
}

/// Issue 36, F1 and F6: NVIDIA's sheet as written. RLW_RXPIPE with IntrInfo
/// bit 10 set (V1) is the sheet's "Action 2", RESET_GPU (read as no row
/// before); a NETIR_LINK_EVT whose status cell the sheet leaves blank
/// matches any status (required 0 before: a reset). hgx-b200's buses:
/// GPU 1 2a, 2 3a, 3 5d.
#[test]
fn the_nvlink5_sheets_action_2_and_blank_statuses_decide() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let lines = [
        record(1, 300.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  Release Build"),
        record(2, 200.0, "NVRM: Xid (PCI:0000:2a:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x040984c2 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"),
        record(3, 190.0, "NVRM: Xid (PCI:0000:3a:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x040980c2 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"),
        record(4, 180.0, "NVRM: Xid (PCI:0000:5d:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"),
    ];
    append(&kmsg, &lines.concat());
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate("hgx-b200", &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    let text = exporter.scrape_until("the three lines counted", |t| xid_counts(t).len() == 3);
    let v = gpu_verdicts(&text);
    assert_eq!(
        v["1"],
        verdict("reset_gpu", "xid_nvlink5_fatal"),
        "Action 2"
    );
    assert_eq!(
        v["2"],
        verdict("none", "none"),
        "the row's own pattern: IGNORE"
    );
    assert_eq!(
        v["3"],
        verdict("none", "none"),
        "blank status: reason 0x26, IGNORE"
    );
}

/// Issue 36, F7: the kernel log read again from its start after a restart
/// (its path changed, or reading newly switched on) counts nothing the
/// state file counted already.
#[test]
fn a_log_read_again_after_a_restart_counts_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    let state_flag = format!("--state.path={}", state.display());
    append(
        &kmsg,
        &[
            record(
                1,
                300.0,
                "NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=x, Graphics Exception",
            ),
            record(
                2,
                200.0,
                "NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=x, Graphics Exception",
            ),
            record(
                3,
                100.0,
                "NVRM: Xid (PCI:0000:ab:00): 48, An uncorrectable double bit error",
            ),
        ]
        .concat(),
    );
    let run = |log: &Path| {
        let flag = format!("--path.kmsg={}", log.display());
        let mut e = Exporter::simulate(
            "dgx-h100",
            &["--collector.xid.kmsg", &flag, state_flag.as_str()],
        );
        e.wait_ready();
        e.scrape_until("the logged XIDs", |t| xid_counts(t).len() == 2);
        e.wait_polls(2);
        let text = e.scrape();
        e.terminate(Duration::from_secs(10));
        text
    };
    let first = xid_counts(&run(&kmsg));
    assert_eq!(first.values().sum::<f64>(), 3.0, "{first:?}");
    // The same records under another name (a log path changed within a
    // boot): read from their start, counted once.
    let renamed = dir.path().join("kmsg.renamed");
    std::fs::rename(&kmsg, &renamed).unwrap();
    let second = xid_counts(&run(&renamed));
    assert_eq!(
        second, first,
        "counters unchanged after reading the renamed log"
    );

    // Reading newly switched on: the first run counted NVML's event, the
    // simulator wrote its line to the log the second run reads.
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    let state_flag = format!("--state.path={}", state.display());
    let socket = dir.path().join("sim.sock");
    let env = [
        ("NVML_SIM_KMSG", kmsg.to_str().unwrap()),
        ("NVML_SIM_CONTROL", socket.to_str().unwrap()),
    ];
    let key = ("3".to_string(), "48".to_string());
    let mut e = Exporter::simulate_env("dgx-h100", &[state_flag.as_str()], &env);
    e.wait_ready();
    common::sim_control(&socket, &["xid", "--gpu", "3", "--code", "48"]);
    e.scrape_until("NVML's XID 48", |t| xid_counts(t).get(&key) == Some(&1.0));
    e.terminate(Duration::from_secs(10));
    assert!(std::fs::read_to_string(&kmsg).unwrap().contains("): 48,"));
    let flag = format!("--path.kmsg={}", kmsg.display());
    let mut e = Exporter::simulate_env(
        "dgx-h100",
        &["--collector.xid.kmsg", &flag, state_flag.as_str()],
        &env,
    );
    e.wait_ready();
    e.scrape_until("the restored count", |t| xid_counts(t).contains_key(&key));
    e.wait_polls(3);
    let text = e.scrape();
    assert_eq!(
        xid_counts(&text).get(&key),
        Some(&1.0),
        "the log's line of the event counted before is not counted again:\n{}",
        e.log()
    );
    e.terminate(Duration::from_secs(10));
}

/// A process's CPU time (user + system, clock ticks) and peak resident
/// size (KiB), for the storm's figures (BENCHMARKS.md, "Kernel log").
fn cpu_ticks_and_peak_kib(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (ticks, peak)
}

/// Issue 51 (probe 6, D7): the driver's worst burst, 2,000 XIDs a second
/// for 20 s over eight GPUs, at the default interval. The reader's queue
/// (4,096 events) was emptied once a round, about 820 a second: 13,861 of
/// 40,000 were counted when the writing stopped, the rest minutes later.
/// Now the poller takes a queue filling between its rounds as well: two
/// polls after the last record every XID is counted, and nothing twice.
#[test]
fn a_storm_of_2000_xids_a_second_is_counted_as_it_is_logged() {
    const RATE: usize = 2000;
    const SECONDS: usize = 20;
    const BURSTS_PER_SECOND: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(&kmsg, &record(1, 1.0, "Linux version 6.1.0-28-amd64"));
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    // The default interval (5 s): the tests' 200 ms would hide the bound.
    common::sim_library();
    let e = Exporter::start(
        &["--simulate=dgx-h100", "--collector.xid.kmsg", &kmsg_flag],
        &[],
    );
    e.wait_ready();
    e.scrape_until("the kernel log followed", |t| {
        value(t, "nvml_exporter_kernel_log_up", &[]) == Some(1.0)
    });
    let (cpu_before, _) = cpu_ticks_and_peak_kib(e.pid());
    let buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"];
    let burst = RATE / BURSTS_PER_SECOND;
    let started = Instant::now();
    let mut seq = 1;
    // The load's pace: a burst every 250 ms (the storm, not a wait).
    for b in 0..SECONDS * BURSTS_PER_SECOND {
        let due = started + Duration::from_millis(1000 / BURSTS_PER_SECOND as u64) * b as u32;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let text: String = (0..burst)
            .map(|i| {
                seq += 1;
                let bus = buses[i % buses.len()];
                record(
                    seq,
                    0.0,
                    &format!(
                        "NVRM: Xid (PCI:0000:{bus}:00): 13, pid=1, name=x, Graphics Exception"
                    ),
                )
            })
            .collect();
        append(&kmsg, &text);
    }
    let written = Instant::now();
    e.wait_polls(2);
    let text = e.scrape();
    let counted: f64 = xid_counts(&text).values().sum();
    let (cpu_after, peak_kib) = cpu_ticks_and_peak_kib(e.pid());
    eprintln!(
        "storm: {} XIDs in {:.1} s; counted {counted} two polls later ({:.1} s after the last); \
         exporter CPU {} ticks; peak RSS {peak_kib} KiB",
        RATE * SECONDS,
        (written - started).as_secs_f64(),
        written.elapsed().as_secs_f64(),
        cpu_after - cpu_before,
    );
    assert_eq!(counted, (RATE * SECONDS) as f64, "{}", e.log());
    assert_eq!(
        value(
            &text,
            "nvml_exporter_kernel_log_problems_total",
            &[("reason", "out_of_order")]
        ),
        None
    );
}

/// Issue 51: a log recreated at the path while the exporter follows it,
/// numbered from 1 again (the simulator's drill, a file written anew), was
/// skipped as `out_of_order` until its numbers passed the old log's: every
/// new XID lost. It is now read from its start, cut in place or replaced.
#[test]
fn a_log_recreated_with_its_numbering_restarted_is_read_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let xids = |bus: &str, n: u64| -> String {
        (1..=n)
            .map(|seq| {
                record(
                    seq,
                    1.0,
                    &format!(
                        "NVRM: Xid (PCI:0000:{bus}:00): 13, pid=1, name=x, Graphics Exception"
                    ),
                )
            })
            .collect()
    };
    append(&kmsg, &xids("2a", 8));
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let e = Exporter::simulate("dgx-h100", &["--collector.xid.kmsg", &kmsg_flag]);
    e.wait_ready();
    let on = |gpu: &str| (gpu.to_string(), "13".to_string());
    e.scrape_until("GPU 1's eight", |t| {
        xid_counts(t).get(&on("1")) == Some(&8.0)
    });
    // Cut in place and written anew.
    std::fs::write(&kmsg, xids("3a", 3)).unwrap();
    e.scrape_until("GPU 2's three", |t| {
        xid_counts(t).get(&on("2")) == Some(&3.0)
    });
    // Replaced at the path.
    let next = dir.path().join("kmsg.new");
    std::fs::write(&next, xids("5d", 2)).unwrap();
    std::fs::rename(&next, &kmsg).unwrap();
    e.scrape_until("GPU 3's two", |t| xid_counts(t).get(&on("3")) == Some(&2.0));
    e.wait_polls(2);
    let text = e.scrape();
    assert_eq!(xid_counts(&text).values().sum::<f64>(), 13.0, "none twice");
    assert!(
        e.log().contains("numbered below the last one read"),
        "{}",
        e.log()
    );
}

/// Issue 51 (probe 6, D12): the same log under another spelling of its
/// path (a symlink, `d/../d/kmsg`) was read again from its start, and new
/// records dated within 2 s of the last counted one were taken as counted
/// (550 of 600). The saved position now holds for any spelling of the same
/// file: every new record counts, none twice.
#[test]
fn another_spelling_of_the_log_path_resumes_where_the_last_run_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    let state_flag = format!("--state.path={}", state.display());
    // Every record carries the same kernel time, as a burst does.
    let ts = ((kmsg::uptime().unwrap() - 10.0) * 1e6) as u64;
    let burst = |seqs: std::ops::RangeInclusive<u64>| -> String {
        seqs.map(|seq| {
            kmsg::format_record(
                4,
                seq,
                ts,
                "NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=x, Graphics Exception",
            )
        })
        .collect()
    };
    let key = ("1".to_string(), "13".to_string());
    let link = dir.path().join("kmsg.link");
    std::os::unix::fs::symlink(&kmsg, &link).unwrap();
    let dotted = dir.path().join("sub/../kmsg");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let mut total = 0;
    for (path, seqs) in [(&kmsg, 1..=50), (&link, 51..=60), (&dotted, 61..=70)] {
        total += seqs.clone().count();
        append(&kmsg, &burst(seqs));
        let flag = format!("--path.kmsg={}", path.display());
        let mut e = Exporter::simulate(
            "dgx-h100",
            &["--collector.xid.kmsg", &flag, state_flag.as_str()],
        );
        e.wait_ready();
        e.scrape_until(&format!("{total} XIDs via {}", path.display()), |t| {
            xid_counts(t).get(&key) == Some(&(total as f64))
        });
        e.wait_polls(2);
        assert_eq!(
            xid_counts(&e.scrape()).get(&key),
            Some(&(total as f64)),
            "none counted twice"
        );
        e.terminate(Duration::from_secs(10));
    }
}

/// Issue 36, F3: XID 74 decided by NVIDIA's workflow on its registers
/// (once reset_gpu whatever they said). dgx-h100's buses: GPU 1 2a, 2 3a,
/// 3 5d. GPU 4's event comes through NVML and the log both: NVML's waits
/// for the line's registers.
#[test]
fn xid_74_is_decided_by_its_registers() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(
        &kmsg,
        &[
            // Only bit 0 of the first register: "can be safely ignored".
            record(1, 60.0, "NVRM: Xid (PCI:0000:2a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
            // Bit 8: check the link's mechanical connections.
            record(2, 50.0, "NVRM: Xid (PCI:0000:3a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 2(0x100, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
            // Fifth register, an ECC threshold: continue operation.
            record(3, 40.0, "NVRM: Xid (PCI:0000:5d:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x0, 0x0, 0x0, 0x0, 0x100000, 0x0, 0x0)"),
        ]
        .concat(),
    );
    let node = dir.path().join("h100.toml");
    std::fs::write(
        &node,
        "name = \"h100\"\nbase = \"dgx-h100\"\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 4\ncode = 74\n\
         detail = \"NVLink: fatal error detected on link 5(0x800000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)\"\n",
    )
    .unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate_env(
        node.to_str().unwrap(),
        &["--collector.xid.kmsg", &kmsg_flag],
        &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())],
    );
    exporter.wait_ready();
    exporter.scrape_until("the four XID 74s counted", |t| {
        xid_counts(t).values().sum::<f64>() == 4.0
    });
    exporter.wait_polls(2);
    let text = exporter.scrape();
    let v = gpu_verdicts(&text);
    assert_eq!(v["1"], verdict("none", "none"), "safely ignored");
    assert_eq!(
        v["2"],
        verdict("check_hardware", "xid_workflow_nvlink_err"),
        "check the link"
    );
    assert_eq!(v["3"], verdict("none", "none"), "continue operation");
    assert_eq!(
        v["4"],
        verdict("none", "none"),
        "NVML's event waited for its line: bit 23, safely ignored"
    );
    assert!(
        !text.contains("action=\"reset_gpu\""),
        "no XID 74 asks for a reset:\n{text}"
    );
}

/// Before: a state file whose kernel-log position lay past the newest
/// record of the log at that path (another log recreated there, a copied
/// or crafted file) made the reader skip every new record up to it: a new
/// XID was never counted, and nothing was logged (issue 41; probe 5, D11).
/// Now the position is dropped with a line, the log is read from its
/// start, and what the restored counts hold is not counted twice.
#[test]
fn a_saved_position_past_the_end_of_the_log_does_not_skip_new_xids() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    boot_log(&kmsg);
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let state_flag = format!("--state.path={}", state.display());
    let args = [
        "--collector.xid.kmsg",
        kmsg_flag.as_str(),
        state_flag.as_str(),
    ];
    let mut first = Exporter::simulate("dgx-h100", &args);
    first.wait_ready();
    let before = first.scrape_until("the logged XIDs", |t| xid_counts(t).len() == 2);
    first.terminate(Duration::from_secs(10));
    let mut saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(saved["kernel_log"]["read_to"], 7, "the last record read");
    saved["kernel_log"]["read_to"] = 1_000_000.into();
    std::fs::write(&state, saved.to_string()).unwrap();
    // A new XID on GPU 4 (bus 9a), numbered after the log's records.
    append(
        &kmsg,
        &record(
            9,
            0.0,
            "NVRM: Xid (PCI:0000:9a:00): 48, An uncorrectable double bit error",
        ),
    );
    let second = Exporter::simulate("dgx-h100", &args);
    second.wait_ready();
    let after = second.scrape_until("the new XID counted", |t| xid_counts(t).len() == 3);
    let counts = xid_counts(&after);
    assert_eq!(counts[&("4".to_string(), "48".to_string())], 1.0);
    for (key, n) in xid_counts(&before) {
        assert_eq!(counts[&key], n, "{key:?} not counted twice");
    }
    assert!(
        second.wait_log(
            "kernel-log position is past the newest record",
            Duration::from_secs(5)
        ),
        "{}",
        second.log()
    );
}
