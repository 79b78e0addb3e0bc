//! PCIe (`ffi/pcie.rs`): the link's maximum generation and width (the
//! board's), the link now and its throughput (pinned), and the replay
//! counter.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::model::PcieSection;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn pcie(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let (mut gen, mut width) = (0, 0);
        let rg = call!(self, nvmlDeviceGetMaxPcieLinkGeneration(d, &raw mut gen));
        let rw = call!(self, nvmlDeviceGetMaxPcieLinkWidth(d, &raw mut width));
        out.board.pcie = Some(PcieSection {
            generation: Some(if rg.is_ok() { gen.clamp(1, 6) } else { 3 }),
            width: Some(if rw.is_ok() && width > 0 { width } else { 16 }),
        });
        let r = &mut out.readings;
        let (mut cg, mut cw) = (0, 0);
        r.pcie_generation = Some(
            call!(self, nvmlDeviceGetCurrPcieLinkGeneration(d, &raw mut cg))
                .map_or(Val::NotSupported, |()| Val::Is(cg)),
        );
        if call!(self, nvmlDeviceGetCurrPcieLinkWidth(d, &raw mut cw)).is_ok() && cw > 0 {
            r.pcie_width = Some(cw);
        }
        for (counter, slot) in [(0, &mut r.pcie_tx_kbps), (1, &mut r.pcie_rx_kbps)] {
            let mut v = 0;
            *slot = Some(
                call!(self, nvmlDeviceGetPcieThroughput(d, counter, &raw mut v))
                    .map_or(Val::NotSupported, |()| Val::Is(v)),
            );
        }
    }

    pub(super) fn replays(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut replays = 0;
        out.counters.pcie_replays = Some(
            call!(self, nvmlDeviceGetPcieReplayCounter(d, &raw mut replays))
                .map_or(Val::NotSupported, |()| Val::Is(replays)),
        );
    }
}
