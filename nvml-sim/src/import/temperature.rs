//! Temperatures and fans (`ffi/temperature.rs`, `ffi/fan.rs`): the
//! thresholds in degrees and as T.Limit margins and the fan count (the
//! board's thermal section), the temperatures and the fan speed now (pinned
//! readings). Fans are read here with the board's thermal section they
//! belong to.

use super::out::{Facts, Out};
use super::read::{Gpu, Printed};
use super::ParseError;
use crate::model::ThermalSection;
use crate::schema::OneOrMany;
use crate::value::Val;

/// The T.Limit thresholds, which recent drivers print in place of the
/// absolute ones.
const TLIMIT: [&str; 4] = [
    "temperature/gpu_temp_max_tlimit_threshold",
    "temperature/gpu_temp_slow_tlimit_threshold",
    "temperature/gpu_temp_max_gpu_tlimit_threshold",
    "temperature/gpu_temp_max_mem_tlimit_threshold",
];

pub fn board(g: &Gpu, facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let mut t = ThermalSection::default();
    // nvidia-smi prints a board's thresholds either in degrees or, where
    // the board has T.Limit thresholds, as those alone; NVML still answers
    // the degrees then (the H200 at 580.159.04 answered shutdown 95,
    // slowdown 89, GPU max 87 and memory max 95 C while nvidia-smi printed
    // margins only: tests/device/h200-580.159.04/capture.toml). So beside
    // printed margins an absolute threshold is what nvidia-smi never
    // prints: the base board's, if any.
    let margins_printed = TLIMIT.iter().any(|p| g.first(&[p]).is_some());
    let degrees = |path: &str| -> Result<Option<Val<u32>>, ParseError> {
        Ok(match g.number(&[path])? {
            Some(Printed::Num(x)) if x >= 0.0 => Some(Val::Is(g.fits(&[path], x)?)),
            None if margins_printed && facts.base.is_some() => None,
            // Absent from an older DTD means NVML was not asked: also N/A
            // for the simulated board, so a base's value does not show.
            _ => Some(Val::NotSupported),
        })
    };
    let margin = |path: &str| -> Result<Val<i32>, ParseError> {
        Ok(match g.number(&[path])? {
            Some(Printed::Num(x)) => Val::Is(g.fits(&[path], x)?),
            _ => Val::NotSupported,
        })
    };
    t.shutdown_c = degrees("temperature/gpu_temp_max_threshold")?;
    t.slowdown_c = degrees("temperature/gpu_temp_slow_threshold")?;
    t.gpu_max_c = degrees("temperature/gpu_temp_max_gpu_threshold")?;
    t.memory_max_c = degrees("temperature/gpu_temp_max_mem_threshold")?;
    t.shutdown_tlimit_c = Some(margin(TLIMIT[0])?);
    t.slowdown_tlimit_c = Some(margin(TLIMIT[1])?);
    t.gpu_max_tlimit_c = Some(margin(TLIMIT[2])?);
    t.memory_max_tlimit_c = Some(margin(TLIMIT[3])?);
    let has_tlimit = [
        &t.shutdown_tlimit_c,
        &t.slowdown_tlimit_c,
        &t.gpu_max_tlimit_c,
        &t.memory_max_tlimit_c,
    ]
    .iter()
    .any(|m| matches!(m, Some(Val::Is(_))))
        || g.number(&["temperature/gpu_temp_tlimit"])?
            .and_then(Printed::num)
            .is_some();
    t.tlimit = Some(has_tlimit);
    t.fans = Some(u32::from(matches!(
        g.number(&["fan_speed"])?,
        Some(Printed::Num(_))
    )));
    out.board.thermal = Some(t);
    Ok(())
}

pub fn readings(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    let r = &mut out.readings;
    r.temperature_c = g.rounded(&["temperature/gpu_temp"])?;
    r.memory_temperature_c = g.rounded(&["temperature/memory_temp"])?;
    r.tlimit_c = g.rounded(&["temperature/gpu_temp_tlimit"])?;
    r.fan_percent = g.rounded::<u32>(&["fan_speed"])?.map(|v| match v {
        Val::Is(p) => Val::Is(OneOrMany::One(p)),
        Val::NotSupported => Val::NotSupported,
    });
    Ok(())
}
