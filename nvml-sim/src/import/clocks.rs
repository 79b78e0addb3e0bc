//! Clocks and performance (`ffi/clocks.rs`): the maximum clocks (the
//! board's), the clocks now and the performance state (pinned readings).

use super::out::{Facts, Out};
use super::read::{fail, Got, Gpu, Printed};
use super::ParseError;
use crate::model::ClocksSection;
use crate::value::Val;

pub fn board(g: &Gpu, facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let max = |n: &str| g.number(&[&format!("max_clocks/{n}")]);
    let whole = |n: &str, v: f64| g.fits::<u32>(&[&format!("max_clocks/{n}")], v);
    let mut clocks = ClocksSection::default();
    match (
        max("graphics_clock")?.and_then(Printed::num),
        max("mem_clock")?.and_then(Printed::num),
    ) {
        (Some(gr), Some(mem)) => {
            clocks.max_graphics_mhz = Some(whole("graphics_clock", gr)?);
            clocks.max_memory_mhz = Some(whole("mem_clock", mem)?);
            if let Some(v) = max("sm_clock")?.and_then(Printed::num) {
                clocks.max_sm_mhz = Some(whole("sm_clock", v)?);
            }
            if let Some(v) = max("video_clock")?.and_then(Printed::num) {
                clocks.max_video_mhz = Some(whole("video_clock", v)?);
            }
        }
        _ => {
            if facts.base.is_none() {
                // A board to describe: the clocks it runs at stand in for
                // the maxima NVML does not report.
                let now = |n: &str| {
                    g.number(&[&format!("clocks/{n}")])
                        .ok()
                        .flatten()
                        .and_then(Printed::num)
                };
                clocks.max_graphics_mhz = Some(now("graphics_clock").unwrap_or(1000.0) as u32);
                clocks.max_memory_mhz = Some(now("mem_clock").unwrap_or(1000.0) as u32);
            }
            out.not_supported(&["nvmlDeviceGetMaxClockInfo"]);
        }
    }
    if clocks.max_graphics_mhz.is_some() {
        out.board.clocks = Some(clocks);
    }
    Ok(())
}

pub fn readings(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    let r = &mut out.readings;
    r.graphics_clock_mhz = g.rounded(&["clocks/graphics_clock"])?;
    r.sm_clock_mhz = g.rounded(&["clocks/sm_clock"])?;
    r.memory_clock_mhz = g.rounded(&["clocks/mem_clock"])?;
    r.video_clock_mhz = g.rounded(&["clocks/video_clock"])?;
    r.pstate = match g.at(&["performance_state"]) {
        Got::Is(n) => Some(Val::Is(
            n.text
                .trim()
                .strip_prefix('P')
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|p| *p <= 15)
                .ok_or_else(|| fail(n, format!("performance state `{}` is not P0..P15", n.text)))?,
        )),
        Got::Na => Some(Val::NotSupported),
        Got::Absent => None,
    };
    Ok(())
}
