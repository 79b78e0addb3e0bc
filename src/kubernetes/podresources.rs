//! A client for the kubelet's pod-resources API v1 (`List` only), over gRPC
//! on the kubelet's unix socket.
//!
//! The messages are declared by hand with prost's derive instead of being
//! generated, so building the exporter needs no `protoc`. Their tags match
//! `proto/podresources_v1.proto`; fields the exporter does not read
//! (memory, topology, dynamic resources) are skipped by prost as unknown.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Endpoint, Uri};

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
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector ignores it
    // and dials the unix socket.
    let channel = Endpoint::from_static("http://kubelet.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
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
