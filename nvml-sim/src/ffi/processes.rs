//! Running processes (NVML reference, "Device Queries"): compute, graphics
//! and MPS lists in every struct layout the claimed driver exports, and the
//! calls clients probe to choose a layout (driver model, confidential
//! compute memory, process detail list).

use super::*;
use crate::fault::ProcKind;

/// The compute or graphics list; `None`: the MPS list, the clients of the
/// GPU's MPS server (which the compute list holds too: `nvidia-smi` shows
/// them as type `M+C`).
fn processes(device: nvmlDevice_t, kind: Option<ProcKind>) -> R<Vec<nvmlProcessInfo_t>> {
    with_dev(device, |sim, d, _| {
        if d.mig.is_none() && sim.aggregate_withheld(d.gpu) {
            return Err(NO_PERMISSION);
        }
        let g = &sim.gpus[d.gpu as usize];
        let clients: Vec<u32> = crate::fleet::usage::mps_clients(g)
            .iter()
            .map(|p| p.pid)
            .collect();
        Ok(g.procs
            .iter()
            .filter(|p| match kind {
                Some(k) => p.kind.listed_as(k),
                None => clients.contains(&p.pid),
            })
            .filter(|p| match d.mig {
                Some((gi, ci, _)) => p.mig == Some((gi, ci)),
                None => true,
            })
            .map(|p| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.memory,
                gpuInstanceId: p.mig.map(|m| m.0).unwrap_or(u32::MAX),
                computeInstanceId: p.mig.map(|m| m.1).unwrap_or(u32::MAX),
            })
            .collect())
    })
}

/// The two-call protocol of the process queries (NVML reference): a count
/// too small gets INSUFFICIENT_SIZE with the needed count written back.
unsafe fn write_list<T>(count: *mut c_uint, infos: *mut T, items: Vec<T>) -> R {
    nonnull(count)?;
    let cap = *count as usize;
    *count = items.len() as u32;
    if items.is_empty() {
        return Ok(());
    }
    if cap < items.len() {
        return Err(INSUFFICIENT_SIZE);
    }
    if infos.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    for (i, item) in items.into_iter().enumerate() {
        infos.add(i).write(item);
    }
    Ok(())
}

/// The `_v3` entry R535 and R545 write: `nvmlProcessInfo_v2_t` plus
/// `usedGpuCcProtectedMemory`, 32 bytes, with no version bump (nvitop PR
/// #79, go-nvml issue #75).
#[repr(C)]
struct ProcessInfoCc {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
    used_gpu_cc_protected_memory: u64,
}

/// `_v3` lists in the entry layout of the claimed branch.
unsafe fn write_v3(
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
    list: Vec<nvmlProcessInfo_t>,
) -> R {
    if !crate::driver::current().branch.cc_process_entries {
        return write_list(count, infos, list);
    }
    let list = list
        .into_iter()
        .map(|p| ProcessInfoCc {
            pid: p.pid,
            used_gpu_memory: p.usedGpuMemory,
            gpu_instance_id: p.gpuInstanceId,
            compute_instance_id: p.computeInstanceId,
            used_gpu_cc_protected_memory: 0,
        })
        .collect();
    write_list(count, infos.cast::<ProcessInfoCc>(), list)
}

fn v1(list: Vec<nvmlProcessInfo_t>) -> Vec<nvmlProcessInfo_v1_t> {
    list.into_iter()
        .map(|p| nvmlProcessInfo_v1_t {
            pid: p.pid,
            usedGpuMemory: p.usedGpuMemory,
        })
        .collect()
}

nvml_fn! {
    fn nvmlDeviceGetComputeRunningProcesses_v3(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_t) {
        nonnull(infoCount)?;
        write_v3(infoCount, infos, processes(device, Some(ProcKind::Compute))?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_t) {
        nonnull(infoCount)?;
        write_v3(infoCount, infos, processes(device, Some(ProcKind::Graphics))?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMPSComputeRunningProcesses_v3(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_t) {
        nonnull(infoCount)?;
        write_v3(infoCount, infos, processes(device, None)?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetComputeRunningProcesses_v2(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        nonnull(infoCount)?;
        write_list(infoCount, infos, processes(device, Some(ProcKind::Compute))?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetGraphicsRunningProcesses_v2(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) {
        nonnull(infoCount)?;
        write_list(infoCount, infos, processes(device, Some(ProcKind::Graphics))?)
    }
}

nvml_fn! {
    fn nvmlDeviceGetComputeRunningProcesses(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) {
        nonnull(infoCount)?;
        write_list(infoCount, infos, v1(processes(device, Some(ProcKind::Compute))?))
    }
}

nvml_fn! {
    fn nvmlDeviceGetGraphicsRunningProcesses(device: nvmlDevice_t, infoCount: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) {
        nonnull(infoCount)?;
        write_list(infoCount, infos, v1(processes(device, Some(ProcKind::Graphics))?))
    }
}

nvml_fn! {
    /// Exported from R550 (absent on R535/R545 personalities, see
    /// driver.rs); its presence tells nvitop the `_v3` struct has no
    /// `usedGpuCcProtectedMemory` field.
    fn nvmlDeviceGetRunningProcessDetailList(device: nvmlDevice_t, plist: *mut nvmlProcessDetailList_t) {
        nonnull(plist)?;
        if (*plist).version != struct_version::<nvmlProcessDetailList_v1_t>(1) {
            return Err(VERSION_MISMATCH);
        }
        let kind = match (*plist).mode {
            0 => Some(ProcKind::Compute),
            1 => Some(ProcKind::Graphics),
            2 => None,
            _ => return Err(INVALID_ARGUMENT),
        };
        let list: Vec<nvmlProcessDetail_v1_t> = processes(device, kind)?
            .into_iter()
            .map(|p| nvmlProcessDetail_v1_t {
                pid: p.pid,
                usedGpuMemory: p.usedGpuMemory,
                gpuInstanceId: p.gpuInstanceId,
                computeInstanceId: p.computeInstanceId,
                usedGpuCcProtectedMemory: 0,
            })
            .collect();
        let count = std::ptr::addr_of_mut!((*plist).numProcArrayEntries);
        write_list(count, (*plist).procArray, list)
    }
}

nvml_fn! {
    /// Confidential computing is off on every simulated board.
    fn nvmlDeviceGetConfComputeMemSizeInfo(device: nvmlDevice_t, memInfo: *mut nvmlConfComputeMemSizeInfo_t) {
        nonnull(memInfo)?;
        with_gpu(device, |_, _| Err(NOT_SUPPORTED))
    }
}

nvml_fn! {
    /// Windows-only (NVML reference); Linux drivers export it and answer
    /// NOT_SUPPORTED. A scenario of a Windows host says `driver_model`.
    fn nvmlDeviceGetDriverModel_v2(device: nvmlDevice_t, current: *mut nvmlDriverModel_t, pending: *mut nvmlDriverModel_t) {
        driver_model(device, current, pending)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDriverModel(device: nvmlDevice_t, current: *mut nvmlDriverModel_t, pending: *mut nvmlDriverModel_t) {
        driver_model(device, current, pending)
    }
}

unsafe fn driver_model(
    device: nvmlDevice_t,
    current: *mut nvmlDriverModel_t,
    pending: *mut nvmlDriverModel_t,
) -> R {
    nonnull(current)?;
    nonnull(pending)?;
    let (c, p) = with_gpu(device, |g, _| g.settings.driver_model.ok_or(NOT_SUPPORTED))?;
    out(current, c)?;
    out(pending, p)
}
