//! `--web.systemd-socket`: the listening sockets systemd passes by socket
//! activation (`sd_listen_fds(3)`): `LISTEN_PID` names this process and
//! `LISTEN_FDS` counts the descriptors from 3 on.
//!
//! Taking over a descriptor a parent left open has no safe API in std
//! (`FromRawFd` is `unsafe`: the number must name a socket nobody else
//! owns). The protocol guarantees both for descriptors 3..3+LISTEN_FDS of
//! the process LISTEN_PID names, and each is checked to be an inet
//! listening socket before it is used. This is the one such place outside
//! the NVML FFI layer.

use std::net::TcpListener;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

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
    #[error("--web.systemd-socket: descriptor {fd} is not a TCP listening socket: {source}")]
    NotTcp {
        fd: i32,
        #[source]
        source: std::io::Error,
    },
}

/// The sockets systemd passed to this process, as std listeners.
pub fn listeners() -> Result<Vec<TcpListener>, SystemdSocketError> {
    let me = std::process::id();
    let fds_var = std::env::var("LISTEN_FDS").ok();
    let pid_var = std::env::var("LISTEN_PID").ok();
    let count = match (&fds_var, &pid_var) {
        (Some(fds), Some(pid)) if pid.trim().parse() == Ok(me) => fds.trim().parse().unwrap_or(0),
        _ => 0,
    };
    if count < 1 {
        return Err(SystemdSocketError::NonePassed {
            fds: fds_var,
            pid: pid_var,
            me,
        });
    }
    (LISTEN_FDS_START..LISTEN_FDS_START + count)
        .map(|fd| {
            // SAFETY: sd_listen_fds(3): descriptors LISTEN_FDS_START onwards,
            // LISTEN_FDS of them, are sockets passed to the process named
            // by LISTEN_PID (checked above), owned by nobody else in it.
            #[allow(unsafe_code)]
            let listener = unsafe { <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            // An AF_UNIX or closed descriptor has no inet address.
            listener
                .local_addr()
                .and_then(|_| listener.set_nonblocking(true))
                .map(|()| listener)
                .map_err(|source| SystemdSocketError::NotTcp { fd, source })
        })
        .collect()
}
