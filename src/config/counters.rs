//! dcgm-exporter's counters CSV (`-f`, `--collectors`; the Helm chart's
//! `dcp-metrics-included.csv`), accepted as a selection of DCGM fields:
//! one `FIELD, type, help` line per field, `#` starting a comment. The
//! field's name decides the name served and its unit (either generation's,
//! `crate::compat::fields`); the help text is dcgm-exporter's and not used.

use crate::compat::fields::{self, FieldKind, Source, EXPORTER_FIELDS};
use crate::compat::Selected;

/// A line of the file this exporter cannot take: it names the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

/// The fields a counters file selects, in its order, and what it asks for
/// that is never served here (warned about, not an error: dcgm-exporter's
/// own default file lists the vGPU licence).
#[derive(Debug, Default, PartialEq)]
pub struct Counters {
    pub fields: Vec<Selected>,
    pub absent: Vec<String>,
}

pub fn parse(text: &str) -> Result<Counters, LineError> {
    let mut out = Counters::default();
    let mut seen: Vec<(u16, usize)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |message: String| LineError { line, message };
        let mut parts = l.splitn(3, ',');
        let name = parts.next().unwrap_or("").trim();
        let kind = parts.next().map(str::trim).ok_or_else(|| {
            err(format!(
                "{name:?}: expected `FIELD, type, help` (a type of gauge, counter or label)"
            ))
        })?;
        if !["gauge", "counter", "label"].contains(&kind.to_ascii_lowercase().as_str()) {
            return Err(err(format!(
                "{name}: type {kind:?} is not gauge, counter or label"
            )));
        }
        if let Some((_, why)) = EXPORTER_FIELDS.iter().find(|(n, _)| *n == name) {
            out.absent
                .push(format!("line {line}: {name} is not served here: {why}"));
            continue;
        }
        let Some((field, variant)) = fields::lookup(name) else {
            return Err(err(format!(
                "{name:?} is not a DCGM field this exporter knows (docs/migrating-from-dcgm-exporter.md lists them)"
            )));
        };
        if let Some((_, first)) = seen.iter().find(|(id, _)| *id == field.id) {
            return Err(err(format!(
                "{name}: field {} is listed twice (first on line {first})",
                field.id
            )));
        }
        seen.push((field.id, line));
        if (kind.eq_ignore_ascii_case("label")) != (field.kind == FieldKind::Label) {
            return Err(err(format!(
                "{name} is {} {}, not a {kind}",
                if field.kind == FieldKind::Label {
                    "a"
                } else {
                    "served as a"
                },
                field.kind.as_str()
            )));
        }
        if let Source::None(why) = field.source {
            out.absent
                .push(format!("line {line}: {name} is always absent here: {why}"));
            continue;
        }
        out.fields.push((field, variant));
    }
    if out.fields.is_empty() {
        return Err(LineError {
            line: text.lines().count().max(1),
            message: "no field this exporter serves is listed".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcgm_exporter_s_default_file_is_taken_whole() {
        // The uncommented rows of NVIDIA/dcgm-exporter etc/default-counters.csv
        // at d5e5f51, help text shortened; comments and blank lines as there.
        let csv = "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n\
            DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n\
            DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n\
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).\n\
            # DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration.\n\
            DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n\
            DCGM_FI_DRIVER_VERSION,        label, Driver Version\n\
            DCGM_FI_PROF_PCIE_TX_BYTES,      gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.\n";
        let c = parse(csv).unwrap();
        let names: Vec<_> = c.fields.iter().map(|(f, v)| f.name(*v)).collect();
        assert_eq!(
            names,
            [
                "DCGM_FI_DEV_SM_CLOCK",
                "DCGM_FI_DEV_DEC_UTIL",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "DCGM_FI_DRIVER_VERSION",
                "DCGM_FI_PROF_PCIE_TX_BYTES"
            ]
        );
        assert_eq!(c.absent.len(), 1);
        assert!(
            c.absent[0].starts_with("line 8: DCGM_FI_DEV_VGPU_LICENSE_STATUS"),
            "{:?}",
            c.absent
        );
    }

    #[test]
    fn a_line_that_cannot_be_taken_is_named() {
        let bad = |csv: &str| parse(csv).unwrap_err();
        let e = bad("# x\nDCGM_FI_DEV_GPU_UTIL, gauge, x\nDCGM_FI_DEV_GPU_UTILS, gauge, typo\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("DCGM_FI_DEV_GPU_UTILS"), "{}", e.message);
        assert_eq!(bad("DCGM_FI_DEV_GPU_UTIL\n").line, 1);
        assert!(bad("DCGM_FI_DEV_GPU_UTIL, histogram, x\n")
            .message
            .contains("histogram"));
        let twice = bad("DCGM_FI_DEV_FB_USED, gauge, x\n\nDCGM_FI_DEV_FB_USED_BYTES, gauge, y\n");
        assert_eq!(twice.line, 3);
        assert!(twice.message.contains("first on line 1"));
        assert!(bad("DCGM_FI_DRIVER_VERSION, gauge, x\n")
            .message
            .contains("label"));
        assert!(bad("# only comments\n").message.contains("no field"));
        // dcgm-exporter's own families are known, and said to be absent.
        let c = parse("DCGM_EXP_XID_ERRORS_COUNT, gauge, x\nDCGM_FI_DEV_XID_ERRORS, gauge, y\n")
            .unwrap();
        assert_eq!(c.fields.len(), 1);
        assert!(c.absent[0].contains("nvidia_gpu_xid_errors_total"));
    }
}
