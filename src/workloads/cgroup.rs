//! What a process's cgroup path says about the workload it belongs to.
//!
//! Pure functions over the text of `/proc/<pid>/cgroup`, one line per
//! hierarchy, `hierarchy-ID:controller-list:path` (cgroup v2 has the one
//! line `0::path`; a hybrid host lists both). The layouts recognised:
//!
//! | Workload | Path (examples) |
//! |---|---|
//! | Slurm, cgroup v1 | `/slurm/uid_1000/job_42/step_0/task_0`, `/slurm_node7/uid_1000/job_42/step_batch` |
//! | Slurm, cgroup v2 | `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0` |
//! | Kubernetes | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`, `/kubepods/besteffort/pod<uid>/<id>` |
//! | Docker | `/system.slice/docker-<id>.scope` (systemd driver), `/docker/<id>` (cgroupfs driver) |
//! | Podman | `/machine.slice/libpod-<id>.scope[/container]` (rootful), `/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-<id>.scope` (rootless), `/libpod_parent/libpod-<id>` (cgroupfs) |
//! | containerd | `/system.slice/cri-containerd-<id>.scope` or `nerdctl-<id>.scope`, `/<namespace>/<id>` (cgroupfs) |
//! | systemd | `/system.slice/<name>.service`, any `.service` or `.scope` unit |
//! | user | `/user.slice/user-<uid>.slice/...` (login sessions, user services) |
//! | other | anything else, the path kept as `cgroup` |
//!
//! A path read from inside a cgroup namespace may start with `/..`
//! components; they are skipped, so the classification holds as long as
//! the workload's own components are visible.
//!
//! Slurm and Kubernetes are believed only where their daemons put them:
//! the Slurm root (`slurm`, `slurm_<node>`, `system.slice/slurmstepd.scope`)
//! and `kubepods` must start the path. A user may create cgroups of any
//! name in the subtree systemd delegates to them (`/user.slice/...`,
//! `user@<uid>.service`), so nothing there is ever a Slurm job or a pod,
//! however it is named: it is the user's, or a rootless container's.

use crate::snapshot::{Workload, WorkloadKind};

/// The cgroup paths in the text of `/proc/<pid>/cgroup`, in file order.
/// Lines that are not `id:controllers:/path` are skipped; `None` when no
/// line is.
pub fn paths(text: &str) -> Option<Vec<&str>> {
    let found: Vec<&str> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let _controllers = parts.next()?;
            let path = parts.next()?;
            (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && path.starts_with('/'))
                .then_some(path)
        })
        .collect();
    (!found.is_empty()).then_some(found)
}

/// The workload the most specific of `paths` names: a job, pod or
/// container beats a systemd unit or login session, which beats a bare
/// path (on a cgroup v1 host the memory hierarchy may name the Slurm job
/// while `name=systemd` only names `slurmd.service`). Between equals the
/// deeper path wins (a v1 memory hierarchy at `/batch/7` says more than
/// `name=systemd` at `/`), then the first.
pub fn classify(paths: &[&str]) -> Workload {
    let mut best: Option<((u8, usize), Workload)> = None;
    for path in paths {
        let (rank, workload) = classify_path(path);
        let key = (rank, path.split('/').filter(|c| !c.is_empty()).count());
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, workload));
        }
    }
    best.map_or_else(|| Workload::of(WorkloadKind::Other), |(_, w)| w)
}

