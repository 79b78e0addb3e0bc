//! What per-workload use accounting reads from NVML (`workload_usage`,
//! with `--workloads`): each process's utilization, accumulated into busy
//! seconds per pid; the MPS clients; the GPU's minor number; and, on a
//! MIG-enabled GPU, its compute slices. `src/workloads/usage.rs` turns
//! these into per-workload counters.
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
use std::time::{SystemTime, UNIX_EPOCH};

use nvml_wrapper::error::NvmlError;

use super::super::calls::{Cached, Got};
use super::super::raw::{self, ProcessList, ProcessUtilization, ProcessUtilizationCall};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, PidUsage, UsageDrop, UsageReadings};

/// The span of the driver's sample ring: 71 samples 200 ms apart, 14 s, on
/// the H200 (NVIDIA's header says the ring "wraps around after 10
/// seconds", `--collect.interval` is held to that: src/cli.rs). A window
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

/// PROFILE_7_SLICE and PROFILE_4_SLICE, the whole-GPU GPU instance
/// profiles of 7-slice boards (A100, H100, B200) and 4-slice ones (A30,
/// RTX PRO 6000 Blackwell).
const WHOLE_GPU_PROFILES: [u32; 2] = [
    nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
    nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
];

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

pub struct State {
    epoch: u64,
    /// The call this driver answers, once known.
    call: Option<ProcessUtilizationCall>,
    /// Newest sample timestamp counted (CPU µs); 0 before the first read.
    last_seen: u64,
    /// Entries the answer buffer holds: grown to what the driver asked for.
    capacity: usize,
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
    minor: Cached<u32>,
    slices: Cached<u32>,
}

