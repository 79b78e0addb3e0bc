//! Who holds which device, as the kubelet's answer names it, and the
//! match of those names to the GPUs and MIG devices NVML knows.
//!
//! A device is named four ways: by UUID (the NVIDIA device plugin's
//! default `uuid` strategy, and the `uuid` attribute of a DRA driver's
//! ResourceSlice), by NVML index (the plugin's `index` strategy), and, for
//! a DRA claim, by the minor numbers of the device nodes its CDI spec
//! grants (`/dev/nvidia<minor>`, and a MIG device's capability nodes).

use std::collections::{BTreeMap, HashMap};

use super::podresources::ListPodResourcesResponse;
use crate::snapshot::{GpuState, PodAttribution, PodLabels};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceRef {
    /// `GPU-...` or `MIG-...`.
    Uuid(String),
    /// A whole GPU by NVML index.
    Index(u32),
    /// A whole GPU by the minor number of its device node.
    Minor(u32),
    /// A MIG device by its parent's minor and its instance ids; without a
    /// compute instance, the whole GPU instance.
    MigMinor {
        gpu_minor: u32,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    },
}

impl DeviceRef {
    /// A device plugin's device id. Time-slicing and MPS replicas are
    /// advertised as `<id>::<replica>`: every replica of a device is the
    /// same device.
    ///
    /// GKE's device plugin names a GPU by its device node, `nvidia<minor>`,
    /// a MIG GPU instance `nvidia<minor>/gi<id>`, and a shared one with a
    /// `/vgpu<n>` suffix, as dcgm-exporter parses them
    /// (NVIDIA/dcgm-exporter `internal/pkg/transformation/kubernetes.go` at
    /// d5e5f51, `gkeMigDeviceIDRegex`, `gkeVirtualGPUDeviceIDSeparator`);
    /// the minor is matched to NVML's minor number, not to the index.
    pub fn parse(device_id: &str) -> Option<DeviceRef> {
        let id = device_id.split("::").next().unwrap_or(device_id).trim();
        if id.starts_with("GPU-") || id.starts_with("MIG-") {
            return Some(DeviceRef::Uuid(id.to_string()));
        }
        if let Some(gke) = id.strip_prefix("nvidia") {
            let gke = gke.split("/vgpu").next().unwrap_or(gke);
            return match gke.split_once("/gi") {
                None => gke.parse().ok().map(DeviceRef::Minor),
                Some((minor, gi)) => Some(DeviceRef::MigMinor {
                    gpu_minor: minor.parse().ok()?,
                    gpu_instance: gi.parse().ok()?,
                    compute_instance: None,
                }),
            };
        }
        id.parse().ok().map(DeviceRef::Index)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    pub device: DeviceRef,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The DRA claim that gave the device, with `--kubernetes.dra-labels`.
    pub dra: Option<std::sync::Arc<DraAttributes>>,
}

/// What dcgm-exporter's `--kubernetes-enable-dra` puts on a claimed
/// device's series (NVIDIA/dcgm-exporter
/// `internal/pkg/transformation/kubernetes.go`, `toDeviceToPodsDRA`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DraAttributes {
    pub claim_name: String,
    pub claim_namespace: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// `labels` with the DRA attributes of `h` on a device at `gi`/`ci` of
/// `gpu`: dra_mig_profile and dra_mig_device_uuid on a MIG device only,
/// as dcgm-exporter writes them. In name order.
fn with_dra(
    mut labels: PodLabels,
    h: &Holder,
    gpu: &GpuState,
    gi: Option<u32>,
    ci: Option<u32>,
) -> PodLabels {
    let Some(d) = &h.dra else {
        return labels;
    };
    labels.extend([
        ("dra_claim_name", d.claim_name.clone()),
        ("dra_claim_namespace", d.claim_namespace.clone()),
        ("dra_driver_name", d.driver.clone()),
        ("dra_pool_name", d.pool.clone()),
        ("dra_device_name", d.device.clone()),
    ]);
    if let Some(gi) = gi {
        let instance = gpu
            .readings
            .as_ref()
            .and_then(|r| r.mig.iter().find(|m| m.gpu_instance == gi));
        if let Some(instance) = instance {
            labels.push(("dra_mig_profile", instance.profile.clone()));
            let uuid = instance
                .compute_instances
                .iter()
                .find(|c| ci.is_none_or(|ci| c.compute_instance == ci))
                .map(|c| c.mig_uuid.clone());
            if let Some(uuid) = uuid {
                labels.push(("dra_mig_device_uuid", uuid));
            }
        }
    }
    labels.sort_by(|a, b| a.0.cmp(b.0));
    labels
}

/// Does `resource` match one of the patterns (`*` only as the last
/// character)?
pub fn resource_matches(patterns: &[String], resource: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => resource.starts_with(prefix),
        None => resource == p,
    })
}

