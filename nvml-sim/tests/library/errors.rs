//! Error codes at the C boundary: before init, ref-counted init/shutdown,
//! null pointers, bad handles, small buffers, and bad scenario files. One
//! test, because init state is process-wide.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper_sys::bindings::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const OK: u32 = 0;
const UNINITIALIZED: u32 = 1;
const INVALID_ARGUMENT: u32 = 2;
const NOT_SUPPORTED: u32 = 3;
const NOT_FOUND: u32 = 6;
const INSUFFICIENT_SIZE: u32 = 7;
const VERSION_MISMATCH: u32 = 25;
const UNKNOWN: u32 = 999;

#[allow(
    clippy::too_many_lines,
    reason = "one walk through the driver's states, each error code checked where it arises"
)]
#[test]
fn error_codes() {
    in_own_process!(error_codes);
    std::env::remove_var("NVML_SIM_CONTROL");
    // SAFETY: loads the simulator's library, whose exports have the types nvml-wrapper-sys
    // declares.
    let lib = unsafe { NvmlLib::new(common::lib_path()).unwrap() };
    // SAFETY: the library's own exports of nvml.h's types, called with handles it gave and
    // pointers to our own values and NUL-terminated strings it returned, live for each call.
    unsafe {
        // Before init.
        let mut n = 0;
        assert_eq!(lib.nvmlDeviceGetCount_v2(&raw mut n), UNINITIALIZED);
        assert_eq!(lib.nvmlShutdown(), UNINITIALIZED);
        let msg = CStr::from_ptr(lib.nvmlErrorString(UNINITIALIZED))
            .to_str()
            .unwrap();
        assert_eq!(msg, "Uninitialized");

        // A bad scenario file: init fails with UNKNOWN (README), then a good one works.
        let dir = std::env::temp_dir().join(format!("nvml-sim-errors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nload = 150\n").unwrap();
        std::env::set_var("NVML_SIM_SCENARIO", &bad);
        assert_eq!(lib.nvmlInit_v2(), UNKNOWN);
        assert_eq!(lib.nvmlDeviceGetCount_v2(&raw mut n), UNINITIALIZED);
        std::env::set_var("NVML_SIM_SCENARIO", dir.join("missing.toml"));
        assert_eq!(lib.nvmlInit_v2(), UNKNOWN);
        std::env::set_var("NVML_SIM_TIME_SCALE", "fast");
        std::env::set_var("NVML_SIM_SCENARIO", "workstation");
        assert_eq!(lib.nvmlInit_v2(), UNKNOWN);
        std::env::remove_var("NVML_SIM_TIME_SCALE");

        // Reference counting: two inits need two shutdowns.
        assert_eq!(lib.nvmlInit_v2(), OK);
        assert_eq!(lib.nvmlInitWithFlags(0), OK);
        assert_eq!(lib.nvmlShutdown(), OK);
        assert_eq!(lib.nvmlDeviceGetCount_v2(&raw mut n), OK);
        assert_eq!(n, 1);

        // Null pointers and bad handles.
        assert_eq!(lib.nvmlDeviceGetCount_v2(null_mut()), INVALID_ARGUMENT);
        let mut dev: nvmlDevice_t = null_mut();
        assert_eq!(lib.nvmlDeviceGetHandleByIndex_v2(0, &raw mut dev), OK);
        assert_eq!(
            lib.nvmlDeviceGetHandleByIndex_v2(1, std::ptr::addr_of_mut!(dev)),
            INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetHandleByIndex_v2(0, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetHandleByUUID(null(), &raw mut dev),
            INVALID_ARGUMENT
        );
        let mut temp = 0;
        assert_eq!(
            lib.nvmlDeviceGetTemperature(dev, 0, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetTemperature(null_mut(), 0, &raw mut temp),
            INVALID_ARGUMENT
        );
        assert_eq!(
            lib.nvmlDeviceGetTemperature(0xdead_beef as nvmlDevice_t, 0, &raw mut temp),
            INVALID_ARGUMENT
        );
        assert_eq!(lib.nvmlDeviceGetTemperature(dev, 0, &raw mut temp), OK);
        let mut set: nvmlEventSet_t = null_mut();
        assert_eq!(
            lib.nvmlEventSetFree(0x1234 as nvmlEventSet_t),
            INVALID_ARGUMENT
        );
        assert_eq!(lib.nvmlEventSetCreate(&raw mut set), OK);
        assert_eq!(
            lib.nvmlDeviceRegisterEvents(dev, 8, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(lib.nvmlEventSetFree(set), OK);
        assert_eq!(lib.nvmlEventSetFree(set), INVALID_ARGUMENT);

        // Small buffers.
        let mut name = [0 as std::ffi::c_char; 96];
        assert_eq!(
            lib.nvmlDeviceGetName(dev, name.as_mut_ptr(), 8),
            INSUFFICIENT_SIZE
        );
        assert_eq!(lib.nvmlDeviceGetName(dev, name.as_mut_ptr(), 96), OK);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "NVIDIA GeForce RTX 4090"
        );
        assert_eq!(
            lib.nvmlSystemGetDriverVersion(name.as_mut_ptr(), 4),
            INSUFFICIENT_SIZE
        );
        let mut count = 0;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, &raw mut count, null_mut()),
            INSUFFICIENT_SIZE
        );
        assert_eq!(count, 1, "the needed size is written back");
        let mut gcount = 1;
        let mut procs: [nvmlProcessInfo_t; 1] = std::mem::zeroed();
        assert_eq!(
            lib.nvmlDeviceGetGraphicsRunningProcesses_v3(dev, &raw mut gcount, procs.as_mut_ptr()),
            INSUFFICIENT_SIZE
        );
        assert_eq!(gcount, 2);

        // Versioned structs check their version.
        let mut mem: nvmlMemory_v2_t = std::mem::zeroed();
        assert_eq!(
            lib.nvmlDeviceGetMemoryInfo_v2(dev, &raw mut mem),
            VERSION_MISMATCH
        );
        mem.version = 0x0200_0028;
        assert_eq!(lib.nvmlDeviceGetMemoryInfo_v2(dev, &raw mut mem), OK);
        assert_eq!(mem.total, mem.reserved + mem.used + mem.free);

        // The consumer card lacks what a real one lacks.
        let (mut cur, mut pend) = (0, 0);
        assert_eq!(
            lib.nvmlDeviceGetEccMode(dev, &raw mut cur, &raw mut pend),
            NOT_SUPPORTED
        );
        assert_eq!(
            lib.nvmlDeviceGetMigMode(dev, &raw mut cur, &raw mut pend),
            NOT_SUPPORTED
        );
        assert_eq!(
            lib.nvmlDeviceGetNvLinkState(dev, 0, &raw mut cur),
            NOT_SUPPORTED
        );
        let mut serial = [0 as std::ffi::c_char; 32];
        assert_eq!(
            lib.nvmlDeviceGetSerial(dev, serial.as_mut_ptr(), 32),
            NOT_SUPPORTED
        );
        let mut f: nvmlFieldValue_t = std::mem::zeroed();
        f.fieldId = field_id::NVML_FI_DEV_MEMORY_TEMP;
        assert_eq!(lib.nvmlDeviceGetFieldValues(dev, 1, &raw mut f), OK);
        assert_eq!(f.nvmlReturn, NOT_SUPPORTED);
        assert_eq!(
            lib.nvmlDeviceGetFieldValues(dev, 0, &raw mut f),
            INVALID_ARGUMENT
        );
        let mut support: nvmlGpmSupport_t = std::mem::zeroed();
        support.version = NVML_GPM_SUPPORT_VERSION;
        assert_eq!(lib.nvmlGpmQueryDeviceSupport(dev, &raw mut support), OK);
        assert_eq!(support.isSupportedDevice, 0);
        let mut fan = 0;
        assert_eq!(lib.nvmlDeviceGetFanSpeed_v2(dev, 0, &raw mut fan), OK);
        assert!(fan > 0 && fan <= 100);
        let mut display = 0;
        assert_eq!(lib.nvmlDeviceGetDisplayActive(dev, &raw mut display), OK);
        assert_eq!(display, 1);
        let mut pid_name = [0 as std::ffi::c_char; 64];
        assert_eq!(
            lib.nvmlSystemGetProcessName(424_242, pid_name.as_mut_ptr(), 64),
            NOT_FOUND
        );

        // After the last shutdown everything is uninitialized again.
        assert_eq!(lib.nvmlShutdown(), OK);
        assert_eq!(
            lib.nvmlDeviceGetTemperature(dev, 0, &raw mut temp),
            UNINITIALIZED
        );
        assert_eq!(lib.nvmlDeviceGetCount_v2(&raw mut n), UNINITIALIZED);
        std::fs::remove_dir_all(&dir).ok();
    }
}
