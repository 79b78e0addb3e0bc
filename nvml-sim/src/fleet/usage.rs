//! What each process does with its GPU, and the driver's per-process
//! utilization sample buffer that `nvmlDeviceGetProcessUtilization` and
//! `nvmlDeviceGetProcessesUtilizationInfo` read.
//!
//! The model, from nvml.h's description of both calls and what real drivers
//! answer (NVIDIA/go-nvml #51, Syllo/nvtop #110, XuehaiPan/nvitop #83):
//! - The driver takes a sample every [`SAMPLE_PERIOD_US`]: for each process
//!   that used an engine in that period, its SM, memory, encoder, decoder,
//!   JPEG and OFA utilization in percent. The buffer keeps the last
//!   [`BUFFER_SAMPLES`].
//! - A query for `lastSeenTimeStamp` answers one entry per process active
//!   in a sample newer than it ("one utilization sample structure is
//!   returned per process running, that had some non-zero utilization"):
//!   its mean over every buffered sample from `lastSeenTimeStamp` to the
//!   newest active one (a sample where it was idle counts 0), with the
//!   time of its own newest active sample. No active sample since then:
//!   `NVML_ERROR_NOT_FOUND`. `lastSeenTimeStamp = 0` averages the whole
//!   buffer.
//! - Samples of a process that has ended stay in the buffer: a query still
//!   answers for it until they age out.
//! - MPS: clients run in the server's context, so the server's pid carries
//!   their summed use and the clients have no entries of their own.
//! - MIG-enabled GPUs: not supported (nvml.h: "querying process utilization
//!   is not currently supported"); what processes in an instance declare
//!   drives the instance's activity (GPM) instead.
//!
//! A process either declares its use (scenario `sm_percent`,
//! `memory_percent`, `encoder_percent`, `decoder_percent`; fault
//! `process-use`) or, where no process on its GPU does, takes the GPU's
//! utilization in proportion to its memory. Once any process declares, the
//! GPU's utilization is the sum of what they declare (at most 100), so
//! device and process readings always agree.

use std::collections::VecDeque;

use super::gpu::{Gpu, Proc};
use crate::fault::ProcKind;

/// The driver's sampling period: 1/6 s, the fastest `nvidia-smi` documents
/// for utilization sampling.
pub const SAMPLE_PERIOD_US: u64 = 166_667;
/// Samples the buffer keeps: 60 s at the period above (in the host
/// process's memory: 25 processes on 8 GPUs take about 2 MiB).
pub const BUFFER_SAMPLES: usize = 360;
/// Engines of a sample, in `nvmlProcessUtilizationInfo_v1_t` order.
pub const ENGINES: usize = 6;
const SM: usize = 0;
const MEMORY: usize = 1;
const ENCODER: usize = 2;
const DECODER: usize = 3;

/// One entry of a query's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub pid: u32,
    pub timestamp_us: u64,
    /// SM, memory, encoder, decoder, JPEG, OFA in percent.
    pub util: [u32; ENGINES],
}

#[derive(Debug, Clone)]
struct Sample {
    at_us: u64,
    /// Percent per engine; single precision is ample for whole percents.
    active: Vec<(u32, [f32; ENGINES])>,
}

/// The per-GPU sample buffer. Samples are taken lazily, up to the present,
/// whenever the buffer is read and before anything that changes what the
/// processes do, so each sample sees the state of its own time.
#[derive(Debug, Clone)]
pub struct SampleBuffer {
    /// CPU time (µs since the epoch) of the simulation's t = 0.
    origin_us: u64,
    /// Index of the next sample to take: it covers the period ending at
    /// `origin_us + next * SAMPLE_PERIOD_US`.
    next: u64,
    samples: VecDeque<Sample>,
}

impl SampleBuffer {
    pub fn new(origin_us: u64) -> Self {
        SampleBuffer {
            origin_us,
            next: 1,
            samples: VecDeque::new(),
        }
    }
}

/// Declared use of the processes on the whole GPU (`gpu_instance` `None`)
/// or in one GPU instance; `None` when none of them declares any.
fn declared<'a>(procs: impl Iterator<Item = &'a Proc>) -> Option<[f64; ENGINES]> {
    let mut sum: Option<[f64; ENGINES]> = None;
    for u in procs.filter_map(|p| p.usage) {
        let s = sum.get_or_insert([0.0; ENGINES]);
        for (s, v) in s.iter_mut().zip(u.engines()) {
            *s += v;
        }
    }
    sum.map(|s| s.map(|v| v.min(100.0)))
}

/// The GPU's (or GPU instance's) utilization of `engine` as its processes
/// declare it, capped at 100 %; `None` when no process declares.
pub fn declared_engine(g: &Gpu, gpu_instance: Option<u32>, engine: usize) -> Option<f64> {
    declared(
        g.procs
            .iter()
            .filter(|p| p.mig.map(|m| m.0) == gpu_instance),
    )
    .map(|d| d[engine])
}

