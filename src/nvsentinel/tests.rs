use super::*;
use crate::snapshot::{GpuReadings, GpuState};

#[test]
fn each_action_maps_to_nvsentinels_and_fatal_starts_at_a_reset() {
    let cases = [
        (Action::None, false, RecommendedAction::None, false),
        (
            Action::RestartApp,
            false,
            RecommendedAction::RestartApp,
            false,
        ),
        (
            Action::ResetGpu,
            false,
            RecommendedAction::ComponentReset,
            true,
        ),
        (Action::Reboot, false, RecommendedAction::RestartBm, true),
        (Action::Reboot, true, RecommendedAction::RestartVm, true),
        (
            Action::CheckHardware,
            false,
            RecommendedAction::ContactSupport,
            true,
        ),
        (Action::Rma, false, RecommendedAction::ContactSupport, true),
    ];
    for (ours, guest, theirs, fatal) in cases {
        assert_eq!(recommended_action(ours, guest), theirs, "{ours:?}");
        assert_eq!(is_fatal(ours), fatal, "{ours:?}");
    }
}

#[test]
fn a_changed_reason_is_cleared_under_its_old_name_first() {
    let none = (Action::None, "none");
    let hung = (Action::ResetGpu, "hung");
    let lost = (Action::Reboot, "lost");
    assert_eq!(
        changes(None, none),
        [Change::Healthy("none")],
        "start: healthy, said once"
    );
    assert_eq!(
        changes(None, hung),
        [Change::Fault(Action::ResetGpu, "hung")]
    );
    assert_eq!(changes(Some(hung), hung), []);
    assert_eq!(changes(Some(none), none), []);
    assert_eq!(
        changes(Some(none), (Action::None, "xid_nvlink5_injected")),
        [],
        "a note is no fault"
    );
    assert_eq!(changes(Some(hung), none), [Change::Healthy("hung")]);
    assert_eq!(
        changes(Some(hung), lost),
        [
            Change::Healthy("hung"),
            Change::Fault(Action::Reboot, "lost")
        ]
    );
    assert_eq!(
        changes(
            Some((Action::ResetGpu, "fabric")),
            (Action::CheckHardware, "fabric")
        ),
        [Change::Fault(Action::CheckHardware, "fabric")],
        "the same check, worse: one event"
    );
}

#[test]
fn nvmls_bus_id_is_written_as_nvsentinels_monitors_write_it() {
    assert_eq!(pci_address("00000000:3A:00.0"), "0000:3a:00.0");
    assert_eq!(pci_address("0000:da:00.0"), "0000:da:00.0");
}

#[test]
fn a_guest_is_known_by_the_hypervisor_flag() {
    assert!(guest_from_cpuinfo(
        "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"
    ));
    assert!(!guest_from_cpuinfo(
        "processor\t: 0\nflags\t\t: fpu vme lahf_lm\n"
    ));
    assert!(!guest_from_cpuinfo(
        "processor\t: 0\nFeatures\t: fp asimd\n"
    ));
}

fn settings(dry_run: bool) -> Settings {
    Settings {
        socket: PathBuf::from("/nonexistent"),
        node_name: "node-1".into(),
        dry_run,
        timeout: Duration::from_secs(1),
        guest: false,
    }
}

fn gpu(action: Action, reason: &'static str) -> GpuState {
    let mut g = GpuState::with_readings(0, GpuReadings::default());
    g.uuid = "GPU-0".into();
    g.identity.pci_bus_id = Some("00000000:3A:00.0".into());
    g.verdicts = vec![Verdict {
        gpu_instance: None,
        compute_instance: None,
        action,
        reason,
    }];
    g
}

fn queued(n: &Nvsentinel) -> Vec<HealthEvent> {
    let mut q = n.shared.queue.lock().unwrap();
    let mut out = Vec::new();
    while let Some(f) = q.front().cloned() {
        q.delivered(f.seq);
        out.push(f.event);
    }
    out
}

