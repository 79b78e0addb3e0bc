//! Issue 46: XID 74 (`WORKFLOW_NVLINK_ERR`) as NVIDIA's text and its peers
//! read it, on the real binary with the simulated driver and a kernel-log
//! file. The expected verdicts come from NVIDIA's words, not from the
//! exporter's table: fourth-register bit 18 "a reset of the fabric is
//! required"; "report a bug" the catalog's CONTACT_SUPPORT
//! (`check_hardware`); the bare code what DCGM ("NVLink Critical Error"),
//! gpud and NVSentinel make of it; ECC/parity bits "seen more than 2 times
//! on the same link"; the table valid "for Hopper-based products".
//!
//! nvml-sim's DGX PCI buses: GPU 1 2a, GPU 2 3a, GPU 3 5d, GPU 4 9a.

use crate::common;

use std::time::Duration;

use common::{append, gpu_verdicts, kmsg_record as record, verdict, xid_counts, Exporter};

/// An XID 74 line of the GPU on `bus`, naming `link` and its registers.
fn line(bus: &str, link: u32, registers: [u32; 7]) -> String {
    let r: Vec<String> = registers.iter().map(|v| format!("{v:#x}")).collect();
    format!(
        "NVRM: Xid (PCI:0000:{bus}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {link}({})",
        r.join(", ")
    )
}

fn total_74(text: &str) -> f64 {
    xid_counts(text)
        .iter()
        .filter(|((_, x), _)| x == "74")
        .map(|(_, n)| n)
        .sum()
}

/// On an H100 node: bit 18 of the fourth register with an ECC threshold
/// bit (GPU 3), third-register bit 13, "not expected to be seen in
/// production. If seen, please report a bug" (GPU 2), and NVML's event
/// alone, whose line never comes (GPU 4). Each was `none` before.
#[test]
fn xid_74_asks_for_the_fabric_reset_the_report_and_the_code_wide_action() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(
        &kmsg,
        &[
            record(1, 60.0, &line("5d", 3, [0, 0, 0, 1 << 18, 1 << 20, 0, 0])),
            record(2, 50.0, &line("3a", 7, [0, 0, 1 << 13, 0, 0, 0, 0])),
        ]
        .concat(),
    );
    let node = dir.path().join("h100.toml");
    std::fs::write(
        &node,
        "name = \"h100\"\nbase = \"dgx-h100\"\n\
         [[timeline]]\nat = 1\naction = \"xid\"\ngpu = 4\ncode = 74\n",
    )
    .unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let mut e = Exporter::simulate(
        node.to_str().unwrap(),
        &["--collector.xid.kmsg", &kmsg_flag],
    );
    e.wait_ready();
    let text = e.scrape_until("GPU 4's 74 judged without its line", |t| {
        total_74(t) == 3.0 && gpu_verdicts(t).get("4").is_some_and(|v| v.0 != "none")
    });
    let v = gpu_verdicts(&text);
    assert_eq!(
        v["3"],
        verdict("reset_gpu", "xid_nvlink_err_fabric_reset"),
        "a reset of the fabric is required"
    );
    assert_eq!(
        v["2"],
        verdict("check_hardware", "xid_nvlink_err_report"),
        "report a bug: the catalog's CONTACT_SUPPORT"
    );
    assert_eq!(
        v["4"],
        verdict("check_hardware", "xid_nvlink_err_undecoded"),
        "the bare code, as DCGM, gpud and NVSentinel read it"
    );
    assert_eq!(v["1"], verdict("none", "none"), "no XID: healthy");
    e.terminate(Duration::from_secs(10));
}

/// On an A100 node the bit table, Hopper's, is not read: first-register
/// bit 0 ("can be safely ignored" on Hopper) gets the code's action.
#[test]
fn xid_74_on_an_a100_gets_the_code_wide_action() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    append(
        &kmsg,
        &record(1, 60.0, &line("5d", 3, [1, 0, 0, 0, 0, 0, 0])),
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let mut e = Exporter::simulate("dgx-a100", &["--collector.xid.kmsg", &kmsg_flag]);
    e.wait_ready();
    let text = e.scrape_until("the 74 counted and judged", |t| {
        total_74(t) == 1.0 && gpu_verdicts(t).contains_key("3")
    });
    assert_eq!(
        gpu_verdicts(&text)["3"],
        verdict("check_hardware", "xid_nvlink_err_not_hopper"),
        "{}",
        e.log()
    );
    e.terminate(Duration::from_secs(10));
}

/// ECC/parity bits "if seen more than 2 times on the same link, report a
/// bug": two on link 5 of GPU 3 and one on its link 6 ask for nothing;
/// after a restart (the state file) the third on link 5 escalates, though
/// the restarted exporter reads only that one line.
#[test]
fn the_third_ecc_xid_74_on_a_link_escalates_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let kmsg = dir.path().join("kmsg");
    let state = dir.path().join("state.json");
    // First register bit 4, third register bit 0: ECC/parity.
    append(
        &kmsg,
        &[
            record(1, 300.0, &line("5d", 5, [1 << 4, 0, 0, 0, 0, 0, 0])),
            record(2, 200.0, &line("5d", 6, [1 << 4, 0, 0, 0, 0, 0, 0])),
            record(3, 100.0, &line("5d", 5, [0, 0, 1, 0, 0, 0, 0])),
        ]
        .concat(),
    );
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    let state_flag = format!("--state.path={}", state.display());
    let args = [
        "--collector.xid.kmsg",
        kmsg_flag.as_str(),
        state_flag.as_str(),
    ];

    let mut first = Exporter::simulate("dgx-h100", &args);
    first.wait_ready();
    first.scrape_until("three 74s", |t| total_74(t) == 3.0);
    first.wait_polls(2);
    assert_eq!(
        gpu_verdicts(&first.scrape())["3"],
        verdict("none", "none"),
        "twice on link 5, once on link 6: nothing yet"
    );
    first.terminate(Duration::from_secs(10));
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(saved.contains("\"nvlink_err_links\""), "{saved}");

    append(
        &kmsg,
        &record(4, 10.0, &line("5d", 5, [0, 0, 0, 0, 1 << 18, 0, 0])),
    );
    let mut second = Exporter::simulate("dgx-h100", &args);
    second.wait_ready();
    // Counted and judged in one snapshot.
    let text = second.scrape_until("the fourth 74", |t| total_74(t) == 4.0);
    assert_eq!(
        gpu_verdicts(&text)["3"],
        verdict("check_hardware", "xid_nvlink_err_repeated"),
        "{}",
        second.log()
    );
    second.terminate(Duration::from_secs(10));
}
