//! Measured use per workload: SM (and memory, encoder, decoder) busy
//! seconds, the workload's part of its GPU's energy, device-seconds held,
//! and how long a holding has been idle. Counters kept here, in the
//! publish step, from one snapshot to the next: they grow by what each
//! poll measured, survive scrape gaps, and start at 0 when the exporter
//! does (a counter reset to Prometheus).
//!
//! Per GPU and interval between two of its polls (`dt`):
//! - Whole GPU: each pid's SM seconds come from the sampler
//!   (`src/nvml/sampler/workload_usage.rs`); a workload gets those of its
//!   pids, an ended pid those of the workload it last belonged to. MPS:
//!   NVML samples the clients' work under the server's pid, so the
//!   server's seconds are split evenly between the clients.
//! - MIG: NVML has no per-process utilization. A GPU instance's graphics
//!   engine activity (GPM: the time a kernel ran, what per-process SM
//!   utilization measures on a whole GPU) times its part of the GPU (compute slices of the
//!   instance over those of the GPU) times `dt` is split between the
//!   instance's holders by their share.
//! - Energy: the GPU's energy counter grew by `dE`; a workload gets
//!   `dE * sm / dt` (scaled down when the workloads' SM time adds up to
//!   more than `dt`), and what no workload used is charged to `idle`, so
//!   workloads and idle add up to the GPU's energy.
//! - Held: `dt * share * part of the GPU` for every holding.
//! - Idle: a holding is idle from the start of an interval in which it
//!   used less than the threshold of its device, until its mean use since
//!   then reaches the threshold. Where use is not measured (A100 MIG, a
//!   driver without per-process utilization), idle means no process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use crate::snapshot::{
    GpmMetric, GpuState, UnattributedEnergy, UnattributedReason, UsageAccount, UsageEngine,
    Workload, WorkloadHolding, WorkloadKind, WorkloadUsage,
};

/// How long counters of a workload that no longer holds a device are
/// still exported, so that every scrape interval sees their last value.
pub const RETENTION: Duration = Duration::from_secs(300);

/// How long a GPU's accounting waits for the pids it measured to be
/// resolved to their workloads before charging them to `unknown`.
const RESOLVE_WAIT: Duration = Duration::from_secs(10);

/// (GPU index, GPU instance, compute instance).
type Device = (u32, Option<u32>, Option<u32>);

/// SM, memory, encoder, decoder seconds.
type Seconds = [f64; 4];

struct Baseline {
    uuid: String,
    at: SystemTime,
    epoch: Option<u64>,
    energy: Option<f64>,
    pids: HashMap<u32, Seconds>,
    /// Since when the accounting waits for unresolved pids.
    waiting_since: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy)]
struct Idle {
    since: SystemTime,
    sm_at: f64,
}

struct Account {
    sm: Option<f64>,
    engines: [Option<f64>; 3],
    energy: Option<f64>,
    held: f64,
    idle: Option<Idle>,
    /// A current holding (idle is reported only for these).
    holding: bool,
    touched: Instant,
}

struct Owner {
    device: Device,
    workload: Workload,
    seen: Instant,
}

pub struct Accountant {
    limit: usize,
    idle_threshold: f64,
    baselines: HashMap<u32, Baseline>,
    owners: HashMap<(u32, u32), Owner>,
    /// By device, then workload: a holding's account is found without
    /// copying its workload.
    accounts: BTreeMap<Device, BTreeMap<Workload, Account>>,
    /// How many accounts there are, for the limit.
    count: usize,
    unattributed: BTreeMap<(u32, UnattributedReason), f64>,
    /// When each GPU's unattributed energy was last added to.
    unattributed_touched: HashMap<u32, Instant>,
}

/// The compute slices of a GPU instance profile name (`3g.40gb` -> 3).
pub fn profile_slices(profile: &str) -> Option<u32> {
    profile
        .split(['.', '+'])
        .find_map(|part| part.strip_suffix('g')?.parse().ok())
}

fn seconds(p: &crate::snapshot::PidUsage) -> Seconds {
    [
        p.sm_seconds,
        p.memory_seconds,
        p.encoder_seconds,
        p.decoder_seconds,
    ]
}

fn elapsed(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).map_or(0.0, |d| d.as_secs_f64())
}

