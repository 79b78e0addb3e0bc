//! nvml-sim: a simulated NVIDIA driver. Built as `libnvml_sim.so`, it
//! exports the NVML C ABI (the declarations of `nvml-wrapper-sys`) for a
//! fleet described by a scenario, and accepts faults over a control socket.
//! See README.md.
//!
//! `unsafe` is allowed per module, where the C ABI is: the exports
//! (`ffi`, `host`), the capture of a real driver (`capture`) and the
//! symbol table a driver branch presents (`driver`); and on one function
//! elsewhere, glibc's `malloc_trim` after a scenario is built
//! (`scenario/kept.rs`); the rest of the crate denies it.

pub mod calls;
// `nvml-sim capture` calls a real driver's NVML through its C ABI.
#[allow(unsafe_code)]
pub mod capture;
pub mod control;
// Hiding the symbols a driver branch does not export: this library's own
// dynamic symbol table, edited in place, and an `.init_array` entry.
#[allow(unsafe_code)]
pub mod driver;
pub mod error;
pub mod fault;
// The NVML C ABI: raw pointers in every export.
#[allow(unsafe_code)]
pub mod ffi;
pub mod fleet;
// The exports a host process calls (`nvml_sim_select_scenario`, ...).
#[allow(unsafe_code)]
pub mod host;
pub mod identity;
pub mod import;
pub mod kmsg;
pub mod latency;
pub mod model;
pub mod personality;
pub mod scenario;
pub mod schema;
pub mod settings;
pub mod state;
pub mod value;

pub use ffi::clocks::*;
pub use ffi::ecc::*;
pub use ffi::events::*;
pub use ffi::fabric::*;
pub use ffi::fan::*;
pub use ffi::fields::*;
pub use ffi::gpm::*;
pub use ffi::info::*;
pub use ffi::memory::*;
pub use ffi::mig::*;
pub use ffi::mode::*;
pub use ffi::nvlink::*;
pub use ffi::pcie::*;
pub use ffi::power::*;
pub use ffi::processes::*;
pub use ffi::retirement::*;
pub use ffi::system::*;
pub use ffi::temperature::*;
pub use ffi::throttle::*;
pub use ffi::topology::*;
pub use ffi::utilization::*;
pub use ffi::{nvmlErrorString, nvmlInit, nvmlInitWithFlags, nvmlInit_v2, nvmlShutdown};
pub use host::{nvml_sim_last_error, nvml_sim_last_warnings, nvml_sim_select_scenario};
