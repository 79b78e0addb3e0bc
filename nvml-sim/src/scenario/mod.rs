//! Scenario files: the fleet a simulated driver presents and the faults it
//! plays back over time. The built-in scenarios are TOML files in
//! `scenarios/`, compiled in, so they double as examples of the format.
//! What a file may say is `crate::schema`'s (boards: `model::BoardFile`);
//! `resolve.rs` checks one `[[gpu]]` table on its board into what the GPU
//! becomes (`gpu.rs`).

mod gpu;
mod resolve;
mod topology;
pub use topology::{Level, Placement, Topology, TopologyFile};

pub use gpu::{
    CiSpec, Counters, FabricSpec, FieldPin, GpuSpec, Identity, MigSpec, ProcSpec, Readings,
    RemapSpec, RetiredSpec, Settings, SramCounts,
};

use crate::fault::Fault;
use crate::identity::{self, PciAddr};
use crate::import;
use crate::model::{self, BoardFile, Model};
use crate::schema::{GpuFile, ScenarioFile};
use crate::value::Invalid;
use crate::value::Val;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The files of `scenarios/`, by name (compiled in by build.rs: adding a
/// scenario is adding a file).
pub use crate::model::BUILTIN_SCENARIOS as BUILTINS;

pub const DEFAULT: &str = "dgx-h100";

/// A scenario after validation: every name resolved, every layout placed.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub gpus: Vec<GpuSpec>,
    /// Sorted by time.
    pub timeline: Vec<(f64, Fault)>,
    /// The driver version claimed (`driver.rs`); `None`: the default branch.
    pub driver: Option<String>,
    /// Whether the calling process holds the privileges NVML wants for
    /// MIG instance-scoped events and parent-handle aggregates (root,
    /// `CAP_SYS_ADMIN` or the `mig/monitor` capability device).
    pub privileged: bool,
    /// GPU indexes whose handles answer `NVML_ERROR_NO_PERMISSION` (a
    /// device node the container may not open).
    pub denied: Vec<u32>,
    /// The caller shares the host's PID namespace; `false` (a container
    /// without hostPID) makes `nvmlSystemGetProcessName` answer NOT_FOUND.
    pub host_pid_namespace: bool,
    /// What `nvmlGpmMetricsGet` answers for decoder, JPEG and OFA ids past
    /// the engines a GPU (instance) has: `false`, 0 with SUCCESS; `true`,
    /// NOT_SUPPORTED (scenario `gpm_absent_engines`). NVIDIA does not
    /// document which; the exporter must be right either way.
    pub gpm_absent_engines_unsupported: bool,
    /// What the loader changed to make the fleet consistent (identifiers
    /// given twice), for `nvml-sim check` and the library to report.
    pub warnings: Vec<ScenarioError>,
    /// System calls that answer an error instead of their value
    /// (top-level `errors`, as a capture recorded them).
    pub call_errors: Vec<(String, u32)>,
    /// Exports the captured driver lacked, beyond its branch's
    /// (`absent_functions`): removed from the symbol table too.
    pub absent_functions: Vec<String>,
    /// Where each GPU sits on the host (`topology.rs`).
    pub topology: Arc<Topology>,
}

/// The identifiers a `[[gpu]]` table gives, before derivation and
/// de-duplication over the whole fleet.
#[derive(Debug, Clone, Default)]
pub struct IdentityGiven {
    pub uuid: Option<String>,
    pub serial: Option<Val<String>>,
    pub pci: Option<PciAddr>,
    pub minor: Option<Val<u32>>,
    /// Where the table is, for warnings (`None`: a base scenario's GPU).
    pub offset: Option<usize>,
    /// The index of its `[[gpu]]` table (`None`: a base scenario's GPU).
    pub table: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct ScenarioError {
    pub source: String,
    pub line: Option<usize>,
    pub message: String,
}

impl ScenarioError {
    /// `file:line: warning: message`, as a warning is printed.
    pub fn as_warning(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line}: warning: {}", self.source, self.message),
            None => format!("{}: warning: {}", self.source, self.message),
        }
    }
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.source, line, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Scenario files larger than this are refused before parsing. The largest
/// built-in is 15 KB; a limit keeps a wrong path (`/dev/zero`, a log file, a
/// disk image) from being read into memory without end inside `nvmlInit`.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A scenario parsed before `nvmlInit` (when a host selected it, when the
/// library's symbols were set for it), kept for that `nvmlInit` to build
/// its fleet from: each parse of a capture grows a malloc arena that the
/// host's threads then reuse, so three parses of one capture cost the
/// exporter about a MiB of resident memory for good (BENCHMARKS.md,
/// "Replaying a capture").
struct Kept {
    key: String,
    stamp: Option<(u64, std::time::SystemTime)>,
    scenario: std::sync::Arc<Scenario>,
}

static KEPT: std::sync::Mutex<Option<Kept>> = std::sync::Mutex::new(None);

/// What tells a file scenario's parse stale: its length and change time.
/// Built-in scenarios never change.
fn stamp(name_or_path: &str) -> Option<(u64, std::time::SystemTime)> {
    if BUILTINS.iter().any(|(n, _)| *n == name_or_path) {
        return None;
    }
    let meta = std::fs::metadata(name_or_path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// [`load`], reusing the kept parse of the same scenario, unchanged since,
/// and keeping this one for the next caller.
pub fn load_kept(name_or_path: &str) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    kept(name_or_path, true)
}

/// [`load_kept`] for the `nvmlInit` that builds the fleet: the kept parse
/// is handed over, not kept, so it is freed once the fleet is built.
pub fn take_kept(name_or_path: &str) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    kept(name_or_path, false)
}

