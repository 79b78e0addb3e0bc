//! What an unprivileged or partly denied exporter sees, as on a real node
//! running it in a container: a GPU whose handle answers NO_PERMISSION, a
//! MIG node without the `mig/monitor` capability, and an event set whose
//! GPU fell off the bus. The real binary against nvml-sim's `denied`,
//! `privileged = false` and lost-GPU event behaviour.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{samples, Exporter, Sample};

fn scrape_until(e: &Exporter, what: &str, pred: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = samples(&e.scrape());
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn find<'a>(s: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    s.iter()
        .filter(|x| x.name == name && labels.iter().all(|(k, v)| x.label(k) == Some(*v)))
        .collect()
}

fn scenario(dir: &tempfile::TempDir, body: &str) -> PathBuf {
    let path = dir.path().join("node.toml");
    std::fs::write(
        &path,
        format!("name = \"node\"\nbase = \"dgx-h100\"\n{body}"),
    )
    .unwrap();
    path
}

#[test]
fn a_denied_gpu_is_reported_as_denied_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(&dir, "denied = [3]\n");
    let e = Exporter::simulate(path.to_str().unwrap(), &[]);
    e.wait_ready();
    let s = scrape_until(&e, "every other GPU up", |s| {
        find(s, "nvidia_gpu_up", &[("gpu", "7")])
            .first()
            .is_some_and(|x| x.value == "1")
    });
    // Several polls later: still one log line.
    e.wait_polls(3);
    let s2 = samples(&e.scrape());
    for s in [&s, &s2] {
        let denied: Vec<_> = find(s, "nvml_exporter_gpu_access_denied", &[])
            .iter()
            .map(|x| (x.label("gpu"), x.value.as_str()))
            .collect();
        assert_eq!(denied, [(Some("3"), "1")]);
        // No `up` series to page "GPU lost" on, and no error count for a
        // setting.
        assert!(find(s, "nvidia_gpu_up", &[("gpu", "3")]).is_empty());
        assert!(find(s, "nvml_exporter_nvml_errors_total", &[("gpu", "3")]).is_empty());
        assert_eq!(find(s, "nvidia_gpu_up", &[]).len(), 7);
    }
    let log = e.log();
    assert_eq!(
        log.matches("NVML denies access to this GPU").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("GPU is lost"), "{log}");
}

#[test]
fn an_unprivileged_mig_node_says_what_it_cannot_see() {
    let dir = tempfile::tempdir().unwrap();
    // GPU 0 is in MIG mode (seven 1g.10gb, GPU instances 7-13). An XID
    // attributed to instance 7 reaches only a privileged caller; one of
    // the whole device reaches everybody.
    let path = scenario(
        &dir,
        "privileged = false\n\n\
         [[timeline]]\nat = 20\naction = \"xid\"\ngpu = 0\ncode = 31\ngpu_instance = 7\n\n\
         [[timeline]]\nat = 20\naction = \"xid\"\ngpu = 0\ncode = 48\n",
    );
    let e = Exporter::simulate_env(
        path.to_str().unwrap(),
        &[],
        &[("NVML_SIM_TIME_SCALE", "10")],
    );
    e.wait_ready();
    let s = scrape_until(&e, "the whole-device XID", |s| {
        !find(
            s,
            "nvidia_gpu_xid_errors_total",
            &[("gpu", "0"), ("xid", "48")],
        )
        .is_empty()
    });
    // MIG-enabled GPUs 0 and 1 say 0; GPUs without MIG have no series.
    let privileged: Vec<_> = find(&s, "nvml_exporter_mig_privileged", &[])
        .iter()
        .map(|x| (x.label("gpu").unwrap().to_string(), x.value.clone()))
        .collect();
    assert_eq!(
        privileged,
        vec![
            ("0".to_string(), "0".to_string()),
            ("1".to_string(), "0".to_string())
        ]
    );
    // The instance-scoped XID was never delivered: not counted (and the
    // operator was told it cannot be).
    assert!(find(&s, "nvidia_gpu_xid_errors_total", &[("xid", "31")]).is_empty());
    // Withheld aggregates are absent, not errors; per-instance memory stays.
    assert!(
        find(&s, "nvml_exporter_nvml_errors_total", &[("gpu", "0")]).is_empty(),
        "{s:?}"
    );
    assert!(find(&s, "nvidia_gpu_memory_used_bytes", &[("gpu", "0")]).is_empty());
    assert!(!find(&s, "nvidia_gpu_mig_memory_used_bytes", &[("gpu", "0")]).is_empty());
    assert!(!find(&s, "nvidia_gpu_memory_used_bytes", &[("gpu", "2")]).is_empty());
    let log = e.log();
    assert_eq!(
        log.matches("NVML withholds MIG privileges from this process")
            .count(),
        1,
        "{log}"
    );
}