#[test]
fn a_fault_and_its_recovery_become_events_with_nvsentinels_fields() {
    let n = Nvsentinel::new(settings(false));
    let mut s = Snapshot {
        gpus: vec![gpu(Action::ResetGpu, "xid_reset_gpu")],
        ..Snapshot::default()
    };
    n.observe(&s, |_, _| vec![94, 48]);
    n.observe(&s, |_, _| vec![94, 48]);
    let events = queued(&n);
    assert_eq!(events.len(), 1, "an unchanged verdict raises nothing");
    let e = &events[0];
    assert_eq!(
        (e.version, e.agent.as_str(), e.component_class.as_str()),
        (1, AGENT, "GPU")
    );
    assert_eq!(e.check_name, "xid_reset_gpu");
    assert!(e.is_fatal && !e.is_healthy);
    assert_eq!(
        e.recommended_action,
        RecommendedAction::ComponentReset as i32
    );
    assert_eq!(e.error_code, ["94", "48"]);
    let entities: Vec<(&str, &str)> = e
        .entities_impacted
        .iter()
        .map(|x| (x.entity_type.as_str(), x.entity_value.as_str()))
        .collect();
    assert_eq!(entities, [("PCI", "0000:3a:00.0"), ("GPU_UUID", "GPU-0")]);
    assert_eq!(e.node_name, "node-1");
    assert!(e.generated_timestamp.is_some_and(|t| t.seconds > 0));
    assert_eq!(
        e.processing_strategy,
        ProcessingStrategy::ExecuteRemediation as i32
    );

    s.gpus[0] = gpu(Action::None, "none");
    n.observe(&s, |_, _| vec![94]);
    let events = queued(&n);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        e.check_name, "xid_reset_gpu",
        "cleared under the fault's name"
    );
    assert!(e.is_healthy && !e.is_fatal);
    assert_eq!(e.recommended_action, RecommendedAction::None as i32);
    assert!(e.error_code.is_empty());
}

#[test]
fn a_mig_instance_names_its_instance_and_its_recovery_is_sent() {
    let n = Nvsentinel::new(settings(true));
    let mut g = gpu(Action::None, "none");
    g.verdicts.push(Verdict {
        gpu_instance: Some(1),
        compute_instance: Some(0),
        action: Action::RestartApp,
        reason: "xid_restart_app",
    });
    let mut s = Snapshot {
        gpus: vec![g],
        ..Snapshot::default()
    };
    n.observe(&s, |_, _| vec![13]);
    let events = queued(&n);
    assert_eq!(
        events.len(),
        2,
        "the GPU's healthy start, the instance's fault"
    );
    let e = &events[1];
    assert!(!e.is_fatal, "an application restart is not fatal");
    assert_eq!(e.recommended_action, RecommendedAction::RestartApp as i32);
    assert_eq!(e.processing_strategy, ProcessingStrategy::StoreOnly as i32);
    assert!(e
        .entities_impacted
        .iter()
        .any(|x| x.entity_type == "GPU_INSTANCE_ID" && x.entity_value == "1"));
    s.gpus[0].verdicts.truncate(1);
    n.observe(&s, |_, _| Vec::new());
    let events = queued(&n);
    assert_eq!(events.len(), 1);
    assert!(events[0].is_healthy);
    assert_eq!(events[0].check_name, "xid_restart_app");
}

#[test]
fn a_gpu_not_judged_keeps_its_state_and_raises_nothing() {
    let n = Nvsentinel::new(settings(false));
    let mut s = Snapshot {
        gpus: vec![gpu(Action::Reboot, "lost")],
        ..Snapshot::default()
    };
    n.observe(&s, |_, _| Vec::new());
    assert_eq!(queued(&n).len(), 1);
    s.gpus[0].verdicts.clear();
    n.observe(&s, |_, _| Vec::new());
    assert!(queued(&n).is_empty(), "NVML down says nothing of the GPU");
    s.gpus[0] = gpu(Action::Reboot, "lost");
    n.observe(&s, |_, _| Vec::new());
    assert!(queued(&n).is_empty());
}
