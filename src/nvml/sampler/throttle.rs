//! Clock event (throttle) reasons and the time spent in each
//! (`nvidia_gpu_clock_throttle_active`, `nvidia_gpu_clock_throttle_seconds_total`).
//! Durations come from the field batch where the driver has them, with
//! older fields and the violation-status calls as fallbacks.

use nvml_wrapper::enum_wrappers::device::PerformancePolicy;

use super::super::calls::Cached;
use super::super::fields;
use super::super::raw;
use super::super::units::nanoseconds_to_seconds;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, ThrottleReason};

/// The reasons a change of the power limit in force shows in: the software
/// power cap engaging or letting go, the hardware slowdown and power brake.
const POWER_REASONS: u64 = 0x4 | 0x8 | 0x80;

#[derive(Default)]
pub struct State {
    supported: Cached<u64>,
    /// The power reasons active at the last poll that read them.
    power_reasons: Option<u64>,
    /// Whether they changed at this poll: the power limits, read at a slow
    /// cadence (`power.rs`), are re-read at once.
    pub power_moved: bool,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let fam = Family::Throttle.name();
        let (nvml, h, d, c) = (g.nvml, g.handle, g.device, &mut *g.calls);
        // The ClocksThrottleReasons getters are DEPRECATED(13.0): their
        // ClocksEventReasons successors where exported (R535+).
        let successor = raw::exports_clocks_event_reasons(nvml);
        let supported = self.supported.get(g.poll, || {
            if successor {
                c.run(fam, || raw::supported_clocks_event_reasons(nvml, h))
            } else {
                c.run(fam, || d.supported_throttle_reasons().map(|b| b.bits()))
            }
        });
        let current = if successor {
            c.run(fam, || raw::current_clocks_event_reasons(nvml, h))
        } else {
            c.run(fam, || d.current_throttle_reasons().map(|b| b.bits()))
        };
        let current = current.value();
        let power_reasons = current.map(|bits| bits & POWER_REASONS);
        self.power_moved = power_reasons.is_some() && power_reasons != self.power_reasons;
        self.power_reasons = power_reasons.or(self.power_reasons);
        if let (Some(supported), Some(current)) = (supported, current) {
            r.throttle_active = flags(supported, current);
        }
        let mut from_fields = vec![
            (fields::REASON_SW_POWER_CAP, ThrottleReason::SwPowerCap),
            (fields::REASON_SYNC_BOOST, ThrottleReason::SyncBoost),
        ];
        if let Some([sw_thermal, hw_thermal, brake]) = g.driver.throttle_duration_ids() {
            from_fields.extend([
                (sw_thermal, ThrottleReason::SwThermal),
                (hw_thermal, ThrottleReason::HwThermal),
                (brake, ThrottleReason::HwPowerBrake),
            ]);
        }
        for (id, reason) in from_fields {
            if let Some(ns) = scalar.u64(id) {
                r.throttle_seconds
                    .push((reason, nanoseconds_to_seconds(ns)));
            }
        }
        let has =
            |r: &GpuReadings, reason| r.throttle_seconds.iter().any(|(have, _)| *have == reason);
        // Drivers without the SW and HW thermal durations still report the
        // thermal policy violation time (field 75) in the same batch. It
        // counts any thermal slowdown, hardware included, so it is its own
        // reason: as sw_thermal it would grow while throttle_active says
        // hw_thermal.
        let split_thermal = has(r, ThrottleReason::SwThermal) || has(r, ThrottleReason::HwThermal);
        if !split_thermal {
            if let Some(ns) = scalar.u64(fields::PERF_POLICY_THERMAL) {
                r.throttle_seconds
                    .push((ThrottleReason::Thermal, nanoseconds_to_seconds(ns)));
            }
        }
        // Without any of those fields, the violation-status calls cover
        // power, thermal and sync boost.
        let fallback = [
            (PerformancePolicy::Power, ThrottleReason::SwPowerCap),
            (PerformancePolicy::Thermal, ThrottleReason::Thermal),
            (PerformancePolicy::SyncBoost, ThrottleReason::SyncBoost),
        ];
        for (policy, reason) in fallback {
            if has(r, reason) || (reason == ThrottleReason::Thermal && split_thermal) {
                continue;
            }
            if let Some(v) = c.run(fam, || d.violation_status(policy)).value() {
                r.throttle_seconds
                    .push((reason, nanoseconds_to_seconds(v.violation_time)));
            }
        }
    }
}

/// The reasons the GPU supports, each with whether it is active now.
pub fn flags(supported: u64, current: u64) -> Vec<(ThrottleReason, bool)> {
    const BITS: [(u64, ThrottleReason); 9] = [
        (0x1, ThrottleReason::GpuIdle),
        (0x2, ThrottleReason::ApplicationsClocks),
        (0x4, ThrottleReason::SwPowerCap),
        (0x8, ThrottleReason::HwSlowdown),
        (0x10, ThrottleReason::SyncBoost),
        (0x20, ThrottleReason::SwThermal),
        (0x40, ThrottleReason::HwThermal),
        (0x80, ThrottleReason::HwPowerBrake),
        (0x100, ThrottleReason::DisplayClocks),
    ];
    BITS.iter()
        .filter(|(bit, _)| supported & bit != 0)
        .map(|(bit, reason)| (*reason, current & bit != 0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_supported_throttle_reasons_appear() {
        assert_eq!(
            flags(0x1 | 0x40, 0x40 | 0x4),
            vec![
                (ThrottleReason::GpuIdle, false),
                (ThrottleReason::HwThermal, true)
            ]
        );
    }
}
