//! NVIDIA's "XID 144-150 Decode" sheet: what each NVLink5 XID event asks
//! for, by the XID, the IntrInfo register's pattern and the error status
//! the kernel-log line carries (`Xid (PCI:...): 149, NETIR_LINK_EVT Fatal
//! XC0 i0 Link 08 (<IntrInfo> <ErrorStatus> ...)`).
//!
//! Source: the sheet "XID 144-150 Decode" of NVIDIA's XID catalog
//! (`Xid-Catalog.xlsx`, <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! kept as a data file beside this one (`nvlink5_sheet.tsv`, its header
//! cites the machine-readable copy it was taken from: leptonai/gpud's
//! `catalog_generated.go` at commit b9842de2b11177a482560391805f1691c9ef9607,
//! Apache-2.0) and turned into [`RULES`] by `nvlink5_gen.py`
//! (`nvlink5_table.rs`); a test keeps the two equal. NVIDIA/NVSentinel
//! reads the same sheet from the embedded workbook
//! (`health-monitors/syslog-health-monitor/pkg/common/common.go`,
//! `loadNVL5DecodingRules`). Every row is here, in the order of gpud's
//! generator, which sorts them by (xid, unit, error status)
//! (`scripts/xid-gen-catelog.py`), not the sheet's: the rows are disjoint
//! but for two V1 TLW patterns that resolve alike, so the order decides
//! nothing. 94 rows, 45 `IGNORE`, 41 `RESET_GPU`, 8 `XID_154_EVAL`, three of them
//! (`RLW_RXPIPE` 0x1, 0x2, 0x4) with the sheet's second pattern pair and
//! its "Action 2", `RESET_GPU` when IntrInfo bit 10 (V1) or 7 (V2) is set.
//! A blank "Error Status" cell (NETIR/NETIR_INT, every NETIR_LINK_EVT row)
//! matches any status, as NVSentinel reads it.
//!
//! A pattern is the register's 32 bits, most significant first: `0` and
//! `1` must match, `-` is free. The sheet gives two: V1 for drivers
//! before R575, V2 from R575 on, when the unit's number moved from bits
//! 9:5 (with the sub-component in 4:0) to bits 6:0; bits 25:20 hold the
//! link-down reason of `NETIR_LINK_EVT` in both.
//!
//! What each resolution asks of us (`crate::verdict`): `RESET_GPU` a GPU
//! reset; `IGNORE` nothing; `XID_154_EVAL` nothing on the XID itself, as
//! NVSentinel decides: the driver re-evaluates the GPU and announces what
//! it needs as XID 154 and NVML's recovery action, which the verdict reads
//! (`recovery_action`). The severity is the sheet's column, kept for the
//! runbook.

/// The NVLink5 XIDs, 144-150: the sheet's codes, each event judged by
/// its kernel-log line. The one place the range is written (the kernel
/// log's parser and the XID room both ask here).
pub fn is_nvlink5(code: u64) -> bool {
    (144..=150).contains(&code)
}

/// The sheet's "Resolution Bucket" of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resolution {
    Ignore,
    ResetGpu,
    Xid154Eval,
}

impl Resolution {
    /// As the sheet spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Ignore => "IGNORE",
            Resolution::ResetGpu => "RESET_GPU",
            Resolution::Xid154Eval => "XID_154_EVAL",
        }
    }
}

/// One row of the sheet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub xid: u16,
    /// The unit, as the sheet names it (`V1 name/V2 name` where they differ).
    pub unit: &'static str,
    /// IntrInfo before R575 (V1) and from R575 on (V2).
    pub v1: &'static str,
    pub v2: &'static str,
    /// `None`: the sheet's cell is blank, any status matches.
    pub error_status: Option<u32>,
    pub resolution: Resolution,
    /// The sheet's "Decode for action 2" pair and "Action 2": where the
    /// register matches these instead, the row asks for this.
    pub action2: Option<Action2>,
    pub severity: &'static str,
}

/// A row's second pattern pair and the action it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action2 {
    pub v1: &'static str,
    pub v2: &'static str,
    pub resolution: Resolution,
}

/// What an event decodes to: its row, and the resolution of the pattern
/// that matched (the row's, or its Action 2's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub rule: &'static Rule,
    pub resolution: Resolution,
}

#[allow(clippy::too_many_arguments)]
const fn r(
    xid: u16,
    unit: &'static str,
    v1: &'static str,
    v2: &'static str,
    error_status: Option<u32>,
    resolution: Resolution,
    action2: Option<Action2>,
    severity: &'static str,
) -> Rule {
    Rule {
        xid,
        unit,
        v1,
        v2,
        error_status,
        resolution,
        action2,
        severity,
    }
}

const fn a2(v1: &'static str, v2: &'static str, resolution: Resolution) -> Action2 {
    Action2 { v1, v2, resolution }
}

use Resolution::{Ignore, ResetGpu, Xid154Eval};

