//! The accounting of measured use per workload: the answers of the
//! per-process utilization calls and the device's SM samples, turned into
//! busy seconds per pid (`State::sample` in `mod.rs` reads them from NVML).
//!
//! What the driver keeps, as a real H200 answered it (driver 580.159.04,
//! tests/device/h200-580.159.04/sampling-raw.jsonl; open-gpu-kernel-modules
//! `ctrl2080perf.h`): a ring of 72 samples, one every 200 ms there, each
//! with the SM busy share of its period and the ONE pid that ran at its
//! instant. `nvmlDeviceGetSamples` answers each sample's busy percent;
//! the per-process calls answer, per pid named since `lastSeenTimeStamp`,
//! the sum of its samples over the count of every sample since then, in
//! whole percent (rounded up by `nvmlDeviceGetProcessUtilization`, down by
//! `nvmlDeviceGetProcessesUtilizationInfo`), stamped with its newest
//! sample.
//!
//! So a poll reads the per-process answer since the previous answer's
//! newest timestamp (windows that tile time: no sample counted twice, none
//! skipped) and the device's samples since the last one read, and gives
//! the window's SM time, the sum of the device samples in it (whole
//! percents times their 200 ms, no window rounding), to its pids in
//! proportion to their means (which share one divisor). Against the H200's
//! own samples this is exact for one process and within a sample's
//! rounding for several, where the means alone lost half a percent point
//! per pid and window to truncation (BENCHMARKS.md). A GPU or driver
//! without `nvmlDeviceGetSamples` gets each mean times the window.
//!
//! Each entry is checked first (nvtop drops the same after real driver
//! bugs, its issue #110): not newer than the last counted, stamped far in
//! the future, of a pid NVML has not listed on the GPU lately, or above
//! 100 %: left out and counted by why.
//!
//! The first read (and the first after a gap longer than the ring)
//! only sets the start: it would average samples from before the exporter
//! was watching, or over time the ring no longer holds.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::super::raw::ProcessUtilization;
use crate::snapshot::{GpuReadings, PidUsage, UsageDrop, UsageReadings};

/// The span of the driver's sample ring: 71 samples 200 ms apart, 14 s, on
/// the H200 (NVIDIA's header says the ring "wraps around after 10
/// seconds", `--collect.interval` is held to that: src/cli/mod.rs). A window
/// longer than this (the exporter stalled, a GPU hung) only sets the start
/// again: the ring no longer holds all of it.
pub const MAX_WINDOW_US: u64 = 14_000_000;

/// After NOT_FOUND (no process named since the last read) the next read
/// asks from this long before the time of that read, not from the last
/// sample: windows stay about one interval long. The margin leaves room
/// for a sample the driver had not published yet.
const NOT_FOUND_MARGIN_US: u64 = 1_000_000;

/// A pid NVML no longer lists and has not sampled for this long is
/// forgotten: its samples cannot come back.
const FORGET_AFTER_US: u64 = 60_000_000;

/// How long after NVML last listed a pid its entries still count: its
/// samples stay in the ring that long after it ended.
const LISTED_KEEP_US: u64 = MAX_WINDOW_US;

/// An entry stamped further ahead of the clock than this is garbage (a
/// clock step of the host is not: it moves both).
const FUTURE_US: u64 = MAX_WINDOW_US;

/// A device sample covers the time since the one before it, at most this
/// (a longer gap lost samples; what is lost is not guessed). Boards sample
/// every 1/6 s to 1 s.
const MAX_SAMPLE_US: u64 = 1_000_000;

static EPOCHS: AtomicU64 = AtomicU64::new(1);

struct Totals {
    usage: PidUsage,
    last_sample_us: u64,
}

/// The device's SM samples read but not yet given to a window.
#[derive(Default)]
struct DeviceSamples {
    /// `Some(false)` once this GPU answered that it has none.
    supported: Option<bool>,
    /// Newest sample read (CPU µs); 0 before the first.
    seen: u64,
    /// (timestamp, percent, seconds it covers), oldest first.
    pending: VecDeque<(u64, u32, f64)>,
}

impl DeviceSamples {
    /// Adds samples newer than the newest read; a percent above 100 is
    /// left out and counted. Samples older than any window that can still
    /// take them are let go, so answers whose entries are all dropped
    /// (then no window takes the samples) cannot pile them up.
    fn push(&mut self, samples: Vec<(u64, u32)>, dropped: &mut BTreeMap<UsageDrop, u64>) {
        for (at, percent) in samples {
            if at <= self.seen {
                continue;
            }
            if percent > 100 {
                *dropped.entry(UsageDrop::Over100).or_insert(0) += 1;
                continue;
            }
            let covers = if self.seen == 0 {
                0
            } else {
                (at - self.seen).min(MAX_SAMPLE_US)
            };
            self.pending.push_back((at, percent, covers as f64 / 1e6));
            self.seen = at;
        }
        // A window is at most MAX_WINDOW_US long and ends at an entry the
        // driver's ring still held (MAX_WINDOW_US back at most): nothing
        // older than twice that is ever taken.
        let oldest = self.seen.saturating_sub(2 * MAX_WINDOW_US);
        while self.pending.front().is_some_and(|&(at, _, _)| at < oldest) {
            self.pending.pop_front();
        }
    }