pub fn declared_sm(g: &Gpu, gpu_instance: Option<u32>) -> Option<f64> {
    declared_engine(g, gpu_instance, SM)
}

pub fn declared_memory(g: &Gpu) -> Option<f64> {
    declared_engine(g, None, MEMORY)
}

pub fn declared_encoder(g: &Gpu) -> Option<f64> {
    declared_engine(g, None, ENCODER)
}

pub fn declared_decoder(g: &Gpu) -> Option<f64> {
    declared_engine(g, None, DECODER)
}

/// The MPS server of the GPU, if it runs one and it is still there.
pub fn mps_server(g: &Gpu) -> Option<u32> {
    g.mps_server.filter(|s| g.procs.iter().any(|p| p.pid == *s))
}

/// The MPS clients: every other compute process of a GPU running an MPS
/// server.
pub fn mps_clients(g: &Gpu) -> Vec<&Proc> {
    match mps_server(g) {
        Some(server) => g
            .procs
            .iter()
            .filter(|p| p.kind.listed_as(ProcKind::Compute) && p.pid != server)
            .collect(),
        None => Vec::new(),
    }
}

/// What each process with a context of its own does at real time `t`,
/// idle ones left out. MIG-enabled GPUs have no per-process sampling.
fn active(g: &Gpu, t: f64) -> Vec<(u32, [f64; ENGINES])> {
    if g.mig.is_some() {
        return Vec::new();
    }
    let any_declared = g.procs.iter().any(|p| p.usage.is_some());
    let total_memory = g.procs.iter().map(Proc::counted_memory).sum::<u64>().max(1) as f64;
    let util = g.util(t);
    let use_of = |p: &Proc| -> [f64; ENGINES] {
        match (p.usage, any_declared) {
            (Some(u), _) => u.engines(),
            (None, true) => [0.0; ENGINES],
            (None, false) => {
                let share = p.counted_memory() as f64 / total_memory;
                [util * share, util * 0.62 * share, 0.0, 0.0, 0.0, 0.0]
            }
        }
    };
    let server = mps_server(g);
    let mut out = Vec::new();
    let mut context = [0.0; ENGINES];
    for p in &g.procs {
        let u = use_of(p);
        let is_client = server.is_some_and(|s| p.pid != s && p.kind.listed_as(ProcKind::Compute));
        if is_client {
            for (c, v) in context.iter_mut().zip(u) {
                *c += v;
            }
        } else if Some(p.pid) != server {
            out.push((p.pid, u));
        }
    }
    if let Some(s) = server {
        out.push((s, context.map(|v| v.min(100.0))));
    }
    out.retain(|(_, u)| u.iter().any(|v| *v > 0.0));
    out
}

/// Takes the samples due up to CPU time `now_us`. Call before changing what
/// the GPU's processes do, and before reading.
pub fn advance(g: &mut Gpu, now_us: u64) {
    let origin = g.samples.origin_us;
    let due = now_us.saturating_sub(origin) / SAMPLE_PERIOD_US;
    // Samples older than the buffer would only be dropped again.
    let first = g
        .samples
        .next
        .max(due.saturating_sub(BUFFER_SAMPLES as u64 - 1));
    let taken: Vec<Sample> = (first..=due)
        .map(|k| {
            let at_us = origin + k * SAMPLE_PERIOD_US;
            // Each sample covers the period ending at its time: sample the
            // middle of it.
            let t = (k as f64 - 0.5) * SAMPLE_PERIOD_US as f64 / 1e6;
            Sample {
                at_us,
                active: active(g, t)
                    .into_iter()
                    .map(|(pid, u)| (pid, u.map(|v| v as f32)))
                    .collect(),
            }
        })
        .collect();
    let buf = &mut g.samples;
    buf.next = buf.next.max(due + 1);
    buf.samples.extend(taken);
    while buf.samples.len() > BUFFER_SAMPLES {
        buf.samples.pop_front();
    }
}

