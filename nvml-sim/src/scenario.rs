//! Scenario files: the fleet a simulated driver presents and the faults it
//! plays back over time. The built-in scenarios are TOML files in
//! `scenarios/`, compiled in, so they double as examples of the format.

use crate::fault::{Fault, ProcKind};
use crate::model::{self, Model};
use serde::Deserialize;
use std::path::Path;

pub const BUILTINS: [(&str, &str); 5] = [
    ("dgx-h100", include_str!("../scenarios/dgx-h100.toml")),
    ("dgx-a100", include_str!("../scenarios/dgx-a100.toml")),
    ("workstation", include_str!("../scenarios/workstation.toml")),
    ("faults", include_str!("../scenarios/faults.toml")),
    ("large", include_str!("../scenarios/large.toml")),
];

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
}

#[derive(Debug, Clone)]
pub struct GpuSpec {
    pub model: &'static Model,
    pub load: f64,
    pub mig: Option<Vec<MigSpec>>,
    pub processes: Vec<ProcSpec>,
    pub display: bool,
    pub persistence: bool,
    /// MIG mode after the next GPU reset (`nvidia-smi -mig`); defaults to the current mode.
    pub mig_pending: Option<bool>,
    /// An MPS server runs on the GPU: its other compute processes are its clients.
    pub mps: bool,
}

#[derive(Debug, Clone)]
pub struct MigSpec {
    pub profile: String,
    pub load: f64,
}

#[derive(Debug, Clone)]
pub struct ProcSpec {
    pub pid: Option<u32>,
    pub name: String,
    pub memory_mib: u64,
    pub kind: ProcKind,
    /// Index into the GPU's `mig` list.
    pub mig_instance: Option<usize>,
    /// What the process does, when the scenario declares it.
    pub usage: Option<crate::usage::ProcUse>,
}

#[derive(Debug)]
pub struct ScenarioError {
    pub source: String,
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.source, line, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    /// Another scenario (built-in name) whose GPUs this one starts from.
    base: Option<toml::Spanned<String>>,
    #[serde(default)]
    gpu: Vec<toml::Spanned<RawGpu>>,
    #[serde(default)]
    timeline: Vec<toml::Spanned<toml::Table>>,
    driver: Option<toml::Spanned<String>>,
    privileged: Option<bool>,
    denied: Option<toml::Spanned<Vec<u32>>>,
    host_pid_namespace: Option<bool>,
    gpm_absent_engines: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    model: toml::Spanned<String>,
    #[serde(default = "one")]
    count: usize,
    #[serde(default)]
    load: f64,
    mig: Option<toml::Spanned<Vec<RawMig>>>,
    #[serde(default)]
    processes: Vec<RawProc>,
    #[serde(default)]
    display: bool,
    persistence: Option<bool>,
    mig_pending: Option<bool>,
    #[serde(default)]
    mps: bool,
}

