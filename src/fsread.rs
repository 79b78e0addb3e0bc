//! File reads that cannot wedge the exporter: every read runs on a small
//! pool of reader threads and is waited on for at most a deadline.
//!
//! A read of `/proc/<pid>/cgroup` can block for as long as the kernel
//! holds `cgroup_mutex`, a file on a hung FUSE or NFS mount for ever, and
//! a FIFO until a writer appears. No timeout on `read(2)` helps: the call
//! itself does not return. So the caller never makes it: it hands the read
//! to a [`Reader`] and waits at most its deadline. A read still running at
//! its deadline is abandoned (the caller gets [`ReadError::TimedOut`] and
//! goes on), its thread is written off and replaced, and the path is
//! remembered: until that read returns, another read of the same path is
//! refused at once instead of tying up a second thread. The first
//! abandonment of a path is logged; the caller counts every refusal.
//!
//! At most [`MAX_STUCK`] threads of one reader are ever written off at a
//! time, and at most [`MAX_QUEUED`] reads wait for a thread: beyond either,
//! a read is refused at once ([`ReadError::Busy`]), so memory and threads
//! stay bounded whatever the file system does.
//!
//! Each part of the exporter that reads files off the scrape path has its
//! own reader (workload attribution, the web config, the process's own
//! statistics), so a path stuck in one never delays the others.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Threads of one reader that may be written off (stuck in a read) at once.
pub const MAX_STUCK: usize = 4;

/// Reads that may wait for a free thread.
pub const MAX_QUEUED: usize = 64;