/// What one interval of one GPU measured, per device and workload.
#[derive(Default)]
struct Interval {
    /// Seconds per device and workload where measured.
    used: BTreeMap<Device, BTreeMap<Workload, Seconds>>,
    /// SM seconds measured on the GPU that no known workload holds (a MIG
    /// instance without holders).
    unknown_sm: f64,
    /// Whether the GPU's use is measured at all.
    measured: bool,
    /// Part of the GPU each device is (MIG: slices; whole GPU: 1).
    weights: HashMap<(u32, Option<u32>), f64>,
}

impl Accountant {
    pub fn new(limit: usize, idle_threshold: f64) -> Self {
        Accountant {
            limit,
            idle_threshold,
            baselines: HashMap::new(),
            owners: HashMap::new(),
            accounts: BTreeMap::new(),
            count: 0,
            unattributed: BTreeMap::new(),
            unattributed_touched: HashMap::new(),
        }
    }

    /// Accounts every GPU's interval since the last call and returns the
    /// counters. `holdings`: every holding of the snapshot (before the
    /// export limit); `by_pid`: the workloads of resolved pids.
    pub fn update(
        &mut self,
        gpus: &[GpuState],
        holdings: &[WorkloadHolding],
        by_pid: &HashMap<u32, Workload>,
    ) -> WorkloadUsage {
        let now = Instant::now();
        let mut newest = SystemTime::UNIX_EPOCH;
        for g in gpus {
            if let Some(at) = g.last_sample {
                newest = newest.max(at);
            }
            self.account_gpu(g, holdings, by_pid, now);
        }
        let held: BTreeSet<(Device, &Workload)> = holdings
            .iter()
            .map(|h| ((h.gpu, h.gpu_instance, h.compute_instance), &h.workload))
            .collect();
        for (device, accounts) in &mut self.accounts {
            for (workload, a) in accounts.iter_mut() {
                a.holding = held.contains(&(*device, workload));
            }
            // A workload that left stays a while, unless it never counted
            // anything (a holding seen only before its processes resolved).
            accounts.retain(|_, a| {
                a.holding
                    || (now.duration_since(a.touched) < RETENTION
                        && (a.held > 0.0 || a.sm.is_some_and(|s| s > 0.0)))
            });
        }
        self.accounts.retain(|_, accounts| !accounts.is_empty());
        self.count = self.accounts.values().map(BTreeMap::len).sum();
        self.owners
            .retain(|_, o| now.duration_since(o.seen) < RETENTION);
        let known: BTreeSet<u32> = gpus.iter().map(|g| g.index).collect();
        self.baselines.retain(|gpu, _| known.contains(gpu));
        self.report(newest)
    }

    /// The account of a workload on a device, created (its counters at 0,
    /// so that a rate over them starts from its first scrape) if the limit
    /// allows.
    fn open(&mut self, device: Device, workload: &Workload, now: Instant) -> Option<&mut Account> {
        let Accountant {
            accounts,
            count,
            limit,
            ..
        } = self;
        let on_device = accounts.entry(device).or_default();
        if !on_device.contains_key(workload) {
            if *count >= *limit {
                return None;
            }
            *count += 1;
            on_device.insert(
                workload.clone(),
                Account {
                    sm: None,
                    engines: [None; 3],
                    energy: None,
                    held: 0.0,
                    idle: None,
                    holding: false,
                    touched: now,
                },
            );
        }
        on_device.get_mut(workload)
    }

