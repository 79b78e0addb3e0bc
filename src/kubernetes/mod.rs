//! Kubernetes pod attribution: which namespace, pod and container holds
//! each GPU and each MIG device, from the kubelet's pod-resources API.
//!
//! A background task asks the kubelet every `refresh_interval` and keeps the
//! answer; the sampler's publish step copies it onto the snapshot
//! ([`Attribution::apply`]). A scrape never talks to the kubelet, and an
//! unreachable kubelet is `nvml_exporter_kubernetes_up 0` plus one log line,
//! never a failed scrape.

mod podresources;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::snapshot::{GpuState, KubernetesStatus, PodAttribution, Snapshot};

pub use podresources::KubeletError;

/// Where the kubelet serves pod-resources on every standard node.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Resources the NVIDIA device plugin advertises: whole GPUs, time-sliced
/// GPUs renamed by `renameByDefault`, and MIG devices by profile. A trailing
/// `*` matches any suffix.
pub const DEFAULT_RESOURCE_NAMES: &[&str] = &[
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
];

/// How long one List call may take before the refresh counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// After this many refresh intervals without a successful List, the last
/// answer is too old to trust and attribution is withdrawn.
const STALE_AFTER_INTERVALS: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributionConfig {
    pub socket: PathBuf,
    /// Resource-name patterns whose devices are GPUs or MIG devices.
    pub resource_names: Vec<String>,
    pub refresh_interval: Duration,
}

/// A device as the device plugin names it in the kubelet's answer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum DeviceRef {
    /// `GPU-...` or `MIG-...` (the plugin's default `uuid` strategy).
    Uuid(String),
    /// A whole GPU by NVML index (the plugin's `index` strategy).
    Index(u32),
}

impl DeviceRef {
    /// Time-slicing and MPS replicas are advertised as `<id>::<replica>`:
    /// every replica of a device is the same device.
    fn parse(device_id: &str) -> Option<DeviceRef> {
        let id = device_id.split("::").next().unwrap_or(device_id).trim();
        if id.starts_with("GPU-") || id.starts_with("MIG-") {
            Some(DeviceRef::Uuid(id.to_string()))
        } else {
            id.parse().ok().map(DeviceRef::Index)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Holder {
    device: DeviceRef,
    namespace: String,
    pod: String,
    container: String,
}

struct Known {
    holders: Vec<Holder>,
    /// When the kubelet last answered; `None` before the first answer.
    at: Option<Instant>,
}

#[derive(Default)]
struct Health {
    up: bool,
    refresh_errors: u64,
    last_refresh: Option<SystemTime>,
}

/// The latest attribution, shared between the refresh task (writer) and
/// the publish step (reader).
pub struct Attribution {
    config: AttributionConfig,
    known: ArcSwap<Known>,
    health: Mutex<Health>,
}

impl Attribution {
    pub fn new(config: AttributionConfig) -> Arc<Self> {
        Arc::new(Attribution {
            config,
            known: ArcSwap::from_pointee(Known {
                holders: Vec::new(),
                at: None,
            }),
            health: Mutex::new(Health::default()),
        })
    }

    /// Refreshes until `stop` fires. Runs on the async runtime; each call is
    /// bounded by a timeout, so a wedged kubelet cannot pile up calls.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        let mut tick = tokio::time::interval(self.config.refresh_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.refresh().await,
                _ = stop.changed() => return,
            }
        }
    }

