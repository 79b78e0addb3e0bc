//! Fabric registration and health (NVML reference, "Device Queries":
//! `nvmlDeviceGetGpuFabricInfo`, `nvmlDeviceGetGpuFabricInfoV`).

use super::*;

/// A GPU's fabric registration: state, status, clique id, cluster UUID
/// and health. Single-node NVSwitch systems report clique 0 and an
/// all-zero cluster UUID, as real HGX H100, H200 and B200 do
/// (`tests/corpus`, "Fabric" sections); a GB200 NVL72 tray its
/// partition (scenario key `fabric`).
struct Fabric {
    state: u8,
    status: nvmlReturn_t,
    clique: u32,
    cluster: [u8; 16],
    health: crate::model::FabricHealth,
}

fn fabric(device: nvmlDevice_t) -> R<Fabric> {
    with_gpu(device, |g, _| {
        if g.model.nvswitch_fabric() {
            Ok(Fabric {
                state: g.fabric.state,
                status: g.fabric.status,
                clique: g.fabric.clique,
                cluster: g.fabric.cluster,
                health: g.fabric.health,
            })
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
        let f = fabric(device)?;
        out(gpuFabricInfo, nvmlGpuFabricInfo_t { clusterUuid: f.cluster, status: f.status, cliqueId: f.clique, state: f.state })
    }
}

nvml_fn! {
    /// The versioned call: `nvmlGpuFabricInfo_v2_t` from the 12.4 header
    /// (R550), `_v3_t` from 13.0 (R580) (drivers.toml
    /// `fabric_info_version`); an older branch does not have the function
    /// (`absent`), a struct version newer than the branch's answers
    /// ARGUMENT_VERSION_MISMATCH. The health mask carries the fields the
    /// branch's header defines (`fabric_health_fields`), the summary only
    /// in v3.
    fn nvmlDeviceGetGpuFabricInfoV(device: nvmlDevice_t, gpuFabricInfo: *mut nvmlGpuFabricInfoV_t) {
        nonnull(gpuFabricInfo)?;
        let driver = crate::driver::current();
        let newest = driver.fabric_info_version().unwrap_or(0);
        let version = (*gpuFabricInfo).version;
        let v3 = struct_version::<nvmlGpuFabricInfo_v3_t>(3);
        let v2 = struct_version::<nvmlGpuFabricInfo_v2_t>(2);
        if !((version == v2 && newest >= 2) || (version == v3 && newest >= 3)) {
            return Err(VERSION_MISMATCH);
        }
        let f = fabric(device)?;
        // v3 appends `healthSummary` to v2's layout: a v2 caller's buffer
        // is written only as far as v2 reaches.
        let common = gpuFabricInfo.cast::<nvmlGpuFabricInfo_v2_t>();
        (*common).clusterUuid = f.cluster;
        (*common).status = f.status;
        (*common).cliqueId = f.clique;
        (*common).state = f.state;
        (*common).healthMask = f.health.mask(driver.fabric_health_fields());
        if version == v3 {
            (*gpuFabricInfo).healthSummary = f.health.summary;
        }
        Ok(())
    }
}
