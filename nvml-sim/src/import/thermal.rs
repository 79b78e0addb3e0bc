//! Thermal and fans (`ffi/thermal.rs`): the thresholds in degrees and as
//! T.Limit margins and the fan count (the board's), the temperatures and
//! the fan speed now (pinned readings).

use super::gpu::{Facts, Out};
use super::read::{Gpu, Printed};
use super::ParseError;
use crate::model::ThermalSection;
use crate::schema::OneOrMany;
use crate::value::Val;

pub fn board(g: &Gpu, _facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let mut t = ThermalSection::default();
    let degrees = |path: &str| -> Result<Val<u32>, ParseError> {
        Ok(match g.number(&[path])? {
            Some(Printed::Num(x)) if x >= 0.0 => Val::Is(g.fits(&[path], x)?),
            // Absent from an older DTD means NVML was not asked: also N/A
            // for the simulated board, so a base's value does not show.
            _ => Val::NotSupported,
        })
    };
    let margin = |path: &str| -> Result<Val<i32>, ParseError> {
        Ok(match g.number(&[path])? {
            Some(Printed::Num(x)) => Val::Is(g.fits(&[path], x)?),
            _ => Val::NotSupported,
        })
    };
    t.shutdown_c = Some(degrees("temperature/gpu_temp_max_threshold")?);
    t.slowdown_c = Some(degrees("temperature/gpu_temp_slow_threshold")?);
    t.gpu_max_c = Some(degrees("temperature/gpu_temp_max_gpu_threshold")?);
    t.memory_max_c = Some(degrees("temperature/gpu_temp_max_mem_threshold")?);
    t.shutdown_tlimit_c = Some(margin("temperature/gpu_temp_max_tlimit_threshold")?);
    t.slowdown_tlimit_c = Some(margin("temperature/gpu_temp_slow_tlimit_threshold")?);
    t.gpu_max_tlimit_c = Some(margin("temperature/gpu_temp_max_gpu_tlimit_threshold")?);
    t.memory_max_tlimit_c = Some(margin("temperature/gpu_temp_max_mem_tlimit_threshold")?);
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
