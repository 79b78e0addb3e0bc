//! `--web.systemd-socket`: the listening sockets systemd passes by socket
//! activation (`sd_listen_fds(3)`): `LISTEN_PID` names this process and
//! `LISTEN_FDS` counts the descriptors from 3 on.
//!
//! Taking over a descriptor a parent left open has no safe API in std, so
//! the `listenfd` crate does it: it checks `LISTEN_PID` and that each
//! descriptor is a stream socket before handing it over, and keeps the one
//! `unsafe` call out of this code base.

use std::net::TcpListener;

use listenfd::ListenFd;

#[derive(Debug, thiserror::Error)]
pub enum SystemdSocketError {
    #[error(
        "--web.systemd-socket: no sockets passed (LISTEN_FDS {fds:?}, LISTEN_PID {pid:?} for \
         process {me}); run under a systemd .socket unit"
    )]
    NonePassed {
        fds: Option<String>,
        pid: Option<String>,
        me: u32,
    },
    #[error("--web.systemd-socket: descriptor {fd} is not a TCP listening socket: {reason}")]
    NotTcp { fd: usize, reason: String },
}

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: usize = 3;

/// The sockets systemd passed to this process, as std listeners.
pub fn listeners() -> Result<Vec<TcpListener>, SystemdSocketError> {
    let mut passed = ListenFd::from_env();
    if passed.len() == 0 {
        return Err(SystemdSocketError::NonePassed {
            fds: std::env::var("LISTEN_FDS").ok(),
            pid: std::env::var("LISTEN_PID").ok(),
            me: std::process::id(),
        });
    }
    (0..passed.len())
        .map(|index| {
            let fd = LISTEN_FDS_START + index;
            let not_tcp = |reason: String| SystemdSocketError::NotTcp { fd, reason };
            let listener = passed
                .take_tcp_listener(index)
                .map_err(|e| not_tcp(e.to_string()))?
                .ok_or_else(|| not_tcp("already taken".to_owned()))?;
            // An AF_UNIX descriptor passes the stream check but has no inet address.
            listener
                .local_addr()
                .and_then(|_| listener.set_nonblocking(true))
                .map_err(|e| not_tcp(e.to_string()))?;
            Ok(listener)
        })
        .collect()
}
