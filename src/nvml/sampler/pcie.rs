//! PCIe link, replay errors and traffic (`nvidia_gpu_pcie_*`). Replay and
//! byte counters come from the field batch; the maximum link is cached.

use super::super::calls::{Cached, Got};
use super::super::fields;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::GpuReadings;

#[derive(Default)]
pub struct State {
    /// Maximum link generation and width.
    max: Cached<(Option<u32>, Option<u32>)>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let fam = Family::Pcie.name();
        let (d, c) = (g.device, &mut *g.calls);
        r.pcie.link_generation_current = c.run(fam, || d.current_pcie_link_gen()).value();
        r.pcie.link_width_current = c.run(fam, || d.current_pcie_link_width()).value();
        let (gen_max, width_max) = self
            .max
            .get(g.poll, || {
                let gen = c.run(fam, || d.max_pcie_link_gen());
                let width = c.run(fam, || d.max_pcie_link_width());
                match (gen, width) {
                    (Got::Failed, _) | (_, Got::Failed) => Got::Failed,
                    (gen, width) => Got::Value((gen.value(), width.value())),
                }
            })
            .unwrap_or((None, None));
        r.pcie.link_generation_max = gen_max;
        r.pcie.link_width_max = width_max;
        r.pcie.replay_errors = match scalar.u64(fields::PCIE_REPLAY) {
            Some(v) => Some(v),
            None => c
                .run_unless_absent("pcie_replay", fam, || d.pcie_replay_counter())
                .map(u64::from),
        };
        r.pcie.tx_bytes = scalar.u64(fields::PCIE_TX_BYTES);
        r.pcie.rx_bytes = scalar.u64(fields::PCIE_RX_BYTES);
    }
}
