//! NVLink state and error counters (NVML reference, "NvLink Methods").

use super::*;
use crate::fleet::Gpu;
use std::ffi::c_ulonglong;

fn nvlink_gpu<T>(device: nvmlDevice_t, link: u32, f: impl FnOnce(&Gpu, f64) -> R<T>) -> R<T> {
    with_gpu(device, |g, t| {
        if g.model.nvlinks == 0 {
            Err(NOT_SUPPORTED)
        } else if link >= g.model.nvlinks {
            Err(INVALID_ARGUMENT)
        } else {
            f(g, t)
        }
    })
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkState(device: nvmlDevice_t, link: c_uint, isActive: *mut nvmlEnableState_t) {
        nonnull(isActive)?;
        let active = nvlink_gpu(device, link, |g, _| Ok(g.nvlink_active(link)))?;
        out(isActive, u32::from(active))
    }
}

nvml_fn! {
    fn nvmlDeviceGetNvLinkErrorCounter(device: nvmlDevice_t, link: c_uint, counter: nvmlNvLinkErrorCounter_t, counterValue: *mut c_ulonglong) {
        nonnull(counterValue)?;
        if counter > 4 {
            return Err(INVALID_ARGUMENT);
        }
        let v = nvlink_gpu(device, link, |g, _| Ok(g.nvlink_errors(link)[counter as usize]))?;
        out(counterValue, v)
    }
}

/// A board's fabric registration: state, status, clique id and cluster
/// UUID. Single-node NVSwitch systems (every simulated board) report
/// clique 0 and an all-zero cluster UUID, as real HGX H100 and H200 do on
/// 590.48.01 (`../shared/corpus`, "Fabric" sections).
fn fabric(device: nvmlDevice_t) -> R<(u8, nvmlReturn_t, u32, [u8; 16])> {
    with_gpu(device, |g, _| {
        if g.model.nvswitch_fabric() {
            Ok((g.fabric_state, g.fabric_status, 0, [0u8; 16]))
        } else {
            Err(NOT_SUPPORTED)
        }
    })
}

nvml_fn! {
    /// NVSwitch boards (Hopper and newer with NVLink) report their fabric
    /// registration; others answer NOT_SUPPORTED. DEPRECATED(13.0).
    fn nvmlDeviceGetGpuFabricInfo(device: nvmlDevice_t, gpuFabricInfo: *mut nvmlGpuFabricInfo_t) {
        nonnull(gpuFabricInfo)?;
        let (state, status, cliqueId, clusterUuid) = fabric(device)?;
        out(gpuFabricInfo, nvmlGpuFabricInfo_t { clusterUuid, status, cliqueId, state })
    }
}

nvml_fn! {
    /// The versioned call: `nvmlGpuFabricInfo_v2_t` from the 12.4 header
    /// (R550), `_v3_t` from 13.0 (R580); an older branch does not have the
    /// function (`absent` in drivers.toml), a struct version newer than the
    /// branch's answers ARGUMENT_VERSION_MISMATCH. The health rows of the simulated boards
    /// are all "not supported" (0), as HGX H100/H200 print them (N/A).
    fn nvmlDeviceGetGpuFabricInfoV(device: nvmlDevice_t, gpuFabricInfo: *mut nvmlGpuFabricInfoV_t) {
        nonnull(gpuFabricInfo)?;
        let major = crate::driver::current().branch.major();
        let version = (*gpuFabricInfo).version;
        let v3 = struct_version::<nvmlGpuFabricInfo_v3_t>(3);
        let v2 = struct_version::<nvmlGpuFabricInfo_v2_t>(2);
        if !(version == v2 || (version == v3 && major >= 580)) {
            return Err(VERSION_MISMATCH);
        }
        let (state, status, clique, cluster) = fabric(device)?;
        // v3 appends `healthSummary` to v2's layout: a v2 caller's buffer
        // is written only as far as v2 reaches.
        let common = gpuFabricInfo.cast::<nvmlGpuFabricInfo_v2_t>();
        (*common).clusterUuid = cluster;
        (*common).status = status;
        (*common).cliqueId = clique;
        (*common).state = state;
        (*common).healthMask = 0;
        if version == v3 {
            (*gpuFabricInfo).healthSummary = 0;
        }
        Ok(())
    }
}
