//! What the exporter keeps across its own restarts (`--state.path`): per
//! boot, how far it has read the kernel log and what it has counted and
//! judged, so that a restart neither lowers an XID counter nor pages an
//! event again, and a GPU reset made while it was stopped is known.
//!
//! Modelled on NVSentinel's syslog monitor, which persists
//! `syslogMonitorState{BootID, CheckLastCursors}` and resumes from the
//! cursor. The boot is `/proc/sys/kernel/random/boot_id` (under
//! `--path.procfs`): a file of another boot is ignored, and a new boot
//! starts clean, as the kernel log and the GPUs do.
//!
//! One typed schema (`StateFile`, JSON, unknown fields refused), written
//! atomically (a temporary file beside it, synced, then renamed over it),
//! and bounded: `MAX_BYTES` on read, `MAX_GPUS` GPUs and `MAX_ENTRIES`
//! entries of each list. A file that is not that schema is moved aside to
//! `<path>.bad`, said once, and the exporter starts clean: never a refusal
//! to start, never the garbage silently overwritten.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The schema's version: a file of another version is not read.
pub const VERSION: u32 = 1;
/// The default where no flag says otherwise: what the systemd unit's
/// `StateDirectory=` and the Helm chart's hostPath provide.
pub const DEFAULT_PATH: &str = "/var/lib/nvml-exporter/state.json";
/// Past this the file is not read. At the defaults a GPU's record is a
/// few KiB (64 XID label sets); `--collector.xid.max-codes` at its most
/// (10,000) makes one under 1 MiB.
pub const MAX_BYTES: u64 = 32 << 20;
pub const MAX_GPUS: usize = 64;
/// Entries of one list: `--collector.xid.max-codes` at its most.
pub const MAX_ENTRIES: usize = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateFile {
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` when written.
    pub boot_id: String,
    /// Where the kernel log has been read to, if it is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_log: Option<KernelLogPosition>,
    #[serde(default)]
    pub gpus: Vec<GpuRecord>,
    /// Kernel-log XIDs of addresses no GPU could be named for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unnamed: Vec<UnnamedRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelLogPosition {
    /// `--path.kmsg`: a position in another log means nothing.
    pub path: String,
    /// The sequence number of the last record whose events were counted.
    pub read_to: u64,
}

/// One GPU, by UUID.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRecord {
    pub uuid: String,
    #[serde(default)]
    pub xids: Vec<XidCountRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<OtherRecord>,
    /// What the verdict reads: the latest event of each code and class.
    #[serde(default)]
    pub latest: Vec<LatestRecord>,
    /// Seconds since boot of the latest GPU reset known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reset_s: Option<f64>,
    #[serde(default)]
    pub remap_failed: bool,
    #[serde(default)]
    pub mig_remap_failure: bool,
    /// Repairs waiting for a reset when last read (NVML applies a pending
    /// row remap or page retirement at a GPU reset, nothing else): compared
    /// with the first readings after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap_pending: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retirement_pending: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidCountRecord {
    pub code: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
    pub count: u64,
    /// Unix seconds of the latest event.
    pub last_seen: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtherRecord {
    pub out_of_range: u64,
    pub over_limit: u64,
    pub last_seen: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatestRecord {
    pub code: u64,
    /// `code`, `nvlink5_fatal`, `nvlink5_nothing` or `nvlink5_undecoded`.
    pub class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
    /// Seconds since boot.
    pub at_s: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnnamedRecord {
    /// As the kernel prints it: `0000:3a:00`.
    pub pci: String,
    pub code: u64,
    pub class: String,
    pub at_s: f64,
    pub wall: f64,
}

/// Why a state file was not used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    #[error("it is larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error("it is not a state file: {0}")]
    Parse(serde_json::Error),
    #[error("its version {0} is not {VERSION}")]
    Version(u32),
    #[error("it holds {0} GPUs, more than {MAX_GPUS}")]
    TooManyGpus(usize),
    #[error("GPU {0} has a list of more than {MAX_ENTRIES} entries")]
    TooManyEntries(String),
}

impl StateFile {
    /// Parses and checks a file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<StateFile, StateError> {
        let f: StateFile = serde_json::from_slice(bytes).map_err(StateError::Parse)?;
        if f.version != VERSION {
            return Err(StateError::Version(f.version));
        }
        if f.gpus.len() > MAX_GPUS {
            return Err(StateError::TooManyGpus(f.gpus.len()));
        }
        for g in &f.gpus {
            if g.xids.len() > MAX_ENTRIES || g.latest.len() > MAX_ENTRIES {
                return Err(StateError::TooManyEntries(g.uuid.clone()));
            }
        }
        if f.unnamed.len() > MAX_ENTRIES {
            return Err(StateError::TooManyEntries("unnamed".into()));
        }
        Ok(f)
    }
}

/// The boot's id, from `<procfs>/sys/kernel/random/boot_id`.
pub fn boot_id(procfs: &Path) -> Option<String> {
    let path = procfs.join("sys/kernel/random/boot_id");
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(128)
        .read_to_string(&mut text)
        .ok()?;
    let id = text.trim();
    (!id.is_empty() && id.len() <= 64).then(|| id.to_string())
}

/// The state file of this boot: what an earlier run left, and where to
/// write.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    boot_id: String,
    /// What an earlier run of this boot left; taken by the poller.
    pub restored: Option<StateFile>,
    /// Whether the last write failed (said once, and again on recovery).
    failing: bool,
    last_written: Option<Vec<u8>>,
}

impl Store {
    /// Opens the state at `path` for the boot `procfs` names. `None`, said
    /// at start, where the state cannot be kept: no boot id to tell this
    /// boot's file from another's. A file of this boot that does not parse
    /// is moved aside.
    pub fn open(path: &Path, procfs: &Path) -> Option<Store> {
        let Some(boot_id) = boot_id(procfs) else {
            tracing::warn!(state_path = %path.display(), procfs = %procfs.display(),
                "cannot read the boot id (sys/kernel/random/boot_id under --path.procfs): XID counts and the kernel log's position are not kept across restarts");
            return None;
        };
        let restored = match read(path) {
            Ok(None) => None,
            Ok(Some(f)) if f.boot_id == boot_id => {
                tracing::info!(state_path = %path.display(), gpus = f.gpus.len(),
                    "state of this boot restored: XID counts, the kernel log's position and reset evidence continue");
                Some(f)
            }
            Ok(Some(_)) => {
                tracing::info!(state_path = %path.display(), "the state file is of an earlier boot: starting clean");
                None
            }
            Err(e) => {
                let aside = path.with_extension("json.bad");
                let moved = std::fs::rename(path, &aside).is_ok();
                tracing::error!(state_path = %path.display(), error = %e,
                    "the state file cannot be used: starting clean{}",
                    if moved { format!(" (kept as {})", aside.display()) } else { String::new() });
                None
            }
        };
        Some(Store {
            path: path.to_path_buf(),
            boot_id,
            restored,
            failing: false,
            last_written: None,
        })
    }

    /// Writes `f` (its boot id and version filled in) unless it is what
    /// was last written. A failure is logged once, with what it costs;
    /// returns whether the file now says `f` (false: try again).
    pub fn save(&mut self, mut f: StateFile) -> bool {
        f.version = VERSION;
        f.boot_id.clone_from(&self.boot_id);
        let bytes = match serde_json::to_vec(&f) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the state");
                return false;
            }
        };
        if self.last_written.as_deref() == Some(bytes.as_slice()) {
            return true;
        }
        match write_atomically(&self.path, &bytes) {
            Ok(()) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(state_path = %self.path.display(), "the state file is written again");
                }
                self.last_written = Some(bytes);
                true
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(state_path = %self.path.display(), error = %e,
                        "cannot write the state file: after a restart XID counters start again and kernel-log XIDs are read again (old ones may page anew), and a GPU reset made while the exporter is stopped is known only from the kernel log; give the exporter a writable --state.path (docs/operations.md, \"Restarts\"). Retrying every round");
                }
                false
            }
        }
    }
}

/// The file at `path`; `Ok(None)` when there is none.
fn read(path: &Path) -> Result<Option<StateFile>, StateError> {
    // Asked before opening: opening a FIFO waits for a writer.
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StateError::Read(e)),
    };
    if !meta.is_file() {
        return Err(StateError::Read(std::io::Error::other(
            "not a regular file",
        )));
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StateError::Read(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(StateError::Read)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(StateError::TooLarge);
    }
    StateFile::parse(&bytes).map(Some)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames
/// it over `path`: a reader (or a crash) sees the old file or the new one,
/// never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procfs(dir: &Path, id: &str) -> PathBuf {
        let p = dir.join("proc");
        std::fs::create_dir_all(p.join("sys/kernel/random")).unwrap();
        std::fs::write(p.join("sys/kernel/random/boot_id"), format!("{id}\n")).unwrap();
        p
    }

    #[test]
    fn a_file_of_this_boot_is_restored_and_one_of_another_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let proc_a = procfs(&dir.path().join("a"), "boot-a");
        let mut store = Store::open(&path, &proc_a).unwrap();
        assert!(store.restored.is_none());
        store.save(StateFile {
            kernel_log: Some(KernelLogPosition {
                path: "/dev/kmsg".into(),
                read_to: 42,
            }),
            gpus: vec![GpuRecord {
                uuid: "GPU-1".into(),
                xids: vec![XidCountRecord {
                    code: 48,
                    count: 3,
                    last_seen: 1.5e9,
                    ..XidCountRecord::default()
                }],
                ..GpuRecord::default()
            }],
            ..StateFile::default()
        });
        let again = Store::open(&path, &proc_a).unwrap();
        let f = again.restored.expect("this boot's");
        assert_eq!(f.boot_id, "boot-a");
        assert_eq!(f.kernel_log.unwrap().read_to, 42);
        assert_eq!(f.gpus[0].xids[0].count, 3);
        let proc_b = procfs(&dir.path().join("b"), "boot-b");
        assert!(Store::open(&path, &proc_b).unwrap().restored.is_none());
        // No boot id: nothing kept.
        assert!(Store::open(&path, &dir.path().join("nowhere")).is_none());
    }

    #[test]
    fn garbage_is_refused_by_name_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let proc_a = procfs(dir.path(), "boot-a");
        for (bytes, says) in [
            (&b"not json"[..], "not a state file"),
            (
                br#"{"version":1,"boot_id":"boot-a","gpus":[],"extra":1}"#,
                "unknown field",
            ),
            (br#"{"version":9,"boot_id":"boot-a"}"#, "version 9"),
        ] {
            std::fs::write(&path, bytes).unwrap();
            let err = read(&path).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
            let store = Store::open(&path, &proc_a).unwrap();
            assert!(store.restored.is_none());
            assert_eq!(
                std::fs::read(path.with_extension("json.bad")).unwrap(),
                bytes,
                "kept, not lost"
            );
        }
        std::fs::write(&path, vec![b' '; (MAX_BYTES + 1) as usize]).unwrap();
        assert!(matches!(read(&path), Err(StateError::TooLarge)));
        let many = StateFile {
            version: VERSION,
            gpus: vec![GpuRecord::default(); MAX_GPUS + 1],
            ..StateFile::default()
        };
        assert!(matches!(
            StateFile::parse(&serde_json::to_vec(&many).unwrap()),
            Err(StateError::TooManyGpus(_))
        ));
    }

    #[test]
    fn a_write_that_fails_leaves_the_old_file_and_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let proc_a = procfs(dir.path(), "boot-a");
        let missing = dir.path().join("no/such/dir/state.json");
        let mut store = Store::open(&missing, &proc_a).unwrap();
        assert!(
            !store.save(StateFile::default()),
            "the caller is told to retry"
        );
        assert!(store.failing);
        std::fs::create_dir_all(missing.parent().unwrap()).unwrap();
        assert!(store.save(StateFile::default()));
        assert!(!store.failing);
        assert!(
            store.save(StateFile::default()),
            "unchanged: nothing to retry"
        );
        assert!(missing.exists());
        assert!(!missing.with_extension("json.tmp").exists());
    }
}
