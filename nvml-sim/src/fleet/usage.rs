//! What each process does with its GPU, and the driver's utilization
//! sample ring that `nvmlDeviceGetSamples`, `nvmlDeviceGetProcessUtilization`
//! and `nvmlDeviceGetProcessesUtilizationInfo` read.
//!
//! The ring is modelled on what a real driver does, measured on an H200
//! (driver 580.159.04: tests/device/h200-580.159.04/sampling-raw.jsonl, its
//! summary in report.md there) and on the kernel module's own source
//! (open-gpu-kernel-modules `ctrl2080perf.h`,
//! `NV2080_CTRL_PERF_GPUMON_PERFMON_UTIL_SAMPLE`; `gpu_acct.c`,
//! `gpuacctProcessGpuUtil`):
//! - A sample every [`SAMPLE_PERIOD_US`] (200 ms measured), each holding,
//!   per engine (SM, memory, encoder, decoder, JPEG, OFA), the share of the
//!   period the engine was busy and ONE pid: "the process that was active
//!   on the engine when the sample was taken". Under time-slicing the pid
//!   is the context running at that instant, so over many samples each
//!   process is named in proportion to its share of the busy time; a
//!   sample of an idle engine names the context last on it (a lone
//!   process is named, at 0 %, in every sample while it has a context).
//! - The ring keeps 72 samples (`NV2080_CTRL_PERF_GPUMON_SAMPLE_COUNT_PERFMON_UTIL`);
//!   a query with `lastSeenTimeStamp` 0 returned 71 spanning 14 s on the
//!   H200 ([`RING_SAMPLES`]: the 72nd is the one being written).
//! - A per-process query answers one entry per pid named in a sample newer
//!   than `lastSeenTimeStamp`: per engine, the sum of the samples naming it
//!   over the count of every sample since `lastSeenTimeStamp` (RM's mean:
//!   idle samples and samples naming another pid count in the divisor),
//!   counted from the pid's first sample in the ring when that is later.
//!   `nvmlDeviceGetProcessUtilization` rounds that mean up (measured:
//!   samples 25, 95, 95, 95, 92 answer 81), `nvmlDeviceGetProcessesUtilizationInfo`
//!   down (the exporter's totals on the H200 matched a truncated mean). The
//!   entry's timestamp is the newest sample naming the pid. No sample newer
//!   than `lastSeenTimeStamp` names a pid: `NVML_ERROR_NOT_FOUND`.
//! - Samples of a process that has ended stay in the ring until they age
//!   out: a query still answers for it.
//! - MPS: clients run in the server's context, so the server's pid is the
//!   one named and the clients are never (the H200 listed only the
//!   server's pid under MPS).
//! - MIG-enabled GPUs: not supported (nvml.h; "not supported with SMC
//!   enabled", ctrl2080perf.h); what processes in an instance declare
//!   drives the instance's activity (GPM) instead.
//!
//! A process either declares its use (scenario `sm_percent`,
//! `memory_percent`, `encoder_percent`, `decoder_percent`; fault
//! `process-use`) or, where no process on its GPU does, takes the GPU's
//! utilization in proportion to its memory. Once any process declares, the
//! GPU's utilization is the sum of what they declare (at most 100), so
//! device and process readings always agree. A sample is the mean of what
//! the processes did over its period: use changed within a period (a burst
//! shorter than a sample) is weighed by the time it held.

use super::gpu::{Gpu, Proc};
use super::ring::{Answer, Rounding, Sample, ENGINES, RING_SAMPLES, SAMPLE_PERIOD_US, SM};
use crate::fault::ProcKind;

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

/// Every context on the GPU at real time `t` (s since the origin) and what
/// it does, in percent per engine, idle ones at 0, in the order the
/// processes started; MPS clients folded into their server's context.
/// MIG-enabled GPUs have no per-process sampling.
fn contexts(g: &Gpu, t: f64) -> Vec<(u32, [f64; ENGINES])> {
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
    out
}

/// The pids of the GPU's contexts, in the order the processes started.
fn holders(g: &Gpu) -> Vec<u32> {
    if g.mig.is_some() {
        return Vec::new();
    }
    let server = mps_server(g);
    let mut out: Vec<u32> = g
        .procs
        .iter()
        .filter(|p| server.is_none() || !p.kind.listed_as(ProcKind::Compute))
        .map(|p| p.pid)
        .collect();
    out.extend(server);
    out
}

