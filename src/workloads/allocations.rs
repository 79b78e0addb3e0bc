//! Devices that workloads hold whether or not they run a process there,
//! so that a device held and left idle is seen: Kubernetes pods'
//! allocations (pod-resources, with `--kubernetes`) and Slurm jobs' cgroup
//! v1 device allowlists. And the Kubernetes names of a pod's containers,
//! from the kubelet's container log links, so that a pod's processes and
//! its allocation are recognised as one workload.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::procfs::HostFiles;
use crate::snapshot::{
    GpuState, PodLabels, Workload, WorkloadHolding, WorkloadKind, WorkloadReadError,
};

/// The character devices of NVIDIA GPUs: `/dev/nvidia<minor>` is major
/// 195; minors 254 and 255 are nvidia-modeset and nvidiactl.
const NVIDIA_MAJOR: &str = "195";
const FIRST_CONTROL_MINOR: u32 = 254;

/// A Slurm job and the GPUs (by minor number) its device cgroup allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    pub job: String,
    pub uid: Option<u32>,
    pub user: Option<String>,
    pub minors: Vec<u32>,
}

/// The GPU minors a cgroup v1 `devices.list` allows; `None` when it allows
/// every device (`a *:* rwm`: no constraint, so it says nothing of which
/// GPUs the job was given).
pub fn allowed_gpus(devices_list: &str) -> Option<Vec<u32>> {
    let mut minors = Vec::new();
    for line in devices_list.lines() {
        let mut fields = line.split_whitespace();
        let (Some(kind), Some(number), Some(_access)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if kind == "a" {
            return None;
        }
        let Some((major, minor)) = number.split_once(':') else {
            continue;
        };
        if kind == "c" && major == NVIDIA_MAJOR {
            if let Ok(m) = minor.parse::<u32>() {
                if m < FIRST_CONTROL_MINOR && !minors.contains(&m) {
                    minors.push(m);
                }
            }
        }
    }
    minors.sort_unstable();
    Some(minors)
}

/// Slurm jobs with GPUs from `<cgroup root>/devices/slurm*/uid_<uid>/job_<id>/devices.list`
/// (cgroup v1 with `ConstrainDevices=yes`), read with the deadlines and
/// caps of every host file. A host without the v1 devices hierarchy
/// (cgroup v2, where Slurm enforces devices with eBPF programs that cannot
/// be read back) has none: not an error. Read failures of single jobs are
/// returned beside the jobs that could be read.
pub fn slurm_jobs(
    files: &HostFiles,
    cgroup_root: &Path,
) -> (Vec<SlurmJob>, Vec<WorkloadReadError>) {
    let mut jobs = Vec::new();
    let mut errors = Vec::new();
    let children = |dir: &Path, prefix: &str, errors: &mut Vec<WorkloadReadError>| {
        let mut found: Vec<(String, PathBuf)> = match files.list_dir(dir) {
            Ok(entries) => entries,
            // Not there (a v2 host), or gone (the job ended meanwhile).
            Err(WorkloadReadError::Gone) => Vec::new(),
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        };
        found.retain(|(name, _)| name.starts_with(prefix));
        found.sort();
        found
    };
    for (name, root) in children(&cgroup_root.join("devices"), "slurm", &mut errors) {
        if !(name == "slurm" || name.starts_with("slurm_")) {
            continue;
        }
        for (uid, uid_dir) in children(&root, "uid_", &mut errors) {
            for (job, job_dir) in children(&uid_dir, "job_", &mut errors) {
                let id = &job["job_".len()..];
                if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                match files.small_text(&job_dir.join("devices.list")) {
                    Ok(text) => {
                        if let Some(minors) = allowed_gpus(&text).filter(|m| !m.is_empty()) {
                            jobs.push(SlurmJob {
                                job: id.to_string(),
                                uid: uid["uid_".len()..].parse().ok(),
                                user: None,
                                minors,
                            });
                        }
                    }
                    // The job ended while we looked.
                    Err(WorkloadReadError::Gone) => {}
                    Err(e) => errors.push(e),
                }
            }
        }
    }
    (jobs, errors)
}

/// A Kubernetes container's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodContainer {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The kubelet's link for a container's log,
/// `<pod>_<namespace>_<container>-<64 hex id>.log`: the short id and the
/// names. Pod, namespace and container names never hold `_`.
pub fn parse_log_link(file_name: &str) -> Option<(String, PodContainer)> {
    let stem = file_name.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut parts = rest.splitn(3, '_');
    let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    if [pod, namespace, container].iter().any(|s| s.is_empty()) {
        return None;
    }
    Some((
        id[..12].to_string(),
        PodContainer {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        },
    ))
}

/// Names by short container id from the kubelet's log links in `dir`
/// (`/var/log/containers`, under the host's root file system).
pub fn container_names(
    files: &HostFiles,
    dir: &Path,
) -> Result<HashMap<String, PodContainer>, WorkloadReadError> {
    Ok(files
        .list_dir(dir)?
        .iter()
        .filter_map(|(name, _)| parse_log_link(name))
        .collect())
}

/// Adds a holding for every pod allocation and Slurm job allowlist that
/// no holding from processes (or the mapping directory) already covers.
/// Shares are left for the caller to assign.
///
/// A pod process whose names are unknown (no container log link) cannot be
/// matched to an allocation: on a device running one, allocations add no
/// holding, lest a pod that works be reported as holding the device idle.
///
/// A pod's allowlisted labels (`--kubernetes.pod-labels`) go onto each of
/// its holdings: those of its allocations, and those of its processes,
/// matched by namespace and pod to an allocation on any GPU.
pub fn merge(holdings: &mut Vec<WorkloadHolding>, gpus: &[GpuState], slurm: &[SlurmJob]) {
    let labels: HashMap<(&str, &str), &PodLabels> = gpus
        .iter()
        .flat_map(|g| &g.pods)
        .filter(|p| !p.labels.is_empty())
        .map(|p| ((p.namespace.as_str(), p.pod.as_str()), &p.labels))
        .collect();
    if !labels.is_empty() {
        for h in holdings.iter_mut() {
            let w = &mut h.workload;
            if let (Some(ns), Some(pod)) = (&w.namespace, &w.pod) {
                if let Some(l) = labels.get(&(ns.as_str(), pod.as_str())) {
                    w.pod_labels = without_uid(l);
                }
            }
        }
    }
    for g in gpus {
        for p in &g.pods {
            let covered = holdings.iter().any(|h| {
                let w = &h.workload;
                h.gpu == g.index
                    && h.gpu_instance == p.gpu_instance
                    && w.kind == WorkloadKind::Kubernetes
                    && (w.namespace.is_none()
                        || (w.namespace.as_deref() == Some(p.namespace.as_str())
                            && w.pod.as_deref() == Some(p.pod.as_str())
                            && w.container.as_deref() == Some(p.container.as_str())))
            });
            if !covered {
                let mut workload = Workload::of(WorkloadKind::Kubernetes);
                workload.namespace = Some(p.namespace.clone());
                workload.pod = Some(p.pod.clone());
                workload.container = Some(p.container.clone());
                workload.pod_labels = without_uid(&p.labels);
                holdings.push(allocation(
                    g.index,
                    p.gpu_instance,
                    p.compute_instance,
                    workload,
                ));
            }
        }
        let minor = g
            .readings
            .as_ref()
            .and_then(|r| r.usage.as_ref())
            .and_then(|u| u.minor_number);
        let Some(minor) = minor else { continue };
        for job in slurm.iter().filter(|j| j.minors.contains(&minor)) {
            let covered = holdings.iter().any(|h| {
                h.gpu == g.index
                    && h.gpu_instance.is_none()
                    && h.workload.slurm_job.as_deref() == Some(job.job.as_str())
            });
            if !covered {
                let mut workload = Workload::of(WorkloadKind::Slurm);
                workload.slurm_job = Some(job.job.clone());
                workload.uid = job.uid;
                workload.user = job.user.clone();
                holdings.push(allocation(g.index, None, None, workload));
            }
        }
    }
}

fn allocation(
    gpu: u32,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    workload: Workload,
) -> WorkloadHolding {
    WorkloadHolding {
        gpu,
        gpu_instance,
        compute_instance,
        workload,
        share: 0.0,
        memory_used_bytes: None,
    }
}

/// A pod's labels less `pod_uid` (`--kubernetes.pod-uid`): the workload
/// series carry their own `pod_uid`, the one the process's cgroup names;
/// and less the DRA attributes (`--kubernetes.dra-labels`), which are for
/// the DCGM series.
fn without_uid(labels: &PodLabels) -> PodLabels {
    labels
        .iter()
        .filter(|(name, _)| *name != "pod_uid" && !name.starts_with("dra_"))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuReadings, PodAttribution, UsageReadings};

    fn gpu(index: u32, pods: &[(&str, &str)]) -> GpuState {
        let mut g = GpuState::with_readings(
            index,
            GpuReadings {
                usage: Some(UsageReadings {
                    minor_number: Some(index + 10),
                    ..UsageReadings::default()
                }),
                ..Default::default()
            },
        );
        g.pods = pods
            .iter()
            .map(|(ns, pod)| PodAttribution {
                namespace: (*ns).into(),
                pod: (*pod).into(),
                container: "main".into(),
                gpu_instance: None,
                compute_instance: None,
                labels: vec![("team", format!("{ns}-team"))],
            })
            .collect();
        g
    }

    fn process_holding(gpu: u32, names: Option<(&str, &str)>) -> WorkloadHolding {
        let mut w = Workload::of(WorkloadKind::Kubernetes);
        w.container_id = Some("3f4e8a1b2c9d".into());
        if let Some((ns, pod)) = names {
            w.namespace = Some(ns.into());
            w.pod = Some(pod.into());
            w.container = Some("main".into());
        }
        allocation(gpu, None, None, w)
    }

    #[test]
    fn allocations_without_a_process_become_holdings() {
        let gpus = [
            gpu(0, &[("ml", "busy"), ("ml", "idle")]),
            gpu(1, &[("ml", "other")]),
            gpu(2, &[]),
        ];
        let mut holdings = vec![
            process_holding(0, Some(("ml", "busy"))),
            // GPU 1 runs a pod process whose names are unknown: it may be
            // the allocated pod's, so the allocation adds nothing.
            process_holding(1, None),
        ];
        let slurm = [SlurmJob {
            job: "7".into(),
            uid: Some(1001),
            user: Some("alice".into()),
            minors: vec![12],
        }];
        merge(&mut holdings, &gpus, &slurm);
        let added: Vec<_> = holdings[2..]
            .iter()
            .map(|h| {
                let w = &h.workload;
                (
                    h.gpu,
                    w.kind,
                    w.pod.as_deref().or(w.slurm_job.as_deref()),
                    w.user.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            added,
            [
                (0, WorkloadKind::Kubernetes, Some("idle"), None),
                (2, WorkloadKind::Slurm, Some("7"), Some("alice")),
            ]
        );
        // The pod's labels: on its allocation, and on its processes.
        let team = |h: &WorkloadHolding| h.workload.pod_labels.clone();
        assert_eq!(team(&holdings[2]), [("team", "ml-team".to_string())]);
        assert_eq!(team(&holdings[0]), [("team", "ml-team".to_string())]);
        assert!(team(&holdings[1]).is_empty(), "a process without names");
        assert!(team(&holdings[3]).is_empty(), "a Slurm job");
    }

    #[test]
    fn device_allowlists_name_gpus_by_minor() {
        let list = "c 195:255 rwm\nc 195:254 rwm\nc 195:2 rwm\nc 195:0 rw\nc 509:* rwm\nc 1:3 rwm\nb 8:0 r\n";
        assert_eq!(allowed_gpus(list), Some(vec![0, 2]));
        assert_eq!(allowed_gpus("a *:* rwm\n"), None, "unconstrained");
        assert_eq!(allowed_gpus("c 195:255 rwm\n"), Some(vec![]));
        assert_eq!(allowed_gpus("garbage\nc 195:x rwm\n"), Some(vec![]));
    }

    #[test]
    fn slurm_job_cgroups_are_walked() {
        let root =
            std::env::temp_dir().join(format!("nvml-exporter-slurm-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let job = |node: &str, uid: u32, job: &str, list: &str| {
            let dir = root.join(format!("devices/{node}/uid_{uid}/job_{job}"));
            std::fs::create_dir_all(dir.join("step_0")).unwrap();
            std::fs::write(dir.join("devices.list"), list).unwrap();
        };
        job("slurm", 1001, "42", "c 195:255 rwm\nc 195:1 rwm\n");
        job("slurm_node7", 1002, "43", "c 195:0 rwm\nc 195:3 rwm\n");
        job("slurm", 1003, "44", "a *:* rwm\n");
        job("slurm", 1004, "45", "c 195:255 rwm\n");
        std::fs::create_dir_all(root.join("devices/slurm/uid_1005/job_46")).unwrap();
        job("docker", 0, "47", "c 195:0 rwm\n");
        let files = HostFiles::new(PathBuf::new());
        let (jobs, errors) = slurm_jobs(&files, &root);
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.job.as_str(), j.uid, j.minors.clone()))
            .collect();
        assert_eq!(
            got,
            [("42", Some(1001), vec![1]), ("43", Some(1002), vec![0, 3])],
            "unconstrained and GPU-less jobs hold no GPU; only Slurm roots"
        );
        assert!(
            errors.is_empty(),
            "a job without its file has ended: {errors:?}"
        );
        assert_eq!(slurm_jobs(&files, &root.join("v2-host")), (vec![], vec![]));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn log_links_give_pod_names() {
        let id = "3f4e8a1b2c9d0e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f";
        let (short, names) = parse_log_link(&format!("trainer-0_ml-team_main-{id}.log")).unwrap();
        assert_eq!(short, "3f4e8a1b2c9d");
        assert_eq!(
            names,
            PodContainer {
                namespace: "ml-team".into(),
                pod: "trainer-0".into(),
                container: "main".into(),
            }
        );
        assert_eq!(parse_log_link("trainer-0_ml_main-abc.log"), None);
        assert_eq!(parse_log_link(&format!("x_y-{id}.log")), None);
        assert_eq!(parse_log_link(&format!("a_b_c-{id}")), None);
    }
}
