//! Renders a [`Snapshot`] once per poll: walks every enabled collector over
//! it and hands each metric's samples to the exposition writer. The one
//! place that knows both the list of families (`crate::collectors`) and the
//! formats (`crate::exposition`), so that neither knows the other.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use crate::collectors::COLLECTORS;
use crate::compat::{self, Compat};
use crate::exposition::{Exposition, Writer};
use crate::family::FamilySet;
use crate::metric::{BuildInfo, SampleSink, Scope};
use crate::snapshot::Snapshot;

#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    /// Families switched off here are left out of the output.
    pub families: FamilySet,
    pub build: BuildInfo,
    /// The selection file's metric allow- and deny-lists and label drops;
    /// `None`: everything of the families on, whole.
    pub filter: Option<Arc<Filter>>,
    /// dcgm-exporter's names (`--compat.dcgm`); `None`: off, and nothing
    /// of it is built.
    pub compat: Option<Arc<Compat>>,
}

/// Which metrics of the families on are written, and which labels left
/// out (`--config.file`'s `metrics:` and `labels:`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these metric names, when given.
    pub allow: Option<BTreeSet<String>>,
    pub deny: BTreeSet<String>,
    /// Left out of every series.
    pub drop_labels: Option<Arc<[String]>>,
}

impl Filter {
    /// Whether the metric named `name` is written.
    pub fn keeps(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.contains(name)) && !self.deny.contains(name)
    }
}

/// Encodes `snapshot` in both formats, plain and gzipped.
///
/// Reads the clock once, for `nvml_exporter_stuck_call_seconds` (how long a
/// blocked driver call has been running as of this render).
pub fn render(snapshot: &Snapshot, ctx: &RenderContext) -> Exposition {
    render_at(snapshot, ctx, SystemTime::now())
}

/// [`render`] with the time given: deterministic, for tests.
pub fn render_at(snapshot: &Snapshot, ctx: &RenderContext, now: SystemTime) -> Exposition {
    let (text, openmetrics) = encode(snapshot, ctx, now);
    Exposition::new(text, openmetrics)
}

