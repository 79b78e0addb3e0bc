//! Issue 53: the GPU topology as `nvidia-smi topo -m` shows it, on the real
//! binary with the simulated driver. Each built-in board's matrix, CPU
//! affinity and NUMA affinity equal the real `topo -m` of the same system
//! (`tests/corpus/topo/`); a link taken down on the control socket changes
//! the pair's NVLink count, and the topology is read once, not per poll.

use crate::common;

use std::path::Path;

use common::{samples, Exporter, Sample};

const LINK: &str = "nvidia_gpu_topology_link_info";
const NVLINKS: &str = "nvidia_gpu_topology_nvlinks";
const AFFINITY: &str = "nvidia_gpu_cpu_affinity_info";
/// `common::TEST_INTERVAL` in seconds.
const INTERVAL_S: f64 = 0.2;

/// One GPU row of a real `topo -m`: its GPU x GPU cells, CPU Affinity and
/// NUMA Affinity.
struct Row {
    cells: Vec<String>,
    cpus: String,
    numa: String,
}

/// The rows of a corpus file; `gpus`: the GPU columns it has.
fn capture(file: &str, gpus: usize) -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/topo")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .map(|l| {
            // Tabs as printed (` X ` for the GPU itself, an empty cell
            // before GPU NUMA ID), or the spaces a web page made of them.
            let cells: Vec<String> = if l.contains('\t') {
                l.split('\t').map(|c| c.trim().to_string()).collect()
            } else {
                l.split_whitespace().map(str::to_string).collect()
            };
            let tail: Vec<&String> = cells.iter().rev().filter(|c| !c.is_empty()).collect();
            Row {
                cells: cells[1..=gpus].to_vec(),
                // From the end: GPU NUMA ID, NUMA Affinity, CPU Affinity.
                numa: tail[1].clone(),
                cpus: tail[2].clone(),
            }
        })
        .collect()
}

fn find<'a>(s: &'a [Sample], name: &str, gpu: usize, peer: Option<usize>) -> Option<&'a Sample> {
    s.iter().find(|x| {
        x.name == name
            && x.label("gpu") == Some(&gpu.to_string())
            && x.label("peer_gpu") == peer.map(|p| p.to_string()).as_deref()
    })
}

/// The matrix, affinity and NUMA nodes of `text` equal `rows`, and every
/// GPU of the fleet (`gpus`) has a row to each other one.
fn assert_matches(text: &str, rows: &[Row], gpus: usize) {
    let s = samples(text);
    assert_eq!(
        s.iter().filter(|x| x.name == LINK).count(),
        gpus * (gpus - 1),
        "one link_info series per ordered pair:\n{text}"
    );
    for (i, row) in rows.iter().enumerate() {
        for (j, cell) in row.cells.iter().enumerate() {
            if i == j {
                assert_eq!(cell, "X");
                continue;
            }
            let got = find(&s, LINK, i, Some(j)).unwrap_or_else(|| panic!("no {LINK} {i}->{j}"));
            assert_eq!(
                got.label("link"),
                Some(cell.as_str()),
                "GPU{i} -> GPU{j}: {got:?}"
            );
            assert_eq!(got.value, "1");
        }
        let a = find(&s, AFFINITY, i, None).unwrap_or_else(|| panic!("no {AFFINITY} {i}"));
        assert_eq!(a.label("cpus"), Some(row.cpus.as_str()), "GPU{i}: {a:?}");
        assert_eq!(
            a.label("numa_nodes"),
            Some(row.numa.as_str()),
            "GPU{i}: {a:?}"
        );
    }
}

fn ready(gpus: usize) -> impl Fn(&str) -> bool {
    move |t: &str| samples(t).iter().filter(|x| x.name == LINK).count() == gpus * (gpus - 1)
}

/// NVLink calls the topology family has made so far (`driver_time`).
fn topology_calls(text: &str) -> f64 {
    samples(text)
        .iter()
        .filter(|x| {
            x.name == "nvml_exporter_driver_calls_total" && x.label("family") == Some("topology")
        })
        .map(|x| x.value.parse::<f64>().unwrap())
        .sum()
}

/// When the GPU polled last, oldest (`min`) or newest over the GPUs.
fn last_poll(text: &str, pick: fn(f64, f64) -> f64) -> Option<f64> {
    samples(text)
        .iter()
        .filter(|x| x.name == "nvml_exporter_last_sample_timestamp_seconds")
        .map(|x| x.value.parse::<f64>().unwrap())
        .reduce(pick)
}

/// True once every GPU has polled twice more since `text` was scraped.
fn two_polls_after(text: &str) -> impl Fn(&str) -> bool {
    let newest = last_poll(text, f64::max).unwrap();
    move |t: &str| {
        let mut times = samples(t)
            .into_iter()
            .filter(|x| x.name == "nvml_exporter_last_sample_timestamp_seconds");
        // Two polls: a timestamp past `newest` by more than one interval.
        times.all(|x| x.value.parse::<f64>().unwrap() > newest + INTERVAL_S)
            && last_poll(t, f64::min).is_some()
    }
}

