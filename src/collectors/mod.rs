//! The metric families, one file per group in the node_exporter style.
//!
//! Each file declares a [`Collector`]: the [`Family`](crate::family::Family)
//! that switches it, and its metrics, each describing itself (name, help,
//! type; the unit follows from the name) and turning the
//! [`Snapshot`](crate::snapshot::Snapshot) into samples. They never touch
//! NVML, and know nothing of the text formats (`crate::metric` is all they
//! share with the writers).
//!
//! Adding a family: one new file here and one line in [`COLLECTORS`], plus
//! its row in `docs/metrics.md` (a test keeps the two equal); the whole
//! path is in `docs/design.md`.

mod c2c;
mod clocks;
mod clocks_applications;
mod ecc;
mod ecc_location;
mod exporter;
mod fabric;
mod fan;
mod gpm;
mod info;
mod kubernetes;
mod memory;
mod mig;
mod mig_bar1;
mod mig_memory_free;
mod mode;
mod mode_vgpu_license;
mod nvlink;
mod nvlink_link;
mod pcie;
mod power;
mod power_instant;
mod process_memory;
mod processes;
mod retirement;
mod temperature;
mod throttle;
mod topology;
mod utilization;
mod verdict;
mod workload_usage;
mod workloads;
mod xid;
mod xid_kmsg;

use exporter::{config, driver_time, health, http, process};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::metric::{Collector, SampleSink, Scope};
use crate::snapshot::GpuReadings;

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
    &c2c::COLLECTOR,
    &fabric::COLLECTOR,
    &topology::COLLECTOR,
    &xid::COLLECTOR,
    &xid_kmsg::COLLECTOR,
    &verdict::COLLECTOR,
    &processes::COLLECTOR,
    &process_memory::COLLECTOR,
    &mig::COLLECTOR,
    &mig_memory_free::COLLECTOR,
    &mig_bar1::COLLECTOR,
    &clocks_applications::COLLECTOR,
    &power_instant::COLLECTOR,
    &mode_vgpu_license::COLLECTOR,
    &kubernetes::COLLECTOR,
    &workloads::COLLECTOR,
    &workload_usage::COLLECTOR,
    &health::COLLECTOR,
    &driver_time::COLLECTOR,
    &config::COLLECTOR,
    &http::COLLECTOR,
    &process::COLLECTOR,
];

/// Seconds since the Unix epoch, `None` for a time before it (a clock
/// that bad has no meaningful value to export).
pub fn unix_seconds(t: SystemTime) -> Option<f64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
}

/// One series per GPU that has the reading.
pub fn per_gpu<'a>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    read: fn(&GpuReadings) -> Option<f64>,
) {
    for (g, r) in scope.readings() {
        if let Some(v) = read(r) {
            out.gpu(g).set(v);
        }
    }
}

/// One series per GPU and entry of a labelled list of readings (limits,
/// thresholds), the entry's label under `label`.
pub fn per_gpu_labelled<'a, L: Copy>(
    scope: &Scope<'a>,
    out: &mut SampleSink<'a>,
    label: &'static str,
    read: fn(&GpuReadings) -> &[(L, f64)],
    value_of: fn(L) -> &'static str,
) {
    for (g, r) in scope.readings() {
        for &(l, v) in read(r) {
            out.gpu(g).label(label, value_of(l)).set(v);
        }
    }
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
    use crate::metric::{Kind, Metric};
    use std::collections::BTreeSet;

    fn all() -> impl Iterator<Item = &'static Metric> {
        COLLECTORS.iter().flat_map(|c| c.metrics.iter())
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = BTreeSet::new();
        for m in all() {
            assert!(seen.insert(m.name), "{} registered twice", m.name);
            // Ours, or the names every Prometheus client library gives the
            // process and its HTTP handler (client_golang's), kept as is.
            assert!(
                [
                    "nvidia_gpu_",
                    "nvidia_nvswitch_",
                    "nvml_exporter_",
                    "process_",
                    "promhttp_metric_handler_"
                ]
                .iter()
                .any(|p| m.name.starts_with(p)),
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
    fn names_end_in_base_units_not_scaled_ones() {
        // The unit is read off the name (`Metric::unit`): a scaled unit
        // would be exported as if it were none.
        for m in all() {
            for scaled in [
                "_percent",
                "_milliwatts",
                "_millijoules",
                "_mhz",
                "_kib",
                "_mib",
                "_milliseconds",
                "_ms",
                "_ns",
                "_degrees",
                "_kelvin",
            ] {
                assert!(!m.family_name().ends_with(scaled), "{}", m.name);
            }
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
