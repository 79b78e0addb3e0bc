//! A scenario file written by hand: several models, `count`, MIG tables
//! with loads, automatic pids, and a timeline retiring a page on a V100.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper::enum_wrappers::device::RetirementCause;
use nvml_wrapper::error::NvmlError;

const SCENARIO: &str = r#"
name = "lab"

[[gpu]]
model = "v100-sxm2-32gb"
count = 2
load = 30
processes = [{ name = "legacy-job", memory_mib = 8000 }]

[[gpu]]
model = "a100-sxm4-80gb"
mig = [{ profile = "7g.80gb", load = 50 }]
mig_pending = false
processes = [{ pid = 5150, name = "big", memory_mib = 70000, mig_instance = 0 }]

[[timeline]]
at = 0
action = "retire-page"
gpu = 1
cause = "dbe"
"#;

#[test]
fn hand_written_scenario() {
    in_own_process!(hand_written_scenario);
    let dir = std::env::temp_dir().join(format!("nvml-sim-custom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lab.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    std::env::set_var("NVML_SIM_SCENARIO", &file);
    std::env::remove_var("NVML_SIM_CONTROL");
    std::env::remove_var("NVML_SIM_TIME_SCALE");
    let nvml = common::init();
    assert_eq!(nvml.device_count().unwrap(), 3);
    let v0 = nvml.device_by_index(0).unwrap();
    let v1 = nvml.device_by_index(1).unwrap();
    assert_eq!(v0.name().unwrap(), "Tesla V100-SXM2-32GB");
    assert!(v0
        .retired_pages(RetirementCause::DoubleBitEccError)
        .unwrap()
        .is_empty());
    assert!(!v0.are_pages_pending_retired().unwrap());
    let pages = v1
        .retired_pages(RetirementCause::DoubleBitEccError)
        .unwrap();
    assert_eq!(pages.len(), 1);
    assert!(v1.are_pages_pending_retired().unwrap());
    // V100 has no row remapping and no MIG.
    let (mut c, mut u, mut p, mut f) = (0, 0, 0, 0);
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetRemappedRows(
            v1.handle(),
            &raw mut c,
            &raw mut u,
            &raw mut p,
            &raw mut f,
        )
    };
    assert_eq!(rc, 3);
    assert!(matches!(v0.mig_mode(), Err(NvmlError::NotSupported)));
    // Automatic pids are distinct.
    let p0 = v0.running_compute_processes().unwrap();
    let p1 = v1.running_compute_processes().unwrap();
    assert_ne!(p0[0].pid, p1[0].pid);
    // The A100's single 7g.80gb instance holds the process and fits the GPU.
    let a = nvml.device_by_index(2).unwrap();
    let mode = a.mig_mode().unwrap();
    assert_eq!(
        (mode.current, mode.pending),
        (1, 0),
        "MIG is switched off at the next reset"
    );
    let m = a.mig_device_by_index(0).unwrap();
    assert_eq!(m.name().unwrap(), "NVIDIA A100-SXM4-80GB MIG 7g.80gb");
    let mem = m.memory_info().unwrap();
    assert!(mem.used >= 70000 * 1024 * 1024 && mem.total <= a.memory_info().unwrap().total);
    assert!(a.gpm_support().is_ok_and(|s| !s));
    std::fs::remove_dir_all(&dir).ok();
}
