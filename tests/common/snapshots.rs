//! Hand-built snapshots for the exposition tests: what the sampler would
//! publish for a DGX-like fleet (MIG, a lost GPU, a hung GPU), a
//! workstation, and a large fleet. Every field of the snapshot is set
//! somewhere in `dgx_fleet`, so it emits every metric family.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nvml_exporter::snapshot::*;

/// The render time the fixtures are built around.
pub fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_795_000_000_250)
}

fn ago(secs: f64) -> SystemTime {
    now() - Duration::from_secs_f64(secs)
}

pub fn h100_identity(i: u32) -> GpuIdentity {
    GpuIdentity {
        name: Some("NVIDIA H100 80GB HBM3".into()),
        brand: Some("nvidia".into()),
        architecture: Some("hopper".into()),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + i * 0x10)),
        serial: Some(format!("165322000{i:04}")),
        vbios_version: Some("96.00.74.00.01".into()),
        compute_capability: Some("9.0".into()),
        board_part_number: Some("692-2G520-0200-000".into()),
        minor_number: Some(i),
        platform: None,
    }
}

pub fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-1111-2222-3333-444455556666")
}

fn process(pid: u32, name: &str, bytes: u64, mig: Option<(u32, u32)>) -> Process {
    Process {
        pid,
        name: Some(name.into()),
        used_memory_bytes: Some(bytes),
        gpu_instance: mig.map(|m| m.0),
        compute_instance: mig.map(|m| m.1),
    }
}

