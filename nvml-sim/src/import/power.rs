//! Power (`ffi/power.rs`): the GPU's limits (v12+ `gpu_power_readings`,
//! older `power_readings`) and the module's (Grace superchips), and the
//! draw of each scope (pinned readings).

use super::out::{Facts, Out};
use super::read::{is_na, Gpu, Printed};
use super::ParseError;
use crate::model::{PowerSection, ScopeSection};
use crate::schema::at;
use crate::value::Val;

/// A GPU limit by its names in the DTDs (R610 nests the limits under `GPU
/// Ceiling Power Limit`).
fn limit(g: &Gpu, names: &[&str]) -> Result<Option<Printed>, ParseError> {
    let paths: Vec<String> = names
        .iter()
        .flat_map(|n| {
            [
                format!("gpu_power_readings/{n}"),
                format!("gpu_power_readings/gpu_ceiling_power_limit/{n}"),
                format!("power_readings/{n}"),
            ]
        })
        .collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    g.number(&paths)
}

pub fn limits(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    let default = limit(g, &["default_power_limit"])?;
    let min = limit(g, &["min_power_limit"])?;
    let max = limit(g, &["max_power_limit"])?;
    let enforced = limit(g, &["current_power_limit", "enforced_power_limit"])?;
    let requested = limit(g, &["requested_power_limit", "power_limit"])?;
    let mut power = PowerSection::default();
    let default_w = default
        .and_then(Printed::num)
        .or_else(|| requested.and_then(Printed::num))
        .or_else(|| enforced.and_then(Printed::num));
    match default_w {
        Some(d) => {
            power.default_limit_w = Some(d);
            let lo = min.and_then(Printed::num).unwrap_or(d);
            let hi = max.and_then(Printed::num).unwrap_or(d);
            let set_w = requested
                .and_then(Printed::num)
                .or(enforced.and_then(Printed::num));
            let lo = set_w.map_or(lo, |s| lo.min(s));
            let hi = set_w.map_or(hi, |s| hi.max(s));
            power.min_limit_w = Some(lo.min(d));
            power.max_limit_w = Some(hi.max(d));
            out.gpu.power_limit_w = set_w.map(at);
            if let (Some(Printed::Num(e)), Some(Printed::Num(r))) = (enforced, requested) {
                if (e - r).abs() > 0.005 {
                    out.gpu.enforced_power_limit_w = Some(at(e));
                }
            }
            for (v, call) in [
                (min, "nvmlDeviceGetPowerManagementLimitConstraints"),
                (max, "nvmlDeviceGetPowerManagementLimitConstraints"),
                (default, "nvmlDeviceGetPowerManagementDefaultLimit"),
                (enforced, "nvmlDeviceGetEnforcedPowerLimit"),
                (requested, "nvmlDeviceGetPowerManagementLimit"),
            ] {
                if v == Some(Printed::Na) {
                    out.not_supported(&[call]);
                }
            }
        }
        None => {
            // No limit printed: NVML answers NOT_SUPPORTED to every limit.
            power.default_limit_w = Some(100.0);
            out.not_supported(&[
                "nvmlDeviceGetPowerManagementLimit",
                "nvmlDeviceGetPowerManagementDefaultLimit",
                "nvmlDeviceGetPowerManagementLimitConstraints",
                "nvmlDeviceGetEnforcedPowerLimit",
            ]);
        }
    }
    let module = |n: &str| g.number(&[&format!("module_power_readings/{n}")]);
    if let Some(Printed::Num(d)) = module("default_power_limit")? {
        power.module = Some(ScopeSection {
            default_limit_w: Some(d),
            min_limit_w: module("min_power_limit")?.and_then(Printed::num),
            max_limit_w: module("max_power_limit")?.and_then(Printed::num),
            ..ScopeSection::default()
        });
    }
    out.board.power = Some(power);
    Ok(())
}

/// NVML's power usage: the 1 s average where the driver prints one, else
/// the instantaneous draw, else (older DTDs) `power_draw`.
fn draw(g: &Gpu, sections: &[&str]) -> Result<Option<Printed>, ParseError> {
    let mut seen = None;
    for s in sections {
        for name in ["average_power_draw", "instant_power_draw", "power_draw"] {
            match g.number(&[&format!("{s}/{name}")])? {
                Some(v @ Printed::Num(_)) => return Ok(Some(v)),
                Some(v) => seen = seen.or(Some(v)),
                None => {}
            }
        }
    }
    Ok(seen)
}

fn watts(p: Printed) -> Val<f64> {
    p.num().map_or(Val::NotSupported, Val::Is)
}

pub fn readings(g: &Gpu, facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let r = &mut out.readings;
    r.power_w = draw(g, &["gpu_power_readings", "power_readings"])?.map(watts);
    if let Some(v @ Printed::Num(_)) = draw(g, &["module_power_readings"])? {
        r.module_power_w = Some(watts(v));
    }
    if let Some(v @ Printed::Num(_)) = draw(g, &["gpu_memory_power_readings"])? {
        r.memory_power_w = Some(watts(v));
    }
    r.power_smoothing_lifetime_percent = smoothing_lifetime(g, facts)?;
    Ok(())
}

/// The power smoothing circuitry's lifetime remaining, on a board that has
/// the circuitry: "N/A" where the capture collapses the section to one
/// string (every real B200, GB200 and GB300 capture prints "Insufficient
/// Permissions"), so the board's default lifetime is not served for it.
fn smoothing_lifetime(g: &Gpu, facts: &Facts) -> Result<Option<Val<f64>>, ParseError> {
    let smoothing = facts
        .base
        .as_ref()
        .and_then(|(_, b)| b.power_smoothing)
        .unwrap_or(false);
    let Some(section) = g.node.child("power_smoothing").filter(|_| smoothing) else {
        return Ok(None);
    };
    if section.children.is_empty() {
        return Ok(is_na(&section.text).then_some(Val::NotSupported));
    }
    // No capture in tests/corpus prints the section's rows: a row that
    // names the lifetime is read, nothing else is guessed.
    let Some(row) = section
        .children
        .iter()
        .find(|c| c.name.contains("lifetime"))
    else {
        return Ok(None);
    };
    let path = format!("power_smoothing/{}", row.name);
    Ok(g.number(&[&path])?
        .map(|p| p.num().map_or(Val::NotSupported, Val::Is)))
}
