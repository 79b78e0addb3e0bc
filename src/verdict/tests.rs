//! The verdict on a timeline: what each signal asks for, which wins, and
//! when each clears.

use super::*;
use crate::kmsg::Nvlink5Words;
use crate::snapshot::{Fabric, FabricHealth, FabricIssue, RemappedRows};
use crate::xid::{nvlink5_class, nvlink_err_class};

const WINDOW: Duration = Duration::from_secs(600);

struct Gpu {
    t0: Instant,
    health: Health,
    readings: GpuReadings,
    xids: Vec<XidSeen>,
    /// The XIDs of the node's other GPUs (issue 46).
    node_xids: Vec<XidSeen>,
    remembered: Remembered,
    instances: Vec<(u32, u32)>,
    last_reset: Option<Instant>,
    hopper: bool,
}

impl Gpu {
    fn new() -> Gpu {
        Gpu {
            t0: Instant::now(),
            health: Health::Up,
            readings: GpuReadings::default(),
            xids: Vec::new(),
            node_xids: Vec::new(),
            remembered: Remembered::default(),
            // MIG instances 1 to 7, one compute instance each.
            instances: (1..=7).map(|gi| (gi, 0)).collect(),
            last_reset: None,
            hopper: true,
        }
    }

    fn at(&self, secs: u64) -> Instant {
        self.t0 + Duration::from_secs(secs)
    }

    fn xid(&mut self, secs: u64, code: u64, gi: Option<u32>) {
        let at = self.at(secs);
        self.xids.push(XidSeen {
            code,
            class: XidClass::Code,
            gpu_instance: gi,
            compute_instance: gi.map(|_| 0),
            at,
        });
    }

    fn reset(&mut self, secs: u64) {
        self.last_reset = Some(self.at(secs));
    }

    /// The verdicts at `secs`, as (instance, action, reason).
    fn judge(&self, secs: u64) -> Vec<(Option<u32>, &'static str, &'static str)> {
        let readings = (self.health == Health::Up).then_some(&self.readings);
        judge(&Inputs {
            health: self.health,
            readings,
            xids: &self.xids,
            node_xids: &self.node_xids,
            remembered: self.remembered,
            instances: &self.instances,
            last_reset: self.last_reset,
            now: self.at(secs),
            restart_app_window: WINDOW,
            hopper: self.hopper,
        })
        .into_iter()
        .map(|v| (v.gpu_instance, v.action.as_label(), v.reason))
        .collect()
    }

    /// The GPU's own verdict at `secs`.
    fn gpu(&self, secs: u64) -> (&'static str, &'static str) {
        let v = self.judge(secs);
        assert_eq!(v[0].0, None);
        (v[0].1, v[0].2)
    }
}

#[test]
fn a_healthy_gpu_needs_nothing() {
    let mut g = Gpu::new();
    assert_eq!(g.judge(0), [(None, "none", "none")]);
    // IGNORE codes decide nothing (codes the table does not list ask a
    // person: a_code_past_the_catalog_asks_a_person).
    g.xid(1, 43, None);
    g.xid(1, 45, None);
    assert_eq!(g.gpu(2), ("none", "none"));
}

#[test]
fn an_application_fault_asks_for_a_restart_for_a_window_never_a_reset() {
    let mut g = Gpu::new();
    g.xid(100, 13, None);
    assert_eq!(g.gpu(100), ("restart_app", "xid_restart_app"));
    assert_eq!(g.gpu(100 + 599), ("restart_app", "xid_restart_app"));
    assert_eq!(g.gpu(100 + 600), ("none", "none"));
    // A later one opens the window again.
    g.xid(1000, 31, None);
    assert_eq!(g.gpu(1000), ("restart_app", "xid_restart_app"));
}

#[test]
fn a_mig_instance_has_its_own_verdict_for_its_application() {
    let mut g = Gpu::new();
    g.xid(10, 31, Some(3));
    assert_eq!(
        g.judge(10),
        [
            (None, "none", "none"),
            (Some(3), "restart_app", "xid_restart_app")
        ]
    );
    assert_eq!(g.judge(10 + 600), [(None, "none", "none")]);
    // A fault that needs a reset takes the whole GPU, wherever raised.
    g.xid(20, 119, Some(5));
    assert_eq!(g.judge(20)[0], (None, "reset_gpu", "xid_reset_gpu"));
    assert_eq!(
        g.judge(20).len(),
        2,
        "only the instance of the application fault"
    );
}

