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

pub fn cli() -> PathBuf {
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
