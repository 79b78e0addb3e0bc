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
//! atomically (a temporary file beside it, created exclusively and without
//! following a link, synced, then renamed over it) on a thread of its own,
//! so a slow or hung file system never stops the poller, and bounded:
//! `MAX_BYTES` on read (parsed as it is read) and on write, `MAX_GPUS` GPUs
//! and `MAX_ENTRIES` entries of each list; the records of GPUs absent from
//! this run are held to what live counting keeps (`hold_records`,
//! `age_absent`), so that what the process holds fits its own limits. A
//! state file that is not that schema (damaged, another version) is moved
//! aside to `<path>.bad`, said once, and the exporter starts clean, never
//! the garbage silently overwritten. Some things refuse the start, with
//! nothing at the paths renamed or written, because going on would
//! destroy or lose or mix what is there (issue 51): anything but a regular
//! file at a path the state uses (a directory, a device, a FIFO, a socket;
//! `check_paths`), a regular file that does not begin as a state file
//! does, a state file or lock this user may not open (an exporter run as
//! root left it), and another exporter holding `<path>.lock` (flock). The
//! lock is held on the file at that name for the life of the process:
//! taken again when the directory is removed and made again. Files the
//! exporter makes are mode 0600 and, where it runs as root, its
//! directory's owner's, so that a non-root successor can read them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

/// The schema's version: a file of another version is not read.
pub const VERSION: u32 = 1;
/// The default where no flag says otherwise: what the systemd unit's
/// `StateDirectory=` and the Helm chart's hostPath provide.
pub const DEFAULT_PATH: &str = "/var/lib/nvml-exporter/state.json";
/// Past this the file is not read, and a state that would encode larger
/// is not written: what the process holds must fit the Helm chart's and
/// the systemd unit's 128 MiB (a valid 32 MiB file cost 164 MB resident,
/// issue 41). At the defaults a GPU's record is a few KiB (64 XID label
/// sets); `--collector.xid.max-codes` at its most (10,000) makes one under
/// 1 MiB, so 16 GPUs at that most fit. The file is parsed as it is read,
/// never held whole.
pub const MAX_BYTES: u64 = 16 << 20;
pub const MAX_GPUS: usize = 64;
/// Entries of one list: `--collector.xid.max-codes` at its most.
pub const MAX_ENTRIES: usize = 10_000;
/// Records of GPUs absent from this run kept in the file (those with the
/// latest events first): a node has at most 16 GPUs, so only another
/// node's or a crafted file's records go.
pub const MAX_ABSENT_GPUS: usize = 16;
/// Records of GPUs absent from this run whose latest counted event is
/// older than this are dropped (7 days): far past any alert's window, so a
/// GPU that comes back later starts its counters again, which `rate()`
/// and `increase()` take as a reset; within it, a GPU lost and reset
/// keeps its counts.
pub const MAX_ABSENT_AGE_S: f64 = 7.0 * 86_400.0;
/// The latest events kept of an absent GPU: what live judging keeps of one
/// GPU (`LATEST_MAX` of the poller).
pub const MAX_ABSENT_LATEST: usize = 256;

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
    /// XID 74s with ECC/parity bits per NVLink link, counted for NVIDIA's
    /// "if seen more than 2 times on the same link" (issue 46; absent from
    /// files written before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_err_links: Vec<LinkRepeatsRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRepeatsRecord {
    pub link: u32,
    /// Unix seconds of each event kept.
    pub seen: Vec<f64>,
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
    #[error("it does not begin as a state file does")]
    NotOurs,
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
        if bytes.len() as u64 > MAX_BYTES {
            return Err(StateError::TooLarge);
        }
        let f: StateFile = serde_json::from_slice(bytes).map_err(StateError::Parse)?;
        f.check()
    }

    /// The bounds a parsed file is held to.
    fn check(self) -> Result<StateFile, StateError> {
        let f = self;
        if f.version != VERSION {
            return Err(StateError::Version(f.version));
        }
        if f.gpus.len() > MAX_GPUS {
            return Err(StateError::TooManyGpus(f.gpus.len()));
        }
        for g in &f.gpus {
            if g.xids.len() > MAX_ENTRIES
                || g.latest.len() > MAX_ENTRIES
                || g.nvlink_err_links.len() > MAX_ENTRIES
                || g.nvlink_err_links
                    .iter()
                    .any(|l| l.seen.len() > MAX_ENTRIES)
            {
                return Err(StateError::TooManyEntries(g.uuid.clone()));
            }
        }
        if f.unnamed.len() > MAX_ENTRIES {
            return Err(StateError::TooManyEntries("unnamed".into()));
        }
        Ok(f)
    }
}

/// Holds the records of GPUs absent from this run (all of an earlier run's
/// records until NVML names their GPUs) to what the process keeps of a GPU
/// it counts, so that what is kept of them is bounded by the flags, not by
/// the file: at most `max_codes` XID label sets (`--collector.xid.max-codes`;
/// the rest counted under `xid="other"`, the sum kept), the
/// `MAX_ABSENT_LATEST` latest events by label set (older ones kept under
/// their code alone, as live judging does), and at most `MAX_ABSENT_GPUS`
/// records, those with the latest events first. All go at the next boot
/// (a file of another boot is not read). This is the first half, for
/// every record as it is restored.
pub fn hold_records(records: &mut std::collections::BTreeMap<String, GpuRecord>, max_codes: usize) {
    for rec in records.values_mut() {
        hold(rec, max_codes);
    }
}

