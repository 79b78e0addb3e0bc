//! Stuck-call detection. A blocked driver call cannot be cancelled, so the
//! worker announces each call before making it, and the publisher compares
//! the announcement's age with the deadline. No thread is ever spawned to
//! replace a stuck one: the GPU is reported hung until the call returns.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::snapshot::StuckCall;

#[derive(Debug, Clone, Copy)]
struct InFlight {
    family: &'static str,
    started: Instant,
    since: SystemTime,
}

#[derive(Debug, Default)]
pub struct CallTracker {
    current: Mutex<Option<InFlight>>,
}

impl CallTracker {
    pub fn enter(&self, family: &'static str) {
        self.enter_at(family, Instant::now(), SystemTime::now());
    }

    pub fn enter_at(&self, family: &'static str, started: Instant, since: SystemTime) {
        *lock(&self.current) = Some(InFlight {
            family,
            started,
            since,
        });
    }

    pub fn exit(&self) {
        *lock(&self.current) = None;
    }

    /// The call in flight, when it has been blocked for longer than
    /// `deadline` at `now`.
    pub fn stuck(&self, now: Instant, deadline: Duration) -> Option<StuckCall> {
        let current = *lock(&self.current);
        current
            .filter(|c| now.saturating_duration_since(c.started) > deadline)
            .map(|c| StuckCall {
                family: c.family,
                since: c.since,
            })
    }
}

/// A poisoned lock only means another thread panicked while holding it;
/// the data (plain values) is still usable.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_stuck_only_past_the_deadline() {
        let t = CallTracker::default();
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        assert!(t.stuck(t0, Duration::from_secs(5)).is_none());

        t.enter_at("power", t0, wall);
        assert!(t
            .stuck(t0 + Duration::from_secs(5), Duration::from_secs(5))
            .is_none());
        let stuck = t
            .stuck(t0 + Duration::from_secs(6), Duration::from_secs(5))
            .unwrap();
        assert_eq!(stuck.family, "power");
        assert_eq!(stuck.since, wall);

        t.exit();
        assert!(t
            .stuck(t0 + Duration::from_secs(60), Duration::from_secs(5))
            .is_none());
    }

    #[test]
    fn a_new_call_restarts_the_clock() {
        let t = CallTracker::default();
        let t0 = Instant::now();
        t.enter_at("ecc", t0, SystemTime::now());
        t.enter_at("nvlink", t0 + Duration::from_secs(10), SystemTime::now());
        assert!(t
            .stuck(t0 + Duration::from_secs(12), Duration::from_secs(5))
            .is_none());
        let s = t
            .stuck(t0 + Duration::from_secs(16), Duration::from_secs(5))
            .unwrap();
        assert_eq!(s.family, "nvlink");
    }
}
