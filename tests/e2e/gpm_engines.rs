//! GPM names 8 decoder, 8 JPEG and 2 OFA ids; an H100 has 7, 7 and 1, a
//! 1g MIG slice 1, 1 and 0. Whether a driver answers 0 or an error for the
//! ids past the engines present is not documented, so the simulator can do
//! either (`gpm_absent_engines`), and the real binary must average over the
//! engines that exist in both cases: in nvml-sim each present decoder runs
//! at a tenth of the graphics activity, each JPEG engine at a twentieth and
//! the OFA at a fiftieth, on whole GPUs and GPU instances alike.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{samples, Exporter};

/// (family, gpu, gpu_instance or "") -> metric -> value.
type Activity = BTreeMap<(String, String, String), BTreeMap<String, f64>>;

fn activity(text: &str) -> Activity {
    let mut out = Activity::new();
    for s in samples(text) {
        if s.name != "nvidia_gpu_activity_ratio" && s.name != "nvidia_gpu_mig_activity_ratio" {
            continue;
        }
        let key = (
            s.name.clone(),
            s.label("gpu").unwrap().to_string(),
            s.label("gpu_instance").unwrap_or("").to_string(),
        );
        out.entry(key).or_default().insert(
            s.label("metric").unwrap().to_string(),
            s.value.parse().unwrap(),
        );
    }
    out
}

fn check(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("gpm.toml");
    std::fs::write(
        &scenario,
        format!("name = \"gpm-{mode}\"\nbase = \"dgx-h100\"\ngpm_absent_engines = \"{mode}\"\n"),
    )
    .unwrap();
    let e = Exporter::start(
        &[
            "--simulate",
            scenario.to_str().unwrap(),
            "--collect.interval=300ms",
            "--collector.gpm.all-metrics",
        ],
        &[],
    );
    e.wait_ready();
    let deadline = Instant::now() + Duration::from_secs(60);
    let by_device = loop {
        let a = activity(&e.scrape());
        let busy = |m: &BTreeMap<String, f64>| m.get("graphics").is_some_and(|g| *g > 0.05);
        let whole = a
            .iter()
            .filter(|(k, m)| k.0 == "nvidia_gpu_activity_ratio" && busy(m))
            .count();
        let mig = a
            .iter()
            .filter(|(k, m)| k.0 == "nvidia_gpu_mig_activity_ratio" && busy(m))
            .count();
        if whole >= 2 && mig >= 2 {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "no busy GPU and GPU instance activity yet ({mode}):\n{a:?}\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut checked = 0;
    for (device, m) in &by_device {
        let graphics = m["graphics"];
        if graphics <= 0.05 {
            continue;
        }
        for (metric, share) in [("nvdec", 0.1), ("nvjpg", 0.05), ("nvofa", 0.02)] {
            let slice_without_ofa =
                metric == "nvofa" && device.0 == "nvidia_gpu_mig_activity_ratio";
            match m.get(metric) {
                // 1g and 2g slices of an H100 have no OFA: absent, not 0.
                None if slice_without_ofa => {}
                None => panic!("{device:?}: no {metric} ({mode}): {m:?}"),
                Some(v) => {
                    let want = graphics * share;
                    assert!(
                        (v - want).abs() <= want * 0.02 + 1e-9,
                        "{device:?} {metric} = {v}, want {want} (graphics {graphics} x {share}): \
                         engines that do not exist were averaged in ({mode})"
                    );
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 4, "{checked} devices checked");
}

#[test]
fn absent_engines_answering_zero_are_not_averaged_in() {
    check("zero");
}

#[test]
fn absent_engines_answering_not_supported_are_not_averaged_in() {
    check("not_supported");
}