/// The second half of `hold_records`' rule, once NVML has named this run's
/// GPUs: drops the absent GPUs whose latest event is more than
/// `MAX_ABSENT_AGE_S` before `now` (Unix seconds), then keeps the
/// `MAX_ABSENT_GPUS` with the latest events. Returns how many records went.
pub fn age_absent(records: &mut std::collections::BTreeMap<String, GpuRecord>, now: f64) -> usize {
    let before = records.len();
    records.retain(|_, r| {
        let t = newest(r);
        t == 0.0 || now - t <= MAX_ABSENT_AGE_S
    });
    let aged = before - records.len();
    let over = records.len().saturating_sub(MAX_ABSENT_GPUS);
    if over > 0 {
        let mut by_age: Vec<(f64, String)> = records
            .iter()
            .map(|(uuid, r)| (newest(r), uuid.clone()))
            .collect();
        by_age.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        for (_, uuid) in by_age.into_iter().take(over) {
            records.remove(&uuid);
        }
    }
    aged + over
}

/// Unix seconds of a record's latest counted event; 0 without one.
fn newest(rec: &GpuRecord) -> f64 {
    rec.xids
        .iter()
        .map(|x| x.last_seen)
        .chain(rec.other.as_ref().map(|o| o.last_seen))
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max)
}

