//! The selection file (`--config.file`): what to collect and serve, in one
//! versioned YAML file, or a dcgm-exporter counters CSV.
//!
//! ```yaml
//! version: 1
//! families:            # which families are sampled and served
//!   allow: [utilization, memory, power, ecc, retirement, xid]
//!   deny: [fan]
//! metrics:             # which metric names of those are served
//!   deny: [nvidia_gpu_clock_max_hertz]
//! labels:
//!   drop: [pci_bus_id]
//! intervals:           # a family read less (or more) often than --collect.interval
//!   ecc: 60s
//!   retirement: 60s
//!   utilization: 1s
//! dcgm:                # with --compat.dcgm: the DCGM fields served
//!   fields: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE]
//!   # or: counters_file: dcp-metrics-included.csv
//! ```
//!
//! [`load`] validates a file whole: an unknown family, metric, label or
//! field, a bad duration, a CSV line that cannot be mapped, each is an
//! error naming the file and line. [`Runtime`] holds the selection in
//! force, follows the file (SIGHUP and changes, through
//! `crate::reload`), swaps a new valid one in atomically and keeps the
//! last good one when a new one is bad.

mod counters;
mod raw;
mod runtime;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use runtime::{ConfigStatusSource, Runtime, RuntimeSettings};

use crate::collectors;
use crate::compat::{self, fields, Generation, Selected};
use crate::family::{Family, FamilySet};
use crate::fsread::Reader;
use crate::render::Filter;
use crate::schedule::{Schedule, SCHEDULABLE};

/// Files larger than this are refused before parsing.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// How long reading the file (or the counters CSV it names) may take: a
/// file on a hung mount must not keep the exporter from starting or
/// reloading.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);

/// The schema version this exporter reads.
pub const VERSION: u32 = 1;

/// Labels a selection may drop: each only describes a series another of
/// its labels already identifies, so dropping it never merges two series.
pub const DROPPABLE_LABELS: &[&str] = &[
    // This exporter's (the GPU's `gpu` index stays).
    "uuid",
    "pci_bus_id",
    "serial",
    "vbios_version",
    "board_part_number",
    "brand",
    "architecture",
    "compute_capability",
    "name",
    "driver_version",
    "nvml_version",
    "cuda_driver_version",
    "mig_uuid",
    "process_name",
    "container_name",
    "user",
    // dcgm-exporter's (`gpu` and `GPU_I_ID` stay).
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "hostname",
    "GPU_I_PROFILE",
    "err_msg",
];

fn reader() -> &'static Reader {
    static READER: OnceLock<Reader> = OnceLock::new();
    READER.get_or_init(|| Reader::new("config", 1))
}

/// A problem with the selection file, naming the file and, where it is
/// one line's, that line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config file {}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ": line {line}")?;
        }
        // Bounded: a message may quote the file (or one it names).
        write!(f, ": {}", crate::fsread::excerpt(&self.message))
    }
}

impl std::error::Error for ConfigError {}

/// What the flags decide, which a selection builds on.
#[derive(Debug, Clone)]
pub struct Base {
    /// The families `--[no-]collector.*` switch on.
    pub families: FamilySet,
    /// `--collect.interval`.
    pub interval: Duration,
    /// `--compat.dcgm`, when on.
    pub compat: Option<Generation>,
}

/// A validated selection: what is sampled, how often, and what is served.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The families whose series are served (and sampled).
    pub families: FamilySet,
    pub intervals: Vec<(Family, Duration)>,
    pub filter: Option<Filter>,
    /// The DCGM fields served; `None`: dcgm-exporter's defaults of the
    /// generation.
    pub dcgm_fields: Option<Vec<Selected>>,
    /// Accepted, but never served here (counters CSV lines of fields with
    /// no source), or taken otherwise than written; logged when the file
    /// is loaded.
    pub warnings: Vec<String>,
    /// DCGM fields the selection lists that are not served here (counted
    /// in `nvml_exporter_config_dcgm_fields_not_served`).
    pub dcgm_not_served: u64,
    /// Files the selection reads besides itself (a counters CSV).
    pub referenced: Vec<PathBuf>,
}