#[test]
fn a_privileged_mig_node_sees_instance_xids() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(
        &dir,
        "[[timeline]]\nat = 20\naction = \"xid\"\ngpu = 0\ncode = 31\ngpu_instance = 7\n",
    );
    let e = Exporter::simulate_env(
        path.to_str().unwrap(),
        &[],
        &[("NVML_SIM_TIME_SCALE", "10")],
    );
    e.wait_ready();
    let s = scrape_until(&e, "the instance XID", |s| {
        !find(
            s,
            "nvidia_gpu_xid_errors_total",
            &[("gpu", "0"), ("xid", "31")],
        )
        .is_empty()
    });
    let privileged: Vec<_> = find(&s, "nvml_exporter_mig_privileged", &[])
        .iter()
        .map(|x| x.value.clone())
        .collect();
    assert_eq!(privileged, ["1", "1"]);
    assert!(!e.log().contains("withholds MIG privileges"));
}

#[test]
fn xids_of_other_gpus_arrive_after_one_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    // GPU 2 falls off the bus at 1 s; GPU 4 raises XID 43 at 2 s. Every
    // wait on a set holding GPU 2 answers GPU_IS_LOST from then on.
    let path = scenario(
        &dir,
        "[[timeline]]\nat = 10\naction = \"lose\"\ngpu = 2\n\n\
         [[timeline]]\nat = 20\naction = \"xid\"\ngpu = 4\ncode = 43\n",
    );
    let e = Exporter::simulate_env(
        path.to_str().unwrap(),
        &[],
        &[("NVML_SIM_TIME_SCALE", "10")],
    );
    e.wait_ready();
    scrape_until(&e, "XID 43 of GPU 4", |s| {
        find(
            s,
            "nvidia_gpu_xid_errors_total",
            &[("gpu", "4"), ("xid", "43")],
        )
        .first()
        .is_some_and(|x| x.value == "1")
    });
    assert!(
        e.wait_log(
            "XID events of the other GPUs continue",
            Duration::from_secs(5)
        ),
        "{}",
        e.log()
    );
}

#[test]
fn process_names_outside_our_pid_namespace_are_absent_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A container without hostPID: NVML cannot name any GPU process.
    let path = scenario(&dir, "host_pid_namespace = false\n");
    let e = Exporter::simulate(path.to_str().unwrap(), &["--collector.process_memory"]);
    e.wait_ready();
    scrape_until(&e, "process memory series", |s| {
        !find(s, "nvidia_gpu_process_memory_used_bytes", &[]).is_empty()
    });
    // Several polls later: still no error and no name.
    e.wait_polls(3);
    let s = samples(&e.scrape());
    let procs = find(&s, "nvidia_gpu_process_memory_used_bytes", &[]);
    assert!(procs.len() > 5, "{procs:?}");
    assert!(
        procs.iter().all(|p| p.label("process_name").is_none()),
        "{procs:?}"
    );
    let errors = find(
        &s,
        "nvml_exporter_nvml_errors_total",
        &[("family", "process_memory")],
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(!e.log().contains("not_found"), "{}", e.log());
}