/// One record held to `max_codes` label sets and `MAX_ABSENT_LATEST`
/// latest events.
fn hold(rec: &mut GpuRecord, max_codes: usize) {
    if rec.xids.len() > max_codes {
        let rest = rec.xids.split_off(max_codes);
        let other = rec.other.get_or_insert_with(OtherRecord::default);
        for x in rest {
            if (1..=crate::snapshot::MAX_XID_CODE).contains(&x.code) {
                other.over_limit = other.over_limit.saturating_add(x.count);
            } else {
                other.out_of_range = other.out_of_range.saturating_add(x.count);
            }
            if x.last_seen.is_finite() {
                other.last_seen = other.last_seen.max(x.last_seen);
            }
        }
        rec.xids.shrink_to_fit();
    }
    if rec.latest.len() > MAX_ABSENT_LATEST {
        rec.latest
            .sort_by(|a, b| b.at_s.total_cmp(&a.at_s).then_with(|| a.code.cmp(&b.code)));
        let rest = rec.latest.split_off(MAX_ABSENT_LATEST);
        let mut by_code: std::collections::HashMap<(u64, String), usize> = rec
            .latest
            .iter()
            .enumerate()
            .filter(|(_, l)| l.gpu_instance.is_none() && l.compute_instance.is_none())
            .map(|(i, l)| ((l.code, l.class.clone()), i))
            .collect();
        for l in rest {
            match by_code.get(&(l.code, l.class.clone())) {
                Some(&i) => rec.latest[i].at_s = rec.latest[i].at_s.max(l.at_s),
                None => {
                    by_code.insert((l.code, l.class.clone()), rec.latest.len());
                    rec.latest.push(LatestRecord {
                        gpu_instance: None,
                        compute_instance: None,
                        ..l
                    });
                }
            }
        }
        rec.latest.shrink_to_fit();
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

/// Why the state cannot be kept at all: the exporter does not start, and
/// nothing at the paths is renamed or written.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "--state.path {0} is a directory: give the path of the file to keep, e.g. {0}/state.json"
    )]
    Directory(PathBuf),
    /// A device, FIFO or socket where the exporter would rename or write
    /// (issue 51: `--state.path=/dev/null` as root replaced the device).
    #[error("--state.path {path}: {at} is {what}, not a regular file, and the exporter renames and writes there: it is left as it is and the exporter does not start. Give the path of a file to keep (e.g. {DEFAULT_PATH}), or an empty --state.path to keep no state")]
    NotAFile {
        path: PathBuf,
        at: PathBuf,
        what: &'static str,
    },
    /// A regular file that no exporter wrote (it does not begin as a
    /// state file does): likely another file named by mistake.
    #[error("--state.path {path} is a file that is not a state file (it is not JSON: it does not begin with {{): it is left as it is and the exporter does not start. Give the path of a file to keep, move that file away, or give an empty --state.path to keep no state")]
    NotOurs { path: PathBuf },
    /// A state file this user may not read: written by an exporter that
    /// ran as another user (root). Starting clean would lose its counts.
    #[error("--state.path {path}: cannot read it ({source}; owner uid {uid} gid {gid}, mode {mode:04o}): an exporter run as another user (root) wrote it. It is left as it is and the exporter does not start, so its XID counts are not lost: give the directory and its files to this exporter's user (chown -R; the Helm chart's init container does), or give another --state.path")]
    Unreadable {
        path: PathBuf,
        uid: u32,
        gid: u32,
        mode: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("--state.path {path}: another exporter keeps its state there (it holds {lock}); give each exporter its own --state.path")]
    Locked { path: PathBuf, lock: PathBuf },
    #[error("--state.path {path}: cannot use the lock file {lock}: {source}; without it nothing keeps a second exporter off this state (an exporter run as root leaves it root's: give the directory and its files to this exporter's user, chown -R)")]
    Lock {
        path: PathBuf,
        lock: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a directory entry is, in words, for an error.
fn what_it_is(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Checks every path the state uses before anything is renamed or
/// written: the file itself (what a link there names: it is read, and
/// a file that cannot be used is renamed aside), `.lock` (created and
/// flocked; a link there is refused), `.tmp` and `.bad` (replaced: a link
/// there is removed or replaced, never followed). Each may be absent or a
/// regular file; anything else is refused by name.
fn check_paths(path: &Path) -> Result<(), OpenError> {
    let refuse = |at: &Path, t: std::fs::FileType| OpenError::NotAFile {
        path: path.to_path_buf(),
        at: at.to_path_buf(),
        what: what_it_is(t),
    };
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_dir() {
            return Err(OpenError::Directory(path.to_path_buf()));
        }
        if !m.is_file() {
            return Err(refuse(path, m.file_type()));
        }
        check_contents(path, &m)?;
    }
    for (suffix, link_ok) in [(".lock", false), (".tmp", true), (".bad", true)] {
        let at = sibling(path, suffix);
        if let Ok(m) = std::fs::symlink_metadata(&at) {
            let t = m.file_type();
            if !(t.is_file() || (link_ok && t.is_symlink())) {
                return Err(refuse(&at, t));
            }
        }
    }
    Ok(())
}

/// Refuses a state file this user may not read, or one that is no state
/// file, before the lock is made or anything moved.
fn check_contents(path: &Path, m: &std::fs::Metadata) -> Result<(), OpenError> {
    use std::os::unix::fs::MetadataExt;
    let mut head = [0u8; 16];
    let read = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .and_then(|mut f| f.read(&mut head));
    match read {
        Ok(n) if !looks_like_ours(&head[..n]) => Err(OpenError::NotOurs {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(OpenError::Unreadable {
            path: path.to_path_buf(),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            source: e,
        }),
        // Said, with what is done about it, when it is read.
        _ => Ok(()),
    }
}

/// Gives a file the exporter made to the owner of its directory where
/// they differ: an exporter run as root (to read the kernel log) leaves
/// files its non-root successor can read and lock (the chart's
/// directory is 65532's). Only root can; for anyone else the file is
/// already theirs, and a refusal is no loss.
fn give_to_directory_owner(file: &File, path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let (Ok(d), Ok(f)) = (std::fs::metadata(dir), file.metadata()) else {
        return;
    };
    if (d.uid(), d.gid()) != (f.uid(), f.gid()) {
        let _ = std::os::unix::fs::fchown(file, Some(d.uid()), Some(d.gid()));
    }
}

/// How writing the state file goes, for `/metrics`
/// (`nvml_exporter_state_write_errors_total`).
#[derive(Debug, Default)]
pub struct WriteStats {
    errors: AtomicU64,
    /// Unix seconds (`f64` bits) of the last write that succeeded; 0: none.
    last_success: AtomicU64,
}

impl WriteStats {
    /// Writes that failed since start.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// When a write last succeeded, if one did.
    pub fn last_success(&self) -> Option<f64> {
        let bits = self.last_success.load(Ordering::Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }
}

/// How long a failed write waits before it is tried again (a newer state
/// to write is tried at once).
const RETRY: Duration = Duration::from_secs(5);

/// What the poller hands the writer thread: only the newest state counts.
#[derive(Debug, Default)]
struct Pending {
    next: Option<Vec<u8>>,
    /// The writer is writing (or retrying) something.
    busy: bool,
    stop: bool,
}

#[derive(Debug)]
struct Writer {
    pending: Mutex<Pending>,
    wake: Condvar,
    stats: Arc<WriteStats>,
    /// `<path>.lock`, flocked for the life of the process (released by
    /// the kernel when it ends, however it ends); taken again by the
    /// writer when the file it holds is no longer at that name.
    lock: Mutex<Option<File>>,
    /// The file was lost with its directory and the lock taken again on a
    /// new one: the next state is written even if it did not change.
    rewrite: std::sync::atomic::AtomicBool,
}

fn lock_pending(w: &Writer) -> std::sync::MutexGuard<'_, Pending> {
    w.pending.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state file of this boot: what an earlier run left, and where to
/// write.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    boot_id: String,
    /// What an earlier run of this boot left; taken by the poller.
    pub restored: Option<StateFile>,
    /// The length and digest of what was last handed to the writer.
    last_queued: Option<(usize, u64)>,
    /// The state was last too large to write (said once).
    too_large: bool,
    writer: Arc<Writer>,
}

impl Store {
    /// Opens the state at `path` for the boot `procfs` names. `Ok(None)`,
    /// said at start, where the state cannot be kept: no boot id to tell
    /// this boot's file from another's. A file of this boot that does not
    /// parse is moved aside. A directory, device, FIFO or socket at any
    /// path it uses, a file that is not a state file, one this user may
    /// not read, or a state another exporter holds, is an error.
    pub fn open(path: &Path, procfs: &Path) -> Result<Option<Store>, OpenError> {
        check_paths(path)?;
        let Some(boot_id) = boot_id(procfs) else {
            tracing::warn!(state_path = %path.display(), procfs = %procfs.display(),
                "cannot read the boot id (sys/kernel/random/boot_id under --path.procfs): XID counts and the kernel log's position are not kept across restarts");
            return Ok(None);
        };
        let lock = take_lock(path)?;
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
            Err(StateError::NotOurs) => {
                return Err(OpenError::NotOurs {
                    path: path.to_path_buf(),
                })
            }
            Err(StateError::Read(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::metadata(path).ok();
                return Err(OpenError::Unreadable {
                    path: path.to_path_buf(),
                    uid: m.as_ref().map_or(0, MetadataExt::uid),
                    gid: m.as_ref().map_or(0, MetadataExt::gid),
                    mode: m.as_ref().map_or(0, |m| m.mode() & 0o7777),
                    source: e,
                });
            }
            Err(e) => {
                let aside = sibling(path, ".bad");
                let moved = std::fs::rename(path, &aside).is_ok();
                tracing::error!(state_path = %path.display(), error = %e,
                    "the state file cannot be used: starting clean{}",
                    if moved { format!(" (kept as {})", aside.display()) } else { String::new() });
                None
            }
        };
        let writer = Arc::new(Writer {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            stats: Arc::default(),
            lock: Mutex::new(lock),
            rewrite: std::sync::atomic::AtomicBool::new(false),
        });
        let (w, p) = (writer.clone(), path.to_path_buf());
        if let Err(e) = std::thread::Builder::new()
            .name("state-writer".into())
            .spawn(move || write_loop(&w, &p))
        {
            tracing::error!(error = %e, "cannot start the state writer thread: the state is not kept");
            return Ok(None);
        }
        Ok(Some(Store {
            path: path.to_path_buf(),
            boot_id,
            restored,
            last_queued: None,
            too_large: false,
            writer,
        }))
    }

    /// The file was lost with its directory and the lock is taken again
    /// on a new one: the state is to be written though it did not change.
    pub fn rewrite_due(&self) -> bool {
        self.writer.rewrite.load(Ordering::Relaxed)
    }

    /// What `/metrics` says of the writes.
    pub fn stats(&self) -> Arc<WriteStats> {
        self.writer.stats.clone()
    }

    /// Hands `f` (its boot id and version filled in) to the writer thread
    /// unless it is what was last handed over; never waits for the file
    /// system. A failed write is retried by the writer (every `RETRY`, or
    /// at once with a newer state) and logged once, with what it costs;
    /// returns false only when `f` cannot be encoded.
    pub fn save(&mut self, f: &mut StateFile) -> bool {
        f.version = VERSION;
        f.boot_id.clone_from(&self.boot_id);
        let bytes = match serde_json::to_vec(&*f) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the state");
                return false;
            }
        };
        if bytes.len() as u64 > MAX_BYTES {
            // Not written: the next start would refuse it, and what the
            // process holds must fit its limits.
            self.writer.stats.errors.fetch_add(1, Ordering::Relaxed);
            if !std::mem::replace(&mut self.too_large, true) {
                tracing::warn!(state_path = %self.path.display(), bytes = bytes.len(),
                    "the state is larger than {MAX_BYTES} bytes and is not written (counted in nvml_exporter_state_write_errors_total): lower --collector.xid.max-codes");
            }
            return false;
        }
        self.too_large = false;
        // What was handed over last is known by its digest, not kept twice.
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            (bytes.len(), h.finish())
        };
        if self.last_queued == Some(digest) && !self.writer.rewrite.swap(false, Ordering::Relaxed) {
            return true;
        }
        lock_pending(&self.writer).next = Some(bytes);
        self.writer.wake.notify_all();
        self.last_queued = Some(digest);
        true
    }

    /// Waits, at most `within`, for what was handed over to be written
    /// (at shutdown); returns whether it was. The writer thread then
    /// stops.
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        let mut p = lock_pending(&self.writer);
        loop {
            if p.next.is_none() && !p.busy {
                p.stop = true;
                self.writer.wake.notify_all();
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!(state_path = %self.path.display(),
                    "the state file was not written before the exit (a slow or failing file system): the next start restores the state written before");
                return false;
            }
            p = self
                .writer
                .wake
                .wait_timeout(p, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for Store {
    /// Ends the writer thread once what was handed over is written.
    fn drop(&mut self) {
        lock_pending(&self.writer).stop = true;
        self.writer.wake.notify_all();
        // Released now, not when the writer thread gets to it.
        self.writer
            .lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

/// What the writer thread does next.
enum Job {
    Write(Vec<u8>),
    /// Nothing to write for a while: see that the lock is still ours.
    CheckLock,
    Stop,
}

/// How often an idle writer sees that `<path>.lock` is still the file it
/// holds: one `stat` each time.
const LOCK_CHECK: Duration = Duration::from_secs(2);

/// Waits for the next job: a newer state at once, a failed one again
/// after `RETRY`, a look at the lock every `LOCK_CHECK`.
fn next_job(w: &Writer, failed: &mut Option<Vec<u8>>, retry_at: Instant) -> Job {
    let mut p = lock_pending(w);
    loop {
        if let Some(b) = p.next.take() {
            p.busy = true;
            *failed = None;
            return Job::Write(b);
        }
        if p.stop {
            return Job::Stop;
        }
        let now = Instant::now();
        if failed.is_some() && now >= retry_at {
            p.busy = true;
            return failed.take().map_or(Job::CheckLock, Job::Write);
        }
        let wait = if failed.is_some() {
            retry_at.saturating_duration_since(now).min(LOCK_CHECK)
        } else {
            LOCK_CHECK
        };
        let (guard, waited) = w
            .wake
            .wait_timeout(p, wait)
            .unwrap_or_else(|e| e.into_inner());
        p = guard;
        let retry_due = failed.is_some() && Instant::now() >= retry_at;
        if waited.timed_out() && p.next.is_none() && !p.stop && !retry_due {
            return Job::CheckLock;
        }
    }
}

/// Whether the lock this process holds is still the file at `<path>.lock`.
fn holds_lock(held: Option<&File>, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(f) = held else { return false };
    match (
        f.metadata(),
        std::fs::symlink_metadata(sibling(path, ".lock")),
    ) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Where the lock stands, as the writer last found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockState {
    Held,
    /// Gone (its directory removed) and not yet made again.
    Lost,
    /// Another exporter took the new file first: this one stops writing.
    Yielded,
}

/// Sees that the lock is still held; takes it again on a new file when
/// the old one is gone (issue 51, D10: after the directory was removed
/// and made again, a second exporter started beside the first). Says
/// each change once; returns whether the state may be written.
fn keep_lock(w: &Writer, path: &Path, state: &mut LockState) -> bool {
    let mut held = w.lock.lock().unwrap_or_else(|e| e.into_inner());
    if lock_pending(w).stop || *state == LockState::Yielded {
        return *state != LockState::Yielded;
    }
    if holds_lock(held.as_ref(), path) {
        *state = LockState::Held;
        return true;
    }
    let lock = sibling(path, ".lock");
    let had = held.take().is_some() || *state == LockState::Lost;
    match take_lock(path) {
        Ok(Some(f)) => {
            *held = Some(f);
            if had {
                tracing::info!(state_path = %path.display(), lock = %lock.display(),
                    "the state's lock is taken again on a new lock file: a second exporter on this path is refused again");
                w.rewrite.store(true, Ordering::Relaxed);
            }
            *state = LockState::Held;
            true
        }
        Ok(None) => {
            if had && *state != LockState::Lost {
                tracing::warn!(state_path = %path.display(), lock = %lock.display(),
                    "the state's lock file is gone (its directory removed?): taken again as soon as it can be made");
            }
            *state = LockState::Lost;
            true
        }
        Err(e) => {
            tracing::error!(state_path = %path.display(), error = %e,
                "the state's lock file was replaced and this exporter cannot take the new one: it stops writing the state file (counted in nvml_exporter_state_write_errors_total), and the one holding it keeps the state");
            *state = LockState::Yielded;
            false
        }
    }
}

/// The writer thread: writes the newest state handed over, retries a
/// failed one, says a failure once and the recovery once, and keeps the
/// lock on the file at `<path>.lock`.
fn write_loop(w: &Writer, path: &Path) {
    let mut failed: Option<Vec<u8>> = None;
    let mut failing = false;
    let mut retry_at = Instant::now();
    let mut lock_state = LockState::Held;
    loop {
        let bytes = match next_job(w, &mut failed, retry_at) {
            Job::Stop => return,
            Job::CheckLock => {
                keep_lock(w, path, &mut lock_state);
                continue;
            }
            Job::Write(b) => b,
        };
        let result = if keep_lock(w, path, &mut lock_state) {
            write_atomically(path, &bytes)
        } else {
            Err(std::io::Error::other(
                "another exporter holds the state's lock",
            ))
        };
        match result {
            Ok(()) => {
                failed = None;
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                w.stats.last_success.store(now.to_bits(), Ordering::Relaxed);
                if std::mem::take(&mut failing) {
                    tracing::info!(state_path = %path.display(), "the state file is written again");
                }
            }
            Err(e) => {
                w.stats.errors.fetch_add(1, Ordering::Relaxed);
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(state_path = %path.display(), error = %e,
                        "cannot write the state file (counted in nvml_exporter_state_write_errors_total): after a restart XID counters start again (kernel-log XIDs counted again from what the ring still holds), and a GPU reset made while the exporter is stopped is known only from the kernel log; give the exporter a writable --state.path (docs/operations.md, \"Restarts\"). Retrying");
                }
                failed = Some(bytes);
                retry_at = Instant::now() + RETRY;
            }
        }
        lock_pending(w).busy = false;
        w.wake.notify_all();
    }
}

/// `path` with `suffix` appended to its file name: `state.json.tmp`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Takes `<path>.lock` for the life of the process. `Ok(None)` where the
/// lock file cannot be made because the directory is read-only or absent
/// or not this user's (the state cannot be written there either: said at
/// the first write, and the writer takes the lock once it can). A lock
/// file that exists and this user may not open (an exporter run as root
/// made it) is an error: running without it would let a second exporter
/// start beside this one.
fn take_lock(path: &Path) -> Result<Option<File>, OpenError> {
    let lock = sibling(path, ".lock");
    let fail = |source| OpenError::Lock {
        path: path.to_path_buf(),
        lock: lock.clone(),
        source,
    };
    // A device is never opened (that alone can act on it; `check_paths`
    // said so at start, this is for a lock taken again later), no link
    // followed, no FIFO waited on.
    if let Ok(m) = std::fs::symlink_metadata(&lock) {
        if !m.is_file() {
            return Err(OpenError::NotAFile {
                path: path.to_path_buf(),
                at: lock.clone(),
                what: what_it_is(m.file_type()),
            });
        }
    }
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&lock)
    {
        Ok(f) => f,
        // Made nowhere: the directory is absent, read-only, or not this
        // user's. One that exists and cannot be opened is an error.
        Err(e)
            if matches!(e.raw_os_error(), Some(libc::EROFS | libc::ENOENT))
                || (matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
                    && std::fs::symlink_metadata(&lock).is_err()) =>
        {
            // The state cannot be written there either: that write's own
            // warning says so, once.
            tracing::debug!(state_path = %path.display(), lock = %lock.display(), error = %e,
                "cannot create the state's lock file: nothing keeps a second exporter off this state");
            return Ok(None);
        }
        Err(e) => return Err(fail(e)),
    };
    if !file.metadata().map_err(fail)?.is_file() {
        return Err(fail(std::io::Error::other("not a regular file")));
    }
    give_to_directory_owner(&file, &lock);
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(OpenError::Locked {
            path: path.to_path_buf(),
            lock,
        }),
        Err(e) => Err(fail(e.into())),
    }
}

/// Whether a file's first bytes may be those of a state file, whole or
/// damaged: a JSON object (`{`; its keys in any order, as a tool that
/// edits it may write them), or nothing but NUL bytes and white space
/// (what a crash can leave of a file). Anything else is not JSON: another
/// file named by mistake (the web config, a key, a binary), refused rather
/// than replaced.
fn looks_like_ours(head: &[u8]) -> bool {
    head.iter()
        .find(|b| !(b.is_ascii_whitespace() || **b == 0))
        .is_none_or(|b| *b == b'{')
}

/// The file at `path`; `Ok(None)` when there is none.
fn read(path: &Path) -> Result<Option<StateFile>, StateError> {
    // Opened without waiting: a FIFO put there (or swapped in after a
    // check) would wait for a writer.
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StateError::Read(e)),
    };
    let meta = file.metadata().map_err(StateError::Read)?;
    if !meta.is_file() {
        return Err(StateError::Read(std::io::Error::other(
            "not a regular file",
        )));
    }
    // Said from the size before a byte is read.
    if meta.len() > MAX_BYTES {
        return Err(StateError::TooLarge);
    }
    // Parsed as it is read: the bytes are never held whole beside what
    // they parse to. A file grown past the cap since its size was asked
    // ends early, and does not parse.
    let mut reader = std::io::BufReader::with_capacity(64 << 10, file.take(MAX_BYTES));
    if !looks_like_ours(std::io::BufRead::fill_buf(&mut reader).map_err(StateError::Read)?) {
        return Err(StateError::NotOurs);
    }
    let f: StateFile = serde_json::from_reader(reader).map_err(|e| {
        if e.is_io() {
            StateError::Read(e.into())
        } else {
            StateError::Parse(e)
        }
    })?;
    f.check().map(Some)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames
/// it over `path`: a reader (or a crash) sees the old file or the new one,
/// never half of one. The temporary file is created anew (`O_EXCL`, no link
/// followed): whatever is left at its name (a crash's leftover, a FIFO, a
/// link) is removed, never opened; a directory there is an error.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = sibling(path, ".tmp");
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
    };
    let in_the_way = |at: &Path, what: &str| {
        std::io::Error::other(format!(
            "{} is {what}, not a regular file: it is left as it is and not written",
            at.display()
        ))
    };
    let mut f = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Only a crash's leftover or a link goes (unlink removes the
            // link, not what it names); a device, FIFO or socket stays.
            if let Ok(m) = std::fs::symlink_metadata(&tmp) {
                let t = m.file_type();
                if !(t.is_file() || t.is_symlink() || t.is_dir()) {
                    return Err(in_the_way(&tmp, what_it_is(t)));
                }
            }
            std::fs::remove_file(&tmp).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("{} is in the way and cannot be removed: {e}", tmp.display()),
                )
            })?;
            create()?
        }
        other => other?,
    };
    give_to_directory_owner(&f, &tmp);
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    // Renamed over a regular file or a link only: a device, FIFO, socket
    // or directory put there since the start stays.
    let replaceable = || match std::fs::symlink_metadata(path) {
        Ok(m) if !(m.file_type().is_file() || m.file_type().is_symlink()) => {
            Err(in_the_way(path, what_it_is(m.file_type())))
        }
        _ => Ok(()),
    };
    if let Err(e) = written
        .and_then(|()| replaceable())
        .and_then(|()| std::fs::rename(&tmp, path))
    {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
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

    /// Issue 46: a file written before the per-link XID 74 counts still
    /// loads, and one with them keeps them.
    #[test]
    fn the_link_counts_of_xid_74_extend_the_schema_compatibly() {
        let old = br#"{"version":1,"boot_id":"b","gpus":[{"uuid":"GPU-1","xids":[{"code":74,"count":2,"last_seen":1.8e9}],"latest":[]}]}"#;
        let f = StateFile::parse(old).expect("a file of before");
        assert!(f.gpus[0].nvlink_err_links.is_empty());
        let mut f = f;
        f.gpus[0].nvlink_err_links.push(LinkRepeatsRecord {
            link: 14,
            seen: vec![1.8e9, 1.8e9 + 60.0],
        });
        let json = serde_json::to_vec(&f).unwrap();
        assert!(String::from_utf8_lossy(&json).contains("\"nvlink_err_links\""));
        assert_eq!(StateFile::parse(&json).unwrap(), f);
    }

    #[test]
    fn a_file_of_this_boot_is_restored_and_one_of_another_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let proc_a = procfs(&dir.path().join("a"), "boot-a");
        let mut store = Store::open(&path, &proc_a).unwrap().unwrap();
        assert!(store.restored.is_none());
        store.save(&mut StateFile {
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
        assert!(store.flush(Duration::from_secs(10)));
        drop(store);
        let again = Store::open(&path, &proc_a).unwrap().unwrap();
        let mut again = again;
        let f = again.restored.take().expect("this boot's");
        assert_eq!(f.boot_id, "boot-a");
        assert_eq!(f.kernel_log.unwrap().read_to, 42);
        assert_eq!(f.gpus[0].xids[0].count, 3);
        drop(again);
        let proc_b = procfs(&dir.path().join("b"), "boot-b");
        assert!(Store::open(&path, &proc_b)
            .unwrap()
            .unwrap()
            .restored
            .is_none());
        // No boot id: nothing kept.
        assert!(Store::open(&path, &dir.path().join("nowhere"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn garbage_is_refused_by_name_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let proc_a = procfs(dir.path(), "boot-a");
        for (bytes, says) in [
            (&b"{\"version\":1,\"boot_"[..], "not a state file"),
            (
                br#"{"version":1,"boot_id":"boot-a","gpus":[],"extra":1}"#,
                "unknown field",
            ),
            (br#"{"version":9,"boot_id":"boot-a"}"#, "version 9"),
        ] {
            std::fs::write(&path, bytes).unwrap();
            let err = read(&path).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
            let store = Store::open(&path, &proc_a).unwrap().unwrap();
            assert!(store.restored.is_none());
            drop(store);
            assert_eq!(
                std::fs::read(path.with_extension("json.bad")).unwrap(),
                bytes,
                "kept, not lost"
            );
        }
        // Another file named by mistake: refused, left as it is.
        std::fs::remove_file(path.with_extension("json.bad")).unwrap();
        std::fs::write(&path, "not json").unwrap();
        let err = Store::open(&path, &proc_a).unwrap_err().to_string();
        assert!(err.contains("is a file that is not a state file"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not json");
        assert!(!path.with_extension("json.bad").exists());
        for ours in [&b""[..], b"\0\0\0", b"  {\"vers", b"{\"boot_id\":"] {
            assert!(looks_like_ours(ours), "{ours:?}");
        }
        for not in [&b"not json"[..], b"[1]", b"tls_server_config:"] {
            assert!(!looks_like_ours(not), "{not:?}");
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

    /// Waits until the writer is idle and returns its error count.
    fn settled(store: &Store) -> u64 {
        let p = lock_pending(&store.writer);
        let _p = store
            .writer
            .wake
            .wait_timeout_while(p, Duration::from_secs(10), |p| p.busy || p.next.is_some())
            .unwrap();
        store.stats().errors()
    }

    #[test]
    fn a_write_that_fails_leaves_the_old_file_and_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let proc_a = procfs(dir.path(), "boot-a");
        let missing = dir.path().join("no/such/dir/state.json");
        let mut store = Store::open(&missing, &proc_a).unwrap().unwrap();
        assert!(
            store.save(&mut StateFile::default()),
            "handed over, not waited for"
        );
        assert_eq!(
            settled(&store),
            1,
            "counted for nvml_exporter_state_write_errors_total"
        );
        assert!(store.stats().last_success().is_none());
        std::fs::create_dir_all(missing.parent().unwrap()).unwrap();
        // The writer retries on its own (after RETRY); a newer state is
        // tried at once.
        store.save(&mut StateFile {
            unnamed: vec![UnnamedRecord::default()],
            ..StateFile::default()
        });
        assert_eq!(settled(&store), 1);
        assert!(store.stats().last_success().is_some());
        assert!(store.flush(Duration::from_secs(10)));
        assert!(missing.exists());
        assert!(!sibling(&missing, ".tmp").exists());
    }

    /// Issue 41 (probe 5, D4): a FIFO at the temporary file's name hung the
    /// poller in open() for good; a link there had its target truncated
    /// and overwritten.
    #[test]
    fn whatever_is_at_the_temporary_name_is_removed_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let tmp = sibling(&path, ".tmp");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        std::fs::remove_file(&path).unwrap();
        // A FIFO there (issue 51): left as it is, the write an error.
        let made = std::process::Command::new("mkfifo").arg(&tmp).status();
        assert!(made.unwrap().success());
        let err = write_atomically(&path, b"{ }").unwrap_err().to_string();
        assert!(err.contains("state.json.tmp is a FIFO"), "{err}");
        assert!(!path.exists());
        std::fs::remove_file(&tmp).unwrap();
        // ...and one put at the file's own name since the start.
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.unwrap().success());
        let err = write_atomically(&path, b"{ }").unwrap_err().to_string();
        assert!(err.contains("state.json is a FIFO"), "{err}");
        assert!(std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()));
        assert!(!tmp.exists(), "the temporary file removed");
        std::fs::remove_file(&path).unwrap();
        // A directory in the way cannot be removed: an error naming it.
        std::fs::create_dir(&tmp).unwrap();
        let err = write_atomically(&path, b"{}").unwrap_err().to_string();
        assert!(err.contains("state.json.tmp is in the way"), "{err}");
    }

    fn xid(code: u64, count: u64, last_seen: f64) -> XidCountRecord {
        XidCountRecord {
            code,
            count,
            last_seen,
            ..XidCountRecord::default()
        }
    }

    /// Issue 41 (probe 5, D6): an earlier run's records of GPUs absent now
    /// were kept whole, cloned and compared every round, whatever their
    /// size: 25 of them at 10,000 entries each cost 164 MB resident.
    #[test]
    fn a_record_is_held_to_the_label_sets_and_latest_events_live_counting_keeps() {
        let mut rec = GpuRecord {
            uuid: "GPU-absent".into(),
            xids: (1..=100).map(|c| xid(c, 2, 1.7e9 + c as f64)).collect(),
            latest: (0..1_000u32)
                .map(|i| LatestRecord {
                    code: 1 + u64::from(i % 10),
                    class: "code".into(),
                    gpu_instance: Some(i),
                    at_s: f64::from(i),
                    ..LatestRecord::default()
                })
                .collect(),
            ..GpuRecord::default()
        };
        rec.xids.push(xid(5_000, 7, 1.9e9));
        let mut records = std::collections::BTreeMap::from([(rec.uuid.clone(), rec)]);
        hold_records(&mut records, 64);
        let rec = &records["GPU-absent"];
        assert_eq!(rec.xids.len(), 64, "--collector.xid.max-codes label sets");
        let other = rec.other.as_ref().expect("the rest under xid=\"other\"");
        assert_eq!(other.over_limit, 36 * 2, "the sum kept");
        assert_eq!(other.out_of_range, 7, "a code past NVIDIA's range");
        assert_eq!(other.last_seen, 1.9e9);
        // The 256 newest by label set, the older ones under their code.
        let by_set = rec.latest.iter().filter(|l| l.gpu_instance.is_some());
        assert_eq!(by_set.clone().count(), MAX_ABSENT_LATEST);
        assert!(by_set.clone().all(|l| l.at_s >= 744.0));
        let by_code: Vec<_> = rec
            .latest
            .iter()
            .filter(|l| l.gpu_instance.is_none())
            .collect();
        assert_eq!(by_code.len(), 10, "one per code");
        let code_1 = by_code.iter().find(|l| l.code == 1).unwrap();
        assert_eq!(code_1.at_s, 740.0, "its latest older event");
    }

    #[test]
    fn absent_gpus_past_the_cap_go_those_with_the_oldest_events_first() {
        let mut records: std::collections::BTreeMap<String, GpuRecord> = (0..MAX_ABSENT_GPUS + 3)
            .map(|i| {
                let uuid = format!("GPU-{i:02}");
                let rec = GpuRecord {
                    uuid: uuid.clone(),
                    // GPU-00 has the newest event, GPU-01 none at all.
                    xids: if i == 1 {
                        Vec::new()
                    } else {
                        vec![xid(48, 1, 2e9 - i as f64)]
                    },
                    ..GpuRecord::default()
                };
                (uuid, rec)
            })
            .collect();
        assert_eq!(age_absent(&mut records, 2e9), 3);
        assert_eq!(records.len(), MAX_ABSENT_GPUS);
        for gone in ["GPU-01", "GPU-18", "GPU-17"] {
            assert!(!records.contains_key(gone), "{gone}");
        }
        assert!(records.contains_key("GPU-00") && records.contains_key("GPU-16"));
        assert_eq!(age_absent(&mut records, 2e9), 0, "within the cap: kept");
        // Just over a week after its latest event, GPU-16 (the oldest)
        // goes, GPU-15 stays.
        let gone = age_absent(&mut records, 2e9 - 16.0 + MAX_ABSENT_AGE_S + 0.5);
        assert_eq!(gone, 1);
        assert!(!records.contains_key("GPU-16") && records.contains_key("GPU-15"));
    }

    /// What a state could grow to is not written if the next start would
    /// refuse it, and a file past the cap is refused from its size.
    #[test]
    fn a_state_past_the_cap_is_neither_written_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        let proc_a = procfs(dir.path(), "boot-a");
        let path = dir.path().join("state.json");
        let mut store = Store::open(&path, &proc_a).unwrap().unwrap();
        let big = GpuRecord {
            uuid: "GPU-1".into(),
            xids: vec![xid(48, 1, 1.7e9); MAX_ENTRIES],
            ..GpuRecord::default()
        };
        let mut f = StateFile {
            gpus: vec![big; 64],
            ..StateFile::default()
        };
        assert!(!store.save(&mut f));
        assert_eq!(store.stats().errors(), 1, "counted");
        assert!(store.flush(Duration::from_secs(10)));
        assert!(!path.exists());
        drop(store);
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_BYTES + 1).unwrap();
        assert!(matches!(read(&path), Err(StateError::TooLarge)));
    }

    #[test]
    fn a_directory_and_a_second_exporter_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let proc_a = procfs(dir.path(), "boot-a");
        let err = Store::open(dir.path(), &proc_a).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert!(dir.path().is_dir(), "left where it is");
        let path = dir.path().join("state.json");
        let first = Store::open(&path, &proc_a).unwrap().unwrap();
        let err = Store::open(&path, &proc_a).unwrap_err().to_string();
        assert!(
            err.contains("another exporter keeps its state there"),
            "{err}"
        );
        drop(first);
        assert!(
            Store::open(&path, &proc_a).unwrap().is_some(),
            "free once it is gone"
        );
    }
}
