//! Issue 46, on the real binary with the simulated driver: the codes the
//! driver added past NVIDIA's catalog page (173-176) and R620's 185, the
//! manual-triage buckets (78), a code the catalog lacks, a lone XID 45 as
//! the driver writes it (with and without its named cause, and next to
//! another GPU's XID), and NVLink5 lines with `i1` and a comma in the
//! process name, each from a kernel-log line as NVRM prints it.
//!
//! The expected answers are written out here from NVIDIA's and its peers'
//! own words, not read from `src/xid_catalog.rs`: gpud decides 173
//! `RebootSystem` (leptonai/gpud `components/accelerator/nvidia/xid/xid.go`);
//! the 595 driver marks the GPU for reset on 175 (open-gpu-kernel-modules
//! `kernel_gsp.c`, `_kgspHandleFatalTimeout`); NVSentinel resolves the
//! manual-triage buckets and a code without a bucket to CONTACT_SUPPORT
//! (`xid_catalog_consistency_test.go` `manualTriageBuckets`, `csv.go`
//! `parseStandardXID`), `check_hardware` here; the catalog's
//! `WORKFLOW_XID_45`: "Solo: RESTART_FM, Not Solo: IGNORE".
//!
//! dgx-h100's and hgx-b200's PCI buses (nvml-sim's DGX_BUSES): GPU 0 18,
//! 1 2a, 2 3a, 3 5d, 4 9a, 5 ab, 6 ba, 7 db.

use crate::common;

use std::io::Write;
use std::path::Path;

use common::{gpu_verdicts, kmsg_record as record, verdict, xid_counts, Exporter};

fn write_log(path: &Path, records: &[String]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(records.concat().as_bytes())
        .unwrap();
}

/// The verdicts once every line of the log is counted (`lines` XID events).
fn verdicts_of(
    node: &str,
    kmsg: &Path,
    lines: usize,
) -> std::collections::BTreeMap<String, (String, String)> {
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate(node, &["--collector.xid.kmsg", &kmsg_flag]);
    exporter.wait_ready();
    let text = exporter.scrape_until("every line counted", |t| {
        xid_counts(t).values().sum::<f64>() == lines as f64
    });
    gpu_verdicts(&text)
}

/// Before: 78 gave `none` (the only "healthy" answer among NVIDIA's
/// tools), 176 drained without a source, 185 and 180 gave no verdict at
/// all. Now each code past the catalog page answers as stated, and the
/// manual-triage buckets answer as one.
#[test]
fn codes_past_the_catalog_page_and_manual_triage_decide_as_nvidia_and_its_peers_say() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    write_log(
        &kmsg,
        &[
            record(1, 300.0, "NVRM: Xid (PCI:0000:18:00): 173, pid='<unknown>', name=<unknown>, C2C fatal link failure"),
            record(2, 280.0, "NVRM: Xid (PCI:0000:2a:00): 174, pid=4242, name=python3, Ch 00000010"),
            record(3, 260.0, "NVRM: Xid (PCI:0000:3a:00): 175, pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC response from GPU2 GSP! Memory subsystem error"),
            record(4, 240.0, "NVRM: Xid (PCI:0000:5d:00): 176, pid='<unknown>', name=<unknown>, PCIe correctable error fault"),
            record(5, 220.0, "NVRM: Xid (PCI:0000:9a:00): 78, pid='<unknown>', name=<unknown>, vGPU start failed"),
            record(6, 200.0, "NVRM: Xid (PCI:0000:ab:00): 185, pid='<unknown>', name=<unknown>, Sparing event"),
            record(7, 180.0, "NVRM: Xid (PCI:0000:ba:00): 180, pid='<unknown>', name=<unknown>, a newer driver's code"),
        ],
    );
    let v = verdicts_of("dgx-h100", &kmsg, 7);
    assert_eq!(
        v["0"],
        verdict("reboot", "xid_restart_bm"),
        "173: gpud RebootSystem"
    );
    assert_eq!(
        v["1"],
        verdict("restart_app", "xid_restart_app"),
        "174: one process ended"
    );
    assert_eq!(
        v["2"],
        verdict("reset_gpu", "xid_reset_gpu"),
        "175: the driver marks the GPU for reset"
    );
    assert_eq!(
        v["3"],
        verdict("check_hardware", "xid_check_mechanicals"),
        "176: NVSentinel's default"
    );
    assert_eq!(
        v["4"],
        verdict("check_hardware", "xid_update_swfw"),
        "78: a human decides"
    );
    assert_eq!(
        v["5"],
        verdict("check_hardware", "xid_contact_support"),
        "185: NVSentinel's default"
    );
    assert_eq!(
        v["6"],
        verdict("check_hardware", "xid_unlisted"),
        "180: a code the catalog lacks"
    );
    assert_eq!(v["7"], verdict("none", "none"));
}