#[test]
fn a_reset_xid_holds_until_a_reset_after_it() {
    let mut g = Gpu::new();
    g.reset(5);
    g.xid(10, 119, None);
    assert_eq!(g.gpu(10), ("reset_gpu", "xid_reset_gpu"));
    assert_eq!(g.gpu(100_000), ("reset_gpu", "xid_reset_gpu"), "no window");
    g.reset(200);
    assert_eq!(g.gpu(200), ("none", "none"));
    g.xid(300, 48, None);
    assert_eq!(g.gpu(300), ("reset_gpu", "xid_workflow_xid_48"));
}

#[test]
fn fell_off_the_bus_asks_for_a_reboot_that_a_reset_does_not_replace() {
    let mut g = Gpu::new();
    g.xid(10, 79, None);
    g.xid(11, 119, None);
    assert_eq!(g.gpu(11), ("reboot", "xid_restart_bm"));
    g.reset(20);
    assert_eq!(g.gpu(30), ("reboot", "xid_restart_bm"));
}

#[test]
fn health_and_nvml_state_propose_their_own_actions() {
    let mut g = Gpu::new();
    g.health = Health::Lost;
    assert_eq!(g.gpu(0), ("reboot", "lost"));
    g.health = Health::Hung;
    assert_eq!(g.gpu(0), ("reset_gpu", "hung"));
    g.health = Health::Up;
    assert_eq!(g.gpu(0), ("none", "none"));
    for (h, judged) in [
        (Health::Denied, false),
        (Health::Pending, false),
        (Health::Failing, false),
    ] {
        g.health = h;
        assert_eq!(!g.judge(0).is_empty(), judged, "{h:?}");
    }
    g.health = Health::Up;

    g.readings.retired_pages_pending = Some(true);
    assert_eq!(g.gpu(0), ("reset_gpu", "retirement_pending"));
    g.readings.remapped_rows = Some(RemappedRows {
        correctable: 0,
        uncorrectable: 1,
        pending: true,
        failed: false,
    });
    assert_eq!(
        g.gpu(0),
        ("reset_gpu", "remap_pending"),
        "the first signal listed wins a tie"
    );
    g.readings.recovery_action = Some(2);
    assert_eq!(g.gpu(0), ("reboot", "recovery_action"));
    g.readings.recovery_action = Some(4);
    assert_eq!(g.gpu(0), ("reset_gpu", "recovery_action"));
    let fabric = |state, registered, health_summary| {
        Some(Fabric {
            state,
            registered,
            health_summary,
            health_issues: vec![(FabricIssue::DegradedBandwidth, true)],
            partition: None,
        })
    };
    g.readings = GpuReadings {
        fabric: fabric(3, false, None),
        ..GpuReadings::default()
    };
    assert_eq!(g.gpu(0), ("reset_gpu", "fabric"));
    g.readings.fabric = fabric(2, true, None);
    assert_eq!(
        g.gpu(0),
        ("none", "none"),
        "registration in progress, or bandwidth degraded, is not a fault of the GPU"
    );
    g.readings.fabric = fabric(3, true, Some(FabricHealth::LimitedCapacity));
    assert_eq!(g.gpu(0), ("none", "none"));
    g.readings.fabric = fabric(3, true, Some(FabricHealth::Unhealthy));
    assert_eq!(g.gpu(0), ("check_hardware", "fabric"));
}

#[test]
fn the_worst_action_wins() {
    let mut g = Gpu::new();
    g.xid(1, 13, None);
    g.readings.remapped_rows = Some(RemappedRows {
        correctable: 0,
        uncorrectable: 1,
        pending: true,
        failed: false,
    });
    assert_eq!(g.gpu(1), ("reset_gpu", "remap_pending"));
    g.xid(2, 79, None);
    assert_eq!(g.gpu(2), ("reboot", "xid_restart_bm"));
    g.xid(3, 61, None);
    assert_eq!(g.gpu(3), ("check_hardware", "xid_contact_support"));
    g.readings.sram_threshold_exceeded = Some(true);
    assert_eq!(g.gpu(3), ("rma", "sram_threshold"));
    g.readings.remapper_banks = vec![(SpareRows::Exhausted, 1)];
    assert_eq!(g.gpu(3), ("rma", "remapper_exhausted"));
    g.readings.remapped_rows = Some(RemappedRows {
        correctable: 0,
        uncorrectable: 9,
        pending: false,
        failed: true,
    });
    assert_eq!(g.gpu(3), ("rma", "remap_failed"));
}