    fn account_gpu(
        &mut self,
        g: &GpuState,
        holdings: &[WorkloadHolding],
        by_pid: &HashMap<u32, Workload>,
        now: Instant,
    ) {
        let (Some(r), Some(at)) = (&g.readings, g.last_sample) else {
            return;
        };
        let Some(u) = &r.usage else { return };
        let pids: HashMap<u32, Seconds> = u
            .pids
            .iter()
            .flatten()
            .map(|p| (p.pid, seconds(p)))
            .collect();
        let fresh = Baseline {
            uuid: g.uuid.clone(),
            at,
            epoch: u.pids.as_ref().map(|_| u.epoch),
            energy: r.energy_joules,
            pids,
            waiting_since: None,
        };
        let Some(base) = self.baselines.get(&g.index).filter(|b| b.uuid == g.uuid) else {
            self.baselines.insert(g.index, fresh);
            return;
        };
        let (from, base_energy, waiting_since) = (base.at, base.energy, base.waiting_since);
        let dt = elapsed(from, at);
        if dt <= 0.0 {
            return;
        }
        let same_epoch = base.epoch == fresh.epoch;
        let deltas: Vec<(u32, Seconds)> = fresh
            .pids
            .iter()
            .map(|(pid, now_s)| {
                let before = same_epoch
                    .then(|| base.pids.get(pid))
                    .flatten()
                    .copied()
                    .unwrap_or_default();
                // A total below its last value was counted afresh.
                let d: Seconds = std::array::from_fn(|i| {
                    if now_s[i] >= before[i] {
                        now_s[i] - before[i]
                    } else {
                        now_s[i]
                    }
                });
                (*pid, d)
            })
            .filter(|(_, d)| d.iter().any(|v| *v > 0.0))
            .collect();
        let held_here: Vec<&WorkloadHolding> =
            holdings.iter().filter(|h| h.gpu == g.index).collect();
        let interval = match u.pids {
            Some(_) => match self.whole_gpu(g, &deltas, by_pid, now) {
                Some(i) => i,
                None => {
                    // Pids not resolved yet: wait (their totals keep
                    // growing, nothing is lost), but not for ever.
                    let since = waiting_since.unwrap_or(at);
                    if elapsed(since, at) < RESOLVE_WAIT.as_secs_f64() {
                        if let Some(b) = self.baselines.get_mut(&g.index) {
                            b.waiting_since = Some(since);
                        }
                        return;
                    }
                    self.whole_gpu_unresolved(g, &deltas, by_pid, now)
                }
            },
            None => mig(g, u.mig_compute_slices, &held_here, dt),
        };
        // A driver reload restarts the energy counter: that interval's
        // energy is unknown.
        let energy = base_energy
            .zip(r.energy_joules)
            .map(|(b, e)| e - b)
            .filter(|e| *e >= 0.0);
        let with_processes = with_processes(g, by_pid);
        self.charge(
            g.index,
            from,
            at,
            dt,
            energy,
            &interval,
            &held_here,
            &with_processes,
            now,
        );
        self.baselines.insert(g.index, fresh);
    }

    /// Seconds per workload of a GPU with per-process utilization, or
    /// `None` while a pid NVML lists is not resolved yet.
    fn whole_gpu(
        &mut self,
        g: &GpuState,
        deltas: &[(u32, Seconds)],
        by_pid: &HashMap<u32, Workload>,
        now: Instant,
    ) -> Option<Interval> {
        // Every listed pid, not only the measured ones: an MPS server's
        // time goes to its clients.
        if !deltas.is_empty() && listed(g).keys().any(|pid| !by_pid.contains_key(pid)) {
            return None;
        }
        Some(self.whole_gpu_unresolved(g, deltas, by_pid, now))
    }

    /// As `whole_gpu`, charging pids nobody resolved to `unknown`.
    fn whole_gpu_unresolved(
        &mut self,
        g: &GpuState,
        deltas: &[(u32, Seconds)],
        by_pid: &HashMap<u32, Workload>,
        now: Instant,
    ) -> Interval {
        let listed = listed(g);
        for (pid, device) in &listed {
            let Some(w) = by_pid.get(pid) else { continue };
            match self.owners.get_mut(&(g.index, *pid)) {
                Some(o) if o.device == *device && o.workload == *w => o.seen = now,
                _ => {
                    self.owners.insert(
                        (g.index, *pid),
                        Owner {
                            device: *device,
                            workload: w.clone(),
                            seen: now,
                        },
                    );
                }
            }
        }
        let mut deltas: Vec<(u32, Seconds)> = deltas.to_vec();
        // MPS: the one compute process that is not a client is the server
        // whose context the clients share.
        let clients = g
            .readings
            .as_ref()
            .and_then(|r| r.usage.as_ref())
            .map(|u| u.mps_clients.clone())
            .unwrap_or_default();
        let servers: Vec<u32> = g
            .readings
            .iter()
            .flat_map(|r| r.compute_processes.iter().flatten())
            .map(|p| p.pid)
            .filter(|p| !clients.contains(p))
            .collect();
        if let ([server], false) = (servers.as_slice(), clients.is_empty()) {
            if let Some(i) = deltas.iter().position(|(p, _)| p == server) {
                let (_, d) = deltas.remove(i);
                let n = clients.len() as f64;
                for c in &clients {
                    deltas.push((*c, d.map(|v| v / n)));
                }
            }
        }
        let mut interval = Interval {
            measured: true,
            ..Interval::default()
        };
        interval.weights.insert((g.index, None), 1.0);
        for (pid, d) in deltas {
            let (device, workload) = match (by_pid.get(&pid), self.owners.get(&(g.index, pid))) {
                (Some(w), _) if listed.contains_key(&pid) => (listed[&pid], w.clone()),
                (_, Some(o)) => (o.device, o.workload.clone()),
                _ => ((g.index, None, None), Workload::of(WorkloadKind::Unknown)),
            };
            let sum = interval
                .used
                .entry(device)
                .or_default()
                .entry(workload)
                .or_default();
            for i in 0..4 {
                sum[i] += d[i];
            }
        }
        interval
    }

