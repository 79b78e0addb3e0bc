//! Which families a GPU's poll reads: every family switched on, each at
//! its own interval where the selection file (`--config.file`,
//! `intervals:`) gives one. ECC counters and retired pages change in
//! weeks and may be read every minute; utilization may be read every
//! second while the rest keeps `--collect.interval`.
//!
//! The workers poll every `tick`: `--collect.interval`, or the shortest
//! interval the file gives when that is shorter. A family is read on every
//! poll whose number is a multiple of its interval in ticks; on the polls
//! in between its last readings are carried forward, so its series never
//! blink out between two reads. The tick is fixed when the exporter
//! starts; the rest of a schedule can be swapped at any time (a reload of
//! the selection file), and the next poll follows the new one.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::family::{Family, FamilySet};

/// Families that may have an interval of their own: those whose readings
/// stand alone. The others are read on every poll: MIG layout and process
/// lists (workload attribution and its accounting follow processes from
/// poll to poll), and the detail switches, which are read with their
/// parent. XIDs are events, not polls.
pub const SCHEDULABLE: &[Family] = &[
    Family::Utilization,
    Family::Gpm,
    Family::Memory,
    Family::Temperature,
    Family::Fan,
    Family::Power,
    Family::Clocks,
    Family::Throttle,
    Family::Pcie,
    Family::Mode,
    Family::Ecc,
    Family::Retirement,
    Family::Nvlink,
    Family::Fabric,
];

/// What the workers sample: the families switched on, how often they
/// poll, and the families read less often than every poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    families: FamilySet,
    tick: Duration,
    /// (family, read every this many polls), for every family read less
    /// often than every poll. Empty in the common case.
    every: Vec<(Family, u64)>,
}

/// The schedule in force, swapped whole on a reload.
pub type SharedSchedule = Arc<ArcSwap<Schedule>>;

impl Schedule {
    /// Every family of `families` on every poll, `tick` apart.
    pub fn uniform(families: FamilySet, tick: Duration) -> Schedule {
        Schedule {
            families,
            tick,
            every: Vec::new(),
        }
    }

    /// [`Schedule::uniform`], ready to share with the poller.
    pub fn shared(families: FamilySet, tick: Duration) -> SharedSchedule {
        Arc::new(ArcSwap::from_pointee(Schedule::uniform(families, tick)))
    }

    /// `families` polled every `tick`: those in `intervals` at theirs,
    /// every other one at `base` (`--collect.interval`). Intervals are
    /// rounded to whole ticks, at least one.
    pub fn new(
        families: FamilySet,
        base: Duration,
        tick: Duration,
        intervals: &[(Family, Duration)],
    ) -> Schedule {
        let ticks = |d: Duration| -> u64 {
            let n = (d.as_secs_f64() / tick.as_secs_f64().max(1e-9)).round();
            (n as u64).max(1)
        };
        let every = SCHEDULABLE
            .iter()
            .filter(|f| families.contains(**f))
            .map(|&f| {
                let d = intervals
                    .iter()
                    .find(|(g, _)| *g == f)
                    .map_or(base, |(_, d)| *d);
                (f, ticks(d))
            })
            .filter(|(_, n)| *n > 1)
            .collect();
        Schedule {
            families,
            tick,
            every,
        }
    }

    /// How long workers wait between polls.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The families switched on.
    pub fn families(&self) -> &FamilySet {
        &self.families
    }

    /// Polls between two reads of `family` (1: every poll).
    pub fn every(&self, family: Family) -> u64 {
        self.every
            .iter()
            .find(|(f, _)| *f == family)
            .map_or(1, |(_, n)| *n)
    }

    /// Whether some family skips polls (its readings are then carried).
    pub fn skips(&self) -> bool {
        !self.every.is_empty()
    }

    /// The families poll number `poll` reads. Poll 0, a worker's first,
    /// reads every family, so every series is there from the start.
    pub fn due(&self, poll: u64) -> FamilySet {
        let mut due = self.families.clone();
        for &(f, n) in &self.every {
            if !poll.is_multiple_of(n) {
                due.set(f, false);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(s: &Schedule, poll: u64, f: Family) -> bool {
        s.due(poll).contains(f)
    }

    #[test]
    fn a_slow_family_is_read_on_every_nth_poll_and_the_first() {
        let s = Schedule::new(
            FamilySet::defaults(),
            Duration::from_secs(5),
            Duration::from_secs(5),
            &[(Family::Ecc, Duration::from_secs(60))],
        );
        assert_eq!(s.every(Family::Ecc), 12);
        assert_eq!(s.every(Family::Power), 1);
        assert!(on(&s, 0, Family::Ecc) && on(&s, 12, Family::Ecc) && on(&s, 24, Family::Ecc));
        assert!((1..12).all(|p| !on(&s, p, Family::Ecc) && on(&s, p, Family::Power)));
        assert!(s.skips());
    }

    #[test]
    fn a_fast_family_shortens_the_tick_and_the_rest_keep_the_base_interval() {
        let s = Schedule::new(
            FamilySet::defaults(),
            Duration::from_secs(5),
            Duration::from_secs(1),
            &[(Family::Utilization, Duration::from_secs(1))],
        );
        assert_eq!(s.tick(), Duration::from_secs(1));
        assert_eq!(s.every(Family::Utilization), 1);
        assert_eq!(s.every(Family::Memory), 5);
        // Not schedulable: every poll.
        assert_eq!(s.every(Family::Processes), 1);
        assert!(on(&s, 3, Family::Processes) && !on(&s, 3, Family::Memory));
    }

    #[test]
    fn uniform_reads_everything_every_poll_and_off_families_never() {
        let mut families = FamilySet::defaults();
        families.set(Family::Fan, false);
        let s = Schedule::uniform(families.clone(), Duration::from_secs(5));
        assert!(!s.skips());
        assert_eq!(s.due(7), families);
        assert!(!on(&s, 0, Family::Fan));
        // Intervals are rounded to whole ticks, at least one.
        let r = Schedule::new(
            families,
            Duration::from_secs(5),
            Duration::from_secs(5),
            &[
                (Family::Ecc, Duration::from_secs(7)),
                (Family::Power, Duration::from_secs(1)),
            ],
        );
        assert_eq!((r.every(Family::Ecc), r.every(Family::Power)), (1, 1));
    }
}
