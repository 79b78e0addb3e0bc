//! A scenario file's text parsed into its types, and the types checked
//! into a [`Scenario`], step by step.

use super::absent::absent_functions;
use super::boards::Boards;
use super::identities::resolve_identities;
use super::{resolve, IdentityGiven, Place, Scenario, ScenarioError, Site, BUILTINS};
use crate::schema::ScenarioFile;

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
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
pub(super) fn build(
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
    let topology = super::topology::build(raw.topology.as_ref(), base_topology, gpus.len(), &err)?;
    Ok(Scenario {
        topology,
        name,
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