impl Selection {
    /// What the flags alone select.
    pub fn from_base(base: &Base) -> Selection {
        Selection {
            families: base.families.clone(),
            intervals: Vec::new(),
            filter: None,
            dcgm_fields: None,
            warnings: Vec::new(),
            dcgm_not_served: 0,
            referenced: Vec::new(),
        }
    }

    /// The DCGM fields served under `generation`, less those the metric
    /// lists leave out.
    pub fn compat_fields(&self, generation: Generation) -> Vec<Selected> {
        let fields = self
            .dcgm_fields
            .clone()
            .unwrap_or_else(|| compat::default_fields(generation));
        fields
            .into_iter()
            .filter(|s| {
                s.field.kind == fields::FieldKind::Label
                    || self.filter.as_ref().is_none_or(|x| x.keeps(s.name))
            })
            .collect()
    }

    /// Every family sampled: those served, and those the DCGM fields read.
    pub fn sampled(&self, compat_fields: Option<&[Selected]>) -> FamilySet {
        match compat_fields {
            Some(fields) => self.families.union(&compat::families_needed(fields)),
            None => self.families.clone(),
        }
    }

    /// How often workers poll: `interval`, or the shortest interval of the
    /// selection when that is shorter.
    pub fn tick(&self, interval: Duration) -> Duration {
        self.intervals
            .iter()
            .map(|(_, d)| *d)
            .fold(interval, Duration::min)
    }

    pub fn schedule(&self, sampled: FamilySet, base: Duration, tick: Duration) -> Schedule {
        Schedule::new(sampled, base, tick, &self.intervals)
    }
}

/// Reads and validates the selection file at `path`: YAML, or a counters
/// CSV when its name ends in `.csv` or its content reads as one (a
/// ConfigMap's `metrics` key, mounted as a file, has no extension).
pub fn load(path: &Path, base: &Base) -> Result<Selection, ConfigError> {
    let text = read_text(path, path)?;
    if is_csv(path) || counters::looks_like_csv(&text) {
        from_counters(path, &text, base)
    } else {
        from_yaml(path, &text, base)
    }
}

fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// The text of `file`, named in errors as part of `config`.
fn read_text(config: &Path, file: &Path) -> Result<String, ConfigError> {
    let err = |message: String| ConfigError {
        path: config.to_path_buf(),
        line: None,
        message,
    };
    let bytes = reader()
        .read_regular(file, MAX_FILE_BYTES, READ_DEADLINE)
        .map_err(|e| {
            let what = if file == config {
                "cannot read it".to_string()
            } else {
                format!("cannot read {}", file.display())
            };
            err(format!("{what}: {e}"))
        })?;
    let text = String::from_utf8(bytes).map_err(|e| err(format!("not UTF-8: {e}")))?;
    // A byte-order mark, which Windows editors write: YAML allows one at
    // the start of a stream (YAML 1.2, 5.2), yet the parser took it for a
    // second document ("more than one document is not supported").
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// A counters CSV as the whole selection: the flags' families, and the
/// DCGM fields it lists.
fn from_counters(path: &Path, text: &str, base: &Base) -> Result<Selection, ConfigError> {
    if base.compat.is_none() {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: None,
            message: "a dcgm-exporter counters CSV selects DCGM fields: it needs --compat.dcgm"
                .into(),
        });
    }
    let generation = base.compat.unwrap_or(Generation::DEFAULT);
    let c = counters::parse(text, generation).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        line: Some(e.line),
        message: e.message,
    })?;
    Ok(Selection {
        dcgm_fields: Some(c.fields),
        dcgm_not_served: c.absent.len() as u64,
        warnings: c.absent.into_iter().chain(c.notes).collect(),
        ..Selection::from_base(base)
    })
}

