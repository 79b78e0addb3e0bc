//! dcgm-exporter's counters CSV (`-f`, `--collectors`; the Helm chart's
//! `dcp-metrics-included.csv`, a ConfigMap's `metrics` key), accepted as
//! dcgm-exporter accepts it (NVIDIA/dcgm-exporter
//! `internal/pkg/counters/counter_config.go` `ExtractCounters` at d5e5f51):
//! one `FIELD, type, help` line per field, `#` starting a comment. Any name
//! DCGM or go-dcgm knows is taken; the name decides the name served and its
//! unit (`crate::compat::fields::resolve`), the line's type and help are
//! served with it. A field DCGM knows that has no source here is named
//! with the reason and not served, never a refusal: dcgm-exporter starts on
//! the same file.

use crate::compat::fields::{self, FieldKind, Resolved, EXPORTER_FIELDS};
use crate::compat::{intern, Generation, Selected};

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
    /// Lines taken otherwise than written (a name listed again, a
    /// histogram type), said at load.
    pub notes: Vec<String>,
}

/// Whether `text` reads as a counters CSV rather than YAML: its first line
/// that is neither blank nor a comment is `NAME, type...` with a DCGM name
/// (`DCGM_` or go-dcgm's 1.x `dcgm_`). A YAML mapping line has no comma
/// before its colon.
pub fn looks_like_csv(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_once(','))
        .is_some_and(|(name, _)| {
            let name = name.trim();
            (name.starts_with("DCGM_") || name.starts_with("dcgm_"))
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// dcgm-exporter's Prometheus types (`variables.go` `promMetricType`).
/// A histogram or summary line is taken as dcgm-exporter takes it; one
/// value per entity is no histogram, so it is served with the table's
/// type (said at load).
const TYPES: &[&str] = &["gauge", "counter", "label", "histogram", "summary"];

/// `name` for a message: quoted when it could be a field name, else only
/// described, so that a file that is no counters CSV (a path pointed at a
/// secret, probe 5 D12) has none of its content echoed into the log.
fn shown(name: &str, which: &str) -> String {
    if !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        format!("{name:?}")
    } else {
        format!(
            "the line's {which} (not quoted: {} characters, not a name)",
            name.chars().count()
        )
    }
}

pub fn parse(text: &str, generation: Generation) -> Result<Counters, LineError> {
    let mut out = Counters::default();
    let mut seen: Vec<(&'static str, usize)> = Vec::new();
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
                "{}: expected `FIELD, type, help` (a type of gauge, counter or label)",
                shown(name, "first value")
            ))
        })?;
        let help = parts
            .next()
            .map_or("", |h| h.trim().trim_matches('"').trim());
        let kind = kind.to_ascii_lowercase();
        if !TYPES.contains(&kind.as_str()) {
            return Err(err(format!(
                "{}: type {} is not gauge, counter, label, histogram or summary",
                shown(name, "first value"),
                shown(&kind, "second value")
            )));
        }
        if let Some((_, why)) = EXPORTER_FIELDS.iter().find(|(n, _)| *n == name) {
            out.absent
                .push(format!("line {line}: {name} is not served here: {why}"));
            continue;
        }
        let (field, name, unit) = match fields::resolve(name, generation) {
            Some(Resolved::Served { field, name, unit }) => (field, name, unit),
            Some(Resolved::NotServed { id, why }) => {
                out.absent.push(format!(
                    "line {line}: {name} (DCGM field {id}) is not served here: {why}"
                ));
                continue;
            }
            None => {
                return Err(err(format!(
                    "{} is not a DCGM field name (neither DCGM 4.6's dcgm_fields.h nor go-dcgm 4.6.1 knows it)",
                    shown(name, "first value")
                )))
            }
        };
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == name) {
            out.notes.push(format!(
                "line {line}: {name} is listed again (first on line {first}): served once"
            ));
            continue;
        }
        seen.push((name, line));
        if (kind == "label") != (field.kind == FieldKind::Label) {
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
        let kind = match kind.as_str() {
            "gauge" => FieldKind::Gauge,
            "counter" => FieldKind::Counter,
            "label" => FieldKind::Label,
            other => {
                out.notes.push(format!(
                    "line {line}: {name} is declared a {other}: one value per GPU is served as a {}",
                    field.kind.as_str()
                ));
                field.kind
            }
        };
        out.fields.push(Selected {
            field,
            name,
            unit,
            kind,
            help: if help.is_empty() {
                field.help
            } else {
                intern(help)
            },
        });
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
    use crate::compat::fields::Unit;

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
        let c = parse(csv, Generation::V4_8).unwrap();
        let names: Vec<_> = c.fields.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "DCGM_FI_DEV_SM_CLOCK",
                "DCGM_FI_DEV_DEC_UTIL",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
                "DCGM_FI_DRIVER_VERSION",
                "DCGM_FI_PROF_PCIE_TX_BYTES"
            ]
        );
        // Every uncommented row is served, the vGPU licence status too
        // (nvmlDeviceGetGridLicensableFeatures, as DCGM reads it).
        assert!(c.absent.is_empty(), "{:?}", c.absent);
    }

    /// Probe 5, D12: `dcgm.counters_file` pointed at a shadow-style file
    /// quoted its first line, hash and all, in the exit's error.
    #[test]
    fn a_file_that_is_no_counters_csv_is_not_echoed() {
        for text in [
            "root:$6$SECRETHASH:19000:0:99999:7:::\n",
            "root:$6$SECRETHASH, gauge, x\n",
            "DCGM_FI_DEV_GPU_UTIL, $6$SECRETHASH\n",
        ] {
            let e = parse(text, Generation::V4_8).unwrap_err();
            assert!(!e.message.contains("SECRET"), "{}", e.message);
            assert_eq!(e.line, 1);
        }
    }

    #[test]
    fn a_line_that_cannot_be_taken_is_named() {
        let bad = |csv: &str| parse(csv, Generation::V4_8).unwrap_err();
        let e = bad("# x\nDCGM_FI_DEV_GPU_UTIL, gauge, x\nDCGM_FI_DEV_GPU_UTILS, gauge, typo\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("DCGM_FI_DEV_GPU_UTILS"), "{}", e.message);
        assert_eq!(bad("DCGM_FI_DEV_GPU_UTIL\n").line, 1);
        assert!(bad("DCGM_FI_DEV_GPU_UTIL, gauges, x\n")
            .message
            .contains("gauges"));
        assert!(bad("DCGM_FI_DRIVER_VERSION, gauge, x\n")
            .message
            .contains("label"));
        assert!(bad("# only comments\n").message.contains("no field"));
        // dcgm-exporter's own families are known, and said to be absent.
        let c = parse(
            "DCGM_EXP_XID_ERRORS_COUNT, gauge, x\nDCGM_FI_DEV_XID_ERRORS, gauge, y\n",
            Generation::V4_8,
        )
        .unwrap();
        assert_eq!(c.fields.len(), 1);
        assert!(c.absent[0].contains("nvidia_gpu_xid_errors_total"));
    }

    #[test]
    fn any_dcgm_name_is_taken_and_one_with_no_source_is_named_not_refused() {
        let csv = "dcgm_sm_clock, gauge, 1.x name\n\
            DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL, counter, DCGM 4.6 alias of 449\n\
            DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, go-dcgm 4.6.1 base unit\n\
            DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, DCGM 4.6 alias of 203\n\
            DCGM_FI_DEV_CPU_UTIL_RATIO, gauge, a CPU field\n";
        let c = parse(csv, Generation::V4_8).unwrap();
        let got: Vec<_> = c
            .fields
            .iter()
            .map(|s| (s.name, s.field.id, s.unit))
            .collect();
        assert_eq!(
            got,
            [
                ("dcgm_sm_clock", 100, Unit::Megahertz),
                (
                    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
                    449,
                    Unit::MegabytesPerSecond
                ),
                ("DCGM_FI_DEV_SM_CLOCK_HERTZ", 100, Unit::Hertz),
                // DCGM 4.6 renamed field 203 without changing it: percent.
                ("DCGM_FI_DEV_GPU_UTIL_RATIO", 203, Unit::Percent),
            ]
        );
        assert_eq!(c.absent.len(), 1);
        assert!(c.absent[0].starts_with("line 5: DCGM_FI_DEV_CPU_UTIL_RATIO (DCGM field"));
        // dcgm-exporter 4.9's name of field 203 is a ratio.
        let c = parse("DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, x\n", Generation::V4_9).unwrap();
        assert_eq!(c.fields[0].unit, Unit::Ratio);
    }

    #[test]
    fn the_line_s_type_and_help_are_served_and_two_names_of_one_field_both() {
        let csv = "DCGM_FI_PROF_PCIE_TX_BYTES, counter, \"Bytes sent, all of them.\"\n\
            DCGM_FI_DEV_FB_USED, gauge, MiB\n\
            DCGM_FI_DEV_FB_USED_BYTES, gauge,\n\
            DCGM_FI_DEV_FB_USED, gauge, again\n\
            DCGM_FI_DEV_GPU_TEMP, histogram, a histogram\n";
        let c = parse(csv, Generation::V4_8).unwrap();
        let got: Vec<_> = c.fields.iter().map(|s| (s.name, s.kind, s.help)).collect();
        assert_eq!(
            got[0],
            (
                "DCGM_FI_PROF_PCIE_TX_BYTES",
                FieldKind::Counter,
                "Bytes sent, all of them."
            )
        );
        assert_eq!(got[1], ("DCGM_FI_DEV_FB_USED", FieldKind::Gauge, "MiB"));
        // No help on the line: the table's.
        assert_eq!(got[2].0, "DCGM_FI_DEV_FB_USED_BYTES");
        assert!(got[2].2.starts_with("Used frame buffer"));
        assert_eq!(
            got[3],
            ("DCGM_FI_DEV_GPU_TEMP", FieldKind::Gauge, "a histogram")
        );
        assert_eq!(c.fields.len(), 4);
        assert!(c.notes[0].starts_with("line 4: DCGM_FI_DEV_FB_USED is listed again"));
        assert!(c.notes[1].contains("histogram"));
        assert!(c.absent.is_empty());
    }

    #[test]
    fn a_csv_is_known_by_its_content() {
        assert!(looks_like_csv("# c\n\nDCGM_FI_DEV_SM_CLOCK,  gauge, x\n"));
        assert!(looks_like_csv("dcgm_sm_clock, gauge, x\n"));
        assert!(!looks_like_csv(
            "version: 1\ndcgm:\n  fields: [DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_GPU_UTIL]\n"
        ));
        assert!(!looks_like_csv("# only a comment, DCGM_X\n"));
    }
}
