//! Measured use per workload: SM (and memory, encoder, decoder) busy
//! seconds, the workload's part of its GPU's energy in two views,
//! device-seconds held, and how long a holding has been idle. Counters
//! kept here, in the join step (`crate::join`), from one snapshot to the next: they
//! grow by what each poll measured, survive scrape gaps, and start at 0
//! when the exporter does (a counter reset to Prometheus).
//!
//! Per GPU and interval between two of its polls (`dt`):
//! - Whole GPU: each pid's SM seconds come from the sampler
//!   (`src/nvml/sampler/workload_usage/`); a workload gets those of its
//!   pids, an ended pid those of the workload it last belonged to.
//! - MPS: the driver samples the clients' work under the server's pid
//!   alone (a real H200 named only the server: tests/device/h200-580.159.04).
//!   The server is no workload: its SM time is its clients', split between
//!   them by the CPU time each used in the previous interval (a client
//!   waiting on no kernel uses none; an interval in which none used any
//!   is split as the last one in which some did), evenly where that is
//!   unknown, and kept apart as an estimate (`mps_sm`). A client NVML does name is
//!   measured like any process.
//! - MIG: NVML has no per-process utilization. A GPU instance's graphics
//!   engine activity (GPM: the time a kernel ran, what per-process SM
//!   utilization measures on a whole GPU) times its part of the GPU
//!   (compute slices of the instance over those of the GPU) times `dt` is
//!   split between the instance's holders by their share.
//! - Energy, measured-use view: the GPU's energy counter grew by `dE`; a
//!   workload gets `dE * sm / dt` (scaled down when the workloads' SM
//!   time adds up to more than `dt`), and what no workload used is charged
//!   to `idle`, so workloads and idle add up to the GPU's energy.
//! - Energy, holder's view: every holding gets `dE * share * part of the
//!   GPU`, idle or not, so whoever holds a GPU alone pays all of it, and
//!   A100 MIG holders (no activity measured) pay their slices' part.
//! - Held: `dt * share * part of the GPU` for every holding.
//! - Idle: a holding is idle from the start of an interval in which it
//!   used less than the threshold of its device, until its mean use since
//!   then reaches the threshold. Where use is not measured (A100 MIG, a
//!   driver without per-process utilization), idle means no process.
//!
//! At most `--workloads.limit` accounts: the holdings the snapshot exports
//! (no more than the limit) always get one; an account of a workload that
//! no longer holds a device stays `RETENTION` for its last increments to
//! be scraped, unless a live holding needs its slot (the oldest goes
//! first). Measured use of a workload that holds nothing (its processes
//! ended) gets no new slot beyond the limit: its energy is `over_limit`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use crate::snapshot::{
    GpmMetric, GpuState, UnattributedEnergy, UnattributedReason, UsageAccount, UsageEngine,
    Workload, WorkloadHolding, WorkloadKind, WorkloadUsage,
};

/// How long counters of a workload that no longer holds a device are
/// still exported, so that every scrape interval sees their last value;
/// a live holding that needs the slot takes it first.
pub const RETENTION: Duration = Duration::from_secs(300);

/// How long a GPU's accounting waits for the pids it measured to be
/// resolved to their workloads before charging them to `unknown`.
const RESOLVE_WAIT: Duration = Duration::from_secs(10);

/// A holding idle for less than this is not reported idle: the driver
/// names one pid per 200 ms sample, so a job with a small part of a shared
/// GPU can go unnamed for a poll or two shorter than this (ten samples).
const MIN_IDLE: Duration = Duration::from_secs(2);

/// The MPS server's executable, as NVML names its process.
const MPS_SERVER: &str = "nvidia-cuda-mps-server";

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
    sampled: f64,
    /// CPU time (clock ticks) of the MPS clients.
    cpu: HashMap<u32, f64>,
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
    mps_sm: Option<f64>,
    engines: [Option<f64>; 3],
    energy: Option<f64>,
    mps_energy: Option<f64>,
    held_energy: Option<f64>,
    held: f64,
    idle: Option<Idle>,
    /// A current holding (idle is reported only for these; the others
    /// give way at the limit).
    holding: bool,
    touched: Instant,
}

