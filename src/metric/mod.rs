//! What a metric is, shared by the collectors that produce metrics and the
//! writers that encode them: a [`Metric`] describes itself (name, help,
//! type; its unit follows from its name) and turns a [`Scope`] into
//! samples in a [`SampleSink`]; a [`Collector`] groups the metrics one
//! [`Family`] switches.
//!
//! It sits below both sides so that neither imports the other: the
//! collectors know nothing of the text formats, the writers nothing of the
//! list of families.

mod sample;

use std::time::SystemTime;

use crate::family::{Family, FamilySet};
use crate::snapshot::{GpuReadings, GpuState, Snapshot};

pub use sample::{LabelValue, SampleBuilder, SampleSink, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    /// A counter under another tool's name, which does not end in
    /// `_total` (dcgm-exporter's `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`): typed
    /// `counter` in the text format, as that tool types it, and `unknown`
    /// in OpenMetrics, where a counter's samples must end in `_total`.
    ForeignCounter,
}

impl Kind {
    /// The type in the Prometheus text format 0.0.4.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter | Kind::ForeignCounter => "counter",
        }
    }

    /// The type in OpenMetrics.
    pub fn as_openmetrics_str(self) -> &'static str {
        match self {
            Kind::ForeignCounter => "unknown",
            k => k.as_str(),
        }
    }

    /// Whether samples are counts that only grow (a NaN or negative one is
    /// a bad reading).
    pub fn is_counter(self) -> bool {
        matches!(self, Kind::Counter | Kind::ForeignCounter)
    }
}

/// The Prometheus base units a metric name may end in. A name ending in
/// one carries it as its unit (OpenMetrics `# UNIT`); no other does.
pub const BASE_UNITS: &[&str] = &[
    "bytes", "seconds", "celsius", "watts", "joules", "hertz", "ratio",
];

/// One metric family.
pub struct Metric {
    /// The sample name. Counters end in `_total`, as Prometheus wants;
    /// OpenMetrics names the family without it ([`Metric::family_name`]).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub collect: for<'a> fn(&Scope<'a>, &mut SampleSink<'a>),
}

impl Metric {
    /// The OpenMetrics family name: without `_total` for a counter.
    pub fn family_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge | Kind::ForeignCounter => self.name,
        }
    }

    /// The base unit the family name ends in, if any: Prometheus naming
    /// puts the unit in the name, so it is never declared twice.
    pub fn unit(&self) -> Option<&'static str> {
        let family = self.family_name();
        BASE_UNITS.iter().copied().find(|unit| {
            family
                .strip_suffix(unit)
                .is_some_and(|rest| rest.ends_with('_'))
        })
    }
}

impl std::fmt::Debug for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metric")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish()
    }
}

/// A group of metrics switched together.
#[derive(Debug)]
pub struct Collector {
    /// `None`: not switched by a `--collector.<name>` flag. Either always
    /// on (identity, health, the exporter's own and process metrics) or
    /// present only when a feature flag puts its data in the snapshot
    /// (pod attribution with `--kubernetes`, workloads with `--workloads`).
    pub family: Option<Family>,
    pub metrics: &'static [Metric],
}

/// What `nvml_exporter_build_info` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

impl BuildInfo {
    /// This build: the crate version, and the git revision `build.rs`
    /// found (`unknown` when built outside git without one given).
    pub const fn current() -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: env!("NVML_EXPORTER_REVISION"),
        }
    }

    /// What `--version` prints: version, revision, build date, compiler
    /// and target, as Prometheus exporters print theirs.
    pub fn long_version() -> String {
        format!(
            "{} (revision {})\n  build date: {}\n  rustc:      {}\n  target:     {}",
            env!("CARGO_PKG_VERSION"),
            env!("NVML_EXPORTER_REVISION"),
            env!("NVML_EXPORTER_BUILD_DATE"),
            env!("NVML_EXPORTER_RUSTC"),
            env!("NVML_EXPORTER_TARGET"),
        )
    }
}

impl Default for BuildInfo {
    fn default() -> Self {
        Self::current()
    }
}

/// What a collector reads.
pub struct Scope<'a> {
    pub snapshot: &'a Snapshot,
    pub build: &'a BuildInfo,
    /// When this render happens, for durations of calls still running.
    pub now: SystemTime,
    /// The switches in force, for collectors whose detail switch narrows
    /// what they emit (`gpm.all-metrics`).
    pub families: &'a FamilySet,
}

impl<'a> Scope<'a> {
    /// GPUs with readings: lost, hung and failing GPUs have their
    /// measurement series withdrawn.
    pub fn readings(&self) -> impl Iterator<Item = (&'a GpuState, &'a GpuReadings)> + 'a {
        self.snapshot
            .gpus
            .iter()
            .filter_map(|g| g.readings.as_deref().map(|r| (g, r)))
    }

    pub fn gpus(&self) -> impl Iterator<Item = &'a GpuState> + 'a {
        self.snapshot.gpus.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing(_: &Scope<'_>, _: &mut SampleSink<'_>) {}

    fn unit(name: &'static str, kind: Kind) -> Option<&'static str> {
        Metric {
            name,
            help: "",
            kind,
            collect: nothing,
        }
        .unit()
    }

    #[test]
    fn the_unit_is_the_base_unit_the_family_name_ends_in() {
        assert_eq!(
            unit("nvidia_gpu_energy_joules_total", Kind::Counter),
            Some("joules")
        );
        assert_eq!(
            unit("nvidia_gpu_clock_max_hertz", Kind::Gauge),
            Some("hertz")
        );
        assert_eq!(
            unit("nvidia_gpu_fan_speed_ratio", Kind::Gauge),
            Some("ratio")
        );
        assert_eq!(unit("nvidia_gpu_ecc_errors_total", Kind::Counter), None);
        assert_eq!(unit("nvidia_gpu_info", Kind::Gauge), None);
        // A whole word only, and never `_total` itself.
        assert_eq!(unit("test_megabytes", Kind::Gauge), None);
        assert_eq!(unit("test_seconds_total", Kind::Gauge), None);
    }
}