/// Adds what the contexts did from `partial_to_us` up to `to_us` to the
/// period being sampled.
fn accumulate(g: &mut Gpu, to_us: u64) {
    let from_us = g.samples.partial_to_us;
    if to_us <= from_us {
        return;
    }
    let mid = u64::midpoint(from_us, to_us);
    let t = mid.saturating_sub(g.samples.origin_us) as f64 / 1e6;
    let dt = (to_us - from_us) as f64;
    let now = contexts(g, t);
    let partial = &mut g.samples.partial;
    for (pid, u) in now {
        let i = match partial.iter().position(|(p, _)| *p == pid) {
            Some(i) => i,
            None => {
                partial.push((pid, [0.0; ENGINES]));
                partial.len() - 1
            }
        };
        for (sum, v) in partial[i].1.iter_mut().zip(u) {
            *sum += v * dt;
        }
    }
    g.samples.partial_to_us = to_us;
}

/// Closes the period ending at `at_us` into a sample: each engine's busy
/// share, and the pid it names.
fn close(g: &mut Gpu, at_us: u64) {
    let holders = holders(g);
    let buf = &mut g.samples;
    let period = SAMPLE_PERIOD_US as f64;
    let mut sample = Sample {
        at_us,
        util: [0; ENGINES],
        pid: [None; ENGINES],
    };
    buf.credit
        .retain(|(p, _)| holders.contains(p) || buf.partial.iter().any(|(q, _)| q == p));
    for e in 0..ENGINES {
        let busy: Vec<(u32, f64)> = buf
            .partial
            .iter()
            .map(|(p, u)| (*p, u[e] / period))
            .filter(|(_, u)| *u > 0.0)
            .collect();
        let total: f64 = busy.iter().map(|(_, u)| u).sum();
        sample.util[e] = (total.min(100.0) * 100.0).round() as u16;
        sample.pid[e] = if total > 0.0 {
            for (p, u) in &busy {
                let i = match buf.credit.iter().position(|(q, _)| q == p) {
                    Some(i) => i,
                    None => {
                        buf.credit.push((*p, [0.0; ENGINES]));
                        buf.credit.len() - 1
                    }
                };
                buf.credit[i].1[e] += u / total;
            }
            // The most owed among those that ran; the lowest pid on a tie.
            let chosen = busy
                .iter()
                .map(|(p, _)| *p)
                .max_by(|a, b| {
                    let owed = |p: &u32| {
                        buf.credit
                            .iter()
                            .find(|(q, _)| q == p)
                            .map_or(0.0, |(_, c)| c[e])
                    };
                    owed(a).total_cmp(&owed(b)).then(b.cmp(a))
                })
                .expect("busy is not empty");
            if let Some((_, c)) = buf.credit.iter_mut().find(|(q, _)| *q == chosen) {
                c[e] -= 1.0;
            }
            Some(chosen)
        } else if e == SM {
            // An idle engine names the context last on it, else the first
            // context there is.
            buf.last[e]
                .filter(|p| holders.contains(p))
                .or_else(|| holders.first().copied())
        } else {
            None
        };
        if sample.pid[e].is_some() {
            buf.last[e] = sample.pid[e];
        }
    }
    buf.partial.clear();
    buf.samples.push_back(sample);
    while buf.samples.len() > RING_SAMPLES {
        buf.samples.pop_front();
    }
}

/// Takes the samples due up to CPU time `now_us`. Call before changing what
/// the GPU's processes do, and before reading.
pub fn advance(g: &mut Gpu, now_us: u64) {
    let origin = g.samples.origin_us;
    let due = now_us.saturating_sub(origin) / SAMPLE_PERIOD_US;
    // Samples older than the ring would only be dropped again: nothing
    // changed since the last call, so the gap is skipped.
    let first = due.saturating_sub(RING_SAMPLES as u64 + 1);
    if g.samples.next < first {
        g.samples.next = first;
        g.samples.partial.clear();
        g.samples.partial_to_us = origin + (first - 1) * SAMPLE_PERIOD_US;
    }
    while g.samples.next <= due {
        let at_us = origin + g.samples.next * SAMPLE_PERIOD_US;
        accumulate(g, at_us);
        close(g, at_us);
        g.samples.next += 1;
    }
    accumulate(g, now_us);
}

