//! The vGPU software licence, behind `--collector.mode.vgpu-license`: what
//! DCGM serves as DCGM_FI_DEV_VGPU_LICENSE_STATUS (dcgm-exporter's
//! default set, which switches the reading on). Off by default: on bare
//! metal, where most fleets run, NVML supports no licensing and the series
//! is absent; a vGPU guest's licence is the one thing it says.

use super::per_gpu;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric};
use crate::snapshot::VgpuLicense;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::ModeVgpuLicense),
    metrics: &[Metric {
        name: "nvidia_gpu_vgpu_licensed",
        help: "1 if the vGPU software licence is held, 0 if not; absent where NVML supports no vGPU licensing (bare metal).",
        kind: Kind::Gauge,
        collect: |s, o| {
            per_gpu(s, o, |r| match r.vgpu_license {
                Some(VgpuLicense::Supported(Some(held))) => Some(f64::from(u8::from(held))),
                _ => None,
            })
        },
    }],
};
