//! `nvmlDeviceGetPlatformInfo` and `nvmlDeviceGetModuleId` on the
//! `gb200-nvl72` tray (driver 580.173.02) through the raw C ABI: both
//! struct versions of the 12.8 header, the version check, and the values
//! of the real tray (NVIDIA/k8s-test-infra qx-gb200.xml: chassis serial
//! 1820000000001, slot 14, tray 4, host 1, modules 2, 1, 4, 3). One test:
//! the fleet is process-wide.

#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper_sys::bindings::{nvmlPlatformInfo_v1_t, nvmlPlatformInfo_v2_t};

const INVALID_ARGUMENT: u32 = 2;
const VERSION_MISMATCH: u32 = 25;

fn version<T>(v: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (v << 24)
}

#[test]
fn the_gb200_tray_names_its_rack_slot_tray_and_modules() {
    in_own_process!(the_gb200_tray_names_its_rack_slot_tray_and_modules);
    std::env::set_var("NVML_SIM_SCENARIO", "gb200-nvl72");
    std::env::remove_var("NVML_SIM_DRIVER");
    std::env::remove_var("NVML_SIM_CONTROL");
    let nvml = common::init();
    let lib = nvml.lib();
    // Both structs are the same 44 bytes (nvml.h 12.8, f420a32:1305-1332).
    assert_eq!(std::mem::size_of::<nvmlPlatformInfo_v1_t>(), 44);
    assert_eq!(std::mem::size_of::<nvmlPlatformInfo_v2_t>(), 44);

    for (i, module) in [2u8, 1, 4, 3].into_iter().enumerate() {
        let d = nvml.device_by_index(i as u32).unwrap();
        // SAFETY: a valid handle; plain C structs, zeroed then versioned.
        unsafe {
            let mut v2: nvmlPlatformInfo_v2_t = std::mem::zeroed();
            v2.version = version::<nvmlPlatformInfo_v2_t>(2);
            assert_eq!(lib.nvmlDeviceGetPlatformInfo(d.handle(), &raw mut v2), 0);
            assert_eq!(&v2.chassisSerialNumber[..14], b"1820000000001\0");
            assert_eq!(v2.chassisSerialNumber[14..], [0, 0]);
            assert_eq!(
                (v2.slotNumber, v2.trayIndex, v2.hostId, v2.moduleId),
                (14, 4, 1, module),
                "GPU {i}"
            );
            assert_eq!(v2.version, version::<nvmlPlatformInfo_v2_t>(2));

            // v1: the same bytes under the older names.
            let mut v1: nvmlPlatformInfo_v1_t = std::mem::zeroed();
            v1.version = version::<nvmlPlatformInfo_v1_t>(1);
            let rc = lib.nvmlDeviceGetPlatformInfo(d.handle(), (&raw mut v1).cast());
            assert_eq!(rc, 0);
            assert_eq!(&v1.rackGuid[..13], b"1820000000001");
            assert_eq!(
                (
                    v1.chassisPhysicalSlotNumber,
                    v1.computeSlotIndex,
                    v1.nodeIndex,
                    v1.moduleId
                ),
                (14, 4, 1, module)
            );

            let mut id = 0u32;
            assert_eq!(lib.nvmlDeviceGetModuleId(d.handle(), &raw mut id), 0);
            assert_eq!(id, u32::from(module));
        }
    }

    let d = nvml.device_by_index(0).unwrap();
    // SAFETY: as above; the wrong versions are what is under test.
    unsafe {
        for bad in [0, version::<nvmlPlatformInfo_v2_t>(3), 44, 2 << 24] {
            let mut v2: nvmlPlatformInfo_v2_t = std::mem::zeroed();
            v2.version = bad;
            let rc = lib.nvmlDeviceGetPlatformInfo(d.handle(), &raw mut v2);
            assert_eq!(rc, VERSION_MISMATCH, "version {bad:#x}");
            assert_eq!(v2.slotNumber, 0, "nothing written on a mismatch");
        }
        let rc = lib.nvmlDeviceGetPlatformInfo(d.handle(), std::ptr::null_mut());
        assert_eq!(rc, INVALID_ARGUMENT);
        assert_eq!(
            lib.nvmlDeviceGetModuleId(d.handle(), std::ptr::null_mut()),
            INVALID_ARGUMENT
        );
    }
}
