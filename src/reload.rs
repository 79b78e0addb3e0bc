//! Following a configuration file, and the files it names, for changes:
//! the machinery the web config (`--web.config.file`) and the selection
//! file (`--config.file`) share, so both reload the same way.
//!
//! A background thread checks the files every few seconds, and SIGHUP
//! forces a check. A check compares a fingerprint of the files' metadata
//! (never their content: a stat costs the same for any file, and a read
//! of a 300 MB file or of `/dev/zero` swapped in is left to the loader,
//! which refuses it, bounded). A file that changed is loaded and
//! validated whole; only a valid one replaces the one in force, so a bad
//! edit keeps the last good configuration. A failure is logged once per
//! distinct error (and every time on SIGHUP, which someone asked for).
//! While one stands, the web config's files are loaded again at every check
//! (a certificate the bad file names may appear without any followed file
//! changing); an unchanged selection file only every `RETRY_FAILED_EVERY`
//! checks: a bad file can cost real CPU to parse, and it would cost it
//! every few seconds for as long as nobody fixes it.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

use crate::fsread::Reader;

/// How often the files are checked by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(3);
/// While a load has failed, unchanged files are loaded again at every this
/// many checks: once a minute at the default interval.
pub const RETRY_FAILED_EVERY: u32 = 20;

/// Why a configuration is being (re)loaded, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Start,
    /// The poll saw the file or a file it names change.
    Change,
    Sighup,
}

impl Trigger {
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Change => "change",
            Trigger::Sighup => "SIGHUP",
        }
    }
}

/// Hashes the metadata of `files`: device, inode, size, and modification
/// and change times. Not mtime alone, which a rotation tool may preserve:
/// the inode changes with a rename and ctime with every write, whatever
/// the tool does. A stat on a hung mount is abandoned at `deadline` like
/// any read of `reader`, and its error hashed instead.
pub fn fingerprint(reader: &Reader, files: &[PathBuf], deadline: Duration) -> u64 {
    let mut h = DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        match reader.metadata(f, deadline) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(e) => e.to_string().hash(&mut h),
        }
    }
    h.finish()
}

/// What a follower remembers between checks: the fingerprint of the files
/// in force, and the last reload error.
#[derive(Debug, Default)]
pub struct PollState {
    fingerprint: u64,
    /// The last reload error, logged once; while set, unchanged files are
    /// retried every `RETRY_FAILED_EVERY` checks.
    last_error: Option<String>,
    /// Checks of unchanged files since the last failed load.
    checks_since_failure: u32,
    /// Unchanged files are retried at every this many checks while a load
    /// has failed.
    retry_every: u32,
}

impl PollState {
    pub fn new(fingerprint: u64) -> Self {
        PollState {
            fingerprint,
            last_error: None,
            checks_since_failure: 0,
            retry_every: 1,
        }
    }

    /// Like `new`, retrying a failed load of unchanged files only every
    /// `RETRY_FAILED_EVERY` checks: the selection file, which names no
    /// file that may appear later (the web config keeps retrying at every
    /// check, for the certificates it names).
    pub fn new_backing_off(fingerprint: u64) -> Self {
        PollState {
            retry_every: RETRY_FAILED_EVERY,
            ..PollState::new(fingerprint)
        }
    }

    /// Whether a check with files now at `fp` must load them: they changed,
    /// SIGHUP asked, or the last load failed `RETRY_FAILED_EVERY` checks
    /// ago.
    pub fn must_load(&mut self, fp: u64, trigger: Trigger) -> bool {
        if fp != self.fingerprint || trigger == Trigger::Sighup {
            return true;
        }
        if self.last_error.is_none() {
            return false;
        }
        self.checks_since_failure += 1;
        self.checks_since_failure >= self.retry_every
    }

    /// A load of files at `fp` succeeded: that is what is in force now.
    pub fn loaded(&mut self, fp: u64) {
        self.fingerprint = fp;
        self.last_error = None;
    }

    /// A load of files at `fp` failed with `message`. Returns whether to
    /// log it as an error: the first time this error is seen, or when
    /// SIGHUP asked; otherwise it stands as logged.
    pub fn failed(&mut self, fp: u64, message: String, trigger: Trigger) -> bool {
        let log = trigger == Trigger::Sighup || self.last_error.as_deref() != Some(&message);
        self.last_error = Some(message);
        self.checks_since_failure = 0;
        self.fingerprint = fp;
        log
    }
}

/// Starts a thread named `name` that calls `check` on the follower every
/// `interval`, until the follower is dropped.
pub fn spawn_follower<T: Send + Sync + 'static>(
    name: &str,
    follower: Weak<T>,
    interval: Duration,
    check: fn(&T),
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            let Some(follower) = follower.upgrade() else {
                return; // the watcher was dropped
            };
            check(&follower);
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_logged_once_per_message_and_always_on_sighup() {
        let mut s = PollState::new_backing_off(1);
        assert!(!s.must_load(1, Trigger::Change));
        assert!(s.must_load(2, Trigger::Change));
        assert!(s.must_load(1, Trigger::Sighup));
        assert!(s.failed(2, "bad".into(), Trigger::Change));
        // Unchanged files, but the last load failed: retried once in
        // RETRY_FAILED_EVERY checks (not at each: issue 41, probe 5 D5, a
        // bad file was parsed every 3 s), not logged again.
        for _ in 1..RETRY_FAILED_EVERY {
            assert!(!s.must_load(2, Trigger::Change));
        }
        assert!(s.must_load(2, Trigger::Change));
        assert!(!s.failed(2, "bad".into(), Trigger::Change));
        assert!(!s.must_load(2, Trigger::Change), "counted afresh");
        assert!(s.failed(2, "bad".into(), Trigger::Sighup));
        assert!(s.failed(3, "worse".into(), Trigger::Change));
        s.loaded(4);
        assert!(!s.must_load(4, Trigger::Change));
    }

    #[test]
    fn the_fingerprint_follows_a_rewrite_and_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.yml");
        let reader = Reader::new("watch-test", 1);
        let d = Duration::from_secs(5);
        let missing = fingerprint(&reader, std::slice::from_ref(&f), d);
        std::fs::write(&f, "a").unwrap();
        let first = fingerprint(&reader, std::slice::from_ref(&f), d);
        assert_ne!(missing, first);
        assert_eq!(first, fingerprint(&reader, std::slice::from_ref(&f), d));
        std::fs::write(&f, "bb").unwrap();
        assert_ne!(first, fingerprint(&reader, std::slice::from_ref(&f), d));
    }
}
