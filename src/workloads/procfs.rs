//! Reading a process's entries under the host's procfs, and the host's
//! passwd file, with every failure typed: an entry that vanishes, refuses
//! or holds garbage is a [`WorkloadReadError`], never a panic.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::snapshot::WorkloadReadError;

/// `/proc/<pid>/cgroup` and `status` are a few hundred bytes; anything
/// much longer is not what the kernel writes.
const MAX_PROC_FILE: u64 = 64 * 1024;

/// A passwd file of tens of thousands of users stays well below this.
const MAX_PASSWD: u64 = 16 * 1024 * 1024;

/// ESRCH: the process exited while its entry was open.
const ESRCH: i32 = 3;

pub fn error_kind(e: &io::Error) -> WorkloadReadError {
    match e.kind() {
        io::ErrorKind::NotFound => WorkloadReadError::Gone,
        io::ErrorKind::PermissionDenied => WorkloadReadError::PermissionDenied,
        io::ErrorKind::InvalidData => WorkloadReadError::Malformed,
        _ if e.raw_os_error() == Some(ESRCH) => WorkloadReadError::Gone,
        _ => WorkloadReadError::Io,
    }
}

/// A whole small text file; longer than `limit` or not UTF-8 is malformed.
fn read_text(path: &Path, limit: u64) -> Result<String, WorkloadReadError> {
    let file = File::open(path).map_err(|e| error_kind(&e))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| error_kind(&e))?;
    if bytes.len() as u64 > limit {
        return Err(WorkloadReadError::Malformed);
    }
    String::from_utf8(bytes).map_err(|_| WorkloadReadError::Malformed)
}

/// A small text file (a Slurm mapping file), bounded like a proc entry.
pub fn small_text(path: &Path) -> Result<String, WorkloadReadError> {
    read_text(path, MAX_PROC_FILE)
}

/// The text of `<procfs>/<pid>/cgroup`.
pub fn cgroup(procfs: &Path, pid: u32) -> Result<String, WorkloadReadError> {
    read_text(&procfs.join(pid.to_string()).join("cgroup"), MAX_PROC_FILE)
}

/// The real uid, the first of the four on the `Uid:` line of
/// `<procfs>/<pid>/status`.
pub fn real_uid(procfs: &Path, pid: u32) -> Result<u32, WorkloadReadError> {
    let text = read_text(&procfs.join(pid.to_string()).join("status"), MAX_PROC_FILE)?;
    parse_real_uid(&text).ok_or(WorkloadReadError::Malformed)
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

/// User names by uid from a passwd file (`name:password:uid:...`); the
/// first entry of a uid wins, as `getpwuid` finds it. Lines that are not
/// entries are skipped.
pub fn passwd(path: &Path) -> Result<HashMap<u32, String>, WorkloadReadError> {
    let text = read_text(path, MAX_PASSWD)?;
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
    Ok(names)
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
            WorkloadReadError::Io
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
    fn missing_unreadable_and_oversized_files_are_typed() {
        let dir = std::env::temp_dir().join(format!("nvml-exporter-procfs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("7")).unwrap();
        assert_eq!(cgroup(&dir, 6), Err(WorkloadReadError::Gone));
        std::fs::write(dir.join("7/cgroup"), vec![b'x'; MAX_PROC_FILE as usize + 1]).unwrap();
        assert_eq!(cgroup(&dir, 7), Err(WorkloadReadError::Malformed));
        std::fs::write(dir.join("7/cgroup"), [0xff, 0xfe, b'\n']).unwrap();
        assert_eq!(cgroup(&dir, 7), Err(WorkloadReadError::Malformed));
        std::fs::write(dir.join("7/status"), "Uid:\tnobody\n").unwrap();
        assert_eq!(real_uid(&dir, 7), Err(WorkloadReadError::Malformed));
        // A directory where a file should be.
        std::fs::create_dir_all(dir.join("8/cgroup")).unwrap();
        assert_eq!(cgroup(&dir, 8), Err(WorkloadReadError::Io));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn passwd_names_by_uid_first_entry_wins() {
        let dir = std::env::temp_dir().join(format!("nvml-exporter-passwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("passwd");
        std::fs::write(
            &path,
            "root:x:0:0:root:/root:/bin/bash\n# comment\ngarbage\n\
             alice:x:1001:1001::/home/alice:/bin/bash\nalias:x:1001:1001::/:/bin/sh\n\
             bob:x:notanumber:1::/:/bin/sh\n",
        )
        .unwrap();
        let names = passwd(&path).unwrap();
        assert_eq!(names.get(&0).map(String::as_str), Some("root"));
        assert_eq!(names.get(&1001).map(String::as_str), Some("alice"));
        assert_eq!(names.len(), 2);
        assert_eq!(passwd(&dir.join("none")), Err(WorkloadReadError::Gone));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
