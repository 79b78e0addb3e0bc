//! Persistence, display and compute mode (`nvidia_gpu_persistence_mode_enabled`,
//! `nvidia_gpu_display_active`, `nvidia_gpu_compute_mode`).

use nvml_wrapper::enum_wrappers::device::ComputeMode as NvComputeMode;

use super::Gpu;
use crate::family::Family;
use crate::snapshot::{ComputeMode, GpuReadings};

pub fn sample(g: &mut Gpu<'_, '_>, r: &mut GpuReadings) {
    let fam = Family::Mode.name();
    let (d, c) = (g.device, &mut *g.calls);
    r.persistence_mode = c.run(fam, || d.is_in_persistent_mode()).value();
    r.display_active = c.run(fam, || d.is_display_active()).value();
    r.compute_mode = c.run(fam, || d.compute_mode()).value().map(|m| match m {
        NvComputeMode::Default => ComputeMode::Default,
        NvComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvComputeMode::Prohibited => ComputeMode::Prohibited,
        NvComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    });
}
