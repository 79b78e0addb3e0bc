//! Modes and settings (`ffi/mode.rs`): persistence, display, compute
//! mode, virtualization mode and the Windows driver model.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::schema::{ComputeMode, DriverModel, VirtualizationMode};
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn settings(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let gpu = &mut out.gpu;
        let mut state = 0;
        gpu.persistence = Some(
            call!(self, nvmlDeviceGetPersistenceMode(d, &raw mut state))
                .map_or(Val::NotSupported, |()| Val::Is(state == 1)),
        );
        gpu.display = Some(
            call!(self, nvmlDeviceGetDisplayActive(d, &raw mut state))
                .map_or(Val::NotSupported, |()| Val::Is(state == 1)),
        );
        let display_mode =
            call!(self, nvmlDeviceGetDisplayMode(d, &raw mut state)).map(|()| state == 1);
        if display_mode == Ok(true) || gpu.display == Some(Val::Is(true)) {
            out.board.display = Some(true);
        }
        gpu.display_mode = Some(display_mode.map_or(Val::NotSupported, Val::Is));
        let mut mode = 0;
        gpu.compute_mode = Some(
            call!(self, nvmlDeviceGetComputeMode(d, &raw mut mode)).map_or(
                Val::NotSupported,
                |()| {
                    Val::Is(
                        ComputeMode::ALL
                            .get(mode as usize)
                            .copied()
                            .unwrap_or(ComputeMode::Default),
                    )
                },
            ),
        );
        let mut virt = 0;
        if call!(self, nvmlDeviceGetVirtualizationMode(d, &raw mut virt)).is_ok() {
            gpu.virtualization_mode = VirtualizationMode::ALL
                .get(virt as usize)
                .filter(|m| **m != VirtualizationMode::None)
                .map(|m| Val::Is(*m));
        }
        let (mut dm, mut dm_pending) = (0, 0);
        if call!(
            self,
            nvmlDeviceGetDriverModel(d, &raw mut dm, &raw mut dm_pending)
        )
        .is_ok()
        {
            let model = |m: u32| {
                DriverModel::ALL
                    .get(m as usize)
                    .copied()
                    .unwrap_or(DriverModel::Wddm)
            };
            gpu.driver_model = Some(model(dm));
            gpu.driver_model_pending = Some(model(dm_pending));
        }
    }
}
