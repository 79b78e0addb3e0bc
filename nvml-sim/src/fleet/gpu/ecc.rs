//! A GPU's ECC state, following the model's ECC section: the error counts
//! and where they are kept, the SRAM counters, remapped rows and retired
//! pages (the board's ECC section says whether it remaps or retires), and
//! the recovery action the driver asks after them.

use crate::fault::RetireCause;
use crate::scenario::{Counters, GpuSpec, SramCounts};
use crate::value::Val;

#[derive(Debug, Clone)]
pub struct RetiredPage {
    pub address: u64,
    pub cause: RetireCause,
    pub timestamp_us: u64,
}

/// The counters ECC faults move, and what the scenario says NVML does not
/// report.
#[derive(Debug, Clone)]
pub struct EccState {
    /// [error type][0 volatile, 1 aggregate][nvmlMemoryLocation_t]
    pub counts: [[[u64; 8]; 2]; 2],
    /// Per error type (corrected, uncorrected), bit n: memory location n
    /// has ECC counters.
    pub locations: [u8; 2],
    /// The SRAM counters and threshold flag, as the scenario gives them;
    /// `sram-threshold` faults set the flag.
    pub sram: SramCounts,
    pub remap_corr: u32,
    pub remap_unc: u32,
    pub remap_pending: bool,
    pub remap_failure: bool,
    /// The histogram the scenario gave, and the rows remapped then.
    pub remap_histogram: Option<([u32; 5], u32)>,
    /// The scenario says "N/A" to remapped rows / retired pages.
    pub remap_unsupported: bool,
    pub retired_unsupported: bool,
    pub retired: Vec<RetiredPage>,
    pub retired_pending: bool,
    /// The recovery action the scenario pins (`None`: derived from the
    /// pending remaps and retirements), and whether a reset was already
    /// pending when it was pinned: what the driver asks after ECC repairs.
    pub recovery_action: Option<Val<u32>>,
    pub reset_pending_at_start: bool,
}

impl EccState {
    /// The scenario's ECC counters for GPU `index`, or where it gives none,
    /// a little corrected history derived from the index (long-lived boards
    /// have some).
    pub fn from_spec(index: u32, spec: &GpuSpec) -> EccState {
        let counters = &spec.counters;
        let counts = counters.ecc.unwrap_or_else(|| {
            let mut ecc = [[[0u64; 8]; 2]; 2];
            if spec.model.ecc.supported {
                ecc[0][1][2] = (index as u64 * 7) % 5;
                ecc[0][1][1] = (index as u64) % 2;
            }
            ecc
        });
        let remap = counters.remapped_rows.and_then(|r| match r {
            Val::Is(r) => Some(r),
            Val::NotSupported => None,
        });
        let remap_rows = remap.map_or(0, |r| r.correctable + r.uncorrectable);
        EccState {
            counts,
            // L1, L2, DRAM, register file and SRAM: HBM boards have no
            // texture or CBU counters.
            locations: counters.ecc_locations.unwrap_or([0b1000_1111; 2]),
            sram: counters.sram.unwrap_or_default(),
            remap_corr: remap.map_or(0, |r| r.correctable),
            remap_unc: remap.map_or(0, |r| r.uncorrectable),
            remap_pending: remap.is_some_and(|r| r.pending),
            remap_failure: remap.is_some_and(|r| r.failure),
            remap_histogram: remap.and_then(|r| r.histogram).map(|h| (h, remap_rows)),
            remap_unsupported: counters.remapped_rows == Some(Val::NotSupported),
            retired_unsupported: counters.retired_pages == Some(Val::NotSupported),
            retired: retired_pages(counters),
            retired_pending: counters.retired_pending,
            recovery_action: counters.recovery_action,
            reset_pending_at_start: remap.is_some_and(|r| r.pending) || counters.retired_pending,
        }
    }

    /// The row remapper histogram `[max, high, partial, low, none]` of a
    /// board with `banks` banks: every bank starts with all its spare rows;
    /// each remapped row takes one from a bank of its own (to `high`), and a
    /// remap failure leaves a bank with none.
    pub fn remapper_histogram(&self, banks: u32) -> [u32; 5] {
        if let Some(([max, high, partial, low, none], rows_then)) = self.remap_histogram {
            // Each row remapped since takes a bank from max to high.
            let more = (self.remap_corr + self.remap_unc).saturating_sub(rows_then);
            let moved = more.min(max);
            return [max - moved, high + moved, partial, low, none];
        }
        let none = u32::from(self.remap_failure).min(banks);
        let high = (self.remap_corr + self.remap_unc).min(banks - none);
        [banks - high - none, high, 0, 0, none]
    }

    /// The count of one error type (0 corrected, 1 uncorrected) and counter
    /// (0 volatile, 1 aggregate), summed over the memory locations.
    pub fn total(&self, error_type: usize, counter: usize) -> u64 {
        self.counts[error_type][counter].iter().sum()
    }
}

/// The pages the scenario's counters retired (none where it says "N/A").
fn retired_pages(counters: &Counters) -> Vec<RetiredPage> {
    match &counters.retired_pages {
        Some(Val::Is(pages)) => pages
            .iter()
            .map(|p| RetiredPage {
                address: p.address,
                cause: p.cause,
                timestamp_us: p.timestamp_us.unwrap_or_else(super::super::now_us),
            })
            .collect(),
        _ => Vec::new(),
    }
}
