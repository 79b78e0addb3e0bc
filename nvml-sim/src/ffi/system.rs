//! System queries and device enumeration.

use super::*;
use std::ffi::c_int;

nvml_fn! {
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        drop(initialized()?);
        out_str(version, length, &crate::driver::current().version)
    }
}

nvml_fn! {
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        // Answered without init on real drivers too.
        out_str(version, length, &crate::driver::current().nvml_version())
    }
}

nvml_fn! {
    fn nvmlSystemGetCudaDriverVersion(cudaDriverVersion: *mut c_int) {
        system_call()?;
        out(cudaDriverVersion, crate::driver::current().cuda)
    }
}

nvml_fn! {
    fn nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion: *mut c_int) {
        system_call()?;
        out(cudaDriverVersion, crate::driver::current().cuda)
    }
}

nvml_fn! {
    /// NVML reference: the name is truncated to `length`; unknown pids give NOT_FOUND.
    fn nvmlSystemGetProcessName(pid: c_uint, name: *mut c_char, length: c_uint) {
        let st = initialized()?;
        nonnull(name)?;
        if length == 0 {
            return Err(INVALID_ARGUMENT);
        }
        let sim = st.sim.as_ref().ok_or(UNINITIALIZED)?;
        let found = sim.process_name(pid).ok_or(NOT_FOUND)?;
        let mut end = found.len().min(length as usize - 1);
        while !found.is_char_boundary(end) {
            end -= 1;
        }
        let s = &found[..end];
        out_str(name, length, s)
    }
}

fn count() -> R<u32> {
    let st = initialized()?;
    Ok(st.sim.as_ref().map(|s| s.gpus.len() as u32).unwrap_or(0))
}

nvml_fn! {
    fn nvmlDeviceGetCount_v2(deviceCount: *mut c_uint) {
        nonnull(deviceCount)?;
        out(deviceCount, count()?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetCount(deviceCount: *mut c_uint) {
        nonnull(deviceCount)?;
        out(deviceCount, count()?)
    }
}

fn by_index(index: c_uint, device: *mut nvmlDevice_t) -> R {
    nonnull(device)?;
    if index >= count()? {
        return Err(INVALID_ARGUMENT);
    }
    // nvml.h: the count includes devices the caller may not open, whose
    // handles answer NO_PERMISSION (scenario `denied`).
    if initialized()?
        .sim
        .as_ref()
        .is_some_and(|s| s.denied.contains(&index))
    {
        return Err(NO_PERMISSION);
    }
    // The handle of a lost GPU stays valid and every call on it fails
    // with GPU_IS_LOST, as nvml.h documents for NVML_ERROR_GPU_IS_LOST.
    // SAFETY: `device` is the caller's out-pointer, which `out` checks for null; NVML's
    // contract is that it points to a writable handle.
    unsafe {
        out(
            device,
            device_handle(Dev {
                gpu: index,
                mig: None,
            }),
        )
    }
}

nvml_fn! {
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) { by_index(index, device) }
}

nvml_fn! {
    fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut nvmlDevice_t) { by_index(index, device) }
}

nvml_fn! {
    /// Accepts GPU and MIG UUIDs, as the real function does.
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) {
        let wanted = read_cstr(uuid)?;
        nonnull(device)?;
        let st = initialized()?;
        let sim = st.sim.as_ref().ok_or(UNINITIALIZED)?;
        for g in &sim.gpus {
            let mig = g.mig.as_ref().and_then(|m| {
                m.instances.iter().find_map(|i| {
                    i.compute.iter().find(|c| c.uuid == wanted).map(|c| (i.id, c.id, m.generation))
                })
            });
            if sim.denied.contains(&g.index) && (g.uuid == wanted || mig.is_some()) {
                return Err(NO_PERMISSION);
            }
            if g.uuid == wanted {
                return out(device, device_handle(Dev { gpu: g.index, mig: None }));
            }
            if mig.is_some() {
                return out(device, device_handle(Dev { gpu: g.index, mig }));
            }
        }
        Err(NOT_FOUND)
    }
}

fn by_bus_id(bus_id: *const c_char, device: *mut nvmlDevice_t) -> R {
    // SAFETY: `bus_id` is the caller's string, which `read_cstr` checks for null; NVML's
    // contract is that it is NUL-terminated.
    let wanted = unsafe { read_cstr(bus_id)? }.to_ascii_lowercase();
    nonnull(device)?;
    let st = initialized()?;
    let sim = st.sim.as_ref().ok_or(UNINITIALIZED)?;
    for g in &sim.gpus {
        let full = g.pci.bus_id().to_ascii_lowercase();
        let legacy = g.pci.bus_id_legacy().to_ascii_lowercase();
        let short = format!(
            "{:02x}:{:02x}.{:x}",
            g.pci.bus, g.pci.device, g.pci.function
        );
        if wanted == full || wanted == legacy || wanted == short {
            if sim.denied.contains(&g.index) {
                return Err(NO_PERMISSION);
            }
            // SAFETY: `device` is the caller's out-pointer, which `out` checks for null;
            // NVML's contract is that it points to a writable handle.
            return unsafe {
                out(
                    device,
                    device_handle(Dev {
                        gpu: g.index,
                        mig: None,
                    }),
                )
            };
        }
    }
    Err(NOT_FOUND)
}

nvml_fn! {
    fn nvmlDeviceGetHandleByPciBusId_v2(pciBusId: *const c_char, device: *mut nvmlDevice_t) { by_bus_id(pciBusId, device) }
}

nvml_fn! {
    fn nvmlDeviceGetHandleByPciBusId(pciBusId: *const c_char, device: *mut nvmlDevice_t) { by_bus_id(pciBusId, device) }
}

nvml_fn! {
    fn nvmlDeviceGetHandleBySerial(serial: *const c_char, device: *mut nvmlDevice_t) {
        let wanted = read_cstr(serial)?;
        nonnull(device)?;
        let st = initialized()?;
        let sim = st.sim.as_ref().ok_or(UNINITIALIZED)?;
        let g = sim.gpus.iter().find(|g| g.serial.as_deref() == Some(wanted)).ok_or(NOT_FOUND)?;
        if sim.denied.contains(&g.index) {
            return Err(NO_PERMISSION);
        }
        out(device, device_handle(Dev { gpu: g.index, mig: None }))
    }
}
