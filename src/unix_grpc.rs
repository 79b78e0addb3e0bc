//! A tonic channel to a gRPC server on a unix socket: the kubelet's
//! pod-resources service (`crate::kubernetes`) and NVSentinel's platform
//! connector (`crate::nvsentinel`) are both reached this way.

use std::path::Path;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Connects to the server on `socket`. `authority` names the peer in the
/// request URI, which the API requires but the connector ignores: it
/// dials the socket.
pub async fn channel(
    socket: &Path,
    authority: &'static str,
) -> Result<Channel, tonic::transport::Error> {
    let path = socket.to_path_buf();
    Endpoint::from_static(authority)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}