#[test]
fn every_bucket_has_an_action_and_every_reason_is_listed() {
    let mut seen = std::collections::BTreeSet::new();
    for r in REASONS {
        assert!(seen.insert(r), "{r} listed twice");
        assert!(r
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
    }
    for bucket in crate::xid_catalog::Bucket::ALL {
        let (action, reason) = bucket_action(*bucket);
        assert!(REASONS.contains(&reason), "{reason}");
        // The reason names the bucket it came from; NVLink5's, judged by
        // code alone, is an event without its decoding line: no action,
        // the reason says the kernel log was missing.
        if *bucket == crate::xid_catalog::Bucket::WorkflowNvlink5Err {
            assert_eq!(
                (action, reason),
                (Action::None, "xid_nvlink5_no_kernel_log")
            );
        } else if *bucket == crate::xid_catalog::Bucket::WorkflowNvlinkErr {
            // XID 74 judged by its code alone: the registers were missing
            // (issue 46: the code-wide action, the reason says why).
            assert_eq!(
                (action, reason),
                (Action::CheckHardware, "xid_nvlink_err_undecoded")
            );
        } else if action != Action::None {
            assert_eq!(reason, format!("xid_{}", bucket.as_str().to_lowercase()));
        }
    }
    // Every code of the catalog has an action.
    for x in crate::xid_catalog::CATALOG {
        assert!(xid_action(u64::from(x.code)).is_some(), "XID {}", x.code);
    }
    // The codes the issue names: 79 reboot, 119/120 reset, 13/31 restart.
    assert_eq!(xid_action(79).map(|a| a.0), Some(Action::Reboot));
    assert_eq!(xid_action(119).map(|a| a.0), Some(Action::ResetGpu));
    assert_eq!(xid_action(120).map(|a| a.0), Some(Action::ResetGpu));
    assert_eq!(xid_action(13).map(|a| a.0), Some(Action::RestartApp));
    assert_eq!(xid_action(31).map(|a| a.0), Some(Action::RestartApp));
    // Issue 46: a code the catalog lacks asks a person; past NVIDIA's
    // range, a corrupt event, nothing.
    assert_eq!(xid_action(999), Some(UNLISTED));
    assert_eq!(xid_action(1000), None);
}

#[test]
fn recovery_actions_of_newer_drivers_and_unknown_ones_ask_for_something() {
    let mut g = Gpu::new();
    for (value, want) in [
        (0, ("none", "none")),
        (1, ("reset_gpu", "recovery_action")),
        (2, ("reboot", "recovery_action")),
        (3, ("reset_gpu", "recovery_action")),
        (4, ("reset_gpu", "recovery_action")),
        // Issue 36, F8: named as NVIDIA names them.
        (5, ("none", "recovery_action_recover_imex_domain")),
        (6, ("reboot", "recovery_action_bus_reset")),
        (7, ("reboot", "recovery_action")),
        (8, ("check_hardware", "recovery_action_unknown")),
        (u32::MAX, ("check_hardware", "recovery_action_unknown")),
    ] {
        g.readings.recovery_action = Some(value);
        assert_eq!(g.gpu(0), want, "recovery action {value}");
    }
}

#[test]
fn a_failed_remap_is_remembered_until_boot_where_mig_hides_it() {
    let mut g = Gpu::new();
    g.remembered.remap_failed = true;
    assert_eq!(g.gpu(0), ("rma", "remap_failed"), "the flag once seen");
    g.remembered.remap_failed = false;
    g.xid(10, 64, None);
    assert_eq!(g.gpu(10), ("reset_gpu", "xid_reset_gpu"));
    g.remembered.mig_remap_failure = true;
    g.reset(20);
    assert_eq!(
        g.gpu(30),
        ("check_hardware", "remap_failed_mig"),
        "a reset does not clear what XID 64 said on a MIG GPU"
    );
}

#[test]
fn nvlink5_events_ask_for_what_their_line_says() {
    let mut g = Gpu::new();
    let add = |g: &mut Gpu, secs, class| {
        let at = g.at(secs);
        g.xids.push(XidSeen {
            code: 145,
            class,
            gpu_instance: None,
            compute_instance: None,
            at,
        });
    };
    add(&mut g, 1, XidClass::Nvlink5Nothing);
    assert_eq!(
        g.gpu(1),
        ("none", "none"),
        "a non-fatal event asks for nothing"
    );
    // Without the line (issue 36): never a reset on the bare code; the
    // reason says which evidence was missing, until a reset.
    add(&mut g, 2, XidClass::Nvlink5NoKernelLog);
    assert_eq!(g.gpu(2), ("none", "xid_nvlink5_no_kernel_log"));
    // What the driver announces decides.
    g.readings.recovery_action = Some(1);
    assert_eq!(g.gpu(2), ("reset_gpu", "recovery_action"));
    g.readings.recovery_action = Some(0);
    g.xids.clear();
    add(&mut g, 2, XidClass::Nvlink5Undecoded);
    assert_eq!(g.gpu(2), ("none", "xid_nvlink5_undecoded"));
    g.reset(3);
    assert_eq!(g.gpu(3), ("none", "none"));
    let at = g.at(4);
    g.xids.push(XidSeen {
        code: 149,
        class: XidClass::Nvlink5Fatal,
        gpu_instance: None,
        compute_instance: None,
        at,
    });
    assert_eq!(g.gpu(4), ("reset_gpu", "xid_nvlink5_fatal"));
    // The sheet decides, by the driver's encoding; without a row, the
    // line's own word.
    let class = |xid, fatal, intr, status, major: Option<u32>| {
        // The unit the row of the driver's encoding names, as the line
        // would (none where no row matches: the word decides).
        let unit = u16::try_from(xid)
            .ok()
            .and_then(|x| {
                crate::xid_catalog::nvlink5::decode(x, intr, status, major.unwrap_or(580))
            })
            .map(|d| d.rule.unit.split('/').next().unwrap());
        let words = Nvlink5Words {
            unit,
            fatal,
            injected: false,
            intr_info: intr,
            error_status: status,
        };
        nvlink5_class(xid, &words, major)
    };
    assert_eq!(
        class(145, false, 0x4, 0x100, Some(580)),
        XidClass::Nvlink5Nothing
    );
    assert_eq!(
        class(145, true, 0x4, 0x40, Some(580)),
        XidClass::Nvlink5Fatal
    );
    assert_eq!(
        class(145, false, 0x0409_88e2, 0x8, Some(570)),
        XidClass::Nvlink5Nothing,
        "XID_154_EVAL"
    );
    assert_eq!(
        class(149, true, 0x0260_01c6, 0, Some(570)),
        XidClass::Nvlink5Nothing,
        "IGNORE, though the line says Fatal"
    );
    assert_eq!(
        class(145, true, 0xdead, 0x1234, Some(580)),
        XidClass::Nvlink5Fatal
    );
    assert_eq!(
        class(145, false, 0xdead, 0x1234, Some(580)),
        XidClass::Nvlink5Nothing
    );
    assert_eq!(
        class(145, true, 0x4, 0x100, None),
        XidClass::Nvlink5Fatal,
        "no driver version: the word"
    );
}

/// Issue 36, F5 and F9: the line's unit must agree with the decoded row;
/// an injected event is judged as a test.
#[test]
fn nvlink5_lines_are_judged_by_their_unit_and_injection() {
    let words = |unit, fatal, injected, intr_info, error_status| Nvlink5Words {
        unit,
        fatal,
        injected,
        intr_info,
        error_status,
    };
    // NVIDIA's `MSE degraded` is not the sheet's MSE_WATCHDOG row (all
    // zeros, RESET_GPU): the word decides.
    assert_eq!(
        nvlink5_class(150, &words(None, false, false, 0, 0), Some(580)),
        XidClass::Nvlink5Nothing
    );
    assert_eq!(
        nvlink5_class(
            150,
            &words(Some("MSE_WATCHDOG"), true, false, 0, 0),
            Some(580)
        ),
        XidClass::Nvlink5Fatal
    );
    // A V1 line (RLW_SRC_TRACK 0x8, XID_154_EVAL) under a V2 driver's
    // version: the V2 row would be another unit's; the V1 row agrees.
    assert_eq!(
        nvlink5_class(
            145,
            &words(Some("RLW_SRC_TRACK"), true, false, 0x0409_88e2, 0x8),
            Some(580)
        ),
        XidClass::Nvlink5Nothing
    );
    // A unit that agrees with no row under either encoding: the word.
    assert_eq!(
        nvlink5_class(
            145,
            &words(Some("TREX"), true, false, 0x0000_0004, 0x100),
            Some(580)
        ),
        XidClass::Nvlink5Fatal
    );
    // Injected: counted elsewhere, judged as a test, whatever it says.
    let injected = nvlink5_class(
        149,
        &words(Some("NETIR"), true, true, 0x000f_e406, 0),
        Some(570),
    );
    assert_eq!(injected, XidClass::Nvlink5Injected);
    assert_eq!(
        xid_class_action(149, injected),
        Some((Action::None, "xid_nvlink5_injected"))
    );
}

#[test]
fn only_instances_the_gpu_has_get_their_own_series() {
    let mut g = Gpu::new();
    g.instances = vec![(1, 0), (2, 0)];
    for gi in 0..2000 {
        g.xid(1, 13, Some(gi));
    }
    let v = g.judge(1);
    assert_eq!(
        v,
        [
            (None, "restart_app", "xid_restart_app"),
            (Some(1), "restart_app", "xid_restart_app"),
            (Some(2), "restart_app", "xid_restart_app"),
        ],
        "instances the GPU lacks fold into the GPU's verdict"
    );
}

/// Issue 36, F9: a lone 45 on an NVSwitch system points at the fabric
/// manager, a 45 with company or without NVSwitches at nothing. 78 asks
/// a person (issue 46: a manual-triage bucket).
#[test]
fn update_swfw_asks_a_person_and_a_lone_45_is_named_without_a_drain() {
    let mut g = Gpu::new();
    g.xid(1, 78, None);
    assert_eq!(g.gpu(2), ("check_hardware", "xid_update_swfw"));
    assert_eq!(
        bucket_action(crate::xid_catalog::Bucket::UpdateSwFw).0,
        Action::CheckHardware
    );
    let mut g = Gpu::new();
    g.xid(1, 45, None);
    assert_eq!(g.gpu(2), ("none", "none"), "no NVSwitch: nothing");
    g.readings.fabric = Some(Fabric {
        state: 3,
        registered: true,
        health_summary: Some(FabricHealth::Healthy),
        health_issues: Vec::new(),
        partition: None,
    });
    assert_eq!(
        g.gpu(2),
        ("none", "xid_workflow_xid_45"),
        "solo on NVSwitch"
    );
    assert_eq!(g.gpu(1000), ("none", "none"), "past the window");
    // With another XID within 10 s it is not solo: that one's resolution.
    g.xid(3, 13, None);
    assert_eq!(g.gpu(4), ("restart_app", "xid_restart_app"), "not solo");
}

/// Issue 36, F3: XID 74 by NVIDIA's workflow on its registers; issue 46:
/// the fourth register's bit 18 asks for a reset of the fabric (it was a
/// note at none), a report-a-bug is the catalog's CONTACT_SUPPORT, and
/// the bare code what the peers make of it.
#[test]
fn xid_74_asks_for_what_its_registers_say() {
    let class = |r| nvlink_err_class(Some(r));
    let at = |class| xid_class_action(74, class);
    assert_eq!(
        at(class([1, 0, 0, 0, 0, 0, 0])),
        Some((Action::None, "none"))
    );
    assert_eq!(
        at(class([1 << 8, 0, 0, 0, 0, 0, 0])),
        Some((Action::CheckHardware, "xid_workflow_nvlink_err"))
    );
    // Fourth register bit 18 with an ECC threshold bit: the fabric reset.
    assert_eq!(
        at(class([0, 0, 0, 1 << 18, 1 << 20, 0, 0])),
        Some((Action::ResetGpu, "xid_nvlink_err_fabric_reset"))
    );
    // Solo, also "please report a bug": the catalog's CONTACT_SUPPORT.
    let contact_support = bucket_action(Bucket::ContactSupport).0;
    assert_eq!(
        at(class([0, 0, 0, 1 << 18, 0, 0, 0])),
        Some((contact_support, "xid_nvlink_err_report"))
    );
    assert_eq!(
        at(class([0, 0, 1 << 13, 0, 0, 0, 0])),
        Some((contact_support, "xid_nvlink_err_report"))
    );
    assert_eq!(
        at(XidClass::NvlinkErrRepeated),
        Some((contact_support, "xid_nvlink_err_repeated"))
    );
    assert_eq!(
        at(nvlink_err_class(None)),
        Some((Action::CheckHardware, "xid_nvlink_err_undecoded"))
    );
    assert_eq!(xid_action(74).map(|a| a.0), Some(Action::CheckHardware));
    let mut g = Gpu::new();
    g.xid(1, 74, None);
    assert_eq!(g.gpu(2), ("check_hardware", "xid_nvlink_err_undecoded"));
    // Past a reset, still: the board is to be looked at before reuse.
    g.reset(3);
    assert_eq!(g.gpu(4), ("check_hardware", "xid_nvlink_err_undecoded"));
}

/// Issue 46: the bit table is Hopper's ("The first, third, fourth and
/// fifth registers are valid for Hopper-based products"). On another
/// architecture any 74 gets the code's action, whatever its bits say.
#[test]
fn xid_74_bits_are_read_on_hopper_only() {
    let mut g = Gpu::new();
    g.xids.push(XidSeen {
        code: 74,
        class: nvlink_err_class(Some([1, 0, 0, 0, 0, 0, 0])),
        gpu_instance: None,
        compute_instance: None,
        at: g.at(1),
    });
    assert_eq!(g.gpu(2), ("none", "none"), "Hopper: safely ignored");
    g.hopper = false;
    assert_eq!(g.gpu(2), ("check_hardware", "xid_nvlink_err_not_hopper"));
    for class in [
        XidClass::NvlinkErrReport,
        XidClass::NvlinkErrRepeated,
        XidClass::NvlinkErrCheckLink,
        XidClass::NvlinkErrFabricReset,
    ] {
        assert_eq!(
            xid_event_action(74, class, false),
            Some((Action::CheckHardware, "xid_nvlink_err_not_hopper")),
            "{class:?}"
        );
    }
    // The bare code is the same everywhere.
    assert_eq!(
        xid_event_action(74, XidClass::Code, false),
        xid_event_action(74, XidClass::Code, true)
    );
}

/// The ledger keeps the latest event of exactly the codes and classes
/// that ask for something here or carry a note (`crate::xid::kept`, which
/// the poller asks without reaching the verdict): were they to differ, an
/// XID would be judged that was never kept, or one kept and never judged.
#[test]
fn what_the_ledger_keeps_is_what_the_verdict_acts_on() {
    let classes = [
        XidClass::Code,
        XidClass::Nvlink5Fatal,
        XidClass::Nvlink5Nothing,
        XidClass::Nvlink5Undecoded,
        XidClass::Nvlink5NoKernelLog,
        XidClass::Nvlink5Injected,
        XidClass::NvlinkErrNothing,
        XidClass::NvlinkErrReport,
        XidClass::NvlinkErrCheckLink,
        XidClass::NvlinkErrFabricReset,
        XidClass::NvlinkErrRepeated,
        XidClass::Xid45Caused,
    ];
    let mut kept = 0;
    for code in 0..=crate::snapshot::MAX_XID_CODE + 2 {
        for class in classes {
            // On some GPU: a 74 that asks for nothing on Hopper asks for
            // the code's action elsewhere.
            let acts = [true, false].iter().any(|&hopper| {
                xid_event_action(code, class, hopper)
                    .is_some_and(|(a, reason)| a != Action::None || is_note(reason))
            });
            assert_eq!(crate::xid::kept(code, class), acts, "XID {code} {class:?}");
            kept += usize::from(acts);
        }
    }
    assert!(kept > 100, "too few kept to compare: {kept}");
}

// Issue 46, items 2-5: the manual-triage buckets, codes the catalog lacks,
// the lone 45, and the words operators read about each code.

fn with_fabric(g: &mut Gpu) {
    g.readings.fabric = Some(Fabric {
        state: 3,
        registered: true,
        health_summary: Some(FabricHealth::Healthy),
        health_issues: Vec::new(),
        partition: None,
    });
}

/// NVIDIA's catalog owners: UPDATE_SWFW, CHECK_MECHANICALS, CHECK_UVM and
/// CONTACT_SUPPORT "intentionally resolve to CONTACT_SUPPORT. A human
/// decides" (NVSentinel `xid_catalog_consistency_test.go`,
/// `manualTriageBuckets`): one answer here, never `none`.
#[test]
fn manual_triage_buckets_answer_as_one() {
    use crate::xid_catalog::Bucket;
    for b in [
        Bucket::UpdateSwFw,
        Bucket::CheckMechanicals,
        Bucket::CheckUvm,
        Bucket::ContactSupport,
    ] {
        assert_eq!(bucket_action(b).0, Action::CheckHardware, "{b:?}");
    }
    for (code, reason) in [
        (78, "xid_update_swfw"),
        (54, "xid_check_mechanicals"),
        (159, "xid_check_uvm"),
        (142, "xid_contact_support"),
        (176, "xid_check_mechanicals"),
        (185, "xid_contact_support"),
    ] {
        let mut g = Gpu::new();
        g.xid(1, code, None);
        assert_eq!(g.gpu(2), ("check_hardware", reason), "XID {code}");
        g.reset(5);
        assert_eq!(
            g.gpu(6),
            ("check_hardware", reason),
            "a reset does not end it"
        );
    }
}

/// A code the catalog lacks but NVIDIA's range holds (177-184, past 185)
/// gets NVSentinel's default for a code without a bucket; a code outside
/// the range is a corrupt event, judged by nothing.
#[test]
fn a_code_past_the_catalog_asks_a_person() {
    for code in [177, 184, 186, 999] {
        assert_eq!(xid_action(code), Some(UNLISTED), "XID {code}");
        let mut g = Gpu::new();
        g.xid(1, code, None);
        assert_eq!(g.gpu(2), ("check_hardware", "xid_unlisted"), "XID {code}");
    }
    assert_eq!(xid_action(0), None);
    assert_eq!(xid_action(1000), None);
    assert!(REASONS.contains(&UNLISTED.1));
}

/// A 45 the driver says another XID caused is not solo, and neither is one
/// that came with another GPU's XID: a 48 on GPU 0 ending a job on GPUs
/// 1-7 names no fabric manager on them.
#[test]
fn a_45_with_a_named_cause_or_another_gpus_xid_is_not_solo() {
    let mut g = Gpu::new();
    with_fabric(&mut g);
    g.xids.push(XidSeen {
        code: 45,
        class: XidClass::Xid45Caused,
        gpu_instance: None,
        compute_instance: None,
        at: g.at(1),
    });
    assert_eq!(g.gpu(2), ("none", "none"), "its line names the cause");
    assert_eq!(
        xid_class_action(45, XidClass::Xid45Caused),
        Some((Action::None, "none"))
    );
    assert!(!crate::xid::kept(45, XidClass::Xid45Caused));

    let mut g = Gpu::new();
    with_fabric(&mut g);
    g.xid(1, 45, None);
    assert_eq!(
        g.gpu(2),
        ("none", "xid_workflow_xid_45"),
        "alone on the node"
    );
    let other = XidSeen {
        code: 48,
        class: XidClass::Code,
        gpu_instance: None,
        compute_instance: None,
        at: g.at(0),
    };
    g.node_xids.push(other);
    assert_eq!(g.gpu(2), ("none", "none"), "GPU 0's 48 came with it");
    g.node_xids[0].at = g.at(30);
    assert_eq!(
        g.gpu(31),
        ("none", "xid_workflow_xid_45"),
        "another GPU's XID long after"
    );
    // Another GPU's 45 alone does not make it company.
    g.node_xids[0] = XidSeen {
        code: 45,
        at: g.at(1),
        ..other
    };
    assert_eq!(g.gpu(2), ("none", "xid_workflow_xid_45"));
}

/// What a catalog row tells an operator to do, read as an action: the
/// words each action's rows must begin with or hold.
fn says(action: Action, text: &str) -> bool {
    match action {
        Action::None => {
            (text.starts_with("nothing") || text.starts_with("decided per event"))
                && !text.contains("drain")
        }
        Action::RestartApp => {
            (text.contains("restart the") || text.contains("application"))
                && !text.starts_with("drain")
        }
        Action::ResetGpu => text.contains("reset"),
        Action::Reboot => text.contains("reboot") || text.contains("restart the VM"),
        Action::CheckHardware => text.starts_with("drained until a person decides"),
        Action::Rma => text.contains("RMA"),
    }
}

/// The words for what the NVLink5 codes ask for without their line.
fn without_line(action: Action) -> &'static str {
    match action {
        Action::None => "nothing",
        Action::RestartApp => "a restart of the application",
        Action::ResetGpu => "a reset",
        Action::Reboot => "a reboot",
        Action::CheckHardware => "drained until a person decides",
        Action::Rma => "an RMA",
    }
}

