//! NVLink-C2C (issue 49, item 2) on the real binaries: the built-in GB200
//! tray serves each GPU's Grace link state and error counters with
//! `--collector.c2c`; a link taken down and errors added on the
//! simulator's control socket move them on the GPU and link they were
//! injected on only; an H100 (no C2C) and R570 (no error ids before the
//! 12.9 header) leave out what their driver does not answer, never zeros.

use crate::common::{self, samples, Exporter, Sample};

const UP: &str = "nvidia_gpu_c2c_link_up";
const ERRORS: &str = "nvidia_gpu_c2c_link_errors_total";

fn c2c(text: &str) -> Vec<Sample> {
    samples(text)
        .into_iter()
        .filter(|s| s.name == UP || s.name == ERRORS)
        .collect()
}

/// The value of `name` on `gpu`, `link` (and `error`), if served.
fn value(text: &str, name: &str, gpu: &str, link: &str, error: Option<&str>) -> Option<String> {
    c2c(text)
        .into_iter()
        .find(|s| {
            s.name == name
                && s.label("gpu") == Some(gpu)
                && s.label("link") == Some(link)
                && s.label("error") == error
        })
        .map(|s| s.value)
}

#[test]
fn a_gb200_tray_shows_its_links_and_a_fault_moves_them() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let e = Exporter::simulate_env(
        "gb200-nvl72",
        &["--collector.c2c"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    // The link count is read in the first poll, the links from the next.
    let text = e.scrape_until("every GPU's C2C links", |t| {
        (0..4).all(|g| value(t, UP, &g.to_string(), "9", None).is_some())
    });
    let series = c2c(&text);
    // 4 GPUs x 10 links x (state + 3 error counters).
    assert_eq!(series.len(), 4 * 10 * 4, "{text}");
    for s in &series {
        assert_eq!(s.value, if s.name == UP { "1" } else { "0" }, "{s:?}");
        assert!(s.label("uuid").is_some(), "{s:?}");
    }
    let kinds: std::collections::BTreeSet<_> =
        series.iter().filter_map(|s| s.label("error")).collect();
    assert_eq!(kinds, ["crc", "replay", "replay_b2b"].into(), "{text}");
    assert!(text.contains(&format!("# TYPE {ERRORS} counter")), "{text}");

    common::sim_control(
        &socket,
        &["c2c-state", "--gpu", "2", "--link", "3", "--up", "false"],
    );
    common::sim_control(
        &socket,
        &[
            "c2c-errors",
            "--gpu",
            "2",
            "--link",
            "3",
            "--counter",
            "replay",
            "--count",
            "7",
        ],
    );
    common::sim_control(
        &socket,
        &[
            "c2c-errors",
            "--gpu",
            "2",
            "--link",
            "3",
            "--counter",
            "crc",
        ],
    );
    let text = e.scrape_until("GPU 2's link 3 down with its errors", |t| {
        value(t, UP, "2", "3", None).as_deref() == Some("0")
            && value(t, ERRORS, "2", "3", Some("replay")).as_deref() == Some("7")
            && value(t, ERRORS, "2", "3", Some("crc")).as_deref() == Some("1")
    });
    assert_eq!(
        value(&text, ERRORS, "2", "3", Some("replay_b2b")).as_deref(),
        Some("0")
    );
    // Nothing else moved: the other links of GPU 2, the same link elsewhere.
    assert_eq!(value(&text, UP, "2", "4", None).as_deref(), Some("1"));
    assert_eq!(value(&text, UP, "1", "3", None).as_deref(), Some("1"));
    assert_eq!(
        value(&text, ERRORS, "1", "3", Some("replay")).as_deref(),
        Some("0")
    );

    common::sim_control(
        &socket,
        &["c2c-state", "--gpu", "2", "--link", "3", "--up", "true"],
    );
    let text = e.scrape_until("the link up again", |t| {
        value(t, UP, "2", "3", None).as_deref() == Some("1")
    });
    // A counter does not go back when the link recovers.
    assert_eq!(
        value(&text, ERRORS, "2", "3", Some("replay")).as_deref(),
        Some("7")
    );
}

#[test]
fn a_board_without_c2c_and_a_branch_without_the_error_ids_show_none() {
    // H100: the link count answers not supported; no series, never zeros.
    let h100 = Exporter::ready("dgx-h100", &["--collector.c2c"]);
    h100.wait_polls(2);
    let text = h100.scrape();
    assert!(text.contains("\nnvidia_gpu_info{"), "{text}");
    assert!(c2c(&text).is_empty(), "{text}");

    // R570 has the link status (170-172, every header) but not the error
    // counters (231-233, 12.9 header on): state only.
    let r570 = Exporter::simulate_env(
        "gb200-nvl72",
        &["--collector.c2c"],
        &[("NVML_SIM_DRIVER", "570.133.20")],
    );
    r570.wait_ready();
    let text = r570.scrape_until("the C2C link state on R570", |t| {
        (0..4).all(|g| value(t, UP, &g.to_string(), "0", None).is_some())
    });
    let series = c2c(&text);
    assert_eq!(series.len(), 4 * 10, "{text}");
    assert!(
        series.iter().all(|s| s.name == UP && s.value == "1"),
        "{text}"
    );

    // Off by default: no shipped alert or panel reads the family yet.
    let default = Exporter::ready("gb200-nvl72", &[]);
    default.wait_polls(2);
    assert!(c2c(&default.scrape()).is_empty());
}
