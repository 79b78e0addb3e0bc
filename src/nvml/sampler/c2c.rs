//! NVLink-C2C, the link between a Grace CPU and its GPU (GB200, GB300,
//! GH200): each link's state and error counters, riding in the scalar
//! field batch (`scalar.rs`), so a poll makes no call of its own for them.
//!
//! The link count (field 170) is asked once, in the first poll's batch;
//! the links' fields from the next poll on. A board without C2C answers
//! the count "not supported" (or 0) and is never asked again: its later
//! batches are as without this family.

use super::super::fields;
use super::scalar::Scalar;
use super::Gpu;
use crate::snapshot::{C2cError, C2cLink, GpuReadings};

/// The per-link error fields and what each counts.
const ERRORS: [(u32, C2cError); 3] = [
    (fields::C2C_ERROR_CRC, C2cError::Crc),
    (fields::C2C_ERROR_REPLAY, C2cError::Replay),
    (fields::C2C_ERROR_REPLAY_B2B, C2cError::ReplayB2b),
];

/// nvml.h's GPM metric ids name C2C links 0-13: a larger count is not
/// believed, so that a bad answer cannot grow the batch without bound.
const MAX_LINKS: u32 = 14;

#[derive(Debug, Default)]
pub struct State {
    /// `None` until the driver answered the link count; 0: no C2C.
    links: Option<u32>,
}

impl State {
    /// This poll's requests for the batch (none with the family off): the
    /// link count until it is known, then each link's status and the error
    /// counters the driver branch defines.
    pub fn requests(&self, g: &Gpu<'_, '_>, on: bool) -> Vec<(u32, u32)> {
        match self.links {
            _ if !on => Vec::new(),
            None => vec![(fields::C2C_LINK_COUNT, 0)],
            Some(links) => (0..links)
                .flat_map(|link| {
                    std::iter::once(fields::C2C_LINK_STATUS)
                        .chain(ERRORS.iter().map(|&(id, _)| id))
                        .filter(|&id| g.driver.has_field(id))
                        .map(move |id| (id, link))
                })
                .collect(),
        }
    }

    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let Some(links) = self.links else {
            self.links = match scalar.u64(fields::C2C_LINK_COUNT) {
                Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX).min(MAX_LINKS)),
                // Not supported (or an id the branch lacks): no C2C here.
                None if g.calls.absent_fields.contains(&(fields::C2C_LINK_COUNT, 0)) => Some(0),
                // The batch failed: asked again next poll.
                None => None,
            };
            return;
        };
        r.c2c_links = (0..links)
            .map(|link| {
                let value = |id| scalar.scoped(id, link).and_then(|v| v.as_u64());
                C2cLink {
                    link,
                    up: value(fields::C2C_LINK_STATUS).map(|s| s == 1),
                    errors: ERRORS
                        .iter()
                        .filter_map(|&(id, e)| value(id).map(|n| (e, n)))
                        .collect(),
                }
            })
            .filter(|l| l.up.is_some() || !l.errors.is_empty())
            .collect();
    }
}
