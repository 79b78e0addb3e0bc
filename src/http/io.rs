//! The byte stream under hyper, with two duties hyper's HTTP/1 server does
//! not have:
//!
//! - **A write deadline.** Once the client stops taking the response (a write
//!   is refused or only partly accepted), it has `write_timeout` to take
//!   everything that is waiting; otherwise the connection fails with
//!   `TimedOut` and hyper closes it. Without this, a client that requests and
//!   never reads holds its connection slot, and the exposition buffer the
//!   response points into, for ever. Partial progress does not restart the
//!   clock (a client taking a byte now and then would otherwise hold the
//!   connection as long as it liked); it stops only when the socket has taken
//!   everything. So a response must be taken within `write_timeout` of the
//!   first write the client did not take at once, and a keep-alive connection
//!   between scrapes is not timed here (the header read timeout covers it).
//! - **Configured headers on hyper's own answers.** hyper answers a request
//!   it cannot parse (400, 414, 431) itself, before any handler runs, so the
//!   `http_server_config.headers` of the web config would be missing there.
//!   Such an answer starts a fresh write at a response boundary with a status
//!   line no handler of ours ever produces; the headers are spliced into its
//!   head before it goes out.
//!
//! It sits on the plaintext side (above TLS), where response heads are
//! visible and where a refused write means the client is not reading.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Status lines hyper writes for requests it cannot parse. The router and
/// the web config checks answer 200, 401, 404, 405, 429 and 503 only, so a
/// write opening with one of these is hyper's.
const PARSE_ERROR_HEADS: [&[u8]; 3] = [b"HTTP/1.1 400 ", b"HTTP/1.1 414 ", b"HTTP/1.1 431 "];

pub struct ServerIo<S> {
    inner: S,
    peer: SocketAddr,
    write_timeout: Duration,
    /// Armed while output is waiting for the client; fires the deadline.
    stalled: Option<Pin<Box<Sleep>>>,
    /// `http_server_config.headers` as the connection opened.
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    /// A rewritten head still to be sent, and how much of it went out. hyper
    /// was told its original bytes were written; these go first.
    spliced: Option<(Vec<u8>, usize)>,
    /// Whether everything handed to us so far has been written, so the next
    /// write starts a new response.
    at_boundary: bool,
}