/// Readings of a busy H100 with every optional reading present.
#[allow(
    clippy::too_many_lines,
    reason = "a fixture: every reading of a busy H100 in one literal"
)]
pub fn h100_readings(i: u32) -> GpuReadings {
    let f = f64::from(i);
    GpuReadings {
        carried: vec![],
        utilization: Engine::ALL
            .iter()
            .enumerate()
            .map(|(k, &e)| (e, (k as f64 * 0.13 + f * 0.01) % 1.0))
            .collect(),
        engine_activity: Vec::new(),
        activity: GpmMetric::ALL
            .iter()
            .enumerate()
            .map(|(k, &m)| (m, (k as f64 * 0.07 + 0.05) % 1.0))
            .collect(),
        memory: Some(Memory {
            total_bytes: 85_520_809_984,
            used_bytes: 40_000_000_000 + u64::from(i) * 1_000_000,
            free_bytes: 45_000_000_000 - u64::from(i) * 1_000_000,
            reserved_bytes: Some(520_809_984),
        }),
        bar1: Some(Bar1Memory {
            total_bytes: 137_438_953_472,
            used_bytes: 5_242_880,
        }),
        temperatures: vec![(Sensor::Gpu, 41.0 + f), (Sensor::Memory, 49.0 + f)],
        temperature_thresholds: Threshold::ALL
            .iter()
            .enumerate()
            .map(|(k, &t)| (t, 80.0 + k as f64))
            .collect(),
        temperature_margin: Some(59.0 - f),
        temperature_margin_thresholds: vec![
            (Threshold::Shutdown, -8.0),
            (Threshold::Slowdown, -2.0),
            (Threshold::MemoryMax, 0.0),
            (Threshold::GpuMax, 0.0),
        ],
        fan_speeds: vec![],
        power_usage_watts: Some(312.625 + f),
        power_instant_watts: Some(318.25 + f),
        power_limits: vec![
            (PowerLimit::Enforced, 700.0),
            (PowerLimit::Management, 700.0),
            (PowerLimit::Default, 700.0),
            (PowerLimit::Min, 200.0),
            (PowerLimit::Max, 700.0),
        ],
        energy_joules: Some(123_456_789.123 + f),
        module_power_watts: Some(1_912.5 + f),
        module_power_limits: vec![
            (PowerLimit::Enforced, 2_900.0),
            (PowerLimit::Management, 2_900.0),
            (PowerLimit::Default, 2_900.0),
            (PowerLimit::Min, 500.0),
            (PowerLimit::Max, 2_900.0),
        ],
        memory_power_watts: Some(46.56),
        power_smoothing_lifetime_remaining: Some(0.93),
        performance_state: Some(0),
        clocks_hertz: Clock::ALL.iter().map(|&c| (c, 1_755_000_000.0)).collect(),
        max_clocks_hertz: Clock::ALL.iter().map(|&c| (c, 1_980_000_000.0)).collect(),
        applications_clocks_hertz: vec![
            (Clock::Sm, 1_755_000_000.0),
            (Clock::Memory, 2_619_000_000.0),
        ],
        throttle_active: ThrottleReason::ALL
            .iter()
            .map(|&r| (r, r == ThrottleReason::SwPowerCap))
            .collect(),
        throttle_seconds: vec![
            (ThrottleReason::SwPowerCap, 12.5),
            (ThrottleReason::HwSlowdown, 0.0),
            (ThrottleReason::SwThermal, 0.001),
        ],
        pcie: Pcie {
            link_generation_current: Some(5),
            link_generation_max: Some(5),
            link_width_current: Some(16),
            link_width_max: Some(16),
            replay_errors: Some(u64::from(i)),
            tx_bytes: Some(9_007_199_254_740_993),
            rx_bytes: Some(u64::MAX - 1),
        },
        persistence_mode: Some(true),
        display_active: Some(false),
        compute_mode: Some(ComputeMode::Default),
        vgpu_license: Some(VgpuLicense::Supported(Some(true))),
        ecc_mode: Some(ModePair {
            current: true,
            pending: true,
        }),
        mig_mode: Some(ModePair {
            current: false,
            pending: false,
        }),
        mig_privileged: None,
        ecc_errors: EccError::ALL
            .iter()
            .flat_map(|&error| {
                EccScope::ALL.iter().flat_map(move |&scope| {
                    EccLocation::ALL.iter().map(move |&location| EccCount {
                        error,
                        scope,
                        location,
                        count: if error == EccError::Corrected { 3 } else { 0 },
                    })
                })
            })
            .collect(),
        retired_pages: vec![
            (RetirementCause::SingleBitEcc, 0),
            (RetirementCause::DoubleBitEcc, 0),
        ],
        retired_pages_pending: Some(false),
        remapped_rows: Some(RemappedRows {
            correctable: 1,
            uncorrectable: 0,
            pending: false,
            failed: false,
        }),
        remapper_banks: SpareRows::ALL
            .iter()
            .map(|&level| {
                (
                    level,
                    if level == SpareRows::Max {
                        2559
                    } else {
                        u64::from(level == SpareRows::High)
                    },
                )
            })
            .collect(),
        sram_threshold_exceeded: Some(false),
        recovery_action: Some(0),
        fabric: Some(Fabric {
            state: 3,
            registered: true,
            health_summary: Some(FabricHealth::Healthy),
            // One condition holds (exported), the others do not (absent).
            health_issues: FabricIssue::ALL
                .iter()
                .map(|&issue| (issue, issue == FabricIssue::DegradedBandwidth))
                .collect(),
            partition: Some(FabricPartition {
                clique_id: 32766,
                cluster_uuid: "5a1b2c3d-0000-4000-8000-00000000cafe".into(),
            }),
        }),
        nvlinks: (0..18)
            .map(|link| NvLink {
                link,
                up: link != 17,
                errors: NvLinkError::ALL
                    .iter()
                    .map(|&e| (e, u64::from(link % 3)))
                    .collect(),
                bit_error_rates: vec![(NvLinkBer::Effective, 1.5e-254), (NvLinkBer::Symbol, 3e-9)],
                tx_bytes: Some(1_000_000_000_000 * u64::from(link + 1)),
                rx_bytes: Some(2_000_000_000_000 * u64::from(link + 1)),
            })
            .collect(),
        c2c_links: vec![],
        topology: None,
        // Each link's own traffic, as with nvlink.per-link.
        nvlink_traffic: None,
        compute_processes: Some(vec![
            process(4242, "python3", 30_000_000_000, None),
            process(4243, "weird \"name\" \\ with\nnewline ünï", 1_048_576, None),
        ]),
        graphics_processes: Some(vec![]),
        mig: vec![],
        usage: None,
    }
}

