//! Fault injection from another process: the `nvml-sim` CLI talks to the
//! control socket of the simulator loaded in this test process, and the
//! faults show through nvml-wrapper. One test: the fleet is process-wide.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use crate::common::{cli, ok};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn faults_through_the_cli() {
    in_own_process!(faults_through_the_cli);
    let dir = std::env::temp_dir().join(format!("nvml-sim-control-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("control.sock");
    let call_log = dir.join("calls.toml");
    std::env::set_var("NVML_SIM_SCENARIO", "dgx-h100");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::set_var("NVML_SIM_CALL_LOG", &call_log);
    let kmsg = dir.join("kmsg");
    let _ = std::fs::remove_file(&kmsg);
    std::env::set_var("NVML_SIM_KMSG", &kmsg);
    std::env::remove_var("NVML_SIM_TIME_SCALE");
    let nvml = common::init();
    let s = socket.as_path();
    // One fleet for the process: each step starts where the last left it.
    xids(&nvml, s, &kmsg);
    ecc_and_rows(&nvml, s);
    throttle_links_and_pcie(&nvml, s);
    fabric_sram_and_histogram(&nvml, s);
    load_and_processes(&nvml, s);
    slow_and_hung_calls(&nvml, s);
    mig_reconfiguration(&nvml, s);
    mig_mode(&nvml, s);
    lost_gpu_calls_and_bad_requests(&nvml, s);
    driver_unload(s);
    // The call log is written at the last shutdown.
    drop(nvml);
    let log = std::fs::read_to_string(&call_log).unwrap();
    let counts: toml::Table = log.parse().unwrap();
    assert!(counts["nvmlShutdown"].as_integer().unwrap() >= 2, "{log}");
    std::fs::remove_dir_all(&dir).ok();
}

/// XIDs: as an event set sees them, as NVRM logs them, for the log alone, in a MIG instance.
fn xids(nvml: &Nvml, s: &Path, kmsg: &Path) {
    // XID, as nvml-wrapper's EventSet sees it.
    let d4 = nvml.device_by_index(4).unwrap();
    let set = d4
        .register_events(
            EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR,
            nvml.create_event_set().unwrap(),
        )
        .unwrap();
    ok(s, &["xid", "--gpu", "4", "--code", "43"]);
    let ev = set.wait(2000).unwrap();
    assert!(
        matches!(
            ev.event_data,
            Some(nvml_wrapper::enums::event::XidError::Value(43))
        ),
        "{:?}",
        ev.event_data
    );
    assert_eq!(ev.device.index().unwrap(), 4);
    assert!(matches!(set.wait(50), Err(NvmlError::Timeout)));
    // ... and as NVRM logs it, with GPU 4's bus (9a on dgx-h100) and the
    // process that runs there.
    let bus = d4.pci_info().unwrap().bus;
    let logged = std::fs::read_to_string(kmsg).unwrap();
    let line = format!("NVRM: Xid (PCI:0000:{bus:02x}:00): 43, pid=");
    assert!(
        logged
            .lines()
            .any(|l| l.starts_with("4,0,") && l.contains(&line)),
        "{logged}"
    );
    // An XID for the kernel log alone, as real drivers raise 79: no event.
    let reply = ok(
        s,
        &["xid", "--gpu", "4", "--code", "79", "--log-only", "true"],
    );
    assert!(reply.contains("kernel log only"), "{reply}");
    assert!(matches!(set.wait(200), Err(NvmlError::Timeout)));
    let logged = std::fs::read_to_string(kmsg).unwrap();
    assert!(
        logged.lines().any(|l| l.starts_with("4,1,")
            && l.contains(&format!("(PCI:0000:{bus:02x}:00): 79, "))
            && l.ends_with("GPU has fallen off the bus.")),
        "{logged}"
    );

    // XID attributed to a MIG instance: raw nvmlEventSetWait_v2 keeps the ids.
    let d0 = nvml.device_by_index(0).unwrap();
    let set0 = d0
        .register_events(
            EventTypes::CRITICAL_XID_ERROR,
            nvml.create_event_set().unwrap(),
        )
        .unwrap();
    let waiter = {
        // SAFETY: the raw handle is only passed back to the library it came from, while its
        // NVML is alive.
        let raw = unsafe { set0.handle() };
        let lib_path = common::lib_path();
        // Wait on another thread while the CLI injects, as the exporter does.
        let raw = raw as usize;
        std::thread::spawn(move || {
            // SAFETY: loads the simulator's library, whose exports have the types
            // nvml-wrapper-sys declares.
            let lib = unsafe { nvml_wrapper_sys::bindings::NvmlLib::new(lib_path).unwrap() };
            let mut data: nvml_wrapper_sys::bindings::nvmlEventData_t =
                // SAFETY: a plain C struct; zero is a valid value.
                unsafe { std::mem::zeroed() };
            // SAFETY: the library's own export of nvml.h's type, called with handles it gave
            // and pointers to our own values, live for the call.
            let rc = unsafe { lib.nvmlEventSetWait_v2(raw as _, &raw mut data, 5000) };
            (
                rc,
                data.eventData,
                data.gpuInstanceId,
                data.computeInstanceId,
            )
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    ok(
        s,
        &[
            "xid",
            "--gpu",
            "0",
            "--code",
            "31",
            "--gpu-instance",
            "8",
            "--compute-instance",
            "0",
        ],
    );
    assert_eq!(waiter.join().unwrap(), (0, 31, 8, 0));
    assert!(
        std::fs::read_to_string(kmsg)
            .unwrap()
            .contains(" GPU-I:08 GPU-CI:00): 31, "),
        "the log names the MIG instance"
    );
    let (success, _, err) = cli(
        s,
        &["xid", "--gpu", "0", "--code", "31", "--gpu-instance", "99"],
    );
    assert!(!success && err.contains("no GPU instance 99"), "{err}");
}

/// ECC errors and remapped rows; page retirement refused on Hopper.
fn ecc_and_rows(nvml: &Nvml, s: &Path) {
    // ECC: volatile and aggregate both move; a DBE event fires.
    let d1 = nvml.device_by_index(1).unwrap();
    let vol = d1
        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        .unwrap();
    let agg = d1
        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
        .unwrap();
    ok(s, &["ecc", "--gpu", "1", "--count", "2"]);
    assert_eq!(
        d1.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap(),
        vol + 2
    );
    assert_eq!(
        d1.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .unwrap(),
        agg + 2
    );

    // Row remapping; page retirement is refused on Hopper.
    ok(s, &["remap-row", "--gpu", "5"]);
    let (mut c, mut u, mut p, mut f) = (0, 0, 0, 0);
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetRemappedRows(
            nvml.device_by_index(5).unwrap().handle(),
            &raw mut c,
            &raw mut u,
            &raw mut p,
            &raw mut f,
        )
    };
    assert_eq!((rc, c, u, p, f), (0, 0, 1, 1, 0));
    let (success, _, err) = cli(s, &["retire-page", "--gpu", "5"]);
    assert!(!success && err.contains("row remapping"), "{err}");
}

/// Throttle reasons, an NVLink link down with errors, a narrower PCIe link.
fn throttle_links_and_pcie(nvml: &Nvml, s: &Path) {
    // Throttling.
    let d6 = nvml.device_by_index(6).unwrap();
    ok(
        s,
        &[
            "throttle",
            "--gpu",
            "6",
            "--reasons",
            "hw-thermal-slowdown,hw-slowdown",
        ],
    );
    assert_eq!(d6.current_throttle_reasons().unwrap().bits() & 0x48, 0x48);
    assert!(d6.temperature(TemperatureSensor::Gpu).unwrap() >= 90);
    ok(s, &["throttle", "--gpu", "6", "--reasons", ""]);
    assert_eq!(d6.current_throttle_reasons().unwrap().bits() & 0x48, 0);

    // An NVLink link goes down and its errors grow; the PCIe link narrows.
    let d5 = nvml.device_by_index(5).unwrap();
    assert!(d5.link_wrapper_for(3).is_active().unwrap());
    ok(
        s,
        &["nvlink-state", "--gpu", "5", "--link", "3", "--up", "false"],
    );
    assert!(!d5.link_wrapper_for(3).is_active().unwrap());
    assert!(d5.link_wrapper_for(4).is_active().unwrap());
    let recoveries = |d: &nvml_wrapper::Device| {
        d.link_wrapper_for(3)
            .error_counter(nvml_wrapper::enum_wrappers::nv_link::ErrorCounter::DlRecovery)
            .unwrap()
    };
    let before = recoveries(&d5);
    ok(
        s,
        &[
            "nvlink-errors",
            "--gpu",
            "5",
            "--link",
            "3",
            "--counter",
            "recovery",
            "--count",
            "4",
        ],
    );
    assert_eq!(recoveries(&d5), before + 4);
    ok(
        s,
        &["nvlink-state", "--gpu", "5", "--link", "3", "--up", "true"],
    );
    assert!(d5.link_wrapper_for(3).is_active().unwrap());
    let replays = d5.pcie_replay_counter().unwrap();
    ok(
        s,
        &["pcie", "--gpu", "5", "--width", "8", "--replays", "50"],
    );
    assert_eq!(d5.current_pcie_link_width().unwrap(), 8);
    assert_eq!(d5.max_pcie_link_width().unwrap(), 16);
    assert_eq!(d5.pcie_replay_counter().unwrap(), replays + 50);
    let (accepted, _, err) = cli(s, &["pcie", "--gpu", "5", "--width", "32"]);
    assert!(!accepted && err.contains("outside"), "{err}");
}

/// Fabric registration, the SRAM threshold and the remapper histogram.
fn fabric_sram_and_histogram(nvml: &Nvml, s: &Path) {
    // Fabric registration, the SRAM RMA flag and the remapper histogram,
    // through raw calls (nvml-wrapper 0.13 wraps none of them).
    let lib = nvml.lib();
    let d5 = nvml.device_by_index(5).unwrap();
    // SAFETY: the raw handle is only passed back to the library it came from, while its NVML
    // is alive.
    let h5 = unsafe { d5.handle() };
    let fabric = |h| {
        let mut info: nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_t =
            // SAFETY: a plain C struct; zero is a valid value.
            unsafe { std::mem::zeroed() };
        // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
        // pointers to our own values, live for the call.
        let rc = unsafe { lib.nvmlDeviceGetGpuFabricInfo.as_ref().unwrap()(h, &raw mut info) };
        assert_eq!(rc, 0);
        (info.state, info.status)
    };
    assert_eq!(
        fabric(h5),
        (3, 0),
        "an H100 on an NVSwitch fabric is registered"
    );
    ok(s, &["fabric", "--gpu", "5", "--state", "in-progress"]);
    assert_eq!(fabric(h5).0, 2);
    ok(
        s,
        &[
            "fabric",
            "--gpu",
            "5",
            "--state",
            "completed",
            "--registered",
            "false",
        ],
    );
    assert_eq!(fabric(h5), (3, 999));
    let sram = |h| {
        type Status = nvml_wrapper_sys::bindings::nvmlEccSramErrorStatus_v1_t;
        // SAFETY: a plain C struct; zero is a valid value.
        let mut st: Status = unsafe { std::mem::zeroed() };
        st.version = std::mem::size_of::<Status>() as u32 | 1 << 24;
        // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
        // pointers to our own values, live for the call.
        let rc = unsafe { lib.nvmlDeviceGetSramEccErrorStatus.as_ref().unwrap()(h, &raw mut st) };
        assert_eq!(rc, 0);
        st.bThresholdExceeded
    };
    assert_eq!(sram(h5), 0);
    ok(s, &["sram-threshold", "--gpu", "5"]);
    assert_eq!(sram(h5), 1);
    let histogram = |h| {
        let mut v: nvml_wrapper_sys::bindings::nvmlRowRemapperHistogramValues_t =
            // SAFETY: a plain C struct; zero is a valid value.
            unsafe { std::mem::zeroed() };
        // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
        // pointers to our own values, live for the call.
        let rc = unsafe { lib.nvmlDeviceGetRowRemapperHistogram.as_ref().unwrap()(h, &raw mut v) };
        (rc, [v.max, v.high, v.partial, v.low, v.none])
    };
    let (rc, before) = histogram(h5);
    assert_eq!(rc, 0);
    ok(s, &["remap-row", "--gpu", "5", "--failure", "true"]);
    let (_, after) = histogram(h5);
    assert_eq!(
        after[4], 1,
        "a failed remap leaves a bank with no spare rows: {after:?}"
    );
    assert_eq!(after.iter().sum::<u32>(), before.iter().sum::<u32>());
    // GPU 0 is in MIG mode: no histogram, as for remapped rows there.
    // SAFETY: the raw handle is only passed back to the library it came from, while its NVML
    // is alive.
    let h0 = unsafe { nvml.device_by_index(0).unwrap().handle() };
    assert_eq!(histogram(h0).0, 3, "NOT_SUPPORTED on a MIG-enabled GPU");
}

/// Load moves the P-state; processes start and stop.
fn load_and_processes(nvml: &Nvml, s: &Path) {
    // Load changes move the P-state.
    let d7 = nvml.device_by_index(7).unwrap();
    assert_eq!(d7.performance_state().unwrap(), PerformanceState::Eight);
    ok(s, &["load", "--gpu", "7", "--percent", "80"]);
    assert_eq!(d7.performance_state().unwrap(), PerformanceState::Zero);

    // Processes start and stop.
    ok(
        s,
        &[
            "process",
            "start",
            "--gpu",
            "7",
            "--pid",
            "777",
            "--name",
            "drill",
            "--memory-mib",
            "1024",
        ],
    );
    assert_eq!(
        d7.running_compute_processes()
            .unwrap()
            .iter()
            .map(|p| p.pid)
            .collect::<Vec<_>>(),
        vec![777]
    );
    assert_eq!(nvml.sys_process_name(777, 64).unwrap(), "drill");
    ok(s, &["process", "stop", "--pid", "777"]);
    // Names are truncated to the buffer, never inside a UTF-8 character.
    ok(
        s,
        &[
            "process",
            "start",
            "--gpu",
            "7",
            "--pid",
            "778",
            "--name",
            "entraînement",
            "--memory-mib",
            "10",
        ],
    );
    assert_eq!(nvml.sys_process_name(778, 7).unwrap(), "entra");
    assert_eq!(nvml.sys_process_name(778, 64).unwrap(), "entraînement");
    ok(s, &["process", "stop", "--pid", "778"]);
    let (success, _, err) = cli(
        s,
        &[
            "process",
            "start",
            "--gpu",
            "0",
            "--name",
            "x",
            "--memory-mib",
            "1",
            "--gpu-instance",
            "7",
            "--compute-instance",
            "1",
        ],
    );
    assert!(!success && err.contains("compute instance"), "{err}");
    assert!(d7.running_compute_processes().unwrap().is_empty());
}

/// Slow calls, then a hang released from outside.
fn slow_and_hung_calls(nvml: &Nvml, s: &Path) {
    // Slow calls, then a hang released from outside.
    let d3 = nvml.device_by_index(3).unwrap();
    ok(s, &["slow", "--gpu", "3", "--ms", "300"]);
    let t = Instant::now();
    d3.temperature(TemperatureSensor::Gpu).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    ok(s, &["slow", "--gpu", "3", "--ms", "0"]);
    ok(s, &["hang", "--gpu", "3"]);
    let t = Instant::now();
    let socket2 = s.to_path_buf();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        ok(&socket2, &["release", "--gpu", "3"]);
    });
    d3.power_usage().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "the call blocked until release"
    );
    releaser.join().unwrap();
}

