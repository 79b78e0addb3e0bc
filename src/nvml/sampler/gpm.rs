//! GPM activity (Hopper and newer): per GPU here
//! (`nvidia_gpu_activity_ratio`), per MIG GPU instance through `mig.rs`
//! (`nvidia_gpu_mig_activity_ratio`). Each poll yields ratios over the last
//! interval, from this sample and the one before.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::calls::{Cached, Calls};
use super::super::fields::DriverBranch;
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

    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, 'n>,
        r: &mut GpuReadings,
        mig_enabled: bool,
        ids: &[u32],
        architecture: Option<&DeviceArchitecture>,
    ) {
        // With MIG on, activity is per GPU instance (nvmlGpmMigSampleGet).
        if mig_enabled || !self.supported(g) {
            return;
        }
        let h = g.handle;
        let engines = Engines::whole_gpu(architecture);
        (r.activity, r.engine_activity) = self
            .whole
            .step(g.nvml, g.calls, ids, engines, |b| b.fill(h));
    }
}

/// How many decoder (NVDEC), JPEG (NVJPG), optical flow (OFA) and encoder
/// (NVENC) engines a GPU or GPU instance has. GPM names 8, 8, 2 and 4 ids
/// for them, one per engine that could exist; whether a driver answers an error or 0/SUCCESS
/// for ids past the engines present is not documented, and a 0 would pull
/// the average down. Counted, the average is over engines that exist either
/// way; uncounted, over the ids that answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engines {
    pub decoders: u32,
    pub jpegs: u32,
    pub ofas: u32,
    pub encoders: u32,
}

impl Engines {
    /// Every GPM-capable Hopper board (H100, H200, H800, H20, GH200) is the
    /// GH100 die: 7 NVDEC, 7 NVJPG, 1 OFA and no NVENC (NVIDIA H100 Tensor
    /// Core GPU architecture whitepaper). NVML has no engine count for a
    /// whole GPU (`nvmlDeviceGetAttributes` answers for MIG devices, GPU
    /// instance profiles only in MIG mode), so other architectures go
    /// uncounted until their counts are known from a cited source: for
    /// Blackwell none is (NVIDIA's go-nvml B200 mock, NVIDIA/go-nvml 2f9e261
    /// `pkg/nvml/mock/gpus/b200.go`, disagrees with the real `nvidia-smi mig
    /// -lgip` of NVIDIA/gpu-operator PR #1242 and mig-parted PR #166), so
    /// a whole Blackwell GPU averages over the engine ids that answer,
    /// while its MIG instances are counted from NVML.
    const GH100: Engines = Engines {
        decoders: 7,
        jpegs: 7,
        ofas: 1,
        encoders: 0,
    };

    pub fn whole_gpu(architecture: Option<&DeviceArchitecture>) -> Option<Engines> {
        matches!(architecture, Some(DeviceArchitecture::Hopper)).then_some(Self::GH100)
    }

    /// From `nvmlDeviceGetAttributes_v2` of a MIG device: decoders, JPEG
    /// engines, OFAs and encoders of its GPU instance (RTX PRO 6000
    /// Blackwell slices have an NVENC each).
    pub fn from_counts([decoders, jpegs, ofas, encoders]: [u32; 4]) -> Engines {
        Engines {
            decoders,
            jpegs,
            ofas,
            encoders,
        }
    }

    fn of(self, metric: GpmMetric) -> Option<usize> {
        let n = match metric {
            GpmMetric::NvDec => self.decoders,
            GpmMetric::NvJpg => self.jpegs,
            GpmMetric::NvOfa => self.ofas,
            GpmMetric::NvEnc => self.encoders,
            _ => return None,
        };
        usize::try_from(n).ok()
    }
}

/// One step's ratios: per metric (an engine kind's mean) and per engine
/// (by GPM metric id).
type Ratios = (Vec<(GpmMetric, f64)>, Vec<(u32, f64)>);

/// The previous GPM sample, kept so that each poll yields ratios over the
/// last interval.
#[derive(Default)]
pub struct GpmPair<'n> {
    prev: Option<GpmBuffer<'n>>,
    scratch: Option<GpmBuffer<'n>>,
}

