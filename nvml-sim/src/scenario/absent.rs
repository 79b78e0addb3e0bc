//! The exports a scenario's driver lacks (`absent_functions`).

use super::ScenarioError;

/// `absent_functions`: the exports a driver branch lacks, none of them
/// one every client calls.
pub(super) fn absent_functions(
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
