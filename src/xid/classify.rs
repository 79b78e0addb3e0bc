//! How an XID event is classified: by its code (NVIDIA's catalog,
//! `crate::xid_catalog`), or, for the codes whose kernel-log line decides
//! (NVLink5's 144-150 by NVIDIA's decode sheet, 74 by its registers), by
//! that line. Facts of the catalog and the sheets, not verdicts: what each
//! class asks for is the verdict's (`crate::verdict::xid_class_action`).

use crate::kmsg::{Nvlink5Words, Xid};
use crate::snapshot::XidClass;
use crate::xid_catalog;

pub use xid_catalog::nvlink5::is_nvlink5;

/// Codes whose events are decided by their kernel-log line: NVML's event
/// waits for it (NVLink5's decode sheet, 74's registers, 45's named cause).
pub fn decided_by_line(code: u64) -> bool {
    is_nvlink5(code) || code == 74 || code == 45
}

/// The class of an event whose line never came, and of NVML's event,
/// which carries the code alone (an NVLink5 code waits for its log line:
/// `Ledger::record`).
pub fn class_without_line(code: u64) -> XidClass {
    if is_nvlink5(code) {
        XidClass::Nvlink5NoKernelLog
    } else {
        XidClass::Code
    }
}

/// How an XID 74 line is judged: by NVIDIA's workflow on its registers
/// (`xid_catalog::nvlink_err`); without them, by its code (the verdict's
/// code-wide action, the reason says the registers were missing).
pub fn nvlink_err_class(registers: Option<[u32; 7]>) -> XidClass {
    use xid_catalog::nvlink_err::{decide, Decision};
    match registers.map(|r| decide(&r)) {
        None => XidClass::Code,
        Some(Decision::Nothing) => XidClass::NvlinkErrNothing,
        Some(Decision::FabricReset) => XidClass::NvlinkErrFabricReset,
        Some(Decision::Report) => XidClass::NvlinkErrReport,
        Some(Decision::CheckLink) => XidClass::NvlinkErrCheckLink,
    }
}

/// How an NVLink5 line is judged: an injected fault (`i1`, a drill) as a
/// test, asking for nothing; else by the sheet's row for its registers,
/// read with the driver's encoding (`driver_major`; `None`: unknown, then
/// the severity word alone decides) and naming the line's unit (a row of
/// another unit means the encoding was misread: the other encoding's row
/// is taken where its unit agrees, as gpud's `unitMatches` requires);
/// else by its severity word.
pub fn nvlink5_class(code: u64, words: &Nvlink5Words, driver_major: Option<u32>) -> XidClass {
    use xid_catalog::nvlink5::{decode, unit_agrees, Resolution, V2_FROM_MAJOR};
    if words.injected {
        return XidClass::Nvlink5Injected;
    }
    let agrees = |major: u32| {
        let xid = u16::try_from(code).ok()?;
        decode(xid, words.intr_info, words.error_status, major)
            .filter(|d| words.unit.is_some_and(|u| unit_agrees(d.rule, u)))
    };
    let other = |major: u32| {
        if major >= V2_FROM_MAJOR {
            V2_FROM_MAJOR - 1
        } else {
            V2_FROM_MAJOR
        }
    };
    let row = driver_major.and_then(|major| agrees(major).or_else(|| agrees(other(major))));
    match row.map(|r| r.resolution) {
        Some(Resolution::ResetGpu) => XidClass::Nvlink5Fatal,
        Some(Resolution::Ignore | Resolution::Xid154Eval) => XidClass::Nvlink5Nothing,
        None if words.fatal => XidClass::Nvlink5Fatal,
        None => XidClass::Nvlink5Nothing,
    }
}

/// A kernel-log line's class: 74 by its registers, NVLink5 by its
/// words (`driver_major`: the driver that printed it), a 45 that names
/// its cause as caused, any other code by its bucket.
pub(super) fn line_class(xid: &Xid, driver_major: Option<u32>) -> XidClass {
    match xid.nvlink5 {
        _ if xid.code == 45 && xid.caused_by.is_some() => XidClass::Xid45Caused,
        _ if xid.code == 74 => nvlink_err_class(xid.nvlink_err.map(|e| e.registers)),
        _ if !is_nvlink5(xid.code) => XidClass::Code,
        Some(w) => nvlink5_class(xid.code, &w, driver_major),
        None => XidClass::Nvlink5Undecoded,
    }
}

/// Whether the verdict may act on an event of this code and class, so the
/// ledger keeps its latest (`Ledger::note_latest`): the one rule, which
/// the verdict reads too (`XidClass::matters`).
pub fn kept(code: u64, class: XidClass) -> bool {
    class.matters(code)
}