    /// SM busy seconds of the samples in (`from`, `to`] and the seconds
    /// they cover, when the samples read reach `to`; the samples up to `to`
    /// are used up either way.
    fn take(&mut self, from: u64, to: u64) -> Option<(f64, f64)> {
        let covered = self.supported != Some(false) && self.seen >= to;
        let (mut busy, mut span) = (0.0, 0.0);
        while let Some(&(at, percent, covers)) = self.pending.front() {
            if at > to {
                break;
            }
            if at > from {
                busy += f64::from(percent) / 100.0 * covers;
                span += covers;
            }
            self.pending.pop_front();
        }
        covered.then_some((busy, span))
    }
}
/// What the answers add up to, since the epoch.
pub(super) struct Ledger {
    epoch: u64,
    /// Newest sample timestamp counted (CPU µs); 0 before the first read.
    last_seen: u64,
    totals: BTreeMap<u32, Totals>,
    /// Seconds the counted windows covered since the epoch.
    sampled_seconds: f64,
    device: DeviceSamples,
    /// Pids NVML listed on the GPU (compute, graphics, MPS clients), and
    /// when it last did (CPU µs).
    listed: HashMap<u32, u64>,
    /// Whether NVML answered a process list at the last poll: where it
    /// gives none, an entry's pid cannot be checked against it.
    lists_known: bool,
    dropped: BTreeMap<UsageDrop, u64>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            last_seen: 0,
            totals: BTreeMap::new(),
            sampled_seconds: 0.0,
            device: DeviceSamples::default(),
            listed: HashMap::new(),
            lists_known: true,
            dropped: BTreeMap::new(),
        }
    }
}

impl Ledger {
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Newest sample timestamp counted: the per-process calls answer what
    /// was sampled after it.
    pub(super) fn last_seen(&self) -> u64 {
        self.last_seen
    }

    /// The newest device sample read, from which the next read asks;
    /// `None` once this GPU answered that it keeps none.
    pub(super) fn device_samples_from(&self) -> Option<u64> {
        (self.device.supported != Some(false)).then_some(self.device.seen)
    }

    /// The device's samples newer than [`Self::device_samples_from`].
    pub(super) fn device_samples(&mut self, samples: Vec<(u64, u32)>) {
        self.device.supported = Some(true);
        self.device.push(samples, &mut self.dropped);
    }

    /// This GPU keeps no device samples: each mean counts over its window.
    pub(super) fn no_device_samples(&mut self) {
        self.device.supported = Some(false);
    }

    /// The totals as the snapshot carries them.
    pub(super) fn fill(&self, usage: &mut UsageReadings) {
        usage.pids = Some(self.totals.values().map(|t| t.usage).collect());
        usage.sampled_seconds = self.sampled_seconds;
        // Every reason from 0, so that a rate sees the first one.
        usage.dropped = UsageDrop::ALL
            .iter()
            .map(|why| (*why, self.dropped.get(why).copied().unwrap_or(0)))
            .collect();
    }

    /// Notes the pids NVML lists now, and forgets those it has not listed
    /// for longer than their samples stay in the ring.
    pub(super) fn note_listed(&mut self, r: &GpuReadings, mps_clients: &[u32], now: u64) {
        self.lists_known = r.compute_processes.is_some() || r.graphics_processes.is_some();
        let pids = r
            .compute_processes
            .iter()
            .chain(r.graphics_processes.iter())
            .flatten()
            .map(|p| p.pid)
            .chain(mps_clients.iter().copied());
        for pid in pids {
            self.listed.insert(pid, now);
        }
        self.listed
            .retain(|_, at| now.saturating_sub(*at) <= LISTED_KEEP_US);
    }

    /// Why an entry is left out, if it is.
    fn check(&self, s: &ProcessUtilization, now: u64) -> Option<UsageDrop> {
        if s.timestamp_us <= self.last_seen {
            Some(UsageDrop::Stale)
        } else if s.timestamp_us > now.saturating_add(FUTURE_US) {
            Some(UsageDrop::Future)
        } else if [s.sm, s.memory, s.encoder, s.decoder]
            .iter()
            .any(|p| *p > 100)
        {
            Some(UsageDrop::Over100)
        } else if s.pid == 0 || (self.lists_known && !self.listed.contains_key(&s.pid)) {
            Some(UsageDrop::Unlisted)
        } else {
            None
        }
    }

