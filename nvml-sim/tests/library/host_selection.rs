//! A host process chooses the scenario through `nvml_sim_select_scenario`
//! before `nvmlInit`, with no environment variable: the way the exporter's
//! `--simulate` and in-process samplers reach the simulator.

// Calls the simulator's C ABI directly, as NVML clients do.
#![allow(unsafe_code)]

use crate::common;

use std::ffi::{c_char, CString};

use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_SUCCESS as SUCCESS, nvmlReturn_t,
};

type Select = unsafe extern "C" fn(*const c_char) -> nvmlReturn_t;

fn select(lib: &libloading::Library, scenario: &[u8]) -> nvmlReturn_t {
    let key = CString::new(scenario).unwrap();
    // SAFETY: the export's signature (src/host.rs); `key` outlives the call.
    unsafe {
        let f = lib.get::<Select>(b"nvml_sim_select_scenario\0").unwrap();
        f(key.as_ptr())
    }
}

fn names(nvml: &nvml_wrapper::Nvml) -> Vec<String> {
    (0..nvml.device_count().unwrap())
        .map(|i| nvml.device_by_index(i).unwrap().name().unwrap())
        .collect()
}

#[test]
fn the_selected_scenario_is_built_at_the_next_init() {
    in_own_process!(the_selected_scenario_is_built_at_the_next_init);
    // SAFETY: the simulator's initializers have no preconditions.
    let lib = unsafe { libloading::Library::new(common::lib_path()) }.unwrap();

    assert_eq!(select(&lib, b"workstation"), SUCCESS);
    let nvml = common::init();
    let workstation = names(&nvml);
    assert_eq!(workstation.len(), 1, "{workstation:?}");
    // An initialized library keeps its fleet until its last shutdown...
    assert_eq!(select(&lib, b"dgx-a100"), SUCCESS);
    assert_eq!(names(&nvml), workstation);
    nvml.shutdown().unwrap();

    // ...and the next init builds the new choice.
    let nvml = common::init();
    let dgx = names(&nvml);
    assert_eq!(dgx.len(), 8, "{dgx:?}");
    assert!(dgx.iter().all(|n| n.contains("A100")), "{dgx:?}");
    nvml.shutdown().unwrap();

    assert_eq!(select(&lib, b"\xff\xfe"), INVALID_ARGUMENT);
    assert_eq!(last_error(&lib), "the scenario name is not UTF-8");

    // A scenario nvmlInit could not build is refused when chosen, with the
    // reason kept for the host to log; the choice stays as it was.
    assert_eq!(select(&lib, b"dgx-h1OO"), INVALID_ARGUMENT);
    let why = last_error(&lib);
    assert!(
        why.contains("dgx-h1OO") && why.contains("built-in scenarios are"),
        "{why}"
    );
    let nvml = common::init();
    assert_eq!(names(&nvml).len(), 8, "still dgx-a100");
    nvml.shutdown().unwrap();
}

type LastError = unsafe extern "C" fn(*mut c_char, std::ffi::c_uint) -> nvmlReturn_t;

fn last_error(lib: &libloading::Library) -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: the export's signature (src/host.rs); the buffer is 512 bytes.
    let ret = unsafe {
        let f = lib.get::<LastError>(b"nvml_sim_last_error\0").unwrap();
        f(buf.as_mut_ptr(), buf.len() as std::ffi::c_uint)
    };
    assert_eq!(ret, SUCCESS);
    // SAFETY: the export NUL-terminates within the buffer.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
