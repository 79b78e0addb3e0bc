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
//! register (1 = the first), bit by bit. The table is Hopper's: the verdict
//! reads it only on a GPU NVML names Hopper (`crate::verdict`).
//!
//! What the verdict makes of it (`crate::verdict`, issue 46): hardware bits
//! ("check link mechanical connections and re-seat ... run diags")
//! `check_hardware`; fourth-register bit 18 ("a reset of the fabric is
//! required") at least `reset_gpu`; every "report a bug" (a bit NVIDIA does
//! not outline, third-register bit 13, sympathetic bits alone, ECC/parity
//! bits "seen more than 2 times on the same link") what the catalog's
//! `CONTACT_SUPPORT` gets, `check_hardware`, as NVSentinel escalates each
//! to `CONTACT_SUPPORT` (`docs/configuration/health-events-analyzer.md`:
//! `XID74Reg2Bit13Set`, `XID74Reg3UnexpectedError`,
//! `XID74Reg0SoloNVLinkError`, `XID74Reg0ECCParityError`); bits to be
//! safely ignored and ECC thresholds ("continue operation") nothing.
//! Repeats per link are counted by the ledger (`crate::xid`), which reads
//! [`counts_on_link`].

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
    /// seen solo, please report a bug."
    Sympathetic,
    /// Fourth register bit 18: "These are generally sympathetic or
    /// secondary errors, though a reset of the fabric is required. If seen
    /// with other bits set or other Xid/SXid, please follow the resolution
    /// for those. If seen solo, please report a bug." The reset is asked
    /// for in either case (NVSentinel's design 019: "reset of fabric is
    /// required", `COMPONENT_RESET`); solo it is also a sympathetic bit
    /// alone, a report.
    FabricReset,
    /// "Likely HW issue with ECC/Parity --> If seen more than 2 times on
    /// the same link, report a bug": counted per GPU and link.
    EccParity,
    /// "If seen repeatedly, please report a bug" (first register 27, 29;
    /// third 16-19): nothing on one event.
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

use Outcome::{
    CheckLink, Continue, EccParity, FabricReset, Ignore, Report, ReportIfRepeated, Sympathetic,
};

/// NVIDIA's text, in its order.
pub const BITS: &[BitRule] = &[
    b(1, &[0, 23, 30], Ignore),
    b(1, &[1, 20], Sympathetic),
    b(1, &[4, 5], EccParity),
    b(1, &[8, 9, 12, 16, 17, 24, 28], CheckLink),
    b(1, &[21, 22], CheckLink),
    b(1, &[27, 29], ReportIfRepeated),
    b(3, &[0, 1, 2, 6], EccParity),
    b(3, &[13], Report),
    b(3, &[16, 19], ReportIfRepeated),
    b(3, &[17, 18], ReportIfRepeated),
    b(4, &[16, 17], Sympathetic),
    b(4, &[18], FabricReset),
    b(5, &[18, 19, 21, 22, 24, 25, 27, 28], EccParity),
    b(5, &[20, 23, 26, 29], Continue),
];

/// The registers NVIDIA's text evaluates (first, third, fourth, fifth).
pub const EVALUATED: &[usize] = &[1, 3, 4, 5];

/// What one event asks for, worst last (`Ord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// Nothing on this event (ignored bits, ECC thresholds, bits NVIDIA
    /// asks a report for only when repeated, sympathetic bits with
    /// company).
    Nothing,
    /// A reset of the fabric (fourth register bit 18, in company).
    FabricReset,
    /// A report to NVIDIA (a bit it does not expect, or sympathetic bits
    /// alone): the catalog's `CONTACT_SUPPORT`, a person decides.
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

/// The outcomes of the set bits of the evaluated registers.
fn outcomes(registers: &[u32; 7]) -> Vec<Outcome> {
    let mut out = Vec::new();
    for &register in EVALUATED {
        let value = registers[register - 1];
        for bit in (0..32).filter(|b| value >> b & 1 == 1) {
            out.push(outcome(register, bit));
        }
    }
    out
}

/// The event's decision from its seven registers: the worst its bits ask.
pub fn decide(registers: &[u32; 7]) -> Decision {
    let outcomes = outcomes(registers);
    let has = |o| outcomes.contains(&o);
    // Solo: no bit of this event but sympathetic ones (other XIDs judge
    // themselves): "If seen solo, please report a bug".
    let solo = outcomes
        .iter()
        .all(|o| matches!(o, Sympathetic | FabricReset));
    if has(CheckLink) {
        Decision::CheckLink
    } else if has(Report) || (!outcomes.is_empty() && solo) {
        Decision::Report
    } else if has(FabricReset) {
        Decision::FabricReset
    } else {
        Decision::Nothing
    }
}

/// Whether the event has a bit NVIDIA asks to be reported when "seen
/// more than 2 times on the same link" (ECC/parity): the ledger counts it
/// under the line's link.
pub fn counts_on_link(registers: &[u32; 7]) -> bool {
    outcomes(registers).contains(&EccParity)
}