/// Why a read gave no bytes.
#[derive(Debug)]
pub enum ReadError {
    /// What the file system said (`NotFound`, `PermissionDenied`, ...).
    Io(io::Error),
    /// Longer than the caller's limit.
    TooLarge { limit: u64 },
    /// Not a regular file (a FIFO, a device, a directory): refused by
    /// [`Reader::read_regular`] without opening it.
    NotRegular(&'static str),
    /// Still running at its deadline (or an earlier read of the same path
    /// still is): abandoned.
    TimedOut(Duration),
    /// Every thread stuck or the queue full: refused without trying.
    Busy,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::TooLarge { limit } => write!(f, "larger than {limit} bytes"),
            ReadError::NotRegular(kind) => write!(f, "not a regular file (a {kind})"),
            ReadError::TimedOut(d) => write!(
                f,
                "not read within {} ms (the file system does not answer); abandoned",
                d.as_millis()
            ),
            ReadError::Busy => {
                f.write_str("not read: every reader thread is stuck in an earlier read")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// What to do with a job when a thread picks it up or finishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Running,
    Finished,
    /// The caller gave up waiting.
    Abandoned,
}

struct Job {
    key: PathBuf,
    phase: Arc<Mutex<Phase>>,
    work: Box<dyn FnOnce() + Send>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads alive, stuck ones included.
    threads: usize,
    idle: usize,
    /// Threads written off: their read is past its deadline.
    stuck: usize,
    /// The paths those threads are reading.
    stuck_paths: HashSet<PathBuf>,
}

struct Shared {
    name: &'static str,
    /// Threads that serve reads when none is stuck.
    size: usize,
    state: Mutex<State>,
    work_ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A pool of reader threads. Cheap to clone; threads start on first use
/// and stay.
#[derive(Clone)]
pub struct Reader {
    shared: Arc<Shared>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl Reader {
    /// A reader of `size` threads (at least one), named
    /// `fsread-<name>` in thread listings and in its log lines.
    pub fn new(name: &'static str, size: usize) -> Reader {
        Reader {
            shared: Arc::new(Shared {
                name,
                size: size.max(1),
                state: Mutex::new(State::default()),
                work_ready: Condvar::new(),
            }),
        }
    }

    /// Runs `work` (blocking I/O on `path`) on a reader thread and waits for
    /// its result at most `deadline`.
    pub fn run<T: Send + 'static>(
        &self,
        path: &Path,
        deadline: Duration,
        work: impl FnOnce() -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let phase = Arc::new(Mutex::new(Phase::Queued));
        {
            let mut st = self.shared.lock();
            if st.stuck_paths.contains(path) {
                return Err(ReadError::TimedOut(deadline));
            }
            let live = st.threads - st.stuck;
            // Every thread stuck and no more may be written off, or the
            // queue full: refuse rather than wait for ever.
            if st.queue.len() >= MAX_QUEUED || (live == 0 && st.stuck >= MAX_STUCK) {
                return Err(ReadError::Busy);
            }
            if st.idle == 0 && live < self.shared.size && !self.spawn_thread(&mut st) && live == 0 {
                return Err(ReadError::Busy);
            }
            st.queue.push_back(Job {
                key: path.to_path_buf(),
                phase: phase.clone(),
                work: Box::new(move || {
                    let _ = tx.send(work());
                }),
            });
        }
        self.shared.work_ready.notify_one();
        match rx.recv_timeout(deadline) {
            Ok(result) => result,
            Err(_) => self.abandon(path, &phase, &rx, deadline),
        }
    }

    /// The whole of `path` if it is at most `limit` bytes, within
    /// `deadline`.
    pub fn read(&self, path: &Path, limit: u64, deadline: Duration) -> Result<Vec<u8>, ReadError> {
        let owned = path.to_path_buf();
        self.run(path, deadline, move || read_limited(&owned, limit, false))
    }

    /// Like [`Reader::read`], for files an operator names (configuration,
    /// certificates): anything but a regular file is refused before it is
    /// opened, so a FIFO or `/dev/zero` named by mistake is an error that
    /// says so, not a read that never ends.
    pub fn read_regular(
        &self,
        path: &Path,
        limit: u64,
        deadline: Duration,
    ) -> Result<Vec<u8>, ReadError> {
        let owned = path.to_path_buf();
        self.run(path, deadline, move || read_limited(&owned, limit, true))
    }

    /// `path`'s metadata (following links) within `deadline`.
    pub fn metadata(
        &self,
        path: &Path,
        deadline: Duration,
    ) -> Result<std::fs::Metadata, ReadError> {
        let owned = path.to_path_buf();
        self.run(path, deadline, move || {
            std::fs::metadata(&owned).map_err(ReadError::Io)
        })
    }

    /// Threads now written off (stuck in a read past its deadline).
    pub fn stuck(&self) -> usize {
        self.shared.lock().stuck
    }

    /// The caller's deadline passed: give up on the job. A job no thread
    /// has started is dropped from the queue; a running one writes its
    /// thread off, and a replacement is started while fewer than
    /// `MAX_STUCK` are written off.
    fn abandon<T>(
        &self,
        path: &Path,
        phase: &Mutex<Phase>,
        rx: &mpsc::Receiver<Result<T, ReadError>>,
        deadline: Duration,
    ) -> Result<T, ReadError> {
        let mut st = self.shared.lock();
        let mut ph = phase.lock().unwrap_or_else(|p| p.into_inner());
        match *ph {
            // Finished between the timeout and the lock: take the answer.
            Phase::Finished => {
                drop(ph);
                drop(st);
                return rx
                    .recv_timeout(Duration::from_millis(100))
                    .unwrap_or(Err(ReadError::TimedOut(deadline)));
            }
            Phase::Queued => *ph = Phase::Abandoned,
            Phase::Running => {
                *ph = Phase::Abandoned;
                st.stuck += 1;
                st.stuck_paths.insert(path.to_path_buf());
                tracing::warn!(
                    reader = self.shared.name,
                    path = %path.display(),
                    deadline_ms = deadline.as_millis() as u64,
                    stuck_threads = st.stuck,
                    "a file read did not finish within its deadline; abandoned, and the path \
                     is skipped until that read returns"
                );
                if st.stuck < MAX_STUCK {
                    self.spawn_thread(&mut st);
                }
            }
            Phase::Abandoned => {}
        }
        Err(ReadError::TimedOut(deadline))
    }

    /// Starts one more thread; false if the system refused.
    fn spawn_thread(&self, st: &mut State) -> bool {
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("fsread-{}", self.shared.name))
            .spawn(move || serve(&shared));
        match spawned {
            Ok(_) => {
                st.threads += 1;
                true
            }
            Err(e) => {
                tracing::warn!(reader = self.shared.name, error = %e, "cannot start a reader thread");
                false
            }
        }
    }
}

/// A reader thread: takes jobs until it is written off and replaced.
fn serve(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        let job = loop {
            if let Some(job) = st.queue.pop_front() {
                break job;
            }
            st.idle += 1;
            st = shared
                .work_ready
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
            st.idle -= 1;
        };
        {
            let mut ph = job.phase.lock().unwrap_or_else(|p| p.into_inner());
            if *ph == Phase::Abandoned {
                continue;
            }
            *ph = Phase::Running;
        }
        drop(st);
        (job.work)();
        st = shared.lock();
        let mut ph = job.phase.lock().unwrap_or_else(|p| p.into_inner());
        if *ph == Phase::Abandoned {
            // Written off while reading; the read has returned at last.
            st.stuck -= 1;
            st.stuck_paths.remove(&job.key);
            tracing::info!(
                reader = shared.name,
                path = %job.key.display(),
                "an abandoned file read returned; the path is read again"
            );
            if st.threads - st.stuck > shared.size {
                st.threads -= 1;
                return;
            }
        } else {
            *ph = Phase::Finished;
        }
    }
}

/// Opens and reads `path`, at most `limit` bytes (one more to tell).
fn read_limited(path: &Path, limit: u64, regular_only: bool) -> Result<Vec<u8>, ReadError> {
    if regular_only {
        let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
        if let Some(kind) = not_regular(meta.file_type()) {
            return Err(ReadError::NotRegular(kind));
        }
    }
    let file = File::open(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// What a file that is not a regular file is, in words.
fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("directory")
    } else if t.is_fifo() {
        Some("FIFO")
    } else if t.is_char_device() {
        Some("character device")
    } else if t.is_block_device() {
        Some("block device")
    } else if t.is_socket() {
        Some("socket")
    } else {
        Some("special file")
    }
}

/// How long until `deadline`, at least a millisecond: for callers that
/// split one deadline over several reads.
pub fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// How much of a message that may quote a file's content reaches the log.
pub const MAX_EXCERPT_CHARS: usize = 240;

/// `text` for a log line: control characters escaped, at most
/// [`MAX_EXCERPT_CHARS`] characters, and how much was left out. A parser's
/// message quotes what it read (a counters file pointed at a secret, a
/// CDI spec linked to `/etc/passwd`, a 500,000-character metric name).
pub fn excerpt(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(MAX_EXCERPT_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    let left = chars.count();
    if left > 0 {
        out.push_str(&format!("... ({left} more characters)"));
    }
    out
}

/// A parser message without the values it quotes. serde's type errors
/// repeat the offending scalar (`invalid type: string "alice:hunter2",
/// expected a mapping`), and in the web config a scalar may be a password typed
/// where a hash or a mapping belongs. Key names (in backticks) stay: they
/// are what the reader needs to find the line.
pub fn redact_values(message: &str) -> String {
    // serde's `Unexpected` wording for scalars, then how each value ends.
    const SCALARS: [(&str, char); 4] = [
        ("string \"", '"'),
        ("integer `", '`'),
        ("floating point `", '`'),
        ("character `", '`'),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while !rest.is_empty() {
        for (prefix, close) in SCALARS {
            if let Some(after) = rest.strip_prefix(prefix) {
                let kind = prefix.split(' ').next().unwrap_or("value");
                let kind = if kind == "floating" { "number" } else { kind };
                out.push_str(&format!("{kind} (value not shown)"));
                // Skip to the unescaped closing mark (strings are escaped
                // Rust-style, so `\"` does not end one).
                let mut escaped = false;
                let mut end = after.len();
                for (i, c) in after.char_indices() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' && close == '"' {
                        escaped = true;
                    } else if c == close {
                        end = i + c.len_utf8();
                        break;
                    }
                }
                rest = &after[end..];
                continue 'scan;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// How deep YAML flow collections (`[`, `{`) may nest in a file the
/// exporter parses (selection file, web config, CDI specs): theirs nest a
/// few levels. The YAML parser takes time quadratic in the nesting (100,000
/// `[` took 16 s), so a deeper file is refused before it is parsed.
pub const MAX_YAML_NESTING: usize = 64;

/// The 1-based line where `text`'s flow collections first nest deeper than
/// [`MAX_YAML_NESTING`], if they do: one linear pass that skips comments
/// and quoted scalars.
pub fn yaml_nesting_too_deep(text: &[u8]) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut quote: Option<u8> = None;
    let mut prev = b'\n';
    let mut bytes = text.iter().copied();
    while let Some(b) = bytes.next() {
        if b == b'\n' {
            line += 1;
        }
        match quote {
            Some(b'"') if b == b'\\' => {
                if bytes.next() == Some(b'\n') {
                    line += 1;
                }
                continue;
            }
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'#' if prev.is_ascii_whitespace() => {
                    // A comment, to the end of the line.
                    if bytes.by_ref().any(|c| c == b'\n') {
                        line += 1;
                    }
                    prev = b'\n';
                    continue;
                }
                // A quote opens a scalar only where one may begin (`don't`
                // is a plain scalar).
                b'"' | b'\'' if prev.is_ascii_whitespace() || b"[{,:-".contains(&prev) => {
                    quote = Some(b);
                }
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_YAML_NESTING {
                        return Some(line);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = b;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        path
    }

    #[test]
    fn reads_are_bounded_in_size_and_typed() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reader::new("test", 1);
        let small = dir.path().join("small");
        std::fs::write(&small, "hello").unwrap();
        let second = Duration::from_secs(5);
        assert_eq!(r.read(&small, 5, second).unwrap(), b"hello");
        assert!(matches!(
            r.read(&small, 4, second),
            Err(ReadError::TooLarge { limit: 4 })
        ));
        assert!(matches!(
            r.read(&dir.path().join("none"), 4, second),
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        assert!(matches!(
            r.read_regular(dir.path(), 4, second),
            Err(ReadError::NotRegular("directory"))
        ));
        assert!(matches!(
            r.read_regular(Path::new("/dev/zero"), 4, second),
            Err(ReadError::NotRegular("character device"))
        ));
        // /dev/zero never ends: the size limit ends the read.
        assert!(matches!(
            r.read(Path::new("/dev/zero"), 4, second),
            Err(ReadError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_stuck_read_is_abandoned_and_never_holds_up_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = fifo(dir.path(), "pipe");
        let regular = dir.path().join("file");
        std::fs::write(&regular, "ok").unwrap();
        let r = Reader::new("test", 1);
        let short = Duration::from_millis(200);
        // Opening a FIFO without a writer blocks: the read is abandoned.
        assert!(matches!(
            r.read(&pipe, 10, short),
            Err(ReadError::TimedOut(_))
        ));
        assert_eq!(r.stuck(), 1);
        // The written-off thread was replaced: other files still read.
        assert_eq!(r.read(&regular, 10, short).unwrap(), b"ok");
        // The stuck path is refused without tying up a second thread.
        assert!(matches!(
            r.read(&pipe, 10, short),
            Err(ReadError::TimedOut(_))
        ));
        assert_eq!(r.stuck(), 1);
        // A writer appears: the abandoned read returns, its thread comes
        // back, and the path is read again.
        {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new().write(true).open(&pipe).unwrap();
            w.write_all(b"late").unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while r.stuck() > 0 {
            assert!(
                Instant::now() < deadline,
                "the abandoned read never came back"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(r.read(&regular, 10, short).unwrap(), b"ok");
    }

    #[test]
    fn stuck_threads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reader::new("test", 1);
        let short = Duration::from_millis(50);
        for i in 0..MAX_STUCK + 2 {
            let pipe = fifo(dir.path(), &format!("p{i}"));
            let got = r.read(&pipe, 10, short);
            assert!(
                matches!(got, Err(ReadError::TimedOut(_) | ReadError::Busy)),
                "{got:?}"
            );
        }
        assert_eq!(r.stuck(), MAX_STUCK);
        // Every thread is stuck: refused at once, never queued for ever.
        let regular = dir.path().join("file");
        std::fs::write(&regular, "ok").unwrap();
        assert!(matches!(r.read(&regular, 10, short), Err(ReadError::Busy)));
        // Unblock them all (each FIFO gets a writer) so the test leaves
        // no thread behind.
        // O_NONBLOCK: opening a FIFO nobody reads fails at once instead of
        // waiting; the ones our threads wait on open.
        use std::os::unix::fs::OpenOptionsExt;
        for i in 0..MAX_STUCK + 2 {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(0o4000)
                .open(dir.path().join(format!("p{i}")));
        }
    }

    #[test]
    fn deep_yaml_nesting_is_found_in_one_pass() {
        let deep = format!(
            "version: 1\nfamilies: {}{}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(yaml_nesting_too_deep(deep.as_bytes()), Some(2));
        let ok = "a: [1, {b: [2, 3]}]\n# [[[[ a comment\nc: \"[[[[\"\nd: '{{{{'\ne: don't [x]\n";
        assert_eq!(yaml_nesting_too_deep(ok.as_bytes()), None);
        let edge = format!(
            "x: {}{}",
            "[".repeat(MAX_YAML_NESTING),
            "]".repeat(MAX_YAML_NESTING)
        );
        assert_eq!(yaml_nesting_too_deep(edge.as_bytes()), None);
        let over = format!("\n\nx: {}", "{".repeat(MAX_YAML_NESTING + 1));
        assert_eq!(yaml_nesting_too_deep(over.as_bytes()), Some(3));
    }

    #[test]
    fn an_excerpt_is_bounded_and_escaped() {
        assert_eq!(excerpt("a\tb"), "a\\tb");
        let long = excerpt(&"x".repeat(500_000));
        assert!(long.ends_with("... (499760 more characters)"), "{long}");
        assert!(long.len() < 300);
    }
}
