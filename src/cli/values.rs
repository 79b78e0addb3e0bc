//! The value parsers the flag table names: each turns one flag's text into
//! its type, or says what is wrong with it in words the error shows.

use std::path::PathBuf;
use std::time::Duration;

use super::{ListenAddress, MIN_COLLECT_INTERVAL, MIN_STUCK_DEADLINE};
use crate::compat::Generation;

/// `--compat.dcgm`'s value: the generation, and the release asked for
/// where it is newer than any generation known here (served as the
/// newest known; the start log says so once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationArg {
    pub generation: Generation,
    pub newer_release: Option<String>,
}

pub(super) fn parse_generation(s: &str) -> Result<GenerationArg, String> {
    let s = s.trim();
    let newer_release = Generation::newer_than_known(s).then(|| s.to_owned());
    Generation::parse(s).map(|generation| GenerationArg { generation, newer_release }).ok_or_else(|| {
        format!(
            "{s:?} is not a dcgm-exporter generation ({}) nor a dcgm-exporter release from 2.x on (4.5.1-4.8.0, 4.8.4, 4.10.0, 3.3.5-3.4.1-ubuntu22.04)",
            Generation::ALL
                .iter()
                .map(|g| g.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// `--state.path`: any path, or empty for none (clap's own path parser
/// refuses an empty one).
pub(super) fn parse_state_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

/// The largest `--web.max-requests` and `--web.max-connections`: far above
/// any descriptor limit, far below what the semaphores behind them accept.
pub const MAX_LIMIT: usize = 1_000_000;

pub(super) fn parse_limit(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number from 0 (no limit) to {MAX_LIMIT}"))?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_LIMIT)
        .ok_or_else(|| format!("{s} is above the most allowed, {MAX_LIMIT} (0 means no limit)"))
}

pub(super) fn parse_ratio(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("{s:?} is not a ratio from 0 to 1 (0.01 is 1 %)"))
}

/// The largest `--collector.xid.max-codes`: every code NVIDIA documents on
/// each of seven MIG instances fits well below it.
pub const MAX_XID_MAX_CODES: usize = 10_000;

pub(super) fn parse_xid_max_codes(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_XID_MAX_CODES).contains(n))
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {MAX_XID_MAX_CODES}"))
}

pub(super) fn parse_listen_address(s: &str) -> Result<ListenAddress, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not HOST:PORT or :PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: port {port:?} is not a number from 0 to 65535"))?;
    let host = if host.is_empty() {
        None
    } else if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{s:?}: unclosed '[' in IPv6 address"))?;
        inner
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{s:?}: {inner:?} is not an IPv6 address"))?;
        Some(inner.to_string())
    } else if host.contains(':') {
        return Err(format!(
            "{s:?}: write IPv6 addresses in brackets, e.g. [::1]:{port}"
        ));
    } else if host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        Some(host.to_string())
    } else {
        return Err(format!("{s:?}: {host:?} is not a host name or address"));
    };
    Ok(ListenAddress { host, port })
}

pub(super) fn parse_telemetry_path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') {
        return Err(format!("{s:?} must start with '/'"));
    }
    if s == "/" || s.starts_with("/-/") {
        return Err(format!(
            "{s:?} is taken by the landing page or the health endpoints"
        ));
    }
    if s.contains(['?', '#']) || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} must be a plain path"));
    }
    Ok(s.to_string())
}

pub(super) fn parse_at_least(s: &str, min: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min {
        return Err(format!(
            "{s:?} is shorter than the shortest allowed, {}ms",
            min.as_millis()
        ));
    }
    Ok(d)
}

pub(super) fn parse_collect_interval(s: &str) -> Result<Duration, String> {
    parse_at_least(s, MIN_COLLECT_INTERVAL)
}

pub(super) fn parse_stuck_deadline(s: &str) -> Result<Duration, String> {
    parse_at_least(s, MIN_STUCK_DEADLINE)
}

pub(super) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be longer than zero"));
    }
    Ok(d)
}

/// Parses a Prometheus duration: integers with units, largest unit first,
/// each unit at most once (`1h30m`, `500ms`, `2d`). A bare `0` is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const UNITS: &[(&str, u64)] = &[
        ("y", 365 * 24 * 3_600_000),
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let bad = || format!("{s:?} is not a duration like 500ms, 5s, 1m or 1h30m");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut next_unit = 0;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..letters];
        rest = &rest[letters..];
        let pos = UNITS[next_unit..]
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(bad)?;
        let (_, ms) = UNITS[next_unit + pos];
        next_unit += pos + 1;
        total_ms = n
            .checked_mul(ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    Ok(Duration::from_millis(total_ms))
}
