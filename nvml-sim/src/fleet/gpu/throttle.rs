//! A GPU's clock-event (throttle) state: the reasons active, those the
//! GPU reports, and the time spent in violation policies and in the timed
//! clock-event reasons. The model's clocks section holds the clocks these
//! reasons hold down; this is the throttle group's state (`ffi/throttle.rs`
//! answers from it, `apply/throttle.rs` moves it), named as that group.

use crate::fault::Reason;
use crate::scenario::Counters;

#[derive(Debug, Clone, Default)]
pub struct Violation {
    pub acc_ns: u64,
    pub since: Option<f64>,
}

/// What throttle faults and the scenario's counters set, and the time
/// the GPU has spent throttled, by policy and by reason.
#[derive(Debug, Clone)]
pub struct ThrottleState {
    /// The `nvmlClocksEventReason*` bits faults hold now.
    pub active: u64,
    /// Reasons the scenario set that no fault changes (applications
    /// clocks, display clock), and the idle reason if it pinned it.
    pub fixed_reasons: u64,
    pub idle_reason: Option<bool>,
    /// `nvmlClocksEventReason*` bits the GPU reports.
    pub supported_reasons: u64,
    /// Indexed by nvmlPerfPolicyType_t (0..=5).
    pub violations: [Violation; 6],
    /// Time in the SW thermal, HW thermal and HW power brake clock-event
    /// reasons: the duration fields of the branches that have them.
    pub events: [Violation; 3],
}

impl ThrottleState {
    /// The reasons the GPU reports, and the time in violation and
    /// clock-event reasons and the reasons active at start, as the
    /// scenario's counters give them.
    pub fn from_counters(counters: &Counters) -> ThrottleState {
        let mut throttle = ThrottleState {
            active: 0,
            fixed_reasons: 0,
            idle_reason: None,
            supported_reasons: counters
                .supported_clock_event_reasons
                .as_ref()
                .map_or(0x1ff, |r| r.iter().fold(0, |m, r| m | r.bit())),
            violations: Default::default(),
            events: Default::default(),
        };
        let [power_cap, sync_boost, sw_thermal, hw_thermal, power_brake] =
            counters.clock_event_durations_us.map(|us| us * 1000);
        throttle.violations[0].acc_ns = power_cap;
        throttle.violations[1].acc_ns = sw_thermal;
        throttle.violations[2].acc_ns = sync_boost;
        throttle.events[0].acc_ns = sw_thermal;
        throttle.events[1].acc_ns = hw_thermal;
        throttle.events[2].acc_ns = power_brake;
        if let Some(reasons) = &counters.clock_event_reasons {
            let mask = |keep: fn(&Reason) -> bool| {
                reasons
                    .iter()
                    .filter(|r| keep(r))
                    .fold(0, |m, r| m | r.bit())
            };
            throttle.fixed_reasons = mask(|r| !r.throttles() && *r != Reason::GpuIdle);
            throttle.idle_reason = Some(reasons.contains(&Reason::GpuIdle));
            throttle.set_throttle(mask(|r| r.throttles()), 0.0);
        }
        throttle
    }

    /// Sets the reasons faults hold from time `t`, starting and stopping
    /// the violation and clock-event clocks they drive.
    pub fn set_throttle(&mut self, mask: u64, t: f64) {
        self.active = mask;
        let has = |r: Reason| mask & r.bit() != 0;
        let policies = [
            has(Reason::SwPowerCap),
            has(Reason::HwThermalSlowdown) || has(Reason::SwThermalSlowdown),
            has(Reason::SyncBoost),
            has(Reason::HwSlowdown) || has(Reason::HwPowerBrakeSlowdown),
        ];
        for (v, active) in self.violations.iter_mut().zip(policies) {
            track(v, active, t);
        }
        let events = [
            has(Reason::SwThermalSlowdown),
            has(Reason::HwThermalSlowdown),
            has(Reason::HwPowerBrakeSlowdown),
        ];
        for (v, active) in self.events.iter_mut().zip(events) {
            track(v, active, t);
        }
    }

    pub fn violation_ns(&self, policy: usize, t: f64) -> u64 {
        elapsed_ns(&self.violations[policy], t)
    }

    /// 0 SW thermal, 1 HW thermal, 2 HW power brake.
    pub fn event_ns(&self, reason: usize, t: f64) -> u64 {
        elapsed_ns(&self.events[reason], t)
    }
}

fn track(v: &mut Violation, active: bool, t: f64) {
    match (active, v.since) {
        (true, None) => v.since = Some(t),
        (false, Some(s)) => {
            v.acc_ns += ((t - s) * 1e9) as u64;
            v.since = None;
        }
        _ => {}
    }
}

fn elapsed_ns(v: &Violation, t: f64) -> u64 {
    v.acc_ns
        + v.since
            .map(|s| ((t - s).max(0.0) * 1e9) as u64)
            .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::ThrottleState;
    use crate::fault::Reason;
    use crate::scenario::Counters;

    /// The scenario's reasons split into settings, idle and throttling, and
    /// the throttling ones count violation and clock-event time from the
    /// start on top of the durations it gives, until a fault clears them.
    #[test]
    fn counters_start_the_reasons_and_their_clocks() {
        let counters = Counters {
            clock_event_reasons: Some(vec![
                Reason::GpuIdle,
                Reason::ApplicationsClocksSetting,
                Reason::SwThermalSlowdown,
            ]),
            clock_event_durations_us: [1, 2, 3, 4, 5],
            ..Counters::default()
        };
        let mut t = ThrottleState::from_counters(&counters);
        assert_eq!(t.active, Reason::SwThermalSlowdown.bit());
        assert_eq!(t.fixed_reasons, Reason::ApplicationsClocksSetting.bit());
        assert_eq!(t.idle_reason, Some(true));
        assert_eq!(t.supported_reasons, 0x1ff);
        // Thermal policy and SW thermal reason run since 0; power cap,
        // sync boost and HW thermal keep what the scenario gave.
        assert_eq!(t.violation_ns(1, 1.0), 3_000 + 1_000_000_000);
        assert_eq!(t.event_ns(0, 1.0), 3_000 + 1_000_000_000);
        assert_eq!(t.violation_ns(0, 1.0), 1_000);
        assert_eq!(t.violation_ns(2, 1.0), 2_000);
        assert_eq!(t.event_ns(1, 1.0), 4_000);
        assert_eq!(t.event_ns(2, 1.0), 5_000);
        t.set_throttle(0, 2.0);
        assert_eq!(t.violation_ns(1, 9.0), 3_000 + 2_000_000_000);
        assert_eq!(t.event_ns(0, 9.0), 3_000 + 2_000_000_000);
    }
}