/// The answer to a query for samples newer than `last_seen_us`; `None`
/// (NOT_FOUND) when no process was active in one.
pub fn query(g: &mut Gpu, now_us: u64, last_seen_us: u64) -> Option<Vec<Answer>> {
    advance(g, now_us);
    let newer: Vec<&Sample> = g
        .samples
        .samples
        .iter()
        .filter(|s| s.at_us > last_seen_us)
        .collect();
    let newest = newer.iter().rposition(|s| !s.active.is_empty())?;
    let window = &newer[..=newest];
    let n = window.len() as f64;
    let mut by_pid: Vec<(u32, u64, [f64; ENGINES])> = Vec::new();
    for s in window {
        for (pid, u) in &s.active {
            let i = match by_pid.iter().position(|(p, _, _)| p == pid) {
                Some(i) => i,
                None => {
                    by_pid.push((*pid, 0, [0.0; ENGINES]));
                    by_pid.len() - 1
                }
            };
            let entry = &mut by_pid[i];
            entry.1 = s.at_us;
            for (sum, v) in entry.2.iter_mut().zip(u) {
                *sum += f64::from(*v);
            }
        }
    }
    Some(
        by_pid
            .into_iter()
            .map(|(pid, timestamp_us, sums)| Answer {
                pid,
                timestamp_us,
                util: sums.map(|s| (s / n).round().min(100.0) as u32),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Sim;

    fn sim(toml: &str) -> Sim {
        let s = crate::scenario::parse(toml, "test.toml", "test").expect("valid scenario");
        Sim::new(&s, 1.0)
    }

    const SHARED: &str = r#"
        [[gpu]]
        model = "h100-sxm5-80gb"
        processes = [
          { pid = 101, name = "a", memory_mib = 1000, sm_percent = 60, memory_percent = 30 },
          { pid = 102, name = "b", memory_mib = 1000, sm_percent = 20, encoder_percent = 10 },
          { pid = 103, name = "c", memory_mib = 1000 },
        ]
    "#;

    #[test]
    fn declared_use_is_answered_and_drives_the_gpu() {
        let mut s = sim(SHARED);
        let g = &mut s.gpus[0];
        assert_eq!(g.util(3.0), 80.0, "the GPU is the sum of its processes");
        let origin = g.samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        let got = query(g, at(12), at(6)).expect("active samples");
        let mut got: Vec<_> = got
            .iter()
            .map(|a| (a.pid, a.util, a.timestamp_us))
            .collect();
        got.sort_unstable();
        assert_eq!(
            got,
            [
                (101, [60, 30, 0, 0, 0, 0], at(12)),
                (102, [20, 0, 10, 0, 0, 0], at(12)),
            ],
            "103 declares nothing and is idle: no entry"
        );
    }

    #[test]
    fn nothing_newer_is_not_found_and_ended_processes_still_answer() {
        let mut s = sim(SHARED);
        let origin = s.gpus[0].samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        assert!(query(&mut s.gpus[0], at(10), at(10)).is_none());
        // Process 101 ends after sample 10; samples up to 20 are taken.
        advance(&mut s.gpus[0], at(10));
        s.gpus[0].procs.retain(|p| p.pid != 101);
        let got = query(&mut s.gpus[0], at(20), at(4)).unwrap();
        let a = got
            .iter()
            .find(|a| a.pid == 101)
            .expect("its samples remain");
        // Active in samples 5..=10 of 5..=20: 6 of 16.
        assert_eq!(a.util[0], (60.0_f64 * 6.0 / 16.0).round() as u32);
        assert_eq!(a.timestamp_us, at(10));
    }

    #[test]
    fn mps_clients_run_in_the_servers_context() {
        let mut s = sim(r#"
            [[gpu]]
            model = "h100-sxm5-80gb"
            mps = true
            processes = [
              { pid = 201, name = "a", memory_mib = 1000, sm_percent = 50 },
              { pid = 202, name = "b", memory_mib = 1000, sm_percent = 30 },
            ]
        "#);
        let g = &mut s.gpus[0];
        let server = mps_server(g).expect("an MPS server");
        assert_eq!(
            mps_clients(g).iter().map(|p| p.pid).collect::<Vec<_>>(),
            [201, 202]
        );
        let origin = g.samples.origin_us;
        let got = query(g, origin + 30 * SAMPLE_PERIOD_US, 0).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].pid, got[0].util[0]), (server, 80));
    }

    #[test]
    fn undeclared_processes_share_the_gpu_by_memory() {
        let mut s = sim(r#"
            [[gpu]]
            model = "h100-sxm5-80gb"
            load = 60
            processes = [
              { pid = 301, name = "a", memory_mib = 3000 },
              { pid = 302, name = "b", memory_mib = 1000 },
            ]
        "#);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let got = query(
            g,
            origin + 40 * SAMPLE_PERIOD_US,
            origin + 20 * SAMPLE_PERIOD_US,
        )
        .unwrap();
        let sm: u32 = got.iter().map(|a| a.util[0]).sum();
        let a = got.iter().find(|a| a.pid == 301).unwrap().util[0];
        let b = got.iter().find(|a| a.pid == 302).unwrap().util[0];
        assert!((a as i64 - 3 * b as i64).abs() <= 2, "{a} vs {b}");
        assert!((48..=72).contains(&sm), "about the GPU's 60 % wave: {sm}");
    }

    #[test]
    fn a_long_gap_keeps_only_the_buffer() {
        let mut s = sim(SHARED);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        advance(g, origin + 10_000 * SAMPLE_PERIOD_US);
        assert_eq!(g.samples.samples.len(), BUFFER_SAMPLES);
        assert_eq!(
            g.samples.samples.back().map(|s| s.at_us),
            Some(origin + 10_000 * SAMPLE_PERIOD_US)
        );
    }
}
