//! PCIe (`ffi/pcie.rs`): the link's maximum generation and width (the
//! board's), the link now and its throughput (pinned readings), and the
//! replay counter.

use super::out::{Facts, Out};
use super::read::{Gpu, Printed};
use super::ParseError;
use crate::model::PcieSection;
use crate::value::Val;

const MAX_GEN: &str = "pci/pci_gpu_link_info/pcie_gen/max_link_gen";
const MAX_WIDTH: &str = "pci/pci_gpu_link_info/link_widths/max_link_width";
const CUR_GEN: &str = "pci/pci_gpu_link_info/pcie_gen/current_link_gen";
const CUR_WIDTH: &str = "pci/pci_gpu_link_info/link_widths/current_link_width";

pub fn board(g: &Gpu, facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let max_gen = g.number(&[MAX_GEN])?;
    let max_width = g.number(&[MAX_WIDTH])?;
    let cur_gen = g.number(&[CUR_GEN])?;
    let cur_width = g.number(&[CUR_WIDTH])?;
    let mut pcie = PcieSection::default();
    let cur = |v: Option<Printed>| v.and_then(Printed::num).unwrap_or(0.0);
    if let Some(v) = max_gen
        .and_then(Printed::num)
        .or(cur_gen.and_then(Printed::num))
    {
        pcie.generation = Some(v.max(cur(cur_gen)).clamp(1.0, 6.0) as u32);
    } else if facts.base.is_none() {
        pcie.generation = Some(3);
    }
    let width = max_width
        .and_then(Printed::num)
        .or(cur_width.and_then(Printed::num));
    if let Some(v) = width {
        pcie.width = Some(g.fits(&[MAX_WIDTH, CUR_WIDTH], v.max(cur(cur_width)))?);
    } else if facts.base.is_none() {
        pcie.width = Some(16);
    }
    if pcie.generation.is_some() || pcie.width.is_some() {
        out.board.pcie = Some(pcie);
    }
    for (v, call) in [
        (max_gen, "nvmlDeviceGetMaxPcieLinkGeneration"),
        (max_width, "nvmlDeviceGetMaxPcieLinkWidth"),
        (cur_width, "nvmlDeviceGetCurrPcieLinkWidth"),
    ] {
        if v == Some(Printed::Na) {
            out.not_supported(&[call]);
        }
    }
    Ok(())
}

pub fn readings(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    out.readings.pcie_tx_kbps = g.rounded(&["pci/tx_util"])?;
    out.readings.pcie_rx_kbps = g.rounded(&["pci/rx_util"])?;
    out.readings.pcie_generation = g.rounded(&[CUR_GEN])?;
    if let Some(Printed::Num(w)) = g.number(&[CUR_WIDTH])? {
        out.readings.pcie_width = Some(g.fits(&[CUR_WIDTH], w)?);
    }
    out.counters.pcie_replays = match g.count(&["pci/replay_counter"])? {
        None => None,
        Some(p) => Some(match p.num() {
            Some(v) => Val::Is(g.fits(&["pci/replay_counter"], v)?),
            None => Val::NotSupported,
        }),
    };
    Ok(())
}