fn mig_readings(i: u32) -> GpuReadings {
    let mut r = h100_readings(i);
    // NVML reports no engine utilization on a MIG-enabled GPU.
    r.utilization.clear();
    r.mig_mode = Some(ModePair {
        current: true,
        pending: true,
    });
    r.mig_privileged = Some(true);
    let profiles = [
        (1, "3g.40gb", 2),
        (2, "2g.20gb", 1),
        (9, "1g.10gb", 1),
        (10, "1g.10gb", 0),
    ];
    r.mig = profiles
        .iter()
        .map(|&(gi, profile, cis)| MigGpuInstance {
            gpu_instance: gi,
            profile: profile.into(),
            size: None,
            bar1: Some(Bar1Memory {
                total_bytes: 16_777_216 * u64::from(cis + 1),
                used_bytes: 4_194_304,
            }),
            memory: Some(MigMemory {
                total_bytes: 10_468_982_784,
                used_bytes: 13_631_488,
                free_bytes: 10_455_351_296,
                reserved_bytes: None,
            }),
            engine_activity: Vec::new(),
            activity: vec![
                (GpmMetric::Sm, 0.25),
                (GpmMetric::Tensor, 0.125),
                (GpmMetric::Dram, 0.5),
            ],
            compute_instances: (0..cis)
                .map(|ci| MigComputeInstance {
                    compute_instance: ci,
                    mig_uuid: format!("MIG-{i:04x}{gi:04x}-{ci:04x}-5555-6666-777788889999"),
                })
                .collect(),
        })
        .collect();
    r.compute_processes = Some(vec![
        process(5000, "trainer", 8_000_000_000, Some((1, 0))),
        process(5001, "trainer", 4_000_000_000, Some((1, 1))),
        process(5002, "infer", 2_000_000_000, Some((2, 0))),
    ]);
    r.graphics_processes = Some(vec![process(5003, "Xorg", 4_194_304, Some((9, 0)))]);
    r
}

fn gpu(i: u32, health: Health, readings: Option<GpuReadings>) -> GpuState {
    GpuState {
        index: i,
        uuid: uuid(i),
        identity: h100_identity(i),
        health,
        last_sample: Some(ago(1.0 + f64::from(i) * 0.001)),
        sample_duration: Some(Duration::from_micros(1500 + u64::from(i))),
        stuck_call: None,
        readings: readings.map(std::sync::Arc::new),
        xids: vec![],
        xid_other: None,
        nvml_errors: vec![],
        driver_time: vec![],
        pods: vec![],
        evidence: None,
        verdicts: vec![],
    }
}

/// Eight H100s: 0-3 whole, 4-5 in MIG mode, 6 lost (fell off the bus after
/// an XID 79), 7 hung in a power call.
pub fn dgx_fleet() -> Snapshot {
    let mut gpus: Vec<GpuState> = (0..4)
        .map(|i| gpu(i, Health::Up, Some(h100_readings(i))))
        .collect();
    gpus.extend((4..6).map(|i| gpu(i, Health::Up, Some(mig_readings(i)))));

    gpus[4].xids = vec![
        XidCount {
            xid: 13,
            gpu_instance: Some(1),
            compute_instance: Some(0),
            count: 2,
            last_seen: ago(300.0),
        },
        XidCount {
            xid: 13,
            gpu_instance: Some(2),
            compute_instance: Some(0),
            count: 1,
            last_seen: ago(60.0),
        },
        XidCount {
            xid: 31,
            gpu_instance: None,
            compute_instance: None,
            count: 1,
            last_seen: ago(3600.0),
        },
    ];

    let mut lost = gpu(6, Health::Lost, None);
    lost.identity.serial = None; // also exercises an absent info label
    lost.xids = vec![XidCount {
        xid: 79,
        gpu_instance: None,
        compute_instance: None,
        count: 1,
        last_seen: ago(30.0),
    }];
    lost.nvml_errors = vec![
        NvmlErrorCount {
            family: "power",
            error: "gpu_is_lost".into(),
            count: 12,
        },
        NvmlErrorCount {
            family: "memory",
            error: "gpu_is_lost".into(),
            count: 12,
        },
    ];
    gpus.push(lost);

    let mut hung = gpu(7, Health::Hung, None);
    hung.stuck_call = Some(StuckCall {
        family: "power",
        since: ago(42.5),
    });
    hung.nvml_errors = vec![NvmlErrorCount {
        family: "ecc",
        error: "timeout".into(),
        count: 1,
    }];
    hung.driver_time = vec![
        DriverTimeCount {
            family: "field_values",
            calls: 40,
            seconds: 0.12,
        },
        DriverTimeCount {
            family: "power",
            calls: 81,
            seconds: 5.004,
        },
    ];
    gpus.push(hung);

    Snapshot {
        nvml_up: true,
        ready: true,
        driver: Some(DriverInfo {
            driver_version: "550.90.07".into(),
            nvml_version: "12.550.90.07".into(),
            cuda_driver_version: Some("12.4".into()),
        }),
        interval: Duration::from_secs(5),
        gpus,
        kubernetes: None,
        workloads: None,
        process: None,
        http: None,
        kernel_log: None,
        config: None,
        xid_last_wait: None,
        state_write_errors: None,
        nvsentinel: None,
    }
}

