//! Clocks, maximum clocks and performance state (`nvidia_gpu_clock_hertz`,
//! `nvidia_gpu_clock_max_hertz`, `nvidia_gpu_performance_state`), and the
//! applications clocks (`nvidia_gpu_clock_applications_hertz`, family
//! `clocks.applications`). Maximum clocks are cached; applications clocks,
//! which only an operator's `nvidia-smi -ac` moves, are re-read every
//! `SLOW_REFRESH_POLLS` polls.

use nvml_wrapper::enum_wrappers::device::{Clock as NvClock, ClockId, PerformanceState};

use super::super::calls::{Batch, Cached, SLOW_REFRESH_POLLS};
use super::super::units::mhz_to_hertz;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{Clock, GpuReadings};

#[derive(Default)]
pub struct State {
    max: Cached<Vec<(Clock, f64)>>,
    applications: Cached<Vec<(Clock, f64)>>,
}

const KINDS: [(NvClock, Clock); 4] = [
    (NvClock::Graphics, Clock::Graphics),
    (NvClock::SM, Clock::Sm),
    (NvClock::Memory, Clock::Memory),
    (NvClock::Video, Clock::Video),
];

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, applications: bool, r: &mut GpuReadings) {
        let fam = Family::Clocks.name();
        let (d, c) = (g.device, &mut *g.calls);
        for (nv, ours) in KINDS {
            if let Some(v) = c.run(fam, || d.clock_info(nv)).value() {
                r.clocks_hertz.push((ours, mhz_to_hertz(v)));
            }
        }
        r.max_clocks_hertz = self
            .max
            .get(g.poll, || {
                let mut batch = Batch::new();
                for (nv, ours) in KINDS {
                    if let Some(v) = batch.take(c.run(fam, || d.max_clock_info(nv))) {
                        batch.push((ours, mhz_to_hertz(v)));
                    }
                }
                batch.finish()
            })
            .unwrap_or_default();
        r.performance_state = c
            .run(fam, || d.performance_state())
            .value()
            .and_then(pstate_number);
        if applications {
            r.applications_clocks_hertz = self
                .applications
                .get_every(g.poll, SLOW_REFRESH_POLLS, false, || {
                    // nvmlDeviceGetClock with NVML_CLOCK_ID_APP_CLOCK_TARGET:
                    // nvml.h names it the successor of
                    // nvmlDeviceGetApplicationsClock, which R590 deprecates.
                    let mut batch = Batch::new();
                    for (nv, ours) in [(NvClock::SM, Clock::Sm), (NvClock::Memory, Clock::Memory)] {
                        if let Some(v) =
                            batch.take(c.run(fam, || d.clock(nv, ClockId::TargetAppClock)))
                        {
                            batch.push((ours, mhz_to_hertz(v)));
                        }
                    }
                    batch.finish()
                })
                .unwrap_or_default();
        }
    }
}

fn pstate_number(p: PerformanceState) -> Option<u32> {
    use PerformanceState as P;
    Some(match p {
        P::Zero => 0,
        P::One => 1,
        P::Two => 2,
        P::Three => 3,
        P::Four => 4,
        P::Five => 5,
        P::Six => 6,
        P::Seven => 7,
        P::Eight => 8,
        P::Nine => 9,
        P::Ten => 10,
        P::Eleven => 11,
        P::Twelve => 12,
        P::Thirteen => 13,
        P::Fourteen => 14,
        P::Fifteen => 15,
        P::Unknown => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pstates_map_to_numbers() {
        assert_eq!(pstate_number(PerformanceState::Zero), Some(0));
        assert_eq!(pstate_number(PerformanceState::Twelve), Some(12));
        assert_eq!(pstate_number(PerformanceState::Unknown), None);
    }
}
