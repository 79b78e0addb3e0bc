//! Clocks and performance (`ffi/clocks.rs`): the maximum clocks (the
//! board's), the clocks now and the performance state (pinned), and the
//! clock event reasons, active and supported.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::fault::Reason;
use crate::model::ClocksSection;
use crate::value::{NvmlErrorCode, Val};
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
    pub(super) fn clocks(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut clocks = ClocksSection::default();
        let mut max_err = None;
        let mut max_ok = false;
        for t in 0..4 {
            let mut mhz = 0;
            match call!(self, nvmlDeviceGetMaxClockInfo(d, t, &raw mut mhz)) {
                Ok(()) => {
                    max_ok = true;
                    *match t {
                        0 => &mut clocks.max_graphics_mhz,
                        1 => &mut clocks.max_sm_mhz,
                        2 => &mut clocks.max_memory_mhz,
                        _ => &mut clocks.max_video_mhz,
                    } = Some(mhz);
                }
                Err(e) => max_err = Some(e),
            }
        }
        // A board must have these: where NVML gives none, a stand-in that
        // the error below keeps from being answered.
        clocks.max_graphics_mhz.get_or_insert(1000);
        clocks.max_memory_mhz.get_or_insert(1000);
        out.board.clocks = Some(clocks);
        if let (false, Some(e)) = (max_ok, max_err) {
            out.errors
                .insert("nvmlDeviceGetMaxClockInfo", NvmlErrorCode::returned(e));
        }
        let r = &mut out.readings;
        for t in 0..4 {
            let mut mhz = 0;
            let v = call!(self, nvmlDeviceGetClockInfo(d, t, &raw mut mhz))
                .map_or(Val::NotSupported, |()| Val::Is(mhz));
            *match t {
                0 => &mut r.graphics_clock_mhz,
                1 => &mut r.sm_clock_mhz,
                2 => &mut r.memory_clock_mhz,
                _ => &mut r.video_clock_mhz,
            } = Some(v);
        }
    }

    pub(super) fn pstate(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut p = 0;
        out.readings.pstate = Some(
            call!(self, nvmlDeviceGetPerformanceState(d, &raw mut p)).map_or(
                Val::NotSupported,
                |()| {
                    if p > 15 {
                        Val::NotSupported
                    } else {
                        Val::Is(p)
                    }
                },
            ),
        );
    }

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
