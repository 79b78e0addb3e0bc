//! A GPU's NVLink state, following the model's NVLink section: what link
//! faults move (the fabric the links join is `fabric.rs`).

use crate::fault::NvlinkCounter;
use crate::model::Model;

/// Links taken down and errors added by faults.
#[derive(Debug, Clone)]
pub struct NvlinkState {
    /// Bit n set: NVLink link n is inactive.
    pub down: u64,
    /// Errors added by faults, per link, indexed by [`NvlinkCounter::index`].
    pub errors_added: Vec<[u64; NvlinkCounter::COUNT]>,
}

impl NvlinkState {
    /// Every link of the board up, no errors added.
    pub fn new(model: &Model) -> NvlinkState {
        NvlinkState {
            down: 0,
            errors_added: vec![[0; NvlinkCounter::COUNT]; model.nvlink.links as usize],
        }
    }

    pub fn active(&self, link: u32) -> bool {
        self.down & (1 << link) == 0
    }
}
