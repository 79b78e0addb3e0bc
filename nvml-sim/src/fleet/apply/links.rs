//! Links: an NVLink link down or up again, its error counters, and the
//! PCIe link retrained or replaying.

use super::super::Sim;
use crate::fault::NvlinkCounter;
use crate::value::Invalid;

impl Sim {
    pub(super) fn nvlink_state(
        &mut self,
        gpu: u32,
        link: u32,
        up: bool,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        if link >= g.model.nvlink.links {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) has {} NVLink links, no link {link}",
                g.model.name, g.model.nvlink.links
            )));
        }
        if up {
            g.nvlink_down &= !(1 << link);
        } else {
            g.nvlink_down |= 1 << link;
        }
        let state = if up { "up" } else { "down" };
        Ok(format!("GPU {gpu} NVLink {link} {state}"))
    }

    pub(super) fn nvlink_errors(
        &mut self,
        gpu: u32,
        link: u32,
        counter: NvlinkCounter,
        count: u64,
    ) -> Result<String, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        let nvlinks = g.model.nvlink.links;
        let name = g.model.name.clone();
        let blackwell_links = g.model.nvlink5();
        if nvlinks > 0 && !counter.counted_by(blackwell_links) {
            let (has, lacks) = if blackwell_links {
                ("NVLink5", "recovery, recovery-failed, effective, symbol")
            } else {
                (
                    "NVLink 1-4",
                    "replay, recovery, crc-flit, crc-data, ecc-data",
                )
            };
            return Err(Invalid::from(format!(
                "GPU {gpu} ({name}) has {has} links, which count {lacks}, not {counter:?} errors"
            )));
        }
        let Some(added) = g.nvlink_errors_added.get_mut(link as usize) else {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({name}) has {nvlinks} NVLink links, no link {link}"
            )));
        };
        added[counter.index()] += count;
        Ok(format!(
            "GPU {gpu} NVLink {link}: {count} more {counter:?} errors"
        ))
    }

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
            g.pcie_width = w;
        }
        let Some(count) = g.pcie_replay.as_mut() else {
            return Err(Invalid::from(format!(
                "GPU {gpu} reports no PCIe replay counter"
            )));
        };
        *count = count.saturating_add(replays);
        Ok(format!("GPU {gpu} PCIe x{}, {count} replays", g.pcie_width))
    }
}
