//! `nvidia_gpu_platform_info` (issue 49, item 1) on the real binaries: a
//! replay of the real GB200 and GB300 trays serves each GPU's chassis
//! serial, slot, tray, host id and module id as the capture printed them
//! (read here from the XML, not from our output); the built-in NVL72 tray
//! names its rack; an H100 and a pre-R570 driver have no series.

use crate::common::{repo_root, samples, Exporter, Sample};
use std::collections::BTreeMap;

const FAMILY: &str = "nvidia_gpu_platform_info";

/// Each `<gpu>`'s `<platformInfo>` rows, in the capture's GPU order.
fn captured(path: &str) -> Vec<BTreeMap<String, String>> {
    let xml = std::fs::read_to_string(repo_root().join("tests/corpus").join(path)).unwrap();
    xml.split("<platformInfo>")
        .skip(1)
        .map(|block| {
            let block = &block[..block.find("</platformInfo>").unwrap()];
            block
                .lines()
                .filter_map(|l| {
                    let l = l.trim();
                    let name = l.strip_prefix('<')?.split('>').next()?;
                    let text = l.strip_prefix(&format!("<{name}>"))?;
                    let text = text.strip_suffix(&format!("</{name}>"))?;
                    Some((name.to_string(), text.to_string()))
                })
                .collect()
        })
        .collect()
}

fn platform_series(text: &str) -> Vec<Sample> {
    samples(text)
        .into_iter()
        .filter(|s| s.name == FAMILY)
        .collect()
}

/// The label nvidia-smi's row should become: absent where it prints N/A
/// (or nothing).
fn expected(row: Option<&String>) -> Option<&str> {
    row.map(|s| s.trim())
        .filter(|s| !s.is_empty() && *s != "N/A")
}

fn replays_its_capture(path: &str, chassis: bool) {
    let rows = captured(path);
    assert!(!rows.is_empty(), "{path} has platformInfo blocks");
    let e = Exporter::ready(
        repo_root()
            .join("tests/corpus")
            .join(path)
            .to_str()
            .unwrap(),
        &[],
    );
    let series = platform_series(&e.scrape());
    assert_eq!(series.len(), rows.len(), "one series per GPU of {path}");
    for (gpu, row) in rows.iter().enumerate() {
        let gpu_label = gpu.to_string();
        let s = series
            .iter()
            .find(|s| s.label("gpu") == Some(gpu_label.as_str()))
            .unwrap_or_else(|| panic!("{path}: no {FAMILY} for GPU {gpu}"));
        for (label, xml) in [
            ("chassis_serial", "chassis_serial_number"),
            ("slot", "slot_number"),
            ("tray", "tray_index"),
            ("host_id", "host_id"),
            ("module_id", "module_id"),
        ] {
            assert_eq!(
                s.label(label),
                expected(row.get(xml)),
                "{path} GPU {gpu}: {label} (capture <{xml}> {:?})",
                row.get(xml)
            );
        }
        assert_eq!(
            s.label("chassis_serial").is_some(),
            chassis,
            "{path} GPU {gpu}"
        );
        assert_eq!(s.value, "1");
    }
}

#[test]
fn the_gb200_and_gb300_captures_replay_their_rack_tray_and_modules() {
    replays_its_capture("k8s-test-infra/qx-gb200.xml", true);
    replays_its_capture("k8s-test-infra/qx-gb300.xml", true);
}

#[test]
fn an_hgx_b200_in_no_chassis_names_only_host_and_module() {
    // The real B200 prints an empty chassis serial and N/A slot and tray
    // beside host id 1 and module ids 1-8; an RTX PRO 6000 the empty
    // serial with slot and tray 0.
    replays_its_capture("k8s-test-infra/qx-b200.xml", false);
    replays_its_capture("telegraf/pro-6000-maxq-blackwell-v13.xml", false);
}

#[test]
fn the_built_in_nvl72_tray_names_its_rack() {
    let e = Exporter::ready("gb200-nvl72", &[]);
    let series = platform_series(&e.scrape());
    let mut modules: Vec<&str> = series
        .iter()
        .map(|s| s.label("module_id").unwrap())
        .collect();
    assert_eq!(series.len(), 4);
    for s in &series {
        assert_eq!(s.label("chassis_serial"), Some("1820000000001"));
        assert_eq!((s.label("slot"), s.label("tray")), (Some("14"), Some("4")));
        assert_eq!(s.label("host_id"), Some("1"));
        assert!(s.label("uuid").is_some());
    }
    modules.sort_unstable();
    assert_eq!(modules, ["1", "2", "3", "4"], "one module each");
}

#[test]
fn an_h100_and_a_pre_r570_driver_have_none() {
    // Hopper answers NOT_SUPPORTED (qx-h100.xml prints N/A), and R560 has
    // no nvmlDeviceGetPlatformInfo: no series, never zeros.
    let h100 = Exporter::ready("dgx-h100", &[]);
    let text = h100.scrape();
    assert!(text.contains("\nnvidia_gpu_info{"), "{text}");
    assert!(platform_series(&text).is_empty(), "{text}");
    let capture = repo_root().join("tests/corpus/k8s-test-infra/qx-h100.xml");
    let replay = Exporter::ready(capture.to_str().unwrap(), &[]);
    assert!(platform_series(&replay.scrape()).is_empty());

    let r560 = Exporter::simulate_env("gb200-nvl72", &[], &[("NVML_SIM_DRIVER", "560.35.03")]);
    r560.wait_ready();
    let text = r560.scrape();
    assert!(text.contains("\nnvidia_gpu_info{"), "{text}");
    assert!(platform_series(&text).is_empty(), "{text}");
}
