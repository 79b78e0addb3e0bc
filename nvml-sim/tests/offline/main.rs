//! nvml-sim's tests that use it as a Rust crate or run its CLI, and never
//! load `libnvml_sim.so` into their own process, in one test binary: each
//! former test file is a module (`cargo test -p nvml-sim --test offline
//! capture_import::`). The tests that load the library are modules of
//! `tests/library/`, each run in a child process of that binary: its fleet,
//! built from the environment at the first `nvmlInit`, is per process.

#[path = "../common/mod.rs"]
mod common;

mod capture_import;
mod cli_offline;
mod scenario_fuzz;
mod signatures;
