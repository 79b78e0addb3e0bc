//! The driver's per-GPU utilization sample ring, as data: what a sample
//! holds and how many the ring keeps. How samples are taken and answered
//! (from what the processes of a `Gpu` do) is `usage.rs`'s; this file
//! imports nothing of the fleet, so `gpu.rs` can hold a ring without a
//! circle through `usage.rs`.

use std::collections::VecDeque;

/// The driver's sampling period (200 ms between samples on the H200).
pub const SAMPLE_PERIOD_US: u64 = 200_000;
/// Samples a query can see: 71 of the ring's 72, as the H200 answered.
pub const RING_SAMPLES: usize = 71;
/// Engines of a sample, in `nvmlProcessUtilizationInfo_v1_t` order.
pub const ENGINES: usize = 6;
pub const SM: usize = 0;

/// How a per-process mean is made a whole percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// `nvmlDeviceGetProcessUtilization`.
    Up,
    /// `nvmlDeviceGetProcessesUtilizationInfo`.
    Down,
}

/// One entry of a per-process query's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub pid: u32,
    pub timestamp_us: u64,
    /// SM, memory, encoder, decoder, JPEG, OFA in percent.
    pub util: [u32; ENGINES],
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub(super) at_us: u64,
    /// Per engine, busy share of the period in hundredths of a percent
    /// (RM's unit: "pct*100").
    pub(super) util: [u16; ENGINES],
    /// Per engine, the pid named (`None`: RM's invalid pid, nobody).
    pub(super) pid: [Option<u32>; ENGINES],
}

/// The per-GPU sample ring. Samples are taken lazily, up to the present,
/// whenever the ring is read and before anything that changes what the
/// processes do, so each sample sees what happened in its own period.
#[derive(Debug, Clone)]
pub struct SampleBuffer {
    /// CPU time (µs since the epoch) of the simulation's t = 0.
    pub(super) origin_us: u64,
    /// Index of the next sample to take: it covers the period ending at
    /// `origin_us + next * SAMPLE_PERIOD_US`.
    pub(super) next: u64,
    pub(super) samples: VecDeque<Sample>,
    /// What each context did so far in the period being sampled, in
    /// percent times µs per engine, up to `partial_to_us`.
    pub(super) partial: Vec<(u32, [f64; ENGINES])>,
    pub(super) partial_to_us: u64,
    /// Per pid and engine, how far it is owed a sample: a pid is named in
    /// the share of samples its busy time is of the engine's (a
    /// deterministic stand-in for the time-slice that happens to run at
    /// the sampling instant).
    pub(super) credit: Vec<(u32, [f64; ENGINES])>,
    /// The pid the last sample named per engine.
    pub(super) last: [Option<u32>; ENGINES],
}

impl SampleBuffer {
    pub fn new(origin_us: u64) -> Self {
        SampleBuffer {
            origin_us,
            next: 1,
            samples: VecDeque::new(),
            partial: Vec::new(),
            partial_to_us: origin_us,
            credit: Vec::new(),
            last: [None; ENGINES],
        }
    }
}
