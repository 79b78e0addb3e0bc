//! Workload attribution: which Slurm job, container, systemd service or
//! user holds each GPU and MIG device, from the cgroups of the processes
//! NVML lists (`--workloads`).
//!
//! The core type is [`Workloads`]. A background task resolves the pids of
//! the latest snapshot through the host's procfs (`cgroup` and `status`,
//! [`cgroup::classify`]) and keeps the answers; the join step
//! (`crate::join`) writes them onto each snapshot ([`Workloads::apply`]) as
//! [`WorkloadAttribution`]. A scrape never reads `/proc`, and an entry that
//! vanishes, refuses or holds garbage is a counted read error, never a
//! failed poll.
//!
//! A process that appears is attributed from the poll after its pid was
//! first seen (the resolver is woken at once, the answer joins the next
//! snapshot); a process that ends leaves with the snapshot that no longer
//! lists it. Known pids are read again every refresh interval, so a
//! process moved to another cgroup, or a pid reused, is corrected within
//! one refresh.

mod allocations;
mod cgroup;
mod engine;
mod procfs;
mod usage;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::{watch, Notify};

use crate::snapshot::{
    GpuState, HpcJobs, Snapshot, Workload, WorkloadAttribution, WorkloadHolding, WorkloadKind,
    WorkloadReadError, WorkloadReadErrors, WorkloadSource,
};

/// How long one container engine call may take.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);

/// The reader's deadline for an engine call: the call ends itself at
/// `ENGINE_TIMEOUT`; this is for a connect that never returns.
const ENGINE_DEADLINE: Duration = Duration::from_secs(3);

pub use procfs::HostFiles;

/// node_exporter's default for `--path.procfs`.
pub const DEFAULT_PROCFS: &str = "/proc";
/// node_exporter's default for `--path.rootfs`.
pub const DEFAULT_ROOTFS: &str = "/";

#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadsConfig {
    /// The host's procfs: the pids NVML lists are host pids.
    pub procfs: PathBuf,
    /// The host's root file system, for `etc/passwd`.
    pub rootfs: PathBuf,
    /// Most holdings (workload on device) exported; the rest are counted.
    pub limit: usize,
    pub refresh_interval: Duration,
    /// dcgm-exporter's `--hpc-job-mapping-dir` format: one file per GPU
    /// index listing Slurm job ids, one per line.
    pub slurm_mapping_dir: Option<PathBuf>,
    /// Docker or Podman API sockets to ask container names of; none by
    /// default.
    pub container_engine_sockets: Vec<PathBuf>,
    /// A holding using less than this part of its device is idle.
    pub idle_threshold: f64,
}

/// What the resolver found at its last refresh.
#[derive(Default)]
struct Known {
    by_pid: HashMap<u32, Workload>,
    /// Slurm job ids by GPU index, from the mapping directory.
    mapped_jobs: BTreeMap<u32, Vec<String>>,
    /// Every device's lines of the mapping directory, for `hpc_job`.
    hpc_jobs: Arc<HpcJobs>,
    /// Container names by short id, from the engine sockets (`None`: no
    /// engine knows the id). Kept while the container holds a GPU.
    names: HashMap<String, Option<String>>,
    /// Slurm jobs and the GPUs their device cgroups allow.
    slurm_jobs: Vec<allocations::SlurmJob>,
    /// When this resolution was finished.
    completed: Option<SystemTime>,
}

/// The latest resolution, shared between the refresh task (writer) and
/// the join step (reader, `crate::join`).
pub struct Workloads {
    config: WorkloadsConfig,
    /// The host's procfs and files, read with deadlines.
    files: HostFiles,
    known: ArcSwap<Known>,
    /// The pids of the latest snapshot.
    wanted: Mutex<BTreeSet<u32>>,
    /// Wakes the resolver when a snapshot lists a pid it has not resolved.
    wake: Notify,
    errors: Mutex<BTreeMap<(WorkloadSource, WorkloadReadError), u64>>,
    /// Whether the last snapshot dropped holdings (logged once per episode).
    dropping: Mutex<bool>,
    /// Measured use per workload, counted from snapshot to snapshot.
    usage: Mutex<usage::Accountant>,
    /// The MPS clients of the latest snapshot, whose CPU time splits their
    /// server's SM time (`usage.rs`).
    mps_clients: Mutex<BTreeSet<u32>>,
    /// Wakes the resolver to read the MPS clients' CPU time.
    mps_wake: Notify,
    /// CPU time (clock ticks) of each MPS client, as last read.
    mps_cpu: ArcSwap<HashMap<u32, f64>>,
}