/// DGX H100: NV18 between every pair (all 18 links into the NVSwitches),
/// each GPU's CPUs and NUMA node as the real one; the topology read once,
/// then no call per poll until GPU 5's link 3 goes down: GPU 5 then
/// reaches every peer over 17 links (NV17), the peers still reach it
/// over their 18.
#[test]
fn dgx_h100_is_nv18_everywhere_and_a_link_down_shows_on_the_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &["--collector.topology", "--collector.driver_time"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    let first = e.scrape_until("every pair of the 8 GPUs", ready(8));
    assert_matches(&first, &capture("dgx-h100.tsv", 8), 8);
    let s = samples(&first);
    for i in 0..8 {
        for j in (0..8).filter(|&j| j != i) {
            assert_eq!(
                find(&s, NVLINKS, i, Some(j)).unwrap().value,
                "18",
                "{i}->{j}"
            );
        }
    }
    // No NVML NUMA node on x86 (nvidia-smi: GPU NUMA ID N/A).
    assert!(!first.contains("nvidia_gpu_numa_node{"), "{first}");

    // Several polls later, not one more topology call.
    let calls = topology_calls(&first);
    assert!(calls > 0.0, "{first}");
    let later = e.scrape_until("two more polls of every GPU", two_polls_after(&first));
    assert_eq!(
        topology_calls(&later),
        calls,
        "topology read again with no change:\n{later}"
    );

    common::sim_control(
        &socket,
        &["nvlink-state", "--gpu", "5", "--link", "3", "--up", "false"],
    );
    let text = e.scrape_until("GPU 5 at NV17 to its peers", |t| {
        let s = samples(t);
        (0..8)
            .filter(|&j| j != 5)
            .all(|j| find(&s, NVLINKS, 5, Some(j)).is_some_and(|x| x.value == "17"))
    });
    let s = samples(&text);
    for j in (0..8).filter(|&j| j != 5) {
        assert_eq!(
            find(&s, LINK, 5, Some(j)).unwrap().label("link"),
            Some("NV17")
        );
        assert_eq!(find(&s, NVLINKS, j, Some(5)).unwrap().value, "18", "{j}->5");
    }
    assert_eq!(find(&s, NVLINKS, 0, Some(1)).unwrap().value, "18");
    assert!(
        topology_calls(&text) > calls,
        "the link change read the topology again"
    );
}

/// DGX A100: NV12 between every pair, the NPS4 NUMA nodes of the real one.
#[test]
fn dgx_a100_is_nv12_everywhere_with_its_numa_nodes() {
    let e = Exporter::simulate("dgx-a100", &["--collector.topology"]);
    e.wait_ready();
    let text = e.scrape_until("every pair of the 8 GPUs", ready(8));
    // The capture has rows GPU0-GPU3; every GPU's row holds NV12.
    assert_matches(&text, &capture("dgx-a100.txt", 8), 8);
    let s = samples(&text);
    for i in 0..8 {
        for j in (0..8).filter(|&j| j != i) {
            assert_eq!(
                find(&s, LINK, i, Some(j)).unwrap().label("link"),
                Some("NV12")
            );
        }
    }
    let numa: Vec<_> = (0..8)
        .map(|i| {
            find(&s, AFFINITY, i, None)
                .unwrap()
                .label("numa_nodes")
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(numa, ["3", "3", "1", "1", "7", "7", "5", "5"]);
}

/// A PCIe host: the PCIe levels of the real one (SYS across NUMA nodes,
/// NODE across host bridges, PHB under one), no NVLink series.
#[test]
fn a_pcie_workstation_shows_its_pcie_levels_and_no_nvlinks() {
    let e = Exporter::simulate("pcie-workstation", &["--collector.topology"]);
    e.wait_ready();
    let text = e.scrape_until("every pair of the 5 GPUs", ready(5));
    assert_matches(&text, &capture("pcie-workstation.txt", 5), 5);
    assert!(!text.contains(&format!("\n{NVLINKS}{{")), "{text}");
}

/// One GPU: no pair; the simulated desktop models no affinity, so NVML
/// answers NOT_SUPPORTED and nothing of the family is on `/metrics`.
#[test]
fn one_gpu_without_affinity_has_no_topology_series() {
    let e = Exporter::simulate("workstation", &["--collector.topology"]);
    e.wait_ready();
    let first = e.scrape_until("a poll", |t| last_poll(t, f64::min).is_some());
    let text = e.scrape_until("two more polls", two_polls_after(&first));
    for name in [LINK, NVLINKS, AFFINITY, "nvidia_gpu_numa_node"] {
        assert!(!text.contains(&format!("\n{name}{{")), "{name}:\n{text}");
    }
}

/// A GB200 NVL72 tray: NV18 between its four GPUs, each GPU's own NUMA
/// node (GPU NUMA ID) and its Grace's CPUs and NUMA nodes as the real one.
#[test]
fn a_gb200_tray_shows_each_gpu_numa_node() {
    let e = Exporter::simulate("gb200-nvl72", &["--collector.topology"]);
    e.wait_ready();
    let text = e.scrape_until("every pair of the 4 GPUs", ready(4));
    // The capture has rows GPU0-GPU2.
    assert_matches(&text, &capture("gb200.txt", 4), 4);
    let s = samples(&text);
    let ids: Vec<_> = (0..4)
        .map(|i| {
            find(&s, "nvidia_gpu_numa_node", i, None)
                .unwrap()
                .value
                .clone()
        })
        .collect();
    // The capture's last column, GPU NUMA ID (GPU 3's not in it).
    assert_eq!(ids[..3], ["2", "10", "18"]);
}
