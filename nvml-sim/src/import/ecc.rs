//! ECC (`ffi/ecc.rs`): the mode now and pending, the error counts by
//! scope, type and location (DTD v12+ prints DRAM and SRAM, older ones
//! single and double bit by location), and the SRAM status.

use super::out::Out;
use super::read::{Gpu, Printed};
use super::ParseError;
use crate::model::EccSection;
use crate::schema::{EccCounts, EccFile, EccLocationSets, EccScope, MemoryLocation, SramFile};
use crate::value::Val;

/// Where each location's counts are printed, by error type: the v12+
/// name, the older `single_bit`/`double_bit` section.
const COUNTS: [(&str, &str, &str, &str); 2] = [
    (
        "corrected",
        "single_bit",
        "dram_correctable",
        "sram_correctable",
    ),
    (
        "uncorrected",
        "double_bit",
        "dram_uncorrectable",
        "sram_uncorrectable",
    ),
];

/// Older DTDs' locations below `single_bit`/`double_bit`.
const OLD_LOCATIONS: [(MemoryLocation, &str); 9] = [
    (MemoryLocation::Dram, "device_memory"),
    (MemoryLocation::Dram, "dram"),
    (MemoryLocation::RegisterFile, "register_file"),
    (MemoryLocation::L1, "l1_cache"),
    (MemoryLocation::L2, "l2_cache"),
    (MemoryLocation::Texture, "texture_memory"),
    (MemoryLocation::TextureShm, "texture_shm"),
    (MemoryLocation::Cbu, "cbu"),
    (MemoryLocation::Sram, "sram"),
];

/// The ECC mode (`Some(on)` where the board has ECC) and, where it is on,
/// the counts.
pub fn mode_and_counts(g: &Gpu, out: &mut Out) -> Result<Option<bool>, ParseError> {
    let mode = g.flag(&["ecc_mode/current_ecc"])?;
    let pending = g.flag(&["ecc_mode/pending_ecc"])?;
    let on = match mode {
        Some(Printed::Bool(on)) => Some(on),
        _ => None,
    };
    out.board.ecc = Some(EccSection {
        supported: Some(on.is_some()),
        ..EccSection::default()
    });
    match mode {
        Some(Printed::Bool(on)) => {
            out.gpu.ecc = Some(Val::Is(on));
            if let Some(Printed::Bool(p)) = pending {
                out.gpu.ecc_pending = Some(p);
            }
        }
        Some(_) => out.gpu.ecc = Some(Val::NotSupported),
        None => {}
    }
    let (counts, locations) = counts(g)?;
    if on == Some(true) {
        out.counters.ecc = Some(match counts {
            Some(mut c) => {
                at_least_volatile(&mut c);
                // Exactly the locations the capture counts (the others N/A).
                c.locations = Some(EccLocationSets {
                    corrected: locations[0].clone(),
                    uncorrected: locations[1].clone(),
                });
                c
            }
            None => EccFile::default(),
        });
    }
    let sram = sram(g)?;
    if !sram.is_empty() && on.is_some() {
        out.counters.sram = Some(sram);
    }
    Ok(on)
}

/// The counts the capture prints (`None`: none), and the locations that
/// have them by error type.
fn counts(g: &Gpu) -> Result<(Option<EccFile>, [Vec<MemoryLocation>; 2]), ParseError> {
    let mut file = EccFile::default();
    let mut any = false;
    let mut locations: [Vec<MemoryLocation>; 2] = [Vec::new(), Vec::new()];
    for scope in ["volatile", "aggregate"] {
        let mut by_type = EccScope::default();
        for (ty, (name, old, dram, sram)) in COUNTS.iter().enumerate() {
            let mut locs = EccCounts::default();
            let mut put = |at: MemoryLocation, v: Option<Printed>| {
                if let Some(Printed::Num(x)) = v {
                    let slot = locs.slot(at);
                    *slot = Some(slot.unwrap_or(0) + x as u64);
                    any = true;
                    if !locations[ty].contains(&at) {
                        locations[ty].push(at);
                    }
                }
            };
            let path = |leaf: &str| format!("ecc_errors/{scope}/{leaf}");
            put(MemoryLocation::Dram, g.count(&[&path(dram)])?);
            put(MemoryLocation::Sram, g.count(&[&path(sram)])?);
            if *name == "uncorrected" {
                for part in ["sram_uncorrectable_parity", "sram_uncorrectable_secded"] {
                    put(MemoryLocation::Sram, g.count(&[&path(part)])?);
                }
            }
            for (at, loc) in OLD_LOCATIONS {
                put(at, g.count(&[&path(&format!("{old}/{loc}"))])?);
            }
            if locs != EccCounts::default() {
                if ty == 0 {
                    by_type.corrected = Some(locs);
                } else {
                    by_type.uncorrected = Some(locs);
                }
            }
        }
        if by_type.corrected.is_some() || by_type.uncorrected.is_some() {
            if scope == "volatile" {
                file.volatile = Some(by_type);
            } else {
                file.aggregate = Some(by_type);
            }
        }
    }
    Ok((any.then_some(file), locations))
}

/// An aggregate count is never below the volatile one (NVML's aggregate
/// includes the current driver load).
fn at_least_volatile(c: &mut EccFile) {
    let Some(vol) = c.volatile.clone() else {
        return;
    };
    let agg = c.aggregate.get_or_insert_with(EccScope::default);
    for (v, a) in [
        (vol.corrected, &mut agg.corrected),
        (vol.uncorrected, &mut agg.uncorrected),
    ] {
        let Some(mut v) = v else { continue };
        let a = a.get_or_insert_with(EccCounts::default);
        for at in MemoryLocation::ALL {
            let need = *v.slot(at);
            let have = a.slot(at);
            if let Some(need) = need {
                if have.unwrap_or(0) < need {
                    *have = Some(need);
                }
            }
        }
    }
}

/// The SRAM counters and sources, and whether the threshold is exceeded.
fn sram(g: &Gpu) -> Result<SramFile, ParseError> {
    let count = |path: &str| -> Result<Option<u64>, ParseError> {
        Ok(g.count(&[path])?.and_then(Printed::num).map(|v| v as u64))
    };
    let src = |s: &str| format!("ecc_errors/aggregate_uncorrectable_sram_sources/sram_{s}");
    Ok(SramFile {
        volatile_corrected: count("ecc_errors/volatile/sram_correctable")?,
        volatile_uncorrected_parity: count("ecc_errors/volatile/sram_uncorrectable_parity")?,
        volatile_uncorrected_secded: count("ecc_errors/volatile/sram_uncorrectable_secded")?,
        aggregate_corrected: count("ecc_errors/aggregate/sram_correctable")?,
        aggregate_uncorrected_parity: count("ecc_errors/aggregate/sram_uncorrectable_parity")?,
        aggregate_uncorrected_secded: count("ecc_errors/aggregate/sram_uncorrectable_secded")?,
        l2: count(&src("l2"))?,
        sm: count(&src("sm"))?,
        microcontroller: count(&src("microcontroller"))?,
        pcie: count(&src("pcie"))?,
        other: count(&src("other"))?,
        threshold_exceeded: match g.flag(&["ecc_errors/aggregate/sram_threshold_exceeded"])? {
            Some(Printed::Bool(b)) => Some(b),
            _ => None,
        },
    })
}
