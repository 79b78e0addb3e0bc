//! How the sampler makes NVML calls: each one tracked for the stuck-call
//! watchdog, its failure classified and counted, its outcome a [`Got`].
//! [`Batch`] and [`Cached`] build on that for values read rarely.

use std::collections::HashSet;
use std::time::Instant;

use nvml_wrapper::error::NvmlError;

use super::driver_time::DriverTime;
use super::errors::{classify, error_name, Class, ErrorBook};
use super::watchdog::CallTracker;

/// Values that only change on reconfiguration are re-read this often (in
/// polls), which keeps the per-poll call count down. Calls that answered
/// "not supported" are skipped until then.
pub const STATIC_REFRESH_POLLS: u64 = 60;

/// Values that change only when an operator or a fault acts (persistence,
/// display and compute mode, ECC mode, the power limits in force) are
/// re-read this often (in polls: 60 s at the default 5 s interval), and at
/// once when a reading made every poll says they may have moved
/// (`Cached::get_every`'s `moved`). docs/metrics.md, "Freshness".
pub const SLOW_REFRESH_POLLS: u64 = 12;

/// Whether `poll` re-reads static values and retries unsupported calls.
pub fn is_refresh(poll: u64) -> bool {
    poll.is_multiple_of(STATIC_REFRESH_POLLS)
}

/// The outcome of one NVML call.
pub enum Got<T> {
    Value(T),
    /// Not supported here: absent, not an error.
    Absent,
    /// Failed (counted), or skipped because the GPU is lost.
    Failed,
}

impl<T> Got<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            _ => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Got<U> {
        match self {
            Got::Value(v) => Got::Value(f(v)),
            Got::Absent => Got::Absent,
            Got::Failed => Got::Failed,
        }
    }
}

/// Runs calls with stuck-call tracking and failure accounting. Once the GPU
/// is lost or the driver is gone, further calls are skipped: they would
/// only fail the same way.
pub struct Calls<'a> {
    pub gpu: u32,
    pub tracker: &'a CallTracker,
    pub errors: ErrorBook,
    /// Calls made and time spent in the driver, per family, since start.
    pub driver_time: DriverTime,
    pub lost: bool,
    pub driver_gone: bool,
    /// Calls that failed (not absent) during the current sample.
    pub failed_this_sample: u32,
    pub answered_this_sample: u32,
    /// NVML withheld a whole-GPU aggregate of a MIG-enabled GPU during the
    /// current sample (NO_PERMISSION: the caller lacks MIG privileges).
    pub aggregate_withheld: bool,
    /// Calls with a field-value alternative that answered "not supported";
    /// skipped until the next static refresh.
    absent: HashSet<&'static str>,
    /// Field-batch entries (field id, scope id) the driver answered "not
    /// supported" or did not know: left out of the batch until the next
    /// static refresh, each costing the driver time to refuse.
    pub absent_fields: HashSet<(u32, u32)>,
}

impl<'a> Calls<'a> {
    pub fn new(gpu: u32, tracker: &'a CallTracker) -> Self {
        Calls {
            gpu,
            tracker,
            errors: ErrorBook::default(),
            driver_time: DriverTime::default(),
            lost: false,
            driver_gone: false,
            failed_this_sample: 0,
            answered_this_sample: 0,
            aggregate_withheld: false,
            absent: HashSet::new(),
            absent_fields: HashSet::new(),
        }
    }

    /// Starts the tallies of one sample; a refresh poll also forgets which
    /// calls were unsupported.
    pub fn begin_sample(&mut self, poll: u64) {
        self.failed_this_sample = 0;
        self.answered_this_sample = 0;
        self.aggregate_withheld = false;
        if is_refresh(poll) {
            self.absent.clear();
            self.absent_fields.clear();
        }
    }

    pub fn halted(&self) -> bool {
        self.lost || self.driver_gone
    }

