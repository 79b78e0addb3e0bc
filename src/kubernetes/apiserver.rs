//! The JSON reads of pod attribution: this node's ResourceSlices from the
//! API server, and the labels of this node's pods from the kubelet's
//! `/pods` or from the API server. One typed schema per answer, holding
//! only the fields read; everything else in the objects is skipped.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hyper::Uri;
use serde::Deserialize;

use super::https::{HttpsClient, HttpsError};
use crate::snapshot::KubernetesReadError;

/// A node's pod list or ResourceSlices are well under this; the kubelet
/// caps its own gRPC answers at 16 MiB too.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The DRA driver whose devices are GPUs: NVIDIA's GPU DRA driver
/// (kubernetes-sigs/dra-driver-nvidia-gpu, `DriverName`).
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// ResourceSlice API versions, newest first: `v1` from Kubernetes 1.34,
/// `v1beta2` from 1.33, `v1beta1` from 1.32 (where a device's attributes
/// sit under `basic`).
const SLICE_VERSIONS: &[&str] = &["v1", "v1beta2", "v1beta1"];

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Https(#[from] HttpsError),
    #[error("{what}: not the JSON expected: {detail}")]
    Malformed { what: &'static str, detail: String },
}

impl ReadError {
    pub fn reason(&self) -> KubernetesReadError {
        match self {
            ReadError::Https(e) => e.reason(),
            ReadError::Malformed { .. } => KubernetesReadError::Malformed,
        }
    }
}

/// `items[]` of a list answer.
#[derive(Debug, Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Debug, Deserialize)]
struct PodItem {
    metadata: PodMeta,
}

/// A pod's name, namespace and labels.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct PodMeta {
    pub name: String,
    pub namespace: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `metadata.uid`, for `pod_uid` (`--kubernetes.pod-uid`).
    #[serde(default)]
    pub uid: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SliceItem {
    spec: SliceSpec,
}

#[derive(Debug, Deserialize)]
struct SliceSpec {
    driver: String,
    pool: Pool,
    #[serde(default)]
    devices: Vec<SliceDevice>,
}

#[derive(Debug, Deserialize)]
struct Pool {
    name: String,
}

#[derive(Debug, Deserialize)]
struct SliceDevice {
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
    /// v1beta1 only.
    #[serde(default)]
    basic: Option<Basic>,
}

#[derive(Debug, Deserialize)]
struct Basic {
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
}

/// A device attribute; only string values are read.
#[derive(Debug, Deserialize)]
struct Attribute {
    #[serde(default)]
    string: Option<String>,
}

/// NVIDIA's devices by (pool, device name): the UUID its `uuid` attribute
/// gives (`GPU-...` for a GPU, `MIG-...` for a MIG device).
pub type SliceUuids = HashMap<(String, String), String>;

/// The labels of the pods on this node, from the kubelet's `/pods`
/// (authorized as `nodes/pods` from Kubernetes 1.33, else `nodes/proxy`).
pub async fn pods_from_kubelet(
    client: &HttpsClient,
    kubelet: &Uri,
    timeout: Duration,
) -> Result<Vec<PodMeta>, ReadError> {
    let body = client
        .get(kubelet, "/pods", "application/json", MAX_BODY, timeout)
        .await?;
    parse_pods(&body)
}

/// The labels of the pods on `node`, from the API server: metadata only
/// (`PartialObjectMetadataList`), selected by node.
pub async fn pods_from_api_server(
    client: &HttpsClient,
    api: &Uri,
    node: &str,
    timeout: Duration,
) -> Result<Vec<PodMeta>, ReadError> {
    let path = format!(
        "/api/v1/pods?fieldSelector={}",
        encode(&format!("spec.nodeName={node}"))
    );
    let body = client
        .get(
            api,
            &path,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            MAX_BODY,
            timeout,
        )
        .await?;
    parse_pods(&body)
}

fn parse_pods(body: &[u8]) -> Result<Vec<PodMeta>, ReadError> {
    let list: List<PodItem> = serde_json::from_slice(body).map_err(|e| ReadError::Malformed {
        what: "pod list",
        detail: e.to_string(),
    })?;
    Ok(list.items.into_iter().map(|p| p.metadata).collect())
}

/// NVIDIA's GPU and MIG devices in this node's ResourceSlices, asking the
/// newest API version first; `version` is the index of the version that
/// answered last time, tried first.
pub async fn slice_uuids(
    client: &HttpsClient,
    api: &Uri,
    node: &str,
    version: &mut usize,
    timeout: Duration,
) -> Result<SliceUuids, ReadError> {
    let selector = encode(&format!(
        "spec.nodeName={node},spec.driver={NVIDIA_GPU_DRIVER}"
    ));
    let start = (*version).min(SLICE_VERSIONS.len() - 1);
    let mut last = None;
    for (i, v) in SLICE_VERSIONS.iter().enumerate().skip(start) {
        let path = format!("/apis/resource.k8s.io/{v}/resourceslices?fieldSelector={selector}");
        match client
            .get(api, &path, "application/json", MAX_BODY, timeout)
            .await
        {
            Ok(body) => {
                *version = i;
                return parse_slices(&body);
            }
            // An older API server has not this version: try the next.
            Err(e) if e.is_not_found() => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    *version = 0;
    Err(last.map_or_else(
        || ReadError::Malformed {
            what: "ResourceSlice list",
            detail: "no API version answered".into(),
        },
        ReadError::Https,
    ))
}

fn parse_slices(body: &[u8]) -> Result<SliceUuids, ReadError> {
    let list: List<SliceItem> = serde_json::from_slice(body).map_err(|e| ReadError::Malformed {
        what: "ResourceSlice list",
        detail: e.to_string(),
    })?;
    let mut out = HashMap::new();
    for slice in list.items {
        if slice.spec.driver != NVIDIA_GPU_DRIVER {
            continue;
        }
        for device in slice.spec.devices {
            let attributes = match &device.basic {
                Some(basic) if device.attributes.is_empty() => &basic.attributes,
                _ => &device.attributes,
            };
            // Attribute names without a domain are the driver's own.
            let uuid = ["uuid", "gpu.nvidia.com/uuid"]
                .iter()
                .find_map(|k| attributes.get(*k).and_then(|a| a.string.clone()));
            if let Some(uuid) = uuid.filter(|u| u.starts_with("GPU-") || u.starts_with("MIG-")) {
                out.insert((slice.spec.pool.name.clone(), device.name), uuid);
            }
        }
    }
    Ok(out)
}

/// Percent-encodes a query value (node names are DNS names; this is for
/// anything else).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_of_every_api_version_give_uuids() {
        // v1 / v1beta2: attributes on the device, as the driver publishes
        // them (cmd/gpu-kubelet-plugin/deviceinfo.go).
        let v1 = br#"{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","items":[
          {"metadata":{"name":"node-1-gpu.nvidia.com-x"},"spec":{"driver":"gpu.nvidia.com","nodeName":"node-1",
           "pool":{"name":"node-1","generation":1,"resourceSliceCount":1},
           "devices":[
             {"name":"gpu-0","attributes":{"type":{"string":"gpu"},"uuid":{"string":"GPU-aaaa"},"productName":{"string":"NVIDIA H100 80GB HBM3"},"cudaComputeCapability":{"version":"9.0.0"}},"capacity":{"memory":{"value":"80Gi"}}},
             {"name":"gpu-1-mig-1g10gb-19-0","attributes":{"type":{"string":"mig"},"uuid":{"string":"MIG-bbbb"},"parentUUID":{"string":"GPU-cccc"},"profile":{"string":"1g.10gb"}}},
             {"name":"gpu-2-mig-1g10gb-19-1","attributes":{"type":{"string":"mig"},"parentUUID":{"string":"GPU-dddd"}}}
           ]}},
          {"spec":{"driver":"example.com/nic","pool":{"name":"node-1"},"devices":[{"name":"nic-0","attributes":{"uuid":{"string":"GPU-nope"}}}]}}
        ]}"#;
        let got = parse_slices(v1).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[&("node-1".into(), "gpu-0".into())], "GPU-aaaa");
        assert_eq!(
            got[&("node-1".into(), "gpu-1-mig-1g10gb-19-0".into())],
            "MIG-bbbb"
        );
        let v1beta1 = br#"{"items":[{"spec":{"driver":"gpu.nvidia.com","pool":{"name":"n"},
           "devices":[{"name":"gpu-3","basic":{"attributes":{"uuid":{"string":"GPU-eeee"}}}}]}}]}"#;
        assert_eq!(
            parse_slices(v1beta1).unwrap()[&("n".into(), "gpu-3".into())],
            "GPU-eeee"
        );
        assert!(matches!(
            parse_slices(b"<html>"),
            Err(ReadError::Malformed { .. })
        ));
    }

    #[test]
    fn pod_lists_of_the_kubelet_and_the_api_server_give_labels() {
        let kubelet = br#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[
          {"metadata":{"name":"trainer-0","namespace":"ml","uid":"u1","labels":{"team":"vision","app.kubernetes.io/name":"trainer"}},
           "spec":{"nodeName":"node-1","containers":[{"name":"main","env":[{"name":"X","value":"y"}]}]},"status":{"phase":"Running"}},
          {"metadata":{"name":"bare","namespace":"default"}}]}"#;
        let pods = parse_pods(kubelet).unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0].labels["team"], "vision");
        assert_eq!(pods[0].uid.as_deref(), Some("u1"));
        assert!(pods[1].labels.is_empty());
        let partial = br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"},
          "items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"b","labels":{"q":"r"}}}]}"#;
        assert_eq!(parse_pods(partial).unwrap()[0].labels["q"], "r");
        assert!(parse_pods(br#"{"items":[{"metadata":{"name":1}}]}"#).is_err());
    }

    #[test]
    fn selectors_are_encoded() {
        assert_eq!(
            encode("spec.nodeName=node-1,spec.driver=gpu.nvidia.com"),
            "spec.nodeName%3Dnode-1%2Cspec.driver%3Dgpu.nvidia.com"
        );
    }
}
