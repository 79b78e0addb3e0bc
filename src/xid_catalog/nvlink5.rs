//! NVIDIA's "XID 144-150 Decode" sheet: what each NVLink5 XID event asks
//! for, by the XID, the IntrInfo register's pattern and the error status
//! the kernel-log line carries (`Xid (PCI:...): 149, NETIR_LINK_EVT Fatal
//! XC0 i0 Link 08 (<IntrInfo> <ErrorStatus> ...)`).
//!
//! Source: the sheet "XID 144-150 Decode" of NVIDIA's XID catalog
//! (`Xid-Catalog.xlsx`, <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! as leptonai/gpud carries it generated (Apache-2.0):
//! `components/accelerator/nvidia/xid/catalog_generated.go`, `nvlinkRules`,
//! commit b9842de2b11177a482560391805f1691c9ef9607 (generated 2025-10-29
//! from the catalog page). NVIDIA/NVSentinel reads the same sheet from the
//! embedded workbook (`health-monitors/syslog-health-monitor/pkg/common/common.go`,
//! `loadNVL5DecodingRules`). Every row is here, in the sheet's order: 94
//! rows, 45 `IGNORE`, 41 `RESET_GPU`, 8 `XID_154_EVAL`.
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
    pub error_status: u32,
    pub resolution: Resolution,
    pub severity: &'static str,
}

const fn r(
    xid: u16,
    unit: &'static str,
    v1: &'static str,
    v2: &'static str,
    error_status: u32,
    resolution: Resolution,
    severity: &'static str,
) -> Rule {
    Rule {
        xid,
        unit,
        v1,
        v2,
        error_status,
        resolution,
        severity,
    }
}

use Resolution::{Ignore, ResetGpu, Xid154Eval};

/// The sheet, row by row: one line each, error statuses in the sheet's
/// eight hex digits.
#[rustfmt::skip]
#[allow(clippy::unreadable_literal)]
pub const RULES: &[Rule] = &[
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000001, Ignore, "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000002, ResetGpu, "Fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000004, Ignore, "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000008, Ignore, "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000010, ResetGpu, "Fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", 0x00000020, Ignore, "Non-fatal"),
    r(145, "RLW_CTRL", "------000000----------0001100010", "------000000-------------0000011", 0x80000000, Ignore, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000001, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000002, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000004, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000008, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000010, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000020, Xid154Eval, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000040, ResetGpu, "Fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000080, ResetGpu, "Fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000100, Ignore, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x00000200, Ignore, "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", 0x80000000, Ignore, "Non-fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", 0x00000001, Ignore, "Non-fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", 0x00000002, ResetGpu, "Fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", 0x80000000, Ignore, "Non-fatal"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", 0x00000001, Ignore, "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", 0x00000002, Ignore, "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", 0x00000004, Ignore, "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000----------0011000010", "------000000-------------0000110", 0x00000008, Ignore, "Non-fatal"),
    r(145, "RLW_RXPIPE", "------000000----------0011000010", "------000000-------------0000110", 0x80000000, Ignore, "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000001, ResetGpu, "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000002, Ignore, "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000004, Xid154Eval, "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000008, Xid154Eval, "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000010, ResetGpu, "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x00000020, ResetGpu, "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", 0x80000000, Ignore, "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x00000001, Ignore, "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x00000002, ResetGpu, "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x00010000, Ignore, "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x00020000, ResetGpu, "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x00100000, ResetGpu, "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", 0x80000000, Ignore, "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", 0x00000001, Ignore, "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", 0x00000002, Ignore, "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", 0x00000004, ResetGpu, "Fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", 0x80000000, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", 0x00000001, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", 0x00000002, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", 0x00000004, ResetGpu, "Fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", 0x80000000, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", 0x00000001, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", 0x00000002, Ignore, "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", 0x00000004, ResetGpu, "Fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", 0x80000000, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", 0x00000001, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", 0x00000002, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", 0x00000004, ResetGpu, "Fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", 0x80000000, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", 0x00000001, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", 0x00000002, Ignore, "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", 0x00000004, ResetGpu, "Fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", 0x80000000, Ignore, "Non-fatal"),
    r(147, "TREX", "------000000----------0110000100", "------000000-------------0001110", 0x00000001, Ignore, "Non-fatal"),
    r(147, "TREX", "------000000----------0110000100", "------000000-------------0001110", 0x80000000, Ignore, "Non-fatal"),
    r(148, "NVLPW_CTRL/NVLPW", "------000000----------0000000101", "------000000-------------0001111", 0x80000000, Ignore, "Non-fatal"),
    r(149, "NETIR/NETIR_INT", "------000000----------0000000110", "------000000-------------0011000", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", 0x00000000, Ignore, "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", 0x00000001, Ignore, "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", 0x00000002, Ignore, "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", 0x00000003, Ignore, "Non-fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000000----------0111000110", "------000000-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000001----------0111000110", "------000001-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000010----------0111000110", "------000010-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000100----------0111000110", "------000100-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------001010----------0111000110", "------001010-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------001111----------0111000110", "------001111-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010000----------0111000110", "------010000-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010001----------0111000110", "------010001-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010010----------0111000110", "------010010-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010101----------0111000110", "------010101-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010110----------0111000110", "------010110-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100000----------0111000110", "------100000-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100001----------0111000110", "------100001-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100010----------0111000110", "------100010-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100011----------0111000110", "------100011-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100100----------0111000110", "------100100-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100101----------0111000110", "------100101-------------0010001", 0x00000000, ResetGpu, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100110----------0111000110", "------100110-------------0010001", 0x00000000, Ignore, "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101000----------0111000110", "------101000-------------0010001", 0x00000000, Ignore, "Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101010----------0111000110", "------101010-------------0010001", 0x00000000, ResetGpu, "Link Fatal?"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101011----------0111000110", "------101011-------------0010001", 0x00000000, ResetGpu, "Link Fatal?"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", 0x00000001, ResetGpu, "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", 0x00000003, Ignore, "Non-fatal"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", 0x00000004, ResetGpu, "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", 0x00000005, ResetGpu, "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", 0x00000007, ResetGpu, "Fatal**"),
    r(150, "MSE_WATCHDOG", "------000000----------0000000000", "------000000-------------0000000", 0x00000000, ResetGpu, "Fatal"),
];

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
/// (V1 before R575, V2 from it); `None` where no row matches.
pub fn decode(
    xid: u16,
    intr_info: u32,
    error_status: u32,
    driver_major: u32,
) -> Option<&'static Rule> {
    let v2 = driver_major >= V2_FROM_MAJOR;
    RULES.iter().find(|rule| {
        rule.xid == xid
            && rule.error_status == error_status
            && matches(if v2 { rule.v2 } else { rule.v1 }, intr_info)
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
        for rule in RULES {
            assert!((144..=150).contains(&rule.xid), "{rule:?}");
            for p in [rule.v1, rule.v2] {
                assert!(
                    p.len() == 32 && p.bytes().all(|c| b"01-".contains(&c)),
                    "{rule:?}"
                );
            }
        }
    }

    #[test]
    fn real_lines_decode_to_the_sheets_rows() {
        // GB200 lines before R575 (gpud's kernel-log tests): V1.
        let d = |xid, intr, status, major| {
            decode(xid, intr, status, major).map(|r| (r.unit, r.resolution))
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