impl<'n> GpmPair<'n> {
    /// Takes a sample with `fill` and, when a previous one exists, returns
    /// the ratios of the metrics `ids` (from [`request_ids`]) between the
    /// two, per-engine metrics averaged over `engines` where counted, and
    /// each engine's own ratio ([`engine_ratios`]).
    pub fn step(
        &mut self,
        nvml: &'n Nvml,
        calls: &mut Calls<'_>,
        ids: &[u32],
        engines: Option<Engines>,
        fill: impl FnOnce(&mut GpmBuffer<'n>) -> Result<(), NvmlError>,
    ) -> Ratios {
        let family = Family::Gpm.name();
        if self.scratch.is_none() {
            self.scratch = calls.run(family, || GpmBuffer::alloc(nvml)).value();
        }
        let Some(mut current) = self.scratch.take() else {
            return (Vec::new(), Vec::new());
        };
        if calls.run(family, || fill(&mut current)).value().is_none() {
            // Keep the buffer for next time; a failed fill says nothing
            // about the previous sample, which stays valid.
            self.scratch = Some(current);
            return (Vec::new(), Vec::new());
        }
        let mut out = (Vec::new(), Vec::new());
        if let Some(prev) = &self.prev {
            if let Some(results) = calls
                .run(family, || raw::gpm_metrics(nvml, prev, &current, ids))
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
                out = (ratios(&by_id, engines), engine_ratios(&by_id, engines));
            }
        }
        self.scratch = self.prev.take();
        self.prev = Some(current);
        out
    }
}

/// NVML's GPM metric ids (nvml.h `nvmlGpmMetricId_t`) behind each of our
/// metrics; decoder, JPEG and OFA have one id per engine.
fn metric_ids(metric: GpmMetric) -> RangeInclusive<u32> {
    match metric {
        GpmMetric::Graphics => 1..=1,
        GpmMetric::Sm => 2..=2,
        GpmMetric::SmOccupancy => 3..=3,
        GpmMetric::Integer => 4..=4,
        GpmMetric::Tensor => 5..=5,
        // The tensor pipe by instruction kind (nvml.h
        // NVML_GPM_METRIC_DFMA_TENSOR_UTIL, _HMMA_, _IMMA_: 6, 7, 9).
        GpmMetric::TensorDfma => 6..=6,
        GpmMetric::TensorHmma => 7..=7,
        GpmMetric::TensorImma => 9..=9,
        GpmMetric::Dram => 10..=10,
        GpmMetric::Fp64 => 11..=11,
        GpmMetric::Fp32 => 12..=12,
        GpmMetric::Fp16 => 13..=13,
        GpmMetric::NvDec => 30..=37,
        GpmMetric::NvJpg => 40..=47,
        GpmMetric::NvOfa => 50..=51,
        // NVML_GPM_METRIC_NVENC_0_UTIL.._3_UTIL, 12.9 header (go-nvml
        // 62ce1e3:12537-12540), which raised NVML_GPM_METRIC_MAX to 210.
        GpmMetric::NvEnc => 166..=169,
    }
}

/// GPM metric ids requested per sample: those of the exported metrics
/// (`GpmMetric::DEFAULT`, or all of them with `gpm.all-metrics`). The
/// NVENC ids exist from R575 on; an older driver is not asked them, since
/// an id past its `NVML_GPM_METRIC_MAX` (98) may fail the whole call.
pub fn request_ids(all_metrics: bool, driver: DriverBranch) -> Vec<u32> {
    let metrics = if all_metrics {
        GpmMetric::ALL
    } else {
        GpmMetric::DEFAULT
    };
    let nvenc = !driver.known() || driver.major >= 575;
    metrics
        .iter()
        .filter(|&&m| m != GpmMetric::NvEnc || nvenc)
        .flat_map(|&m| metric_ids(m))
        .collect()
}

/// Maps GPM results (percent) to ratios; per-engine decoder, JPEG and OFA
/// utilizations are averaged over the engines that exist where `engines`
/// counts them, else over the ids that answered. A GPU instance without
/// such an engine has no value, not 0.
fn ratios(by_id: &HashMap<u32, f64>, engines: Option<Engines>) -> Vec<(GpmMetric, f64)> {
    GpmMetric::ALL
        .iter()
        .filter_map(|&m| {
            let present = engines.and_then(|e| e.of(m)).unwrap_or(usize::MAX);
            let vals: Vec<f64> = metric_ids(m)
                .take(present)
                .filter_map(|id| by_id.get(&id).copied())
                .collect();
            (!vals.is_empty()).then(|| {
                let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                (m, percent_to_ratio(mean))
            })
        })
        .collect()
}

