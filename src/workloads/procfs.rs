//! Reading a process's entries under the host's procfs, and the host's
//! passwd file and Slurm mapping directory, with every failure typed: an
//! entry that vanishes, refuses, holds garbage or does not answer is a
//! [`WorkloadReadError`], never a panic and never a wait without end.
//!
//! Every read goes through one [`Reader`] (`src/fsread.rs`) with a
//! deadline: a `/proc/<pid>/cgroup` held up by the kernel's
//! `cgroup_mutex`, or a passwd file on a hung mount, costs one abandoned
//! read (`timeout`), not the attribution of every other process.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fsread::{ReadError, Reader};
use crate::snapshot::WorkloadReadError;

/// `/proc/<pid>/cgroup` and `status` are a few hundred bytes; anything
/// much longer is not what the kernel writes.
const MAX_PROC_FILE: u64 = 64 * 1024;

/// A passwd file of tens of thousands of users stays well below this.
const MAX_PASSWD: u64 = 16 * 1024 * 1024;

/// Entries of a Slurm mapping directory read per refresh: one per GPU is
/// what dcgm-exporter's format has; a directory of thousands is not one.
const MAX_MAPPING_ENTRIES: usize = 1024;

/// How long one procfs entry may take. The kernel answers in microseconds
/// unless something holds a lock it needs.
pub const PROC_DEADLINE: Duration = Duration::from_secs(1);

/// How long a file on the root file system (passwd, mapping files) may
/// take: it may sit on a network mount.
pub const FILE_DEADLINE: Duration = Duration::from_secs(2);

/// Reader threads for attribution: a stuck read is replaced by a new
/// thread, so two serve every pid in turn.
const READER_THREADS: usize = 2;

/// ESRCH: the process exited while its entry was open.
const ESRCH: i32 = 3;

pub fn error_kind(e: &io::Error) -> WorkloadReadError {
    match e.kind() {
        io::ErrorKind::NotFound => WorkloadReadError::Gone,
        io::ErrorKind::PermissionDenied => WorkloadReadError::PermissionDenied,
        io::ErrorKind::InvalidData => WorkloadReadError::Malformed,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => WorkloadReadError::Timeout,
        _ if e.raw_os_error() == Some(ESRCH) => WorkloadReadError::Gone,
        _ => WorkloadReadError::Io,
    }
}

/// The attribution reason for a failed bounded read.
pub fn read_error_kind(e: &ReadError) -> WorkloadReadError {
    match e {
        ReadError::Io(e) => error_kind(e),
        ReadError::TooLarge { .. } => WorkloadReadError::Malformed,
        ReadError::NotRegular(_) => WorkloadReadError::Io,
        ReadError::TimedOut(_) | ReadError::Busy => WorkloadReadError::Timeout,
    }
}

/// The host's procfs and root file system, read with deadlines. Cheap to
/// clone (the reader threads are shared).
#[derive(Debug, Clone)]
pub struct HostFiles {
    procfs: PathBuf,
    reader: Reader,
}

impl HostFiles {
    pub fn new(procfs: PathBuf) -> HostFiles {
        HostFiles {
            procfs,
            reader: Reader::new("workloads", READER_THREADS),
        }
    }

    /// `<procfs>/<pid>/<entry>`.
    pub fn proc_path(&self, pid: u32, entry: &str) -> PathBuf {
        self.procfs.join(pid.to_string()).join(entry)
    }

    /// A whole small text file within `deadline`; longer than `limit` or
    /// not UTF-8 is malformed.
    pub fn text(
        &self,
        path: &Path,
        limit: u64,
        deadline: Duration,
    ) -> Result<String, WorkloadReadError> {
        let bytes = self
            .reader
            .read(path, limit, deadline)
            .map_err(|e| read_error_kind(&e))?;
        String::from_utf8(bytes).map_err(|_| WorkloadReadError::Malformed)
    }

    /// The text of `<procfs>/<pid>/<entry>` (`cgroup`, `status`, `stat`...).
    pub fn proc_text(&self, pid: u32, entry: &str) -> Result<String, WorkloadReadError> {
        self.text(&self.proc_path(pid, entry), MAX_PROC_FILE, PROC_DEADLINE)
    }

    /// The text of `<procfs>/<pid>/cgroup`.
    pub fn cgroup(&self, pid: u32) -> Result<String, WorkloadReadError> {
        self.proc_text(pid, "cgroup")
    }

    /// The real uid, the first of the four on the `Uid:` line of
    /// `<procfs>/<pid>/status`.
    pub fn real_uid(&self, pid: u32) -> Result<u32, WorkloadReadError> {
        let text = self.proc_text(pid, "status")?;
        parse_real_uid(&text).ok_or(WorkloadReadError::Malformed)
    }

    /// The CPU time a process used, user and system, in clock ticks
    /// (`utime` and `stime` of `<procfs>/<pid>/stat`, proc(5)).
    pub fn cpu_ticks(&self, pid: u32) -> Result<u64, WorkloadReadError> {
        let text = self.proc_text(pid, "stat")?;
        parse_cpu_ticks(&text).ok_or(WorkloadReadError::Malformed)
    }

    /// A small text file (a Slurm mapping file), bounded like a proc entry.
    pub fn small_text(&self, path: &Path) -> Result<String, WorkloadReadError> {
        self.text(path, MAX_PROC_FILE, FILE_DEADLINE)
    }