/// Encodes without compressing: `(text 0.0.4, OpenMetrics)`.
pub fn encode(snapshot: &Snapshot, ctx: &RenderContext, now: SystemTime) -> (Vec<u8>, Vec<u8>) {
    let scope = Scope {
        snapshot,
        build: &ctx.build,
        now,
        families: &ctx.families,
    };
    // About 12 KB per H100 by default, 45 KB with every family on (ECC
    // by location and 18 NVLinks dominate); a larger output regrows once
    // or twice. The published buffers are cut to their length at the end.
    let mut w = Writer::with_capacity(4096 + snapshot.gpus.len() * 16 * 1024);
    w.drop_labels = ctx.filter.as_ref().and_then(|f| f.drop_labels.clone());
    // With --compat.dcgm.only the DCGM series replace the device families;
    // the exporter's own self-metrics stay.
    let replace = ctx.compat.as_ref().is_some_and(|c| c.replace_native);
    let mut sink = SampleSink::new();
    for collector in COLLECTORS {
        if !collector.family.is_none_or(|f| ctx.families.contains(f)) {
            continue;
        }
        for metric in collector.metrics {
            if replace && metric.name.starts_with("nvidia_") {
                continue;
            }
            if ctx.filter.as_ref().is_some_and(|f| !f.keeps(metric.name)) {
                continue;
            }
            sink.clear();
            (metric.collect)(&scope, &mut sink);
            w.family(metric, &mut sink);
        }
    }
    if let Some(c) = &ctx.compat {
        compat::encode(snapshot, c, &mut w);
    }
    w.finish();
    (w.text, w.openmetrics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Family;
    use crate::snapshot::{GpuIdentity, GpuReadings, GpuState, Health, Memory};
    use std::time::UNIX_EPOCH;

    fn gpu(readings: Option<GpuReadings>) -> GpuState {
        GpuState {
            index: 3,
            uuid: "GPU-x".into(),
            identity: GpuIdentity::default(),
            health: Health::Up,
            last_sample: None,
            sample_duration: None,
            stuck_call: None,
            readings: readings.map(std::sync::Arc::new),
            xids: vec![],
            xid_other: None,
            nvml_errors: vec![],
            driver_time: vec![],
            pods: vec![],
            evidence: None,
            verdicts: vec![],
        }
    }

    fn text(s: &Snapshot, families: FamilySet) -> String {
        let ctx = RenderContext {
            families,
            build: BuildInfo {
                version: "1.2.3",
                revision: "abc",
            },
            ..RenderContext::default()
        };
        String::from_utf8(encode(s, &ctx, UNIX_EPOCH).0).unwrap()
    }

    #[test]
    fn absent_readings_are_absent_not_zero() {
        let s = Snapshot {
            nvml_up: true,
            ready: true,
            gpus: vec![gpu(Some(GpuReadings::default()))],
            ..Snapshot::default()
        };
        assert_eq!(
            text(&s, FamilySet::all()),
            "# HELP nvidia_gpu_info GPU identity; always 1. Labels NVML cannot report are left out.\n\
             # TYPE nvidia_gpu_info gauge\n\
             nvidia_gpu_info{gpu=\"3\",uuid=\"GPU-x\"} 1\n\
             # HELP nvidia_gpu_up 1 if the GPU's last sample completed, 0 while it is lost, hung, failing or not yet sampled.\n\
             # TYPE nvidia_gpu_up gauge\n\
             nvidia_gpu_up{gpu=\"3\",uuid=\"GPU-x\"} 1\n\
             # HELP nvml_exporter_build_info Version and git revision of this exporter; always 1.\n\
             # TYPE nvml_exporter_build_info gauge\n\
             nvml_exporter_build_info{version=\"1.2.3\",revision=\"abc\"} 1\n\
             # HELP nvml_exporter_nvml_up 1 if NVML is loaded and initialized, 0 while the exporter retries.\n\
             # TYPE nvml_exporter_nvml_up gauge\n\
             nvml_exporter_nvml_up 1\n"
        );
    }

    #[test]
    fn a_zero_reading_is_written_and_a_missing_one_is_not() {
        let r = GpuReadings {
            memory: Some(Memory {
                total_bytes: 0,
                used_bytes: 0,
                free_bytes: 0,
                reserved_bytes: None,
            }),
            ..GpuReadings::default()
        };
        let s = Snapshot {
            gpus: vec![gpu(Some(r))],
            ..Snapshot::default()
        };
        let t = text(&s, FamilySet::all());
        assert!(t.contains("nvidia_gpu_memory_used_bytes{gpu=\"3\",uuid=\"GPU-x\"} 0\n"));
        assert!(!t.contains("nvidia_gpu_memory_reserved_bytes"));
        // Switched off, it goes entirely.
        let mut off = FamilySet::all();
        off.set(Family::Memory, false);
        assert!(!text(&s, off).contains("nvidia_gpu_memory"));
    }

    #[test]
    fn nan_or_negative_counters_are_dropped_but_gauges_keep_nan() {
        let r = GpuReadings {
            energy_joules: Some(f64::NAN),
            power_usage_watts: Some(f64::NAN),
            ..GpuReadings::default()
        };
        let mut s = Snapshot {
            gpus: vec![gpu(Some(r))],
            ..Snapshot::default()
        };
        let t = text(&s, FamilySet::all());
        assert!(!t.contains("nvidia_gpu_energy_joules_total"), "{t}");
        assert!(t.contains("nvidia_gpu_power_usage_watts{gpu=\"3\",uuid=\"GPU-x\"} NaN\n"));
        s.gpus[0].readings_mut().energy_joules = Some(-1.0);
        assert!(!text(&s, FamilySet::all()).contains("energy"));
        s.gpus[0].readings_mut().energy_joules = Some(0.0);
        assert!(text(&s, FamilySet::all())
            .contains("nvidia_gpu_energy_joules_total{gpu=\"3\",uuid=\"GPU-x\"} 0\n"));
    }

    #[test]
    fn render_gzips_what_it_encodes() {
        let s = Snapshot {
            gpus: vec![gpu(None)],
            ..Snapshot::default()
        };
        let ctx = RenderContext::default();
        let e = render_at(&s, &ctx, UNIX_EPOCH);
        let (t, om) = encode(&s, &ctx, UNIX_EPOCH);
        assert_eq!(e.text, t);
        assert_eq!(e.openmetrics, om);
        let mut out = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&e.text_gzip[..]),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, t);
    }
}
