//! Utilization (`ffi/utilization.rs`): each engine's now, pinned; and the
//! readings of the other groups a replay pins with it.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::schema::UtilizationFile;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    /// The readings of the thermal, power and clock groups.
    pub(super) fn readings(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        self.temperatures(d, out);
        self.power_draw(d, out);
        self.pstate(d, out);
        self.fan_speeds(d, out);
    }

    pub(super) fn utilization(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut util = UtilizationFile::default();
        // SAFETY: a plain C struct; zero is a valid value.
        let mut u: nvmlUtilization_t = unsafe { std::mem::zeroed() };
        let rates = call!(self, nvmlDeviceGetUtilizationRates(d, &raw mut u));
        util.gpu = Some(rates.map_or(Val::NotSupported, |()| Val::Is(u.gpu)));
        util.memory = Some(rates.map_or(Val::NotSupported, |()| Val::Is(u.memory)));
        for (engine, slot) in [
            (0, &mut util.encoder),
            (1, &mut util.decoder),
            (2, &mut util.jpeg),
            (3, &mut util.ofa),
        ] {
            let (mut v, mut period) = (0, 0);
            let r = match engine {
                0 => call!(
                    self,
                    nvmlDeviceGetEncoderUtilization(d, &raw mut v, &raw mut period)
                ),
                1 => call!(
                    self,
                    nvmlDeviceGetDecoderUtilization(d, &raw mut v, &raw mut period)
                ),
                2 => call!(
                    self,
                    nvmlDeviceGetJpgUtilization(d, &raw mut v, &raw mut period)
                ),
                _ => call!(
                    self,
                    nvmlDeviceGetOfaUtilization(d, &raw mut v, &raw mut period)
                ),
            };
            *slot = Some(r.map_or(Val::NotSupported, |()| Val::Is(v)));
        }
        out.readings.utilization = Some(util);
    }
}