/// The holders of device-plugin devices whose resource name matches.
pub fn from_device_plugin(response: &ListPodResourcesResponse, patterns: &[String]) -> Vec<Holder> {
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
                            dra: None,
                        });
                    }
                }
            }
        }
    }
    holders
}

/// Namespace, pod, container, GPU instance, compute instance.
type Place<'a> = (&'a str, &'a str, &'a str, Option<u32>, Option<u32>);

/// The pods holding this GPU or one of its MIG devices, each container
/// once per device, with its pod's allowlisted labels. MIG devices are
/// found through the GPU's current readings; while the GPU is hung or lost
/// its MIG layout is unknown, and only whole-GPU holders are reported.
pub fn attribute(
    gpu: &GpuState,
    holders: &[Holder],
    labels: &HashMap<(String, String), PodLabels>,
) -> Vec<PodAttribution> {
    // Keyed by holder and place: a container that holds one device twice
    // (by the device plugin and by a claim, or by two claims) holds it once.
    let mut pods: BTreeMap<Place<'_>, &Holder> = BTreeMap::new();
    for h in holders {
        if let Some((gi, ci)) = place(gpu, &h.device) {
            pods.entry((&h.namespace, &h.pod, &h.container, gi, ci))
                .or_insert(h);
        }
    }
    pods.into_iter()
        .map(
            |((_, _, _, gpu_instance, compute_instance), h)| PodAttribution {
                namespace: h.namespace.clone(),
                pod: h.pod.clone(),
                container: h.container.clone(),
                gpu_instance,
                compute_instance,
                labels: with_dra(
                    labels
                        .get(&(h.namespace.clone(), h.pod.clone()))
                        .cloned()
                        .unwrap_or_default(),
                    h,
                    gpu,
                    gpu_instance,
                    compute_instance,
                ),
            },
        )
        .collect()
}

/// Whether the device may be on `gpu`: it is (`place`), or `gpu` does not
/// say enough to rule it out (its minor number unknown; a MIG device of a
/// GPU whose MIG layout is not read).
pub fn may_be_on(gpu: &GpuState, device: &DeviceRef) -> bool {
    if place(gpu, device).is_some() {
        return true;
    }
    let minor = gpu.identity.minor_number;
    match device {
        DeviceRef::Minor(m) => minor.is_none_or(|g| g == *m),
        DeviceRef::MigMinor { gpu_minor, .. } => minor.is_none_or(|g| g == *gpu_minor),
        DeviceRef::Uuid(u) => u.starts_with("MIG-") && gpu.readings.is_none(),
        DeviceRef::Index(_) => false,
    }
}

/// Where on `gpu` the device is: `(None, None)` the whole GPU, `(Some(gi),
/// ci)` a MIG device; `None` when it is not on this GPU.
fn place(gpu: &GpuState, device: &DeviceRef) -> Option<(Option<u32>, Option<u32>)> {
    match device {
        DeviceRef::Index(i) if *i == gpu.index => Some((None, None)),
        DeviceRef::Uuid(u) if *u == gpu.uuid => Some((None, None)),
        DeviceRef::Uuid(u) if u.starts_with("MIG-") => mig_by_uuid(gpu, u),
        DeviceRef::Minor(m) if gpu.identity.minor_number == Some(*m) => Some((None, None)),
        DeviceRef::MigMinor {
            gpu_minor,
            gpu_instance,
            compute_instance,
        } if gpu.identity.minor_number == Some(*gpu_minor) => {
            let readings = gpu.readings.as_ref()?;
            let gi = readings
                .mig
                .iter()
                .find(|gi| gi.gpu_instance == *gpu_instance)?;
            match compute_instance {
                Some(ci)
                    if !gi
                        .compute_instances
                        .iter()
                        .any(|c| c.compute_instance == *ci) =>
                {
                    None
                }
                _ => Some((Some(*gpu_instance), *compute_instance)),
            }
        }
        _ => None,
    }
}

fn mig_by_uuid(gpu: &GpuState, mig_uuid: &str) -> Option<(Option<u32>, Option<u32>)> {
    let readings = gpu.readings.as_ref()?;
    readings.mig.iter().find_map(|gi| {
        gi.compute_instances
            .iter()
            .find(|ci| ci.mig_uuid == mig_uuid)
            .map(|ci| (Some(gi.gpu_instance), Some(ci.compute_instance)))
    })
}
