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

fn pci_info(g: &Gpu) -> nvmlPciInfo_t {
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