fn kept(name_or_path: &str, keep: bool) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    let mut slot = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let stamp = stamp(name_or_path);
    let scenario = match slot.take() {
        Some(k) if k.key == name_or_path && k.stamp == stamp => k.scenario,
        _ => std::sync::Arc::new(load(name_or_path)?),
    };
    if keep {
        *slot = Some(Kept {
            key: name_or_path.to_string(),
            stamp,
            scenario: std::sync::Arc::clone(&scenario),
        });
    }
    Ok(scenario)
}

/// Gives back to the system the heap a scenario's parsing used, once the
/// scenario is dropped: glibc keeps freed small blocks in the host process
/// otherwise, and the exporter's resident memory on a replayed host would
/// carry a capture's element tree (BENCHMARKS.md, "Replaying a capture").
// The one foreign call of the scenario floor.
#[allow(unsafe_code)]
pub fn release_parse_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim only returns free heap pages.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Resolves `NVML_SIM_SCENARIO`-style names: a built-in name or a file path.
pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
    if let Some((name, text)) = BUILTINS.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, &format!("built-in scenario `{name}`"), name);
    }
    let path = Path::new(name_or_path);
    let fail = |message: String| ScenarioError {
        source: name_or_path.to_string(),
        line: None,
        message,
    };
    // Regular files only: the library runs inside another process, which a
    // FIFO without a writer would block for good.
    let text = import::read(path, true).map_err(|e| {
        fail(format!(
            "cannot read scenario file ({e}); built-in scenarios are: {}",
            BUILTINS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("scenario");
    // A capture of a real host (`nvidia-smi -q -x` or `-q`), recognised
    // from its content, replays as the scenario `nvml-sim import` writes.
    if import::detect(&text).is_some() {
        return from_capture(&text, name_or_path, stem);
    }
    if !import::looks_like_toml(&text) {
        return Err(fail(format!(
            "neither a scenario (TOML) nor an nvidia-smi capture (`nvidia-smi -q -x` XML or `-q` text): it looks like {}",
            import::looks_like(&text)
        )));
    }
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(format!(
            "larger than {MAX_FILE_BYTES} bytes: not a scenario file (the largest built-in is 15 KB)"
        )));
    }
    parse(&text, name_or_path, stem)
}

/// A capture read as the scenario that replays it ([`from_import`]).
pub fn from_capture(text: &str, source: &str, name: &str) -> Result<Scenario, ScenarioError> {
    let capture = import::capture(text, name).map_err(|e| ScenarioError {
        source: source.to_string(),
        line: Some(e.line),
        message: match &e.element {
            Some(el) => format!("<{el}>: {}", e.message),
            None => e.message.clone(),
        },
    })?;
    from_import(capture, source)
}

/// An imported capture's scenario, checked and built as a file's is, from
/// its types. Errors and warnings name the capture's line: the import's
/// notes theirs, and what the scenario's checks find in a GPU's table or
/// its board, that GPU's `<gpu>` (a board's: the first GPU on it).
pub fn from_import(capture: import::Capture, source: &str) -> Result<Scenario, ScenarioError> {
    let import::Capture {
        file,
        notes,
        gpu_lines,
        ..
    } = capture;
    let mut first_on: HashMap<String, usize> = HashMap::new();
    for (i, g) in file.gpu.iter().enumerate() {
        if let Some(m) = &g.get_ref().model {
            first_on.entry(m.get_ref().clone()).or_insert(i);
        }
    }
    let place = |site: Site<'_>, _offset: Option<usize>, message: String| {
        let gpu = match site {
            Site::Gpu(i) => Some(i),
            Site::Board(key) => first_on.get(key).copied(),
            Site::Top => None,
        };
        match gpu.and_then(|i| gpu_lines.get(i)) {
            Some(&line) => ScenarioError {
                source: source.to_string(),
                line: Some(line),
                message: format!("<gpu>: {message}"),
            },
            None => ScenarioError {
                source: format!("{source} (as imported by `nvml-sim import`)"),
                line: None,
                message,
            },
        }
    };
    let name = file.name.clone().unwrap_or_default();
    let mut s = build(file, &name, &place)?;
    s.warnings.extend(notes.into_iter().map(|n| ScenarioError {
        source: source.to_string(),
        line: Some(n.line),
        message: n.message,
    }));
    Ok(s)
}

/// The part of a scenario something is in: what an imported capture,
/// which has no scenario text, names its line by.
#[derive(Debug, Clone, Copy)]
enum Site<'a> {
    /// The top level (or a base scenario's GPU).
    Top,
    /// A `[board.<key>]` table.
    Board(&'a str),
    /// The `[[gpu]]` table of this index.
    Gpu(usize),
}

/// Makes the error at a site and a byte offset of the file (if it has one).
type Place<'p> = dyn Fn(Site<'_>, Option<usize>, String) -> ScenarioError + 'p;

pub use crate::schema::MAX_GPUS;

/// How deep `base` chains of boards may go (a loop is refused before).
const MAX_BOARD_DEPTH: usize = 8;

