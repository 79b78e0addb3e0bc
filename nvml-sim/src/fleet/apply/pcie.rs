//! PCIe: the link retrained or replaying.

use super::super::Sim;
use crate::value::Invalid;

impl Sim {
    pub(super) fn pcie(
        &mut self,
        gpu: u32,
        width: Option<u32>,
        replays: u32,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if let Some(w) = width {
            if w == 0 || w > g.model.pcie.width {
                return Err(Invalid::from(format!(
                    "PCIe width {w} is outside 1..={} for GPU {gpu} ({})",
                    g.model.pcie.width, g.model.name
                )));
            }
            g.pcie.width = w;
        }
        let Some(count) = g.pcie.replay.as_mut() else {
            return Err(Invalid::from(format!(
                "GPU {gpu} reports no PCIe replay counter"
            )));
        };
        *count = count.saturating_add(replays);
        Ok(format!("GPU {gpu} PCIe x{}, {count} replays", g.pcie.width))
    }
}