impl<S> ServerIo<S> {
    pub fn new(
        inner: S,
        peer: SocketAddr,
        write_timeout: Duration,
        extra_headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Self {
        ServerIo {
            inner,
            peer,
            write_timeout,
            stalled: None,
            extra_headers,
            spliced: None,
            at_boundary: true,
        }
    }
}

/// `head` with `extra` added after its status line's fields, or `None` when
/// the end of the head is not in `head`.
fn splice_headers(head: &[u8], extra: &[(HeaderName, HeaderValue)]) -> Option<Vec<u8>> {
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let mut out = Vec::with_capacity(head.len() + 64 * extra.len());
    out.extend_from_slice(&head[..end + 2]);
    for (name, value) in extra {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(&head[end + 2..]);
    Some(out)
}

impl<S: AsyncWrite + Unpin> ServerIo<S> {
    /// Starts the deadline if it is not running, and polls it so that its
    /// expiry wakes the task even while the socket stays full.
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let timeout = self.write_timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                tracing::debug!(
                    peer = %self.peer,
                    timeout = ?self.write_timeout,
                    "write timed out: the client stopped reading; closing the connection"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "write timed out: the client stopped reading",
                )))
            }
            Poll::Pending => Poll::Ready(Ok(())),
        }
    }

    fn poll_inner_write(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        if self.stalled.is_some() {
            ready!(self.stall(cx))?;
        }
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) if n >= total => {
                self.stalled = None;
                self.at_boundary = true;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Ok(n)) => {
                self.at_boundary = false;
                ready!(self.stall(cx))?;
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                ready!(self.stall(cx))?;
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    /// Sends what is left of a spliced head; `Ready(Ok)` once it is out.
    fn poll_spliced(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((buf, sent)) = self.spliced.take() {
            if sent >= buf.len() {
                break;
            }
            match self.poll_inner_write(cx, &[IoSlice::new(&buf[sent..])]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.spliced = Some((buf, sent + n)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.spliced = Some((buf, sent));
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn write_bufs(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_spliced(cx))?;
        if self.at_boundary && !self.extra_headers.is_empty() {
            // Leading empty slices count as written along with the first.
            if let Some((i, first)) = bufs.iter().enumerate().find(|(_, b)| !b.is_empty()) {
                let ours = PARSE_ERROR_HEADS.iter().any(|h| first.starts_with(h));
                if let Some(head) = ours
                    .then(|| splice_headers(first, &self.extra_headers))
                    .flatten()
                {
                    let reported: usize = bufs[..=i].iter().map(|b| b.len()).sum();
                    self.spliced = Some((head, 0));
                    self.at_boundary = false;
                    // Start sending now; what the socket does not take goes
                    // out on the next write or flush, before anything else.
                    if let Poll::Ready(Err(e)) = self.poll_spliced(cx) {
                        return Poll::Ready(Err(e));
                    }
                    return Poll::Ready(Ok(reported));
                }
            }
        }
        self.poll_inner_write(cx, bufs)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ServerIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ServerIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_bufs(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_bufs(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_spliced(cx))?;
        if this.stalled.is_some() {
            ready!(this.stall(cx))?;
        }
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                this.stalled = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                // TLS: records wait in the library's buffer for the socket.
                ready!(this.stall(cx))?;
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_spliced(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn splices_after_the_status_line_fields() {
        let head = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let extra = vec![(
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("deny"),
        )];
        let out = splice_headers(head, &extra).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\
             x-frame-options: deny\r\n\r\n"
        );
        assert_eq!(splice_headers(b"HTTP/1.1 400 Bad", &extra), None);
    }

    #[tokio::test]
    async fn parse_error_answers_get_the_headers_others_pass_unchanged() {
        let extra = vec![(
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        )];
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut io = ServerIo::new(server, peer(), Duration::from_secs(5), extra);
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let bad = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        // A handler's answer passes unchanged; hyper's own 431 gets them.
        assert_eq!(io.write(ok).await.unwrap(), ok.len());
        assert_eq!(io.write(bad).await.unwrap(), bad.len());
        io.flush().await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        let mut got = String::new();
        let mut client = client;
        client.read_to_string(&mut got).await.unwrap();
        assert_eq!(
            got,
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok\
             HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
             x-content-type-options: nosniff\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_times_out_one_that_reads_does_not() {
        // A pipe that holds 1 KiB: the "socket buffer" of a client that
        // never reads fills after the first KiB.
        let (mut client, server) = tokio::io::duplex(1024);
        let mut io = ServerIo::new(server, peer(), Duration::from_millis(200), Vec::new());
        let body = vec![b'x'; 64 * 1024];
        let err = io.write_all(&body).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        // A client that reads slowly but takes everything within the
        // deadline is not cut off.
        let (mut client2, server2) = tokio::io::duplex(1024);
        let mut io2 = ServerIo::new(server2, peer(), Duration::from_secs(60), Vec::new());
        let reader = tokio::spawn(async move {
            let mut n = 0;
            let mut buf = [0u8; 4096];
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                match client2.read(&mut buf).await.unwrap() {
                    0 => return n,
                    k => n += k,
                }
            }
        });
        let small = vec![b'y'; 8 * 1024];
        io2.write_all(&small).await.unwrap();
        io2.shutdown().await.unwrap();
        drop(io2);
        assert_eq!(reader.await.unwrap(), small.len());
        let mut first = vec![0u8; 1024];
        client.read_exact(&mut first).await.unwrap();
    }
}
