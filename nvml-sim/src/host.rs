//! The simulator's exports that are not NVML: a host process that loads
//! this library itself (the exporter's `--simulate`, tests and benchmarks
//! that start the sampler in-process) chooses the scenario here before its
//! `nvmlInit`, instead of setting `NVML_SIM_SCENARIO` in an environment
//! other threads may be reading, and reads why a choice or an `nvmlInit`
//! failed and what the scenario's loader changed, to log them its own way.
//! Independent NVML clients never call them; for them the environment
//! variable stays the way in, and errors and warnings go to stderr.

use std::ffi::{c_char, c_uint, CStr};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::ffi::{guard, INVALID_ARGUMENT};
use crate::state::lock;

/// Selects the scenario (a built-in name or a file path, as
/// `NVML_SIM_SCENARIO` takes) that the next `nvmlInit` on an uninitialized
/// library builds; a null pointer or an empty string returns to the
/// environment's choice. The selection stays until changed, so a host that
/// re-initializes after a driver restart gets the same fleet. A library
/// already initialized keeps its fleet until its last `nvmlShutdown`.
///
/// The scenario is checked here, with the driver version and time scale
/// the environment sets: one that `nvmlInit` could not build is refused,
/// the selection stays as it was, and `nvml_sim_last_error` says why. From
/// the first call on, the library's errors are kept for
/// `nvml_sim_last_error` instead of being written to stderr.
///
/// Returns `NVML_SUCCESS`, or `NVML_ERROR_INVALID_ARGUMENT` for a name
/// that is not UTF-8 or a scenario that cannot be built.
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
            lock().last_error = Some(e.into_message());
            return Err(INVALID_ARGUMENT);
        }
        crate::settings::select_scenario(key);
        // The host resolves NVML's symbols next (nvml-wrapper does, before
        // its nvmlInit): the symbol table must already be this driver's.
        crate::driver::apply_early();
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
        copy_out(&message, buf, len);
        Ok(())
    })
}

/// Copies the warnings of the scenario last selected (identifiers given
/// twice and made unique, an excerpt of a capture, values an import
/// rounded), one a line as `file:line: message`, into `buf` of `len`
/// bytes, NUL-terminated, cut at a character boundary to fit; empty when
/// there are none. The host logs them: the library prints them only for
/// independent clients.
///
/// Returns `NVML_SUCCESS`, or `NVML_ERROR_INVALID_ARGUMENT` for a null
/// `buf` or a `len` of 0.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nvml_sim_last_warnings(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    guard(|| {
        if buf.is_null() || len == 0 {
            return Err(INVALID_ARGUMENT);
        }
        let text = lock().last_warnings.join("\n");
        copy_out(&text, buf, len);
        Ok(())
    })
}

/// `text` into `buf` of `len` (> 0) bytes, NUL-terminated, cut at a
/// character boundary to fit.
///
/// # Safety
/// `buf` points to `len` writable bytes.
unsafe fn copy_out(text: &str, buf: *mut c_char, len: c_uint) {
    let mut end = text.len().min(len as usize - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, end);
    *buf.add(end) = 0;
}

/// Whether `nvmlInit` could build scenario `key` (the environment's choice
/// for `None`) as the environment stands: the scenario, the driver
/// personality, the time scale.
fn check(key: Option<&str>) -> Result<(), crate::value::Invalid> {
    let key = key.map_or_else(crate::settings::scenario_key, str::to_string);
    lock().last_warnings.clear();
    let scenario = crate::scenario::load_kept(&key).map_err(|e| format!("bad scenario: {e}"))?;
    lock().last_warnings = scenario.warnings.iter().map(ToString::to_string).collect();
    crate::driver::resolve(&scenario).map_err(|e| format!("bad driver: {e}"))?;
    crate::settings::time_scale()?;
    Ok(())
}
