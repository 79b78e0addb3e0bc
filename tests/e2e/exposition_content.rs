//! What the encoders emit for hand-built snapshots: which families and
//! series appear for healthy, MIG, lost, hung and consumer GPUs; that
//! absent readings are absent (never 0); determinism and family grouping;
//! gzip and content types.

use crate::{common, snapshots};

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use nvml_exporter::exposition::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use nvml_exporter::family::{Family, FamilySet};
use nvml_exporter::render::{encode, render_at, RenderContext};
use nvml_exporter::snapshot::{Health, Snapshot};

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: String,
}

/// A small reader for our own text output (values in our label sets never
/// contain `",`, which keeps the split honest; the real parsers run in
/// exposition_tools.rs).
fn parse(text: &[u8]) -> Vec<Sample> {
    let text = std::str::from_utf8(text).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let body = rest.strip_suffix('}').unwrap();
                    let labels = body
                        .split("\",")
                        .map(|kv| {
                            let (k, v) = kv.split_once("=\"").unwrap();
                            (k.to_string(), v.trim_end_matches('"').to_string())
                        })
                        .collect();
                    (n.to_string(), labels)
                }
                None => (series.to_string(), BTreeMap::new()),
            };
            Sample {
                name,
                labels,
                value: value.to_string(),
            }
        })
        .collect()
}

fn ctx(families: FamilySet) -> RenderContext {
    RenderContext {
        families,
        ..RenderContext::default()
    }
}

fn text(s: &Snapshot, families: FamilySet) -> Vec<u8> {
    encode(s, &ctx(families), snapshots::now()).0
}

fn names(samples: &[Sample]) -> BTreeSet<String> {
    samples.iter().map(|s| s.name.clone()).collect()
}

fn of_gpu<'a>(samples: &'a [Sample], gpu: &str) -> impl Iterator<Item = &'a Sample> {
    let gpu = gpu.to_string();
    samples
        .iter()
        .filter(move |s| s.labels.get("gpu") == Some(&gpu))
}

#[test]
fn every_gpu_series_has_gpu_and_uuid_and_only_global_ones_lack_them() {
    let samples = parse(&text(&snapshots::fully_populated(), FamilySet::all()));
    let global = [
        "nvidia_gpu_driver_info",
        "nvml_exporter_build_info",
        "nvml_exporter_nvml_up",
        "nvml_exporter_collect_interval_seconds",
        "nvml_exporter_kubernetes_up",
        "nvml_exporter_kubernetes_refresh_errors_total",
        "nvml_exporter_kubernetes_last_refresh_timestamp_seconds",
        "nvml_exporter_kubernetes_claimed_devices",
        "nvml_exporter_kubernetes_read_errors_total",
        "nvml_exporter_workloads_dropped",
        "nvml_exporter_workloads_last_refresh_timestamp_seconds",
        "nvml_exporter_workload_read_errors_total",
        "nvidia_nvswitch_sxid_errors_total",
        "nvml_exporter_kernel_log_up",
        "nvml_exporter_kernel_log_problems_total",
        "nvml_exporter_config_last_reload_successful",
        "nvml_exporter_config_last_reload_success_timestamp_seconds",
        "nvml_exporter_config_reloads_total",
        "nvml_exporter_config_dcgm_fields_not_served",
        "nvml_exporter_xid_last_wait_timestamp_seconds",
        "nvml_exporter_state_write_errors_total",
        "nvml_exporter_nvsentinel_events_total",
    ]
    .into_iter()
    .chain(common::PROCESS_SAMPLES.iter().copied())
    .collect::<Vec<_>>();
    for s in &samples {
        if global.contains(&s.name.as_str()) {
            assert!(
                !s.labels.contains_key("gpu") && !s.labels.contains_key("uuid"),
                "{s:?}"
            );
        } else if s.labels.contains_key("pci_bus_id") && s.name == "nvidia_gpu_recommended_action" {
            // The verdict of a GPU NVML cannot name: its address, from the
            // kernel log, is all there is.
            assert!(
                !s.labels.contains_key("gpu") && !s.labels.contains_key("uuid"),
                "{s:?}"
            );
        } else if s.name == "nvml_exporter_gpu_access_denied" {
            // A GPU NVML will not open has no UUID anyone could read.
            assert!(
                s.labels.contains_key("gpu") && !s.labels.contains_key("uuid"),
                "{s:?}"
            );
        } else {
            let gpu: u32 = s.labels["gpu"].parse().unwrap();
            assert_eq!(s.labels.get("uuid"), Some(&snapshots::uuid(gpu)), "{s:?}");
        }
        if s.name.starts_with("nvidia_gpu_mig_") && s.name != "nvidia_gpu_mig_enabled" {
            assert!(s.labels.contains_key("gpu_instance"), "{s:?}");
        }
    }
    for g in global {
        assert!(samples.iter().any(|s| s.name == g), "{g} missing");
    }
}