/// `dgx_fleet` plus what no DGX has (fans): every field of the snapshot is
/// set on some GPU, so every metric family is emitted.
#[allow(
    clippy::too_many_lines,
    reason = "a fixture: every field of the snapshot set on some GPU, in one place"
)]
pub fn fully_populated() -> Snapshot {
    let mut s = dgx_fleet();
    s.state_write_errors = Some(2);
    s.nvsentinel = Some(NvsentinelCounts {
        sent: 12,
        failed: 3,
        dropped: 0,
    });
    s.process = Some(ProcessStats {
        cpu_seconds: 12.5,
        resident_memory_bytes: Some(9 << 20),
        virtual_memory_bytes: Some(900 << 20),
        start_time_seconds: Some(1_700_000_000.25),
        open_fds: Some(14),
        max_fds: Some(1024),
    });
    s.config = Some(ConfigStatus {
        last_reload_successful: false,
        last_success: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        reloads: 2,
        failures: 1,
        dcgm_not_served: 3,
    });
    s.http = Some(HttpCounts {
        scrapes: vec![(200, 40), (503, 1)],
        refusals: vec![
            (HttpRefusal::Unauthorized, 3),
            (HttpRefusal::ConnectionLimit, 1),
        ],
    });
    if let Some(r) = s.gpus[0].readings.as_mut().map(std::sync::Arc::make_mut) {
        r.fan_speeds = vec![(0, 0.45), (1, 0.5)];
    }
    set_grace_rack_and_topology(&mut s);
    // Pod attribution: a GPU shared by two containers and a MIG device,
    // each pod with an allowlisted label (--kubernetes.pod-labels).
    let holder =
        |pod: &str, gpu_instance: Option<u32>, compute_instance: Option<u32>| PodAttribution {
            namespace: "ml".into(),
            pod: pod.into(),
            container: "train".into(),
            gpu_instance,
            compute_instance,
            labels: vec![("team", "vision".into())],
        };
    s.gpus[2].pods = vec![holder("a", None, None), holder("b", None, None)];
    // --kubernetes.pod-uid: the pod's UID with its labels, in name order.
    for (p, uid) in s.gpus[2].pods.iter_mut().zip(["uid-a", "uid-b"]) {
        p.labels.insert(0, ("pod_uid", uid.into()));
    }
    // Every GPU judged: most need nothing, GPU 2 (lost, XID 79) a reboot.
    for g in &mut s.gpus {
        g.verdicts = vec![Verdict {
            gpu_instance: None,
            compute_instance: None,
            action: Action::None,
            reason: "none",
        }];
    }
    s.gpus[2].verdicts[0].action = Action::Reboot;
    s.gpus[2].verdicts[0].reason = "xid_restart_bm";
    // The kernel log read with --collector.xid.kmsg: SXIDs of one switch,
    // one of them folded, and a few problems.
    s.kernel_log = Some(KernelLogStatus {
        unnamed_evidence: None,
        up: true,
        problems: vec![
            (KernelLogProblem::Malformed, 2),
            (KernelLogProblem::UnknownGpu, 1),
        ],
        sxids: vec![
            SxidCount {
                switch: "0000:c3:00.0".into(),
                sxid: Some(20009),
                count: 3,
            },
            SxidCount {
                switch: "0000:c3:00.0".into(),
                sxid: None,
                count: 1,
            },
        ],
        // A GPU NVML cannot name, whose XID 79 the log gives.
        unnamed_gpus: vec![UnnamedGpuVerdict {
            pci_bus_id: "00000000:E1:00.0".into(),
            action: Action::Reboot,
            reason: "xid_restart_bm",
        }],
    });
    // The XID event thread, waiting on NVML.
    s.xid_last_wait = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    // XIDs folded into `other`: an out-of-range code and one over the limit.
    s.gpus[4].xid_other = Some(XidOther {
        out_of_range: 1,
        over_limit: 3,
        last_seen: ago(120.0),
    });
    let mig_gpu = s
        .gpus
        .iter_mut()
        .find(|g| g.readings.as_ref().is_some_and(|r| !r.mig.is_empty()))
        .expect("dgx_fleet has a MIG GPU");
    let gi = &mig_gpu.readings.as_ref().expect("readings").mig[0];
    let place = (
        gi.gpu_instance,
        gi.compute_instances.first().map(|c| c.compute_instance),
    );
    mig_gpu.pods = vec![holder("c", Some(place.0), place.1)];
    // Verdicts: the MIG GPU's instance has its own (an application fault).
    mig_gpu.verdicts.push(Verdict {
        gpu_instance: Some(place.0),
        compute_instance: place.1,
        action: Action::RestartApp,
        reason: "xid_restart_app",
    });
    // One MIG GPU seen without MIG privileges, and a GPU this process may
    // not open.
    if let Some(r) = mig_gpu.readings.as_mut().map(std::sync::Arc::make_mut) {
        r.mig_privileged = Some(false);
    }
    let mut denied = gpu(8, Health::Denied, None);
    denied.uuid = String::new();
    denied.identity = GpuIdentity::default();
    denied.last_sample = None;
    denied.sample_duration = None;
    s.gpus.push(denied);
    s.kubernetes = Some(KubernetesStatus {
        up: true,
        refresh_errors: 1,
        last_refresh: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)),
        claimed_devices: vec![
            (ClaimedDeviceState::Resolved, 2),
            (ClaimedDeviceState::Unresolved, 0),
            (ClaimedDeviceState::OtherDriver, 1),
        ],
        read_errors: vec![(KubernetesSource::Cdi, KubernetesReadError::Malformed, 1)],
    });
    // Per-process use as sampled on GPU 3, with entries left out.
    if let Some(r) = s.gpus[3].readings.as_mut().map(std::sync::Arc::make_mut) {
        r.usage = Some(UsageReadings {
            epoch: 1,
            pids: Some(vec![]),
            dropped: UsageDrop::ALL.iter().map(|d| (*d, 2)).collect(),
            ..UsageReadings::default()
        });
    }
    // Workload attribution: every label of every kind appears somewhere.
    let mig_gpu_index = s
        .gpus
        .iter()
        .find(|g| g.readings.as_ref().is_some_and(|r| !r.mig.is_empty()))
        .map(|g| g.index)
        .expect("dgx_fleet has a MIG GPU");
    let workload = |kind: WorkloadKind| Workload {
        uid: Some(1001),
        user: Some("alice".into()),
        ..Workload::of(kind)
    };
    let holding =
        |gpu: u32, mig: Option<(u32, u32)>, share: f64, workload: Workload| WorkloadHolding {
            gpu,
            gpu_instance: mig.map(|m| m.0),
            compute_instance: mig.map(|m| m.1),
            workload,
            share,
            memory_used_bytes: Some(1 << 30),
        };
    let workloads = [
        Workload {
            slurm_job: Some("4242".into()),
            slurm_step: Some("0".into()),
            ..workload(WorkloadKind::Slurm)
        },
        Workload {
            container_id: Some("3f4e8a1b2c9d".into()),
            pod_uid: Some("8a1c7b52-3d3e-4c4e-9f1a-0c0ffee00001".into()),
            namespace: Some("ml".into()),
            pod: Some("trainer-0".into()),
            container: Some("main".into()),
            pod_labels: vec![("team", "vision".into())],
            ..workload(WorkloadKind::Kubernetes)
        },
        Workload {
            container_id: Some("0123456789ab".into()),
            container_name: Some("trainer".into()),
            ..workload(WorkloadKind::Docker)
        },
        Workload {
            systemd_unit: Some("inference.service".into()),
            ..workload(WorkloadKind::Systemd)
        },
        Workload {
            cgroup: Some("/lxc/builder".into()),
            ..workload(WorkloadKind::Other)
        },
    ];
    let mig_place = Some((place.0, place.1.unwrap_or(0)));
    s.workloads = Some(WorkloadAttribution {
        holdings: workloads
            .iter()
            .map(|w| holding(3, None, 0.2, w.clone()))
            .chain(
                workloads
                    .iter()
                    .map(|w| holding(mig_gpu_index, mig_place, 0.2, w.clone())),
            )
            .collect(),
        dropped: 0,
        read_errors: vec![WorkloadReadErrors {
            source: WorkloadSource::Procfs,
            reason: WorkloadReadError::Gone,
            count: 2,
        }],
        usage: Some(WorkloadUsage {
            accounts: workloads
                .iter()
                .enumerate()
                .flat_map(|(i, w)| {
                    let whole = UsageAccount {
                        gpu: 3,
                        gpu_instance: None,
                        compute_instance: None,
                        workload: w.clone(),
                        sm_seconds: Some(120.0 + i as f64),
                        // One MPS client: its estimated part beside.
                        mps_sm_seconds: (i == 2).then_some(33.0),
                        engine_seconds: UsageEngine::ALL.iter().map(|e| (*e, 10.0)).collect(),
                        energy_joules: Some(42_000.0),
                        mps_energy_joules: (i == 2).then_some(9_000.0),
                        held_energy_joules: Some(180_000.0),
                        held_seconds: 600.0,
                        idle_seconds: Some(3_700.0 + i as f64),
                    };
                    let mig = UsageAccount {
                        gpu: mig_gpu_index,
                        gpu_instance: mig_place.map(|m| m.0),
                        compute_instance: mig_place.map(|m| m.1),
                        engine_seconds: vec![],
                        ..whole.clone()
                    };
                    [whole, mig]
                })
                .collect(),
            unattributed: UnattributedReason::ALL
                .iter()
                .map(|reason| UnattributedEnergy {
                    gpu: 3,
                    reason: *reason,
                    joules: 1_000.0,
                })
                .collect(),
            refused: 0,
        }),
        last_refresh: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)),
        hpc_jobs: std::sync::Arc::default(),
    });
    s
}