    #[allow(clippy::too_many_arguments)]
    fn charge(
        &mut self,
        gpu: u32,
        from: SystemTime,
        at: SystemTime,
        dt: f64,
        energy: Option<f64>,
        interval: &Interval,
        held_here: &[&WorkloadHolding],
        with_processes: &BTreeSet<(Device, &Workload)>,
        now: Instant,
    ) {
        let gpu_sm: f64 = interval
            .used
            .values()
            .flat_map(BTreeMap::values)
            .map(|s| s[0])
            .sum::<f64>()
            + interval.unknown_sm;
        let busy = gpu_sm / dt;
        let scale = if busy > 1.0 { 1.0 / busy } else { 1.0 };
        let joules = |sm: f64| energy.map(|e| e * sm / dt * scale);
        let mut over_limit = 0.0;
        let used = interval
            .used
            .iter()
            .flat_map(|(device, m)| m.iter().map(move |(w, s)| (device, w, s)));
        for (device, workload, used) in used {
            let Some(a) = self.open(*device, workload, now) else {
                over_limit += joules(used[0]).unwrap_or(0.0);
                continue;
            };
            a.touched = now;
            a.sm = Some(a.sm.unwrap_or(0.0) + used[0]);
            if device.1.is_none() {
                for (e, v) in a.engines.iter_mut().zip(&used[1..]) {
                    *e = Some(e.unwrap_or(0.0) + v);
                }
            }
            if let Some(j) = joules(used[0]) {
                a.energy = Some(a.energy.unwrap_or(0.0) + j);
            }
        }
        for h in held_here {
            let device = (h.gpu, h.gpu_instance, h.compute_instance);
            let weight = interval
                .weights
                .get(&(h.gpu, h.gpu_instance))
                .copied()
                .unwrap_or(1.0);
            let threshold = self.idle_threshold;
            let Some(a) = self.open(device, &h.workload, now) else {
                continue;
            };
            a.touched = now;
            a.holding = true;
            a.held += dt * h.share * weight;
            if interval.measured {
                let sm = a.sm.unwrap_or(0.0);
                a.sm = Some(sm);
                if energy.is_some() {
                    a.energy = Some(a.energy.unwrap_or(0.0));
                }
                let used = interval
                    .used
                    .get(&device)
                    .and_then(|m| m.get(&h.workload))
                    .map_or(0.0, |s| s[0]);
                a.idle = match a.idle {
                    Some(i) if (sm - i.sm_at) / (elapsed(i.since, at) * weight) >= threshold => {
                        None
                    }
                    Some(i) => Some(i),
                    None if used / (dt * weight) < threshold => Some(Idle {
                        since: from,
                        sm_at: sm - used,
                    }),
                    None => None,
                };
            } else {
                let busy = with_processes.contains(&(device, &h.workload));
                a.idle = match (busy, a.idle) {
                    (true, _) => None,
                    (false, Some(i)) => Some(i),
                    (false, None) => Some(Idle {
                        since: from,
                        sm_at: 0.0,
                    }),
                };
            }
        }
        if let (Some(e), true) = (energy, interval.measured) {
            let mut add = |reason, joules: f64| {
                *self.unattributed.entry((gpu, reason)).or_insert(0.0) += joules;
            };
            add(UnattributedReason::Idle, e * (1.0 - busy).max(0.0));
            if over_limit > 0.0 {
                add(UnattributedReason::OverLimit, over_limit);
            }
            if interval.unknown_sm > 0.0 {
                add(
                    UnattributedReason::Unknown,
                    e * interval.unknown_sm / dt * scale,
                );
            }
            self.unattributed_touched.insert(gpu, now);
        }
    }

