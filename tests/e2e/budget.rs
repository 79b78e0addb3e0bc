//! The series budget of the default set, on the real binary: every built-in
//! simulated fleet, scraped over HTTP, stays within the series per GPU that
//! docs/metrics.md promises ("Default set and switches"), and each detail
//! switch adds its own families without changing the default ones, whose
//! per-GPU sums agree with the detail in the same scrape.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{samples, Exporter, Sample};

/// At most this many series per GPU by default: the series of a GPU and of
/// its MIG instances (those with a `gpu` label), divided by the GPUs.
const BUDGET: u32 = 100;
/// At most this many node-level series (no `gpu` label: build, driver and
/// NVML state, the process and HTTP self-metrics every client_golang
/// exporter serves). They do not grow with the GPUs, so they are held to a
/// budget of their own instead of being spread over however many GPUs a
/// node has (a 4-GPU GB200 tray would pay twice what an 8-GPU HGX pays).
const NODE_BUDGET: usize = 16;
/// `large` has 7 MIG instances on each GPU; each instance has series of its
/// own (identity, memory, activity).
const BUDGET_LARGE: u32 = 130;

const SCENARIOS: &[(&str, u32)] = &[
    ("dgx-h100", BUDGET),
    ("dgx-a100", BUDGET),
    ("workstation", BUDGET),
    ("pcie-workstation", BUDGET),
    ("faults", BUDGET),
    ("large", BUDGET_LARGE),
    ("hgx-h200", BUDGET),
    ("hgx-b200", BUDGET),
    ("gb200-nvl72", BUDGET),
    ("rtx-pro-6000", BUDGET),
];

/// GPU series, node-level series and GPUs (one `nvidia_gpu_info` each) of
/// one scrape.
fn count(text: &str) -> (usize, usize, usize) {
    let lines = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let (mut series, mut node, mut gpus) = (0, 0, 0);
    for l in lines {
        let labels = l.split_once('{').map_or("", |(_, rest)| rest);
        if labels.starts_with("gpu=\"") || labels.contains(",gpu=\"") {
            series += 1;
        } else {
            node += 1;
        }
        if l.starts_with("nvidia_gpu_info{") {
            gpus += 1;
        }
    }
    (series, node, gpus)
}

/// Every GPU that can have GPM activity has it: GPM needs two polls, and a
/// budget taken before it arrives would be a budget of a partial scrape.
fn complete(scenario: &str, text: &str) -> bool {
    let has = |family: &str, gpu: u32| text.contains(&format!("\n{family}{{gpu=\"{gpu}\""));
    match scenario {
        "dgx-h100" => common::dgx_h100_gpm_complete(text),
        "large" => (0..16).all(|g| has("nvidia_gpu_mig_activity_ratio", g)),
        "dgx-a100" | "workstation" | "pcie-workstation" => {
            (0..1).all(|g| has("nvidia_gpu_temperature_celsius", g))
        }
        // The fault timeline loses and hangs GPUs: their measurements are
        // withdrawn, so wait for whole-GPU activity on the GPU that stays
        // healthy throughout.
        "faults" => has("nvidia_gpu_activity_ratio", 7),
        // GPU 0 in MIG mode (activity per instance), the others whole.
        "hgx-h200" | "hgx-b200" => {
            has("nvidia_gpu_mig_activity_ratio", 0)
                && (1..8).all(|g| has("nvidia_gpu_activity_ratio", g))
        }
        "gb200-nvl72" => (0..4).all(|g| has("nvidia_gpu_activity_ratio", g)),
        "rtx-pro-6000" => {
            (0..2).all(|g| has("nvidia_gpu_mig_activity_ratio", g))
                && (2..4).all(|g| has("nvidia_gpu_activity_ratio", g))
        }
        _ => unreachable!("{scenario}"),
    }
}