/// What a Grace rack tray adds to `fully_populated`: C2C links, rack
/// identity, and `nvidia-smi topo -m` rows.
fn set_grace_rack_and_topology(s: &mut Snapshot) {
    // A Grace board's NVLink-C2C links: one up, one down with errors.
    if let Some(r) = s.gpus[1].readings.as_mut().map(std::sync::Arc::make_mut) {
        use nvml_exporter::snapshot::{C2cError, C2cLink};
        r.c2c_links = (0..2)
            .map(|link| C2cLink {
                link,
                up: Some(link == 0),
                errors: vec![
                    (C2cError::Crc, u64::from(link)),
                    (C2cError::Replay, 7 * u64::from(link)),
                    (C2cError::ReplayB2b, 0),
                ],
            })
            .collect();
    }
    // `nvidia-smi topo -m` rows: GPUs 0 and 1 on NVSwitches (and GPU 0
    // with one link straight to GPU 1), GPU 1 a Grace GPU that is its own
    // NUMA node; GPU 2 without NVLink, on PCIe only.
    for (i, nvlink) in [(0usize, true), (1, true), (2, false)] {
        if let Some(r) = s.gpus[i].readings.as_mut().map(std::sync::Arc::make_mut) {
            r.topology = Some(std::sync::Arc::new(GpuTopology {
                pcie: (0..3u32)
                    .filter(|&p| p as usize != i)
                    .map(|p| (p, 40))
                    .collect(),
                cpus: Some("0-55,112-167".into()),
                numa_nodes: Some("0".into()),
                numa_node: (i == 1).then_some(2),
                nvlink: nvlink.then(|| NvlinkReach {
                    to_switch: 17,
                    to_gpu: if i == 0 {
                        vec![("00000000:28:00.0".into(), 1)]
                    } else {
                        Vec::new()
                    },
                }),
            }));
        }
    }
    // Rack identity, as an NVL72 tray's driver gives it.
    s.gpus[1].identity.platform = Some(nvml_exporter::snapshot::Platform {
        chassis_serial: Some("1820000000001".into()),
        slot: Some(14),
        tray: Some(4),
        host_id: 1,
        module_id: 2,
    });
}

