//! The simulator's one export that is not NVML: a host process that loads
//! this library itself (the exporter's `--simulate`, tests and benchmarks
//! that start the sampler in-process) chooses the scenario here before its
//! `nvmlInit`, instead of setting `NVML_SIM_SCENARIO` in an environment
//! other threads may be reading. Independent NVML clients never call it;
//! for them the environment variable stays the way in.

use std::ffi::{c_char, CStr};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::ffi::{guard, INVALID_ARGUMENT};

/// Selects the scenario (a built-in name or a file path, as
/// `NVML_SIM_SCENARIO` takes) that the next `nvmlInit` on an uninitialized
/// library builds; a null pointer or an empty string returns to the
/// environment's choice. The selection stays until changed, so a host that
/// re-initializes after a driver restart gets the same fleet. A library
/// already initialized keeps its fleet until its last `nvmlShutdown`.
///
/// Returns `NVML_SUCCESS`, or `NVML_ERROR_INVALID_ARGUMENT` for a name
/// that is not UTF-8.
///
/// # Safety
/// `scenario` is null or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nvml_sim_select_scenario(scenario: *const c_char) -> nvmlReturn_t {
    guard(|| {
        let key = if scenario.is_null() {
            None
        } else {
            let s = CStr::from_ptr(scenario)
                .to_str()
                .map_err(|_| INVALID_ARGUMENT)?;
            Some(s.to_string()).filter(|s| !s.trim().is_empty())
        };
        crate::settings::select_scenario(key);
        // The host resolves NVML's symbols next (nvml-wrapper does, before
        // its nvmlInit): the symbol table must already be this driver's.
        crate::driver::apply_early();
        Ok(())
    })
}
