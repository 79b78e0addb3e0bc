//! The simulator's exports that are not NVML: a host process that loads
//! this library itself (the exporter's `--simulate`, tests and benchmarks
//! that start the sampler in-process) chooses the scenario here before its
//! `nvmlInit`, instead of setting `NVML_SIM_SCENARIO` in an environment
//! other threads may be reading, and reads why a choice or an `nvmlInit`
//! failed, to log it its own way. Independent NVML clients never call
//! them; for them the environment variable stays the way in, and errors
//! go to stderr.

use std::ffi::{c_char, c_uint, CStr};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::ffi::{guard, lock, INVALID_ARGUMENT};
use crate::{driver, scenario};

/// Selects the scenario (a built-in name or a file path, as
/// `NVML_SIM_SCENARIO` takes) that the next `nvmlInit` on an uninitialized
/// library builds; a null pointer or an empty string returns to the
/// environment's choice. The selection stays until changed, so a host that
/// re-initializes after a driver restart gets the same fleet. A library
/// already initialized keeps its fleet until its last `nvmlShutdown`.
///
/// The scenario is checked here, with the driver personality and time
/// scale the environment sets: one that `nvmlInit` could not build is
/// refused with `NVML_ERROR_INVALID_ARGUMENT`, the selection stays as it
/// was, and `nvml_sim_last_error` says why. From the first call on, the
/// library's errors are kept for `nvml_sim_last_error` instead of being
/// written to stderr.
///
/// Returns `NVML_SUCCESS`, or `NVML_ERROR_INVALID_ARGUMENT` for a name
/// that is not UTF-8 or a scenario that cannot be loaded.
///
/// # Safety
/// `scenario` is null or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nvml_sim_select_scenario(scenario: *const c_char) -> nvmlReturn_t {
    guard(|| {
        lock().host_reports = true;
        let key = if scenario.is_null() {
            None
        } else {
            let Ok(s) = CStr::from_ptr(scenario).to_str() else {
                lock().last_error = Some("the scenario name is not UTF-8".into());
                return Err(INVALID_ARGUMENT);
            };
            Some(s.to_string()).filter(|s| !s.trim().is_empty())
        };
        if let Err(e) = check(key.as_deref()) {
            lock().last_error = Some(e);
            return Err(INVALID_ARGUMENT);
        }
        lock().selected_scenario.clone_from(&key);
        // The host resolves NVML's symbols next (nvml-wrapper does, before
        // its nvmlInit): the symbol table must already be this driver's.
        apply_early(key.as_deref());
        Ok(())
    })
}

/// Copies the message of the last failed selection or `nvmlInit` (empty
/// when none failed) into `buf` of `len` bytes, NUL-terminated, cut at a
/// character boundary to fit.
///
/// Returns `NVML_SUCCESS`, or `NVML_ERROR_INVALID_ARGUMENT` for a null
/// `buf` or a `len` of 0.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nvml_sim_last_error(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    guard(|| {
        if buf.is_null() || len == 0 {
            return Err(INVALID_ARGUMENT);
        }
        let message = lock().last_error.clone().unwrap_or_default();
        let mut end = message.len().min(len as usize - 1);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        std::ptr::copy_nonoverlapping(message.as_ptr().cast::<c_char>(), buf, end);
        *buf.add(end) = 0;
        Ok(())
    })
}

/// Whether `nvmlInit` could build scenario `key` (the environment's choice
/// for `None`) as the environment stands: the scenario, the driver
/// personality, the time scale.
fn check(key: Option<&str>) -> Result<(), String> {
    let key = key_or_environment(key);
    let scenario = scenario::load(&key).map_err(|e| format!("bad scenario: {e}"))?;
    driver::resolve(scenario.driver.as_deref()).map_err(|e| format!("bad driver: {e}"))?;
    crate::ffi::env_scale()?;
    Ok(())
}

/// The scenario a key names, the environment's or the default when none.
fn key_or_environment(key: Option<&str>) -> String {
    key.map(str::to_string)
        .or_else(|| std::env::var("NVML_SIM_SCENARIO").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| scenario::DEFAULT.to_string())
}

/// Best effort before any `nvmlInit`: the personality of the scenario the
/// environment or a host selected, with errors left for `nvmlInit` to
/// report.
pub fn apply_early(scenario_key: Option<&str>) {
    let p = scenario::load(&key_or_environment(scenario_key))
        .ok()
        .and_then(|s| driver::resolve(s.driver.as_deref()).ok())
        .unwrap_or_default();
    driver::apply(p);
}

/// Runs when the dynamic loader maps the library, before `dlopen` returns:
/// nvml-wrapper resolves every symbol right after, before its `nvmlInit`.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| apply_early(None));
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
