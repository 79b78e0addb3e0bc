//! Memory health (`ffi/retirement.rs`): retired pages with their addresses and
//! times, the pending retirement, and remapped rows with the remapper's
//! histogram.

use super::{Facts, GpuOut, Walker, NOT_FOUND_FN};
use crate::fault::RetireCause;
use crate::model::EccSection;
use crate::schema::{Histogram, RemapFile, RetiredPage};
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

impl Walker {
    pub(super) fn retired_pages(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut pages = Vec::new();
        let mut answered = false;
        for (cause, kind) in [(0, RetireCause::Sbe), (1, RetireCause::Dbe)] {
            let mut count = 0;
            if call!(
                self,
                nvmlDeviceGetRetiredPages_v2(
                    d,
                    cause,
                    &raw mut count,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                )
            )
            .is_err()
                && count == 0
            {
                continue;
            }
            answered = true;
            let mut addrs = vec![0u64; count as usize];
            let mut times = vec![0u64; count as usize];
            if count > 0
                && call!(
                    self,
                    nvmlDeviceGetRetiredPages_v2(
                        d,
                        cause,
                        &raw mut count,
                        addrs.as_mut_ptr(),
                        times.as_mut_ptr()
                    )
                )
                .is_ok()
            {
                for (a, t) in addrs.iter().zip(&times).take(count as usize) {
                    pages.push(RetiredPage {
                        address: *a,
                        cause: kind,
                        timestamp_us: Some(*t),
                    });
                }
            }
        }
        board_ecc(out).page_retirement = Some(answered);
        if !answered {
            return;
        }
        out.counters.retired_pages = Some(Val::Is(pages));
        let mut pending = 0;
        if call!(
            self,
            nvmlDeviceGetRetiredPagesPendingStatus(d, &raw mut pending)
        )
        .is_ok()
        {
            out.counters.retired_pending = Some(pending == 1);
        }
    }

    /// Remapped rows; in MIG mode NVML does not report them, and a board
    /// of Ampere or newer with ECC still remaps.
    pub(super) fn remapped_rows(
        &mut self,
        d: nvmlDevice_t,
        facts: &Facts,
        ecc: bool,
        out: &mut GpuOut,
    ) {
        let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
        let remap = call!(
            self,
            nvmlDeviceGetRemappedRows(
                d,
                &raw mut corr,
                &raw mut unc,
                &raw mut pending,
                &raw mut failure
            )
        );
        let ampere_up = facts
            .arch
            .is_ok_and(|a| a >= NVML_DEVICE_ARCH_AMPERE && a != NVML_DEVICE_ARCH_UNKNOWN);
        let mig_on = matches!(facts.mig, Ok((1, _)));
        board_ecc(out).row_remapping = Some(remap.is_ok() || (mig_on && ampere_up && ecc));
        if remap.is_err() {
            return;
        }
        let mut rows = RemapFile {
            correctable: Some(corr),
            uncorrectable: Some(unc),
            pending: Some(pending != 0),
            failure: Some(failure != 0),
            histogram: None,
        };
        // SAFETY: a plain C struct; zero is a valid value.
        let mut h: nvmlRowRemapperHistogramValues_t = unsafe { std::mem::zeroed() };
        if call!(self, nvmlDeviceGetRowRemapperHistogram(d, &raw mut h)).is_ok() {
            let banks = [h.high, h.partial, h.low, h.none]
                .iter()
                .fold(h.max, |sum, n| sum.saturating_add(*n));
            board_ecc(out).remapper_banks = Some(banks);
            rows.histogram = Some(Histogram {
                max: h.max,
                high: h.high,
                partial: h.partial,
                low: h.low,
                none: h.none,
            });
        }
        out.counters.remapped_rows = Some(Val::Is(rows));
    }
}

fn board_ecc(out: &mut GpuOut) -> &mut EccSection {
    out.board.ecc.get_or_insert_with(EccSection::default)
}
