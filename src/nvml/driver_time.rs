//! The exporter's own driver time: how many NVML calls each family of one
//! GPU made and how long they took, since the exporter started
//! (`nvml_exporter_driver_seconds_total` and
//! `nvml_exporter_driver_calls_total`, `--collector.driver_time`). Every call
//! the sampler makes goes through `Calls`, which times it here: what a user
//! sees is where the time of `nvml_exporter_sample_duration_seconds` went.

use std::collections::BTreeMap;
use std::time::Duration;

/// Calls and time per family of one GPU. Keyed by the same family names as
/// `ErrorBook` (a collector family, `field_values` for the batched call,
/// `info` for identity): a fixed set in the code, so the series are bounded.
#[derive(Debug, Default, Clone)]
pub struct DriverTime {
    by_family: BTreeMap<&'static str, (u64, Duration)>,
}

impl DriverTime {
    pub fn record(&mut self, family: &'static str, took: Duration) {
        let entry = self.by_family.entry(family).or_default();
        entry.0 += 1;
        entry.1 += took;
    }

    pub fn counts(&self) -> Vec<crate::snapshot::DriverTimeCount> {
        self.by_family
            .iter()
            .map(
                |(&family, &(calls, took))| crate::snapshot::DriverTimeCount {
                    family,
                    calls,
                    seconds: took.as_secs_f64(),
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_time_add_up_per_family() {
        let mut t = DriverTime::default();
        t.record("power", Duration::from_micros(2043));
        t.record("power", Duration::from_micros(1300));
        t.record("field_values", Duration::from_micros(3000));
        let counts = t.counts();
        assert_eq!(counts.len(), 2);
        assert_eq!(counts[0].family, "field_values");
        assert_eq!(counts[0].calls, 1);
        assert_eq!(counts[1].family, "power");
        assert_eq!(counts[1].calls, 2);
        assert!((counts[1].seconds - 0.003_343).abs() < 1e-9);
    }
}
