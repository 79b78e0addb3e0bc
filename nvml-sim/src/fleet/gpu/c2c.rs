//! A GPU's NVLink-C2C links to its Grace CPU, following the board's
//! `c2c_links`: what the `c2c-state` and `c2c-errors` faults move.

use crate::fault::C2cCounter;
use crate::model::Model;

/// Links taken down and errors counted, per link.
#[derive(Debug, Clone)]
pub struct C2cState {
    /// Bit n set: C2C link n is inactive.
    pub down: u64,
    /// Errors per link, indexed by [`C2cCounter::index`]; a healthy link
    /// counts none.
    pub errors: Vec<[u64; C2cCounter::COUNT]>,
}

impl C2cState {
    /// Every link of the board up, no errors.
    pub fn new(model: &Model) -> C2cState {
        C2cState {
            down: 0,
            errors: vec![[0; C2cCounter::COUNT]; model.c2c_links as usize],
        }
    }

    pub fn links(&self) -> u32 {
        self.errors.len() as u32
    }

    pub fn active(&self, link: u32) -> bool {
        self.down & (1 << link) == 0
    }
}
