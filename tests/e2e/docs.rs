//! docs/metrics.md lists exactly the families the real binary emits: run it
//! on simulated fleets, with faults injected so the event- and fault-only
//! families appear too, and compare the union with the documented table.

use crate::common;

use crate::metrics_doc;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{sim_control, Exporter};

/// `# TYPE` lines of a text exposition: family name -> type.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

/// Scrapes until every family in `wanted` is present (they follow events
/// and fault deadlines), returning the last scrape's types.
fn scrape_with(e: &Exporter, wanted: &[&str]) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = types(&e.scrape());
        let missing: Vec<_> = wanted.iter().filter(|w| !t.contains_key(**w)).collect();
        if missing.is_empty() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {missing:?}; log:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the union of every scenario's output, compared with docs/metrics.md in one place"
)]
#[test]
fn documented_families_equal_emitted_families() {
    let dir = tempfile::tempdir().unwrap();
    let mut emitted: BTreeMap<String, String> = BTreeMap::new();
    let mut merge = |scenario: &str, t: BTreeMap<String, String>| {
        for (name, kind) in t {
            if let Some(prev) = emitted.insert(name.clone(), kind.clone()) {
                assert_eq!(prev, kind, "{name} changes type ({scenario})");
            }
        }
    };

    // dgx-h100 with every collector and detail switch, an XID, one folded
    // into "other", a hung GPU and a lost one, on the newest driver branch:
    // it defines every field id we read (tests/e2e/drivers.rs holds the
    // "Driver branches" rows of older branches to the binary).
    let socket = dir.path().join("h100.sock");
    let empty_procfs = dir.path().join("proc");
    std::fs::create_dir(&empty_procfs).unwrap();
    // A kernel log with an NVSwitch SXID and a line that is not a record.
    let kmsg = dir.path().join("kmsg");
    std::fs::write(
        &kmsg,
        "4,1,1000000,-;nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28\nnot a record\n",
    )
    .unwrap();
    let kmsg_flag = format!("--path.kmsg={}", kmsg.display());
    // A selection file that selects what the flags do: its status series.
    let selection = dir.path().join("selection.yml");
    std::fs::write(&selection, "version: 1\n").unwrap();
    let config_flag = format!("--config.file={}", selection.display());
    let e = Exporter::simulate_env(
        "dgx-h100",
        &[
            "--collector.process_memory",
            "--collector.nvlink.per-link",
            "--collector.ecc.by-location",
            "--collector.gpm.all-metrics",
            "--collector.mig.memory-free",
            "--collector.mig.bar1",
            "--collector.clocks.applications",
            "--collector.power.instant",
            "--collector.driver_time",
            "--collector.topology",
            "--collector.xid.kmsg",
            &kmsg_flag,
            &config_flag,
            "--collect.stuck-deadline=500ms",
            // No process of the simulated fleet exists in an empty procfs:
            // each is attributed as `unknown`, and counted as a read error.
            "--workloads",
            "--path.procfs",
            empty_procfs.to_str().unwrap(),
        ],
        &[
            ("NVML_SIM_CONTROL", socket.to_str().unwrap()),
            ("NVML_SIM_DRIVER", "580.95.05"),
        ],
    );
    e.wait_ready();
    // A request line no HTTP parser takes: refused, and counted.
    let _ = e.raw(b"NOT HTTP AT ALL\r\n\r\n");
    sim_control(&socket, &["xid", "--gpu", "4", "--code", "13"]);
    // A code outside NVIDIA's range: folded into xid="other".
    sim_control(&socket, &["xid", "--gpu", "4", "--code", "0"]);
    sim_control(&socket, &["hang", "--gpu", "3"]);
    sim_control(&socket, &["lose", "--gpu", "2"]);
    // A process on the idle GPU 7: held, unused.
    sim_control(
        &socket,
        &[
            "process",
            "start",
            "--gpu",
            "7",
            "--name",
            "idle",
            "--memory-mib",
            "100",
        ],
    );
    merge(
        "dgx-h100",
        scrape_with(
            &e,
            &[
                "nvidia_gpu_xid_errors_total",
                "nvml_exporter_xid_events_folded_total",
                "nvml_exporter_stuck_call_seconds",
                "nvml_exporter_nvml_errors_total",
                "nvidia_gpu_mig_activity_ratio",
                "nvidia_gpu_activity_ratio",
                "nvidia_gpu_workload_share_ratio",
                "nvidia_gpu_mig_workload_share_ratio",
                "nvidia_gpu_workload_memory_used_bytes",
                "nvml_exporter_workload_read_errors_total",
                "nvidia_gpu_workload_sm_seconds_total",
                "nvidia_gpu_workload_engine_seconds_total",
                "nvidia_gpu_workload_energy_joules_total",
                "nvidia_gpu_unattributed_energy_joules_total",
                "nvidia_gpu_workload_held_seconds_total",
                "nvidia_gpu_workload_held_idle_seconds",
                "nvml_exporter_http_refusals_total",
                "promhttp_metric_handler_requests_total",
                "nvidia_gpu_recommended_action",
                "nvidia_nvswitch_sxid_errors_total",
                "nvml_exporter_kernel_log_up",
                "nvml_exporter_kernel_log_problems_total",
            ],
        ),
    );
    sim_control(&socket, &["release", "--gpu", "3"]);
    drop(e);

    // A GeForce: fans.
    let e = Exporter::ready("workstation", &["--collector.process_memory"]);
    merge(
        "workstation",
        scrape_with(&e, &["nvidia_gpu_fan_speed_ratio"]),
    );
    drop(e);

    // A vGPU guest: its licence (bare metal supports none).
    let scenario = dir.path().join("vgpu.toml");
    std::fs::write(
        &scenario,
        "name = \"vgpu\"\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nvirtualization_mode = \"vgpu\"\n",
    )
    .unwrap();
    let e = Exporter::simulate(
        scenario.to_str().unwrap(),
        &["--collector.mode.vgpu-license"],
    );
    e.wait_ready();
    merge("vgpu", scrape_with(&e, &["nvidia_gpu_vgpu_licensed"]));
    drop(e);

    // A Volta board: page retirement instead of row remapping.
    let scenario = dir.path().join("volta.toml");
    std::fs::write(
        &scenario,
        "name = \"volta\"\n[[gpu]]\nmodel = \"v100-sxm2-32gb\"\nload = 50\n",
    )
    .unwrap();
    let socket = dir.path().join("volta.sock");
    let e = Exporter::simulate_env(
        scenario.to_str().unwrap(),
        &["--collector.process_memory"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    sim_control(
        &socket,
        &[
            "retire-page",
            "--gpu",
            "0",
            "--cause",
            "dbe",
            "--pending",
            "true",
        ],
    );
    merge(
        "volta",
        scrape_with(
            &e,
            &[
                "nvidia_gpu_retired_pages",
                "nvidia_gpu_retired_pages_pending",
            ],
        ),
    );
    drop(e);

    // A container that may not open GPU 3 and lacks MIG privileges.
    let scenario = dir.path().join("restricted.toml");
    std::fs::write(
        &scenario,
        "name = \"restricted\"\nbase = \"dgx-h100\"\ndenied = [3]\nprivileged = false\n",
    )
    .unwrap();
    // A state file kept: how its writes go. NVSentinel events to a socket
    // no connector listens on: how their delivery goes.
    let state_flag = format!("--state.path={}", dir.path().join("state.json").display());
    let nvsentinel_flag = format!(
        "--nvsentinel.socket={}",
        dir.path().join("nvsentinel.sock").display()
    );
    let state_e = Exporter::ready("dgx-h100", &[state_flag.as_str(), nvsentinel_flag.as_str()]);
    merge(
        "state",
        scrape_with(
            &state_e,
            &[
                "nvml_exporter_state_write_errors_total",
                "nvml_exporter_nvsentinel_events_total",
            ],
        ),
    );
    drop(state_e);
    let e = Exporter::ready(scenario.to_str().unwrap(), &[]);
    merge(
        "restricted",
        scrape_with(
            &e,
            &[
                "nvml_exporter_gpu_access_denied",
                "nvml_exporter_mig_privileged",
            ],
        ),
    );
    drop(e);

    // A GB200 NVL72 tray: module and memory power, T.Limit margins, power
    // smoothing, the NVLink partition and (after a fault) a fabric health
    // condition, with the per-link switch NVLink5 bit error rates, and
    // with the c2c switch the Grace links.
    let socket = dir.path().join("gb200.sock");
    let e = Exporter::simulate_env(
        "gb200-nvl72",
        &[
            "--collector.nvlink.per-link",
            "--collector.c2c",
            "--collector.topology",
        ],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    sim_control(
        &socket,
        &[
            "fabric-health",
            "--gpu",
            "1",
            "--degraded-bandwidth",
            "true",
        ],
    );
    merge(
        "gb200-nvl72",
        scrape_with(
            &e,
            &[
                "nvidia_gpu_c2c_link_errors_total",
                "nvidia_gpu_c2c_link_up",
                "nvidia_gpu_fabric_health_issue",
                "nvidia_gpu_fabric_health",
                "nvidia_gpu_fabric_info",
                "nvidia_gpu_memory_power_usage_watts",
                "nvidia_gpu_module_power_limit_watts",
                "nvidia_gpu_module_power_usage_watts",
                "nvidia_gpu_nvlink_link_bit_error_ratio",
                "nvidia_gpu_power_smoothing_lifetime_remaining_ratio",
                "nvidia_gpu_temperature_margin_celsius",
                "nvidia_gpu_temperature_margin_threshold_celsius",
            ],
        ),
    );
    drop(e);

    // Pod attribution families need a kubelet; tests/test_pod_attribution.py
    // holds those rows to the binary's output against a fake one.
    let documented: BTreeMap<String, String> = metrics_doc::documented_families()
        .into_iter()
        .filter(|f| !f.labels.contains("Only with --kubernetes"))
        .map(|f| (f.name, f.kind))
        .collect();
    let emitted_names: BTreeSet<_> = emitted.keys().collect();
    let documented_names: BTreeSet<_> = documented.keys().collect();
    let undocumented: Vec<_> = emitted_names.difference(&documented_names).collect();
    let never_emitted: Vec<_> = documented_names.difference(&emitted_names).collect();
    assert!(
        undocumented.is_empty() && never_emitted.is_empty(),
        "docs/metrics.md and the binary disagree.\n\
         emitted but not documented: {undocumented:?}\n\
         documented but never emitted: {never_emitted:?}"
    );
    for (name, kind) in &emitted {
        assert_eq!(
            &documented[name], kind,
            "{name}: documented type differs from the exposition"
        );
    }
}
