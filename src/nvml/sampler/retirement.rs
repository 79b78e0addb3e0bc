//! Retired pages, remapped rows and the recovery action
//! (`nvidia_gpu_retired_pages*`, `nvidia_gpu_remapped_rows*`,
//! `nvidia_gpu_recovery_action`), all from the field batch where the driver
//! has them, with the dedicated calls as fallbacks; and NVIDIA's two RMA
//! signals that only dedicated calls give: the row remapper histogram
//! (`nvidia_gpu_remapper_banks`) and the SRAM error threshold
//! (`nvidia_gpu_sram_uncorrectable_threshold_exceeded`).

use nvml_wrapper::enum_wrappers::device::RetirementCause as NvCause;

use super::super::fields;
use super::super::raw;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, RemappedRows, RetirementCause, SpareRows};

pub fn sample(g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
    let fam = Family::Retirement.name();
    let (nvml, h, d, c) = (g.nvml, g.handle, g.device, &mut *g.calls);
    for (id, nv, ours, key) in [
        (
            fields::RETIRED_SBE,
            NvCause::MultipleSingleBitEccErrors,
            RetirementCause::SingleBitEcc,
            "retired_sbe",
        ),
        (
            fields::RETIRED_DBE,
            NvCause::DoubleBitEccError,
            RetirementCause::DoubleBitEcc,
            "retired_dbe",
        ),
    ] {
        let count = scalar.u64(id).or_else(|| {
            c.run_unless_absent(key, fam, || d.retired_pages(nv))
                .map(|p| p.len() as u64)
        });
        if let Some(count) = count {
            r.retired_pages.push((ours, count));
        }
    }
    r.retired_pages_pending = scalar
        .u64(fields::RETIRED_PENDING)
        .map(|v| v != 0)
        .or_else(|| c.run_unless_absent("retired_pending", fam, || d.are_pages_pending_retired()));
    let remap_fields = [
        fields::REMAPPED_COR,
        fields::REMAPPED_UNC,
        fields::REMAPPED_PENDING,
        fields::REMAPPED_FAILURE,
    ]
    .map(|id| scalar.u64(id));
    r.remapped_rows = match remap_fields {
        [Some(cor), Some(unc), Some(pending), Some(failed)] => Some(RemappedRows {
            correctable: cor,
            uncorrectable: unc,
            pending: pending != 0,
            failed: failed != 0,
        }),
        _ => c
            .run_unless_absent("remapped_rows", fam, || raw::remapped_rows(nvml, h))
            .map(|(cor, unc, pending, failed)| RemappedRows {
                correctable: u64::from(cor),
                uncorrectable: u64::from(unc),
                pending,
                failed,
            }),
    };
    // NVML answers NOT_SUPPORTED on a GPU in MIG mode, as for remapped rows.
    if let Some(banks) = c.run_unless_absent("remapper_histogram", fam, || {
        raw::row_remapper_histogram(nvml, h)
    }) {
        r.remapper_banks = SpareRows::ALL
            .iter()
            .zip(banks)
            .map(|(&level, n)| (level, u64::from(n)))
            .collect();
    }
    r.sram_threshold_exceeded = c.run_unless_absent("sram_ecc_status", fam, || {
        raw::sram_threshold_exceeded(nvml, h)
    });
    r.recovery_action = scalar
        .u64(fields::RECOVERY_ACTION)
        .and_then(|v| u32::try_from(v).ok());
}