/// The workload one path names, and how specific that is (3: job, pod or
/// container; 2: unit or session; 1: a bare path).
fn classify_path(path: &str) -> (u8, Workload) {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != "..")
        .collect();
    // Components from the first that a user controls on are theirs.
    let trusted = &parts[..parts
        .iter()
        .position(|c| is_user_subtree(c))
        .unwrap_or(parts.len())];
    if let Some(w) = slurm(trusted) {
        return (3, w);
    }
    if let Some(w) = kubernetes(trusted) {
        return (3, w);
    }
    if let Some(w) = container(&parts) {
        return (3, w);
    }
    if let Some(uid) = parts.iter().find_map(|c| {
        c.strip_prefix("user-")?
            .strip_suffix(".slice")?
            .parse::<u32>()
            .ok()
    }) {
        let mut w = Workload::of(WorkloadKind::User);
        w.uid = Some(uid);
        return (2, w);
    }
    if let Some(unit) = parts.iter().find(|c| is_unit(c)) {
        let mut w = Workload::of(WorkloadKind::Systemd);
        w.systemd_unit = Some((*unit).to_string());
        return (2, w);
    }
    let mut w = Workload::of(WorkloadKind::Other);
    w.cgroup = Some(format!("/{}", parts.join("/")));
    (1, w)
}

/// Where a user's own cgroups begin: the login slice, a user's slice, or
/// the `user@<uid>.service` manager systemd delegates cgroups to.
fn is_user_subtree(component: &str) -> bool {
    component == "user.slice"
        || component
            .strip_prefix("user-")
            .and_then(|c| c.strip_suffix(".slice"))
            .is_some_and(|uid| uid.parse::<u32>().is_ok())
        || component
            .strip_prefix("user@")
            .and_then(|c| c.strip_suffix(".service"))
            .is_some_and(|uid| uid.parse::<u32>().is_ok())
}

/// A systemd service or scope; unit names are case-sensitive.
fn is_unit(component: &str) -> bool {
    [".service", ".scope"].iter().any(|suffix| {
        component
            .strip_suffix(suffix)
            .is_some_and(|name| !name.is_empty())
    })
}

/// `job_<id>` under a Slurm hierarchy (`/slurm`, `/slurm_<node>` on
/// cgroup v1; `/system.slice/slurmstepd.scope` or, where slurmd runs
/// outside systemd, `/slurmstepd.scope` on v2), with the `step_<n>` below
/// it and, on cgroup v1, the `uid_<n>` above it.
fn slurm(parts: &[&str]) -> Option<Workload> {
    let root = match parts {
        [first, ..] if *first == "slurm" || first.starts_with("slurm_") => 0,
        ["slurmstepd.scope", ..] => 0,
        ["system.slice", "slurmstepd.scope", ..] => 1,
        _ => return None,
    };
    let rest = &parts[root + 1..];
    let job_at = rest.iter().position(|c| {
        c.strip_prefix("job_")
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
    })?;
    let mut w = Workload::of(WorkloadKind::Slurm);
    w.slurm_job = rest[job_at].strip_prefix("job_").map(str::to_string);
    w.slurm_step = rest
        .get(job_at + 1)
        .and_then(|c| c.strip_prefix("step_"))
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    w.uid = rest[..job_at]
        .iter()
        .find_map(|c| c.strip_prefix("uid_")?.parse().ok());
    Some(w)
}

/// A pod under the kubelet's `/kubepods` (`/kubepods.slice` with the
/// systemd driver), and its container.
fn kubernetes(parts: &[&str]) -> Option<Workload> {
    if !parts.first()?.starts_with("kubepods") {
        return None;
    }
    let rest = parts;
    let mut w = Workload::of(WorkloadKind::Kubernetes);
    w.pod_uid = rest.iter().find_map(|c| {
        // systemd driver: `kubepods-burstable-pod<uid with _>.slice`;
        // cgroupfs driver: `pod<uid>`.
        let uid = match c.strip_suffix(".slice") {
            Some(slice) => slice.rsplit_once("-pod")?.1.replace('_', "-"),
            None => c.strip_prefix("pod")?.to_string(),
        };
        (!uid.is_empty()).then_some(uid)
    });
    // systemd driver: `<runtime>-<id>.scope`; cgroupfs driver: the bare id.
    w.container_id = rest.iter().rev().find_map(|c| {
        runtime_container(c)
            .map(|(_, id)| id)
            .or_else(|| is_container_id(c).then(|| short_id(c)))
    });
    Some(w)
}

