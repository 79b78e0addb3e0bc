//! Device identity (NVML reference, "Device Queries"): name, UUID, serial,
//! board and VBIOS, brand, architecture, index and PCI information. The
//! handle lookups are in `system.rs`, with device enumeration.
//!
//! Behaviour follows the NVML API reference for each function here and in
//! the other per-group files; where a board lacks a feature the answer is
//! NOT_SUPPORTED, as on real hardware.

use super::*;
use crate::fleet::Gpu;
use std::ffi::c_int;

/// A MIG device's name: the GPU's and its profile's, with the compute
/// instance's slices where it is smaller than the GPU instance
/// (`NVIDIA H200 MIG 1c.3g.71gb`).
fn mig_name(g: &Gpu, gi: u32, ci: u32) -> String {
    let Some(i) = g.instance(gi) else {
        return format!("{} MIG ?", g.model.name);
    };
    match i.compute_instance(ci) {
        Some(c) if c.slices < i.profile.slices => {
            format!("{} MIG {}c.{}", g.model.name, c.slices, i.profile.name)
        }
        _ => format!("{} MIG {}", g.model.name, i.profile.name),
    }
}

nvml_fn! {
    fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) {
        let s = with_dev(device, |sim, d, _| {
            let g = &sim.gpus[d.gpu as usize];
            Ok(match d.mig {
                Some((gi, ci, _)) => mig_name(g, gi, ci),
                None => g.model.name.clone(),
            })
        })?;
        out_str(name, length, &s)
    }
}

nvml_fn! {
    fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) {
        let s = with_dev(device, |sim, d, _| {
            let g = &sim.gpus[d.gpu as usize];
            Ok(match d.mig {
                Some((gi, ci, _)) => g
                    .instance(gi)
                    .and_then(|i| i.compute_instance(ci))
                    .map(|c| c.uuid.clone())
                    .ok_or(INVALID_ARGUMENT)?,
                None => g.uuid.clone(),
            })
        })?;
        out_str(uuid, length, &s)
    }
}

nvml_fn! {
    /// Serial numbers exist on boards with an inforom only (NVML reference: "For all products with an inforom").
    fn nvmlDeviceGetSerial(device: nvmlDevice_t, serial: *mut c_char, length: c_uint) {
        let s = with_dev(device, |sim, d, _| {
            let g = &sim.gpus[d.gpu as usize];
            g.serial.clone().ok_or(NOT_SUPPORTED)
        })?;
        out_str(serial, length, &s)
    }
}

nvml_fn! {
    fn nvmlDeviceGetBoardPartNumber(device: nvmlDevice_t, partNumber: *mut c_char, length: c_uint) {
        let s = with_gpu(device, |g, _| g.model.board_part.clone().ok_or(NOT_SUPPORTED))?;
        out_str(partNumber, length, &s)
    }
}

nvml_fn! {
    fn nvmlDeviceGetVbiosVersion(device: nvmlDevice_t, version: *mut c_char, length: c_uint) {
        let s = with_gpu(device, |g, _| g.model.vbios.clone().ok_or(NOT_SUPPORTED))?;
        out_str(version, length, &s)
    }
}

nvml_fn! {
    fn nvmlDeviceGetInforomVersion(device: nvmlDevice_t, object: nvmlInforomObject_t, version: *mut c_char, length: c_uint) {
        // nvmlInforomObject_t: OEM, ECC, power, DEN.
        let s = with_gpu(device, |g, _| match g.model.inforom.get(object as usize) {
            Some(v) => v.clone().ok_or(NOT_SUPPORTED),
            None => Err(INVALID_ARGUMENT),
        })?;
        out_str(version, length, &s)
    }
}

nvml_fn! {
    fn nvmlDeviceGetBrand(device: nvmlDevice_t, type_: *mut nvmlBrandType_t) {
        nonnull(type_)?;
        let v = with_dev(device, |sim, d, _| Ok(sim.gpus[d.gpu as usize].model.brand))?;
        out(type_, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetArchitecture(device: nvmlDevice_t, arch: *mut nvmlDeviceArchitecture_t) {
        nonnull(arch)?;
        let v = with_dev(device, |sim, d, _| Ok(sim.gpus[d.gpu as usize].model.arch))?;
        out(arch, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetCudaComputeCapability(device: nvmlDevice_t, major: *mut c_int, minor: *mut c_int) {
        nonnull(major)?;
        nonnull(minor)?;
        let (a, b) = with_dev(device, |sim, d, _| Ok(sim.gpus[d.gpu as usize].model.cuda_cc))?;
        out(major, a)?;
        out(minor, b)
    }
}

nvml_fn! {
    fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) {
        nonnull(index)?;
        let v = with_gpu(device, |g, _| Ok(g.index))?;
        out(index, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minorNumber: *mut c_uint) {
        nonnull(minorNumber)?;
        let v = with_gpu(device, |g, _| g.minor.ok_or(NOT_SUPPORTED))?;
        out(minorNumber, v)
    }
}

pub(crate) fn pci_info(g: &Gpu) -> nvmlPciInfo_t {
    // SAFETY: plain C struct of integers and char arrays; all-zero is valid.
    let mut p: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
    fill_chars(&mut p.busIdLegacy, &g.pci.bus_id_legacy());
    fill_chars(&mut p.busId, &g.pci.bus_id());
    p.domain = g.pci.domain;
    p.bus = g.pci.bus;
    p.device = g.pci.device;
    p.pciDeviceId = g.model.pci_device_id;
    p.pciSubSystemId = g.model.pci_subsystem_id;
    p
}

nvml_fn! {
    fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        nonnull(pci)?;
        let v = with_dev(device, |sim, d, _| Ok(pci_info(&sim.gpus[d.gpu as usize])))?;
        out(pci, v)
    }
}

// Where a GPU sits in its rack (NVML reference, "Device Queries":
// `nvmlDeviceGetPlatformInfo`, `nvmlDeviceGetModuleId`): read with the
// rest of the GPU's identity, as the sampler and the capture do.

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