#[test]
fn up_follows_health_for_every_known_gpu() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::defaults()));
    let up: BTreeMap<String, String> = samples
        .iter()
        .filter(|s| s.name == "nvidia_gpu_up")
        .map(|s| (s.labels["gpu"].clone(), s.value.clone()))
        .collect();
    let want: BTreeMap<String, String> = (0..8)
        .map(|i| (i.to_string(), if i < 6 { "1" } else { "0" }.to_string()))
        .collect();
    assert_eq!(up, want);

    let mut s = snapshots::dgx_fleet();
    for (g, h) in s.gpus.iter_mut().zip([Health::Failing, Health::Pending]) {
        g.health = h;
    }
    let samples = parse(&text(&s, FamilySet::defaults()));
    for gpu in ["0", "1"] {
        let up = of_gpu(&samples, gpu)
            .find(|s| s.name == "nvidia_gpu_up")
            .unwrap();
        assert_eq!(up.value, "0", "gpu {gpu}");
    }
}

#[test]
fn lost_and_hung_gpus_keep_identity_xids_and_errors_but_no_measurements() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::all()));
    let kept: BTreeSet<&str> = [
        "nvidia_gpu_info",
        "nvidia_gpu_up",
        "nvidia_gpu_xid_errors_total",
        "nvidia_gpu_xid_last_timestamp_seconds",
        "nvml_exporter_last_sample_timestamp_seconds",
        "nvml_exporter_sample_duration_seconds",
        "nvml_exporter_nvml_errors_total",
        "nvml_exporter_stuck_call_seconds",
        // The exporter's own, like its errors: kept through every fault.
        "nvml_exporter_driver_seconds_total",
        "nvml_exporter_driver_calls_total",
    ]
    .into();
    for gpu in ["6", "7"] {
        let got: BTreeSet<&str> = of_gpu(&samples, gpu).map(|s| s.name.as_str()).collect();
        assert!(
            got.is_subset(&kept),
            "gpu {gpu} still has {:?}",
            got.difference(&kept)
        );
        assert!(got.contains("nvidia_gpu_info") && got.contains("nvml_exporter_nvml_errors_total"));
    }
    // The lost GPU's XID 79 survives; its unknown serial is left out.
    let lost: Vec<_> = of_gpu(&samples, "6").collect();
    assert!(lost.iter().any(|s| s.name == "nvidia_gpu_xid_errors_total"
        && s.labels["xid"] == "79"
        && s.value == "1"));
    let info = lost.iter().find(|s| s.name == "nvidia_gpu_info").unwrap();
    assert!(!info.labels.contains_key("serial") && info.labels.contains_key("vbios_version"));
    // Only the hung GPU reports a stuck call, with how long it has been stuck.
    let stuck: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "nvml_exporter_stuck_call_seconds")
        .collect();
    assert_eq!(stuck.len(), 1);
    assert_eq!(
        (
            stuck[0].labels["gpu"].as_str(),
            stuck[0].labels["family"].as_str()
        ),
        ("7", "power")
    );
    assert_eq!(stuck[0].value, "42.5");
}

