//! Finding a scenario by the name `NVML_SIM_SCENARIO` gives: a built-in,
//! a scenario file, or a capture of a real host.

use super::build::parse;
use super::capture::from_capture;
use super::{Scenario, ScenarioError, BUILTINS};
use crate::import;
use std::path::Path;

/// Scenario files larger than this are refused before parsing. The largest
/// built-in is 15 KB; a limit keeps a wrong path (`/dev/zero`, a log file, a
/// disk image) from being read into memory without end inside `nvmlInit`.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

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