    async fn refresh(&self) {
        let result = podresources::list(&self.config.socket, CALL_TIMEOUT).await;
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(response) => {
                let holders = holders_from(&response, &self.config.resource_names);
                self.known.store(Arc::new(Known {
                    holders,
                    at: Some(Instant::now()),
                }));
                if !health.up {
                    tracing::info!(socket = %self.config.socket.display(), "kubelet pod-resources reachable: pod attribution on");
                }
                health.up = true;
                health.last_refresh = Some(SystemTime::now());
            }
            Err(e) => {
                health.refresh_errors += 1;
                // Once per outage, not once per refresh.
                if health.up || health.refresh_errors == 1 {
                    tracing::warn!(error = %e, "pod attribution unavailable");
                }
                health.up = false;
            }
        }
    }

    /// A copy of `snapshot` with each GPU's pods and the kubelet's status
    /// filled in.
    pub fn apply(&self, snapshot: &Snapshot) -> Snapshot {
        let known = self.known.load();
        let fresh = known
            .at
            .is_some_and(|at| at.elapsed() <= self.config.refresh_interval * STALE_AFTER_INTERVALS);
        let mut out = snapshot.clone();
        for gpu in &mut out.gpus {
            gpu.pods = if fresh {
                attribute(gpu, &known.holders)
            } else {
                Vec::new()
            };
        }
        let health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        out.kubernetes = Some(KubernetesStatus {
            up: health.up,
            refresh_errors: health.refresh_errors,
            last_refresh: health.last_refresh,
        });
        out
    }
}

/// Does `resource` match one of the patterns (`*` only as the last
/// character)?
fn resource_matches(patterns: &[String], resource: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => resource.starts_with(prefix),
        None => resource == p,
    })
}

fn holders_from(
    response: &podresources::ListPodResourcesResponse,
    patterns: &[String],
) -> Vec<Holder> {
    let mut holders = Vec::new();
    for pod in &response.pod_resources {
        for container in &pod.containers {
            for devices in &container.devices {
                if !resource_matches(patterns, &devices.resource_name) {
                    continue;
                }
                for id in &devices.device_ids {
                    if let Some(device) = DeviceRef::parse(id) {
                        holders.push(Holder {
                            device,
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: container.name.clone(),
                        });
                    }
                }
            }
        }
    }
    // Several replicas of one device in one container are one holding.
    holders.sort();
    holders.dedup();
    holders
}

/// The pods holding this GPU or one of its MIG devices. MIG devices are
/// found through the GPU's current readings; while the GPU is hung or lost
/// its MIG layout is unknown, and only whole-GPU holders are reported.
fn attribute(gpu: &GpuState, holders: &[Holder]) -> Vec<PodAttribution> {
    let mut pods = Vec::new();
    for h in holders {
        let place = match &h.device {
            DeviceRef::Index(i) if *i == gpu.index => Some((None, None)),
            DeviceRef::Uuid(u) if *u == gpu.uuid => Some((None, None)),
            DeviceRef::Uuid(u) if u.starts_with("MIG-") => mig_place(gpu, u),
            _ => None,
        };
        if let Some((gpu_instance, compute_instance)) = place {
            pods.push(PodAttribution {
                namespace: h.namespace.clone(),
                pod: h.pod.clone(),
                container: h.container.clone(),
                gpu_instance,
                compute_instance,
            });
        }
    }
    pods
}

fn mig_place(gpu: &GpuState, mig_uuid: &str) -> Option<(Option<u32>, Option<u32>)> {
    let readings = gpu.readings.as_ref()?;
    readings.mig.iter().find_map(|gi| {
        gi.compute_instances
            .iter()
            .find(|ci| ci.mig_uuid == mig_uuid)
            .map(|ci| (Some(gi.gpu_instance), Some(ci.compute_instance)))
    })
}

#[cfg(test)]
mod tests {
    use super::podresources::*;
    use super::*;
    use crate::snapshot::{
        GpuIdentity, GpuReadings, Health as GpuHealth, MigComputeInstance, MigGpuInstance,
    };

    fn gpu(index: u32, uuid: &str, mig: Vec<MigGpuInstance>) -> GpuState {
        GpuState {
            index,
            uuid: uuid.into(),
            identity: GpuIdentity::default(),
            health: GpuHealth::Up,
            last_sample: None,
            sample_duration: None,
            stuck_call: None,
            readings: Some(GpuReadings {
                mig,
                ..Default::default()
            }),
            xids: vec![],
            xid_other: None,
            nvml_errors: vec![],
            pods: vec![],
            verdicts: vec![],
        }
    }

