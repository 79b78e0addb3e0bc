//! A capture of a real host replayed as a scenario: built from the
//! importer's types as a file's are, each error placed on the capture's
//! line (a GPU's `<gpu>`, a board's first GPU).

use super::build::build;
use super::{Scenario, ScenarioError, Site};
use crate::import;
use std::collections::HashMap;

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
