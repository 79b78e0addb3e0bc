//! Fans (`ffi/fan.rs`): each fan's speed now (pinned); the fan count is the
//! board's thermal section (`temperature.rs`).

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::schema::OneOrMany;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    /// Each fan's speed, on a board with fans (a failed fan reads 0).
    pub(super) fn fan_speeds(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let fans = out.board.thermal.as_ref().and_then(|t| t.fans).unwrap_or(0);
        if fans == 0 {
            return;
        }
        let speeds = (0..fans)
            .map(|f| {
                let mut s = 0;
                call!(self, nvmlDeviceGetFanSpeed_v2(d, f, &raw mut s)).map_or(0, |()| s)
            })
            .collect();
        out.readings.fan_percent = Some(Val::Is(OneOrMany::Many(speeds)));
    }
}