fn one() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawMig {
    Name(String),
    Full {
        profile: String,
        #[serde(default)]
        load: f64,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProc {
    pid: Option<u32>,
    name: String,
    memory_mib: u64,
    #[serde(default = "compute")]
    kind: ProcKind,
    mig_instance: Option<usize>,
    sm_percent: Option<f64>,
    memory_percent: Option<f64>,
    encoder_percent: Option<f64>,
    decoder_percent: Option<f64>,
}

fn compute() -> ProcKind {
    ProcKind::Compute
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Scenario files larger than this are refused before parsing. The largest
/// built-in is 15 KB; a limit keeps a wrong path (`/dev/zero`, a log file, a
/// disk image) from being read into memory without end inside `nvmlInit`.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Resolves `NVML_SIM_SCENARIO`-style names: a built-in name or a file path.
pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
    use std::io::Read;
    if let Some((name, text)) = BUILTINS.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, &format!("built-in scenario `{name}`"), name);
    }
    let path = Path::new(name_or_path);
    let fail = |message: String| ScenarioError {
        source: name_or_path.to_string(),
        line: None,
        message,
    };
    let read_err = |e: std::io::Error| {
        fail(format!(
            "cannot read scenario file ({e}); built-in scenarios are: {}",
            BUILTINS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(format!(
            "larger than {MAX_FILE_BYTES} bytes: not a scenario file (the largest built-in is 15 KB)"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("scenario");
    parse(&text, name_or_path, stem)
}

/// More GPUs than any node holds (NVML indexes them in 32 bits, but a
/// scenario asking for billions would exhaust memory building them).
pub const MAX_GPUS: usize = 64;

pub fn parse(text: &str, source: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
    let err = |offset: Option<usize>, message: String| ScenarioError {
        source: source.to_string(),
        line: offset.map(|o| line_of(text, o)),
        message,
    };
    let raw: RawScenario = toml::from_str(text)
        .map_err(|e| err(e.span().map(|s| s.start), e.message().trim().to_string()))?;
    let name = raw.name.clone().unwrap_or_else(|| default_name.to_string());
    let mut gpus = Vec::new();
    let mut timeline = Vec::new();
    let (mut base_driver, mut base_privileged, mut base_denied) = (None, true, Vec::new());
    if let Some(base) = &raw.base {
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
        let base_scenario = parse(
            base_text,
            &format!("built-in scenario `{}`", base.get_ref()),
            base.get_ref(),
        )?;
        gpus = base_scenario.gpus;
        timeline = base_scenario.timeline;
        base_driver = base_scenario.driver;
        base_privileged = base_scenario.privileged;
        base_denied = base_scenario.denied;
    }
    for spanned in &raw.gpu {
        let at = spanned.span().start;
        let g = spanned.get_ref();
        let model = model::model_by_key(g.model.get_ref()).ok_or_else(|| {
            err(
                Some(g.model.span().start),
                format!(
                    "unknown GPU model `{}` (known: {})",
                    g.model.get_ref(),
                    model::MODELS
                        .iter()
                        .map(|m| m.key)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        if !(0.0..=100.0).contains(&g.load) {
            return Err(err(
                Some(at),
                format!("load {} is outside 0..=100 percent", g.load),
            ));
        }
        if g.count == 0 {
            return Err(err(Some(at), "count must be at least 1".into()));
        }
        let mig = match &g.mig {
            None => None,
            Some(spanned_list) => {
                let mig_at = spanned_list.span().start;
                let specs: Vec<MigSpec> = spanned_list
                    .get_ref()
                    .iter()
                    .map(|m| match m {
                        RawMig::Name(n) => MigSpec {
                            profile: n.clone(),
                            load: 0.0,
                        },
                        RawMig::Full { profile, load } => MigSpec {
                            profile: profile.clone(),
                            load: *load,
                        },
                    })
                    .collect();
                let names: Vec<String> = specs.iter().map(|s| s.profile.clone()).collect();
                model::place_layout(model, &names).map_err(|m| err(Some(mig_at), m))?;
                if let Some(bad) = specs.iter().find(|s| !(0.0..=100.0).contains(&s.load)) {
                    return Err(err(
                        Some(mig_at),
                        format!("MIG instance load {} is outside 0..=100", bad.load),
                    ));
                }
                Some(specs)
            }
        };
        let mut processes = Vec::new();
        for p in &g.processes {
            if let Some(i) = p.mig_instance {
                let n = mig.as_ref().map(|m| m.len()).unwrap_or(0);
                if i >= n {
                    return Err(err(
                        Some(at),
                        format!("process `{}` names mig_instance {i}, but this GPU has {n} MIG instances", p.name),
                    ));
                }
            } else if mig.is_some() {
                return Err(err(
                    Some(at),
                    format!(
                        "process `{}` runs on a MIG-enabled GPU and must name its mig_instance",
                        p.name
                    ),
                ));
            }
            let declared = [
                p.sm_percent,
                p.memory_percent,
                p.encoder_percent,
                p.decoder_percent,
            ];
            let usage = match declared.iter().any(Option::is_some) {
                true => Some(
                    crate::usage::ProcUse::default()
                        .with(
                            p.sm_percent,
                            p.memory_percent,
                            p.encoder_percent,
                            p.decoder_percent,
                        )
                        .map_err(|m| err(Some(at), format!("process `{}`: {m}", p.name)))?,
                ),
                false => None,
            };
            processes.push(ProcSpec {
                pid: p.pid,
                name: p.name.clone(),
                memory_mib: p.memory_mib,
                kind: p.kind,
                mig_instance: p.mig_instance,
                usage,
            });
        }
        if g.mig_pending.is_some() && !model.mig_capable() {
            return Err(err(
                Some(at),
                format!("{} does not support MIG (mig_pending)", model.name),
            ));
        }
        if g.display && !model.display_capable {
            return Err(err(
                Some(at),
                format!("{} has no display output", model.name),
            ));
        }
        if gpus.len().saturating_add(g.count) > MAX_GPUS {
            return Err(err(
                Some(at),
                format!(
                    "count {} makes more than {MAX_GPUS} GPUs, more than any node holds",
                    g.count
                ),
            ));
        }
        for _ in 0..g.count {
            gpus.push(GpuSpec {
                model,
                load: g.load,
                mig: mig.clone(),
                processes: processes.clone(),
                display: g.display,
                persistence: g.persistence.unwrap_or(!model.display_capable),
                mig_pending: g.mig_pending,
                mps: g.mps,
            });
        }
    }
    if gpus.is_empty() {
        return Err(err(
            None,
            "the scenario defines no GPU ([[gpu]] tables)".into(),
        ));
    }
    if gpus.len() > 255 {
        return Err(err(
            None,
            format!("{} GPUs; at most 255 are supported", gpus.len()),
        ));
    }
    for entry in &raw.timeline {
        let offset = entry.span().start;
        let mut table = entry.get_ref().clone();
        let at = match table.remove("at") {
            Some(toml::Value::Float(f)) => f,
            Some(toml::Value::Integer(i)) => i as f64,
            Some(_) => return Err(err(Some(offset), "`at` must be a number of seconds".into())),
            None => {
                return Err(err(
                    Some(offset),
                    "timeline entry without `at` (seconds after nvmlInit)".into(),
                ))
            }
        };
        if !(at >= 0.0 && at.is_finite()) {
            return Err(err(
                Some(offset),
                format!("`at` = {at} must be a non-negative number of seconds"),
            ));
        }
        let fault: Fault = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                err(Some(offset), format!("bad timeline entry: {}", e.message()))
            })?;
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
    let driver = match &raw.driver {
        Some(d) => {
            crate::driver::Personality::parse(d.get_ref())
                .map_err(|m| err(Some(d.span().start), m))?;
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
    Ok(Scenario {
        name,
        gpus,
        timeline,
        driver,
        privileged: raw.privileged.unwrap_or(base_privileged),
        denied,
        host_pid_namespace: raw.host_pid_namespace.unwrap_or(true),
        gpm_absent_engines_unsupported: match &raw.gpm_absent_engines {
            None => false,
            Some(v) => match v.get_ref().as_str() {
                "zero" => false,
                "not_supported" => true,
                other => {
                    return Err(err(
                        Some(v.span().start),
                        format!(
                        "gpm_absent_engines = \"{other}\": expected \"zero\" or \"not_supported\""
                    ),
                    ))
                }
            },
        },
    })
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
        // A device that never ends.
        let e = load("/dev/zero").unwrap_err();
        assert!(e.message.contains("larger than"), "{e}");
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
        let text = "name = \"x\"\n\n[[gpu]]\nmodel = \"h200\"\n";
        let e = parse(text, "x.toml", "x").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(
            e.to_string()
                .starts_with("x.toml:4: unknown GPU model `h200`"),
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
}