/// Boards by key: the scenario's `[board.*]` tables and the built-ins.
struct Boards<'a> {
    defined: &'a BTreeMap<String, toml::Spanned<BoardFile>>,
    resolved: HashMap<String, Arc<Model>>,
}

fn file_table(f: &BoardFile) -> toml::Table {
    let mut t = match toml::Value::try_from(f) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    t.remove("base");
    t
}

impl<'a> Boards<'a> {
    /// The file's `[board.*]` tables, each checked and resolved once
    /// (none may hide a built-in board).
    fn defined(
        defined: &'a BTreeMap<String, toml::Spanned<BoardFile>>,
        place: &Place<'_>,
    ) -> Result<Self, ScenarioError> {
        for (key, b) in defined {
            if model::BUILTIN_BOARDS.iter().any(|(k, _)| k == key) {
                return Err(place(
                    Site::Board(key),
                    Some(b.span().start),
                    format!("[board.{key}] would hide the built-in board `{key}`: give it another name (with base = \"{key}\")"),
                ));
            }
        }
        let mut boards = Boards {
            defined,
            resolved: HashMap::new(),
        };
        for key in defined.keys() {
            boards.model(key).map_err(|m| {
                place(
                    Site::Board(key),
                    Some(defined[key].span().start),
                    m.into_message(),
                )
            })?;
        }
        Ok(boards)
    }

    /// One `[[gpu]]` table (the `table`th) on a fleet of `fleet` GPUs so
    /// far: its spec on its board, its identity as given, and how many
    /// GPUs it makes.
    fn gpu(
        &mut self,
        table: usize,
        spanned: toml::Spanned<GpuFile>,
        fleet: usize,
        place: &Place<'_>,
    ) -> Result<(GpuSpec, IdentityGiven, usize), ScenarioError> {
        let err = |offset: Option<usize>, message: String| place(Site::Gpu(table), offset, message);
        let at = spanned.span().start;
        let g = spanned.into_inner();
        let model = match (&g.model, &g.board) {
            (None, None) => {
                return Err(err(
                    Some(at),
                    "a [[gpu]] needs a `model` (a board) or a `board` table".into(),
                ))
            }
            (Some(m), None) => self
                .model(m.get_ref())
                .map_err(|e| err(Some(m.span().start), e.into_message()))?,
            (m, Some(b)) => {
                if m.is_some() && b.get_ref().base.is_some() {
                    return Err(err(
                        Some(b.span().start),
                        "give `model` or `board.base`, not both".into(),
                    ));
                }
                let base = m
                    .as_ref()
                    .map(|m| m.get_ref().as_str())
                    .or(b.get_ref().base.as_deref());
                self.inline(base, b.get_ref())
                    .map_err(|e| err(Some(b.span().start), e.into_message()))?
            }
        };
        let count = g.count.unwrap_or(1);
        if count == 0 {
            return Err(err(Some(at), "count must be at least 1".into()));
        }
        if fleet.saturating_add(count) > MAX_GPUS {
            return Err(err(
                Some(at),
                format!("count {count} makes more than {MAX_GPUS} GPUs, more than any node holds"),
            ));
        }
        let identity = IdentityGiven {
            uuid: g.uuid.as_ref().map(|u| u.get_ref().clone()),
            serial: g.serial.as_ref().map(|s| s.get_ref().clone()),
            pci: match &g.pci_bus_id {
                None => None,
                Some(b) => Some(PciAddr::parse(b.get_ref()).ok_or_else(|| {
                    err(
                        Some(b.span().start),
                        format!(
                            "pci_bus_id `{}` is not DOMAIN:BUS:DEVICE.FUNCTION in hex, like 00000000:18:00.0",
                            b.get_ref()
                        ),
                    )
                })?),
            },
            minor: g.minor_number,
            offset: Some(at),
            table: Some(table),
        };
        if let Some(u) = &g.uuid {
            if !u.get_ref().starts_with("GPU-") || u.get_ref().len() > 80 {
                return Err(err(
                    Some(u.span().start),
                    format!(
                        "uuid `{}` must start with GPU- (at most 80 characters)",
                        u.get_ref()
                    ),
                ));
            }
        }
        let mut spec = g
            .resolve(&model)
            .map_err(|e| err(e.offset.or(Some(at)), e.error.into_message()))?;
        spec.identity_given = identity.clone();
        Ok((spec, identity, count))
    }

    /// The board `key` as one table, its `base` chain merged in.
    fn table(&self, key: &str, depth: usize) -> Result<toml::Table, Invalid> {
        if depth > MAX_BOARD_DEPTH {
            return Err(Invalid::from(format!(
                "board `{key}`: `base` goes more than {MAX_BOARD_DEPTH} boards deep (a loop?)"
            )));
        }
        if let Some(f) = self.defined.get(key) {
            let f = f.get_ref();
            let mut t = match &f.base {
                Some(b) => self.table(b, depth + 1)?,
                None => toml::Table::new(),
            };
            model::merge_tables(&mut t, file_table(f));
            return Ok(t);
        }
        model::builtin_table(key).ok_or_else(|| {
            let mut known: Vec<&str> = self.defined.keys().map(String::as_str).collect();
            known.extend(model::BUILTIN_BOARDS.iter().map(|(k, _)| *k));
            format!("unknown GPU model `{key}` (known: {})", known.join(", ")).into()
        })
    }