/// Every row's "what to do" (rendered into docs/runbooks.md) says what the
/// verdict does with its code: a change of behaviour without the words
/// fails here. 74's row is decided per event by its registers
/// (`xid_catalog::nvlink_err`, issue 46 item 1) and is left to that work.
#[test]
fn every_rows_words_say_what_the_verdict_does() {
    use crate::xid_catalog::{Bucket, CATALOG};
    let mut checked = 0;
    for x in CATALOG.iter().filter(|x| x.code != 74) {
        let (action, reason) = xid_action(u64::from(x.code)).expect("a catalogued code");
        assert!(
            says(action, x.action),
            "XID {}: the verdict says {} ({reason}), the row says {:?}",
            x.code,
            action.as_label(),
            x.action
        );
        if action != Action::CheckHardware {
            assert!(
                !x.action.starts_with("drained until a person decides"),
                "XID {}",
                x.code
            );
        }
        if x.bucket() == Bucket::WorkflowNvlink5Err {
            let (bare, reason) =
                xid_class_action(u64::from(x.code), XidClass::Nvlink5NoKernelLog).unwrap();
            let want = format!("without its kernel-log line, {} ", without_line(bare));
            assert!(
                x.action.contains(&want),
                "XID {}: {:?} lacks {want:?}",
                x.code,
                x.action
            );
            assert!(
                x.action.contains(reason),
                "XID {}: names no {reason}",
                x.code
            );
        }
        checked += 1;
    }
    assert_eq!(checked, CATALOG.len() - 1);
    assert!(says(Action::None, "nothing"));
    assert!(!says(
        Action::None,
        "decided per event; without its line, drain"
    ));
    assert!(!says(
        Action::CheckHardware,
        "save the evidence and report it to NVIDIA"
    ));
}

