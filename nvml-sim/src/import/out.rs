//! What the group readers of one `<gpu>` (`info.rs`, `memory.rs`...)
//! write into and share: the tables they fill and the facts read once.
//! `gpu.rs` calls the groups; they import only this, so no group and
//! `gpu.rs` import each other.

use crate::model::{Architecture, BoardFile};
use crate::schema::{CallErrors, CountersFile, GpuFile, ReadingsFile};
use crate::value::NvmlErrorCode;

/// The tables a GPU's groups fill.
#[derive(Default)]
pub struct Out {
    pub gpu: GpuFile,
    pub board: BoardFile,
    /// `[gpu.errors]`: calls that answer an error where a capture prints
    /// N/A for all they give.
    pub errors: CallErrors,
    pub readings: ReadingsFile,
    pub counters: CountersFile,
}

impl Out {
    /// The calls that answer NOT_SUPPORTED where the capture prints N/A for
    /// all they give.
    pub fn not_supported(&mut self, calls: &[&str]) {
        for call in calls {
            self.errors.insert(*call, NvmlErrorCode::NOT_SUPPORTED);
        }
    }
}

/// What the groups read once and others need.
pub struct Facts {
    /// The built-in board with the capture's PCI device id.
    pub base: Option<(&'static str, BoardFile)>,
    /// The architecture, by the board format's name.
    pub arch: Architecture,
}

/// The architecture nvidia-smi names, or (older DTDs print none) the one
/// the PCI device id belongs to.
pub fn architecture(printed: Option<&str>, device_id: Option<u32>) -> Architecture {
    if let Some(p) = printed {
        let p = p.to_ascii_lowercase();
        for a in Architecture::ALL {
            if a != Architecture::Unknown && p.starts_with(a.name()) {
                return a;
            }
        }
    }
    // Device id ranges of NVIDIA's PCI id list (pci-ids.ucw.cz, vendor 10de).
    let Some(id) = device_id.map(|d| d >> 16) else {
        return Architecture::Unknown;
    };
    match id {
        0x0fc0..=0x0fff | 0x1000..=0x103f | 0x1180..=0x12ff => Architecture::Kepler,
        0x1340..=0x143f | 0x17c0..=0x17ff => Architecture::Maxwell,
        0x1d80..=0x1dbf => Architecture::Volta,
        0x15f0..=0x15ff | 0x1b00..=0x1d7f => Architecture::Pascal,
        0x1e00..=0x1fff | 0x2180..=0x21ff => Architecture::Turing,
        0x20b0..=0x20ff | 0x2200..=0x22ff | 0x2400..=0x25ff => Architecture::Ampere,
        0x2300..=0x23ff => Architecture::Hopper,
        0x2680..=0x28ff => Architecture::Ada,
        0x2900..=0x2fff => Architecture::Blackwell,
        _ => Architecture::Unknown,
    }
}
