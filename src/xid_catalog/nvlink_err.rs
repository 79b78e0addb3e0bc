//! NVIDIA's workflow `WORKFLOW_NVLINK_ERR` for XID 74 (`NVLINK_ERROR`):
//! what the registers of an event ask for, by bit.
//!
//! The driver prints seven registers:
//! `NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink:
//! fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)`.
//!
//! Source: the resolution of `WORKFLOW_NVLINK_ERR` in NVIDIA's XID catalog
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! as NVIDIA/NVSentinel quotes it in `docs/designs/019-workflow-nvlink-err.md`
//! ("The first, third, fourth and fifth registers are valid for Hopper-based
//! products. ... If bits other than those specifically outlined below are
//! seen, please report a bug."). [`BITS`] is that text as data, register by
//! register (1 = the first), bit by bit; nowhere does it ask for a GPU reset.
//!
//! What the verdict makes of it (`crate::verdict`): hardware bits ("check
//! link mechanical connections and re-seat ... run diags") `check_hardware`;
//! bits to be safely ignored, ECC thresholds ("continue operation"), and bits
//! NVIDIA asks a report for only when repeated or solo: nothing on one event,
//! the reason naming a report where NVIDIA asks for one; an event without its
//! registers defers to the driver (nothing, the reason says so).

/// What NVIDIA's text says of a bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// "Can be safely ignored."
    Ignore,
    /// "A threshold of ECC errors being exceeded. There was no
    /// uncorrectable error at this time. Continue operation."
    Continue,
    /// "Generally sympathetic or secondary errors. If seen with other bits
    /// set or other Xid/SXid, please follow the resolution for those. If
    /// seen solo, please report a bug." (fourth register bit 18 adds: "a
    /// reset of the fabric is required").
    Sympathetic,
    /// "Likely HW issue with ECC/Parity: if seen more than 2 times on the
    /// same link, report a bug", or "if seen repeatedly, report a bug".
    ReportIfRepeated,
    /// "Could possibly be a HW issue: check link mechanical connections and
    /// re-seat ... run diags", and "marginal channel SI issue ... check link
    /// mechanical connections. Run Field Diags".
    CheckLink,
    /// "Not expected to be seen in production. If seen, please report a
    /// bug", and any bit the text does not outline.
    Report,
}

/// One line of NVIDIA's text: these bits of this register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitRule {
    /// 1 for the first register, as NVIDIA counts.
    pub register: usize,
    pub bits: &'static [u32],
    pub outcome: Outcome,
}

const fn b(register: usize, bits: &'static [u32], outcome: Outcome) -> BitRule {
    BitRule {
        register,
        bits,
        outcome,
    }
}

use Outcome::{CheckLink, Continue, Ignore, Report, ReportIfRepeated, Sympathetic};

/// NVIDIA's text, in its order.
pub const BITS: &[BitRule] = &[
    b(1, &[0, 23, 30], Ignore),
    b(1, &[1, 20], Sympathetic),
    b(1, &[4, 5], ReportIfRepeated),
    b(1, &[8, 9, 12, 16, 17, 24, 28], CheckLink),
    b(1, &[21, 22], CheckLink),
    b(1, &[27, 29], ReportIfRepeated),
    b(3, &[0, 1, 2, 6], ReportIfRepeated),
    b(3, &[13], Report),
    b(3, &[16, 19], ReportIfRepeated),
    b(3, &[17, 18], ReportIfRepeated),
    b(4, &[16, 17], Sympathetic),
    b(4, &[18], Sympathetic),
    b(5, &[18, 19, 21, 22, 24, 25, 27, 28], ReportIfRepeated),
    b(5, &[20, 23, 26, 29], Continue),
];

/// The registers NVIDIA's text evaluates (first, third, fourth, fifth).
pub const EVALUATED: &[usize] = &[1, 3, 4, 5];

