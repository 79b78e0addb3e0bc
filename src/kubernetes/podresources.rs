//! A client for the kubelet's pod-resources API v1 (`List` only), over gRPC
//! on the kubelet's unix socket.
//!
//! The messages are declared by hand with prost's derive instead of being
//! generated, so building the exporter needs no `protoc`. Their tags match
//! `proto/podresources_v1.proto`; fields the exporter does not read
//! (CPUs, memory, topology) are skipped by prost as unknown. A kubelet that
//! predates a field simply never sends it: an older kubelet's answer
//! decodes with no dynamic resources, and one of 1.27 to 1.30 with claim
//! resources that name their CDI devices but no driver, pool or device.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;

/// Large nodes list hundreds of pods; the kubelet itself allows 16 MiB.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Devices allocated through Dynamic Resource Allocation (kubelet 1.27+,
    /// with `KubeletPodResourcesDynamicResources`: on by default from 1.34).
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// One ResourceClaim a container uses. (Tag 1, the claim's class, was
/// removed in 1.31.) The field names are the API's.
#[allow(clippy::struct_field_names)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// One device of a claim: driver, pool and device name identify it (1.31+);
/// the CDI devices are what the driver prepared for the container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
    /// Set when the device is one of several shares of a device that
    /// allows multiple allocations (DRAConsumableCapacity).
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// A fully qualified CDI device name, `vendor.com/class=name`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot connect to the kubelet at {}: {source}", .socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("the kubelet at {} answered List with {status}", .socket.display())]
    Call {
        socket: PathBuf,
        status: Box<tonic::Status>,
    },
    #[error("the kubelet at {} did not answer within {timeout:?}", .socket.display())]
    Timeout { socket: PathBuf, timeout: Duration },
}

/// Lists every pod's devices. One connection per call: a refresh every few
/// seconds does not need a kept channel, and a kubelet restart then needs
/// no reconnect logic.
pub async fn list(
    socket: &Path,
    timeout: Duration,
) -> Result<ListPodResourcesResponse, KubeletError> {
    match tokio::time::timeout(timeout, list_inner(socket)).await {
        Ok(result) => result,
        Err(_) => Err(KubeletError::Timeout {
            socket: socket.to_path_buf(),
            timeout,
        }),
    }
}

async fn list_inner(socket: &Path) -> Result<ListPodResourcesResponse, KubeletError> {
    let channel = crate::unix_grpc::channel(socket, "http://kubelet.invalid")
        .await
        .map_err(|source| KubeletError::Connect {
            socket: socket.to_path_buf(),
            source,
        })?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
    let call_error = |status: tonic::Status| KubeletError::Call {
        socket: socket.to_path_buf(),
        status: Box::new(status),
    };
    grpc.ready()
        .await
        .map_err(|e| call_error(tonic::Status::unavailable(e.to_string())))?;
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    let response = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            PathAndQuery::from_static("/v1.PodResourcesLister/List"),
            codec,
        )
        .await
        .map_err(call_error)?;
    Ok(response.into_inner())
}