/// Each decoder, JPEG and OFA engine's own ratio, by GPM metric id, what
/// DCGM serves per engine (DCGM_FI_PROF_NVDEC0_ACTIVE ..: NVIDIA/DCGM
/// `dcgmlib/src/dcgm_fields.cpp` at 72fa3fe maps each field to its one
/// NVML_GPM_METRIC_*_UTIL id). Engines past those counted are left out, as
/// from the mean: an engine that does not exist has no value, not 0.
fn engine_ratios(by_id: &HashMap<u32, f64>, engines: Option<Engines>) -> Vec<(u32, f64)> {
    [GpmMetric::NvDec, GpmMetric::NvJpg, GpmMetric::NvOfa]
        .iter()
        .flat_map(|&m| {
            let present = engines.and_then(|e| e.of(m)).unwrap_or(usize::MAX);
            metric_ids(m).take(present)
        })
        .filter_map(|id| by_id.get(&id).map(|&v| (id, percent_to_ratio(v))))
        .collect()
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
        let got = ratios(&by_id, None);
        assert!(got.contains(&(GpmMetric::Sm, 0.5)));
        assert!(got.contains(&(GpmMetric::NvDec, 0.2)));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::Graphics));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::NvJpg));
    }

    #[test]
    fn only_exported_metrics_are_requested_without_the_detail_switch() {
        let r575 = DriverBranch::parse("575.51.03");
        // graphics, sm, tensor, dram
        assert_eq!(request_ids(false, r575), vec![1, 2, 5, 10]);
        let all = request_ids(true, r575);
        assert_eq!(all.len(), 12 + 8 + 8 + 2 + 4);
        for id in [3, 4, 6, 7, 9, 11, 12, 13, 30, 37, 40, 47, 50, 51, 166, 169] {
            assert!(all.contains(&id), "{id}");
        }
        // R570 and older know no NVENC metric ids.
        let r570 = request_ids(true, DriverBranch::parse("570.133.20"));
        assert_eq!(r570.len(), 12 + 8 + 8 + 2);
        assert!(!r570.contains(&166));
        // Every requested id maps back to a metric.
        let by_id: HashMap<u32, f64> = all.iter().map(|&id| (id, 50.0)).collect();
        assert_eq!(ratios(&by_id, None).len(), GpmMetric::ALL.len());
    }

    #[test]
    fn engines_that_do_not_exist_are_not_averaged_in() {
        // A whole H100 where the driver answers 0 for the 8th decoder and
        // JPEG id and the 2nd OFA id.
        let mut by_id: HashMap<u32, f64> = (30..=36).chain(40..=46).map(|id| (id, 40.0)).collect();
        by_id.extend([(37, 0.0), (47, 0.0), (50, 20.0), (51, 0.0)]);
        let gh100 = Engines::whole_gpu(Some(&DeviceArchitecture::Hopper));
        let got = ratios(&by_id, gh100);
        assert!(got.contains(&(GpmMetric::NvDec, 0.4)), "{got:?}");
        assert!(got.contains(&(GpmMetric::NvJpg, 0.4)), "{got:?}");
        assert!(got.contains(&(GpmMetric::NvOfa, 0.2)), "{got:?}");
        // Uncounted, the zeros pull the averages down: what counting fixes.
        let uncounted = ratios(&by_id, None);
        assert!(
            uncounted.contains(&(GpmMetric::NvDec, 0.35)),
            "{uncounted:?}"
        );
        // A GPU instance with no OFA has no OFA value at all.
        let slice = Engines::from_counts([1, 1, 0, 0]);
        let got = ratios(&by_id, Some(slice));
        assert!(got.contains(&(GpmMetric::NvDec, 0.4)), "{got:?}");
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::NvOfa), "{got:?}");
        // Per engine: the 7 decoders, 7 JPEG engines and 1 OFA of an H100,
        // not the ids past them; a 1g slice's one decoder and JPEG engine.
        let each = engine_ratios(&by_id, gh100);
        let ids: Vec<u32> = each.iter().map(|(id, _)| *id).collect();
        let want: Vec<u32> = (30..=36).chain(40..=46).chain([50]).collect();
        assert_eq!(ids, want);
        assert!(each.contains(&(50, 0.2)) && each.contains(&(36, 0.4)));
        assert_eq!(
            engine_ratios(&by_id, Some(slice)),
            vec![(30, 0.4), (40, 0.4)]
        );
    }

    #[test]
    fn nvenc_counts_only_on_slices_with_encoders() {
        // An RTX PRO 6000 Blackwell 1g.24gb slice: 1 NVDEC, 1 NVJPG, 0 OFA,
        // 1 NVENC (`nvidia-smi mig -lgip`, bigstack-oss/cubecos#312). The
        // driver answers all four NVENC ids.
        let by_id: HashMap<u32, f64> = [(166, 60.0), (167, 0.0), (168, 0.0), (169, 0.0)]
            .into_iter()
            .collect();
        let slice = Engines::from_counts([1, 1, 0, 1]);
        let got = ratios(&by_id, Some(slice));
        assert!(got.contains(&(GpmMetric::NvEnc, 0.6)), "{got:?}");
        // A `-me` slice has no encoder: no value, not 0.
        let no_media = Engines::from_counts([0, 0, 0, 0]);
        assert!(!ratios(&by_id, Some(no_media))
            .iter()
            .any(|(m, _)| *m == GpmMetric::NvEnc));
        // H100 has no NVENC.
        let gh100 = Engines::whole_gpu(Some(&DeviceArchitecture::Hopper));
        assert!(!ratios(&by_id, gh100)
            .iter()
            .any(|(m, _)| *m == GpmMetric::NvEnc));
    }
}
