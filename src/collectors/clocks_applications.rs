//! Applications clocks, behind `--collector.clocks.applications`: the SM
//! and memory clocks an operator set with `nvidia-smi -ac` (what DCGM
//! serves as DCGM_FI_DEV_APP_SM_CLOCK and DCGM_FI_DEV_APP_MEM_CLOCK). Off
//! by default: no shipped panel or alert reads them, and a GPU whose
//! operator set none reports its defaults.

use super::per_gpu_labelled;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric};
use crate::snapshot::Clock;

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::ClocksApplications),
    metrics: &[Metric {
        name: "nvidia_gpu_clock_applications_hertz",
        help: "Applications clock (the clock target set with nvidia-smi -ac) by clock domain.",
        kind: Kind::Gauge,
        collect: |s, o| {
            per_gpu_labelled(
                s,
                o,
                "clock",
                |r| &r.applications_clocks_hertz,
                Clock::as_label,
            );
        },
    }],
};
