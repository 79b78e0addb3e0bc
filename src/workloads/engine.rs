//! Container names from a container engine's API socket (Docker, or
//! Podman's Docker-compatible service), only when the operator names the
//! socket (`--workloads.container-engine-socket`).
//!
//! The one request ever sent is `GET /containers/<id>/json` (inspect),
//! HTTP/1.0 so the engine closes the connection after its answer and
//! never chunks it. Each call is bounded by a timeout and the answer by a
//! size limit: a slow or hostile socket delays one refresh, nothing else.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::snapshot::WorkloadReadError;

use super::procfs::error_kind;

/// An inspect answer is a few KiB; a container with a huge environment or
/// many mounts stays well below this.
const MAX_ANSWER: u64 = 4 * 1024 * 1024;

/// The container's name (without Docker's leading `/`), `None` when the
/// engine does not know the id (404: not its container, or gone).
pub fn container_name(
    socket: &Path,
    id: &str,
    timeout: Duration,
) -> Result<Option<String>, WorkloadReadError> {
    // Ids come from cgroup paths and are hex already; refuse anything else
    // rather than put it in a request line.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WorkloadReadError::Malformed);
    }
    let mut stream = UnixStream::connect(socket).map_err(|e| error_kind(&e))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| error_kind(&e))?;
    stream
        .write_all(
            format!("GET /containers/{id}/json HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes(),
        )
        .map_err(|e| error_kind(&e))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER + 1)
        .read_to_end(&mut answer)
        .map_err(|e| error_kind(&e))?;
    if answer.len() as u64 > MAX_ANSWER {
        return Err(WorkloadReadError::Malformed);
    }
    parse_answer(&answer)
}

#[derive(serde::Deserialize)]
struct Inspect {
    #[serde(rename = "Name")]
    name: String,
}

fn parse_answer(answer: &[u8]) -> Result<Option<String>, WorkloadReadError> {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(WorkloadReadError::Malformed)?;
    let head = std::str::from_utf8(&answer[..split]).map_err(|_| WorkloadReadError::Malformed)?;
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or(WorkloadReadError::Malformed)?;
    match status {
        200 => {
            let inspect: Inspect = serde_json::from_slice(&answer[split + 4..])
                .map_err(|_| WorkloadReadError::Malformed)?;
            let name = inspect.name.trim_start_matches('/');
            Ok((!name.is_empty()).then(|| name.to_string()))
        }
        404 => Ok(None),
        401 | 403 => Err(WorkloadReadError::PermissionDenied),
        _ => Err(WorkloadReadError::Io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_every_kind() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"Id\":\"abc\",\"Name\":\"/trainer\",\"Config\":{}}";
        assert_eq!(parse_answer(ok), Ok(Some("trainer".into())));
        // Podman names carry no slash.
        let podman = b"HTTP/1.0 200 OK\r\n\r\n{\"Name\":\"jupyter\"}";
        assert_eq!(parse_answer(podman), Ok(Some("jupyter".into())));
        let gone = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}";
        assert_eq!(parse_answer(gone), Ok(None));
        let denied = b"HTTP/1.0 403 Forbidden\r\n\r\n";
        assert_eq!(
            parse_answer(denied),
            Err(WorkloadReadError::PermissionDenied)
        );
        assert_eq!(
            parse_answer(b"HTTP/1.0 500 Oops\r\n\r\n"),
            Err(WorkloadReadError::Io)
        );
        assert_eq!(
            parse_answer(b"HTTP/1.0 200 OK\r\n\r\nnot json"),
            Err(WorkloadReadError::Malformed)
        );
        assert_eq!(parse_answer(b"garbage"), Err(WorkloadReadError::Malformed));
    }

    #[test]
    fn ids_that_are_not_hex_are_never_sent() {
        assert_eq!(
            container_name(
                Path::new("/nonexistent"),
                "../../info",
                Duration::from_secs(1)
            ),
            Err(WorkloadReadError::Malformed)
        );
        assert_eq!(
            container_name(Path::new("/nonexistent"), "abc123", Duration::from_secs(1)),
            Err(WorkloadReadError::Gone)
        );
    }
}
