//! Devices allocated through Dynamic Resource Allocation: what the
//! kubelet says each container's ResourceClaims hold, and which GPU or MIG
//! device each is.
//!
//! The kubelet's pod-resources v1 `List` gives, per container, each claim
//! (name and namespace) and per claimed device the driver, pool and device
//! names (kubelet 1.31+) and the CDI devices the driver prepared (1.27+).
//! A device of NVIDIA's GPU DRA driver (`gpu.nvidia.com`) is resolved from
//! what the node itself has: the CDI spec its CDI device names
//! ([`super::cdi`]); where that fails, and `--kubernetes.resource-slices`
//! is on, from the `uuid` attribute the driver publishes for (pool, device)
//! in this node's ResourceSlices. A claim used by several pods, or by
//! several containers of one, is a device held by each of them, as a
//! time-sliced device-plugin GPU is.

use std::collections::BTreeSet;

use super::apiserver::NVIDIA_GPU_DRIVER;
use super::cdi::{Grant, MigMinors, Node, Unresolvable};
use super::holders::DeviceRef;
use super::podresources::ListPodResourcesResponse;

/// One device of one claim, as one container holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// `namespace/name` of the ResourceClaim.
    pub claim: String,
    /// The DRA driver; from the CDI device's vendor where the kubelet
    /// predates the field (`k8s.<driver>/<class>=...`).
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub cdi_devices: Vec<String>,
}

impl Claimed {
    pub fn is_nvidia_gpu(&self) -> bool {
        self.driver == NVIDIA_GPU_DRIVER
    }

    /// One device however many containers hold it: for counting devices
    /// and logging a device's problem once.
    pub fn device_key(&self) -> String {
        if self.device.is_empty() {
            format!("{}: {}", self.claim, self.cdi_devices.join(","))
        } else {
            format!("{}/{}/{}", self.driver, self.pool, self.device)
        }
    }
}

/// Every claimed device of every container, and whether the answer had any
/// DRA field at all (an older kubelet, or one with
/// `KubeletPodResourcesDynamicResources` off, never has).
pub fn claimed_devices(response: &ListPodResourcesResponse) -> (Vec<Claimed>, bool) {
    let mut out = Vec::new();
    let mut any = false;
    for pod in &response.pod_resources {
        for container in &pod.containers {
            for claim in &container.dynamic_resources {
                any = true;
                for resource in &claim.claim_resources {
                    let cdi_devices: Vec<String> = resource
                        .cdi_devices
                        .iter()
                        .map(|d| d.name.clone())
                        .collect();
                    let driver = if resource.driver_name.is_empty() {
                        cdi_devices
                            .iter()
                            .find_map(|d| driver_of_cdi_name(d))
                            .unwrap_or_default()
                    } else {
                        resource.driver_name.clone()
                    };
                    out.push(Claimed {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        claim: format!("{}/{}", claim.claim_namespace, claim.claim_name),
                        driver,
                        pool: resource.pool_name.clone(),
                        device: resource.device_name.clone(),
                        cdi_devices,
                    });
                }
            }
        }
    }
    (out, any)
}

/// The DRA driver a CDI device belongs to by the convention DRA drivers
/// follow (`k8s.<driver name>` as CDI vendor: NVIDIA's is
/// `k8s.gpu.nvidia.com`).
fn driver_of_cdi_name(name: &str) -> Option<String> {
    let (kind, _) = name.split_once('=')?;
    let (vendor, _) = kind.split_once('/')?;
    Some(vendor.strip_prefix("k8s.").unwrap_or(vendor).to_string())
}

/// What one claimed device came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Resolved(Vec<DeviceRef>),
    Unresolved(String),
    OtherDriver,
}