/// A MIG reconfiguration invalidates the old MIG handles.
fn mig_reconfiguration(nvml: &Nvml, s: &Path) {
    let d0 = nvml.device_by_index(0).unwrap();
    // MIG reconfiguration invalidates old MIG handles.
    let old = d0.mig_device_by_index(0).unwrap();
    ok(
        s,
        &[
            "mig-reconfigure",
            "--gpu",
            "0",
            "--profiles",
            "4g.40gb,3g.40gb",
        ],
    );
    assert!(matches!(old.name(), Err(NvmlError::InvalidArg)));
    assert_eq!(
        d0.mig_device_by_index(0).unwrap().name().unwrap(),
        "NVIDIA H100 80GB HBM3 MIG 4g.40gb"
    );
    assert!(matches!(
        d0.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));
    let (success, _, err) = cli(
        s,
        &[
            "mig-reconfigure",
            "--gpu",
            "0",
            "--profiles",
            "4g.40gb,4g.40gb",
        ],
    );
    assert!(!success && err.contains("does not fit"), "{err}");
}

/// An operator's `nvidia-smi -mig 1|0`: refused on a busy GPU, activated
/// at once on an idle one (the utilization rates stop answering), or left
/// pending for a reset.
fn mig_mode(nvml: &Nvml, s: &Path) {
    let mode = |i: u32| {
        let m = nvml.device_by_index(i).unwrap().mig_mode().unwrap();
        (m.current, m.pending)
    };
    let (refused, _, err) = cli(s, &["mig-mode", "--gpu", "2", "--enabled", "true"]);
    assert!(!refused && err.contains("not idle"), "{err}");
    assert_eq!(mode(2), (0, 0));

    let d7 = nvml.device_by_index(7).unwrap();
    assert!(d7.utilization_rates().is_ok());
    ok(s, &["mig-mode", "--gpu", "7", "--enabled", "true"]);
    assert_eq!(mode(7), (1, 1));
    assert!(matches!(
        d7.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    ok(
        s,
        &[
            "mig-mode",
            "--gpu",
            "7",
            "--enabled",
            "false",
            "--activate",
            "false",
        ],
    );
    assert_eq!(mode(7), (1, 0), "pending until a reset");
    ok(s, &["mig-mode", "--gpu", "7", "--enabled", "false"]);
    assert_eq!(mode(7), (0, 0));
    assert!(d7.utilization_rates().is_ok());
}

/// A lost GPU, call counters over the socket, bad requests.
fn lost_gpu_calls_and_bad_requests(nvml: &Nvml, s: &Path) {
    // A lost GPU: every call fails, its handle stays.
    let d2 = nvml.device_by_index(2).unwrap();
    ok(s, &["lose", "--gpu", "2"]);
    assert!(matches!(
        d2.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(d2.memory_info(), Err(NvmlError::GpuLost)));
    assert_eq!(nvml.device_count().unwrap(), 8);

    // Call counters through the socket.
    let calls = ok(s, &["calls"]);
    let table: toml::Table = format!("calls = {}", calls.trim())
        .parse::<toml::Table>()
        .unwrap()["calls"]
        .as_table()
        .unwrap()
        .clone();
    assert!(
        table["nvmlDeviceGetTemperature"].as_integer().unwrap() >= 3,
        "{calls}"
    );
    assert!(table["nvmlInit_v2"].as_integer().unwrap() >= 1);

    // Bad requests get clear errors.
    let (success, _, err) = cli(s, &["xid", "--gpu", "99", "--code", "1"]);
    assert!(!success && err.contains("no GPU 99"), "{err}");
    let (success, _, err) = cli(s, &["explode"]);
    assert!(!success && err.contains("explode"), "{err}");
}

/// Driver unload: a new nvmlInit fails until the driver is back.
fn driver_unload(s: &Path) {
    // Driver unload: a new nvmlInit fails until the driver is back.
    ok(s, &["driver-unload"]);
    let second = Nvml::builder()
        .lib_path(common::lib_path().as_os_str())
        .init();
    assert!(
        matches!(second, Err(NvmlError::DriverNotLoaded)),
        "{:?}",
        second.err()
    );
    ok(s, &["driver-load"]);
    let second = common::init();
    assert_eq!(second.device_count().unwrap(), 8);
    drop(second);
}