// `RULES`, generated from the data file.
#[allow(clippy::unreadable_literal)]
mod table {
    use super::*;
    include!("nvlink5_table.rs");
}
pub use table::RULES;

/// The sheet's name for a unit a kernel-log line names (`NETIR_LINK_EVT`,
/// `TLW_RX_PIPE0`: either side of a row's `V1 name/V2 name`); `None` for a
/// unit the sheet does not name.
pub fn unit_name(word: &str) -> Option<&'static str> {
    RULES
        .iter()
        .flat_map(|r| r.unit.split('/'))
        .find(|name| *name == word)
}

/// Whether a row is the one a line naming `unit` describes.
pub fn unit_agrees(rule: &Rule, unit: &str) -> bool {
    rule.unit.split('/').any(|name| name == unit)
}

/// The first encoding of the newer drivers (V2).
pub const V2_FROM_MAJOR: u32 = 575;

/// Whether a 32-bit register matches a pattern of the sheet.
pub fn matches(pattern: &str, value: u32) -> bool {
    pattern.len() == 32
        && pattern.bytes().enumerate().all(|(i, c)| {
            let bit = (value >> (31 - i)) & 1;
            match c {
                b'0' => bit == 0,
                b'1' => bit == 1,
                _ => true,
            }
        })
}