/// Resolves a device of NVIDIA's driver from the CDI specs: `devices` looks
/// a CDI device's nodes up, `mig` gives the MIG minors table when a device
/// needs it (read at most once by the caller).
pub fn resolve_from_cdi(
    claimed: &Claimed,
    devices: impl Fn(&str) -> Option<Vec<Node>>,
    mut mig: impl FnMut() -> Option<std::rc::Rc<MigMinors>>,
) -> Result<Vec<DeviceRef>, Unresolvable> {
    if claimed.cdi_devices.is_empty() {
        return Err(Unresolvable::NotInSpecs);
    }
    let mut found = BTreeSet::new();
    let mut last = Unresolvable::NotInSpecs;
    for name in &claimed.cdi_devices {
        let Some(nodes) = devices(name) else {
            continue;
        };
        let grants = match super::cdi::grants(&nodes, None) {
            Err(Unresolvable::NoMigMinors) => match mig() {
                Some(table) => super::cdi::grants(&nodes, Some(&table)),
                None => Err(Unresolvable::NoMigMinors),
            },
            other => other,
        };
        match grants {
            Ok(grants) => found.extend(grants.into_iter().map(|g| match g {
                Grant::Gpu { minor } => DeviceRef::Minor(minor),
                Grant::Mig {
                    gpu_minor,
                    gpu_instance,
                    compute_instance,
                } => DeviceRef::MigMinor {
                    gpu_minor,
                    gpu_instance,
                    compute_instance,
                },
            })),
            Err(e) => last = e,
        }
    }
    if found.is_empty() {
        Err(last)
    } else {
        Ok(found.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::podresources::*;
    use super::*;

    fn claim_resource(driver: &str, device: &str, cdi: &[&str]) -> ClaimResource {
        ClaimResource {
            cdi_devices: cdi
                .iter()
                .map(|n| CdiDevice {
                    name: (*n).to_string(),
                })
                .collect(),
            driver_name: driver.into(),
            pool_name: if driver.is_empty() { "" } else { "node-1" }.into(),
            device_name: device.into(),
            share_id: None,
        }
    }

    fn response(resources: Vec<ClaimResource>) -> ListPodResourcesResponse {
        ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    devices: vec![],
                    dynamic_resources: vec![DynamicResource {
                        claim_name: "gpu".into(),
                        claim_namespace: "ns".into(),
                        claim_resources: resources,
                    }],
                }],
            }],
        }
    }

    #[test]
    fn claims_name_their_driver_even_from_an_older_kubelet() {
        let (claimed, any) = claimed_devices(&response(vec![
            claim_resource(
                "gpu.nvidia.com",
                "gpu-0",
                &["k8s.gpu.nvidia.com/claim=u-gpu-0"],
            ),
            // Kubelet 1.27 to 1.30: CDI devices only.
            claim_resource("", "", &["k8s.gpu.nvidia.com/claim=u-gpu-1"]),
            claim_resource("", "", &["k8s.nic.example.com/claim=u-nic-0"]),
        ]));
        assert!(any);
        let drivers: Vec<_> = claimed.iter().map(|c| c.driver.as_str()).collect();
        assert_eq!(
            drivers,
            ["gpu.nvidia.com", "gpu.nvidia.com", "nic.example.com"]
        );
        assert_eq!(claimed[0].claim, "ns/gpu");
        assert_eq!(claimed[0].device_key(), "gpu.nvidia.com/node-1/gpu-0");
        let (none, any) = claimed_devices(&ListPodResourcesResponse::default());
        assert!(none.is_empty() && !any);
    }

    #[test]
    fn a_cdi_device_resolves_through_its_nodes() {
        let (claimed, _) = claimed_devices(&response(vec![claim_resource(
            "gpu.nvidia.com",
            "gpu-1-mig-1g10gb-19-0",
            &["k8s.gpu.nvidia.com/claim=u-gpu-1-mig-1g10gb-19-0"],
        )]));
        let nodes = vec![
            Node {
                path: "/dev/nvidia1".into(),
                minor: None,
            },
            Node {
                path: "/dev/nvidia-caps/nvidia-cap139".into(),
                minor: Some(139),
            },
        ];
        let table: MigMinors = [(
            139,
            super::super::cdi::MigCap {
                gpu_minor: 1,
                gpu_instance: 0,
                compute_instance: None,
            },
        )]
        .into_iter()
        .collect();
        let mut asked = 0;
        let got = resolve_from_cdi(
            &claimed[0],
            |_| Some(nodes.clone()),
            || {
                asked += 1;
                Some(std::rc::Rc::new(table.clone()))
            },
        );
        assert_eq!(
            got,
            Ok(vec![DeviceRef::MigMinor {
                gpu_minor: 1,
                gpu_instance: 0,
                compute_instance: None
            }])
        );
        assert_eq!(asked, 1);
        assert_eq!(
            resolve_from_cdi(&claimed[0], |_| None, || None),
            Err(Unresolvable::NotInSpecs)
        );
        assert_eq!(
            resolve_from_cdi(&claimed[0], |_| Some(nodes.clone()), || None),
            Err(Unresolvable::NoMigMinors)
        );
    }
}