    fn resolve(key: &str, table: toml::Table) -> Result<Arc<Model>, Invalid> {
        let file: BoardFile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().trim().to_string())?;
        file.resolve(key).map(Arc::new)
    }

    /// A board by key, resolved once.
    fn model(&mut self, key: &str) -> Result<Arc<Model>, Invalid> {
        if let Some(m) = self.resolved.get(key) {
            return Ok(m.clone());
        }
        let m = if self.defined.contains_key(key) {
            Self::resolve(key, self.table(key, 0)?)?
        } else {
            model::model_by_key(key).ok_or_else(|| self.table(key, 0).err().unwrap_or_default())?
        };
        self.resolved.insert(key.to_string(), m.clone());
        Ok(m)
    }

    /// A board described in a `[[gpu]]` table, on its base if it has one.
    fn inline(&self, base: Option<&str>, over: &BoardFile) -> Result<Arc<Model>, Invalid> {
        let mut t = match base {
            Some(b) => self.table(b, 1)?,
            None => toml::Table::new(),
        };
        model::merge_tables(&mut t, file_table(over));
        Self::resolve(base.unwrap_or("inline"), t)
    }
}

pub fn parse(text: &str, source: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
    let err = |offset: Option<usize>, message: String| ScenarioError {
        source: source.to_string(),
        line: offset.map(|o| line_of(text, o)),
        message,
    };
    let raw: ScenarioFile = toml::from_str(text)
        .map_err(|e| err(e.span().map(|s| s.start), e.message().trim().to_string()))?;
    build(raw, default_name, &|_, offset, message| {
        err(offset, message)
    })
}

/// A scenario file's types checked into the scenario, errors made by
/// `place`: its base scenario, its boards, its `[[gpu]]` tables, the
/// GPUs' identities, its timeline and the host's settings, in the order
/// their errors are named.
fn build(
    raw: ScenarioFile,
    default_name: &str,
    place: &Place<'_>,
) -> Result<Scenario, ScenarioError> {
    let err = |offset: Option<usize>, message: String| place(Site::Top, offset, message);
    let name = raw.name.clone().unwrap_or_else(|| default_name.to_string());
    let base = raw
        .base
        .as_ref()
        .map(|b| base_scenario(b, &err))
        .transpose()?;
    let base_topology = base.as_ref().map(|b| b.topology.clone());
    let (mut gpus, mut given, mut timeline, base_driver, base_privileged, base_denied) = match base
    {
        Some(b) => {
            let given = b
                .gpus
                .iter()
                .map(|g| IdentityGiven {
                    offset: None,
                    table: None,
                    ..g.identity_given.clone()
                })
                .collect();
            (b.gpus, given, b.timeline, b.driver, b.privileged, b.denied)
        }
        None => (Vec::new(), Vec::new(), Vec::new(), None, true, Vec::new()),
    };
    let mut boards = Boards::defined(&raw.board, place)?;
    for (table, spanned) in raw.gpu.into_iter().enumerate() {
        let (spec, identity, count) = boards.gpu(table, spanned, gpus.len(), place)?;
        for _ in 0..count {
            gpus.push(spec.clone());
            given.push(identity.clone());
        }
    }
    if gpus.is_empty() {
        return Err(err(
            None,
            "the scenario defines no GPU ([[gpu]] tables)".into(),
        ));
    }
    let mut warnings = Vec::new();
    resolve_identities(&name, &mut gpus, &given, &mut |g, m| {
        warnings.push(place(g.table.map_or(Site::Top, Site::Gpu), g.offset, m));
    });
    for entry in raw.timeline {
        let offset = entry.span().start;
        let crate::schema::TimelineEntry { at, fault } = entry.into_inner();
        if let Some(g) = fault.gpu() {
            if g as usize >= gpus.len() {
                return Err(err(
                    Some(offset),
                    format!(
                        "timeline entry names GPU {g}, but the fleet has {} GPUs",
                        gpus.len()
                    ),
                ));
            }
        }
        timeline.push((at, fault));
    }
    timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
    let call_errors = match &raw.errors {
        Some(e) => resolve::call_errors(e.get_ref()),
        None => Vec::new(),
    };
    let absent_functions = absent_functions(raw.absent_functions.as_ref(), &err)?;
    let driver = match &raw.driver {
        Some(d) => {
            crate::personality::Personality::parse(d.get_ref())
                .map_err(|m| err(Some(d.span().start), m.into_message()))?;
            Some(d.get_ref().clone())
        }
        None => base_driver,
    };
    let denied = match &raw.denied {
        Some(list) => {
            if let Some(bad) = list.get_ref().iter().find(|&&g| g as usize >= gpus.len()) {
                return Err(err(
                    Some(list.span().start),
                    format!(
                        "denied names GPU {bad}, but the fleet has {} GPUs",
                        gpus.len()
                    ),
                ));
            }
            list.get_ref().clone()
        }
        None => base_denied,
    };
    let topology = topology::build(raw.topology.as_ref(), base_topology, gpus.len(), &err)?;
    Ok(Scenario {
        name,
        topology,
        gpus,
        timeline,
        driver,
        privileged: raw.privileged.unwrap_or(base_privileged),
        denied,
        host_pid_namespace: raw.host_pid_namespace.unwrap_or(true),
        gpm_absent_engines_unsupported: raw.gpm_absent_engines
            == Some(crate::schema::GpmAbsentEngines::NotSupported),
        warnings,
        call_errors,
        absent_functions,
    })
}