    pub fn run<T>(
        &mut self,
        family: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Got<T> {
        if self.halted() {
            return Got::Failed;
        }
        let result = self.timed(family, f);
        match result {
            Ok(v) => {
                self.answered_this_sample += 1;
                Got::Value(v)
            }
            Err(e) => self.failure(family, &e),
        }
    }

    /// Makes the call, announced to the stuck-call watchdog and timed for
    /// `driver_time`.
    fn timed<T>(&mut self, family: &'static str, f: impl FnOnce() -> T) -> T {
        self.tracker.enter(family);
        let started = Instant::now();
        let result = f();
        self.driver_time.record(family, started.elapsed());
        self.tracker.exit();
        result
    }

    /// A whole-GPU aggregate (memory, process lists) that NVML gives on a
    /// MIG-enabled GPU "only if the caller has appropriate privileges"
    /// (nvml.h): NO_PERMISSION there is the caller's missing MIG privilege,
    /// recorded in `aggregate_withheld` and reported by its own
    /// self-metric, not counted as an error every poll.
    pub fn run_aggregate<T>(
        &mut self,
        family: &'static str,
        mig_enabled: bool,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Got<T> {
        match self.run_classified(family, f) {
            Err(NvmlError::NoPermission) if mig_enabled => {
                self.aggregate_withheld = true;
                self.answered_this_sample += 1;
                Got::Absent
            }
            Err(e) => self.failure(family, &e),
            Ok(got) => got,
        }
    }

    fn run_classified<T>(
        &mut self,
        family: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Got<T>, NvmlError> {
        if self.halted() {
            return Ok(Got::Failed);
        }
        let result = self.timed(family, f);
        result.map(|v| {
            self.answered_this_sample += 1;
            Got::Value(v)
        })
    }

    /// A call standing in for a field the batch did not deliver (`key`
    /// names it); once it says "not supported" it is skipped until the
    /// next static refresh.
    pub fn run_unless_absent<T>(
        &mut self,
        key: &'static str,
        family: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.absent.contains(key) {
            return None;
        }
        match self.run(family, f) {
            Got::Value(v) => Some(v),
            Got::Absent => {
                self.absent.insert(key);
                None
            }
            Got::Failed => None,
        }
    }

    /// Accounts for an error that came back from a call (or from one entry
    /// of a batched call).
    pub fn failure<T>(&mut self, family: &'static str, e: &NvmlError) -> Got<T> {
        match classify(e) {
            Class::Absent => {
                self.answered_this_sample += 1;
                Got::Absent
            }
            Class::Lost => {
                self.lost = true;
                self.errors.record(family, "gpu_is_lost");
                Got::Failed
            }
            Class::DriverGone => {
                self.driver_gone = true;
                if self.errors.record(family, &error_name(e)) {
                    tracing::warn!(gpu = self.gpu, family, error = %e, "NVML lost its driver during a call");
                }
                Got::Failed
            }
            Class::Error(name) => {
                self.failed_this_sample += 1;
                if self.errors.record(family, &name) {
                    tracing::warn!(gpu = self.gpu, family, error = %e,
                        "NVML call failed; the reading is absent (logged once per GPU, family and error)");
                }
                Got::Failed
            }
        }
    }
}

/// Gathers the calls behind one cached list (thresholds, limits, maximum
/// clocks). Unsupported calls are left out; any failure fails the whole
/// list, so the cache retries it at the next poll instead of keeping an
/// incomplete one until its refresh.
pub struct Batch<T> {
    out: Vec<T>,
    failed: bool,
}

impl<T> Batch<T> {
    pub fn new() -> Self {
        Batch {
            out: Vec::new(),
            failed: false,
        }
    }

    /// The call's value, if it has one; notes a failure.
    pub fn take<V>(&mut self, got: Got<V>) -> Option<V> {
        match got {
            Got::Value(v) => Some(v),
            Got::Absent => None,
            Got::Failed => {
                self.failed = true;
                None
            }
        }
    }

    pub fn push(&mut self, item: T) {
        self.out.push(item);
    }

    pub fn finish(self) -> Got<Vec<T>> {
        if self.failed {
            Got::Failed
        } else {
            Got::Value(self.out)
        }
    }
}

/// A value re-read every `STATIC_REFRESH_POLLS` polls, or on the next poll
/// after a failure.
pub struct Cached<T> {
    value: Option<T>,
    next_read: u64,
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached {
            value: None,
            next_read: 0,
        }
    }
}

impl<T: Clone> Cached<T> {
    pub fn get(&mut self, poll: u64, read: impl FnOnce() -> Got<T>) -> Option<T> {
        self.get_every(poll, STATIC_REFRESH_POLLS, false, read)
    }

    /// The value held, without reading.
    pub fn peek(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Re-read every `period` polls, at once when `moved`, or on the next
    /// poll after a failure.
    pub fn get_every(
        &mut self,
        poll: u64,
        period: u64,
        moved: bool,
        read: impl FnOnce() -> Got<T>,
    ) -> Option<T> {
        if poll >= self.next_read || moved {
            match read() {
                Got::Value(v) => {
                    self.value = Some(v);
                    self.next_read = poll + period;
                }
                Got::Absent => {
                    self.value = None;
                    self.next_read = poll + period;
                }
                Got::Failed => {
                    self.value = None;
                    self.next_read = poll + 1;
                }
            }
        }
        self.value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_values_refresh_on_schedule_and_retry_failures() {
        let mut c: Cached<u32> = Cached::default();
        let mut reads = 0;
        assert_eq!(
            c.get(0, || {
                reads += 1;
                Got::Failed
            }),
            None
        );
        assert_eq!(
            c.get(1, || {
                reads += 1;
                Got::Value(7)
            }),
            Some(7)
        );
        assert_eq!(
            c.get(2, || {
                reads += 1;
                Got::Value(8)
            }),
            Some(7)
        );
        assert_eq!(
            c.get(1 + STATIC_REFRESH_POLLS, || {
                reads += 1;
                Got::Value(9)
            }),
            Some(9)
        );
        assert_eq!(reads, 3);
    }

    #[test]
    fn a_slow_value_is_re_read_on_its_period_or_at_once_when_it_moved() {
        let mut c: Cached<u32> = Cached::default();
        let mut reads = Vec::new();
        for poll in 0..30 {
            let moved = poll == 5;
            c.get_every(poll, SLOW_REFRESH_POLLS, moved, || {
                reads.push(poll);
                Got::Value(poll as u32)
            });
        }
        assert_eq!(
            reads,
            [0, 5, 5 + SLOW_REFRESH_POLLS, 5 + 2 * SLOW_REFRESH_POLLS]
        );
    }

    #[test]
    fn an_unsupported_stand_in_call_is_skipped_until_the_refresh() {
        let tracker = CallTracker::default();
        let mut c = Calls::new(0, &tracker);
        let mut made = 0;
        let mut call = |c: &mut Calls<'_>| {
            c.run_unless_absent("energy", "power", || {
                made += 1;
                Err::<u64, _>(NvmlError::NotSupported)
            })
        };
        c.begin_sample(0);
        assert_eq!(call(&mut c), None);
        c.begin_sample(1);
        assert_eq!(call(&mut c), None);
        c.begin_sample(STATIC_REFRESH_POLLS);
        assert_eq!(call(&mut c), None);
        assert_eq!(made, 2);
    }
}
