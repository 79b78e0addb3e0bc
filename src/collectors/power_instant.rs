//! Instantaneous power draw, behind `--collector.power.instant`: what
//! DCGM serves as DCGM_FI_DEV_POWER_USAGE_INSTANT. Off by default: the
//! averaged draw (`nvidia_gpu_power_usage_watts`) is what the shipped
//! panels read, and one sample of a draw that moves every millisecond
//! says little at a 15 s scrape.

use super::per_gpu;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::PowerInstant),
    metrics: &[Metric {
        name: "nvidia_gpu_power_instant_watts",
        help: "Instantaneous power draw of the GPU board.",
        kind: Kind::Gauge,
        collect: |s, o| per_gpu(s, o, |r| r.power_instant_watts),
    }],
};