/// One consumer card: no ECC, no MIG, no NVLink, no BAR1 beyond basics, a
/// fan, graphics processes, no serial.
pub fn workstation() -> Snapshot {
    let mut r = h100_readings(0);
    r.activity.clear();
    r.memory = Some(Memory {
        total_bytes: 25_757_220_864,
        used_bytes: 1_073_741_824,
        free_bytes: 24_683_479_040,
        reserved_bytes: None,
    });
    r.fan_speeds = vec![(0, 0.3), (1, 0.31)];
    r.ecc_mode = None;
    r.mig_mode = None;
    r.ecc_errors.clear();
    r.retired_pages.clear();
    r.retired_pages_pending = None;
    r.remapped_rows = None;
    r.remapper_banks.clear();
    r.sram_threshold_exceeded = None;
    r.recovery_action = None;
    r.fabric = None;
    r.nvlinks.clear();
    r.display_active = Some(true);
    r.graphics_processes = Some(vec![process(1200, "Xorg", 300_000_000, None)]);
    let mut g = gpu(0, Health::Up, Some(r));
    g.identity = GpuIdentity {
        name: Some("NVIDIA GeForce RTX 4090".into()),
        brand: Some("geforce_rtx".into()),
        architecture: Some("ada_lovelace".into()),
        pci_bus_id: Some("00000000:01:00.0".into()),
        serial: None,
        vbios_version: Some("95.02.18.80.5F".into()),
        compute_capability: Some("8.9".into()),
        board_part_number: None,
        minor_number: Some(0),
        platform: None,
    };
    Snapshot {
        nvml_up: true,
        ready: true,
        driver: Some(DriverInfo {
            driver_version: "550.90.07".into(),
            nvml_version: "12.550.90.07".into(),
            cuda_driver_version: Some("12.4".into()),
        }),
        interval: Duration::from_secs(5),
        gpus: vec![g],
        kubernetes: None,
        workloads: None,
        process: None,
        http: None,
        kernel_log: None,
        config: None,
        xid_last_wait: None,
        state_write_errors: None,
        nvsentinel: None,
    }
}

/// The largest fleet render must handle: 16 GPUs, each with 7 MIG
/// instances.
pub fn large_fleet() -> Snapshot {
    let mut s = dgx_fleet();
    s.gpus = (0..16)
        .map(|i| {
            let mut r = mig_readings(i);
            r.mig = (0..7)
                .map(|k| MigGpuInstance {
                    gpu_instance: 7 + k,
                    profile: "1g.10gb".into(),
                    size: None,
                    bar1: None,
                    memory: Some(MigMemory {
                        total_bytes: 10_468_982_784,
                        used_bytes: 13_631_488,
                        free_bytes: 10_455_351_296,
                        reserved_bytes: None,
                    }),
                    engine_activity: Vec::new(),
                    activity: GpmMetric::ALL.iter().map(|&m| (m, 0.5)).collect(),
                    compute_instances: vec![MigComputeInstance {
                        compute_instance: 0,
                        mig_uuid: format!("MIG-{i:04x}{k:04x}-0000-5555-6666-777788889999"),
                    }],
                })
                .collect();
            gpu(i, Health::Up, Some(r))
        })
        .collect();
    s
}
