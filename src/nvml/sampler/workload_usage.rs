//! What per-workload use accounting reads from NVML (`workload_usage`,
//! with `--workloads`): each process's utilization samples, accumulated
//! into busy seconds per pid; the MPS clients; the GPU's minor number; and,
//! on a MIG-enabled GPU, its compute slices. `src/workloads/usage.rs`
//! turns these into per-workload counters.
//!
//! NVML answers "the utilization since `lastSeenTimeStamp`": one entry per
//! process active since then, its mean in percent, stamped with the time
//! of its newest sample. Each entry's percent is taken over the window
//! from the previous read's newest timestamp to this read's, so that
//! consecutive windows tile time: no sample counted twice, none skipped.
//! The first read (and the first after a gap longer than
//! [`MAX_WINDOW_US`]) only sets the start: it would average the driver's
//! whole buffer, which reaches back before the exporter was watching.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nvml_wrapper::error::NvmlError;

use super::super::calls::{Cached, Got};
use super::super::raw::{self, ProcessList, ProcessUtilization, ProcessUtilizationCall};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, PidUsage, UsageReadings};

/// A read whose window would be longer than this (the exporter stalled,
/// a GPU hung) only sets the start again: the driver may no longer hold
/// every sample of such a window, and its mean would be spread over time
/// it does not cover.
pub const MAX_WINDOW_US: u64 = 30_000_000;

/// After NOT_FOUND (no process active since the last read) the next read
/// asks from this long before the time of that read, not from the last
/// sample: windows stay about one interval long, so the whole-percent
/// means NVML answers lose little to rounding. The margin leaves room for
/// a sample the driver had not published yet.
const NOT_FOUND_MARGIN_US: u64 = 1_000_000;

/// A pid NVML no longer lists and has not sampled for this long is
/// forgotten: its samples cannot come back.
const FORGET_AFTER_US: u64 = 60_000_000;

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

pub struct State {
    epoch: u64,
    /// The call this driver answers, once known.
    call: Option<ProcessUtilizationCall>,
    /// Newest sample timestamp seen (CPU µs); 0 before the first read.
    last_seen: u64,
    capacity: usize,
    totals: BTreeMap<u32, Totals>,
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
        let (last_seen, capacity, known) = (self.last_seen, self.capacity, self.call);
        let mut chosen = known;
        let got = c.run(fam, || {
            let read = |call| raw::process_utilization(nvml, h, call, last_seen, capacity);
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
        match got {
            Got::Value(answer) => self.add(answer, before),
            // Not supported on this GPU: its use is not measured.
            Got::Absent => {
                r.usage = Some(usage);
                return;
            }
            // A failed read changes nothing: the next one covers its window.
            Got::Failed => {}
        }
        self.forget(r, before);
        usage.pids = Some(self.totals.values().map(|t| t.usage).collect());
        r.usage = Some(usage);
    }

    /// Accumulates one answer (`None`: NOT_FOUND) of a read made at
    /// `before` (CPU µs, taken before the call).
    fn add(&mut self, answer: Option<Vec<ProcessUtilization>>, before: u64) {
        let samples = answer.unwrap_or_default();
        let Some(newest) = samples.iter().map(|s| s.timestamp_us).max() else {
            // Nothing ran since `last_seen`, up to about `before`.
            self.last_seen = self
                .last_seen
                .max(before.saturating_sub(NOT_FOUND_MARGIN_US));
            return;
        };
        if newest <= self.last_seen {
            return;
        }
        self.capacity = self.capacity.max(samples.len() + 8);
        let window_us = newest - self.last_seen;
        let counts = self.last_seen != 0 && window_us <= MAX_WINDOW_US;
        self.last_seen = newest;
        for s in samples {
            let t = self.totals.entry(s.pid).or_insert_with(|| Totals {
                usage: PidUsage {
                    pid: s.pid,
                    ..PidUsage::default()
                },
                last_sample_us: 0,
            });
            t.last_sample_us = t.last_sample_us.max(s.timestamp_us);
            if counts {
                let seconds =
                    |percent: u32| f64::from(percent.min(100)) / 100.0 * window_us as f64 / 1e6;
                t.usage.sm_seconds += seconds(s.sm);
                t.usage.memory_seconds += seconds(s.memory);
                t.usage.encoder_seconds += seconds(s.encoder);
                t.usage.decoder_seconds += seconds(s.decoder);
            }
        }
    }

    /// Drops pids that NVML no longer lists and has not sampled for a
    /// while.
    fn forget(&mut self, r: &GpuReadings, now: u64) {
        let listed: HashSet<u32> = r
            .compute_processes
            .iter()
            .chain(r.graphics_processes.iter())
            .flatten()
            .map(|p| p.pid)
            .collect();
        self.totals.retain(|pid, t| {
            listed.contains(pid) || now.saturating_sub(t.last_sample_us) < FORGET_AFTER_US
        });
    }
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

    const T0: u64 = 1_700_000_000_000_000;

    #[test]
    fn windows_tile_from_one_read_to_the_next() {
        let mut s = State::default();
        // The first answer averages the driver's whole buffer: start only.
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
        // A stale answer (nothing newer than what was counted) adds nothing.
        s.add(Some(vec![sample(1, T0 + 2_000_000, 60)]), T0 + 2_200_000);
        assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
        assert_eq!(s.totals[&1].usage.memory_seconds, 0.6);
    }

    #[test]
    fn not_found_moves_the_start_so_idle_time_is_not_spread_over() {
        let mut s = State::default();
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
    fn a_long_gap_sets_the_start_again() {
        let mut s = State::default();
        s.add(Some(vec![sample(1, T0, 50)]), T0);
        s.add(
            Some(vec![sample(1, T0 + MAX_WINDOW_US + 1, 90)]),
            T0 + MAX_WINDOW_US + 2,
        );
        assert_eq!(sm(&s, 1), 0.0);
        s.add(Some(vec![sample(1, T0 + MAX_WINDOW_US + 1_000_001, 90)]), 0);
        assert!((sm(&s, 1) - 0.9).abs() < 1e-9);
    }

    #[test]
    fn ended_pids_are_kept_until_their_samples_cannot_return() {
        let mut s = State::default();
        s.add(Some(vec![sample(1, T0, 50), sample(2, T0, 50)]), T0);
        let r = GpuReadings {
            compute_processes: Some(vec![]),
            ..Default::default()
        };
        s.forget(&r, T0 + FORGET_AFTER_US - 1);
        assert_eq!(s.totals.len(), 2);
        s.forget(&r, T0 + FORGET_AFTER_US);
        assert!(s.totals.is_empty());
    }

    #[test]
    fn every_sampler_has_its_own_epoch() {
        assert_ne!(State::default().epoch, State::default().epoch);
    }
}