/// A container of Docker, Podman or containerd outside Kubernetes.
fn container(parts: &[&str]) -> Option<Workload> {
    for (i, c) in parts.iter().enumerate().rev() {
        if let Some((Some(kind), id)) = runtime_container(c) {
            let mut w = Workload::of(kind);
            w.container_id = Some(id);
            return Some(w);
        }
        // cgroupfs drivers: `/docker/<id>`, `/<containerd namespace>/<id>`.
        if is_container_id(c) {
            let kind = match i.checked_sub(1).map(|p| parts[p]) {
                Some("docker") => WorkloadKind::Docker,
                _ => WorkloadKind::Containerd,
            };
            let mut w = Workload::of(kind);
            w.container_id = Some(short_id(c));
            return Some(w);
        }
    }
    None
}

/// A runtime's own cgroup name for a container: `docker-<id>.scope`,
/// `libpod-<id>.scope` (or `libpod-<id>` with cgroupfs),
/// `cri-containerd-<id>.scope`, `nerdctl-<id>.scope`, `crio-<id>.scope`.
/// Podman's `libpod-conmon-<id>.scope` is its monitor, not the container.
/// CRI-O runs only under Kubernetes: it has no kind of its own.
fn runtime_container(component: &str) -> Option<(Option<WorkloadKind>, String)> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    for (prefix, kind) in [
        ("docker-", Some(WorkloadKind::Docker)),
        ("libpod-", Some(WorkloadKind::Podman)),
        ("cri-containerd-", Some(WorkloadKind::Containerd)),
        ("nerdctl-", Some(WorkloadKind::Containerd)),
        ("crio-", None),
    ] {
        if let Some(id) = name.strip_prefix(prefix) {
            if is_container_id(id) {
                return Some((kind, short_id(id)));
            }
        }
    }
    None
}