fn from_yaml(path: &Path, text: &str, base: &Base) -> Result<Selection, ConfigError> {
    let at = |line: Option<usize>, message: String| ConfigError {
        path: path.to_path_buf(),
        line,
        message,
    };
    if let Some(line) = crate::fsread::yaml_nesting_too_deep(text.as_bytes()) {
        return Err(at(
            Some(line),
            format!(
                "nested deeper than {} levels: refused before parsing",
                crate::fsread::MAX_YAML_NESTING
            ),
        ));
    }
    let raw: raw::RawConfig = match yaml_serde::from_str::<Option<raw::RawConfig>>(text) {
        Ok(Some(raw)) => raw,
        Ok(None) => return Err(at(None, "empty: it needs at least `version: 1`".into())),
        Err(e) => {
            return Err(at(
                e.location().map(|l| l.line()),
                format!("invalid YAML: {e}"),
            ))
        }
    };
    let lines = Lines(text);
    match raw.version {
        Some(VERSION) => {}
        Some(v) => {
            return Err(at(
                lines.of("version", &v.to_string()),
                format!("version {v} is not one this exporter reads (it reads version {VERSION})"),
            ))
        }
        None => return Err(at(None, format!("`version: {VERSION}` is missing"))),
    }
    let mut sel = Selection::from_base(base);
    if let Some(f) = &raw.families {
        sel.families = families(f, &base.families, &lines).map_err(|(l, m)| at(l, m))?;
    }
    sel.intervals =
        intervals(raw.intervals.as_ref(), &sel.families, &lines).map_err(|(l, m)| at(l, m))?;
    sel.filter = filter(raw.metrics.as_ref(), raw.labels.as_ref(), base, &lines)
        .map_err(|(l, m)| at(l, m))?;
    if let Some(d) = &raw.dcgm {
        if base.compat.is_none() {
            return Err(at(
                lines.of("dcgm", "dcgm"),
                "dcgm: selects DCGM fields, which only --compat.dcgm serves".into(),
            ));
        }
        let generation = base.compat.unwrap_or(Generation::DEFAULT);
        let (fields, absent, notes, referenced) =
            dcgm_fields(path, d, &lines, generation).map_err(|e| e.into_error(path))?;
        sel.dcgm_fields = Some(fields);
        sel.dcgm_not_served = absent.len() as u64;
        sel.warnings = absent.into_iter().chain(notes).collect();
        sel.referenced = referenced;
    }
    Ok(sel)
}

type Problem = (Option<usize>, String);

/// The line of a YAML key or list item, to name in an error: the first
/// line of the section `section` (a top-level key) on which `token`
/// stands as a whole word.
struct Lines<'t>(&'t str);

impl Lines<'_> {
    fn of(&self, section: &str, token: &str) -> Option<usize> {
        let key = format!("{section}:");
        let mut inside = false;
        for (i, line) in self.0.lines().enumerate() {
            let top = !line.starts_with([' ', '\t', '-', '#']) && !line.trim().is_empty();
            if top {
                inside = line.trim_start().starts_with(&key);
            }
            if inside && has_word(line, token) {
                return Some(i + 1);
            }
        }
        None
    }
}

fn has_word(line: &str, word: &str) -> bool {
    let code = line.split('#').next().unwrap_or("");
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        let boundary = |c: Option<char>| {
            c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'))
        };
        boundary(before) && boundary(after)
    })
}