#[test]
fn xids_keep_mig_instances_and_the_last_timestamp_is_the_latest_per_code() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::defaults()));
    let xids: Vec<_> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_xid_errors_total")
        .collect();
    assert_eq!(xids.len(), 3);
    assert!(xids.iter().any(|s| s.labels["xid"] == "13"
        && s.labels.get("gpu_instance").map(String::as_str) == Some("1")
        && s.labels.get("compute_instance").map(String::as_str) == Some("0")
        && s.value == "2"));
    let plain = xids.iter().find(|s| s.labels["xid"] == "31").unwrap();
    assert!(
        !plain.labels.contains_key("gpu_instance")
            && !plain.labels.contains_key("compute_instance")
    );

    let last: BTreeMap<String, f64> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_xid_last_timestamp_seconds")
        .map(|s| (s.labels["xid"].clone(), s.value.parse().unwrap()))
        .collect();
    let now = snapshots::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert_eq!(last.len(), 2, "{last:?}");
    assert!(
        (now - last["13"] - 60.0).abs() < 1e-3,
        "latest of the two instances: {last:?}"
    );
    assert!((now - last["31"] - 3600.0).abs() < 1e-3);
}

#[test]
fn workstation_emits_no_ecc_mig_nvlink_or_retirement_families() {
    let s = snapshots::workstation();
    let t = text(&s, FamilySet::all());
    let body = String::from_utf8(t.clone()).unwrap();
    for prefix in [
        "nvidia_gpu_ecc_",
        "nvidia_gpu_mig_",
        "nvidia_gpu_nvlink_",
        "nvidia_gpu_retired_",
        "nvidia_gpu_remapped_",
        "nvidia_gpu_recovery_",
        "nvidia_gpu_activity_",
    ] {
        assert!(
            !body.contains(prefix),
            "{prefix} present on a workstation:\n{body}"
        );
    }
    let n = names(&parse(&t));
    for want in [
        "nvidia_gpu_fan_speed_ratio",
        "nvidia_gpu_utilization_ratio",
        "nvidia_gpu_display_active",
        "nvidia_gpu_memory_used_bytes",
    ] {
        assert!(n.contains(want), "{want} missing");
    }
    assert!(
        !n.contains("nvidia_gpu_memory_reserved_bytes"),
        "reserved comes only from memory info v2"
    );
}

#[test]
fn absent_readings_are_never_written_as_zero() {
    let mut s = snapshots::dgx_fleet();
    for g in &mut s.gpus {
        if g.readings.is_some() {
            g.readings = Some(std::sync::Arc::default());
        }
        g.xids.clear();
        g.nvml_errors.clear();
        g.driver_time.clear();
        g.stuck_call = None;
        g.last_sample = None;
        g.sample_duration = None;
    }
    let samples = parse(&text(&s, FamilySet::all()));
    let got = names(&samples);
    let want: BTreeSet<String> = [
        "nvidia_gpu_info",
        "nvidia_gpu_driver_info",
        "nvidia_gpu_up",
        "nvml_exporter_build_info",
        "nvml_exporter_nvml_up",
        // Configuration, not a reading: known without any GPU.
        "nvml_exporter_collect_interval_seconds",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(got, want);
    // No metadata for families without samples either.
    let body = String::from_utf8(text(&s, FamilySet::all())).unwrap();
    assert_eq!(body.matches("# TYPE").count(), want.len(), "{body}");
}

#[test]
fn nvml_down_with_no_gpus_still_reports_the_exporter() {
    let s = Snapshot::default();
    let samples = parse(&text(&s, FamilySet::defaults()));
    assert_eq!(
        names(&samples),
        ["nvml_exporter_build_info", "nvml_exporter_nvml_up"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    assert!(samples
        .iter()
        .any(|s| s.name == "nvml_exporter_nvml_up" && s.value == "0"));
}

#[test]
fn disabled_families_disappear_and_process_memory_is_opt_in() {
    let s = snapshots::fully_populated();
    let defaults = names(&parse(&text(&s, FamilySet::defaults())));
    assert!(!defaults.contains("nvidia_gpu_process_memory_used_bytes"));
    assert!(defaults.contains("nvidia_gpu_processes"));
    let all = names(&parse(&text(&s, FamilySet::all())));
    assert!(all.contains("nvidia_gpu_process_memory_used_bytes"));

    let all_series = parse(&text(&s, FamilySet::all()));
    for &family in Family::ALL {
        let mut set = FamilySet::all();
        set.set(family, false);
        let without_series = parse(&text(&s, set));
        let without = names(&without_series);
        // Series, not only families: a detail switch may narrow a family
        // (gpm.all-metrics keeps four GPM metrics) rather than add one.
        let kept: BTreeSet<String> = without_series.iter().map(|x| format!("{x:?}")).collect();
        let gone: BTreeSet<&str> = all_series
            .iter()
            .filter(|x| !kept.contains(&format!("{x:?}")))
            .map(|x| x.name.as_str())
            .collect();
        assert!(
            !gone.is_empty(),
            "switching off {} removed nothing",
            family.name()
        );
        for n in &gone {
            let registered = nvml_exporter::collectors::COLLECTORS
                .iter()
                .find(|c| c.metrics.iter().any(|m| m.name == *n))
                .unwrap();
            // Its own families vanish; a parent's family may lose series
            // to a detail switch, but never vanish with it.
            let narrowed = registered.family.is_some()
                && registered.family == family.parent()
                && without.contains(*n);
            assert!(
                registered.family == Some(family) || narrowed,
                "{n} vanished with {}",
                family.name()
            );
        }
        assert!(without.contains("nvidia_gpu_up") && without.contains("nvml_exporter_nvml_up"));
    }
}

#[test]
fn process_memory_series_carry_pid_type_and_mig_instance() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::all()));
    let procs: Vec<_> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_process_memory_used_bytes")
        .collect();
    assert_eq!(procs.len(), 4);
    let xorg = procs.iter().find(|s| s.labels["pid"] == "5003").unwrap();
    assert_eq!(xorg.labels["type"], "graphics");
    assert_eq!(xorg.labels["gpu_instance"], "9");
    assert_eq!(xorg.labels["compute_instance"], "0");
    assert_eq!(xorg.value, "4194304");
    let counts: BTreeMap<_, _> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_processes")
        .map(|s| (s.labels["type"].clone(), s.value.clone()))
        .collect();
    assert_eq!(
        counts,
        [
            ("compute".to_string(), "3".to_string()),
            ("graphics".to_string(), "1".to_string())
        ]
        .into()
    );
}