/// Runtimes name containers by 64 lower-case hex digits.
fn is_container_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The 12-digit form `docker ps` and `podman ps` print.
fn short_id(id: &str) -> String {
    id[..12].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e8a1b2c9d0e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f";

    fn of(text: &str) -> Workload {
        classify(&paths(text).expect("a valid cgroup file"))
    }

    #[test]
    fn slurm_cgroup_v1_names_job_step_and_uid() {
        let text = "12:memory:/slurm/uid_1001/job_4242/step_0/task_0\n\
                    11:devices:/slurm/uid_1001/job_4242/step_0\n\
                    1:name=systemd:/system.slice/slurmd.service\n";
        let w = of(text);
        assert_eq!(w.kind, WorkloadKind::Slurm);
        assert_eq!(w.slurm_job.as_deref(), Some("4242"));
        assert_eq!(w.slurm_step.as_deref(), Some("0"));
        assert_eq!(w.uid, Some(1001));
        // Several slurmd per host put the node name in the root.
        let w = of("5:freezer:/slurm_node7/uid_0/job_9/step_batch\n");
        assert_eq!(
            (w.slurm_job.as_deref(), w.slurm_step.as_deref()),
            (Some("9"), Some("batch"))
        );
    }

    #[test]
    fn slurm_cgroup_v2_names_job_and_step() {
        let w = of("0::/system.slice/slurmstepd.scope/job_77/step_3/user/task_0\n");
        assert_eq!(w.kind, WorkloadKind::Slurm);
        assert_eq!(w.slurm_job.as_deref(), Some("77"));
        assert_eq!(w.slurm_step.as_deref(), Some("3"));
        assert_eq!(w.uid, None, "v2 paths carry no uid; status gives it");
        let w = of("0::/system.slice/slurmstepd.scope/job_77/step_extern/user/task_special\n");
        assert_eq!(w.slurm_step.as_deref(), Some("extern"));
        // The job's own cgroup, before a step exists.
        let w = of("0::/system.slice/slurmstepd.scope/job_77\n");
        assert_eq!((w.kind, w.slurm_step), (WorkloadKind::Slurm, None));
    }

    #[test]
    fn docker_under_both_cgroup_drivers() {
        let systemd = of(&format!("0::/system.slice/docker-{ID}.scope\n"));
        assert_eq!(systemd.kind, WorkloadKind::Docker);
        assert_eq!(systemd.container_id.as_deref(), Some("3f4e8a1b2c9d"));
        let cgroupfs = of(&format!(
            "12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n"
        ));
        assert_eq!(cgroupfs, systemd);
        assert_eq!(of(&format!("0::/docker/{ID}\n")), systemd);
    }

    #[test]
    fn podman_rootful_and_rootless() {
        let rootful = of(&format!("0::/machine.slice/libpod-{ID}.scope/container\n"));
        assert_eq!(rootful.kind, WorkloadKind::Podman);
        assert_eq!(rootful.container_id.as_deref(), Some("3f4e8a1b2c9d"));
        let rootless = of(&format!(
            "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n"
        ));
        assert_eq!(rootless, rootful, "a container, not the user's session");
        let cgroupfs = of(&format!("0::/libpod_parent/libpod-{ID}\n"));
        assert_eq!(cgroupfs, rootful);
        // conmon watches the container from its own scope.
        let conmon = of(&format!("0::/machine.slice/libpod-conmon-{ID}.scope\n"));
        assert_eq!(conmon.kind, WorkloadKind::Systemd);
    }

    #[test]
    fn containerd_alone_and_under_kubernetes() {
        let alone = of(&format!("0::/system.slice/cri-containerd-{ID}.scope\n"));
        assert_eq!(alone.kind, WorkloadKind::Containerd);
        assert_eq!(alone.container_id.as_deref(), Some("3f4e8a1b2c9d"));
        assert_eq!(of(&format!("0::/default/{ID}\n")), alone);

        let systemd = of(&format!(
            "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod8a1c7b52_3d3e_4c4e_9f1a_0c0ffee00001.slice/cri-containerd-{ID}.scope\n"
        ));
        assert_eq!(systemd.kind, WorkloadKind::Kubernetes);
        assert_eq!(
            systemd.pod_uid.as_deref(),
            Some("8a1c7b52-3d3e-4c4e-9f1a-0c0ffee00001")
        );
        assert_eq!(systemd.container_id.as_deref(), Some("3f4e8a1b2c9d"));
        let cgroupfs = of(&format!(
            "10:memory:/kubepods/besteffort/pod8a1c7b52-3d3e-4c4e-9f1a-0c0ffee00001/{ID}\n"
        ));
        assert_eq!(cgroupfs, systemd);
        // Guaranteed pods sit right under kubepods.
        let guaranteed = of(&format!(
            "0::/kubepods.slice/kubepods-pod8a1c7b52_3d3e_4c4e_9f1a_0c0ffee00001.slice/crio-{ID}.scope\n"
        ));
        assert_eq!(guaranteed, systemd);
    }

    #[test]
    fn systemd_service_and_login_session() {
        let service = of("0::/system.slice/inference-server.service\n");
        assert_eq!(service.kind, WorkloadKind::Systemd);
        assert_eq!(
            service.systemd_unit.as_deref(),
            Some("inference-server.service")
        );
        let template = of("0::/system.slice/system-trainer.slice/trainer@3.service\n");
        assert_eq!(template.systemd_unit.as_deref(), Some("trainer@3.service"));

        let session = of("0::/user.slice/user-1000.slice/session-4.scope\n");
        assert_eq!(session.kind, WorkloadKind::User);
        assert_eq!(session.uid, Some(1000));
        let user_service =
            of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-jupyter.service\n");
        assert_eq!(user_service, session);
    }

    #[test]
    fn nothing_in_a_users_own_subtree_is_a_slurm_job_or_a_pod() {
        let user = "0::/user.slice/user-1000.slice/user@1000.service";
        for forged in [
            "app.slice/slurm/uid_0/job_666/step_0",
            "system.slice/slurmstepd.scope/job_667/step_0",
            "app.slice/slurm_node7/uid_0/job_668/step_batch",
            "kubepods.slice/kubepods-pod8a1c7b52_3d3e_4c4e_9f1a_0c0ffee00001.slice/x.scope",
            "kubepods/besteffort/pod8a1c7b52-3d3e-4c4e-9f1a-0c0ffee00001/a",
        ] {
            let w = of(&format!("{user}/{forged}\n"));
            assert_eq!(w.kind, WorkloadKind::User, "{forged}");
            assert_eq!((w.slurm_job, w.pod_uid), (None, None), "{forged}");
            assert_eq!(w.uid, Some(1000), "{forged}");
        }
        // A login session's scope is no better.
        let w = of("0::/user.slice/user-1000.slice/session-3.scope/slurm/uid_0/job_1\n");
        assert_eq!(w.kind, WorkloadKind::User);
        // A rootless container stays a container, whatever it nests.
        let w = of(&format!(
            "{user}/user.slice/libpod-{ID}.scope/container/kubepods/pod1/x\n"
        ));
        assert_eq!(w.kind, WorkloadKind::Podman);
        let w = of(&format!(
            "{user}/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope\n"
        ));
        assert_eq!((w.kind, w.pod_uid), (WorkloadKind::Containerd, None));
        // Not anchored: a Slurm- or kubelet-like name deeper in a system
        // path is not the daemon's.
        let w = of("0::/system.slice/batch.service/slurm/uid_0/job_5/step_0\n");
        assert_eq!(w.kind, WorkloadKind::Systemd);
        let w = of("0::/machine.slice/vm.scope/kubepods/pod1/x\n");
        assert_eq!(w.kind, WorkloadKind::Systemd);
        // Where slurmd runs outside systemd, its scope is at the root.
        let w = of("0::/slurmstepd.scope/job_9/step_0\n");
        assert_eq!(w.slurm_job.as_deref(), Some("9"));
    }

    #[test]
    fn a_namespaced_view_still_classifies() {
        let w = of(&format!("0::/../../system.slice/docker-{ID}.scope\n"));
        assert_eq!(w.kind, WorkloadKind::Docker);
    }

    #[test]
    fn anything_else_is_other_with_its_path() {
        let w = of("0::/\n");
        assert_eq!(w.kind, WorkloadKind::Other);
        assert_eq!(w.cgroup.as_deref(), Some("/"));
        let w = of("0::/lxc/builder\n");
        assert_eq!(w.cgroup.as_deref(), Some("/lxc/builder"));
        // The deepest of equally vague v1 hierarchies.
        let w = of("9:name=systemd:/\n4:memory:/process_api/3ca3e509\n0::/\n");
        assert_eq!(w.cgroup.as_deref(), Some("/process_api/3ca3e509"));
        // Not a container id: 63 digits, or upper case.
        let w = of(&format!("0::/docker/{}\n", &ID[1..]));
        assert_eq!(w.kind, WorkloadKind::Other);
        let w = of(&format!("0::/docker/{}\n", ID.to_uppercase()));
        assert_eq!(w.kind, WorkloadKind::Other);
        // `job_` outside a Slurm hierarchy is not a Slurm job.
        let w = of("0::/batch/job_12\n");
        assert_eq!(w.kind, WorkloadKind::Other);
    }

    #[test]
    fn garbage_lines_are_skipped_and_all_garbage_is_none() {
        assert_eq!(paths(""), None);
        assert_eq!(paths("not a cgroup file\n\0\u{1}binary"), None);
        assert_eq!(paths("x::/a\n0:memory\n:/b\n"), None);
        let mixed = "garbage\n0::/system.slice/a.service\n\n";
        assert_eq!(paths(mixed), Some(vec!["/system.slice/a.service"]));
        // A path may hold a colon.
        assert_eq!(paths("0::/a:b\n"), Some(vec!["/a:b"]));
    }
}