fn families(
    raw: &raw::RawLists,
    flags: &FamilySet,
    lines: &Lines<'_>,
) -> Result<FamilySet, Problem> {
    let parse = |list: &Option<Vec<String>>, key: &str| -> Result<Vec<Family>, Problem> {
        list.iter()
            .flatten()
            .map(|name| {
                Family::from_name(name).ok_or_else(|| {
                    (
                        lines.of("families", name),
                        format!(
                            "families.{key}: {name:?} is not a family (one of: {})",
                            Family::ALL
                                .iter()
                                .map(|f| f.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })
            })
            .collect()
    };
    let allow = parse(&raw.allow, "allow")?;
    let deny = parse(&raw.deny, "deny")?;
    if let Some(both) = allow.iter().find(|f| deny.contains(f)) {
        return Err((
            lines.of("families", both.name()),
            format!("families: {} is both allowed and denied", both.name()),
        ));
    }
    let mut set = if raw.allow.is_some() {
        let mut s = FamilySet::empty();
        for f in &allow {
            s.set(*f, true);
        }
        s
    } else {
        flags.clone()
    };
    for f in deny {
        set.set(f, false);
    }
    Ok(set)
}

fn intervals(
    raw: Option<&std::collections::BTreeMap<String, String>>,
    families: &FamilySet,
    lines: &Lines<'_>,
) -> Result<Vec<(Family, Duration)>, Problem> {
    let mut out = Vec::new();
    for (name, value) in raw.into_iter().flatten() {
        let line = lines.of("intervals", name);
        let family = Family::from_name(name)
            .ok_or_else(|| (line, format!("intervals: {name:?} is not a family")))?;
        if !SCHEDULABLE.contains(&family) {
            return Err((
                line,
                format!(
                    "intervals: {name} is read on every poll and cannot have an interval of its own (one of: {})",
                    SCHEDULABLE.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if !families.contains(family) {
            return Err((line, format!("intervals: {name} is not switched on")));
        }
        if family == Family::Power && families.contains(Family::WorkloadUsage) {
            // crate::workloads::usage splits the GPU's energy of each poll
            // by the SM time of the same poll.
            return Err((
                line,
                "intervals: power is read on every poll while workload_usage is on: a workload's \
                 energy is its part of the energy of the poll its SM time was measured in"
                    .into(),
            ));
        }
        let d = crate::cli::parse_duration(value)
            .map_err(|e| (line, format!("intervals.{name}: {e}")))?;
        if d < crate::cli::MIN_COLLECT_INTERVAL {
            return Err((
                line,
                format!(
                    "intervals.{name}: {value} is shorter than the shortest allowed, {}ms",
                    crate::cli::MIN_COLLECT_INTERVAL.as_millis()
                ),
            ));
        }
        out.push((family, d));
    }
    Ok(out)
}

/// Every name the metric lists may hold: this exporter's, and with
/// `--compat.dcgm` the DCGM fields of either generation.
fn known_metric(name: &str, base: &Base) -> Result<(), String> {
    if collectors::metric_names().any(|n| n == name) {
        return Ok(());
    }
    let generation = base.compat.unwrap_or(Generation::DEFAULT);
    match fields::resolve(name, generation) {
        Some(_) if base.compat.is_some() => Ok(()),
        Some(_) => Err(format!(
            "{name} is a DCGM name, which only --compat.dcgm serves"
        )),
        None => Err(format!(
            "{name:?} is not a metric this exporter serves (docs/metrics.md lists them)"
        )),
    }
}

fn filter(
    metrics: Option<&raw::RawLists>,
    labels: Option<&raw::RawLabels>,
    base: &Base,
    lines: &Lines<'_>,
) -> Result<Option<Filter>, Problem> {
    let names =
        |list: Option<&Vec<String>>, key: &str| -> Result<Option<BTreeSet<String>>, Problem> {
            let Some(list) = list else {
                return Ok(None);
            };
            for name in list {
                known_metric(name, base)
                    .map_err(|m| (lines.of("metrics", name), format!("metrics.{key}: {m}")))?;
            }
            Ok(Some(list.iter().cloned().collect()))
        };
    let allow = names(metrics.and_then(|m| m.allow.as_ref()), "allow")?;
    let deny = names(metrics.and_then(|m| m.deny.as_ref()), "deny")?.unwrap_or_default();
    if let Some(both) = allow.iter().flatten().find(|n| deny.contains(*n)) {
        return Err((
            lines.of("metrics", both),
            format!("metrics: {both} is both allowed and denied"),
        ));
    }
    let mut drop = Vec::new();
    for label in labels.and_then(|l| l.drop.as_ref()).into_iter().flatten() {
        let label_field =
            fields::lookup(label).is_some_and(|(f, _)| f.kind == fields::FieldKind::Label);
        if !DROPPABLE_LABELS.contains(&label.as_str()) && !label_field {
            return Err((
                lines.of("labels", label),
                format!(
                    "labels.drop: {label:?} cannot be dropped: it identifies series, or no series has it (droppable: {})",
                    DROPPABLE_LABELS.join(", ")
                ),
            ));
        }
        drop.push(label.clone());
    }
    if allow.is_none() && deny.is_empty() && drop.is_empty() {
        return Ok(None);
    }
    Ok(Some(Filter {
        allow,
        deny,
        drop_labels: (!drop.is_empty()).then(|| Arc::from(drop)),
    }))
}

/// A problem in the `dcgm:` section, in the selection file or in the
/// counters CSV it names.
enum DcgmError {
    Here(Problem),
    Csv {
        file: PathBuf,
        line: usize,
        message: String,
    },
    Read(ConfigError),
}

impl DcgmError {
    fn into_error(self, path: &Path) -> ConfigError {
        match self {
            DcgmError::Here((line, message)) => ConfigError {
                path: path.to_path_buf(),
                line,
                message,
            },
            DcgmError::Csv {
                file,
                line,
                message,
            } => ConfigError {
                path: path.to_path_buf(),
                line: None,
                message: format!(
                    "dcgm.counters_file {}: line {line}: {message}",
                    file.display()
                ),
            },
            DcgmError::Read(e) => e,
        }
    }
}

/// The fields a `dcgm:` section selects, the warnings for those never
/// served, notes on names taken otherwise than written, and the files it
/// read.
type DcgmSelection = (Vec<Selected>, Vec<String>, Vec<String>, Vec<PathBuf>);

fn dcgm_fields(
    path: &Path,
    d: &raw::RawDcgm,
    lines: &Lines<'_>,
    generation: Generation,
) -> Result<DcgmSelection, DcgmError> {
    match (&d.fields, &d.counters_file) {
        (Some(_), Some(_)) => Err(DcgmError::Here((
            lines.of("dcgm", "counters_file"),
            "dcgm: give fields or counters_file, not both".into(),
        ))),
        (None, None) => Err(DcgmError::Here((
            lines.of("dcgm", "dcgm"),
            "dcgm: give fields or counters_file".into(),
        ))),
        (Some(names), None) => {
            let mut out: Vec<Selected> = Vec::new();
            let mut absent = Vec::new();
            let mut notes = Vec::new();
            // The line is looked for only to name it in an error: a scan of
            // the file per name would make a long list quadratic.
            for name in names {
                match fields::resolve(name, generation) {
                    None => {
                        return Err(DcgmError::Here((
                            lines.of("dcgm", name),
                            format!("dcgm.fields: {name:?} is not a DCGM field name (neither DCGM 4.6's dcgm_fields.h nor go-dcgm 4.6.1 knows it)"),
                        )))
                    }
                    Some(fields::Resolved::NotServed { id, why }) => absent.push(format!(
                        "dcgm.fields: {name} (DCGM field {id}) is not served here: {why}"
                    )),
                    Some(fields::Resolved::Served { name, .. })
                        if out.iter().any(|s| s.name == name) =>
                    {
                        notes.push(format!("dcgm.fields: {name} is listed twice: served once"));
                    }
                    Some(fields::Resolved::Served { field, name, unit }) => out.push(Selected {
                        field,
                        name,
                        unit,
                        kind: field.kind,
                        help: field.help,
                    }),
                }
            }
            Ok((out, absent, notes, Vec::new()))
        }
        (None, Some(file)) => {
            let csv = path.parent().unwrap_or(Path::new("")).join(file);
            let text = read_text(path, &csv).map_err(DcgmError::Read)?;
            let c = counters::parse(&text, generation).map_err(|e| DcgmError::Csv {
                file: csv.clone(),
                line: e.line,
                message: e.message,
            })?;
            Ok((c.fields, c.absent, c.notes, vec![csv]))
        }
    }
}

#[cfg(test)]
mod tests;
