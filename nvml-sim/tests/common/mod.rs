//! Shared helpers: where the built simulator lives, and loading it the way
//! the exporter does (`Nvml::builder().lib_path`).
#![allow(dead_code)]

use std::path::PathBuf;

/// `target/<profile>/libnvml_sim.so`, next to the `nvml-sim` binary that
/// cargo builds for these tests (building the package builds the cdylib).
pub fn lib_path() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_nvml-sim"));
    let so = bin.parent().unwrap().join("libnvml_sim.so");
    assert!(
        so.exists(),
        "{} missing: run `cargo build -p nvml-sim`",
        so.display()
    );
    so
}

pub fn cli_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nvml-sim"))
}

/// Initializes NVML on the simulator. The scenario variables must be set
/// before the first init of the process (tests in one file share a fleet).
pub fn init() -> nvml_wrapper::Nvml {
    nvml_wrapper::Nvml::builder()
        .lib_path(lib_path().as_os_str())
        .init()
        .expect("nvmlInit on the simulator")
}

/// `nvmlDeviceGetFieldValues` with scope ids, which nvml-wrapper's
/// `field_values_for` always sends as 0.
#[allow(unsafe_code)]
pub fn raw_fields(
    nvml: &nvml_wrapper::Nvml,
    d: &nvml_wrapper::Device,
    req: &[(u32, u32)],
) -> Vec<nvml_wrapper_sys::bindings::nvmlFieldValue_t> {
    let mut v: Vec<nvml_wrapper_sys::bindings::nvmlFieldValue_t> = req
        .iter()
        .map(|&(id, scope)| {
            // SAFETY: plain C struct; all-zero is valid.
            let mut f: nvml_wrapper_sys::bindings::nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            f.fieldId = id;
            f.scopeId = scope;
            f
        })
        .collect();
    // SAFETY: `v` holds `len` entries; the handle is nvml-wrapper's.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetFieldValues(d.handle(), v.len() as i32, v.as_mut_ptr())
    };
    assert_eq!(rc, 0);
    v
}

/// A MIG device's GPU and compute instance ids (not wrapped by
/// nvml-wrapper).
#[allow(unsafe_code)]
pub fn instance_ids(nvml: &nvml_wrapper::Nvml, m: &nvml_wrapper::Device) -> (u32, u32) {
    let (mut gi, mut ci) = (u32::MAX, u32::MAX);
    // SAFETY: a valid handle and out-pointers.
    unsafe {
        assert_eq!(
            nvml.lib()
                .nvmlDeviceGetGpuInstanceId(m.handle(), &raw mut gi),
            0
        );
        assert_eq!(
            nvml.lib()
                .nvmlDeviceGetComputeInstanceId(m.handle(), &raw mut ci),
            0
        );
    }
    (gi, ci)
}

/// The `nvml-sim` CLI against the control socket: (success, stdout,
/// stderr).
pub fn cli(socket: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(cli_path())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`cli`] that must succeed: its stdout.
pub fn ok(socket: &std::path::Path, args: &[&str]) -> String {
    let (success, out, err) = cli(socket, args);
    assert!(success, "nvml-sim {args:?} failed: {err}");
    out
}