#[test]
fn default_set_stays_within_the_series_budget_on_every_builtin_scenario() {
    // Every built-in scenario has its budget here (a new one must be added).
    for name in common::sim_listing("scenarios") {
        assert!(
            SCENARIOS.iter().any(|(s, _)| *s == name),
            "built-in scenario {name} has no budget in SCENARIOS"
        );
    }
    let mut report = Vec::new();
    let mut over = Vec::new();
    for &(scenario, budget) in SCENARIOS {
        let e = Exporter::ready(scenario, &[]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !complete(scenario, &e.scrape()) {
            assert!(
                Instant::now() < deadline,
                "{scenario}: never complete; log:\n{}",
                e.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Then over a dozen polls (200 ms each): the budget holds at every
        // scrape, not just one (the faults timeline moves meanwhile).
        let mut worst = (0, 1);
        let mut worst_node = 0;
        let until = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < until {
            let (series, node, gpus) = count(&e.scrape());
            assert!(gpus > 0, "{scenario}: no GPUs");
            if series * worst.1 > worst.0 * gpus {
                worst = (series, gpus);
            }
            worst_node = worst_node.max(node);
            std::thread::sleep(Duration::from_millis(100));
        }
        let (series, gpus) = worst;
        let per_gpu = series as f64 / gpus as f64;
        report.push(format!(
            "{scenario:12} {series:5} GPU series {gpus:3} GPUs {per_gpu:6.1} per GPU (budget {budget}) \
             + {worst_node} node-level (budget {NODE_BUDGET})"
        ));
        if series > budget as usize * gpus {
            over.push(format!(
                "{scenario}: {per_gpu:.1} series per GPU > {budget}"
            ));
        }
        if worst_node > NODE_BUDGET {
            over.push(format!(
                "{scenario}: {worst_node} node-level series > {NODE_BUDGET}"
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        over.is_empty(),
        "over budget:\n{}\n\n{}",
        over.join("\n"),
        report.join("\n")
    );
}

fn by_family(all: &[Sample]) -> BTreeMap<&str, Vec<&Sample>> {
    let mut m: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in all {
        m.entry(s.name.as_str()).or_default().push(s);
    }
    m
}

/// Label names of a family's series, `gpu` and `uuid` included.
fn label_names(series: &[&Sample]) -> BTreeSet<String> {
    series
        .iter()
        .flat_map(|s| s.labels.iter().map(|(k, _)| k.clone()))
        .collect()
}

fn value(s: &Sample) -> f64 {
    s.value.parse().unwrap_or_else(|_| panic!("{s:?}"))
}

const DETAIL: &[&str] = &[
    "nvidia_gpu_nvlink_link_up",
    "nvidia_gpu_nvlink_link_errors_total",
    "nvidia_gpu_nvlink_link_bytes_total",
    "nvidia_gpu_ecc_location_errors_total",
    "nvidia_gpu_mig_memory_free_bytes",
];

/// Default families whose label names must not depend on a switch.
const DEFAULT_LABELS: &[(&str, &[&str])] = &[
    ("nvidia_gpu_nvlink_links", &["gpu", "uuid", "state"]),
    ("nvidia_gpu_nvlink_errors_total", &["gpu", "uuid", "error"]),
    (
        "nvidia_gpu_nvlink_bytes_total",
        &["gpu", "uuid", "direction"],
    ),
    (
        "nvidia_gpu_ecc_errors_total",
        &["gpu", "uuid", "error", "scope"],
    ),
    ("nvidia_gpu_activity_ratio", &["gpu", "uuid", "metric"]),
];

fn gpm_metrics(fams: &BTreeMap<&str, Vec<&Sample>>, family: &str) -> BTreeSet<String> {
    fams[family]
        .iter()
        .map(|s| s.label("metric").unwrap().to_string())
        .collect()
}

#[test]
fn detail_switches_add_families_and_agree_with_the_default_aggregates() {
    let plain = Exporter::ready("dgx-h100", &[]);
    // One switch through the environment, as a DaemonSet would set it.
    let detailed = Exporter::simulate_env(
        "dgx-h100",
        &[
            "--collector.ecc.by-location",
            "--collector.gpm.all-metrics",
            "--collector.mig.memory-free",
        ],
        &[("NVML_EXPORTER_COLLECTOR_NVLINK_PER_LINK", "true")],
    );
    detailed.wait_ready();
    let settle = |e: &Exporter| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let t = e.scrape();
            if common::dgx_h100_gpm_complete(&t) {
                return t;
            }
            assert!(Instant::now() < deadline, "no GPM; log:\n{}", e.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let plain_text = settle(&plain);
    let detailed_text = settle(&detailed);
    let plain_all = samples(&plain_text);
    let detailed_all = samples(&detailed_text);
    let plain_fams = by_family(&plain_all);
    let fams = by_family(&detailed_all);

    for family in DETAIL {
        assert!(!plain_fams.contains_key(family), "{family} on by default");
        assert!(
            fams.contains_key(family),
            "{family} missing with its switch"
        );
    }
    for (family, labels) in DEFAULT_LABELS {
        let want: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        assert_eq!(
            label_names(&plain_fams[family]),
            want,
            "{family} by default"
        );
        assert_eq!(
            label_names(&fams[family]),
            want,
            "{family} with the detail switches"
        );
    }

    // GPM: four metrics by default, all fifteen with the switch (the tensor
    // pipe by instruction kind among them), per GPU and per MIG instance
    // alike, except that dgx-h100's instances (1g to 3g)
    // have no optical flow engine, so no nvofa.
    let four: BTreeSet<String> = ["graphics", "sm", "tensor", "dram"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for (family, count) in [
        ("nvidia_gpu_activity_ratio", 15),
        ("nvidia_gpu_mig_activity_ratio", 14),
    ] {
        assert_eq!(gpm_metrics(&plain_fams, family), four, "{family}");
        let all = gpm_metrics(&fams, family);
        assert_eq!(all.len(), count, "{family}: {all:?}");
        assert!(all.is_superset(&four));
        assert_eq!(all.contains("nvofa"), count == 15, "{family}: {all:?}");
    }

    // In one scrape, the per-GPU sums equal the sums of the per-link
    // series, and the link counts the per-link states.
    let sum_by = |family: &str, key: &str| -> BTreeMap<(String, String), f64> {
        let mut m = BTreeMap::new();
        for s in &fams[family] {
            let k = (
                s.label("gpu").unwrap().to_string(),
                s.label(key).unwrap().to_string(),
            );
            *m.entry(k).or_insert(0.0) += value(s);
        }
        m
    };
    for (total, per_link, key) in [
        (
            "nvidia_gpu_nvlink_errors_total",
            "nvidia_gpu_nvlink_link_errors_total",
            "error",
        ),
        (
            "nvidia_gpu_nvlink_bytes_total",
            "nvidia_gpu_nvlink_link_bytes_total",
            "direction",
        ),
    ] {
        let totals = sum_by(total, key);
        let links = sum_by(per_link, key);
        assert_eq!(
            totals.keys().collect::<Vec<_>>(),
            links.keys().collect::<Vec<_>>(),
            "{total}"
        );
        for (k, v) in &totals {
            let want = links[k];
            assert!(
                (v - want).abs() <= want.abs() * 1e-12,
                "{total}{k:?} = {v}, links sum to {want}"
            );
        }
        assert!(totals.len() >= 8 * 2, "{total}: {totals:?}");
    }
    let mut states: BTreeMap<(String, String), f64> = BTreeMap::new();
    for s in &fams["nvidia_gpu_nvlink_link_up"] {
        let state = if s.value == "1" { "up" } else { "down" };
        *states
            .entry((s.label("gpu").unwrap().to_string(), state.to_string()))
            .or_insert(0.0) += 1.0;
    }
    for s in &fams["nvidia_gpu_nvlink_links"] {
        let k = (
            s.label("gpu").unwrap().to_string(),
            s.label("state").unwrap().to_string(),
        );
        assert_eq!(value(s), states.get(&k).copied().unwrap_or(0.0), "{k:?}");
    }
    // 18 links per H100, all up in the simulated fleet.
    let up: f64 = fams["nvidia_gpu_nvlink_links"]
        .iter()
        .filter(|s| s.label("state") == Some("up"))
        .map(|s| value(s))
        .sum();
    assert_eq!(up, 8.0 * 18.0);

    // ECC: the detail has no "all" location, and the totals are per error
    // and scope only.
    assert!(fams["nvidia_gpu_ecc_location_errors_total"]
        .iter()
        .all(|s| s.label("location").is_some_and(|l| l != "all")));
    assert_eq!(fams["nvidia_gpu_ecc_errors_total"].len(), 8 * 4);
}