/// The built-in scenario a file starts from (`base = "dgx-h100"`).
fn base_scenario(
    base: &toml::Spanned<String>,
    err: &dyn Fn(Option<usize>, String) -> ScenarioError,
) -> Result<Scenario, ScenarioError> {
    let base_text = BUILTINS
        .iter()
        .find(|(n, _)| *n == base.get_ref())
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            err(
                Some(base.span().start),
                format!("unknown base scenario `{}`", base.get_ref()),
            )
        })?;
    parse(
        base_text,
        &format!("built-in scenario `{}`", base.get_ref()),
        base.get_ref(),
    )
}

/// `absent_functions`: the exports a driver branch lacks, none of them
/// one every client calls.
fn absent_functions(
    list: Option<&toml::Spanned<Vec<String>>>,
    err: &dyn Fn(Option<usize>, String) -> ScenarioError,
) -> Result<Vec<String>, ScenarioError> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    const ALWAYS: [&str; 3] = ["nvmlShutdown", "nvmlEventSetFree", "nvmlGpmSampleFree"];
    if let Some(f) = list.get_ref().iter().find(|f| {
        ALWAYS.contains(&f.as_str()) || !f.starts_with("nvml") || f.starts_with("nvmlInit")
    }) {
        return Err(err(
            Some(list.span().start),
            format!("absent_functions: `{f}` cannot be absent (clients call nvmlInit*, nvmlShutdown, nvmlEventSetFree and nvmlGpmSampleFree unconditionally)"),
        ));
    }
    Ok(list.get_ref().clone())
}