impl Workloads {
    pub fn new(config: WorkloadsConfig) -> Arc<Self> {
        Arc::new(Workloads {
            usage: Mutex::new(usage::Accountant::new(config.limit, config.idle_threshold)),
            files: HostFiles::new(config.procfs.clone()),
            config,
            known: ArcSwap::from_pointee(Known::default()),
            wanted: Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
            errors: Mutex::new(BTreeMap::new()),
            dropping: Mutex::new(false),
            mps_clients: Mutex::new(BTreeSet::new()),
            mps_wake: Notify::new(),
            mps_cpu: ArcSwap::from_pointee(HashMap::new()),
        })
    }

    /// Resolves pids until `stop` fires: every refresh interval, and at
    /// once when a snapshot lists a new pid; reads the MPS clients' CPU
    /// time after each snapshot that lists some. A refresh runs on the
    /// blocking pool, one at a time; each of its reads has a deadline
    /// (`procfs::HostFiles`), so a refresh always ends.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        let mut tick = tokio::time::interval(self.config.refresh_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let whole = tokio::select! {
                _ = tick.tick() => true,
                () = self.wake.notified() => true,
                () = self.mps_wake.notified() => false,
                _ = stop.changed() => return,
            };
            let me = self.clone();
            let done = tokio::task::spawn_blocking(move || {
                if whole {
                    me.refresh();
                } else {
                    me.read_mps_cpu();
                }
            });
            if let Err(e) = done.await {
                tracing::error!(error = %e, "workload attribution refresh failed");
            }
        }
    }

    /// The CPU time of every MPS client of the latest snapshot. A client
    /// waiting on no kernel uses none, so the split of its server's SM
    /// time (`usage.rs`) follows who is working; an entry that cannot be
    /// read is counted and leaves that GPU's split even.
    fn read_mps_cpu(&self) {
        let clients: Vec<u32> = self
            .mps_clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        let mut cpu = HashMap::with_capacity(clients.len());
        for pid in clients {
            match self.files.cpu_ticks(pid) {
                Ok(ticks) => {
                    cpu.insert(pid, ticks as f64);
                }
                Err(e) => self.count_error(WorkloadSource::Procfs, e),
            }
        }
        self.mps_cpu.store(Arc::new(cpu));
    }

    fn count_error(&self, source: WorkloadSource, reason: WorkloadReadError) {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *errors.entry((source, reason)).or_insert(0) += 1;
    }

    /// Reads every wanted pid's cgroup and uid, the passwd file and the
    /// mapping directory, and publishes the answers for `apply`.
    fn refresh(&self) {
        let pids: Vec<u32> = self
            .wanted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        let mut by_pid = HashMap::with_capacity(pids.len());
        for pid in pids {
            by_pid.insert(pid, self.resolve(pid));
        }
        self.name_pods(&mut by_pid);
        let mut slurm_jobs = self.slurm_jobs();
        if by_pid.values().any(|w| w.uid.is_some()) || !slurm_jobs.is_empty() {
            match self.files.passwd(&self.config.rootfs.join("etc/passwd")) {
                Ok(names) => {
                    for w in by_pid.values_mut() {
                        w.user = w.uid.and_then(|uid| names.get(&uid).cloned());
                    }
                    for j in &mut slurm_jobs {
                        j.user = j.uid.and_then(|uid| names.get(&uid).cloned());
                    }
                }
                Err(e) => self.count_error(WorkloadSource::Passwd, e),
            }
        }
        let (mapped_jobs, hpc_jobs) = match &self.config.slurm_mapping_dir {
            Some(dir) => self.read_mapping_dir(dir),
            None => (BTreeMap::new(), HpcJobs::new()),
        };
        let names = self.container_names(&mut by_pid);
        self.known.store(Arc::new(Known {
            by_pid,
            mapped_jobs,
            hpc_jobs: Arc::new(hpc_jobs),
            names,
            slurm_jobs,
            completed: Some(SystemTime::now()),
        }));
    }

    /// Kubernetes names (namespace, pod, container) of pods' processes,
    /// from the kubelet's container log links under the host's root.
    fn name_pods(&self, by_pid: &mut HashMap<u32, Workload>) {
        if !by_pid
            .values()
            .any(|w| w.kind == WorkloadKind::Kubernetes && w.container_id.is_some())
        {
            return;
        }
        let dir = self.config.rootfs.join("var/log/containers");
        let names = match allocations::container_names(&self.files, &dir) {
            Ok(names) => names,
            Err(e) => {
                self.count_error(WorkloadSource::KubeletLogs, e);
                return;
            }
        };
        for w in by_pid.values_mut() {
            let found = w.container_id.as_ref().and_then(|id| names.get(id));
            if let (WorkloadKind::Kubernetes, Some(n)) = (w.kind, found) {
                w.namespace = Some(n.namespace.clone());
                w.pod = Some(n.pod.clone());
                w.container = Some(n.container.clone());
            }
        }
    }

    /// Slurm jobs' GPUs from their cgroup v1 device allowlists under the
    /// host's root.
    fn slurm_jobs(&self) -> Vec<allocations::SlurmJob> {
        let (jobs, errors) =
            allocations::slurm_jobs(&self.files, &self.config.rootfs.join("sys/fs/cgroup"));
        for e in errors {
            self.count_error(WorkloadSource::SlurmCgroup, e);
        }
        jobs
    }

    /// Names the Docker and Podman containers of `by_pid` through the
    /// engine sockets, asking only about ids not named at the last refresh.
    /// A failed ask is counted and tried again next refresh.
    fn container_names(
        &self,
        by_pid: &mut HashMap<u32, Workload>,
    ) -> HashMap<String, Option<String>> {
        let mut names = HashMap::new();
        if self.config.container_engine_sockets.is_empty() {
            return names;
        }
        let previous = self.known.load();
        for w in by_pid.values_mut() {
            if !matches!(w.kind, WorkloadKind::Docker | WorkloadKind::Podman) {
                continue;
            }
            let Some(id) = w.container_id.clone() else {
                continue;
            };
            if !names.contains_key(&id) {
                match previous.names.get(&id) {
                    Some(known) => {
                        names.insert(id.clone(), known.clone());
                    }
                    None => {
                        if let Some(found) = self.ask_engines(&id) {
                            names.insert(id.clone(), found);
                        }
                    }
                }
            }
            w.container_name = names.get(&id).cloned().flatten();
        }
        names
    }

    /// The first engine that knows the id answers; `None` when every
    /// socket failed (not cached), `Some(None)` when none knows it.
    fn ask_engines(&self, id: &str) -> Option<Option<String>> {
        let mut answered = false;
        for socket in &self.config.container_engine_sockets {
            let (path, owned_id) = (socket.clone(), id.to_string());
            let asked = self.files.run(socket, ENGINE_DEADLINE, move || {
                engine::container_name(&path, &owned_id, ENGINE_TIMEOUT)
            });
            match asked {
                Ok(Some(name)) => return Some(Some(name)),
                Ok(None) => answered = true,
                Err(e) => self.count_error(WorkloadSource::ContainerEngine, e),
            }
        }
        answered.then_some(None)
    }

    /// One process's workload; `unknown` when its cgroup cannot be read.
    fn resolve(&self, pid: u32) -> Workload {
        let mut workload = match self.files.cgroup(pid) {
            Ok(text) => match cgroup::paths(&text) {
                Some(paths) => cgroup::classify(&paths),
                None => {
                    self.count_error(WorkloadSource::Procfs, WorkloadReadError::Malformed);
                    Workload::of(WorkloadKind::Unknown)
                }
            },
            Err(e) => {
                self.count_error(WorkloadSource::Procfs, e);
                Workload::of(WorkloadKind::Unknown)
            }
        };
        // The process's own uid; the path's (Slurm v1 `uid_`, a login
        // session's `user-<uid>.slice`) when status cannot be read.
        match self.files.real_uid(pid) {
            Ok(uid) => workload.uid = Some(uid),
            Err(e) => self.count_error(WorkloadSource::Procfs, e),
        }
        workload
    }

    /// dcgm-exporter's HPC job mapping directory (NVIDIA/dcgm-exporter
    /// `internal/pkg/transformation/hpc.go` at d5e5f51): a file per GPU
    /// named by its index (`3`), or per MIG GPU instance by GPU index and
    /// GPU instance id (`3.1`), one job per line. Returns the Slurm jobs
    /// of the GPU files (numeric ids; anything else is counted as
    /// malformed) for the workload holdings, and every device's lines as
    /// written for the DCGM series' `hpc_job`: dcgm-exporter takes any
    /// line as a job name. An empty line names no job (dcgm-exporter would
    /// serve it as `hpc_job=""`, which Prometheus reads as no label), a
    /// line repeated is one job, and a device keeps at most
    /// `MAX_HPC_JOBS` (the rest are counted as malformed): each job is a
    /// copy of every DCGM series of the device.
    fn read_mapping_dir(&self, dir: &Path) -> (BTreeMap<u32, Vec<String>>, HpcJobs) {
        let mut jobs = BTreeMap::new();
        let mut hpc = HpcJobs::new();
        let entries = match self.files.list_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                self.count_error(WorkloadSource::SlurmMappingDir, e);
                return (jobs, hpc);
            }
        };
        for (name, path) in entries {
            let Some(device) = mapping_file_device(&name) else {
                continue;
            };
            let text = match self.files.small_text(&path) {
                Ok(text) => text,
                Err(e) => {
                    self.count_error(WorkloadSource::SlurmMappingDir, e);
                    continue;
                }
            };
            let mut names: Vec<String> = Vec::new();
            for line in text.lines().filter(|l| !l.is_empty()) {
                if names.iter().any(|n| n == line) {
                    continue;
                }
                if names.len() == MAX_HPC_JOBS {
                    self.count_error(
                        WorkloadSource::SlurmMappingDir,
                        WorkloadReadError::Malformed,
                    );
                    break;
                }
                names.push(line.to_string());
            }
            hpc.insert(device, names);
            let (gpu, None) = device else {
                continue;
            };
            let ids: Vec<String> = text
                .split_whitespace()
                .filter(|id| id.bytes().all(|b| b.is_ascii_digit()))
                .map(str::to_string)
                .collect();
            if ids.len() < text.split_whitespace().count() {
                self.count_error(
                    WorkloadSource::SlurmMappingDir,
                    WorkloadReadError::Malformed,
                );
            }
            jobs.insert(gpu, ids);
        }
        (jobs, hpc)
    }

    /// Joins the workloads of the snapshot's processes onto it, in place
    /// (the join step's, `crate::join`).
    pub fn apply(&self, snapshot: &mut Snapshot) {
        let live = live_pids(&snapshot.gpus);
        let known = self.known.load();
        {
            let mut wanted = self.wanted.lock().unwrap_or_else(|p| p.into_inner());
            if *wanted != live {
                let unresolved = live.iter().any(|pid| !known.by_pid.contains_key(pid));
                *wanted = live;
                if unresolved {
                    self.wake.notify_one();
                }
            }
        }
        let clients: BTreeSet<u32> = snapshot
            .gpus
            .iter()
            .filter_map(|g| g.readings.as_ref()?.usage.as_ref())
            .flat_map(|u| u.mps_clients.iter().copied())
            .collect();
        if !clients.is_empty() {
            *self.mps_clients.lock().unwrap_or_else(|p| p.into_inner()) = clients;
            self.mps_wake.notify_one();
        }
        let mut holdings = holdings(&snapshot.gpus, &known.by_pid, &known.mapped_jobs);
        allocations::merge(&mut holdings, &snapshot.gpus, &known.slurm_jobs);
        assign_shares(&mut holdings);
        // Only the holdings exported compete for the accounts' slots.
        let mut dropped = holdings.len().saturating_sub(self.config.limit);
        holdings.truncate(self.config.limit);
        let usage = snapshot
            .gpus
            .iter()
            .any(|g| g.readings.as_ref().is_some_and(|r| r.usage.is_some()))
            .then(|| {
                self.usage.lock().unwrap_or_else(|p| p.into_inner()).update(
                    &snapshot.gpus,
                    &holdings,
                    &known.by_pid,
                    &self.mps_cpu.load(),
                )
            });
        dropped += usage.as_ref().map_or(0, |u| u.refused as usize);
        {
            let mut dropping = self.dropping.lock().unwrap_or_else(|p| p.into_inner());
            if (dropped > 0) != *dropping {
                *dropping = dropped > 0;
                if dropped > 0 {
                    tracing::warn!(
                        dropped,
                        limit = self.config.limit,
                        "more workload holdings than --workloads.limit; the rest are left out"
                    );
                }
            }
        }
        let read_errors = self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(&(source, reason), &count)| WorkloadReadErrors {
                source,
                reason,
                count,
            })
            .collect();
        snapshot.workloads = Some(WorkloadAttribution {
            holdings,
            dropped: dropped as u64,
            read_errors,
            usage,
            last_refresh: known.completed,
            hpc_jobs: known.hpc_jobs.clone(),
        });
    }
}

