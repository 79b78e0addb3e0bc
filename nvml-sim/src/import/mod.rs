//! Captures of real hosts as scenarios: `nvidia-smi -q -x` (XML, every DTD
//! from v7 to v13) and `nvidia-smi -q` (text) read into one element tree
//! (`xml.rs`, `text.rs`), and that tree written as the scenario that
//! replays the host (`host.rs`, each `<gpu>` by `gpu.rs` through one file
//! per NVML group, values read by `read.rs`), in the types of
//! `crate::schema`. `nvml-sim import FILE` prints the scenario; a scenario
//! path that holds a capture (`--simulate host.xml`) loads through the same
//! code.
//!
//! A malformed capture is refused whole, with the line and the element:
//! never a fleet with the GPUs that happened to read.

mod clocks;
mod ecc;
mod fabric;
mod file;
mod gpu;
mod host;
mod info;
mod memory;
mod mig;
mod mode;
mod out;
mod pcie;
mod power;
mod processes;
mod read;
mod retirement;
mod temperature;
mod text;
mod throttle;
mod utilization;
mod xml;

pub use file::{decode, looks_like, looks_like_toml, read, MAX_CAPTURE_BYTES};

/// One element: its name, attributes, text (trimmed), children and the
/// line it starts on. Text captures are read into the same shape, their
/// labels named as the XML names them.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub text: String,
    pub children: Vec<Node>,
    pub line: usize,
}

impl Node {
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }

    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The element at `a/b/c` below this one.
    pub fn path(&self, path: &str) -> Option<&Node> {
        path.split('/').try_fold(self, |n, part| n.child(part))
    }

    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Deeper than any capture (nvidia-smi nests 6 levels): a bound on both
/// readers' recursion, so no input can exhaust the stack.
const MAX_DEPTH: usize = 64;

pub use crate::error::ParseError;

/// The two capture formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `nvidia-smi -q -x`
    Xml,
    /// `nvidia-smi -q`
    Text,
}

/// Which capture format `text` is, from its content; `None`: neither (a
/// scenario, or something else).
pub fn detect(text: &str) -> Option<Format> {
    let head = text.trim_start_matches('\u{feff}').trim_start();
    if head.starts_with("<?xml")
        || head.starts_with("<!DOCTYPE")
        || head.starts_with("<nvidia_smi_log")
    {
        return Some(Format::Xml);
    }
    if text::looks_like(text) {
        return Some(Format::Text);
    }
    // An XML capture after a comment (a license header), or one cut at its
    // start (its reader then says where it stops making sense).
    if !file::looks_like_toml(text)
        && text
            .lines()
            .any(|l| l.trim_start().starts_with("<nvidia_smi_log"))
    {
        return Some(Format::Xml);
    }
    None
}

/// What an import changed or could not carry, at the capture's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A capture read as the scenario that replays it, typed: what the
/// scenario loader builds the fleet from (`scenario::from_import`), never
/// written as text and read back.
#[derive(Debug)]
pub struct Capture {
    pub format: Format,
    /// The scenario.
    pub file: crate::schema::ScenarioFile,
    /// What the import changed or could not carry.
    pub notes: Vec<Note>,
    /// The line each `<gpu>` starts on in the capture, in the order of the
    /// scenario's `[[gpu]]` tables.
    pub gpu_lines: Vec<usize>,
    /// The line `<nvidia_smi_log>` starts on.
    pub root_line: usize,
}

impl Capture {
    /// The scenario as the text `nvml-sim import` prints for a person to
    /// edit and keep: a header, the notes as comments, the TOML.
    pub fn write(&self) -> Result<Imported, ParseError> {
        let body = self.file.to_toml().map_err(|e| ParseError {
            line: self.root_line,
            element: Some("nvidia_smi_log".into()),
            message: format!("cannot write the scenario: {e}"),
        })?;
        let mut out = String::from("# A copy of a real host, written by `nvml-sim import` from an nvidia-smi capture\n# (nvml-sim/README.md, \"A copy of a real host\"). Edit and keep it.\n");
        for n in &self.notes {
            out.push_str(&format!("# note: {n}\n"));
        }
        out.push('\n');
        out.push_str(&body);
        Ok(Imported {
            format: self.format,
            scenario: out,
            notes: self.notes.iter().map(ToString::to_string).collect(),
            gpus: self.gpu_lines.len(),
            gpu_lines: self.gpu_lines.clone(),
        })
    }
}

/// A capture as the scenario text `nvml-sim import` prints.
#[derive(Debug, Clone)]
pub struct Imported {
    pub format: Format,
    /// The scenario, TOML.
    pub scenario: String,
    /// What the import changed or could not carry, as printed (`line N:
    /// ...`).
    pub notes: Vec<String>,
    pub gpus: usize,
    /// The line each `<gpu>` starts on in the capture, in the order of the
    /// scenario's `[[gpu]]` tables.
    pub gpu_lines: Vec<usize>,
}

/// Reads a capture (either format, recognised from its content) into the
/// scenario that replays it, named `name`.
pub fn capture(text: &str, name: &str) -> Result<Capture, ParseError> {
    let format = detect(text).ok_or_else(|| ParseError {
        line: 1,
        element: None,
        message: "neither `nvidia-smi -q -x` XML nor `nvidia-smi -q` text".into(),
    })?;
    let root = match format {
        Format::Xml => xml::parse(text)?,
        Format::Text => text::parse(text)?,
    };
    if root.name != "nvidia_smi_log" {
        return Err(ParseError {
            line: root.line,
            element: Some(root.name.clone()),
            message: "the root element is not <nvidia_smi_log>: not an nvidia-smi capture".into(),
        });
    }
    host::to_scenario(&root, name, format)
}

/// Reads a capture and writes the scenario that replays it, named `name`,
/// as `nvml-sim import` prints it.
pub fn import(text: &str, name: &str) -> Result<Imported, ParseError> {
    capture(text, name)?.write()
}

/// Parses a capture into its element tree only (for tests and fuzzing).
pub fn parse_tree(text: &str) -> Result<Node, ParseError> {
    match detect(text) {
        Some(Format::Text) => text::parse(text),
        _ => xml::parse(text),
    }
}
