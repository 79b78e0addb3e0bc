//! The exporter's own process statistics, the `process_*` metrics every
//! Prometheus client library exports (client_golang's process collector):
//! CPU time, resident and virtual memory, start time and file descriptors,
//! read from `/proc/self` and `/proc/stat`.
//!
//! Read by a background task through the exporter's own reader threads
//! (src/fsread.rs), never by a scrape; the join step (src/join.rs) copies the latest
//! reading onto the snapshot.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::fsread::{ReadError, Reader};
use crate::snapshot::ProcessStats;

/// `/proc/<pid>/stat` times are in USER_HZ, which Linux fixes at 100 for
/// user space on every architecture (`sysconf(_SC_CLK_TCK)`).
const USER_HZ: f64 = 100.0;

const DEADLINE: Duration = Duration::from_secs(1);
const MAX_FILE: u64 = 64 * 1024;
/// About 20,000 mappings' worth; the exporter has a few hundred.
const MAX_SMAPS: u64 = 8 * 1024 * 1024;

/// The latest statistics, refreshed in the background.
pub struct SelfStats {
    reader: Reader,
    latest: ArcSwapOption<ProcessStats>,
}

impl Default for SelfStats {
    fn default() -> Self {
        SelfStats {
            reader: Reader::new("self", 1),
            latest: ArcSwapOption::empty(),
        }
    }
}

impl SelfStats {
    /// The statistics as of the last refresh; `None` before the first or
    /// where `/proc` cannot be read.
    pub fn latest(&self) -> Option<ProcessStats> {
        self.latest.load().as_deref().cloned()
    }

    /// `/proc/self/smaps` (for `crate::footprint`), read on this reader:
    /// bounded by the deadline and at most 8 MiB, `None` past either, so
    /// that a cut-off text is never taken for the whole.
    pub fn smaps(&self) -> Option<String> {
        let bytes = self
            .reader
            .read(Path::new("/proc/self/smaps"), MAX_SMAPS, DEADLINE)
            .ok()?;
        String::from_utf8(bytes).ok()
    }

    /// Reads `/proc/self` now (blocking, bounded by deadlines).
    pub fn refresh(&self) {
        let stats = read(&self.reader, Path::new("/proc"));
        self.latest.store(stats.map(Arc::new));
    }
}

fn text(reader: &Reader, path: &Path) -> Option<String> {
    let bytes = reader.read(path, MAX_FILE, DEADLINE).ok()?;
    String::from_utf8(bytes).ok()
}

/// What `procfs/self` says, or `None` if the essential files are missing.
fn read(reader: &Reader, procfs: &Path) -> Option<ProcessStats> {
    let own = procfs.join("self");
    let stat = text(reader, &own.join("stat"))?;
    let (cpu_seconds, start_ticks) = parse_stat(&stat)?;
    let status = text(reader, &own.join("status"))?;
    let boot = text(reader, &procfs.join("stat")).and_then(|s| parse_btime(&s));
    let fd_dir = own.join("fd");
    let open_fds = reader
        .run(&fd_dir, DEADLINE, {
            let fd_dir = fd_dir.clone();
            move || {
                std::fs::read_dir(&fd_dir)
                    .map(|d| d.count() as u64)
                    .map_err(ReadError::Io)
            }
        })
        .ok();
    let max_fds = text(reader, &own.join("limits")).and_then(|s| parse_max_open_files(&s));
    Some(ProcessStats {
        cpu_seconds,
        resident_memory_bytes: parse_status_kib(&status, "VmRSS:").map(|k| k * 1024),
        virtual_memory_bytes: parse_status_kib(&status, "VmSize:").map(|k| k * 1024),
        start_time_seconds: boot.map(|b| b as f64 + start_ticks as f64 / USER_HZ),
        open_fds,
        max_fds,
    })
}

/// User plus system CPU seconds and the start time in ticks since boot,
/// from `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its closing parenthesis.
fn parse_stat(stat: &str) -> Option<(f64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): field N is at index N - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    let started: u64 = fields.get(22 - 3)?.parse().ok()?;
    Some(((utime + stime) as f64 / USER_HZ, started))
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// A `Key:   123 kB` line of `/proc/<pid>/status`, in KiB.
fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The soft limit on open files from `/proc/<pid>/limits`; `None` when
/// unlimited.
fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_command_name() {
        let stat = "4242 (tokio (worker) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 50 0 0 20 0 9 0 123456 1000000 5000 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((3.0, 123_456)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn status_limits_and_boot_time() {
        let status = "Name:\tnvml-exporter\nVmSize:\t  123456 kB\nVmRSS:\t    9000 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(9000));
        assert_eq!(parse_status_kib(status, "VmSize:"), Some(123_456));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reads_whole() {
        let s = read(&Reader::new("test", 1), Path::new("/proc")).expect("/proc/self");
        assert!(s.resident_memory_bytes.unwrap() > 0);
        assert!(s.virtual_memory_bytes.unwrap() >= s.resident_memory_bytes.unwrap());
        assert!(s.open_fds.unwrap() >= 3);
        assert!(s.start_time_seconds.unwrap() > 1.6e9);
    }
}