/// Most jobs one device's mapping file names: each is a copy of every DCGM
/// series of the device.
const MAX_HPC_JOBS: usize = 64;

/// The device a mapping file is named for, as dcgm-exporter matches the
/// name (`^\d+(\.\d+)?$`) against a series' GPU index or `<GPU>.<GPU
/// instance>`: only the numbers as they print, so `03` names no device.
fn mapping_file_device(name: &str) -> Option<(u32, Option<u32>)> {
    let number = |s: &str| {
        let n: u32 = s.parse().ok()?;
        (n.to_string() == s).then_some(n)
    };
    match name.split_once('.') {
        None => Some((number(name)?, None)),
        Some((gpu, gi)) => Some((number(gpu)?, Some(number(gi)?))),
    }
}

/// Every pid NVML lists on a GPU with readings.
fn live_pids(gpus: &[GpuState]) -> BTreeSet<u32> {
    gpus.iter()
        .filter_map(|g| g.readings.as_ref())
        .flat_map(|r| {
            r.compute_processes
                .iter()
                .chain(r.graphics_processes.iter())
                .flatten()
        })
        .map(|p| p.pid)
        .collect()
}

/// One holding per workload per device, with its share of the device and
/// its processes' memory there, sorted by device then workload. Pids not
/// resolved yet are left out until the next snapshot. A process in both
/// the compute and the graphics list counts once. An MPS server is no
/// workload: it runs its clients' work, which the clients hold.
fn holdings(
    gpus: &[GpuState],
    by_pid: &HashMap<u32, Workload>,
    mapped_jobs: &BTreeMap<u32, Vec<String>>,
) -> Vec<WorkloadHolding> {
    type Device = (u32, Option<u32>, Option<u32>);
    // Memory per process on a device first, then per workload.
    let mut processes: BTreeMap<(Device, u32), Option<u64>> = BTreeMap::new();
    for g in gpus {
        let Some(r) = &g.readings else { continue };
        let server = usage::mps_server(g);
        for p in r
            .compute_processes
            .iter()
            .chain(r.graphics_processes.iter())
            .flatten()
            .filter(|p| Some(p.pid) != server)
        {
            let device = (g.index, p.gpu_instance, p.compute_instance);
            processes
                .entry((device, p.pid))
                .and_modify(|m| *m = max_known(*m, p.used_memory_bytes))
                .or_insert(p.used_memory_bytes);
        }
    }
    let mut by_workload: BTreeMap<(Device, &Workload), Option<u64>> = BTreeMap::new();
    for ((device, pid), memory) in processes {
        let Some(workload) = by_pid.get(&pid) else {
            continue;
        };
        by_workload
            .entry((device, workload))
            .and_modify(|m| *m = m.zip(memory).map(|(a, b)| a + b))
            .or_insert(memory);
    }
    let mut out: Vec<WorkloadHolding> = by_workload
        .into_iter()
        .map(|((device, workload), memory)| WorkloadHolding {
            gpu: device.0,
            gpu_instance: device.1,
            compute_instance: device.2,
            workload: workload.clone(),
            share: 0.0,
            memory_used_bytes: memory,
        })
        .collect();
    for g in gpus {
        for job in mapped_jobs.get(&g.index).into_iter().flatten() {
            let seen = out.iter().any(|h| {
                h.gpu == g.index
                    && h.gpu_instance.is_none()
                    && h.workload.slurm_job.as_deref() == Some(job)
            });
            if !seen {
                let mut workload = Workload::of(WorkloadKind::Slurm);
                workload.slurm_job = Some(job.clone());
                out.push(WorkloadHolding {
                    gpu: g.index,
                    gpu_instance: None,
                    compute_instance: None,
                    workload,
                    share: 0.0,
                    memory_used_bytes: None,
                });
            }
        }
    }
    assign_shares(&mut out);
    out
}