    /// Accumulates one answer (`None`: NOT_FOUND) of a read made at
    /// `before` (CPU µs, taken before the call).
    pub(super) fn add(&mut self, answer: Option<Vec<ProcessUtilization>>, before: u64) {
        let Some(entries) = answer else {
            // Nothing ran since `last_seen`, up to about `before`.
            self.last_seen = self
                .last_seen
                .max(before.saturating_sub(NOT_FOUND_MARGIN_US));
            self.device.take(0, self.last_seen);
            return;
        };
        // Entries that pass every check but the listing still share the
        // window's samples (an unlisted pid's part is nobody's).
        let mut sound = Vec::with_capacity(entries.len());
        for s in entries {
            match self.check(&s, before) {
                Some(why) => {
                    *self.dropped.entry(why).or_insert(0) += 1;
                    if why == UsageDrop::Unlisted {
                        sound.push((s, false));
                    }
                }
                None => sound.push((s, true)),
            }
        }
        let Some(newest) = sound.iter().map(|(s, _)| s.timestamp_us).max() else {
            return;
        };
        let start = self.last_seen;
        let window_us = newest - start;
        let counts = start != 0 && window_us <= MAX_WINDOW_US;
        self.last_seen = newest;
        let device = self.device.take(start, newest);
        if counts {
            self.sampled_seconds += device.map_or(window_us as f64 / 1e6, |(_, span)| span);
        }
        // A pid with no entry before is new: its first samples may lie
        // inside the window.
        let shares: Vec<(u32, bool)> = sound
            .iter()
            .map(|(s, _)| (s.sm, !self.totals.contains_key(&s.pid)))
            .collect();
        let sm = split_sm(device, &shares, window_us as f64 / 1e6);
        for ((s, listed), sm) in sound.into_iter().zip(sm) {
            if !listed {
                continue;
            }
            let t = self.totals.entry(s.pid).or_insert_with(|| Totals {
                usage: PidUsage {
                    pid: s.pid,
                    ..PidUsage::default()
                },
                last_sample_us: 0,
            });
            t.last_sample_us = t.last_sample_us.max(s.timestamp_us);
            if !counts {
                continue;
            }
            let mean = |percent: u32| f64::from(percent) / 100.0 * window_us as f64 / 1e6;
            t.usage.sm_seconds += sm;
            t.usage.memory_seconds += mean(s.memory);
            t.usage.encoder_seconds += mean(s.encoder);
            t.usage.decoder_seconds += mean(s.decoder);
        }
    }

    /// Drops pids that NVML no longer lists and has not sampled for a
    /// while.
    pub(super) fn forget(&mut self, now: u64) {
        let listed = &self.listed;
        self.totals.retain(|pid, t| {
            listed.contains_key(pid) || now.saturating_sub(t.last_sample_us) < FORGET_AFTER_US
        });
    }
}

/// The SM seconds of each entry of one window: (its SM percent, whether
/// the pid is new), the device's samples in the window (busy seconds, the
/// seconds they cover) where read, and the window's length.
///
/// The per-process means share one divisor, the window's samples, for a
/// pid named before it; a pid first named inside the window was averaged
/// over fewer (lastSeenTimeStamp 0 averages from a pid's first sample, on
/// the H200), so its mean says more than its part. Where both kinds share
/// a window, the pids named before get their mean over the samples' span
/// and the new ones what the samples leave, by their means; otherwise the
/// samples go by the means. Without the device's samples, each mean counts
/// over the window.
fn split_sm(device: Option<(f64, f64)>, entries: &[(u32, bool)], window_s: f64) -> Vec<f64> {
    let Some((busy, span)) = device else {
        return entries
            .iter()
            .map(|(sm, _)| f64::from(*sm) / 100.0 * window_s)
            .collect();
    };
    let by_means = |entries: &[&(u32, bool)], total: f64| -> Vec<f64> {
        let weight: u32 = entries.iter().map(|(sm, _)| sm).sum();
        entries
            .iter()
            .map(|(sm, _)| match weight {
                // Every mean rounded to 0: a lone pid is exact, several
                // split what little there was evenly.
                0 => total / entries.len() as f64,
                w => total * f64::from(*sm) / f64::from(w),
            })
            .collect()
    };
    type Entries<'e> = Vec<&'e (u32, bool)>;
    let (new, old): (Entries<'_>, Entries<'_>) = entries.iter().partition(|e| e.1);
    if new.is_empty() || old.is_empty() {
        return by_means(&entries.iter().collect::<Vec<_>>(), busy);
    }
    let old_sm: Vec<f64> = old
        .iter()
        .map(|(sm, _)| f64::from(*sm) / 100.0 * span)
        .collect();
    let old_total: f64 = old_sm.iter().sum();
    let scale = if old_total > busy {
        busy / old_total
    } else {
        1.0
    };
    let mut new_sm = by_means(&new, (busy - old_total).max(0.0)).into_iter();
    let mut old_sm = old_sm.into_iter();
    entries
        .iter()
        .map(|(_, is_new)| {
            if *is_new {
                new_sm.next().unwrap_or(0.0)
            } else {
                old_sm.next().unwrap_or(0.0) * scale
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
