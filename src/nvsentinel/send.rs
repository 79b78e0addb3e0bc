//! Delivery: one task sends the queued events, oldest first, one call
//! each, over a channel it keeps open while the connector answers. A call
//! that fails or takes longer than `--nvsentinel.timeout` is counted
//! (`result="failed"`), the channel dropped, and the same event retried
//! after a delay that doubles up to `MAX_RETRY_DELAY`: the events raised
//! meanwhile wait behind it, so the connector gets them in order when it
//! is back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use super::proto::{Empty, HealthEvents, HEALTH_EVENT_OCCURRED_V1};
use super::{HealthEvent, Nvsentinel, Shared};

const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

impl Nvsentinel {
    /// Sends queued events until `stop` changes (the exporter stops) or its
    /// sender goes.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        let shared = self.shared.clone();
        let mut channel: Option<Channel> = None;
        let mut delay = FIRST_RETRY_DELAY;
        let mut failing = false;
        loop {
            let Some((seq, event)) = next(&shared) else {
                tokio::select! {
                    () = shared.wake.notified() => continue,
                    _ = stop.changed() => return,
                }
            };
            let call = tokio::time::timeout(self.settings.timeout, self.send(&mut channel, event));
            let outcome = match call.await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {:?}", self.settings.timeout)),
            };
            match outcome {
                Ok(()) => {
                    shared.sent.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut q) = shared.queue.lock() {
                        q.delivered(seq);
                    }
                    if failing {
                        tracing::info!(socket = %self.settings.socket.display(), "NVSentinel's platform connector takes events again");
                    }
                    failing = false;
                    delay = FIRST_RETRY_DELAY;
                }
                Err(error) => {
                    shared.failed.fetch_add(1, Ordering::Relaxed);
                    channel = None;
                    if !failing {
                        tracing::warn!(socket = %self.settings.socket.display(), %error,
                            "cannot send a health event to NVSentinel's platform connector; the events wait and are retried (nvml_exporter_nvsentinel_events_total)");
                    }
                    failing = true;
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = stop.changed() => return,
                    }
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
            }
        }
    }

    /// One call, over the kept channel or a new one.
    async fn send(&self, channel: &mut Option<Channel>, event: HealthEvent) -> Result<(), String> {
        let ch = match channel {
            Some(c) => c.clone(),
            None => {
                let c = connect(&self.settings.socket).await?;
                *channel = Some(c.clone());
                c
            }
        };
        let mut grpc = tonic::client::Grpc::new(ch);
        grpc.ready().await.map_err(|e| e.to_string())?;
        let codec = tonic_prost::ProstCodec::<HealthEvents, Empty>::default();
        grpc.unary(
            tonic::Request::new(HealthEvents {
                version: 1,
                events: vec![event],
            }),
            PathAndQuery::from_static(HEALTH_EVENT_OCCURRED_V1),
            codec,
        )
        .await
        .map(|_| ())
        .map_err(|s| format!("{}: {}", s.code(), s.message()))
    }
}

/// The oldest queued event, copied out so the queue is not held during
/// the call.
fn next(shared: &Shared) -> Option<(u64, HealthEvent)> {
    let q = shared.queue.lock().ok()?;
    q.front().map(|f| (f.seq, f.event.clone()))
}

async fn connect(socket: &std::path::Path) -> Result<Channel, String> {
    crate::unix_grpc::channel(socket, "http://nvsentinel.invalid")
        .await
        .map_err(|e| format!("cannot connect: {e}"))
}
