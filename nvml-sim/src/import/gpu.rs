//! One `<gpu>` of a capture written as its `[[gpu]]` table and its board:
//! identity, settings, pinned readings and counters as the capture printed
//! them, `"N/A"` where it printed N/A. A board whose PCI device id is a
//! built-in board's starts from that board (`base`) and takes every value
//! the capture prints over it; any other is described whole from the
//! capture (name, memory, power limits, clocks, thresholds, PCI ids, the
//! MIG profiles its instances show). What nvidia-smi never prints (NVLink
//! count, engine counts of an unknown board) keeps the board's or the
//! format's default (docs/nvidia-smi.md, "What a capture cannot say").
//!
//! Each NVML group has its file, as in `ffi/` and `capture/`, called here
//! in the order a capture prints them (the first bad value is the one
//! reported).

use super::out::{architecture, Facts, Out};
use super::read::{fail, hex, is_na, Gpu};
use super::{clocks, ecc, fabric, info, memory, mig, mode, pcie, power};
use super::{processes, retirement, temperature, throttle, utilization};
use super::{Node, ParseError};
use crate::model::{BoardFile, BUILTIN_BOARDS};
use crate::schema::{at, GpuFile};
use serde::Serialize;

/// What one GPU contributes: its `[[gpu]]` table (its board's key to be
/// given) and its board, with the built-in it starts from.
pub struct Read {
    pub gpu: GpuFile,
    pub board: BoardFile,
    pub base: Option<&'static str>,
}

/// Built-in boards by PCI device id.
fn builtin_by_device_id(id: u32) -> Option<(&'static str, BoardFile)> {
    BUILTIN_BOARDS.iter().find_map(|(key, text)| {
        let f: BoardFile = toml::from_str(text).ok()?;
        (f.pci_device_id == Some(id)).then_some((*key, f))
    })
}

/// Whether a table would say anything once written.
fn says<T: Serialize>(value: &T) -> bool {
    toml::Table::try_from(value).is_ok_and(|t| !t.is_empty())
}

pub fn read_gpu(
    node: &Node,
    index: usize,
    notes: &mut Vec<super::Note>,
) -> Result<Read, ParseError> {
    let mut g = Gpu { node, index, notes };
    let name_node = node
        .child("product_name")
        .ok_or_else(|| fail(node, "a <gpu> without <product_name>: a truncated capture?"))?;
    if name_node.text.trim().is_empty() || is_na(&name_node.text) {
        return Err(fail(name_node, "the product name is empty"));
    }
    let device_id = g
        .text(&["pci/pci_device_id"])
        .and_then(hex)
        .filter(|&d| d != 0);
    let facts = Facts {
        base: device_id.and_then(builtin_by_device_id),
        arch: architecture(g.text(&["product_architecture"]), device_id),
    };
    let mut out = Out::default();
    info::board(&g, &facts, device_id, &mut out.board);
    info::gpu(&mut g, &mut out)?;
    info::platform(&g, &mut out)?;
    mode::settings(&g, &mut out)?;
    let room = memory::board(&g, &mut out)?;
    power::limits(&g, &mut out)?;
    clocks::board(&g, &facts, &mut out)?;
    temperature::board(&g, &facts, &mut out)?;
    pcie::board(&g, &facts, &mut out)?;
    let ecc_on = ecc::mode_and_counts(&g, &mut out)?;
    retirement::pages(&g, &mut out)?;
    retirement::rows(&g, &facts, ecc_on.is_some(), &mut out)?;
    throttle::reasons(&g, &mut out)?;
    retirement::recovery_action(&g, &mut out)?;
    temperature::readings(&g, &mut out)?;
    power::readings(&g, &facts, &mut out)?;
    clocks::readings(&g, &mut out)?;
    utilization::readings(&mut g, &mut out)?;
    pcie::readings(&g, &mut out)?;
    memory::readings(&g, &room, &mut out)?;
    mig::layout(&mut g, &facts, room.total, &mut out)?;
    processes::list(&mut g, &mut out)?;
    fabric::registration(&g, &facts, &mut out)?;
    let Out {
        mut gpu,
        board,
        errors,
        readings,
        counters,
    } = out;
    if !errors.is_empty() {
        gpu.errors = Some(at(errors));
    }
    if says(&readings) {
        gpu.readings = Some(at(readings));
    }
    if says(&counters) {
        gpu.counters = Some(counters);
    }
    Ok(Read {
        gpu,
        board,
        base: facts.base.map(|(k, _)| k),
    })
}