impl Account {
    /// SM seconds, measured and estimated.
    fn sm_total(&self) -> f64 {
        self.sm.unwrap_or(0.0) + self.mps_sm.unwrap_or(0.0)
    }
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
    /// Holdings refused an account in this update.
    refused: u64,
    unattributed: BTreeMap<(u32, UnattributedReason), f64>,
    /// When each GPU's unattributed energy was last added to.
    unattributed_touched: HashMap<u32, Instant>,
    /// Per GPU, the MPS clients' CPU time in the last interval any used
    /// some: an interval without a new reading, or in which the clients
    /// waited on their kernels without spinning, is split as that one.
    mps_weights: HashMap<u32, HashMap<u32, f64>>,
}

/// The compute slices of a GPU instance profile name (`3g.40gb` -> 3).
pub fn profile_slices(profile: &str) -> Option<u32> {
    profile
        .split(['.', '+'])
        .find_map(|part| part.strip_suffix('g')?.parse().ok())
}

/// The MPS server of a GPU whose MPS clients NVML lists: the compute
/// process NVML names `nvidia-cuda-mps-server`, else the one compute
/// process that is no client. None where neither settles it (several
/// unnamed non-clients: MPS beside ordinary processes).
pub fn mps_server(g: &GpuState) -> Option<u32> {
    let r = g.readings.as_ref()?;
    let clients = &r.usage.as_ref()?.mps_clients;
    if clients.is_empty() {
        return None;
    }
    let others: Vec<&crate::snapshot::Process> = r
        .compute_processes
        .iter()
        .flatten()
        .filter(|p| !clients.contains(&p.pid))
        .collect();
    let named = |p: &&&crate::snapshot::Process| {
        p.name
            .as_deref()
            .and_then(|n| n.split_whitespace().next())
            .and_then(|exe| exe.rsplit('/').next())
            == Some(MPS_SERVER)
    };
    match (others.iter().find(named), others.as_slice()) {
        (Some(p), _) | (None, [p]) => Some(p.pid),
        _ => None,
    }
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

fn add(v: &mut Option<f64>, by: f64) {
    *v = Some(v.unwrap_or(0.0) + by);
}

/// What one interval of one GPU measured, per device and workload.
#[derive(Default)]
struct Interval {
    /// Seconds per device and workload where measured.
    used: BTreeMap<Device, BTreeMap<Workload, Seconds>>,
    /// MPS clients' estimated SM seconds.
    estimated: BTreeMap<Device, BTreeMap<Workload, f64>>,
    /// The holdings that are MPS clients.
    mps: BTreeSet<(Device, Workload)>,
    /// SM seconds measured on the GPU that no known workload holds (a MIG
    /// instance without holders).
    unknown_sm: f64,
    /// Whether the GPU's use is measured at all.
    measured: bool,
    /// Part of the GPU each device is (MIG: slices; whole GPU: 1).
    weights: HashMap<(u32, Option<u32>), f64>,
    /// Seconds the driver's samples behind the SM seconds cover (0: the
    /// interval itself).
    sampled: f64,
}

/// What `charge` needs of a GPU's interval beyond the interval itself.
struct Charge<'h> {
    gpu: u32,
    from: SystemTime,
    at: SystemTime,
    dt: f64,
    energy: Option<f64>,
    held_here: Vec<&'h WorkloadHolding>,
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
            refused: 0,
            unattributed: BTreeMap::new(),
            unattributed_touched: HashMap::new(),
            mps_weights: HashMap::new(),
        }
    }

    /// Accounts every GPU's interval since the last call and returns the
    /// counters. `holdings`: the holdings the snapshot exports (at most the
    /// limit); `by_pid`: the workloads of resolved pids; `cpu`: CPU time in
    /// clock ticks of the MPS clients, as last read.
    pub fn update(
        &mut self,
        gpus: &[GpuState],
        holdings: &[WorkloadHolding],
        by_pid: &HashMap<u32, Workload>,
        cpu: &HashMap<u32, f64>,
    ) -> WorkloadUsage {
        let now = Instant::now();
        let held: BTreeSet<(Device, &Workload)> = holdings
            .iter()
            .map(|h| ((h.gpu, h.gpu_instance, h.compute_instance), &h.workload))
            .collect();
        // First: an account whose workload holds nothing now gives way to
        // a live holding at the limit.
        for (device, accounts) in &mut self.accounts {
            for (workload, a) in accounts.iter_mut() {
                a.holding = held.contains(&(*device, workload));
            }
        }
        self.refused = 0;
        let mut newest = SystemTime::UNIX_EPOCH;
        for g in gpus {
            if let Some(at) = g.last_sample {
                newest = newest.max(at);
            }
            self.account_gpu(g, holdings, by_pid, cpu, now);
        }
        for accounts in self.accounts.values_mut() {
            // A workload that left stays a while, unless it never counted
            // anything (a holding seen only before its processes resolved).
            accounts.retain(|_, a| {
                a.holding
                    || (now.duration_since(a.touched) < RETENTION
                        && (a.held > 0.0 || a.sm_total() > 0.0))
            });
        }
        self.accounts.retain(|_, accounts| !accounts.is_empty());
        self.count = self.accounts.values().map(BTreeMap::len).sum();
        self.owners
            .retain(|_, o| now.duration_since(o.seen) < RETENTION);
        let known: BTreeSet<u32> = gpus.iter().map(|g| g.index).collect();
        self.baselines.retain(|gpu, _| known.contains(gpu));
        self.mps_weights.retain(|gpu, _| known.contains(gpu));
        self.report(newest)
    }

    /// The account of a workload on a device, created (its counters at 0,
    /// so that a rate over them starts from its first scrape) if the limit
    /// allows: for a live holding, by taking the slot of the account that
    /// has held nothing longest.
    fn open(
        &mut self,
        device: Device,
        workload: &Workload,
        now: Instant,
        live: bool,
    ) -> Option<&mut Account> {
        let exists = self
            .accounts
            .get(&device)
            .is_some_and(|m| m.contains_key(workload));
        if !exists {
            if self.count >= self.limit {
                if !live {
                    return None;
                }
                let victim = self
                    .accounts
                    .iter()
                    .flat_map(|(d, m)| m.iter().map(move |(w, a)| (d, w, a)))
                    .filter(|(_, _, a)| !a.holding)
                    .min_by_key(|(_, _, a)| a.touched)
                    .map(|(d, w, _)| (*d, w.clone()))?;
                if let Some(m) = self.accounts.get_mut(&victim.0) {
                    m.remove(&victim.1);
                }
                self.count -= 1;
            }
            self.count += 1;
            self.accounts.entry(device).or_default().insert(
                workload.clone(),
                Account {
                    sm: None,
                    mps_sm: None,
                    engines: [None; 3],
                    energy: None,
                    mps_energy: None,
                    held_energy: None,
                    held: 0.0,
                    idle: None,
                    holding: live,
                    touched: now,
                },
            );
        }
        self.accounts.get_mut(&device)?.get_mut(workload)
    }

    fn account_gpu(
        &mut self,
        g: &GpuState,
        holdings: &[WorkloadHolding],
        by_pid: &HashMap<u32, Workload>,
        cpu: &HashMap<u32, f64>,
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
            sampled: u.sampled_seconds,
            cpu: u
                .mps_clients
                .iter()
                .filter_map(|c| Some((*c, *cpu.get(c)?)))
                .collect(),
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
        let sampled = if same_epoch {
            (fresh.sampled - base.sampled).max(0.0)
        } else {
            fresh.sampled
        };
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
        // Each MPS client's CPU time since the last interval, where both
        // readings are there for every client.
        let cpu_used: Option<HashMap<u32, f64>> = u
            .mps_clients
            .iter()
            .map(|c| {
                let (now_c, before_c) = (fresh.cpu.get(c)?, base.cpu.get(c)?);
                Some((*c, (now_c - before_c).max(0.0)))
            })
            .collect();
        let cpu_used = match cpu_used {
            Some(used) if used.values().sum::<f64>() > 0.0 => {
                self.mps_weights.insert(g.index, used.clone());
                Some(used)
            }
            _ => self.mps_weights.get(&g.index).cloned(),
        };
        let held_here: Vec<&WorkloadHolding> =
            holdings.iter().filter(|h| h.gpu == g.index).collect();
        let mut interval = match u.pids {
            Some(_) => match self.whole_gpu(g, &deltas, by_pid, cpu_used.as_ref(), now) {
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
                    self.whole_gpu_unresolved(g, &deltas, by_pid, cpu_used.as_ref(), now)
                }
            },
            None => mig(g, u.mig_compute_slices, &held_here, dt),
        };
        if u.pids.is_some() {
            interval.sampled = sampled;
        }
        // A driver reload restarts the energy counter: that interval's
        // energy is unknown.
        let energy = base_energy
            .zip(r.energy_joules)
            .map(|(b, e)| e - b)
            .filter(|e| *e >= 0.0);
        let with_processes = with_processes(g, by_pid);
        let charge = Charge {
            gpu: g.index,
            from,
            at,
            dt,
            energy,
            held_here,
        };
        self.charge(&charge, &interval, &with_processes, now);
        self.baselines.insert(g.index, fresh);
    }

    /// Seconds per workload of a GPU with per-process utilization, or
    /// `None` while a pid NVML lists is not resolved yet.
    fn whole_gpu(
        &mut self,
        g: &GpuState,
        deltas: &[(u32, Seconds)],
        by_pid: &HashMap<u32, Workload>,
        cpu_used: Option<&HashMap<u32, f64>>,
        now: Instant,
    ) -> Option<Interval> {
        // Every listed pid, not only the measured ones (an MPS server's
        // time goes to its clients), but the server: it is no workload.
        let server = mps_server(g);
        let unresolved = listed(g)
            .keys()
            .any(|pid| Some(*pid) != server && !by_pid.contains_key(pid));
        if !deltas.is_empty() && unresolved {
            return None;
        }
        Some(self.whole_gpu_unresolved(g, deltas, by_pid, cpu_used, now))
    }

    /// As `whole_gpu`, charging pids nobody resolved to `unknown`.
    fn whole_gpu_unresolved(
        &mut self,
        g: &GpuState,
        deltas: &[(u32, Seconds)],
        by_pid: &HashMap<u32, Workload>,
        cpu_used: Option<&HashMap<u32, f64>>,
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
        let place = |pid: u32| -> (Device, Workload) {
            match (by_pid.get(&pid), self.owners.get(&(g.index, pid))) {
                (Some(w), _) if listed.contains_key(&pid) => (listed[&pid], w.clone()),
                (_, Some(o)) => (o.device, o.workload.clone()),
                _ => ((g.index, None, None), Workload::of(WorkloadKind::Unknown)),
            }
        };
        let mut interval = Interval {
            measured: true,
            ..Interval::default()
        };
        interval.weights.insert((g.index, None), 1.0);
        let mut deltas: Vec<(u32, Seconds)> = deltas.to_vec();
        let clients = g
            .readings
            .as_ref()
            .and_then(|r| r.usage.as_ref())
            .map(|u| u.mps_clients.clone())
            .unwrap_or_default();
        if let (Some(server), false) = (mps_server(g), clients.is_empty()) {
            for c in clients.iter().filter(|c| listed.contains_key(c)) {
                interval.mps.insert(place(*c));
            }
            if let Some(i) = deltas.iter().position(|(p, _)| *p == server) {
                let (_, d) = deltas.remove(i);
                // The server's SM time by its clients' CPU time; evenly
                // where that is unknown or nobody used any.
                let used = |c: &u32| cpu_used.and_then(|u| u.get(c)).copied().unwrap_or(0.0);
                let weights: Vec<f64> = if clients.iter().any(|c| used(c) > 0.0) {
                    clients.iter().map(used).collect()
                } else {
                    vec![1.0; clients.len()]
                };
                let sum: f64 = weights.iter().sum();
                for (c, w) in clients.iter().zip(weights) {
                    let (device, workload) = place(*c);
                    *interval
                        .estimated
                        .entry(device)
                        .or_default()
                        .entry(workload)
                        .or_default() += d[0] * w / sum;
                }
            }
        }
        for (pid, d) in deltas {
            let (device, workload) = place(pid);
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

    fn charge(
        &mut self,
        c: &Charge<'_>,
        interval: &Interval,
        with_processes: &BTreeSet<(Device, &Workload)>,
        now: Instant,
    ) {
        let dt = c.dt;
        let gpu_sm: f64 = interval
            .used
            .values()
            .flat_map(BTreeMap::values)
            .map(|s| s[0])
            .sum::<f64>()
            + interval
                .estimated
                .values()
                .flat_map(BTreeMap::values)
                .sum::<f64>()
            + interval.unknown_sm;
        // The busy share of the samples' own span: an interval's edges fall
        // between samples, so over `dt` one sample more or less would swing
        // it.
        let span = if interval.sampled > 0.0 {
            interval.sampled
        } else {
            dt
        };
        let busy = gpu_sm / span;
        let scale = if busy > 1.0 { 1.0 / busy } else { 1.0 };
        let joules = |sm: f64| c.energy.map(|e| e * sm / span * scale);
        let live = |device: &Device, w: &Workload| {
            c.held_here
                .iter()
                .any(|h| (h.gpu, h.gpu_instance, h.compute_instance) == *device && h.workload == *w)
        };
        let mut over_limit = 0.0;
        for (device, m) in &interval.used {
            for (workload, used) in m {
                let Some(a) = self.open(*device, workload, now, live(device, workload)) else {
                    over_limit += joules(used[0]).unwrap_or(0.0);
                    continue;
                };
                a.touched = now;
                add(&mut a.sm, used[0]);
                if device.1.is_none() {
                    for (e, v) in a.engines.iter_mut().zip(&used[1..]) {
                        add(e, *v);
                    }
                }
                if let Some(j) = joules(used[0]) {
                    add(&mut a.energy, j);
                }
            }
        }
        for (device, m) in &interval.estimated {
            for (workload, sm) in m {
                let Some(a) = self.open(*device, workload, now, live(device, workload)) else {
                    over_limit += joules(*sm).unwrap_or(0.0);
                    continue;
                };
                a.touched = now;
                add(&mut a.mps_sm, *sm);
                if let Some(j) = joules(*sm) {
                    add(&mut a.mps_energy, j);
                }
            }
        }
        for h in &c.held_here {
            let device = (h.gpu, h.gpu_instance, h.compute_instance);
            let weight = interval
                .weights
                .get(&(h.gpu, h.gpu_instance))
                .copied()
                .unwrap_or(1.0);
            let threshold = self.idle_threshold;
            let mps = interval.mps.contains(&(device, h.workload.clone()));
            let Some(a) = self.open(device, &h.workload, now, true) else {
                self.refused += 1;
                continue;
            };
            a.touched = now;
            a.holding = true;
            a.held += dt * h.share * weight;
            if let Some(e) = c.energy {
                add(&mut a.held_energy, e * h.share * weight);
            }
            if interval.measured {
                let (sm, energy) = if mps {
                    (&mut a.mps_sm, &mut a.mps_energy)
                } else {
                    (&mut a.sm, &mut a.energy)
                };
                add(sm, 0.0);
                if c.energy.is_some() {
                    add(energy, 0.0);
                }
                let sm = a.sm_total();
                let used = interval
                    .used
                    .get(&device)
                    .and_then(|m| m.get(&h.workload))
                    .map_or(0.0, |s| s[0])
                    + interval
                        .estimated
                        .get(&device)
                        .and_then(|m| m.get(&h.workload))
                        .copied()
                        .unwrap_or(0.0);
                a.idle = match a.idle {
                    Some(i) if (sm - i.sm_at) / (elapsed(i.since, c.at) * weight) >= threshold => {
                        None
                    }
                    Some(i) => Some(i),
                    None if used / (dt * weight) < threshold => Some(Idle {
                        since: c.from,
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
                        since: c.from,
                        sm_at: 0.0,
                    }),
                };
            }
        }
        if let (Some(e), true) = (c.energy, interval.measured) {
            let mut add = |reason, joules: f64| {
                *self.unattributed.entry((c.gpu, reason)).or_insert(0.0) += joules;
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
            self.unattributed_touched.insert(c.gpu, now);
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
                mps_sm_seconds: a.mps_sm,
                engine_seconds: UsageEngine::ALL
                    .iter()
                    .zip(a.engines)
                    .filter_map(|(e, v)| v.map(|v| (*e, v)))
                    .collect(),
                energy_joules: a.energy,
                mps_energy_joules: a.mps_energy,
                held_energy_joules: a.held_energy,
                held_seconds: a.held,
                idle_seconds: a
                    .idle
                    .filter(|_| a.holding)
                    .map(|i| elapsed(i.since, at))
                    .filter(|s| *s >= MIN_IDLE.as_secs_f64()),
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
            refused: self.refused,
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
/// activity (A100); each instance's part of the GPU is known wherever the
/// GPU's slices are, for the held time and the holder's energy.
fn mig(g: &GpuState, total_slices: Option<u32>, held: &[&WorkloadHolding], dt: f64) -> Interval {
    let mut interval = Interval::default();
    let (Some(r), Some(total)) = (&g.readings, total_slices.filter(|t| *t > 0)) else {
        return interval;
    };
    for gi in &r.mig {
        if let Some(slices) = profile_slices(&gi.profile) {
            interval.weights.insert(
                (g.index, Some(gi.gpu_instance)),
                f64::from(slices) / f64::from(total),
            );
        }
    }
    let activity: Option<Vec<(u32, f64, f64)>> = r
        .mig
        .iter()
        .map(|gi| {
            let sm = gi
                .activity
                .iter()
                .find(|(m, _)| *m == GpmMetric::Graphics)
                .map(|(_, v)| *v)?;
            let weight = *interval.weights.get(&(g.index, Some(gi.gpu_instance)))?;
            Some((gi.gpu_instance, sm, weight))
        })
        .collect();
    let Some(activity) = activity.filter(|a| !a.is_empty()) else {
        return interval;
    };
    interval.measured = true;
    for (gi, sm, weight) in activity {
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

    fn upd(
        acc: &mut Accountant,
        gpus: &[GpuState],
        held: &[WorkloadHolding],
        by_pid: &HashMap<u32, Workload>,
    ) -> WorkloadUsage {
        acc.update(gpus, held, by_pid, &HashMap::new())
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

    trait SmTotal {
        fn sm_total_for_test(&self) -> f64;
    }

    impl SmTotal for UsageAccount {
        fn sm_total_for_test(&self) -> f64 {
            self.sm_seconds.unwrap_or(0.0) + self.mps_sm_seconds.unwrap_or(0.0)
        }
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
        upd(
            &mut acc,
            &[gpu(0.0, &[1, 2], &[(1, 0.0), (2, 0.0)], 1000.0)],
            &held,
            &by_pid,
        );
        // 10 s at 60 % and 20 %, then 10 s more; the GPU used 4000 J.
        upd(
            &mut acc,
            &[gpu(10.0, &[1, 2], &[(1, 6.0), (2, 2.0)], 3000.0)],
            &held,
            &by_pid,
        );
        let u = upd(
            &mut acc,
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
        upd(
            &mut acc,
            &[gpu(0.0, &[1], &[(1, 0.0)], 0.0)],
            &held,
            &by_pid,
        );
        upd(
            &mut acc,
            &[gpu(1.0, &[1], &[(1, 0.5)], 100.0)],
            &held,
            &by_pid,
        );
        // Pid 1 ended: NVML lists it no more, its last samples arrive, and
        // the resolver has forgotten it.
        let gone = HashMap::new();
        let u = upd(&mut acc, &[gpu(2.0, &[], &[(1, 0.9)], 200.0)], &[], &gone);
        assert_eq!(account(&u, &a).sm_seconds, Some(0.9));
        // A new sampler (epoch 2) starts its totals from 0: counted afresh.
        let mut g = gpu(3.0, &[], &[(1, 0.2)], 300.0);
        g.readings_mut().usage.as_mut().unwrap().epoch = 2;
        let u = upd(&mut acc, &[g], &[], &gone);
        assert!((account(&u, &a).sm_seconds.unwrap() - 1.1).abs() < 1e-9);
    }

    #[test]
    fn a_held_gpu_without_use_is_idle_until_its_mean_use_reaches_the_threshold() {
        let (a, b) = (job("201"), job("202"));
        let by_pid = HashMap::from([(1, b.clone())]);
        // Job 201 holds the GPU (an allocation) but runs nothing; 202 runs.
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(256, 0.01);
        upd(
            &mut acc,
            &[gpu(0.0, &[1], &[(1, 0.0)], 0.0)],
            &held,
            &by_pid,
        );
        let u = upd(
            &mut acc,
            &[gpu(60.0, &[1], &[(1, 30.0)], 0.0)],
            &held,
            &by_pid,
        );
        assert_eq!(account(&u, &a).idle_seconds, Some(60.0));
        assert_eq!(account(&u, &b).idle_seconds, None);
        // 202 stops using the GPU for two hours, then uses 0.5 % of it.
        let u = upd(
            &mut acc,
            &[gpu(7260.0, &[1], &[(1, 30.0)], 0.0)],
            &held,
            &by_pid,
        );
        assert_eq!(account(&u, &b).idle_seconds, Some(7200.0));
        let u = upd(
            &mut acc,
            &[gpu(7320.0, &[1], &[(1, 30.3)], 0.0)],
            &held,
            &by_pid,
        );
        assert_eq!(
            account(&u, &b).idle_seconds,
            Some(7260.0),
            "0.3 s in 2 h stays idle"
        );
        // Then it works: its mean since it went idle passes 1 %.
        let u = upd(
            &mut acc,
            &[gpu(7500.0, &[1], &[(1, 120.0)], 0.0)],
            &held,
            &by_pid,
        );
        assert_eq!(account(&u, &b).idle_seconds, None);
        assert_eq!(account(&u, &a).idle_seconds, Some(7500.0));
        // A holding that goes away has no idle series, its counters stay.
        let u = upd(
            &mut acc,
            &[gpu(7510.0, &[1], &[(1, 121.0)], 0.0)],
            &held[1..],
            &by_pid,
        );
        assert_eq!(account(&u, &a).idle_seconds, None);
        assert_eq!(account(&u, &a).held_seconds, 7500.0 * 0.5);
    }

    /// GPU 0 under MPS at `t` s: server 9 (unnamed), clients 1 and 2;
    /// the server's SM seconds so far.
    fn mps_gpu(t: f64, server_sm: f64, energy: f64) -> GpuState {
        let mut g = gpu(t, &[9, 1, 2], &[(9, server_sm)], energy);
        let u = g.readings_mut().usage.as_mut().unwrap();
        u.mps_clients = vec![1, 2];
        g
    }

    #[test]
    fn mps_clients_split_the_servers_time_as_an_estimate_and_unresolved_pids_wait() {
        let (a, b, daemon) = (job("1"), job("2"), Workload::of(WorkloadKind::Systemd));
        // The server is no holding (workloads/mod.rs leaves it out).
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(256, 0.01);
        let partial = HashMap::from([(9, daemon.clone()), (1, a.clone())]);
        upd(&mut acc, &[mps_gpu(0.0, 0.0, 0.0)], &held, &partial);
        // Client 2 is not resolved yet: nothing is charged, nothing lost.
        let u = upd(&mut acc, &[mps_gpu(10.0, 4.0, 1000.0)], &held, &partial);
        assert!(u.accounts.iter().all(|a| a.sm_total_for_test() == 0.0));
        // No CPU time known: an even split, kept apart as an estimate.
        let all = HashMap::from([(9, daemon.clone()), (1, a.clone()), (2, b.clone())]);
        let u = upd(&mut acc, &[mps_gpu(11.0, 4.0, 1000.0)], &held, &all);
        for w in [&a, &b] {
            assert_eq!(account(&u, w).mps_sm_seconds, Some(2.0));
            assert_eq!(account(&u, w).sm_seconds, None, "nothing measured");
        }
        assert!(
            u.accounts.iter().all(|x| x.workload != daemon),
            "the server bills nothing, holds nothing"
        );
    }

    #[test]
    fn an_idle_mps_client_is_not_billed_like_a_busy_one() {
        // The H200's MPS run: one client busy 10 s, one idle; the driver
        // named only the server, 9.5 s of SM time.
        let (busy, idle) = (job("677"), job("678"));
        let held = [holding(&busy, 0.5), holding(&idle, 0.5)];
        let by_pid = HashMap::from([(1, busy.clone()), (2, idle.clone())]);
        let mut acc = Accountant::new(256, 0.01);
        let cpu = |t: f64| HashMap::from([(1, 100.0 * t), (2, 3.0)]);
        acc.update(&[mps_gpu(0.0, 0.0, 0.0)], &held, &by_pid, &cpu(0.0));
        acc.update(&[mps_gpu(5.0, 4.75, 3000.0)], &held, &by_pid, &cpu(5.0));
        let u = acc.update(&[mps_gpu(10.0, 9.5, 6000.0)], &held, &by_pid, &cpu(10.0));
        let (ub, ui) = (account(&u, &busy), account(&u, &idle));
        assert_eq!(ub.mps_sm_seconds, Some(9.5));
        assert_eq!(ui.mps_sm_seconds, Some(0.0));
        assert!((ub.mps_energy_joules.unwrap() - 6000.0 * 0.95).abs() < 1e-6);
        assert_eq!(ui.mps_energy_joules, Some(0.0));
        assert_eq!(ui.idle_seconds, Some(10.0), "held idle");
        assert_eq!(ub.idle_seconds, None);
        // The holder's view shares the GPU's energy by share all the same.
        assert_eq!(ui.held_energy_joules, Some(3000.0));
    }

    #[test]
    fn the_holders_view_charges_a_lone_job_the_whole_gpu() {
        let a = job("7");
        let by_pid = HashMap::from([(1, a.clone())]);
        let held = [holding(&a, 1.0)];
        let mut acc = Accountant::new(256, 0.01);
        upd(
            &mut acc,
            &[gpu(0.0, &[1], &[(1, 0.0)], 0.0)],
            &held,
            &by_pid,
        );
        // 10 % of the SMs for 100 s, 30 kJ.
        let u = upd(
            &mut acc,
            &[gpu(100.0, &[1], &[(1, 10.0)], 30_000.0)],
            &held,
            &by_pid,
        );
        let ua = account(&u, &a);
        assert!(
            (ua.energy_joules.unwrap() - 3_000.0).abs() < 1e-6,
            "measured"
        );
        assert_eq!(ua.held_energy_joules, Some(30_000.0), "held");
        assert!((idle_energy(&u) - 27_000.0).abs() < 1e-6);
    }

    #[test]
    fn over_the_limit_energy_is_charged_apart() {
        let (a, b) = (job("1"), job("2"));
        let by_pid = HashMap::from([(1, a.clone()), (2, b.clone())]);
        let held = [holding(&a, 0.5), holding(&b, 0.5)];
        let mut acc = Accountant::new(1, 0.01);
        upd(
            &mut acc,
            &[gpu(0.0, &[1, 2], &[(1, 0.0), (2, 0.0)], 0.0)],
            &held,
            &by_pid,
        );
        let u = upd(
            &mut acc,
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
        let r = g.readings_mut();
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
                size: None,
                bar1: None,
                memory: None,
                engine_activity: Vec::new(),
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
        upd(
            &mut acc,
            &[mig_gpu(0.0, Some([0.5, 0.25]), 0.0)],
            &held,
            &by_pid,
        );
        let u = upd(
            &mut acc,
            &[mig_gpu(7.0, Some([0.5, 0.25]), 700.0)],
            &held,
            &by_pid,
        );
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
        upd(&mut acc, &[mig_gpu(0.0, None, 0.0)], &held, &by_pid);
        let u = upd(&mut acc, &[mig_gpu(30.0, None, 100.0)], &held, &by_pid);
        assert_eq!(account(&u, &a).idle_seconds, None, "runs a process");
        assert_eq!(account(&u, &b).idle_seconds, Some(30.0));
        assert_eq!(account(&u, &a).sm_seconds, None, "A100 MIG: not measured");
        assert_eq!(account(&u, &a).energy_joules, None);
        assert!(u.unattributed.is_empty());
        // The holder's view and the held time still weigh each instance by
        // its slices: 3 and 4 of the GPU's 7.
        let (ua, ub) = (account(&u, &a), account(&u, &b));
        assert!((ua.held_energy_joules.unwrap() - 300.0 / 7.0).abs() < 1e-9);
        assert!((ub.held_energy_joules.unwrap() - 400.0 / 7.0).abs() < 1e-9);
        assert!((ua.held_seconds - 90.0 / 7.0).abs() < 1e-9);
    }

    #[test]
    fn ended_workloads_give_their_slots_to_live_ones() {
        // Probe 4's D2: short containers fill the limit, end, and a long
        // job starts while their counters are still retained.
        let short: Vec<Workload> = (0..4).map(|i| job(&format!("short-{i}"))).collect();
        let long = job("9999");
        let mut acc = Accountant::new(4, 0.01);
        let by_pid: HashMap<u32, Workload> = short
            .iter()
            .enumerate()
            .map(|(i, w)| (i as u32 + 1, w.clone()))
            .chain([(99, long.clone())])
            .collect();
        let held: Vec<WorkloadHolding> = short.iter().map(|w| holding(w, 0.25)).collect();
        let pids = [1, 2, 3, 4];
        upd(&mut acc, &[gpu(0.0, &pids, &[], 0.0)], &held, &by_pid);
        let sm: Vec<(u32, f64)> = pids.iter().map(|p| (*p, 1.0)).collect();
        let u = upd(&mut acc, &[gpu(5.0, &pids, &sm, 500.0)], &held, &by_pid);
        assert_eq!(u.accounts.len(), 4);
        // They end; the long job holds the GPU alone.
        let held = [holding(&long, 1.0)];
        let mut sm = sm;
        sm.push((99, 0.0));
        upd(&mut acc, &[gpu(6.0, &[99], &sm, 600.0)], &held, &by_pid);
        sm.pop();
        sm.push((99, 4.0));
        let u = upd(&mut acc, &[gpu(11.0, &[99], &sm, 1100.0)], &held, &by_pid);
        let ul = account(&u, &long);
        assert_eq!(ul.sm_seconds, Some(4.0));
        assert!((ul.energy_joules.unwrap() - 400.0).abs() < 1e-6);
        assert_eq!(ul.held_seconds, 6.0);
        assert_eq!(u.refused, 0);
        assert!(u
            .unattributed
            .iter()
            .all(|e| e.reason != UnattributedReason::OverLimit));
        // Three of the ended ones keep their counters for their retention.
        assert_eq!(u.accounts.len(), 4);
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