/// The sheet's row for an event, read with the encoding of `driver_major`
/// (V1 before R575, V2 from it), and the resolution of the pattern that
/// matched; `None` where no row matches.
pub fn decode(xid: u16, intr_info: u32, error_status: u32, driver_major: u32) -> Option<Decoded> {
    let v2 = driver_major >= V2_FROM_MAJOR;
    RULES.iter().find_map(|rule| {
        if rule.xid != xid || rule.error_status.is_some_and(|s| s != error_status) {
            return None;
        }
        let pick = |v1_pattern, v2_pattern| if v2 { v2_pattern } else { v1_pattern };
        if matches(pick(rule.v1, rule.v2), intr_info) {
            return Some(Decoded {
                rule,
                resolution: rule.resolution,
            });
        }
        rule.action2
            .filter(|a| matches(pick(a.v1, a.v2), intr_info))
            .map(|a| Decoded {
                rule,
                resolution: a.resolution,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sheet_is_whole() {
        assert_eq!(RULES.len(), 94);
        let count = |res| RULES.iter().filter(|r| r.resolution == res).count();
        assert_eq!(
            (count(Ignore), count(ResetGpu), count(Xid154Eval)),
            (45, 41, 8)
        );
        // Action 2: the three RLW_RXPIPE rows, RESET_GPU.
        let action2: Vec<_> = RULES
            .iter()
            .filter_map(|r| Some((r.unit, r.error_status?, r.action2?.resolution)))
            .collect();
        assert_eq!(
            action2,
            [
                ("RLW_RXPIPE", 0x1, ResetGpu),
                ("RLW_RXPIPE", 0x2, ResetGpu),
                ("RLW_RXPIPE", 0x4, ResetGpu)
            ]
        );
        // Blank error status: NETIR/NETIR_INT and the 21 NETIR_LINK_EVT rows.
        assert_eq!(
            RULES.iter().filter(|r| r.error_status.is_none()).count(),
            22
        );
        for rule in RULES {
            assert!((144..=150).contains(&rule.xid), "{rule:?}");
            let a = rule.action2.map(|a| [a.v1, a.v2]);
            for p in [rule.v1, rule.v2]
                .into_iter()
                .chain(a.into_iter().flatten())
            {
                assert!(
                    p.len() == 32 && p.bytes().all(|c| b"01-".contains(&c)),
                    "{rule:?}"
                );
            }
        }
    }

    /// The data file, parsed as the generator reads it.
    fn sheet() -> Vec<Vec<&'static str>> {
        include_str!("nvlink5_sheet.tsv")
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split('\t').collect())
            .collect()
    }

    #[test]
    fn the_table_is_the_data_file() {
        let rows = sheet();
        assert_eq!(
            rows.len(),
            RULES.len(),
            "run src/xid_catalog/nvlink5_gen.py"
        );
        for (row, rule) in rows.iter().zip(RULES) {
            let status = (!row[4].is_empty())
                .then(|| u32::from_str_radix(row[4].trim_start_matches("0x"), 16).unwrap());
            let action2 = (!row[8].is_empty()).then(|| (row[6], row[7], row[8]));
            assert_eq!(
                (
                    row[0].parse::<u16>().unwrap(),
                    row[1],
                    row[2],
                    row[3],
                    status,
                    row[5],
                    action2,
                    row[9]
                ),
                (
                    rule.xid,
                    rule.unit,
                    rule.v1,
                    rule.v2,
                    rule.error_status,
                    rule.resolution.as_str(),
                    rule.action2.map(|a| (a.v1, a.v2, a.resolution.as_str())),
                    rule.severity
                ),
                "run src/xid_catalog/nvlink5_gen.py"
            );
        }
    }

    /// A register value a pattern matches, its free bits all `fill`.
    fn value(pattern: &str, fill: bool) -> u32 {
        pattern.bytes().fold(0, |v, c| {
            (v << 1) | u32::from(c == b'1' || (c == b'-' && fill))
        })
    }

    /// Every row of the sheet, Action 2 included, by both encodings: an
    /// event with that row's register and status decodes to that row and
    /// its resolution (a blank status to any).
    #[test]
    fn every_row_decodes_to_itself() {
        for rule in RULES {
            let statuses = match rule.error_status {
                Some(s) => vec![s],
                None => vec![0, 1, 0x8000_0000],
            };
            let mut patterns = vec![(rule.v1, rule.v2, rule.resolution)];
            patterns.extend(rule.action2.map(|a| (a.v1, a.v2, a.resolution)));
            for (v1, v2, resolution) in patterns {
                for (pattern, major) in [(v1, 570), (v2, 580)] {
                    for fill in [false, true] {
                        for &status in &statuses {
                            let got = decode(rule.xid, value(pattern, fill), status, major)
                                .unwrap_or_else(|| panic!("{rule:?} {pattern} {status:#x}"));
                            // V1 gives TLW_RX/TX's two pipes one pattern:
                            // the sheet cannot tell them apart, and both
                            // resolve alike.
                            let same_pattern = [got.rule.v1, got.rule.v2]
                                .into_iter()
                                .chain(got.rule.action2.into_iter().flat_map(|a| [a.v1, a.v2]))
                                .any(|p| p == pattern);
                            assert!(
                                got.resolution == resolution
                                    && (std::ptr::eq(got.rule, rule) || same_pattern),
                                "{rule:?} {pattern} fill {fill} status {status:#x}: {got:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Issue 36, F1 and F6: the cases the review reproduced.
    #[test]
    fn action_2_and_blank_statuses_decode_as_nvidia_wrote_them() {
        let d = |xid, intr, status, major| decode(xid, intr, status, major).map(|r| r.resolution);
        // RLW_RXPIPE with IntrInfo bit 10 (V1) / bit 7 (V2): RESET_GPU.
        assert_eq!(d(145, 0x0409_84c2, 0x1, 570), Some(ResetGpu));
        assert_eq!(d(145, 0x0000_0086, 0x1, 580), Some(ResetGpu));
        assert_eq!(d(145, 0x0409_80c2, 0x1, 570), Some(Ignore));
        assert_eq!(d(145, 0x0000_0006, 0x4, 580), Some(Ignore));
        // NETIR_LINK_EVT reason 0x26 with a non-zero status: still IGNORE.
        assert_eq!(d(149, 0x0260_01c6, 1, 570), Some(Ignore));
    }

    #[test]
    fn real_lines_decode_to_the_sheets_rows() {
        // GB200 lines before R575 (gpud's kernel-log tests): V1.
        let d = |xid, intr, status, major| {
            decode(xid, intr, status, major).map(|r| (r.rule.unit, r.resolution))
        };
        assert_eq!(
            d(145, 0x0409_88e2, 0x8, 570),
            Some(("RLW_SRC_TRACK", Xid154Eval))
        );
        assert_eq!(d(145, 0x0409_a0c2, 0x8, 570), Some(("RLW_RXPIPE", Ignore)));
        assert_eq!(
            d(149, 0x000f_e406, 0, 570),
            Some(("NETIR/NETIR_INT", ResetGpu))
        );
        assert_eq!(
            d(149, 0x0008_2226, 1, 570),
            Some(("NETIR_BER_EVENT", Ignore))
        );
        // NETIR_LINK_EVT: bits 25:20 name why the link went down.
        assert_eq!(
            d(149, 0x0045_05c6, 0, 570),
            Some(("NETIR_LINK_EVT/NETIR_LINK_DOWN", ResetGpu))
        );
        assert_eq!(
            d(149, 0x0214_25c6, 0, 570),
            Some(("NETIR_LINK_EVT/NETIR_LINK_DOWN", ResetGpu))
        );
        assert_eq!(
            d(149, 0x0260_01c6, 0, 570),
            Some(("NETIR_LINK_EVT/NETIR_LINK_DOWN", Ignore))
        );
        // From R575 on the same units carry other numbers (V2).
        assert_eq!(d(145, 0x0000_0004, 0x100, 580), Some(("RLW_REMAP", Ignore)));
        assert_eq!(
            d(145, 0x0000_0004, 0x40, 580),
            Some(("RLW_REMAP", ResetGpu))
        );
        assert_eq!(
            d(149, 0x0000_0011, 0, 580),
            Some(("NETIR_LINK_EVT/NETIR_LINK_DOWN", ResetGpu))
        );
        assert_eq!(d(150, 0, 0, 580), Some(("MSE_WATCHDOG", ResetGpu)));
        // The encoding decides: a V1 register read as V2 matches nothing,
        // and an error status the sheet lacks for the unit neither.
        assert_eq!(d(145, 0x0409_88e2, 0x8, 580), None);
        assert_eq!(d(145, 0x0000_0004, 0x400, 580), None);
    }
}
