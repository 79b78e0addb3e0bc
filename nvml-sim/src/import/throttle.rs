//! Clock event (throttle) reasons (`ffi/throttle.rs`): which are active now
//! and which the GPU reports at all, and the time spent in each.

use super::out::Out;
use super::read::{is_na, Gpu, Printed};
use super::ParseError;
use crate::fault::Reason;
use crate::schema::DurationsFile;

/// The reasons by their element suffix.
const REASONS: &[(&str, Reason)] = &[
    ("gpu_idle", Reason::GpuIdle),
    (
        "applications_clocks_setting",
        Reason::ApplicationsClocksSetting,
    ),
    ("sw_power_cap", Reason::SwPowerCap),
    ("hw_slowdown", Reason::HwSlowdown),
    ("sync_boost", Reason::SyncBoost),
    ("sw_thermal_slowdown", Reason::SwThermalSlowdown),
    ("hw_thermal_slowdown", Reason::HwThermalSlowdown),
    ("hw_power_brake_slowdown", Reason::HwPowerBrakeSlowdown),
    ("display_clocks_setting", Reason::DisplayClockSetting),
];

/// The reason calls, which a section printed as one N/A answers for.
const CALLS: [&str; 4] = [
    "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
];

pub fn reasons(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    if let Some(section) = g.first(&["clocks_event_reasons", "clocks_throttle_reasons"]) {
        if section.children.is_empty() && is_na(&section.text) {
            out.not_supported(&CALLS);
        } else {
            let prefix = if section.name == "clocks_event_reasons" {
                "clocks_event_reason_"
            } else {
                "clocks_throttle_reason_"
            };
            let mut active = Vec::new();
            let mut unsupported = false;
            let mut supported = Vec::new();
            for (suffix, reason) in REASONS {
                match g.flag(&[&format!("{}/{prefix}{suffix}", section.name)])? {
                    Some(Printed::Bool(on)) => {
                        if on {
                            active.push(*reason);
                        }
                        supported.push(*reason);
                    }
                    Some(_) => unsupported = true,
                    // Not printed by this DTD: NVML may well report it.
                    None => supported.push(*reason),
                }
            }
            out.counters.clock_event_reasons = Some(active);
            if unsupported {
                out.counters.supported_clock_event_reasons = Some(supported);
            }
        }
    }
    let duration = |suffix: &str| -> Result<Option<u64>, ParseError> {
        let path = format!("clocks_event_reasons_counters/clocks_event_reasons_counters_{suffix}");
        Ok(g.count(&[&path])?
            .and_then(Printed::num)
            .map(|us| us as u64))
    };
    let d = DurationsFile {
        sw_power_cap: duration("sw_power_cap")?,
        sync_boost: duration("sync_boost")?,
        sw_thermal_slowdown: duration("sw_therm_slowdown")?,
        hw_thermal_slowdown: duration("hw_therm_slowdown")?,
        hw_power_brake_slowdown: duration("hw_power_brake")?,
    };
    if [
        d.sw_power_cap,
        d.sync_boost,
        d.sw_thermal_slowdown,
        d.hw_thermal_slowdown,
        d.hw_power_brake_slowdown,
    ]
    .iter()
    .any(Option::is_some)
    {
        out.counters.clock_event_durations_us = Some(d);
    }
    Ok(())
}
