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

use super::read::{fail, hex, is_na, Gpu};
use super::{clocks, ecc, fabric, identity, memory, mig, mode, pcie, power};
use super::{processes, retirement, thermal, throttle, utilization};
use super::{Node, ParseError};
use crate::model::{BoardFile, BUILTIN_BOARDS};
use crate::schema::{at, CountersFile, GpuFile, ReadingsFile};
use serde::Serialize;

/// What one GPU contributes: its `[[gpu]]` table (its board's key to be
/// given) and its board, with the built-in it starts from.
pub struct Read {
    pub gpu: GpuFile,
    pub board: BoardFile,
    pub base: Option<&'static str>,
}

/// The tables a GPU's groups fill.
#[derive(Default)]
pub struct Out {
    pub gpu: GpuFile,
    pub board: BoardFile,
    /// `[gpu.errors]`: calls that answer an error where a capture prints
    /// N/A for all they give.
    pub errors: toml::Table,
    pub readings: ReadingsFile,
    pub counters: CountersFile,
}

impl Out {
    /// The calls that answer NOT_SUPPORTED where the capture prints N/A for
    /// all they give.
    pub fn not_supported(&mut self, calls: &[&str]) {
        for call in calls {
            self.errors
                .insert((*call).into(), toml::Value::String("NOT_SUPPORTED".into()));
        }
    }
}

/// What the groups read once and others need.
pub struct Facts {
    /// The built-in board with the capture's PCI device id.
    pub base: Option<(&'static str, BoardFile)>,
    /// The architecture, by the board format's name.
    pub arch: &'static str,
}

/// Architectures by the board format's names, oldest first.
pub const ARCHITECTURES: [&str; 9] = [
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
];

pub fn arch_at_least(arch: &str, than: &str) -> bool {
    let pos = |a: &str| ARCHITECTURES.iter().position(|x| *x == a);
    matches!((pos(arch), pos(than)), (Some(a), Some(b)) if a >= b)
}

/// The architecture nvidia-smi names, or (older DTDs print none) the one
/// the PCI device id belongs to.
pub fn architecture(printed: Option<&str>, device_id: Option<u32>) -> &'static str {
    if let Some(p) = printed {
        let p = p.to_ascii_lowercase();
        for a in ARCHITECTURES {
            if p.starts_with(a) {
                return a;
            }
        }
    }
    // Device id ranges of NVIDIA's PCI id list (pci-ids.ucw.cz, vendor 10de).
    let Some(id) = device_id.map(|d| d >> 16) else {
        return "unknown";
    };
    match id {
        0x0fc0..=0x0fff | 0x1000..=0x103f | 0x1180..=0x12ff => "kepler",
        0x1340..=0x143f | 0x17c0..=0x17ff => "maxwell",
        0x1d80..=0x1dbf => "volta",
        0x15f0..=0x15ff | 0x1b00..=0x1d7f => "pascal",
        0x1e00..=0x1fff | 0x2180..=0x21ff => "turing",
        0x20b0..=0x20ff | 0x2200..=0x22ff | 0x2400..=0x25ff => "ampere",
        0x2300..=0x23ff => "hopper",
        0x2680..=0x28ff => "ada",
        0x2900..=0x2fff => "blackwell",
        _ => "unknown",
    }
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

pub fn read_gpu(node: &Node, index: usize, notes: &mut Vec<String>) -> Result<Read, ParseError> {
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
    identity::board(&g, &facts, device_id, &mut out.board);
    identity::gpu(&mut g, &mut out)?;
    mode::settings(&g, &mut out)?;
    let room = memory::board(&g, &mut out)?;
    power::limits(&g, &mut out)?;
    clocks::board(&g, &facts, &mut out)?;
    thermal::board(&g, &facts, &mut out)?;
    pcie::board(&g, &facts, &mut out)?;
    let ecc_on = ecc::mode_and_counts(&g, &mut out)?;
    retirement::pages(&g, &mut out)?;
    retirement::rows(&g, &facts, ecc_on.is_some(), &mut out)?;
    throttle::reasons(&g, &mut out)?;
    retirement::recovery_action(&g, &mut out)?;
    thermal::readings(&g, &mut out)?;
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