    /// User names by uid from a passwd file (`name:password:uid:...`); the
    /// first entry of a uid wins, as `getpwuid` finds it. Lines that are
    /// not entries are skipped.
    pub fn passwd(&self, path: &Path) -> Result<HashMap<u32, String>, WorkloadReadError> {
        let text = self.text(path, MAX_PASSWD, FILE_DEADLINE)?;
        Ok(parse_passwd(&text))
    }

    /// The entries of a directory (names and paths), at most
    /// `MAX_MAPPING_ENTRIES`, within the file deadline.
    pub fn list_dir(&self, dir: &Path) -> Result<Vec<(String, PathBuf)>, WorkloadReadError> {
        let owned = dir.to_path_buf();
        self.reader
            .run(dir, FILE_DEADLINE, move || {
                let entries = std::fs::read_dir(&owned).map_err(ReadError::Io)?;
                Ok(entries
                    .flatten()
                    .take(MAX_MAPPING_ENTRIES)
                    .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
                    .collect())
            })
            .map_err(|e| read_error_kind(&e))
    }

    /// Runs other blocking I/O for attribution (a container engine's
    /// socket) on the same reader threads, within `deadline`; `key` names
    /// what is read, for the stuck-path bookkeeping and the log.
    pub fn run<T: Send + 'static>(
        &self,
        key: &Path,
        deadline: Duration,
        work: impl FnOnce() -> Result<T, WorkloadReadError> + Send + 'static,
    ) -> Result<T, WorkloadReadError> {
        // The work's own error rides through the reader as a value.
        match self.reader.run(key, deadline, move || Ok(work())) {
            Ok(result) => result,
            Err(e) => Err(read_error_kind(&e)),
        }
    }
}

fn parse_real_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `utime + stime` of a `stat` line. The command name in parentheses may
/// hold spaces and parentheses itself, so the fields are counted from the
/// last `)`: state is field 3, utime 14 and stime 15.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if let (false, Ok(uid)) = (name.is_empty() || name.starts_with('#'), uid.parse()) {
            names.entry(uid).or_insert_with(|| name.to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_reasons() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            error_kind(&Error::from(ErrorKind::NotFound)),
            WorkloadReadError::Gone
        );
        // The process exited while its entry was open.
        assert_eq!(
            error_kind(&Error::from_raw_os_error(ESRCH)),
            WorkloadReadError::Gone
        );
        // hidepid= or an LSM refusing another user's entry.
        assert_eq!(
            error_kind(&Error::from(ErrorKind::PermissionDenied)),
            WorkloadReadError::PermissionDenied
        );
        assert_eq!(
            error_kind(&Error::from(ErrorKind::TimedOut)),
            WorkloadReadError::Timeout
        );
        assert_eq!(
            error_kind(&Error::from(ErrorKind::Other)),
            WorkloadReadError::Io
        );
        assert_eq!(
            read_error_kind(&ReadError::TimedOut(PROC_DEADLINE)),
            WorkloadReadError::Timeout
        );
    }

    #[test]
    fn the_real_uid_is_the_first_of_four() {
        let status = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\n\
                      Uid:\t1001\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
        assert_eq!(parse_real_uid(status), Some(1001));
        assert_eq!(parse_real_uid("Name:\tx\n"), None);
        assert_eq!(parse_real_uid("Uid:\troot\n"), None);
    }

    #[test]
    fn cpu_time_is_counted_from_the_last_parenthesis() {
        // A command name with spaces and a parenthesis of its own.
        let stat = "4242 (py (worker) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    731 42 0 0 20 0 8 0 12345 100000 200 18446744073709551615\n";
        assert_eq!(parse_cpu_ticks(stat), Some(773));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1 2 3"), None);
        assert_eq!(parse_cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn missing_unreadable_and_oversized_files_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let host = HostFiles::new(dir.to_path_buf());
        std::fs::create_dir_all(dir.join("7")).unwrap();
        assert_eq!(host.cgroup(6), Err(WorkloadReadError::Gone));
        std::fs::write(dir.join("7/cgroup"), vec![b'x'; MAX_PROC_FILE as usize + 1]).unwrap();
        assert_eq!(host.cgroup(7), Err(WorkloadReadError::Malformed));
        std::fs::write(dir.join("7/cgroup"), [0xff, 0xfe, b'\n']).unwrap();
        assert_eq!(host.cgroup(7), Err(WorkloadReadError::Malformed));
        std::fs::write(dir.join("7/status"), "Uid:\tnobody\n").unwrap();
        assert_eq!(host.real_uid(7), Err(WorkloadReadError::Malformed));
        // A directory where a file should be.
        std::fs::create_dir_all(dir.join("8/cgroup")).unwrap();
        assert_eq!(host.cgroup(8), Err(WorkloadReadError::Io));
    }

    #[test]
    fn passwd_names_by_uid_first_entry_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("passwd");
        std::fs::write(
            &path,
            "root:x:0:0:root:/root:/bin/bash\n# comment\ngarbage\n\
             alice:x:1001:1001::/home/alice:/bin/bash\nalias:x:1001:1001::/:/bin/sh\n\
             bob:x:notanumber:1::/:/bin/sh\n",
        )
        .unwrap();
        let host = HostFiles::new(dir.path().to_path_buf());
        let names = host.passwd(&path).unwrap();
        assert_eq!(names.get(&0).map(String::as_str), Some("root"));
        assert_eq!(names.get(&1001).map(String::as_str), Some("alice"));
        assert_eq!(names.len(), 2);
        assert_eq!(
            host.passwd(&dir.path().join("none")),
            Err(WorkloadReadError::Gone)
        );
    }
}
