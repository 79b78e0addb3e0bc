//! Clock event (throttle) reasons (`ffi/throttle.rs`): active and
//! supported.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::fault::Reason;
use crate::value::NvmlErrorCode;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

/// The reasons by bit, in `nvmlClocksEventReason*` order.
const REASONS: [Reason; 9] = [
    Reason::GpuIdle,
    Reason::ApplicationsClocksSetting,
    Reason::SwPowerCap,
    Reason::HwSlowdown,
    Reason::SyncBoost,
    Reason::SwThermalSlowdown,
    Reason::HwThermalSlowdown,
    Reason::HwPowerBrakeSlowdown,
    Reason::DisplayClockSetting,
];

fn reasons(mask: u64) -> Vec<Reason> {
    REASONS
        .into_iter()
        .filter(|r| mask & r.bit() != 0)
        .collect()
}

impl Walker {
    pub(super) fn clock_event_reasons(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let (mut active, mut supported) = (0u64, 0u64);
        let ra = call!(
            self,
            nvmlDeviceGetCurrentClocksEventReasons(d, &raw mut active)
        )
        .or_else(|_| {
            call!(
                self,
                nvmlDeviceGetCurrentClocksThrottleReasons(d, &raw mut active)
            )
        });
        let rs = call!(
            self,
            nvmlDeviceGetSupportedClocksEventReasons(d, &raw mut supported)
        )
        .or_else(|_| {
            call!(
                self,
                nvmlDeviceGetSupportedClocksThrottleReasons(d, &raw mut supported)
            )
        });
        match (ra, rs) {
            (Ok(()), Ok(())) => {
                out.counters.clock_event_reasons = Some(reasons(active));
                out.counters.supported_clock_event_reasons = Some(reasons(supported));
            }
            (Err(e), _) | (_, Err(e)) => {
                for f in [
                    "nvmlDeviceGetCurrentClocksEventReasons",
                    "nvmlDeviceGetCurrentClocksThrottleReasons",
                    "nvmlDeviceGetSupportedClocksEventReasons",
                    "nvmlDeviceGetSupportedClocksThrottleReasons",
                ] {
                    out.errors.insert(f, NvmlErrorCode::returned(e));
                }
            }
        }
    }
}
