//! The metric families, one file per group in the node_exporter style.
//!
//! Each file declares a [`Collector`]: the [`Family`] that switches it, and
//! its metrics, each describing itself (name, help, type, unit) and turning
//! the [`Snapshot`] into samples. They never touch NVML.
//!
//! Adding a family: one new file here and one line in [`COLLECTORS`], plus
//! its row in `docs/metrics.md` (a test keeps the two equal).

mod clocks;
mod ecc;
mod ecc_location;
mod exporter;
mod fan;
mod gpm;
mod info;
mod kubernetes;
mod memory;
mod mig;
mod mig_memory_free;
mod mode;
mod nvlink;
mod nvlink_link;
mod pcie;
mod power;
mod process_memory;
mod processes;
mod retirement;
mod temperature;
mod throttle;
mod utilization;
mod xid;

use std::time::{SystemTime, UNIX_EPOCH};

use crate::exposition::{BuildInfo, SampleSink};
use crate::family::{Family, FamilySet};
use crate::snapshot::{GpuReadings, GpuState, Snapshot};

/// Every collector, in output order.
pub static COLLECTORS: &[&Collector] = &[
    &info::COLLECTOR,
    &utilization::COLLECTOR,
    &gpm::COLLECTOR,
    &memory::COLLECTOR,
    &temperature::COLLECTOR,
    &fan::COLLECTOR,
    &power::COLLECTOR,
    &clocks::COLLECTOR,
    &throttle::COLLECTOR,
    &pcie::COLLECTOR,
    &mode::COLLECTOR,
    &ecc::COLLECTOR,
    &ecc_location::COLLECTOR,
    &retirement::COLLECTOR,
    &nvlink::COLLECTOR,
    &nvlink_link::COLLECTOR,
    &xid::COLLECTOR,
    &processes::COLLECTOR,
    &process_memory::COLLECTOR,
    &mig::COLLECTOR,
    &mig_memory_free::COLLECTOR,
    &kubernetes::COLLECTOR,
    &exporter::COLLECTOR,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// One metric family.
pub struct Metric {
    /// The sample name. Counters end in `_total`, as Prometheus wants;
    /// OpenMetrics names the family without it ([`Metric::family_name`]).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// Set where the name ends in a base unit; OpenMetrics writes it as
    /// `# UNIT`.
    pub unit: Option<&'static str>,
    pub collect: for<'a> fn(&Scope<'a>, &mut SampleSink<'a>),
}

impl Metric {
    /// The OpenMetrics family name: without `_total` for a counter.
    pub fn family_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge => self.name,
        }
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
    /// `None`: always on (identity, health and the exporter's own metrics).
    pub family: Option<Family>,
    pub metrics: &'static [Metric],
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
            .filter_map(|g| g.readings.as_ref().map(|r| (g, r)))
    }

    pub fn gpus(&self) -> impl Iterator<Item = &'a GpuState> + 'a {
        self.snapshot.gpus.iter()
    }
}

/// Seconds since the Unix epoch, `None` for a time before it (a clock
/// that bad has no meaningful value to export).
pub fn unix_seconds(t: SystemTime) -> Option<f64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
}

/// Every metric name, in registration order.
pub fn metric_names() -> impl Iterator<Item = &'static str> {
    COLLECTORS
        .iter()
        .flat_map(|c| c.metrics.iter().map(|m| m.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const BASE_UNITS: &[&str] = &[
        "bytes", "seconds", "celsius", "watts", "joules", "hertz", "ratio",
    ];

    fn all() -> impl Iterator<Item = &'static Metric> {
        COLLECTORS.iter().flat_map(|c| c.metrics.iter())
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = BTreeSet::new();
        for m in all() {
            assert!(seen.insert(m.name), "{} registered twice", m.name);
            assert!(
                m.name.starts_with("nvidia_gpu_") || m.name.starts_with("nvml_exporter_"),
                "{}",
                m.name
            );
            assert!(m
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
            assert!(
                !m.help.is_empty() && m.help.ends_with('.'),
                "{}: help",
                m.name
            );
        }
    }

    #[test]
    fn counters_and_only_counters_end_in_total() {
        for m in all() {
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn unit_is_declared_exactly_where_the_name_ends_in_one() {
        for m in all() {
            let base = m.family_name();
            let ends_in = BASE_UNITS.iter().find(|u| base.ends_with(&format!("_{u}")));
            assert_eq!(m.unit, ends_in.copied(), "{}", m.name);
        }
    }

    #[test]
    fn openmetrics_family_names_do_not_collide_with_sample_names() {
        // OpenMetrics reserves `<family>_total`, `_created`, `_info` and the
        // like per family: no family name may equal another's sample name.
        let families: BTreeSet<_> = all().map(|m| m.family_name()).collect();
        for m in all() {
            for suffix in ["_total", "_created"] {
                let reserved = format!("{}{suffix}", m.family_name());
                if m.kind == Kind::Counter && suffix == "_total" {
                    continue;
                }
                assert!(!families.contains(reserved.as_str()), "{reserved}");
            }
        }
    }
}
