//! Power (`ffi/power.rs`): the GPU's limits, the limit set and enforced,
//! and the draw now (pinned). The module's and the memory's scopes come
//! with the field values (`fields.rs`).

use super::{watts, GpuOut, Walker, NOT_FOUND_FN};
use crate::model::PowerSection;
use crate::schema::at;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn power_limits(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let (mut default, mut lo, mut hi, mut limit, mut enforced) = (0, 0, 0, 0, 0);
        let rd = call!(
            self,
            nvmlDeviceGetPowerManagementDefaultLimit(d, &raw mut default)
        );
        let rc = call!(
            self,
            nvmlDeviceGetPowerManagementLimitConstraints(d, &raw mut lo, &raw mut hi)
        );
        let rl = call!(self, nvmlDeviceGetPowerManagementLimit(d, &raw mut limit));
        let re = call!(self, nvmlDeviceGetEnforcedPowerLimit(d, &raw mut enforced));
        let default_mw = if rd.is_ok() {
            default
        } else if rl.is_ok() {
            limit
        } else {
            100_000
        };
        let mut power = PowerSection {
            default_limit_w: Some(watts(default_mw)),
            ..PowerSection::default()
        };
        if rc.is_ok() {
            power.min_limit_w = Some(watts(lo.min(default_mw)));
            power.max_limit_w = Some(watts(hi.max(default_mw)));
        }
        if rl.is_ok() {
            out.gpu.power_limit_w = Some(at(watts(limit)));
        }
        if re.is_ok() && rl.is_ok() && enforced != limit {
            out.gpu.enforced_power_limit_w = Some(at(watts(enforced)));
        }
        out.board.power = Some(power);
        for (f, r) in [
            ("nvmlDeviceGetPowerManagementDefaultLimit", rd),
            ("nvmlDeviceGetPowerManagementLimitConstraints", rc),
            ("nvmlDeviceGetPowerManagementLimit", rl),
            ("nvmlDeviceGetEnforcedPowerLimit", re),
        ] {
            if let Err(e) = r {
                out.failed(f, e);
            }
        }
    }

    /// The GPU's draw (the module's and the memory's are field values).
    pub(super) fn power_draw(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut mw = 0;
        out.readings.power_w = Some(
            call!(self, nvmlDeviceGetPowerUsage(d, &raw mut mw))
                .map_or(Val::NotSupported, |()| Val::Is(watts(mw))),
        );
    }
}