/// "If seen more than 2 times on the same link": the count past which an
/// ECC/parity event asks for a report.
pub const LINK_REPEATS_ALLOWED: usize = 2;

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
                    // Alone, a sympathetic bit is "seen solo": a report.
                    Report | Sympathetic | FabricReset => Decision::Report,
                    Ignore | Continue | ReportIfRepeated | EccParity => Decision::Nothing,
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
        assert_eq!(decide(&[0, 0, 0, 1 << 16, 0, 0, 0]), Decision::Report);
        // Fourth register bit 18: "though a reset of the fabric is
        // required" (issue 46; once a note at none). With company that
        // asks for nothing, the reset; with a hardware bit, that bit's
        // check, which a reset does not replace; solo ("If seen solo,
        // please report a bug"), a report, which drains further than a
        // reset.
        assert_eq!(
            decide(&[0, 0, 0, 1 << 18, 1 << 20, 0, 0]),
            Decision::FabricReset
        );
        assert_eq!(
            decide(&[1, 0, 0, 1 << 18 | 1 << 16, 0, 0, 0]),
            Decision::FabricReset
        );
        assert_eq!(
            decide(&[1 << 8, 0, 0, 1 << 18, 0, 0, 0]),
            Decision::CheckLink
        );
        assert_eq!(decide(&[0, 0, 0, 1 << 18, 0, 0, 0]), Decision::Report);
        assert!(decide(&[0, 0, 0, 1 << 18, 0, 0, 0]) > Decision::FabricReset);
        // Third register bit 13, "not expected to be seen in production":
        // a report, whatever accompanies it.
        assert_eq!(decide(&[1, 0, 1 << 13, 0, 0, 0, 0]), Decision::Report);
        // ECC/parity bits: nothing once, counted on the link.
        assert!(counts_on_link(&[1 << 4, 0, 0, 0, 0, 0, 0]));
        assert!(counts_on_link(&[0, 0, 1 << 6, 0, 0, 0, 0]));
        assert!(counts_on_link(&[0, 0, 0, 0, 1 << 28, 0, 0]));
        assert!(!counts_on_link(&[0, 0, 1 << 16, 0, 1 << 20, 0, 0]));
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

    /// An independent copy of the table: NVIDIA/NVSentinel's shipped
    /// health-events-analyzer rules (`docs/configuration/health-events-
    /// analyzer.md`, "XID 74 Register Rules"; its REG0 is NVIDIA's first
    /// register, REG2 the third, REG3 the fourth, REG4 the fifth), each
    /// rule's bits with the reading it implies here: one event escalated
    /// at once (`Once`), escalated when repeated on the same NVLink
    /// (`OnLink`), or on the GPU (`Repeated`). NVSentinel escalates the
    /// hardware bits only when repeated; NVIDIA's text asks for the check
    /// on one event, which we follow (`Once`).
    #[test]
    fn the_table_agrees_with_nvsentinels_rules() {
        #[derive(Debug, PartialEq)]
        enum Nvs {
            Once,
            OnLink,
            Repeated,
            SoloOnly,
        }
        let rules: &[(&str, usize, &[u32], Nvs)] = &[
            ("XID74Reg0SoloNVLinkError", 1, &[1, 20], Nvs::SoloOnly),
            ("XID74Reg0ECCParityError", 1, &[4, 5], Nvs::OnLink),
            (
                "RepeatedXID74Reg0HardwareIssue",
                1,
                &[8, 9, 12, 16, 17, 24, 28],
                Nvs::Once,
            ),
            ("XID74Reg0SignalIntegrityError", 1, &[21, 22], Nvs::Once),
            ("XID74Reg0Bit27Or29Set", 1, &[27, 29], Nvs::Repeated),
            (
                "RepeatedXID74Reg2HardwareIssue",
                3,
                &[0, 1, 2, 6],
                Nvs::OnLink,
            ),
            ("XID74Reg2Bit13Set", 3, &[13], Nvs::Once),
            ("RepeatedXID74Reg2Bit16Or19Set", 3, &[16, 19], Nvs::Repeated),
            ("RepeatedXID74Reg2Bit17Or18Set", 3, &[17, 18], Nvs::Repeated),
            ("XID74Reg3UnexpectedError", 4, &[16, 17], Nvs::SoloOnly),
            ("XID74Reg3Bit18Set", 4, &[18], Nvs::Once),
        ];
        for (name, register, bits, nvs) in rules {
            for &bit in *bits {
                let mut alone = [0u32; 7];
                alone[register - 1] = 1 << bit;
                // With a bit that asks for nothing (fifth register bit 20,
                // an ECC threshold: "Continue operation").
                let mut company = alone;
                company[4] |= 1 << 20;
                let (once, with) = (decide(&alone), decide(&company));
                match nvs {
                    Nvs::Once => assert!(with >= Decision::FabricReset, "{name} {bit}"),
                    Nvs::SoloOnly => {
                        assert_eq!(once, Decision::Report, "{name} {bit}");
                        assert_eq!(with, Decision::Nothing, "{name} {bit}");
                    }
                    Nvs::OnLink => {
                        assert_eq!(once, Decision::Nothing, "{name} {bit}");
                        assert!(counts_on_link(&alone), "{name} {bit}");
                    }
                    Nvs::Repeated => {
                        assert_eq!(once, Decision::Nothing, "{name} {bit}");
                        assert!(!counts_on_link(&alone), "{name} {bit}");
                    }
                }
            }
        }
    }
}