#[test]
fn mig_instances_have_info_memory_and_activity() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::defaults()));
    let info: Vec<_> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_mig_info")
        .collect();
    // 3g.40gb holds two compute instances, 2g and one 1g one each, the last 1g none.
    assert_eq!(info.len(), 5);
    let bare = info
        .iter()
        .find(|s| s.labels["gpu_instance"] == "10")
        .unwrap();
    assert!(!bare.labels.contains_key("compute_instance") && !bare.labels.contains_key("mig_uuid"));
    assert!(info.iter().all(|s| s
        .labels
        .get("mig_uuid")
        .is_none_or(|u| u.starts_with("MIG-"))));
    let mem: Vec<_> = of_gpu(&samples, "4")
        .filter(|s| s.name == "nvidia_gpu_mig_memory_used_bytes")
        .collect();
    assert_eq!(mem.len(), 4);
    // MIG GPUs report no whole-GPU utilization (NVML does not support it).
    assert!(of_gpu(&samples, "4").all(|s| s.name != "nvidia_gpu_utilization_ratio"));
    assert!(of_gpu(&samples, "0")
        .all(|s| !s.name.starts_with("nvidia_gpu_mig_") || s.name == "nvidia_gpu_mig_enabled"));
}

#[test]
fn compute_mode_is_one_series_on_the_current_mode() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::defaults()));
    let modes: BTreeMap<_, _> = of_gpu(&samples, "0")
        .filter(|s| s.name == "nvidia_gpu_compute_mode")
        .map(|s| (s.labels["mode"].clone(), s.value.clone()))
        .collect();
    assert_eq!(modes.len(), 1, "{modes:?}");
    assert_eq!(modes["default"], "1");
}

#[test]
fn large_counters_are_exact() {
    let samples = parse(&text(&snapshots::dgx_fleet(), FamilySet::defaults()));
    let pcie: BTreeMap<_, _> = of_gpu(&samples, "0")
        .filter(|s| s.name == "nvidia_gpu_pcie_bytes_total")
        .map(|s| (s.labels["direction"].clone(), s.value.clone()))
        .collect();
    assert_eq!(pcie["tx"], "9007199254740993");
    assert_eq!(pcie["rx"], (u64::MAX - 1).to_string());
}