impl Default for State {
    fn default() -> Self {
        State {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            call: None,
            last_seen: 0,
            capacity: 16,
            totals: BTreeMap::new(),
            sampled_seconds: 0.0,
            device: DeviceSamples::default(),
            listed: HashMap::new(),
            lists_known: true,
            dropped: BTreeMap::new(),
            minor: Cached::default(),
            slices: Cached::default(),
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, mig_enabled: bool, r: &mut GpuReadings) {
        let fam = Family::WorkloadUsage.name();
        let (nvml, h, device, poll) = (g.nvml, g.handle, g.device, g.poll);
        let c = &mut *g.calls;
        let minor_number = self
            .minor
            .get(poll, || c.run(fam, || device.minor_number()));
        let mut usage = UsageReadings {
            epoch: self.epoch,
            minor_number,
            ..UsageReadings::default()
        };
        if mig_enabled {
            // nvml.h: no per-process utilization on MIG-enabled GPUs; the
            // instances' GPM activity stands in, weighed by their slices.
            usage.mig_compute_slices = self.slices.get(poll, || {
                c.run(fam, || {
                    let mut last = NvmlError::NotSupported;
                    for profile in WHOLE_GPU_PROFILES {
                        match device.profile_info(profile) {
                            Ok(info) => return Ok(info.slice_count),
                            Err(e) => last = e,
                        }
                    }
                    Err(last)
                })
            });
            r.usage = Some(usage);
            return;
        }
        usage.mps_clients = c
            .run(fam, || raw::running_processes(nvml, h, ProcessList::Mps))
            .value()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.pid)
            .collect();
        let before = now_us();
        self.note_listed(r, &usage.mps_clients, before);
        let (last_seen, known) = (self.last_seen, self.call);
        let mut capacity = self.capacity;
        let mut chosen = known;
        let got = c.run(fam, || {
            let mut read = |call| raw::process_utilization(nvml, h, call, last_seen, &mut capacity);
            match known {
                Some(call) => read(call),
                // The versioned call (R550+) first; a driver without it
                // answers the older one, which every branch has.
                None => match read(ProcessUtilizationCall::Info) {
                    Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound) => {
                        chosen = Some(ProcessUtilizationCall::Samples);
                        read(ProcessUtilizationCall::Samples)
                    }
                    other => {
                        chosen = Some(ProcessUtilizationCall::Info);
                        other
                    }
                },
            }
        });
        self.call = chosen;
        self.capacity = capacity;
        match got {
            Got::Value(answer) => {
                // After the per-process call, so that the device's samples
                // reach at least as far as its answer.
                if self.device.supported != Some(false) {
                    let seen = self.device.seen;
                    match c.run(fam, || raw::device_utilization_samples(nvml, h, seen)) {
                        Got::Value(samples) => {
                            self.device.supported = Some(true);
                            self.device.push(samples, &mut self.dropped);
                        }
                        Got::Absent => self.device.supported = Some(false),
                        Got::Failed => {}
                    }
                }
                self.add(answer, before);
            }
            // Not supported on this GPU: its use is not measured.
            Got::Absent => {
                r.usage = Some(usage);
                return;
            }
            // A failed read changes nothing: the next one covers its window.
            Got::Failed => {}
        }
        self.forget(before);
        usage.pids = Some(self.totals.values().map(|t| t.usage).collect());
        usage.sampled_seconds = self.sampled_seconds;
        // Every reason from 0, so that a rate sees the first one.
        usage.dropped = UsageDrop::ALL
            .iter()
            .map(|why| (*why, self.dropped.get(why).copied().unwrap_or(0)))
            .collect();
        r.usage = Some(usage);
    }

    /// Notes the pids NVML lists now, and forgets those it has not listed
    /// for longer than their samples stay in the ring.
    fn note_listed(&mut self, r: &GpuReadings, mps_clients: &[u32], now: u64) {
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
    fn add(&mut self, answer: Option<Vec<ProcessUtilization>>, before: u64) {
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
    fn forget(&mut self, now: u64) {
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
mod tests {
    use super::*;

    fn sample(pid: u32, timestamp_us: u64, sm: u32) -> ProcessUtilization {
        ProcessUtilization {
            pid,
            timestamp_us,
            sm,
            memory: sm / 2,
            encoder: 0,
            decoder: 0,
        }
    }

    fn sm(s: &State, pid: u32) -> f64 {
        s.totals.get(&pid).map_or(0.0, |t| t.usage.sm_seconds)
    }

    fn dropped(s: &State, why: UsageDrop) -> u64 {
        s.dropped.get(&why).copied().unwrap_or(0)
    }

    const T0: u64 = 1_700_000_000_000_000;
    const P: u64 = 200_000;

    /// A state that has seen pids 1 and 2 listed, without device samples.
    fn state() -> State {
        let mut s = State::default();
        s.listed.insert(1, T0);
        s.listed.insert(2, T0);
        s.device.supported = Some(false);
        s
    }

    #[test]
    fn windows_tile_from_one_read_to_the_next() {
        let mut s = state();
        // The first answer averages the driver's whole ring: start only.
        s.add(Some(vec![sample(1, T0, 50)]), T0);
        assert_eq!(sm(&s, 1), 0.0);
        // 2 s at 60 % and 20 %: each pid's mean over the common window.
        s.add(
            Some(vec![
                sample(1, T0 + 2_000_000, 60),
                sample(2, T0 + 1_500_000, 20),
            ]),
            T0 + 2_100_000,
        );
        assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
        assert!((sm(&s, 2) - 0.4).abs() < 1e-9);
        assert_eq!(s.totals[&1].usage.memory_seconds, 0.6);
    }

    #[test]
    fn the_device_samples_give_the_window_its_sm_time() {
        let mut s = state();
        s.device.supported = Some(true);
        s.add(Some(vec![sample(1, T0, 0), sample(2, T0 - P, 0)]), T0);
        s.device.push(vec![(T0, 0)], &mut s.dropped);
        // The H200's burst: samples 25, 95, 95, 95, 92; the old call
        // answered 81 (the mean 80.4, rounded up), the Info call 80.
        let ring: Vec<(u64, u32)> = [25, 95, 95, 95, 92]
            .iter()
            .enumerate()
            .map(|(i, p)| (T0 + (i as u64 + 1) * P, *p))
            .collect();
        s.device.push(ring, &mut s.dropped);
        s.add(Some(vec![sample(1, T0 + 5 * P, 80)]), T0 + 5 * P + 10);
        // (25 + 3 * 95 + 92) % of 0.2 s: 0.804 s, not 0.80 or 0.81.
        assert!((sm(&s, 1) - 0.804).abs() < 1e-9, "{}", sm(&s, 1));
        // Two pids named 1 and 4 times in five samples at 99 %: ceil(19.8)
        // and ceil(79.2), as the H200 answered; the samples' 0.99 s goes
        // 20:80.
        s.device
            .push((6..=10).map(|k| (T0 + k * P, 99)).collect(), &mut s.dropped);
        s.add(
            Some(vec![sample(1, T0 + 7 * P, 20), sample(2, T0 + 10 * P, 80)]),
            T0 + 10 * P + 10,
        );
        assert!((sm(&s, 1) - 0.804 - 0.198).abs() < 1e-9);
        assert!((sm(&s, 2) - 0.792).abs() < 1e-9);
    }

    #[test]
    fn a_pid_first_named_inside_the_window_gets_what_the_others_leave() {
        let mut s = state();
        s.device.supported = Some(true);
        // Pid 1 ran alone, idle; pid 2 starts, and over samples 6..=10 the
        // two time-slice a full GPU: 2, 1, 2, 1, 2.
        s.add(Some(vec![sample(1, T0, 0)]), T0);
        s.device.push(vec![(T0, 0)], &mut s.dropped);
        let ring = (1..=10).map(|k| (T0 + k * P, if k > 5 { 100 } else { 0 }));
        s.device.push(ring.collect(), &mut s.dropped);
        // Pid 1: 200 over the window's 10 samples; pid 2: 300 over the 5
        // since its first, so its mean says 60 where its part is 30.
        s.add(
            Some(vec![sample(1, T0 + 9 * P, 20), sample(2, T0 + 10 * P, 60)]),
            T0 + 10 * P + 10,
        );
        assert!((sm(&s, 1) - 0.4).abs() < 1e-9, "{}", sm(&s, 1));
        assert!((sm(&s, 2) - 0.6).abs() < 1e-9, "{}", sm(&s, 2));
        // From then on both are known: the means share one divisor.
        s.device.push(
            (11..=15).map(|k| (T0 + k * P, 100)).collect(),
            &mut s.dropped,
        );
        s.add(
            Some(vec![sample(1, T0 + 14 * P, 40), sample(2, T0 + 15 * P, 60)]),
            T0 + 15 * P + 10,
        );
        assert!((sm(&s, 1) - 0.8).abs() < 1e-9);
        assert!((sm(&s, 2) - 1.2).abs() < 1e-9);
        assert!(
            (s.sampled_seconds - 3.0).abs() < 1e-9,
            "ten and five samples"
        );
    }

    #[test]
    fn without_the_device_samples_up_to_the_answer_the_means_count() {
        let mut s = state();
        s.device.supported = Some(true);
        s.add(Some(vec![sample(1, T0, 0)]), T0);
        // The device read failed this poll: its samples stop short.
        s.device.push(vec![(T0 + P, 50)], &mut s.dropped);
        s.add(Some(vec![sample(1, T0 + 5 * P, 40)]), T0 + 5 * P + 10);
        assert!((sm(&s, 1) - 0.4).abs() < 1e-9, "40 % of 1 s");
        assert!(s.device.pending.is_empty(), "its samples are used up");
    }

    #[test]
    fn garbage_entries_are_left_out_and_counted() {
        let mut s = state();
        s.add(Some(vec![sample(1, T0, 50)]), T0);
        // nvtop #110: a stale entry at 37100 %, a pid never listed, one
        // stamped a year ahead, and the one valid entry.
        let year = 365 * 24 * 3600 * 1_000_000;
        s.add(
            Some(vec![
                sample(1, T0 + 2_000_000, 60),
                sample(2, T0 - 5_000_000, 37_100),
                sample(99, T0 + 1_000_000, 50),
                sample(2, T0 + year, 10),
                sample(0, T0 + 1_000_000, 5),
            ]),
            T0 + 2_100_000,
        );
        assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
        assert_eq!(sm(&s, 2), 0.0);
        assert_eq!(sm(&s, 99), 0.0);
        assert_eq!(s.last_seen, T0 + 2_000_000, "the clock is not parked");
        for (why, n) in [
            (UsageDrop::Stale, 1),
            (UsageDrop::Unlisted, 2),
            (UsageDrop::Future, 1),
        ] {
            assert_eq!(dropped(&s, why), n, "{why:?}");
        }
        s.add(Some(vec![sample(1, T0 + 3_000_000, 101)]), T0 + 3_100_000);
        assert_eq!(dropped(&s, UsageDrop::Over100), 1);
        assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
        // Where NVML lists no processes at all, a pid cannot be checked.
        s.note_listed(&GpuReadings::default(), &[], T0 + 3_200_000);
        s.add(Some(vec![sample(99, T0 + 4_000_000, 50)]), T0 + 4_100_000);
        // Half of the 2 s since the last entry counted.
        assert!((sm(&s, 99) - 1.0).abs() < 1e-9, "{}", sm(&s, 99));
    }

    #[test]
    fn an_unlisted_pid_keeps_its_part_from_the_others() {
        let mut s = state();
        s.device.supported = Some(true);
        s.add(Some(vec![sample(1, T0, 0)]), T0);
        s.device.push(vec![(T0, 0)], &mut s.dropped);
        s.device
            .push((1..=5).map(|k| (T0 + k * P, 100)).collect(), &mut s.dropped);
        s.add(
            Some(vec![sample(1, T0 + 5 * P, 60), sample(77, T0 + 4 * P, 40)]),
            T0 + 5 * P + 10,
        );
        assert!((sm(&s, 1) - 0.6).abs() < 1e-9, "{}", sm(&s, 1));
    }

    #[test]
    fn not_found_moves_the_start_so_idle_time_is_not_spread_over() {
        let mut s = state();
        s.add(Some(vec![sample(1, T0, 50)]), T0);
        // Idle for a minute: NOT_FOUND every read.
        for i in 1..=60 {
            s.add(None, T0 + i * 1_000_000);
        }
        assert_eq!(s.last_seen, T0 + 59_000_000);
        // Then 1.5 s at 40 %: a window of 1.5 s, not of a minute.
        s.add(Some(vec![sample(1, T0 + 60_500_000, 40)]), T0 + 60_600_000);
        assert!((sm(&s, 1) - 0.6).abs() < 1e-9, "{}", sm(&s, 1));
    }

    #[test]
    fn a_gap_longer_than_the_ring_sets_the_start_again() {
        let mut s = state();
        s.add(Some(vec![sample(1, T0, 50)]), T0);
        s.add(
            Some(vec![sample(1, T0 + MAX_WINDOW_US + 1, 90)]),
            T0 + MAX_WINDOW_US + 2,
        );
        assert_eq!(sm(&s, 1), 0.0);
        s.add(
            Some(vec![sample(1, T0 + MAX_WINDOW_US + 1_000_001, 90)]),
            T0 + MAX_WINDOW_US + 1_000_002,
        );
        assert!((sm(&s, 1) - 0.9).abs() < 1e-9);
    }

    #[test]
    fn ended_pids_are_kept_until_their_samples_cannot_return() {
        let mut s = state();
        s.add(Some(vec![sample(1, T0, 50), sample(2, T0, 50)]), T0);
        let r = GpuReadings {
            compute_processes: Some(vec![]),
            ..Default::default()
        };
        s.note_listed(&r, &[], T0 + FORGET_AFTER_US - 1);
        s.forget(T0 + FORGET_AFTER_US - 1);
        assert_eq!(s.totals.len(), 2);
        s.forget(T0 + FORGET_AFTER_US);
        assert!(s.totals.is_empty());
    }

    #[test]
    fn every_sampler_has_its_own_epoch() {
        assert_ne!(State::default().epoch, State::default().epoch);
    }

    /// The H200's own answers (driver 580.159.04, run 2 of
    /// `scripts/device-check`, tests/device/h200-580.159.04), replayed
    /// through this accounting: every second the device's new samples and
    /// `nvmlDeviceGetProcessUtilization` since the last answer (rounded
    /// up), and, for the lone loads, the answers a 5 s poll would have had,
    /// rebuilt from the samples (the lone process is named in each) with
    /// the Info call's truncation and the old call's rounding up, at every
    /// phase of the 5 s grid. The reference is the integral of the
    /// device's samples over each load (what the device check reports).
    /// `cargo test --lib h200 -- --nocapture` prints the table
    /// BENCHMARKS.md quotes.
    mod h200 {
        use super::*;
        use serde_json::Value;

        const RAW: &str = include_str!("../../../tests/device/h200-580.159.04/sampling-raw.jsonl");
        /// Each load of the run: its pids and its busy span (summary.json).
        const LOADS: [(&str, &[u32], f64, f64); 4] = [
            (
                "burst-1s-6s",
                &[526],
                1_795_762_495.378_961,
                1_795_762_545.382_314,
            ),
            (
                "burst-0.5s-3s",
                &[579],
                1_795_762_563.391_207,
                1_795_762_588.395_544,
            ),
            (
                "two-processes",
                &[618, 619],
                1_795_762_606.405_951_5,
                1_795_762_626.407_393,
            ),
            (
                "mps",
                &[711],
                1_795_762_645.439_072_8,
                1_795_762_655.439_090_5,
            ),
        ];

        struct Second {
            t: u64,
            device: Vec<(u64, u32)>,
            answer: Option<Vec<ProcessUtilization>>,
        }

        fn seconds() -> Vec<Second> {
            RAW.lines()
                .map(|line| {
                    let v: Value = serde_json::from_str(line).unwrap();
                    let device = v["device"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap() as u32))
                        .collect();
                    let entries: Vec<ProcessUtilization> = v["proc_since_last"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|e| ProcessUtilization {
                            pid: e["pid"].as_u64().unwrap() as u32,
                            timestamp_us: e["ts"].as_u64().unwrap(),
                            sm: e["sm"].as_u64().unwrap() as u32,
                            memory: e["mem"].as_u64().unwrap() as u32,
                            encoder: 0,
                            decoder: 0,
                        })
                        .collect();
                    Second {
                        t: (v["t"].as_f64().unwrap() * 1e6) as u64,
                        device,
                        answer: (!entries.is_empty()).then_some(entries),
                    }
                })
                .collect()
        }

        /// The device's samples, in order.
        fn samples(run: &[Second]) -> Vec<(u64, u32)> {
            run.iter().flat_map(|s| s.device.iter().copied()).collect()
        }

        /// The samples' integral over a load (as `busy_seconds` of the
        /// device check): each percent times the time since the one before.
        fn integral(samples: &[(u64, u32)], from: f64, to: f64) -> f64 {
            let (from, to) = (((from - 1.0) * 1e6) as u64, ((to + 1.0) * 1e6) as u64);
            samples
                .windows(2)
                .filter(|w| (from..=to).contains(&w[1].0))
                .map(|w| f64::from(w[1].1) / 100.0 * (w[1].0 - w[0].0) as f64 / 1e6)
                .sum()
        }

        fn billed(s: &State, pids: &[u32]) -> f64 {
            pids.iter().map(|p| sm(s, *p)).sum()
        }

        /// SM seconds of each load, answers once a second as recorded.
        fn every_second(run: &[Second], with_samples: bool) -> State {
            let mut s = State::default();
            s.device.supported = Some(with_samples);
            for sec in run {
                for e in sec.answer.iter().flatten() {
                    s.listed.insert(e.pid, sec.t);
                }
                if with_samples {
                    s.device.push(sec.device.clone(), &mut s.dropped);
                }
                s.add(sec.answer.clone(), sec.t);
            }
            s
        }

        /// A 5 s poll of a lone process, its answers rebuilt from the
        /// samples from `phase` on: the mean over each window's samples,
        /// `round`ed to a whole percent.
        fn every_five(
            samples: &[(u64, u32)],
            pid: u32,
            span: (u64, u64),
            phase: usize,
            round: fn(u32, u32) -> u32,
            with_samples: bool,
        ) -> f64 {
            let mut s = State::default();
            s.device.supported = Some(with_samples);
            let named: Vec<(u64, u32)> = samples
                .iter()
                .copied()
                .filter(|(t, _)| (span.0..=span.1).contains(t))
                .collect();
            let mut i = phase;
            let mut before = 0;
            while i < named.len() {
                let window = &named[before..=i];
                let sum: u32 = window.iter().map(|w| w.1).sum();
                let at = named[i].0;
                s.listed.insert(pid, at);
                if with_samples {
                    s.device.push(window.to_vec(), &mut s.dropped);
                }
                let mean = round(sum, window.len() as u32);
                s.add(Some(vec![sample(pid, at, mean)]), at);
                before = i + 1;
                i += 25;
            }
            sm(&s, pid)
        }

        #[test]
        fn the_device_samples_bill_the_h200s_loads_exactly() {
            let run = seconds();
            let all = samples(&run);
            let ours = every_second(&run, true);
            let means = every_second(&run, false);
            eprintln!("load | samples s | 1 s: samples by means | 1 s: means x window | 5 s: samples by means | 5 s: Info means x window | 5 s: old means x window");
            for (name, pids, from, to) in LOADS {
                let truth = integral(&all, from, to);
                let (a, b) = (billed(&ours, pids), billed(&means, pids));
                let mut five = format!("{name} | {truth:.3} | {a:.3} | {b:.3}");
                if let [pid] = pids {
                    // The span the pid was named in, from its answers.
                    let at: Vec<u64> = run
                        .iter()
                        .flat_map(|s| s.answer.iter().flatten())
                        .filter(|e| e.pid == *pid)
                        .map(|e| e.timestamp_us)
                        .collect();
                    let span = (at[0], *at.last().unwrap());
                    let phases = |round: fn(u32, u32) -> u32, with: bool| -> (f64, f64) {
                        (0..25)
                            .map(|p| every_five(&all, *pid, span, p, round, with))
                            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
                    };
                    let exact = phases(|s, n| s / n, true);
                    let floor = phases(|s, n| s / n, false);
                    let ceil = phases(|s, n| s.div_ceil(n), false);
                    five += &format!(
                        " | {:.3}-{:.3} | {:.3}-{:.3} | {:.3}-{:.3}",
                        exact.0, exact.1, floor.0, floor.1, ceil.0, ceil.1
                    );
                    // Each 5 s window's samples, whatever the rounding.
                    assert!(
                        (exact.0 - truth).abs() < 0.01 * truth,
                        "{name}: {exact:?} {truth}"
                    );
                    assert!(
                        (exact.1 - truth).abs() < 0.01 * truth,
                        "{name}: {exact:?} {truth}"
                    );
                    // Truncated means lose about half a percent point per
                    // window: the 1 s / 6 s bursts 2-4 %.
                    if name == "burst-1s-6s" {
                        assert!(
                            floor.1 < 0.98 * truth && ceil.0 > 1.02 * truth,
                            "{floor:?} {ceil:?}"
                        );
                    }
                } else {
                    let split: Vec<String> = pids
                        .iter()
                        .map(|p| format!("{p}: {:.3}", sm(&ours, *p)))
                        .collect();
                    five += &format!(" | ({}) | |", split.join(", "));
                }
                eprintln!("{five}");
                // Once a second, with the old call's rounding up: within a
                // percent of the samples, where the means overbill.
                assert!((a - truth).abs() < 0.01 * truth, "{name}: {a} vs {truth}");
                assert!(b > a, "{name}: means x window {b}, samples {a}");
            }
        }
    }
}