    fn pod(ns: &str, name: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: ns.into(),
            containers: vec![ContainerResources {
                name: container.into(),
                devices: vec![ContainerDevices {
                    resource_name: resource.into(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                }],
            }],
        }
    }

    fn defaults() -> Vec<String> {
        DEFAULT_RESOURCE_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn device_ids_of_every_plugin_strategy_parse() {
        assert_eq!(
            DeviceRef::parse("GPU-abc"),
            Some(DeviceRef::Uuid("GPU-abc".into()))
        );
        assert_eq!(
            DeviceRef::parse("GPU-abc::3"),
            Some(DeviceRef::Uuid("GPU-abc".into()))
        );
        assert_eq!(
            DeviceRef::parse("MIG-x"),
            Some(DeviceRef::Uuid("MIG-x".into()))
        );
        assert_eq!(DeviceRef::parse("2"), Some(DeviceRef::Index(2)));
        assert_eq!(DeviceRef::parse("2::1"), Some(DeviceRef::Index(2)));
        assert_eq!(DeviceRef::parse("eth0"), None);
    }

    #[test]
    fn only_gpu_resources_count() {
        let patterns = defaults();
        assert!(resource_matches(&patterns, "nvidia.com/gpu"));
        assert!(resource_matches(&patterns, "nvidia.com/mig-3g.40gb"));
        assert!(!resource_matches(&patterns, "nvidia.com/gpu-other"));
        assert!(!resource_matches(&patterns, "example.com/nic"));
    }

    #[test]
    fn shared_and_mig_devices_attribute_to_every_holder() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![
                pod("a", "p1", "c", "nvidia.com/gpu", &["GPU-0::0"]),
                pod("b", "p2", "c", "nvidia.com/gpu", &["GPU-0::1"]),
                pod("c", "p3", "c", "nvidia.com/mig-1g.10gb", &["MIG-1"]),
                pod("d", "p4", "c", "example.com/nic", &["GPU-0"]),
                // Two replicas of the same GPU in one container: one holding.
                pod("e", "p5", "c", "nvidia.com/gpu", &["1::0", "1::1"]),
            ],
        };
        let holders = holders_from(&response, &defaults());
        let g0 = gpu(0, "GPU-0", vec![]);
        let g1 = gpu(
            1,
            "GPU-1",
            vec![MigGpuInstance {
                gpu_instance: 7,
                profile: "1g.10gb".into(),
                memory: None,
                activity: vec![],
                compute_instances: vec![MigComputeInstance {
                    compute_instance: 0,
                    mig_uuid: "MIG-1".into(),
                }],
            }],
        );
        let pods0: Vec<_> = attribute(&g0, &holders)
            .into_iter()
            .map(|p| p.pod)
            .collect();
        assert_eq!(pods0, ["p1", "p2"]);
        let pods1 = attribute(&g1, &holders);
        assert_eq!(pods1.len(), 2);
        let mig = pods1.iter().find(|p| p.pod == "p3").expect("MIG holder");
        assert_eq!((mig.gpu_instance, mig.compute_instance), (Some(7), Some(0)));
        let whole = pods1.iter().find(|p| p.pod == "p5").expect("index holder");
        assert_eq!(whole.gpu_instance, None);
    }

    #[test]
    fn stale_answers_are_withdrawn() {
        let attribution = Attribution::new(AttributionConfig {
            socket: "/nonexistent".into(),
            resource_names: defaults(),
            refresh_interval: Duration::from_millis(1),
        });
        attribution.known.store(Arc::new(Known {
            holders: vec![Holder {
                device: DeviceRef::Index(0),
                namespace: "a".into(),
                pod: "p".into(),
                container: "c".into(),
            }],
            at: Instant::now().checked_sub(Duration::from_secs(1)),
        }));
        let snapshot = Snapshot {
            gpus: vec![gpu(0, "GPU-0", vec![])],
            ..Default::default()
        };
        let out = attribution.apply(&snapshot);
        assert!(out.gpus[0].pods.is_empty());
        assert_eq!(out.kubernetes.map(|k| k.up), Some(false));
    }
}