/// Before: every 45 without another XID of its own GPU within 10 s
/// named the fabric manager, on each GPU a 48 elsewhere ended a job of,
/// and whatever cause the driver wrote on the line. Now a 45 with
/// company anywhere on the node, or with a named cause, is not solo.
#[test]
fn a_lone_45_is_read_as_the_driver_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    write_log(
        &kmsg,
        &[
            // A 48 on GPU 0 ends a job that spans GPUs 1 and 2.
            record(1, 200.0, "NVRM: Xid (PCI:0000:18:00): 48, pid=900, name=torchrun, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
            record(2, 199.5, "NVRM: Xid (PCI:0000:2a:00): 45, pid=901, name=torchrun, Ch 00000010"),
            record(3, 199.4, "NVRM: Xid (PCI:0000:3a:00): 45, pid=902, name=torchrun, Ch 00000010"),
            // GPU 3: the driver names the cause, an XID that asks for
            // nothing itself, logged 30 s before.
            record(4, 130.0, "NVRM: Xid (PCI:0000:5d:00): 43, pid=903, name=my app, v2, Ch 00000008"),
            record(5, 100.0, "NVRM: Xid (PCI:0000:5d:00): 45, pid=903, name=my app, v2, Ch 00000008 caused by previous Xid 43"),
            // GPU 4: alone on the node, no cause named: the fabric manager.
            record(6, 40.0, "NVRM: Xid (PCI:0000:9a:00): 45, pid=904, name=python3, Ch 00000010"),
        ],
    );
    let v = verdicts_of("dgx-h100", &kmsg, 6);
    assert_eq!(v["0"], verdict("reset_gpu", "xid_workflow_xid_48"));
    assert_eq!(v["1"], verdict("none", "none"), "GPU 0's 48 came with it");
    assert_eq!(v["2"], verdict("none", "none"), "GPU 0's 48 came with it");
    assert_eq!(v["3"], verdict("none", "none"), "the line names its cause");
    assert_eq!(
        v["4"],
        verdict("none", "xid_workflow_xid_45"),
        "solo on an NVSwitch system"
    );
}

/// NVLink5 lines as Blackwell's driver prints them, with a process whose
/// name holds a comma and a space: a drill (`i1`) is judged as a test, a
/// real one by NVIDIA's sheet (RLW_RXPIPE status 0x1 with bit 10 set,
/// V1: the sheet's "Action 2", RESET_GPU).
#[test]
fn nvlink5_lines_with_a_drill_and_a_comma_in_the_process_name() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    write_log(
        &kmsg,
        &[
            record(1, 300.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  Release Build"),
            record(2, 200.0, "NVRM: Xid (PCI:0000:2a:00): 145, pid=1234, name=torchrun, rank 3, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x040984c2 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"),
            record(3, 180.0, "NVRM: Xid (PCI:0000:3a:00): 145, pid=1234, name=torchrun, rank 3, RLW_RXPIPE Nonfatal XC0 i1 Link 13 (0x040984c2 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"),
        ],
    );
    let v = verdicts_of("hgx-b200", &kmsg, 2);
    assert_eq!(
        v["1"],
        verdict("reset_gpu", "xid_nvlink5_fatal"),
        "Action 2, past the comma"
    );
    assert_eq!(
        v["2"],
        verdict("none", "xid_nvlink5_injected"),
        "i1: a drill"
    );
}

/// The same through both sources: the simulated driver raises the 45s
/// through NVML and prints their lines to the kernel log, as NVRM does.
/// NVML's event carries the code alone, so it waits for its line, which
/// says whether the driver named a cause.
#[test]
fn nvmls_45_waits_for_its_line_to_know_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    std::fs::write(&kmsg, "").unwrap();
    let node = dir.path().join("h100.toml");
    std::fs::write(
        &node,
        "name = \"h100\"\nbase = \"dgx-h100\"\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 5\ncode = 45\n\
         detail = \"pid=77, name=a, b, Ch 00000010 caused by previous Xid 43\"\n\
         [[timeline]]\nat = 2\naction = \"xid\"\ngpu = 6\ncode = 45\n\
         detail = \"pid=78, name=python3, Ch 00000010\"\n",
    )
    .unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let exporter = Exporter::simulate_env(
        node.to_str().unwrap(),
        &["--collector.xid.kmsg", &kmsg_flag],
        &[("NVML_SIM_KMSG", kmsg.to_str().unwrap())],
    );
    exporter.wait_ready();
    exporter.scrape_until("both 45s counted once", |t| {
        xid_counts(t).values().sum::<f64>() == 2.0
    });
    let text = exporter.scrape_until("the lone 45 named", |t| {
        gpu_verdicts(t).get("6") == Some(&verdict("none", "xid_workflow_xid_45"))
    });
    let v = gpu_verdicts(&text);
    assert_eq!(v["5"], verdict("none", "none"), "its line names its cause");
    assert_eq!(
        xid_counts(&text).values().sum::<f64>(),
        2.0,
        "each pair counted once"
    );
}
