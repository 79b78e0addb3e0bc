//! GPM activity (Hopper and newer): per GPU here
//! (`nvidia_gpu_activity_ratio`), per MIG GPU instance through `mig.rs`
//! (`nvidia_gpu_mig_activity_ratio`). Each poll yields ratios over the last
//! interval, from this sample and the one before.

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::calls::{Cached, Calls};
use super::super::raw::{self, GpmBuffer};
use super::super::units::percent_to_ratio;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpmMetric, GpuReadings};

#[derive(Default)]
pub struct State<'n> {
    supported: Cached<bool>,
    whole: GpmPair<'n>,
}

impl<'n> State<'n> {
    /// Whether the GPU supports GPM (cached).
    pub fn supported(&mut self, g: &mut Gpu<'_, 'n>) -> bool {
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        self.supported
            .get(g.poll, || {
                c.run(Family::Gpm.name(), || raw::gpm_supported(nvml, h))
            })
            .unwrap_or(false)
    }

    pub fn sample(&mut self, g: &mut Gpu<'_, 'n>, r: &mut GpuReadings, mig_enabled: bool) {
        // With MIG on, activity is per GPU instance (nvmlGpmMigSampleGet).
        if mig_enabled || !self.supported(g) {
            return;
        }
        let h = g.handle;
        r.activity = self.whole.step(g.nvml, g.calls, |b| b.fill(h));
    }
}

/// The previous GPM sample, kept so that each poll yields ratios over the
/// last interval.
#[derive(Default)]
pub struct GpmPair<'n> {
    prev: Option<GpmBuffer<'n>>,
    scratch: Option<GpmBuffer<'n>>,
}

impl<'n> GpmPair<'n> {
    /// Takes a sample with `fill` and, when a previous one exists, returns
    /// the metric ratios between the two.
    pub fn step(
        &mut self,
        nvml: &'n Nvml,
        calls: &mut Calls<'_>,
        fill: impl FnOnce(&mut GpmBuffer<'n>) -> Result<(), NvmlError>,
    ) -> Vec<(GpmMetric, f64)> {
        let family = Family::Gpm.name();
        if self.scratch.is_none() {
            self.scratch = calls.run(family, || GpmBuffer::alloc(nvml)).value();
        }
        let Some(mut current) = self.scratch.take() else {
            return Vec::new();
        };
        if calls.run(family, || fill(&mut current)).value().is_none() {
            // Keep the buffer for next time; a failed fill says nothing
            // about the previous sample, which stays valid.
            self.scratch = Some(current);
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(prev) = &self.prev {
            let ids = request_ids();
            if let Some(results) = calls
                .run(family, || raw::gpm_metrics(nvml, prev, &current, &ids))
                .value()
            {
                let by_id: HashMap<u32, f64> = ids
                    .iter()
                    .zip(results)
                    .filter_map(|(id, r)| match r {
                        Ok(v) if v.is_finite() => Some((*id, v)),
                        Ok(_) => None,
                        Err(e) => {
                            let _ = calls.failure::<()>(family, &e);
                            None
                        }
                    })
                    .collect();
                out = ratios(&by_id);
            }
        }
        self.scratch = self.prev.take();
        self.prev = Some(current);
        out
    }
}

/// GPM metric ids requested per sample (nvml.h `nvmlGpmMetricId_t`).
fn request_ids() -> Vec<u32> {
    let mut ids = vec![1, 2, 3, 4, 5, 10, 11, 12, 13];
    ids.extend(30..=37); // NVDEC 0-7
    ids.extend(40..=47); // NVJPG 0-7
    ids.extend(50..=51); // NVOFA 0-1
    ids
}

/// Maps GPM results (percent) to ratios; per-engine decoder, JPEG and OFA
/// utilizations are averaged over the engines the GPU reports.
fn ratios(by_id: &HashMap<u32, f64>) -> Vec<(GpmMetric, f64)> {
    let single = [
        (1, GpmMetric::Graphics),
        (2, GpmMetric::Sm),
        (3, GpmMetric::SmOccupancy),
        (5, GpmMetric::Tensor),
        (10, GpmMetric::Dram),
        (11, GpmMetric::Fp64),
        (12, GpmMetric::Fp32),
        (13, GpmMetric::Fp16),
        (4, GpmMetric::Integer),
    ];
    let mut out: Vec<(GpmMetric, f64)> = single
        .iter()
        .filter_map(|(id, m)| by_id.get(id).map(|v| (*m, percent_to_ratio(*v))))
        .collect();
    for (range, metric) in [
        (30..=37, GpmMetric::NvDec),
        (40..=47, GpmMetric::NvJpg),
        (50..=51, GpmMetric::NvOfa),
    ] {
        let vals: Vec<f64> = range.filter_map(|id| by_id.get(&id).copied()).collect();
        if !vals.is_empty() {
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            out.push((metric, percent_to_ratio(mean)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpm_percent_becomes_ratio_and_engines_average() {
        let mut by_id = HashMap::new();
        by_id.insert(2, 50.0);
        by_id.insert(30, 10.0);
        by_id.insert(31, 30.0);
        let got = ratios(&by_id);
        assert!(got.contains(&(GpmMetric::Sm, 0.5)));
        assert!(got.contains(&(GpmMetric::NvDec, 0.2)));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::Graphics));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::NvJpg));
    }
}
