//! Container names from a container engine's API socket (Docker, or
//! Podman's Docker-compatible service), only when the operator names the
//! socket (`--workloads.container-engine-socket`).
//!
//! The one request ever sent is `GET /containers/<id>/json` (inspect),
//! HTTP/1.0 so the engine closes the connection after its answer and
//! never chunks it. The whole exchange is bounded by a deadline and the
//! answer by a size limit: a slow or hostile socket delays one refresh,
//! nothing else. The answer is not trusted: it must be about the container
//! asked for, and the name is cut to a label's worth of printable text.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fsread::remaining;
use crate::snapshot::WorkloadReadError;

use super::procfs::error_kind;

/// An inspect answer is a few KiB; a container with a huge environment or
/// many mounts stays well below this.
const MAX_ANSWER: u64 = 4 * 1024 * 1024;

/// The longest `container_name` exported, in characters. Docker and Podman
/// names are short (`project-service-1`); a longer answer is cut, so a
/// label never trips a Prometheus `label_value_length_limit`.
pub const MAX_NAME_CHARS: usize = 128;

/// The container's name (without Docker's leading `/`), `None` when the
/// engine does not know the id (404: not its container, or gone). The
/// exchange ends within `timeout`, however the engine trickles its answer.
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
    let deadline = Instant::now() + timeout;
    let mut stream = UnixStream::connect(socket).map_err(|e| error_kind(&e))?;
    stream
        .set_write_timeout(Some(remaining(deadline)))
        .map_err(|e| error_kind(&e))?;
    stream
        .write_all(
            format!("GET /containers/{id}/json HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes(),
        )
        .map_err(|e| error_kind(&e))?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if Instant::now() >= deadline {
            return Err(WorkloadReadError::Timeout);
        }
        stream
            .set_read_timeout(Some(remaining(deadline)))
            .map_err(|e| error_kind(&e))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(error_kind(&e)),
        }
        if answer.len() as u64 > MAX_ANSWER {
            return Err(WorkloadReadError::Malformed);
        }
    }
    parse_answer(&answer, id)
}

#[derive(serde::Deserialize)]
struct Inspect {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name")]
    name: String,
}

/// A name fit for a label: control characters (NUL, line feeds, escapes)
/// dropped, Docker's leading `/` removed, at most `MAX_NAME_CHARS`.
fn clean_name(raw: &str) -> Option<String> {
    let name: String = raw
        .trim_start_matches('/')
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_NAME_CHARS)
        .collect();
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The name in an inspect answer for container `id` (a prefix of the full
/// id the engine answers with); an answer about another container is
/// malformed.
fn parse_answer(answer: &[u8], id: &str) -> Result<Option<String>, WorkloadReadError> {
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
            if !inspect.id.to_ascii_lowercase().starts_with(id) {
                return Err(WorkloadReadError::Malformed);
            }
            Ok(clean_name(&inspect.name))
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
        let parse = |a: &[u8]| parse_answer(a, "abc");
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"Id\":\"abcdef\",\"Name\":\"/trainer\",\"Config\":{}}";
        assert_eq!(parse(ok), Ok(Some("trainer".into())));
        // Podman names carry no slash.
        let podman = b"HTTP/1.0 200 OK\r\n\r\n{\"Id\":\"abc\",\"Name\":\"jupyter\"}";
        assert_eq!(parse(podman), Ok(Some("jupyter".into())));
        let gone = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}";
        assert_eq!(parse(gone), Ok(None));
        let denied = b"HTTP/1.0 403 Forbidden\r\n\r\n";
        assert_eq!(parse(denied), Err(WorkloadReadError::PermissionDenied));
        assert_eq!(
            parse(b"HTTP/1.0 500 Oops\r\n\r\n"),
            Err(WorkloadReadError::Io)
        );
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\r\n\r\nnot json"),
            Err(WorkloadReadError::Malformed)
        );
        assert_eq!(parse(b"garbage"), Err(WorkloadReadError::Malformed));
    }

    #[test]
    fn answers_are_not_trusted() {
        // About another container: refused.
        let other = b"HTTP/1.0 200 OK\r\n\r\n{\"Id\":\"ffff\",\"Name\":\"/someone-else\"}";
        assert_eq!(
            parse_answer(other, "abc"),
            Err(WorkloadReadError::Malformed)
        );
        let no_id = b"HTTP/1.0 200 OK\r\n\r\n{\"Name\":\"/x\"}";
        assert_eq!(
            parse_answer(no_id, "abc"),
            Err(WorkloadReadError::Malformed)
        );
        // Control characters dropped, length capped.
        assert_eq!(clean_name("/a\u{0}b\nc\u{1b}[31m"), Some("abc[31m".into()));
        assert_eq!(clean_name("/\n\t"), None);
        let long = "x".repeat(100_000);
        assert_eq!(clean_name(&long).unwrap().chars().count(), MAX_NAME_CHARS);
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
