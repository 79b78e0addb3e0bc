//! Temperatures (`ffi/temperature.rs`): the thresholds in degrees and as
//! T.Limit margins (fields 193-196) and the fan count (the board's thermal
//! section); the temperature and the margin to T.Limit now (pinned). The
//! fan speeds are `fan.rs`.

use super::{version, GpuOut, Walker, NOT_FOUND_FN};
use crate::model::ThermalSection;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn thresholds(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut t = ThermalSection::default();
        for (kind, slot) in [
            (0, &mut t.shutdown_c),
            (1, &mut t.slowdown_c),
            (2, &mut t.memory_max_c),
            (3, &mut t.gpu_max_c),
        ] {
            let mut c = 0;
            *slot = Some(
                call!(self, nvmlDeviceGetTemperatureThreshold(d, kind, &raw mut c))
                    .map_or(Val::NotSupported, |()| Val::Is(c)),
            );
        }
        let margins = self.fields(d, &[(193, 0), (194, 0), (195, 0), (196, 0)]);
        let mut any_margin = false;
        for ((_, _, v), slot) in margins.iter().zip([
            &mut t.shutdown_tlimit_c,
            &mut t.slowdown_tlimit_c,
            &mut t.memory_max_tlimit_c,
            &mut t.gpu_max_tlimit_c,
        ]) {
            *slot = Some(match v {
                Ok(m) => {
                    any_margin = true;
                    Val::Is(*m as i32)
                }
                Err(_) => Val::NotSupported,
            });
        }
        t.tlimit = Some(any_margin);
        let mut fans = 0;
        let fans_ok = call!(self, nvmlDeviceGetNumFans(d, &raw mut fans)).is_ok();
        t.fans = Some(if fans_ok { fans } else { 0 });
        out.board.thermal = Some(t);
    }

    pub(super) fn temperatures(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut t = 0;
        out.readings.temperature_c = Some(
            call!(self, nvmlDeviceGetTemperature(d, 0, &raw mut t))
                .map_or(Val::NotSupported, |()| Val::Is(t)),
        );
        // SAFETY: a plain C struct; zero is a valid value.
        let mut margin: nvmlMarginTemperature_v1_t = unsafe { std::mem::zeroed() };
        margin.version = version::<nvmlMarginTemperature_v1_t>(1);
        if call!(self, nvmlDeviceGetMarginTemperature(d, &raw mut margin)).is_ok() {
            out.readings.tlimit_c = Some(Val::Is(margin.marginTemperature));
        }
    }
}
