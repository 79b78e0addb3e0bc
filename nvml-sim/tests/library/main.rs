//! nvml-sim's tests that load `libnvml_sim.so` into their process, in one
//! test binary: each former test file is a module (`cargo test -p nvml-sim
//! --test library wrapper::`), and the crate graph is linked once instead
//! of once per file.
//!
//! The library's fleet is built from the environment at a process's first
//! `nvmlInit`, and its init state, clock and control socket are per
//! process: each test runs in a child process of this binary, alone
//! (`in_own_process!`, the exporter's `tests/sampler/child.rs`), as it ran
//! in a binary of its own before.

#[macro_use]
#[path = "../../../tests/sampler/child.rs"]
mod child;
#[path = "../common/mod.rs"]
mod common;

mod blackwell;
mod c2c;
mod control;
mod custom_scenario;
mod errors;
mod host_selection;
mod latency;
mod platform;
mod process_utilization;
mod replayed_host;
mod timeline;
mod wrapper;
