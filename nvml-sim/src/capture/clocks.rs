//! Clocks and performance (`ffi/clocks.rs`): the maximum clocks (the
//! board's), the clocks now and the performance state (pinned). The clock
//! event reasons are `throttle.rs`.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::model::ClocksSection;
use crate::value::{NvmlErrorCode, Val};
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

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
}
