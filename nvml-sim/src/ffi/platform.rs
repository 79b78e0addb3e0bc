//! Where a GPU sits in its rack (NVML reference, "Device Queries":
//! `nvmlDeviceGetPlatformInfo`, `nvmlDeviceGetModuleId`).

use super::*;

/// The slot or tray byte of a GPU in no chassis slot. nvidia-smi prints
/// N/A for both on the HGX B200 (qx-b200.xml) but 0 on an RTX 5090 and an
/// RTX PRO 6000 (tests/corpus/gls, telegraf), so N/A is a byte other than
/// 0; nvml.h does not say which. **Not verified**: 0xFF, the all-ones
/// "invalid" of NVML's other unsigned char fields.
pub const NO_SLOT: u8 = 0xFF;

nvml_fn! {
    /// The GPU module's id on its baseboard (12.2 header: every branch
    /// modelled). The real captures answer it on every board, PCIe cards
    /// included (L40S, T4: 1), so no board answers NOT_SUPPORTED.
    fn nvmlDeviceGetModuleId(device: nvmlDevice_t, moduleId: *mut c_uint) {
        nonnull(moduleId)?;
        let id = with_gpu(device, |g, _| Ok(g.module_id))?;
        out(moduleId, id)
    }
}

nvml_fn! {
    /// The rack, tray and slot of the GPU (12.8 header, R570; `absent`
    /// before). Both structs of that header are taken: `nvmlPlatformInfo_v1`
    /// and `_v2` have the same 44-byte layout, v2 renaming the fields (rack
    /// GUID -> chassis serial number, chassis physical slot -> slot number,
    /// compute slot -> tray index, node index -> host id), so one write
    /// serves both. Any other version answers ARGUMENT_VERSION_MISMATCH;
    /// a GPU whose scenario gives no `platform` answers NOT_SUPPORTED, as
    /// Hopper and older boards do (qx-h100.xml prints N/A for every row
    /// but the module id).
    fn nvmlDeviceGetPlatformInfo(device: nvmlDevice_t, platformInfo: *mut nvmlPlatformInfo_t) {
        nonnull(platformInfo)?;
        let version = (*platformInfo).version;
        if version != struct_version::<nvmlPlatformInfo_v1_t>(1)
            && version != struct_version::<nvmlPlatformInfo_v2_t>(2)
        {
            return Err(VERSION_MISMATCH);
        }
        let (p, module) = with_gpu(device, |g, _| {
            g.platform.clone().map(|p| (p, g.module_id)).ok_or(NOT_SUPPORTED)
        })?;
        let mut serial = [0u8; 16];
        let bytes = p.chassis_serial.as_deref().unwrap_or("").as_bytes();
        let n = bytes.len().min(serial.len());
        serial[..n].copy_from_slice(&bytes[..n]);
        out(platformInfo, nvmlPlatformInfo_v2_t {
            version,
            // The InfiniBand GUID is not modelled: all zero, as the driver
            // leaves what the platform does not report.
            ibGuid: [0; 16],
            chassisSerialNumber: serial,
            slotNumber: p.slot.unwrap_or(NO_SLOT),
            trayIndex: p.tray.unwrap_or(NO_SLOT),
            hostId: p.host_id.unwrap_or(0),
            peerType: p.peer_type.unwrap_or(0),
            moduleId: u8::try_from(module).unwrap_or(u8::MAX),
        })
    }
}