#[test]
fn output_is_deterministic_whatever_order_the_sampler_listed_things_in() {
    let a = snapshots::fully_populated();
    let mut b = a.clone();
    b.gpus.reverse();
    for g in &mut b.gpus {
        g.xids.reverse();
        g.nvml_errors.reverse();
        if let Some(r) = g.readings.as_mut().map(std::sync::Arc::make_mut) {
            r.utilization.reverse();
            r.ecc_errors.reverse();
            r.nvlinks.reverse();
            r.mig.reverse();
            r.power_limits.reverse();
            r.temperature_thresholds.reverse();
        }
    }
    let ctx = ctx(FamilySet::all());
    let (ta, oa) = encode(&a, &ctx, snapshots::now());
    let (tb, ob) = encode(&b, &ctx, snapshots::now());
    assert!(ta == tb, "text output depends on input order");
    assert!(oa == ob, "OpenMetrics output depends on input order");
}

#[test]
fn each_family_appears_once_with_samples_contiguous_and_sorted() {
    let (t, _) = encode(
        &snapshots::large_fleet(),
        &ctx(FamilySet::all()),
        snapshots::now(),
    );
    let body = String::from_utf8(t).unwrap();
    let mut seen = BTreeSet::new();
    let mut current = String::new();
    let mut last_gpu: Option<u32> = None;
    let mut series = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap().to_string();
            assert!(seen.insert(current.clone()), "{current} appears twice");
            last_gpu = None;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name = line.split(['{', ' ']).next().unwrap();
        assert_eq!(name, current, "sample outside its family block");
        assert!(
            series.insert(line.rsplit_once(' ').unwrap().0.to_string()),
            "duplicate series {line}"
        );
        if let Some(g) = line.split("gpu=\"").nth(1) {
            let g: u32 = g.split('"').next().unwrap().parse().unwrap();
            assert!(
                last_gpu.is_none_or(|l| l <= g),
                "gpu order in {current}: {g} after {last_gpu:?}"
            );
            last_gpu = Some(g);
        }
    }
    assert!(seen.len() > 40);
}

#[test]
fn gzip_round_trips_to_the_plain_bytes() {
    let e = render_at(
        &snapshots::large_fleet(),
        &ctx(FamilySet::all()),
        snapshots::now(),
    );
    for (plain, gz) in [
        (&e.text, &e.text_gzip),
        (&e.openmetrics, &e.openmetrics_gzip),
    ] {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .unwrap();
        assert!(out == plain[..], "gzip does not round-trip");
        assert!(
            gz.len() * 5 < plain.len(),
            "{} -> {}: compressed too little",
            plain.len(),
            gz.len()
        );
    }
    assert!(e.openmetrics.ends_with(b"# EOF\n"));
    assert!(!e.text.windows(5).any(|w| w == b"# EOF"));
}

#[test]
fn content_types_name_the_versions() {
    assert_eq!(
        TEXT_CONTENT_TYPE,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(
        OPENMETRICS_CONTENT_TYPE,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
}

/// `--kubernetes.pod-labels` refuses, at start, names the exporter's own
/// series already carry: its list must hold every label the pod
/// attribution and workload families write.
#[test]
fn pod_labels_cannot_take_a_label_of_the_attribution_series() {
    let samples = parse(&text(&snapshots::fully_populated(), FamilySet::all()));
    let attribution = |name: &str| name.contains("_pod_share_") || name.contains("workload");
    let mut ours = BTreeSet::new();
    let mut seen_pod_label = false;
    for s in samples.iter().filter(|s| attribution(&s.name)) {
        for name in s.labels.keys() {
            if name == "team" {
                // The allowlisted pod label fully_populated() carries.
                seen_pod_label = true;
            } else {
                ours.insert(name.clone());
            }
        }
    }
    assert!(seen_pod_label, "fully_populated() has a pod label");
    let missing: Vec<_> = ours
        .iter()
        .filter(|n| !nvml_exporter::kubernetes::RESERVED_LABELS.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "labels of the attribution series a pod label could take: {missing:?}"
    );
}