/// The device's samples of `engine` newer than `last_seen_us`, as
/// `nvmlDeviceGetSamples` answers them: (timestamp, whole percent).
pub fn device_samples(
    g: &mut Gpu,
    now_us: u64,
    last_seen_us: u64,
    engine: usize,
) -> Vec<(u64, u32)> {
    advance(g, now_us);
    g.samples
        .samples
        .iter()
        .filter(|s| s.at_us > last_seen_us)
        .map(|s| (s.at_us, (f64::from(s.util[engine]) / 100.0).round() as u32))
        .collect()
}

/// The answer to a per-process query for samples newer than
/// `last_seen_us`; `None` (NOT_FOUND) when no such sample names a pid.
pub fn query(
    g: &mut Gpu,
    now_us: u64,
    last_seen_us: u64,
    rounding: Rounding,
) -> Option<Vec<Answer>> {
    advance(g, now_us);
    let ring = &g.samples.samples;
    let start = ring.iter().position(|s| s.at_us > last_seen_us)?;
    // (pid, its first sample in the ring, its newest in the window, sums)
    let mut by_pid: Vec<(u32, usize, u64, [u64; ENGINES])> = Vec::new();
    for (i, s) in ring.iter().enumerate().skip(start) {
        for e in 0..ENGINES {
            let Some(pid) = s.pid[e] else { continue };
            let k = match by_pid.iter().position(|(p, ..)| *p == pid) {
                Some(k) => k,
                None => {
                    let first = ring
                        .iter()
                        .position(|s| s.pid.contains(&Some(pid)))
                        .unwrap_or(i);
                    by_pid.push((pid, first, 0, [0; ENGINES]));
                    by_pid.len() - 1
                }
            };
            let entry = &mut by_pid[k];
            entry.2 = s.at_us;
            entry.3[e] += u64::from(s.util[e]);
        }
    }
    if by_pid.is_empty() {
        return None;
    }
    Some(
        by_pid
            .into_iter()
            .map(|(pid, first, timestamp_us, sums)| {
                // Hundredths of a percent over that many samples.
                let n = (ring.len() - start.max(first)) as u64 * 100;
                let util = sums.map(|s| {
                    let v = match rounding {
                        Rounding::Up => s.div_ceil(n),
                        Rounding::Down => s / n,
                    };
                    v.min(100) as u32
                });
                Answer {
                    pid,
                    timestamp_us,
                    util,
                }
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

    fn set_sm(g: &mut Gpu, pid: u32, sm: f64, at_us: u64) {
        advance(g, at_us);
        let p = g.procs.iter_mut().find(|p| p.pid == pid).unwrap();
        p.usage = Some(crate::fault::ProcUse {
            sm,
            ..Default::default()
        });
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

    const LONE: &str = r#"
        [[gpu]]
        model = "h200-sxm5-141gb"
        processes = [{ pid = 526, name = "load", memory_mib = 714, sm_percent = 0 }]
    "#;

    #[test]
    fn the_ring_holds_71_samples_200_ms_apart() {
        let mut s = sim(LONE);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let got = device_samples(g, origin + 60_000_000, 0, SM);
        assert_eq!(got.len(), RING_SAMPLES);
        assert!(got.windows(2).all(|w| w[1].0 - w[0].0 == SAMPLE_PERIOD_US));
        // 14 s from the oldest to the newest, as the H200 answered.
        assert_eq!(got[70].0 - got[0].0, 14_000_000);
    }

    #[test]
    fn a_lone_process_is_named_in_every_sample_and_its_mean_counts_idle_samples() {
        let mut s = sim(LONE);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        // A burst over samples 11..=15: the last quarter of sample 11 at
        // 100 %, then 95 %, and 92 % in sample 15.
        set_sm(g, 526, 100.0, at(10) + 150_000);
        set_sm(g, 526, 95.0, at(11));
        set_sm(g, 526, 92.0, at(14));
        set_sm(g, 526, 0.0, at(15));
        // (25 + 3 * 95 + 92) / 5 = 80.4: the old call rounds up to 81, as
        // the H200 answered such a burst; the Info call down.
        let up = query(g, at(15), at(10), Rounding::Up).unwrap();
        assert_eq!(up.len(), 1);
        assert_eq!((up[0].pid, up[0].util[SM]), (526, 81));
        let down = query(g, at(15), at(10), Rounding::Down).unwrap();
        assert_eq!(down[0].util[SM], 80);
        let dev = device_samples(g, at(20), at(10), SM);
        let percents: Vec<u32> = dev.iter().map(|s| s.1).collect();
        assert_eq!(percents, [25, 95, 95, 95, 92, 0, 0, 0, 0, 0]);
        // Over ten samples the idle ones count: 40.2.
        let ten = query(g, at(20), at(10), Rounding::Up).unwrap();
        assert_eq!(ten[0].util[SM], 41);
        assert_eq!(ten[0].timestamp_us, at(20), "named while idle");
        assert_eq!(
            query(g, at(20), at(10), Rounding::Down).unwrap()[0].util[SM],
            40
        );
        // Idle since: entries at 0 %, not NOT_FOUND.
        let idle = query(g, at(20), at(16), Rounding::Up).unwrap();
        assert_eq!(idle[0].util[SM], 0);
    }

    #[test]
    fn time_sliced_processes_are_named_one_per_sample_in_proportion() {
        let mut s = sim(r#"
            [[gpu]]
            model = "h200-sxm5-141gb"
            processes = [
              { pid = 618, name = "a", memory_mib = 714, sm_percent = 60 },
              { pid = 619, name = "b", memory_mib = 714, sm_percent = 20 },
            ]
        "#);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        advance(g, at(60));
        let ring = &g.samples.samples;
        let named = |pid| {
            ring.iter()
                .skip(ring.len() - 40)
                .filter(|s| s.pid[SM] == Some(pid))
                .count()
        };
        assert_eq!((named(618), named(619)), (30, 10), "3:1 of 40 samples");
        assert!(ring.iter().all(|s| s.util[SM] == 8000), "80 % busy");
        // Over 5 samples a pid named k times gets ceil(80 k / 5).
        let got = query(g, at(60), at(55), Rounding::Up).unwrap();
        let total: u32 = got.iter().map(|a| a.util[SM]).sum();
        assert_eq!(total, 80);
        assert!(got
            .iter()
            .all(|a| a.util[SM] % 16 == 0 && a.timestamp_us > at(55)));
    }

    #[test]
    fn a_process_is_averaged_from_its_first_sample() {
        let mut s = sim(LONE);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        advance(g, at(30));
        g.procs.clear();
        advance(g, at(40));
        g.procs.push(Proc {
            pid: 527,
            name: "late".into(),
            memory: 1 << 30,
            kind: ProcKind::Compute,
            mig: None,
            usage: Some(crate::fault::ProcUse {
                sm: 50.0,
                ..Default::default()
            }),
        });
        let got = query(g, at(50), 0, Rounding::Up).unwrap();
        let late = got.iter().find(|a| a.pid == 527).unwrap();
        assert_eq!(late.util[SM], 50, "its 10 samples, not the ring's 50");
        let old = got.iter().find(|a| a.pid == 526).unwrap();
        assert_eq!(old.timestamp_us, at(30), "ended: its samples remain");
    }

    #[test]
    fn nothing_named_since_is_not_found() {
        let mut s = sim(SHARED);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        let at = |k: u64| origin + k * SAMPLE_PERIOD_US;
        assert!(query(g, at(10), at(10), Rounding::Up).is_none());
        g.procs.clear();
        advance(g, at(20));
        assert!(query(g, at(30), at(20), Rounding::Down).is_none());
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
        let got = query(g, origin + 30 * SAMPLE_PERIOD_US, 0, Rounding::Up).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].pid, got[0].util[SM]), (server, 80));
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
            origin + 60 * SAMPLE_PERIOD_US,
            origin + 20 * SAMPLE_PERIOD_US,
            Rounding::Down,
        )
        .unwrap();
        let a = got.iter().find(|a| a.pid == 301).unwrap().util[SM];
        let b = got.iter().find(|a| a.pid == 302).unwrap().util[SM];
        assert!((a as i64 - 3 * b as i64).abs() <= 6, "{a} vs {b}");
        assert!((45..=72).contains(&(a + b)), "about the GPU's 60 % wave");
    }

    #[test]
    fn a_long_gap_keeps_only_the_ring() {
        let mut s = sim(SHARED);
        let g = &mut s.gpus[0];
        let origin = g.samples.origin_us;
        advance(g, origin + 10_000 * SAMPLE_PERIOD_US);
        assert_eq!(g.samples.samples.len(), RING_SAMPLES);
        assert_eq!(
            g.samples.samples.back().map(|s| s.at_us),
            Some(origin + 10_000 * SAMPLE_PERIOD_US)
        );
    }
}
