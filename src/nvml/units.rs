//! NVML reports in driver units; the snapshot holds Prometheus base units.
//! Every conversion lives here so that each one is written (and tested) once.

pub fn milliwatts_to_watts(mw: u32) -> f64 {
    f64::from(mw) / 1000.0
}

pub fn millijoules_to_joules(mj: u64) -> f64 {
    mj as f64 / 1000.0
}

pub fn mhz_to_hertz(mhz: u32) -> f64 {
    f64::from(mhz) * 1_000_000.0
}

/// NVML percentages (0..=100) become ratios (0..=1). Values above 100 are
/// kept as reported rather than clamped, so a driver bug stays visible.
pub fn percent_to_ratio(percent: f64) -> f64 {
    percent / 100.0
}

pub fn kib_to_bytes(kib: u64) -> u64 {
    kib.saturating_mul(1024)
}

pub fn nanoseconds_to_seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_reach_base_units() {
        assert_eq!(milliwatts_to_watts(350_500), 350.5);
        assert_eq!(millijoules_to_joules(1_234_567), 1234.567);
        assert_eq!(mhz_to_hertz(1980), 1.98e9);
        assert_eq!(percent_to_ratio(37.0), 0.37);
        assert_eq!(kib_to_bytes(3), 3072);
        assert_eq!(nanoseconds_to_seconds(2_500_000_000), 2.5);
    }

    #[test]
    fn byte_conversions_saturate_instead_of_wrapping() {
        assert_eq!(kib_to_bytes(u64::MAX), u64::MAX);
    }
}