/// What one event asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing on this event (ignored bits, ECC thresholds, bits NVIDIA
    /// asks a report for only when repeated, sympathetic bits with
    /// company).
    Nothing,
    /// A report to NVIDIA (a bit it does not expect, or sympathetic bits
    /// alone): nothing to do with the GPU.
    Report,
    /// Check the link's mechanical connections, run field diagnostics.
    CheckLink,
}

/// What a bit of a register says; `Report` for one NVIDIA does not
/// outline.
pub fn outcome(register: usize, bit: u32) -> Outcome {
    BITS.iter()
        .find(|r| r.register == register && r.bits.contains(&bit))
        .map_or(Report, |r| r.outcome)
}

/// The event's decision from its seven registers.
pub fn decide(registers: &[u32; 7]) -> Decision {
    let mut outcomes = Vec::new();
    for &register in EVALUATED {
        let value = registers[register - 1];
        for bit in (0..32).filter(|b| value >> b & 1 == 1) {
            outcomes.push(outcome(register, bit));
        }
    }
    let has = |o| outcomes.contains(&o);
    if has(CheckLink) {
        Decision::CheckLink
    } else if has(Report) {
        Decision::Report
    } else if has(Sympathetic) && outcomes.iter().all(|o| *o == Sympathetic) {
        // Solo: no other bit of this event (other XIDs judge themselves).
        Decision::Report
    } else {
        Decision::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(r: [(usize, u32); 1]) -> [u32; 7] {
        let mut out = [0; 7];
        for (register, value) in r {
            out[register - 1] = value;
        }
        out
    }

    #[test]
    fn every_bit_nvidia_names_is_read_as_it_says() {
        let mut seen = std::collections::BTreeSet::new();
        for rule in BITS {
            assert!(EVALUATED.contains(&rule.register), "{rule:?}");
            for &bit in rule.bits {
                assert!(
                    bit < 32 && seen.insert((rule.register, bit)),
                    "{rule:?} {bit}"
                );
                assert_eq!(outcome(rule.register, bit), rule.outcome);
                // Each bit alone.
                let want = match rule.outcome {
                    CheckLink => Decision::CheckLink,
                    Report | Sympathetic => Decision::Report,
                    Ignore | Continue | ReportIfRepeated => Decision::Nothing,
                };
                assert_eq!(
                    decide(&regs([(rule.register, 1 << bit)])),
                    want,
                    "{rule:?} {bit}"
                );
            }
        }
    }

    #[test]
    fn the_events_of_the_review_decide_as_nvidia_wrote() {
        // Only the "safely ignored" bit 0: nothing (was reset_gpu).
        assert_eq!(decide(&[0x1, 0, 0, 0, 0, 0, 0]), Decision::Nothing);
        // ECC threshold bits of the fifth register: continue operation.
        assert_eq!(
            decide(&[0, 0, 0, 0, 1 << 20 | 1 << 29, 0, 0]),
            Decision::Nothing
        );
        // A hardware bit: check the link.
        assert_eq!(decide(&[1 << 8, 0, 0, 0, 0, 0, 0]), Decision::CheckLink);
        // Sympathetic with company follows the company; solo, a report.
        assert_eq!(decide(&[1 << 1 | 1, 0, 0, 0, 0, 0, 0]), Decision::Nothing);
        assert_eq!(decide(&[0, 0, 0, 1 << 18, 0, 0, 0]), Decision::Report);
        // NVSentinel's example: third register bit 16, once.
        assert_eq!(decide(&[0, 0, 0x10000, 0, 0, 0, 0]), Decision::Nothing);
        // A bit NVIDIA does not outline: a report; unevaluated registers
        // (second, sixth, seventh) are not read.
        assert_eq!(decide(&[1 << 2, 0, 0, 0, 0, 0, 0]), Decision::Report);
        assert_eq!(
            decide(&[0, u32::MAX, 0, 0, 0, u32::MAX, 1]),
            Decision::Nothing
        );
    }
}
