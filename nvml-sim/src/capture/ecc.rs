//! ECC (`ffi/ecc.rs`): the mode now and pending, the error counters by
//! type, scope and location (which locations have counters), and the
//! SRAM status.

use super::{version, GpuOut, Walker, NOT_FOUND_FN};
use crate::model::EccSection;
use crate::schema::{EccCounts, EccFile, EccLocationSets, EccScope, MemoryLocation, SramFile};
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    /// Fills the ECC group; returns the mode where the board has ECC.
    pub(super) fn ecc(&mut self, d: nvmlDevice_t, out: &mut GpuOut) -> Option<bool> {
        let (mut cur, mut pend) = (0, 0);
        let mode = call!(self, nvmlDeviceGetEccMode(d, &raw mut cur, &raw mut pend));
        out.board.ecc = Some(EccSection {
            supported: Some(mode.is_ok()),
            ..EccSection::default()
        });
        if mode.is_err() {
            out.gpu.ecc = Some(Val::NotSupported);
            return None;
        }
        out.gpu.ecc = Some(Val::Is(cur == 1));
        out.gpu.ecc_pending = Some(pend == 1);
        if cur == 1 {
            out.counters.ecc = Some(self.ecc_counts(d));
            out.counters.sram = self.sram(d);
        }
        Some(cur == 1)
    }

    fn ecc_counts(&mut self, d: nvmlDevice_t) -> EccFile {
        let mut file = EccFile::default();
        let mut sets = EccLocationSets::default();
        for ty in 0..2u32 {
            let mut have = Vec::new();
            for scope in 0..2u32 {
                for (l, at) in MemoryLocation::ALL.into_iter().enumerate() {
                    let mut n = 0;
                    if call!(
                        self,
                        nvmlDeviceGetMemoryErrorCounter(d, ty, scope, l as u32, &raw mut n)
                    )
                    .is_err()
                    {
                        continue;
                    }
                    let by_scope = if scope == 0 {
                        &mut file.volatile
                    } else {
                        &mut file.aggregate
                    }
                    .get_or_insert_with(EccScope::default);
                    let counts = if ty == 0 {
                        &mut by_scope.corrected
                    } else {
                        &mut by_scope.uncorrected
                    }
                    .get_or_insert_with(EccCounts::default);
                    *counts.slot(at) = Some(n);
                    if !have.contains(&at) {
                        have.push(at);
                    }
                }
            }
            if ty == 0 {
                sets.corrected = have;
            } else {
                sets.uncorrected = have;
            }
        }
        file.locations = Some(sets);
        file
    }

    fn sram(&mut self, d: nvmlDevice_t) -> Option<SramFile> {
        // SAFETY: a plain C struct; zero is a valid value.
        let mut s: nvmlEccSramErrorStatus_v1_t = unsafe { std::mem::zeroed() };
        s.version = version::<nvmlEccSramErrorStatus_v1_t>(1);
        call!(self, nvmlDeviceGetSramEccErrorStatus(d, &raw mut s)).ok()?;
        Some(SramFile {
            volatile_corrected: Some(s.volatileCor),
            volatile_uncorrected_parity: Some(s.volatileUncParity),
            volatile_uncorrected_secded: Some(s.volatileUncSecDed),
            aggregate_corrected: Some(s.aggregateCor),
            aggregate_uncorrected_parity: Some(s.aggregateUncParity),
            aggregate_uncorrected_secded: Some(s.aggregateUncSecDed),
            l2: Some(s.aggregateUncBucketL2),
            sm: Some(s.aggregateUncBucketSm),
            microcontroller: Some(s.aggregateUncBucketMcu),
            pcie: Some(s.aggregateUncBucketPcie),
            other: Some(s.aggregateUncBucketOther),
            threshold_exceeded: Some(s.bThresholdExceeded != 0),
        })
    }
}