    fn report(&self, at: SystemTime) -> WorkloadUsage {
        let accounts = self
            .accounts
            .iter()
            .flat_map(|(device, m)| m.iter().map(move |(w, a)| (device, w, a)))
            .map(|(device, workload, a)| UsageAccount {
                gpu: device.0,
                gpu_instance: device.1,
                compute_instance: device.2,
                workload: workload.clone(),
                sm_seconds: a.sm,
                engine_seconds: UsageEngine::ALL
                    .iter()
                    .zip(a.engines)
                    .filter_map(|(e, v)| v.map(|v| (*e, v)))
                    .collect(),
                energy_joules: a.energy,
                held_seconds: a.held,
                idle_seconds: a.idle.filter(|_| a.holding).map(|i| elapsed(i.since, at)),
            })
            .collect();
        let unattributed = self
            .unattributed
            .iter()
            .filter(|((gpu, _), _)| self.baselines.contains_key(gpu))
            .map(|(&(gpu, reason), &joules)| UnattributedEnergy {
                gpu,
                reason,
                joules,
            })
            .collect();
        WorkloadUsage {
            accounts,
            unattributed,
        }
    }
}

/// The device of every process NVML lists on the GPU.
fn listed(g: &GpuState) -> HashMap<u32, Device> {
    g.readings
        .iter()
        .flat_map(|r| {
            r.compute_processes
                .iter()
                .chain(r.graphics_processes.iter())
                .flatten()
        })
        .map(|p| (p.pid, (g.index, p.gpu_instance, p.compute_instance)))
        .collect()
}

/// The (device, workload) pairs that have a process NVML lists.
fn with_processes<'a>(
    g: &GpuState,
    by_pid: &'a HashMap<u32, Workload>,
) -> BTreeSet<(Device, &'a Workload)> {
    listed(g)
        .into_iter()
        .filter_map(|(pid, device)| Some((device, by_pid.get(&pid)?)))
        .collect()
}

