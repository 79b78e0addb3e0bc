//! The one response body type: prepared bytes, sent in one frame, plus an
//! optional scrape permit that is released only when hyper drops the body,
//! i.e. after the last byte went to the socket. Holding the permit until then
//! is what makes `--web.max-requests` bound slow readers, not just the
//! microseconds a handler takes to pick the bytes.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

#[derive(Debug, Default)]
pub struct Body {
    data: Option<Bytes>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Body {
    pub fn new(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        Body {
            data: (!data.is_empty()).then_some(data),
            _permit: None,
        }
    }

    pub fn empty() -> Self {
        Body::default()
    }

    pub fn with_permit(mut self, permit: Option<OwnedSemaphorePermit>) -> Self {
        self._permit = permit;
        self
    }

    /// The bytes still to be sent (tests read responses through this).
    pub fn bytes(&self) -> Bytes {
        self.data.clone().unwrap_or_default()
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}
