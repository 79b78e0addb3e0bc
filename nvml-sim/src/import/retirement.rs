//! Memory health (`ffi/retirement.rs`, `ffi/fields.rs`): retired pages (Kepler to
//! Volta, and Turing/Ada boards that still report them), remapped rows
//! (Ampere and newer) and the recovery action the driver asks for.

use super::out::{Facts, Out};
use super::read::{fail, hex, Got, Gpu, Printed};
use super::{Node, ParseError};
use crate::fault::RetireCause;
use crate::model::Architecture;
use crate::model::EccSection;
use crate::schema::{Histogram, RecoveryAction, RemapFile, RetiredPage};
use crate::value::Val;

fn board_ecc(out: &mut Out) -> &mut EccSection {
    out.board.ecc.get_or_insert_with(EccSection::default)
}

/// Counts, and the addresses where printed.
pub fn pages(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    let sbe = g.count(&["retired_pages/multiple_single_bit_retirement/retired_count"])?;
    let dbe = g.count(&["retired_pages/double_bit_retirement/retired_count"])?;
    let numbers = matches!(sbe, Some(Printed::Num(_))) || matches!(dbe, Some(Printed::Num(_)));
    board_ecc(out).page_retirement = Some(numbers);
    if !numbers {
        if sbe.is_some() || dbe.is_some() {
            out.counters.retired_pages = Some(Val::NotSupported);
        }
        return Ok(());
    }
    let mut pages = Vec::new();
    for (cause, count, path) in [
        (
            RetireCause::Sbe,
            sbe,
            "retired_pages/multiple_single_bit_retirement",
        ),
        (RetireCause::Dbe, dbe, "retired_pages/double_bit_retirement"),
    ] {
        let n = count.and_then(Printed::num).unwrap_or(0.0) as u64;
        let listed: Vec<&Node> = g
            .node
            .path(&format!("{path}/retired_pagelist"))
            .map(|l| l.children_named("retired_page").collect())
            .unwrap_or_default();
        for i in 0..n.min(4097) {
            let printed = listed
                .get(i as usize)
                .and_then(|p| p.child("retired_page_address"))
                .and_then(|a| {
                    hex(&a.text).map(u64::from).or_else(|| {
                        u64::from_str_radix(a.text.trim().trim_start_matches("0x"), 16).ok()
                    })
                });
            // Unprinted addresses: distinct ones, by cause.
            let made = 0x1000 * (i + 1)
                + if cause == RetireCause::Dbe {
                    0x100_0000
                } else {
                    0
                };
            pages.push(RetiredPage {
                address: printed.unwrap_or(made),
                cause,
                timestamp_us: None,
            });
        }
    }
    if pages.len() > 4096 {
        return Err(fail(g.node, "more than 4096 retired pages"));
    }
    out.counters.retired_pages = Some(Val::Is(pages));
    if let Some(Printed::Bool(p)) = g.flag(&[
        "retired_pages/pending_retirement",
        "retired_pages/pending_blacklist",
    ])? {
        out.counters.retired_pending = Some(p);
    }
    Ok(())
}

/// Remapped rows; N/A in MIG mode, where NVML does not report them.
pub fn rows(g: &Gpu, facts: &Facts, ecc_supported: bool, out: &mut Out) -> Result<(), ParseError> {
    let mig_on = g.flag(&["mig_mode/current_mig"])? == Some(Printed::Bool(true));
    let corr = g.count(&["remapped_rows/remapped_row_corr"])?;
    let mut row_remapping = matches!(corr, Some(Printed::Num(_)));
    let count = |path: &str| -> Result<Option<u32>, ParseError> {
        match g.count(&[path])?.and_then(Printed::num) {
            Some(v) => Ok(Some(g.fits(&[path], v)?)),
            None => Ok(None),
        }
    };
    if row_remapping {
        let flag = |path: &str| -> Result<Option<bool>, ParseError> {
            Ok(match g.flag(&[path])? {
                Some(Printed::Bool(b)) => Some(b),
                _ => None,
            })
        };
        let mut r = RemapFile {
            correctable: count("remapped_rows/remapped_row_corr")?,
            uncorrectable: count("remapped_rows/remapped_row_unc")?,
            pending: flag("remapped_rows/remapped_row_pending")?,
            failure: flag("remapped_rows/remapped_row_failure")?,
            histogram: None,
        };
        let mut banks = Vec::new();
        for k in ["max", "high", "partial", "low", "none"] {
            banks.push(count(&format!(
                "remapped_rows/row_remapper_histogram/row_remapper_histogram_{k}"
            ))?);
        }
        if let [Some(max), Some(high), Some(partial), Some(low), Some(none)] = banks[..] {
            let total = [high, partial, low, none]
                .iter()
                .fold(max, |sum, n| sum.saturating_add(*n));
            board_ecc(out).remapper_banks = Some(total);
            r.histogram = Some(Histogram {
                max,
                high,
                partial,
                low,
                none,
            });
        }
        out.counters.remapped_rows = Some(Val::Is(r));
    } else if mig_on && ecc_supported && facts.arch.at_least(Architecture::Ampere) {
        // Hidden by MIG mode, not missing from the board.
        row_remapping = true;
    } else if corr.is_some() || g.first(&["remapped_rows"]).is_some() {
        out.counters.remapped_rows = Some(Val::NotSupported);
    }
    board_ecc(out).row_remapping = Some(row_remapping);
    Ok(())
}

pub fn recovery_action(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    out.counters.recovery_action = match g.at(&["gpu_recovery_action"]) {
        Got::Is(n) => Some(Val::Is(match n.text.trim() {
            "None" => RecoveryAction::None,
            "Reset" | "GPU Reset" => RecoveryAction::GpuReset,
            "Reboot" | "Node Reboot" => RecoveryAction::NodeReboot,
            "Drain P2P" => RecoveryAction::DrainP2p,
            "Drain and Reset" => RecoveryAction::DrainAndReset,
            t => return Err(fail(n, format!("unknown GPU recovery action `{t}`"))),
        })),
        // "None" is printed for no action: it reads as N/A above.
        Got::Na
            if g.first(&["gpu_recovery_action"])
                .is_some_and(|n| n.text.trim() == "None") =>
        {
            Some(Val::Is(RecoveryAction::None))
        }
        Got::Na => Some(Val::NotSupported),
        Got::Absent => None,
    };
    Ok(())
}