/// Gives every GPU its identifiers: the scenario's, else derived from the
/// scenario name and index. An identifier given twice (masked captures
/// share one fake UUID or serial) is replaced by the derived one on the
/// later GPU, and `warn` says so.
fn resolve_identities(
    scenario: &str,
    gpus: &mut [GpuSpec],
    given: &[IdentityGiven],
    warn: &mut dyn FnMut(&IdentityGiven, String),
) {
    let mut uuids: HashSet<String> = HashSet::new();
    let mut serials: HashSet<String> = HashSet::new();
    let mut buses: HashSet<PciAddr> = given.iter().filter_map(|g| g.pci).collect();
    let mut explicit_buses: HashSet<PciAddr> = HashSet::new();
    for (i, (spec, g)) in gpus.iter_mut().zip(given).enumerate() {
        let index = i as u32;
        let mut uuid = g
            .uuid
            .clone()
            .unwrap_or_else(|| identity::gpu_uuid(scenario, index));
        if !uuids.insert(uuid.to_ascii_lowercase()) {
            let fresh = identity::gpu_uuid(scenario, index);
            warn(
                g,
                format!("GPU {i}: uuid {uuid} repeats an earlier GPU's; GPU {i} answers {fresh} instead"),
            );
            uuid = fresh;
            uuids.insert(uuid.to_ascii_lowercase());
        }
        let serial = match &g.serial {
            Some(Val::NotSupported) => None,
            Some(Val::Is(s)) => Some(s.clone()),
            None => spec
                .model
                .has_serial
                .then(|| identity::gpu_serial(scenario, index)),
        };
        let serial = serial.map(|s| {
            if serials.insert(s.clone()) {
                return s;
            }
            let fresh = identity::gpu_serial(scenario, index);
            warn(
                g,
                format!(
                    "GPU {i}: serial {s} repeats an earlier GPU's; GPU {i} answers {fresh} instead"
                ),
            );
            serials.insert(fresh.clone());
            fresh
        });
        let pci = match g.pci {
            Some(p) if explicit_buses.insert(p) => p,
            explicit => {
                // The derived bus, or the next one no GPU of the scenario uses.
                let mut bus = identity::gpu_bus(index);
                while buses.contains(&PciAddr::on_bus(bus & 0xff)) {
                    bus += 1;
                }
                let fresh = PciAddr::on_bus(bus & 0xff);
                buses.insert(fresh);
                if let Some(p) = explicit {
                    warn(
                        g,
                        format!(
                            "GPU {i}: pci_bus_id {} repeats an earlier GPU's; GPU {i} answers {} instead",
                            p.bus_id(),
                            fresh.bus_id()
                        ),
                    );
                }
                fresh
            }
        };
        let minor = match g.minor {
            Some(Val::NotSupported) => None,
            Some(Val::Is(m)) => Some(m),
            None => Some(index),
        };
        for m in spec.mig.iter_mut().flatten() {
            for u in m.uuid.iter_mut().chain(
                m.compute_instances
                    .iter_mut()
                    .filter_map(|c| c.uuid.as_mut()),
            ) {
                if !uuids.insert(u.to_ascii_lowercase()) {
                    warn(
                        g,
                        format!("GPU {i}: MIG uuid {u} repeats another; GPU {i}'s MIG device gets a derived one"),
                    );
                    u.clear();
                }
            }
            if m.uuid.as_ref().is_some_and(String::is_empty) {
                m.uuid = None;
            }
            for c in &mut m.compute_instances {
                if c.uuid.as_ref().is_some_and(String::is_empty) {
                    c.uuid = None;
                }
            }
        }
        spec.identity = Identity {
            uuid,
            serial,
            pci,
            minor,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for (name, _) in BUILTINS {
            let s = load(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(!s.gpus.is_empty(), "{name}");
        }
        assert_eq!(load("dgx-h100").unwrap().gpus.len(), 8);
        assert_eq!(load("large").unwrap().gpus.len(), 16);
        assert_eq!(load("faults").unwrap().timeline.len(), 9);
    }

    #[test]
    fn a_kept_parse_serves_until_its_file_changes() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("host.toml");
        let key = file.to_str().unwrap();
        std::fs::write(&file, "[[gpu]]\nmodel = \"rtx-4090\"\n").unwrap();
        let checked = load_kept(key).unwrap();
        // The nvmlInit after a host's check builds from the same parse...
        let built = take_kept(key).unwrap();
        assert!(std::sync::Arc::ptr_eq(&checked, &built));
        // ...and hands it over: the next one parses again.
        assert!(!std::sync::Arc::ptr_eq(&built, &take_kept(key).unwrap()));
        // A file rewritten after the check is read anew.
        load_kept(key).unwrap();
        std::fs::write(
            &file,
            "[[gpu]]\nmodel = \"rtx-4090\"\n[[gpu]]\nmodel = \"rtx-4090\"\n",
        )
        .unwrap();
        assert_eq!(take_kept(key).unwrap().gpus.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_are_read_bounded() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A valid scenario padded with comments past the limit: refused
        // before parsing, by size.
        let big = dir.join("big.toml");
        let mut text = String::from("[[gpu]]\nmodel = \"rtx-4090\"\n");
        while text.len() as u64 <= MAX_FILE_BYTES {
            text.push_str("# padding padding padding padding padding padding padding\n");
        }
        std::fs::write(&big, &text).unwrap();
        let e = load(big.to_str().unwrap()).unwrap_err();
        assert!(e.message.contains("larger than"), "{e}");
        assert!(e.to_string().contains("big.toml"), "{e}");
        // The same scenario under the limit loads.
        let small = dir.join("small.toml");
        std::fs::write(&small, &text[..4096]).unwrap();
        assert_eq!(load(small.to_str().unwrap()).unwrap().gpus.len(), 1);
        // A device that never ends, refused unread.
        let e = load("/dev/zero").unwrap_err();
        assert!(
            e.message
                .contains("not a regular file (a character device)"),
            "{e}"
        );
        let bin = dir.join("bin.toml");
        std::fs::write(&bin, b"name = \"\xff\"\n").unwrap();
        assert!(load(bin.to_str().unwrap())
            .unwrap_err()
            .message
            .contains("UTF-8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_line_and_problem() {
        let text = "name = \"x\"\n\n[[gpu]]\nmodel = \"h900\"\n";
        let e = parse(text, "x.toml", "x").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(
            e.to_string()
                .starts_with("x.toml:4: unknown GPU model `h900`"),
            "{e}"
        );
        let e = parse(
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [\"4g.40gb\", \"4g.40gb\"]\n",
            "y.toml",
            "y",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("does not fit"), "{e}");
        let e = parse("[[gpu]]\nmodel = 3\n", "z.toml", "z").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let e = parse(
            "[[gpu]]\nmodel = \"rtx-4090\"\n[[timeline]]\nat = 1\naction = \"lose\"\ngpu = 3\n",
            "t.toml",
            "t",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("GPU 3"), "{e}");
    }

    /// (scenario text, line, what the message says): every key of the
    /// format is checked, and an unknown one is refused where it is.
    const REFUSED: &[(&str, usize, &str)] = &[
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\ntemperature = 41\n",
            4,
            "unknown field `temperature`",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.counters]\npcie_replays = 1\necc = { volatile = { corrected = { dram = 1, hbm = 2 } } }\n",
            5,
            "unknown field `hbm`",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"1g.10gb\", laod = 3 }]\n",
            3,
            "unknown field `laod`",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.board]\nmemory = { total = 3 }\n",
            4,
            "unknown field `total`",
        ),
        (
            "[board.mine]\nbase = \"h100-sxm5-80gb\"\nfans = 2\n[[gpu]]\nmodel = \"mine\"\n",
            3,
            "unknown field `fans`",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\ntemperature_c = \"hot\"\n",
            4,
            "(or \"N/A\")",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\nutilization = { gpu = 140 }\n",
            3,
            "utilization.gpu = 140 is outside 0..=100",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"1g.10gb\", gpu_instance_id = 5 }]\n",
            3,
            "no placement of `1g.10gb`",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"2g.20gb\", placement = 0 }, { profile = \"1g.10gb\", placement = 1 }]\n",
            3,
            "overlaps",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"3g.40gb\", compute_instances = [{ id = 0, slices = 2 }, { id = 1, slices = 2 }] }]\n",
            3,
            "compute instances take 4 slices of its 3",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\npower_limit_w = 900\n",
            3,
            "power_limit_w 900 is outside",
        ),
        (
            "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\npci_bus_id = \"18:00.0\"\n",
            3,
            "is not DOMAIN:BUS:DEVICE.FUNCTION",
        ),
        (
            "[[gpu]]\nmodel = \"rtx-4090\"\n[gpu.counters]\nremapped_rows = { correctable = 1 }\n",
            1,
            "does not remap rows",
        ),
        (
            "[[gpu]]\n[gpu.board]\nname = \"x\"\nbrand = \"nvidia\"\narchitecture = \"blackwell\"\n",
            2,
            "has no `memory.total_mib`",
        ),
        (
            "[board.a]\nbase = \"b\"\n[board.b]\nbase = \"a\"\n[[gpu]]\nmodel = \"a\"\n",
            1,
            "(a loop?)",
        ),
        (
            "[board.h100-sxm5-80gb]\nname = \"x\"\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n",
            1,
            "would hide the built-in board",
        ),
    ];

    #[test]
    fn new_keys_are_checked_with_their_line() {
        for (text, line, message) in REFUSED {
            let e = parse(text, "k.toml", "k").expect_err(text);
            assert_eq!(e.line, Some(*line), "{e}\n{text}");
            assert!(e.message.contains(message), "{e}\n{text}");
        }
    }

    #[test]
    fn inline_boards_and_not_supported_values() {
        let text = r#"
[board.blackwell-4slice]
name = "NVIDIA B200"
brand = "nvidia"
architecture = "blackwell"
memory = { total_mib = 183359, reserved_mib = 1000 }
power = { default_limit_w = 1000, module = { default_limit_w = 2700 } }
clocks = { max_graphics_mhz = 1965, max_memory_mhz = 3996 }
pcie = { generation = 5, width = 16 }
nvlink = { links = 18, version = 5 }
engines = { decoders = 7, jpegs = 7, ofas = 1 }
ecc = { supported = true, row_remapping = true, remapper_banks = 3072 }
thermal = { shutdown_c = "N/A", gpu_max_c = 87 }

[board.blackwell-4slice.mig]
compute_slices = 4
memory_slices = 4

[[board.blackwell-4slice.mig.profile]]
name = "1g.45gb"
profile = "1_SLICE"
id = 19
slices = 1
memory_slices = 1
instances = 4
placements = [0, 1, 2, 3]
gpu_instance_ids = [3, 4, 5, 6]
memory_mib = 45000
sm_count = 37
copy_engines = 2
decoders = 1
encoders = 1
jpegs = 1
ofas = 0

[[gpu]]
model = "blackwell-4slice"
count = 2
mig = ["1g.45gb", { profile = "1g.45gb", gpu_instance_id = 6 }]
processes = [{ name = "x", memory_mib = 10, gpu_instance = 6 }]

[[gpu]]
model = "h100-sxm5-80gb"
serial = "N/A"
[gpu.board]
name = "NVIDIA H100 NVL"
thermal = { memory_max_c = "N/A" }
"#;
        let s = parse(text, "b.toml", "b").unwrap();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let b = &s.gpus[0].model;
        assert_eq!(
            b.arch,
            nvml_wrapper_sys::bindings::NVML_DEVICE_ARCH_BLACKWELL
        );
        assert_eq!(b.cuda_cc, (10, 0), "from the architecture");
        assert_eq!(b.thermal.shutdown_c, None);
        assert_eq!(
            b.power.module.unwrap().limits.unwrap().default_mw,
            2_700_000
        );
        assert!(Arc::ptr_eq(b, &s.gpus[1].model), "one board, shared");
        let mig = s.gpus[0].mig.as_ref().unwrap();
        assert_eq!((mig[0].start, mig[1].start), (0, 3));
        assert_eq!(s.gpus[0].processes[0].mig_instance, Some(1));
        let nvl = &s.gpus[2];
        assert_eq!(nvl.model.name, "NVIDIA H100 NVL");
        assert_eq!(nvl.model.thermal.memory_max_c, None);
        assert_eq!(nvl.model.memory.total_mib, 81559, "the rest from its model");
        assert_eq!(nvl.identity.serial, None);
        // Derived identifiers are unique without warnings.
        let uuids: HashSet<&str> = s.gpus.iter().map(|g| g.identity.uuid.as_str()).collect();
        assert_eq!(uuids.len(), 3);
    }

    #[test]
    fn identifiers_given_twice_are_made_unique_and_reported() {
        let text = "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\ncount = 2\nuuid = \"GPU-1\"\nserial = \"1\"\npci_bus_id = \"0000:18:00.0\"\n";
        let s = parse(text, "d.toml", "d").unwrap();
        assert_eq!(s.gpus[0].identity.uuid, "GPU-1");
        assert_ne!(s.gpus[1].identity.uuid, "GPU-1");
        assert_ne!(s.gpus[1].identity.serial.as_deref(), Some("1"));
        assert_ne!(s.gpus[1].identity.pci, s.gpus[0].identity.pci);
        let w: Vec<String> = s.warnings.iter().map(ScenarioError::as_warning).collect();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("d.toml:1: warning: GPU 1: uuid GPU-1 repeats"),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.contains("pci_bus_id 00000000:18:00.0 repeats")),
            "{w:?}"
        );
    }

    /// Every TOML example of README.md reads: the scenarios as they are,
    /// the board-key reference as a board of a scenario.
    #[test]
    fn the_readme_examples_are_valid() {
        let readme = include_str!("../../README.md");
        let mut checked = 0;
        for block in readme.split("```toml\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            let text = if block.contains("[[gpu]]") {
                block.to_string()
            } else {
                let board: toml::Table =
                    toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
                let mut boards = toml::Table::new();
                boards.insert("example".into(), toml::Value::Table(board));
                let mut doc = toml::Table::new();
                doc.insert("board".into(), toml::Value::Table(boards));
                let mut gpu = toml::Table::new();
                gpu.insert("model".into(), toml::Value::String("example".into()));
                doc.insert(
                    "gpu".into(),
                    toml::Value::Array(vec![toml::Value::Table(gpu)]),
                );
                toml::to_string(&doc).unwrap()
            };
            let s = parse(&text, "README.md", "readme").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert!(!s.gpus.is_empty());
            checked += 1;
        }
        assert!(checked >= 4, "{checked} examples");
    }

    /// The importer hands its scenario over typed: what the loader builds
    /// from it is what it builds from the text `nvml-sim import` prints,
    /// for every corpus capture, and the warnings name the same capture
    /// lines.
    #[test]
    fn an_imported_capture_builds_as_the_scenario_it_prints() {
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/corpus"
        ))];
        let mut checked = 0;
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&p) else {
                    continue;
                };
                if import::detect(&text).is_none() {
                    continue;
                }
                let mut typed = from_capture(&text, "h.xml", "h").unwrap();
                let written = import::import(&text, "h").unwrap();
                let mut parsed = parse(&written.scenario, "h.toml", "h").unwrap();
                // Where a table is in the text: the typed file has no text.
                for g in typed.gpus.iter_mut().chain(&mut parsed.gpus) {
                    g.identity_given.offset = None;
                }
                let p = p.display();
                assert_eq!(
                    format!("{:?}", typed.gpus),
                    format!("{:?}", parsed.gpus),
                    "{p}"
                );
                assert_eq!(
                    format!(
                        "{:?}",
                        (
                            &typed.name,
                            &typed.timeline,
                            &typed.driver,
                            typed.privileged
                        )
                    ),
                    format!(
                        "{:?}",
                        (
                            &parsed.name,
                            &parsed.timeline,
                            &parsed.driver,
                            parsed.privileged
                        )
                    ),
                    "{p}"
                );
                assert_eq!(
                    format!(
                        "{:?}",
                        (
                            &typed.denied,
                            typed.host_pid_namespace,
                            typed.gpm_absent_engines_unsupported
                        )
                    ),
                    format!(
                        "{:?}",
                        (
                            &parsed.denied,
                            parsed.host_pid_namespace,
                            parsed.gpm_absent_engines_unsupported
                        )
                    ),
                    "{p}"
                );
                assert_eq!(typed.call_errors, parsed.call_errors, "{p}");
                assert_eq!(typed.absent_functions, parsed.absent_functions, "{p}");
                // The identity warnings at the <gpu> whose table they are
                // in, then the notes.
                let identity: Vec<_> = typed
                    .warnings
                    .iter()
                    .filter(|w| w.message.starts_with("<gpu>: "))
                    .map(|w| w.line.unwrap())
                    .collect();
                let tables: Vec<usize> = parsed
                    .warnings
                    .iter()
                    .map(|w| {
                        let before = written.scenario.lines().take(w.line.unwrap());
                        // The capture's header: the notes, a blank line.
                        before.filter(|l| l.starts_with("[[gpu]]")).count() - 1
                    })
                    .collect();
                let lines: Vec<usize> = tables.iter().map(|&t| written.gpu_lines[t]).collect();
                assert_eq!(identity, lines, "{p}");
                assert_eq!(
                    typed.warnings.len(),
                    parsed.warnings.len() + written.notes.len(),
                    "{p}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 88, "{checked} captures");
    }

    /// `gpm_absent_engines` is typed when the file is read: an unknown
    /// value is refused with the words and the line it had when it was
    /// checked afterwards.
    #[test]
    fn an_unknown_gpm_absent_engines_names_its_line() {
        let text = "name = \"g\"\nbase = \"dgx-h100\"\n\ngpm_absent_engines = \"sometimes\"\n";
        let e = parse(text, "g.toml", "g").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(
            e.message,
            "gpm_absent_engines = \"sometimes\": expected \"zero\" or \"not_supported\""
        );
        for (v, unsupported) in [("zero", false), ("not_supported", true)] {
            let s = parse(&text.replace("sometimes", v), "g.toml", "g").unwrap();
            assert_eq!(s.gpm_absent_engines_unsupported, unsupported);
        }
        assert!(
            !parse("base = \"dgx-h100\"\n", "g.toml", "g")
                .unwrap()
                .gpm_absent_engines_unsupported
        );
    }

    /// A board's `architecture` is an `Architecture` from the moment the
    /// file is read: an unknown one is refused with the known names, at
    /// its line.
    #[test]
    fn an_unknown_architecture_names_its_line() {
        let text = "[board.mine]\nbase = \"h100-sxm5-80gb\"\narchitecture = \"hoper\"\n\n[[gpu]]\nmodel = \"mine\"\n";
        let e = parse(text, "a.toml", "a").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(
            e.message
                .starts_with("unknown architecture `hoper` (known: kepler, maxwell, pascal"),
            "{e}"
        );
        let s = parse(&text.replace("hoper", "blackwell"), "a.toml", "a").unwrap();
        assert_eq!(
            s.gpus[0].model.arch,
            nvml_wrapper_sys::bindings::NVML_DEVICE_ARCH_BLACKWELL
        );
    }
}