/// The reason tables of this module's doc and of docs/operations.md ("What
/// to do with a GPU now") state, for every reason an XID code can give by
/// its bucket or as unlisted, the action the code gives.
#[test]
fn the_verdict_docs_state_what_each_code_reason_does() {
    let module: String = include_str!("mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .map(|l| format!("{l}\n"))
        .collect();
    let operations = include_str!("../../docs/operations.md");
    let operations = operations
        .split_once("## What to do with a GPU now: the verdict")
        .expect("docs/operations.md's verdict section")
        .1;
    let mut pairs: Vec<(Action, &str)> = crate::xid_catalog::Bucket::ALL
        .iter()
        .map(|b| bucket_action(*b))
        .filter(|&(_, r)| r != "none")
        .collect();
    pairs.push(UNLISTED);
    for (name, doc) in [
        ("src/verdict/mod.rs", module.as_str()),
        ("docs/operations.md", operations),
    ] {
        for &(action, reason) in &pairs {
            let rows: Vec<Vec<&str>> = doc
                .lines()
                .filter(|l| l.starts_with("| `"))
                .map(|l| l.split(" | ").collect::<Vec<_>>())
                .filter(|c| c.len() >= 3 && c[0].contains(&format!("`{reason}`")))
                .collect();
            // The module's table may say it once for all buckets
            // (`xid_<bucket>`, "the bucket's").
            let generic = doc.contains("| `xid_<bucket>` | the bucket's");
            assert!(
                !rows.is_empty() || (generic && reason != UNLISTED.1),
                "{name}: no row for {reason}"
            );
            for c in rows {
                assert_eq!(c[1], action.as_label(), "{name}: {reason}");
            }
        }
    }
}

/// The XID codes NVSentinel's `errorCode` carries: those that decided the
/// verdict and still hold, not every XID the GPU had.
#[test]
fn the_xids_behind_a_verdict_are_those_that_decided_it() {
    let t0 = Instant::now();
    let xid = |code, secs, gi: Option<u32>| XidSeen {
        code,
        class: XidClass::Code,
        gpu_instance: gi,
        compute_instance: gi.map(|_| 0),
        at: t0 + Duration::from_secs(secs),
    };
    let mut g = GpuState::with_readings(0, GpuReadings::default());
    g.evidence = Some(crate::snapshot::VerdictEvidence {
        // 48 and 46 ask for a reset; 119 did too, before the reset at 15;
        // 13 on instance 2 asks its application to restart.
        xids: vec![
            xid(119, 10, None),
            xid(48, 20, None),
            xid(46, 30, None),
            xid(13, 25, Some(2)),
        ],
        instances: vec![(2, 0)],
        last_reset: Some(t0 + Duration::from_secs(15)),
        ..crate::snapshot::VerdictEvidence::default()
    });
    let now = t0 + Duration::from_secs(40);
    let verdicts = judge_gpu(&g, &[], now, WINDOW);
    let gpu = verdicts[0];
    assert_eq!(
        (gpu.action, gpu.reason),
        (Action::ResetGpu, "xid_workflow_xid_48")
    );
    assert_eq!(xids_behind(&g, &gpu, now, WINDOW), [48]);
    let reset = Verdict {
        reason: "xid_reset_gpu",
        ..gpu
    };
    assert_eq!(xids_behind(&g, &reset, now, WINDOW), [46], "119 was reset");
    let instance = verdicts[1];
    assert_eq!(instance.gpu_instance, Some(2));
    assert_eq!(xids_behind(&g, &instance, now, WINDOW), [13]);
    let hung = Verdict {
        reason: "hung",
        ..gpu
    };
    assert!(xids_behind(&g, &hung, now, WINDOW).is_empty());
}
