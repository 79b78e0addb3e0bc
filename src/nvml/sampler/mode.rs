//! Persistence, display and compute mode (`nvidia_gpu_persistence_mode_enabled`,
//! `nvidia_gpu_display_active`, `nvidia_gpu_compute_mode`): settings an
//! operator changes (`nvidia-smi -pm`, `-c`, an X server), so they are
//! re-read every `SLOW_REFRESH_POLLS` polls (display active costs an H200
//! 0.8 ms a call), not every poll. The vGPU software licence
//! (`nvidia_gpu_vgpu_licensed`, family `mode.vgpu-license`, what DCGM
//! serves as DCGM_FI_DEV_VGPU_LICENSE_STATUS) likewise.

use nvml_wrapper::enum_wrappers::device::ComputeMode as NvComputeMode;

use super::super::calls::{Cached, SLOW_REFRESH_POLLS};
use super::super::raw;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{ComputeMode, GpuReadings, VgpuLicense};

#[derive(Default)]
pub struct State {
    persistence: Cached<bool>,
    display: Cached<bool>,
    compute: Cached<ComputeMode>,
    vgpu_license: Cached<VgpuLicense>,
}

impl State {
    /// Each setting is cached on its own: one that failed is retried next
    /// poll (absent meanwhile, as before), the others keep their period.
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, vgpu_license: bool, r: &mut GpuReadings) {
        let fam = Family::Mode.name();
        let (d, c, poll) = (g.device, &mut *g.calls, g.poll);
        let every = SLOW_REFRESH_POLLS;
        r.persistence_mode = self.persistence.get_every(poll, every, false, || {
            c.run(fam, || d.is_in_persistent_mode())
        });
        r.display_active = self
            .display
            .get_every(poll, every, false, || c.run(fam, || d.is_display_active()));
        r.compute_mode = self.compute.get_every(poll, every, false, || {
            c.run(fam, || d.compute_mode()).map(compute_mode)
        });
        if vgpu_license {
            let (nvml, handle) = (g.nvml, g.handle);
            r.vgpu_license = self.vgpu_license.get_every(poll, every, false, || {
                c.run(Family::ModeVgpuLicense.name(), || {
                    raw::vgpu_license(nvml, handle).map(|l| match l {
                        None => VgpuLicense::Unsupported,
                        Some(vgpu) => VgpuLicense::Supported(vgpu),
                    })
                })
            });
        }
    }
}

fn compute_mode(m: NvComputeMode) -> ComputeMode {
    match m {
        NvComputeMode::Default => ComputeMode::Default,
        NvComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvComputeMode::Prohibited => ComputeMode::Prohibited,
        NvComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    }
}
