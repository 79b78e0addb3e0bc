//! NVLink fabric registration (`nvidia_gpu_fabric_state`): on NVSwitch
//! systems the fabric manager must register each GPU before CUDA can use
//! it. Absent elsewhere.

use super::super::raw;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{Fabric, GpuReadings};

pub fn sample(g: &mut Gpu<'_, '_>, r: &mut GpuReadings) {
    let fam = Family::Fabric.name();
    let (nvml, h) = (g.nvml, g.handle);
    r.fabric = g
        .calls
        .run_unless_absent("fabric_info", fam, || raw::gpu_fabric_info(nvml, h))
        .map(|(state, registered)| Fabric { state, registered });
}
