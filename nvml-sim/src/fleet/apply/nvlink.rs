//! NVLink: a link down or up again, and its error counters. The PCIe link
//! is `pcie.rs`.

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
            g.nvlink.down &= !(1 << link);
        } else {
            g.nvlink.down |= 1 << link;
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
        let Some(added) = g.nvlink.errors_added.get_mut(link as usize) else {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({name}) has {nvlinks} NVLink links, no link {link}"
            )));
        };
        added[counter.index()] += count;
        Ok(format!(
            "GPU {gpu} NVLink {link}: {count} more {counter:?} errors"
        ))
    }
}