/// SM seconds of a MIG-enabled GPU's holders over `dt`, from each GPU
/// instance's GPM graphics activity times its part of the GPU, split between the
/// instance's holders by their share. Not measured when an instance has no
/// activity (A100) or the GPU's slices are unknown.
fn mig(g: &GpuState, total_slices: Option<u32>, held: &[&WorkloadHolding], dt: f64) -> Interval {
    let mut interval = Interval::default();
    let (Some(r), Some(total)) = (&g.readings, total_slices.filter(|t| *t > 0)) else {
        return interval;
    };
    let activity: Option<Vec<(u32, f64, f64)>> = r
        .mig
        .iter()
        .map(|gi| {
            let sm = gi
                .activity
                .iter()
                .find(|(m, _)| *m == GpmMetric::Graphics)
                .map(|(_, v)| *v)?;
            let slices = profile_slices(&gi.profile)?;
            Some((gi.gpu_instance, sm, f64::from(slices) / f64::from(total)))
        })
        .collect();
    let Some(activity) = activity.filter(|a| !a.is_empty()) else {
        return interval;
    };
    interval.measured = true;
    for (gi, sm, weight) in activity {
        interval.weights.insert((g.index, Some(gi)), weight);
        let seconds = sm * weight * dt;
        let holders: Vec<&&WorkloadHolding> =
            held.iter().filter(|h| h.gpu_instance == Some(gi)).collect();
        if holders.is_empty() {
            interval.unknown_sm += seconds;
        }
        for h in holders {
            let device = (h.gpu, h.gpu_instance, h.compute_instance);
            interval
                .used
                .entry(device)
                .or_default()
                .entry(h.workload.clone())
                .or_default()[0] += seconds * h.share;
        }
    }
    interval
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{
        GpuReadings, MigComputeInstance, MigGpuInstance, PidUsage, Process, UsageReadings,
    };

    const T0: u64 = 1_800_000_000;

    fn at(s: f64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(T0 as f64 + s)
    }

    fn job(id: &str) -> Workload {
        let mut w = Workload::of(WorkloadKind::Slurm);
        w.slurm_job = Some(id.into());
        w
    }

    fn process(pid: u32, mig: Option<u32>) -> Process {
        Process {
            pid,
            name: None,
            used_memory_bytes: Some(1 << 20),
            gpu_instance: mig,
            compute_instance: mig.map(|_| 0),
        }
    }

    /// GPU 0 polled at `t` s: its processes, their SM seconds so far
    /// (epoch 1), its energy.
    fn gpu(t: f64, procs: &[u32], sm: &[(u32, f64)], energy: f64) -> GpuState {
        let mut g = GpuState::with_readings(
            0,
            GpuReadings {
                energy_joules: Some(energy),
                compute_processes: Some(procs.iter().map(|p| process(*p, None)).collect()),
                graphics_processes: Some(vec![]),
                usage: Some(UsageReadings {
                    epoch: 1,
                    pids: Some(
                        sm.iter()
                            .map(|(pid, s)| PidUsage {
                                pid: *pid,
                                sm_seconds: *s,
                                ..PidUsage::default()
                            })
                            .collect(),
                    ),
                    ..UsageReadings::default()
                }),
                ..Default::default()
            },
        );
        g.last_sample = Some(at(t));
        g
    }

    fn holding(w: &Workload, share: f64) -> WorkloadHolding {
        WorkloadHolding {
            gpu: 0,
            gpu_instance: None,
            compute_instance: None,
            workload: w.clone(),
            share,
            memory_used_bytes: None,
        }
    }

    fn account<'a>(u: &'a WorkloadUsage, w: &Workload) -> &'a UsageAccount {
        u.accounts
            .iter()
            .find(|a| &a.workload == w)
            .unwrap_or_else(|| panic!("no account of {w:?}"))
    }

    fn idle_energy(u: &WorkloadUsage) -> f64 {
        u.unattributed
            .iter()
            .filter(|e| e.reason == UnattributedReason::Idle)
            .map(|e| e.joules)
            .sum()
    }

    #[test]
    fn two_jobs_get_their_measured_sm_time_and_energy_and_idle_makes_up_the_rest() {
        let (a, b) = (job("101"), job("102"));
        let by_pid = HashMap::from([(1, a.clone()), (2, b.clone())]);
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(256, 0.01);
        acc.update(
            &[gpu(0.0, &[1, 2], &[(1, 0.0), (2, 0.0)], 1000.0)],
            &held,
            &by_pid,
        );
        // 10 s at 60 % and 20 %, then 10 s more; the GPU used 4000 J.
        acc.update(
            &[gpu(10.0, &[1, 2], &[(1, 6.0), (2, 2.0)], 3000.0)],
            &held,
            &by_pid,
        );
        let u = acc.update(
            &[gpu(20.0, &[1, 2], &[(1, 12.0), (2, 4.0)], 5000.0)],
            &held,
            &by_pid,
        );
        let (ua, ub) = (account(&u, &a), account(&u, &b));
        assert_eq!((ua.sm_seconds, ub.sm_seconds), (Some(12.0), Some(4.0)));
        let (ea, eb) = (ua.energy_joules.unwrap(), ub.energy_joules.unwrap());
        assert!(
            (ea - 2400.0).abs() < 1e-6 && (eb - 800.0).abs() < 1e-6,
            "{ea} {eb}"
        );
        assert!((ea + eb + idle_energy(&u) - 4000.0).abs() < 1e-6);
        assert_eq!((ua.held_seconds, ub.held_seconds), (10.0, 10.0));
        assert_eq!((ua.idle_seconds, ub.idle_seconds), (None, None));
    }

    #[test]
    fn an_ended_pid_still_counts_for_its_workload_and_restarts_count_afresh() {
        let a = job("101");
        let by_pid = HashMap::from([(1, a.clone())]);
        let held = [holding(&a, 1.0)];
        let mut acc = Accountant::new(256, 0.01);
        acc.update(&[gpu(0.0, &[1], &[(1, 0.0)], 0.0)], &held, &by_pid);
        acc.update(&[gpu(1.0, &[1], &[(1, 0.5)], 100.0)], &held, &by_pid);
        // Pid 1 ended: NVML lists it no more, its last samples arrive, and
        // the resolver has forgotten it.
        let gone = HashMap::new();
        let u = acc.update(&[gpu(2.0, &[], &[(1, 0.9)], 200.0)], &[], &gone);
        assert_eq!(account(&u, &a).sm_seconds, Some(0.9));
        // A new sampler (epoch 2) starts its totals from 0: counted afresh.
        let mut g = gpu(3.0, &[], &[(1, 0.2)], 300.0);
        g.readings.as_mut().unwrap().usage.as_mut().unwrap().epoch = 2;
        let u = acc.update(&[g], &[], &gone);
        assert!((account(&u, &a).sm_seconds.unwrap() - 1.1).abs() < 1e-9);
    }

    #[test]
    fn a_held_gpu_without_use_is_idle_until_its_mean_use_reaches_the_threshold() {
        let (a, b) = (job("201"), job("202"));
        let by_pid = HashMap::from([(1, b.clone())]);
        // Job 201 holds the GPU (an allocation) but runs nothing; 202 runs.
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(256, 0.01);
        acc.update(&[gpu(0.0, &[1], &[(1, 0.0)], 0.0)], &held, &by_pid);
        let u = acc.update(&[gpu(60.0, &[1], &[(1, 30.0)], 0.0)], &held, &by_pid);
        assert_eq!(account(&u, &a).idle_seconds, Some(60.0));
        assert_eq!(account(&u, &b).idle_seconds, None);
        // 202 stops using the GPU for two hours, then uses 0.5 % of it.
        let u = acc.update(&[gpu(7260.0, &[1], &[(1, 30.0)], 0.0)], &held, &by_pid);
        assert_eq!(account(&u, &b).idle_seconds, Some(7200.0));
        let u = acc.update(&[gpu(7320.0, &[1], &[(1, 30.3)], 0.0)], &held, &by_pid);
        assert_eq!(
            account(&u, &b).idle_seconds,
            Some(7260.0),
            "0.3 s in 2 h stays idle"
        );
        // Then it works: its mean since it went idle passes 1 %.
        let u = acc.update(&[gpu(7500.0, &[1], &[(1, 120.0)], 0.0)], &held, &by_pid);
        assert_eq!(account(&u, &b).idle_seconds, None);
        assert_eq!(account(&u, &a).idle_seconds, Some(7500.0));
        // A holding that goes away has no idle series, its counters stay.
        let u = acc.update(
            &[gpu(7510.0, &[1], &[(1, 121.0)], 0.0)],
            &held[1..],
            &by_pid,
        );
        assert_eq!(account(&u, &a).idle_seconds, None);
        assert_eq!(account(&u, &a).held_seconds, 7500.0 * 0.5);
    }

    #[test]
    fn mps_clients_split_the_servers_context_and_unresolved_pids_wait() {
        let (a, b, daemon) = (job("1"), job("2"), Workload::of(WorkloadKind::Systemd));
        let mut g0 = gpu(0.0, &[9, 1, 2], &[(9, 0.0)], 0.0);
        let mut g1 = gpu(10.0, &[9, 1, 2], &[(9, 4.0)], 1000.0);
        for g in [&mut g0, &mut g1] {
            g.readings
                .as_mut()
                .unwrap()
                .usage
                .as_mut()
                .unwrap()
                .mps_clients = vec![1, 2];
        }
        let held = [
            holding(&a, 1.0 / 3.0),
            holding(&b, 1.0 / 3.0),
            holding(&daemon, 1.0 / 3.0),
        ];
        let mut acc = Accountant::new(256, 0.01);
        let partial = HashMap::from([(9, daemon.clone()), (1, a.clone())]);
        acc.update(&[g0], &held, &partial);
        // Client 2 is not resolved yet: nothing is charged, nothing lost.
        let u = acc.update(&[g1.clone()], &held, &partial);
        assert!(u
            .accounts
            .iter()
            .all(|a| a.sm_seconds.unwrap_or(0.0) == 0.0));
        let all = HashMap::from([(9, daemon.clone()), (1, a.clone()), (2, b.clone())]);
        g1.last_sample = Some(at(11.0));
        let u = acc.update(&[g1], &held, &all);
        assert_eq!(account(&u, &a).sm_seconds, Some(2.0));
        assert_eq!(account(&u, &b).sm_seconds, Some(2.0));
        assert_eq!(account(&u, &daemon).sm_seconds, Some(0.0));
    }

    #[test]
    fn over_the_limit_energy_is_charged_apart() {
        let (a, b) = (job("1"), job("2"));
        let by_pid = HashMap::from([(1, a.clone()), (2, b.clone())]);
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(1, 0.01);
        acc.update(
            &[gpu(0.0, &[1, 2], &[(1, 0.0), (2, 0.0)], 0.0)],
            &held,
            &by_pid,
        );
        let u = acc.update(
            &[gpu(10.0, &[1, 2], &[(1, 5.0), (2, 5.0)], 1000.0)],
            &held,
            &by_pid,
        );
        assert_eq!(u.accounts.len(), 1);
        let over: f64 = u
            .unattributed
            .iter()
            .filter(|e| e.reason == UnattributedReason::OverLimit)
            .map(|e| e.joules)
            .sum();
        assert!((over - 500.0).abs() < 1e-6, "{over}");
        let total: f64 = u
            .accounts
            .iter()
            .filter_map(|a| a.energy_joules)
            .sum::<f64>()
            + u.unattributed.iter().map(|e| e.joules).sum::<f64>();
        assert!((total - 1000.0).abs() < 1e-6);
    }

    fn mig_gpu(t: f64, activity: Option<[f64; 2]>, energy: f64) -> GpuState {
        let mut g = gpu(t, &[], &[], energy);
        let r = g.readings.as_mut().unwrap();
        r.compute_processes = Some(vec![process(1, Some(1))]);
        r.usage = Some(UsageReadings {
            epoch: 1,
            mig_compute_slices: Some(7),
            ..UsageReadings::default()
        });
        r.mig = [(1, "3g.40gb"), (2, "4g.40gb")]
            .iter()
            .enumerate()
            .map(|(i, (id, profile))| MigGpuInstance {
                gpu_instance: *id,
                profile: (*profile).into(),
                memory: None,
                activity: activity
                    .map(|a| vec![(GpmMetric::Graphics, a[i])])
                    .unwrap_or_default(),
                compute_instances: vec![MigComputeInstance {
                    compute_instance: 0,
                    mig_uuid: format!("MIG-{id}"),
                }],
            })
            .collect();
        g
    }

    #[test]
    fn mig_instances_charge_their_gpm_activity_by_slices() {
        let a = job("1");
        let by_pid = HashMap::from([(1, a.clone())]);
        let held = [WorkloadHolding {
            gpu_instance: Some(1),
            compute_instance: Some(0),
            ..holding(&a, 1.0)
        }];
        let mut acc = Accountant::new(256, 0.01);
        acc.update(&[mig_gpu(0.0, Some([0.5, 0.25]), 0.0)], &held, &by_pid);
        let u = acc.update(&[mig_gpu(7.0, Some([0.5, 0.25]), 700.0)], &held, &by_pid);
        let ua = account(&u, &a);
        // 3 of 7 slices at 50 % for 7 s; instance 2 (4 slices at 25 %)
        // has no holder: its energy is charged to `unknown`.
        assert!((ua.sm_seconds.unwrap() - 1.5).abs() < 1e-9);
        assert!((ua.energy_joules.unwrap() - 150.0).abs() < 1e-6);
        assert!((ua.held_seconds - 3.0).abs() < 1e-9);
        let by_reason: BTreeMap<_, _> = u
            .unattributed
            .iter()
            .map(|e| (e.reason, e.joules))
            .collect();
        assert!((by_reason[&UnattributedReason::Unknown] - 100.0).abs() < 1e-6);
        assert!((by_reason[&UnattributedReason::Idle] - 450.0).abs() < 1e-6);
    }

    #[test]
    fn without_measured_use_idle_means_no_process() {
        let (a, b) = (job("1"), job("2"));
        let by_pid = HashMap::from([(1, a.clone())]);
        let held = [
            WorkloadHolding {
                gpu_instance: Some(1),
                compute_instance: Some(0),
                ..holding(&a, 1.0)
            },
            WorkloadHolding {
                gpu_instance: Some(2),
                compute_instance: Some(0),
                ..holding(&b, 1.0)
            },
        ];
        let mut acc = Accountant::new(256, 0.01);
        acc.update(&[mig_gpu(0.0, None, 0.0)], &held, &by_pid);
        let u = acc.update(&[mig_gpu(30.0, None, 100.0)], &held, &by_pid);
        assert_eq!(account(&u, &a).idle_seconds, None, "runs a process");
        assert_eq!(account(&u, &b).idle_seconds, Some(30.0));
        assert_eq!(account(&u, &a).sm_seconds, None, "A100 MIG: not measured");
        assert_eq!(account(&u, &a).energy_joules, None);
        assert!(u.unattributed.is_empty());
    }

    #[test]
    fn slices_of_profiles() {
        assert_eq!(profile_slices("1g.10gb"), Some(1));
        assert_eq!(profile_slices("3g.40gb"), Some(3));
        assert_eq!(profile_slices("1g.10gb+me"), Some(1));
        assert_eq!(profile_slices("7g.80gb"), Some(7));
        assert_eq!(profile_slices("weird"), None);
    }
}