/// Sorts holdings by device then workload and gives each its share of the
/// whole GPU, or of the MIG GPU instance.
fn assign_shares(holdings: &mut [WorkloadHolding]) {
    holdings.sort_by(|a, b| {
        (a.gpu, a.gpu_instance, a.compute_instance, &a.workload).cmp(&(
            b.gpu,
            b.gpu_instance,
            b.compute_instance,
            &b.workload,
        ))
    });
    let mut per_device: BTreeMap<(u32, Option<u32>), usize> = BTreeMap::new();
    for h in holdings.iter() {
        *per_device.entry((h.gpu, h.gpu_instance)).or_insert(0) += 1;
    }
    for h in holdings.iter_mut() {
        h.share = 1.0 / per_device[&(h.gpu, h.gpu_instance)] as f64;
    }
}

fn max_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuReadings, Process};

    fn process(pid: u32, mib: Option<u64>, mig: Option<(u32, u32)>) -> Process {
        Process {
            pid,
            name: None,
            used_memory_bytes: mib.map(|m| m << 20),
            gpu_instance: mig.map(|m| m.0),
            compute_instance: mig.map(|m| m.1),
        }
    }

    fn gpu(index: u32, compute: Vec<Process>, graphics: Vec<Process>) -> GpuState {
        GpuState::with_readings(
            index,
            GpuReadings {
                compute_processes: Some(compute),
                graphics_processes: Some(graphics),
                ..Default::default()
            },
        )
    }

    fn job(id: &str, uid: u32) -> Workload {
        let mut w = Workload::of(WorkloadKind::Slurm);
        w.slurm_job = Some(id.into());
        w.uid = Some(uid);
        w
    }

    #[test]
    fn two_jobs_split_a_gpu_and_each_job_sums_its_processes() {
        let gpus = vec![
            gpu(
                0,
                vec![
                    process(10, Some(100), None),
                    process(11, Some(50), None),
                    process(20, Some(30), None),
                ],
                // pid 10 also holds a graphics context: counted once.
                vec![process(10, Some(100), None)],
            ),
            gpu(1, vec![process(20, Some(5), None)], vec![]),
        ];
        let by_pid = HashMap::from([(10, job("1", 7)), (11, job("1", 7)), (20, job("2", 8))]);
        let h = holdings(&gpus, &by_pid, &BTreeMap::new());
        let summary: Vec<_> = h
            .iter()
            .map(|h| {
                (
                    h.gpu,
                    h.workload.slurm_job.as_deref().unwrap(),
                    h.share,
                    h.memory_used_bytes.map(|b| b >> 20),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (0, "1", 0.5, Some(150)),
                (0, "2", 0.5, Some(30)),
                (1, "2", 1.0, Some(5))
            ]
        );
    }

    #[test]
    fn mig_shares_are_per_gpu_instance_and_unresolved_pids_wait() {
        let gpus = vec![gpu(
            0,
            vec![
                process(1, Some(10), Some((7, 0))),
                process(2, Some(10), Some((7, 0))),
                process(3, Some(10), Some((8, 0))),
                process(4, Some(10), Some((8, 0))),
            ],
            vec![],
        )];
        let by_pid = HashMap::from([(1, job("1", 0)), (2, job("2", 0)), (3, job("3", 0))]);
        let h = holdings(&gpus, &by_pid, &BTreeMap::new());
        let shares: Vec<_> = h.iter().map(|h| (h.gpu_instance, h.share)).collect();
        assert_eq!(shares, [(Some(7), 0.5), (Some(7), 0.5), (Some(8), 1.0)]);
    }

    #[test]
    fn an_mps_server_is_no_workload() {
        // The H200's MPS run: the server (69 MB) and its two clients (746
        // MB each) in the compute list, the clients in the MPS list.
        let mut g = gpu(
            0,
            vec![
                process(711, Some(66), None),
                process(677, Some(712), None),
                process(678, Some(712), None),
            ],
            vec![],
        );
        let r = g.readings_mut();
        r.usage = Some(crate::snapshot::UsageReadings {
            mps_clients: vec![677, 678],
            ..Default::default()
        });
        let by_pid = HashMap::from([
            (711, Workload::of(WorkloadKind::Systemd)),
            (677, job("1", 0)),
            (678, job("2", 0)),
        ]);
        let h = holdings(&[g], &by_pid, &BTreeMap::new());
        let jobs: Vec<_> = h
            .iter()
            .map(|h| (h.workload.slurm_job.as_deref(), h.share))
            .collect();
        assert_eq!(jobs, [(Some("1"), 0.5), (Some("2"), 0.5)]);
    }

    #[test]
    fn unknown_memory_is_absent_not_zero() {
        let gpus = vec![gpu(
            0,
            vec![process(1, Some(10), None), process(2, None, None)],
            vec![],
        )];
        let w = Workload::of(WorkloadKind::Other);
        let by_pid = HashMap::from([(1, w.clone()), (2, w)]);
        let h = holdings(&gpus, &by_pid, &BTreeMap::new());
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].memory_used_bytes, None);
    }

    #[test]
    fn mapping_files_add_jobs_the_cgroups_do_not_show() {
        let gpus = vec![
            gpu(0, vec![process(1, Some(10), None)], vec![]),
            gpu(1, vec![], vec![]),
        ];
        let by_pid = HashMap::from([(1, job("5", 0))]);
        let mapped = BTreeMap::from([
            (0, vec!["5".to_string(), "6".to_string()]),
            (1, vec!["7".to_string()]),
            (9, vec!["8".to_string()]),
        ]);
        let h = holdings(&gpus, &by_pid, &mapped);
        let jobs: Vec<_> = h
            .iter()
            .map(|h| (h.gpu, h.workload.slurm_job.as_deref().unwrap(), h.share))
            .collect();
        assert_eq!(jobs, [(0, "5", 0.5), (0, "6", 0.5), (1, "7", 1.0)]);
    }

    fn fixture(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "nvml-exporter-workloads-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn config(procfs: &Path, limit: usize) -> WorkloadsConfig {
        WorkloadsConfig {
            procfs: procfs.join("proc"),
            rootfs: procfs.to_path_buf(),
            limit,
            refresh_interval: Duration::from_secs(60),
            slurm_mapping_dir: None,
            container_engine_sockets: vec![],
            idle_threshold: 0.01,
        }
    }

    #[test]
    fn unreadable_entries_are_unknown_and_counted_never_a_failure() {
        let root = fixture("unreadable");
        let proc = root.join("proc");
        for (pid, cgroup) in [
            (1, Some("0::/system.slice/a.service\n")),
            (2, Some("junk")),
            (3, None),
        ] {
            std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
            if let Some(text) = cgroup {
                std::fs::write(proc.join(format!("{pid}/cgroup")), text).unwrap();
            }
            std::fs::write(
                proc.join(format!("{pid}/status")),
                "Uid:\t1000\t1000\t1000\t1000\n",
            )
            .unwrap();
        }
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "alice:x:1000:1000::/:/bin/sh\n").unwrap();
        let w = Workloads::new(config(&root, 2));
        let mut snapshot = Snapshot {
            gpus: vec![gpu(
                0,
                // pid 4 has no entry at all: it exited.
                (1..=4).map(|pid| process(pid, Some(1), None)).collect(),
                vec![],
            )],
            ..Default::default()
        };
        w.apply(&mut snapshot);
        assert!(
            snapshot.workloads.as_ref().unwrap().holdings.is_empty(),
            "not resolved yet"
        );
        w.refresh();
        w.apply(&mut snapshot);
        let out = snapshot.workloads.unwrap();
        let kinds: Vec<_> = out
            .holdings
            .iter()
            .map(|h| (h.workload.kind, h.workload.user.as_deref()))
            .collect();
        // Three holdings: the service; pids 2 and 3 (unreadable cgroup,
        // uid 1000) as one unknown; pid 4 (no entry at all) as another.
        // The limit of 2 keeps the first two in sort order.
        assert_eq!(
            kinds,
            [
                (WorkloadKind::Systemd, Some("alice")),
                (WorkloadKind::Unknown, None),
            ]
        );
        assert_eq!(out.dropped, 1);
        let errors: Vec<_> = out
            .read_errors
            .iter()
            .map(|e| (e.reason, e.count))
            .collect();
        assert_eq!(
            errors,
            [
                (WorkloadReadError::Gone, 3),
                (WorkloadReadError::Malformed, 1)
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn mapping_files_by_gpu_index_with_garbage_counted() {
        let root = fixture("mapping");
        let dir = root.join("map");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("0"), "101\n102\n").unwrap();
        std::fs::write(dir.join("1"), "").unwrap();
        std::fs::write(dir.join("2"), "103\nnot-a-job\n").unwrap();
        // MIG UUID names (another site convention) and stray files are skipped.
        std::fs::write(dir.join("MIG-1234"), "104\n").unwrap();
        std::fs::write(dir.join("README"), "written by the prolog\n").unwrap();
        let w = Workloads::new(WorkloadsConfig {
            slurm_mapping_dir: Some(dir.clone()),
            ..config(&root, 10)
        });
        // dcgm-exporter's MIG form, <gpu>.<gpu instance>, and a name not
        // as the index prints (dcgm-exporter's key "03" matches no GPU).
        std::fs::write(dir.join("3.1"), "job-a\r\n\njob-b\njob-a\n").unwrap();
        std::fs::write(dir.join("03"), "105\n").unwrap();
        let many: String = (0..100).map(|i| format!("{i}\n")).collect();
        std::fs::write(dir.join("4"), many).unwrap();
        let (jobs, hpc) = w.read_mapping_dir(&dir);
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            jobs.iter().filter(|(g, _)| **g < 4).collect::<Vec<_>>(),
            [
                (&0, &strings(&["101", "102"])),
                (&1, &vec![]),
                (&2, &strings(&["103"])),
            ]
        );
        // Every line as written is an hpc_job: CRLF and empty lines read
        // past, a repeated line once, at most MAX_HPC_JOBS per device.
        assert_eq!(hpc[&(2, None)], strings(&["103", "not-a-job"]));
        assert_eq!(hpc[&(3, Some(1))], strings(&["job-a", "job-b"]));
        assert_eq!(hpc[&(4, None)].len(), MAX_HPC_JOBS);
        assert_eq!(
            hpc.keys().copied().collect::<Vec<_>>(),
            [(0, None), (1, None), (2, None), (3, Some(1)), (4, None)]
        );
        let (jobs, hpc) = w.read_mapping_dir(&root.join("absent"));
        assert!(jobs.is_empty() && hpc.is_empty());
        let errors = w.errors.lock().unwrap().clone();
        assert_eq!(
            errors,
            BTreeMap::from([
                (
                    (
                        WorkloadSource::SlurmMappingDir,
                        WorkloadReadError::Malformed
                    ),
                    // "not-a-job" as a Slurm job, the 65th hpc_job of GPU 4.
                    2
                ),
                (
                    (WorkloadSource::SlurmMappingDir, WorkloadReadError::Gone),
                    1
                ),
            ])
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
