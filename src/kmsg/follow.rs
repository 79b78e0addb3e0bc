//! The `kmsg` thread: opens the kernel log, reads it from the oldest
//! record the kernel keeps, then follows it.
//!
//! - `/dev/kmsg` (a character device) is opened non-blocking: each read
//!   returns one record into a buffer of the kernel's record limit, and
//!   `EAGAIN` means caught up. `EPIPE` means records were overwritten
//!   before we read them (counted as `overrun`; the next read continues at
//!   the oldest kept record); `EINVAL`, a record larger than the buffer
//!   (`oversized`, skipped by the kernel).
//! - A regular file holding the same records is read in chunks and followed
//!   as it grows. A line longer than the record limit is skipped, never
//!   buffered (`oversized`); a file that shrinks is read again from its
//!   start (`truncated`), one replaced at the path is opened anew
//!   (`rotated`); records whose sequence number does not grow are skipped
//!   (`out_of_order`), so neither counts a record twice.
//!
//! At the end of `/dev/kmsg` the thread waits in epoll until the kernel
//! logs a record, at most a second (then it reads again, and notices a
//! shutdown); at the end of
//! a file it sleeps `FOLLOW_PERIOD` between reads (epoll does not watch
//! regular files), four reads a second. While the queue of
//! events the poller has not taken yet is full (NVML not up yet), it stops
//! reading (a chunk already read is finished): memory stays bounded and,
//! for a file, nothing is lost.

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use mio::unix::SourceFd;

use super::message::{self, Message};
use super::record::{self, Line, MAX_RECORD};
use super::{lock, LogEvent, Shared};
use crate::snapshot::KernelLogProblem as Problem;

/// How long the thread sleeps once it has read everything.
pub const FOLLOW_PERIOD: Duration = Duration::from_millis(250);
/// Retries of a log that cannot be opened, doubling up to the cap.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// A file is read in chunks this large; the events of one chunk go into
/// the queue even when it fills meanwhile.
pub const CHUNK: usize = 64 * 1024;
/// A record read within this long of finding the log's end was logged
/// just now: it calibrates the kernel clock against ours.
const LIVE: Duration = Duration::from_secs(1);

pub fn run(path: &Path, shared: &Shared) {
    let mut reader = Reader {
        shared,
        clock: Clock::read(),
        last_seq: None,
        caught_up_at: None,
        skew: 0.0,
    };
    let mut retry = RETRY_MIN;
    while !shared.stopped() {
        match open(path) {
            Ok((file, meta)) => {
                retry = RETRY_MIN;
                shared.set_open(true);
                if meta.file_type().is_char_device() {
                    reader.follow_device(file);
                } else {
                    reader.follow_file(path, file, &meta);
                }
                shared.set_open(false);
            }
            Err(why) => {
                shared.problem(
                    Problem::Unreadable,
                    &format!(
                        "cannot read the kernel log {}: {why}; reading /dev/kmsg needs CAP_SYSLOG where \
                         kernel.dmesg_restrict is 1, and the device in a container (docs/operations.md, \
                         \"XIDs from the kernel log\"). Retrying",
                        path.display()
                    ),
                );
                shared.sleep(retry);
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        }
        shared.sleep(RETRY_MIN);
    }
}

fn open(path: &Path) -> Result<(File, Metadata), String> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let kind = meta.file_type();
    if kind.is_char_device() || kind.is_file() {
        Ok((file, meta))
    } else {
        Err("not a character device (/dev/kmsg) or a regular file".into())
    }
}

/// `/dev/kmsg`, waited on through epoll (mio) so that a quiet log costs a
/// wake-up every `STOP_CHECK`, to notice shutdown, instead of a read every
/// follow period. Where epoll cannot be had, it falls back to sleeping.
struct Device {
    file: File,
    epoll: Option<(Mutex<mio::Poll>, Mutex<mio::Events>)>,
}

impl Device {
    fn new(file: File) -> Device {
        let epoll = mio::Poll::new().and_then(|poll| {
            poll.registry().register(
                &mut SourceFd(&file.as_raw_fd()),
                mio::Token(0),
                mio::Interest::READABLE,
            )?;
            Ok((Mutex::new(poll), Mutex::new(mio::Events::with_capacity(1))))
        });
        Device {
            file,
            epoll: epoll.ok(),
        }
    }

    fn file(&self) -> &File {
        &self.file
    }

    /// Waits, after a read found nothing, until the kernel logs a record or
    /// `STOP_CHECK` passes (then the caller reads again anyway, so a wake-up
    /// the kernel did not give costs a second at most); false when stopped.
    /// mio's registration is edge-triggered: a record logged after that
    /// read wakes the wait, one logged before it was read by it.
    fn wait(&self, shared: &Shared) -> bool {
        let Some((poll, events)) = &self.epoll else {
            return !shared.sleep(FOLLOW_PERIOD);
        };
        let (mut poll, mut events) = (lock(poll), lock(events));
        match poll.poll(&mut events, Some(STOP_CHECK)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return !shared.sleep(FOLLOW_PERIOD),
        }
        !shared.stopped()
    }
}

/// How often a thread waiting on a quiet /dev/kmsg looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_secs(1);

/// The kernel's clock (microseconds since boot, as in records) read
/// through ours: `/proc/uptime` once, then `Instant`.
struct Clock {
    base: Option<(f64, Instant)>,
}

impl Clock {
    fn read() -> Clock {
        let base = super::uptime().map(|up| (up, Instant::now()));
        if base.is_none() {
            tracing::warn!("cannot read /proc/uptime: XIDs from the kernel log are dated when read, not when logged");
        }
        Clock { base }
    }

    /// Seconds since boot at `at`.
    fn uptime(&self, at: Instant) -> Option<f64> {
        self.base
            .map(|(up, i)| up + at.saturating_duration_since(i).as_secs_f64())
    }
}

struct Reader<'a> {
    shared: &'a Shared,
    clock: Clock,
    last_seq: Option<u64>,
    /// When a read last found nothing more to read.
    caught_up_at: Option<Instant>,
    /// The kernel clock's lead over the uptime clock (seconds): they drift
    /// apart on long-running hosts. Measured on each record read live.
    skew: f64,
}

impl Reader<'_> {
    /// Waits while the poller has not taken the queued events; false when
    /// stopped.
    fn wait_for_room(&self) -> bool {
        while self.shared.queue_full() {
            if self.shared.sleep(FOLLOW_PERIOD) {
                return false;
            }
        }
        !self.shared.stopped()
    }

    fn caught_up(&mut self) -> bool {
        self.caught_up_at = Some(Instant::now());
        !self.shared.sleep(FOLLOW_PERIOD)
    }

    fn follow_device(&mut self, file: File) {
        let device = Device::new(file);
        let mut buf = vec![0u8; MAX_RECORD];
        while self.wait_for_room() {
            let read = self.shared.timed_read(|| device.file().read(&mut buf));
            match read {
                Ok(n) if n > 0 => {
                    let record = buf[..n].split(|&b| b == b'\n').next().unwrap_or(&[]);
                    self.line(record);
                }
                Ok(_) => {
                    if !self.caught_up() {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.caught_up_at = Some(Instant::now());
                    if !device.wait(self.shared) {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => self.shared.problem(
                    Problem::Overrun,
                    "kernel log records were overwritten before they were read (EPIPE): XIDs among them are lost; \
                     reading on from the oldest record kept",
                ),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.shared.problem(
                    Problem::Oversized,
                    "a kernel log record was larger than the kernel's record limit and was skipped",
                ),
                Err(e) => {
                    self.shared
                        .problem(Problem::ReadError, &format!("reading the kernel log failed: {e}; reopening"));
                    return;
                }
            }
        }
    }

    fn follow_file(&mut self, path: &Path, mut file: File, meta: &Metadata) {
        let identity = (meta.dev(), meta.ino());
        let mut offset: u64 = 0;
        let mut partial: Vec<u8> = Vec::with_capacity(MAX_RECORD);
        let mut skipping = false;
        let mut chunk = vec![0u8; CHUNK];
        while self.wait_for_room() {
            let n = match self.shared.timed_read(|| file.read(&mut chunk)) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.shared.problem(
                        Problem::ReadError,
                        &format!("reading the kernel log failed: {e}; reopening"),
                    );
                    return;
                }
            };
            if n > 0 {
                offset += n as u64;
                self.lines(&chunk[..n], &mut partial, &mut skipping);
                continue;
            }
            // At the end: has the file been cut short, or replaced?
            match file.metadata() {
                Ok(m) if m.len() < offset => {
                    self.shared.problem(
                        Problem::Truncated,
                        "the kernel log file shrank: reading it again from its start (records already read are skipped)",
                    );
                    if file.seek(SeekFrom::Start(0)).is_err() {
                        return;
                    }
                    (offset, skipping) = (0, false);
                    partial.clear();
                    continue;
                }
                Ok(_) => {}
                Err(_) => return,
            }
            if std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) != identity) {
                self.shared.problem(
                    Problem::Rotated,
                    "the kernel log file was replaced: reading the new one from its start",
                );
                return;
            }
            if !self.caught_up() {
                return;
            }
        }
    }

    /// Splits a chunk into lines; a line is never held beyond the record
    /// limit.
    fn lines(&mut self, chunk: &[u8], partial: &mut Vec<u8>, skipping: &mut bool) {
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (piece, after) = (&rest[..nl], &rest[nl + 1..]);
            if *skipping {
                *skipping = false;
            } else if partial.is_empty() {
                self.line(piece);
            } else if partial.len() + piece.len() > MAX_RECORD {
                self.oversized();
                partial.clear();
            } else {
                partial.extend_from_slice(piece);
                let line = std::mem::take(partial);
                self.line(&line);
                *partial = line;
                partial.clear();
            }
            rest = after;
        }
        if *skipping {
            return;
        }
        if partial.len() + rest.len() > MAX_RECORD {
            self.oversized();
            partial.clear();
            *skipping = true;
        } else {
            partial.extend_from_slice(rest);
        }
    }

    fn oversized(&self) {
        self.shared.problem(
            Problem::Oversized,
            "a kernel log line was longer than the kernel's record limit (8192 bytes) and was skipped",
        );
    }

    fn line(&mut self, bytes: &[u8]) {
        if bytes.len() > MAX_RECORD {
            self.oversized();
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        let record = match record::parse(&text) {
            Line::Continuation => return,
            Line::Malformed => {
                self.shared.problem(
                    Problem::Malformed,
                    &format!(
                        "a kernel log line is not a /dev/kmsg record: {:?}",
                        excerpt(&text)
                    ),
                );
                return;
            }
            Line::Record(r) => r,
        };
        if self.last_seq.is_some_and(|last| record.seq <= last) {
            self.shared.problem(
                Problem::OutOfOrder,
                "a kernel log record did not follow the one before it (sequence number not larger): skipped",
            );
            return;
        }
        self.last_seq = Some(record.seq);
        let observed = Instant::now();
        let age = self.age(record.ts_us, observed);
        let event = match message::classify(record.message) {
            Ok(Message::Other) => return,
            Ok(Message::Sxid { switch, code }) => {
                self.shared.sxid(switch, code);
                return;
            }
            Ok(Message::Xid(xid)) => LogEvent::Xid {
                xid,
                at: observed.checked_sub(age).unwrap_or(observed),
                wall: SystemTime::now()
                    .checked_sub(age)
                    .unwrap_or_else(SystemTime::now),
            },
            Ok(Message::DriverLoaded) => LogEvent::DriverLoaded {
                at: observed.checked_sub(age).unwrap_or(observed),
            },
            Ok(Message::GpuReset(gpu)) => LogEvent::GpuReset {
                gpu,
                at: observed.checked_sub(age).unwrap_or(observed),
            },
            Err(message::Malformed) => {
                self.shared.problem(
                    Problem::Malformed,
                    &format!(
                        "a kernel log line looks like an XID but does not parse: {:?}",
                        excerpt(record.message)
                    ),
                );
                return;
            }
        };
        self.shared.push(event);
    }

    /// How long ago a record with this timestamp was logged.
    fn age(&mut self, ts_us: u64, observed: Instant) -> Duration {
        let Some(now) = self.clock.uptime(observed) else {
            return Duration::ZERO;
        };
        let logged = ts_us as f64 / 1e6;
        if self
            .caught_up_at
            .is_some_and(|c| observed.saturating_duration_since(c) <= LIVE)
        {
            self.skew = now - logged;
        }
        Duration::try_from_secs_f64(now - logged - self.skew).unwrap_or(Duration::ZERO)
    }
}

/// The start of a line, for a log message: enough to recognise it, never
/// a whole oversized line.
fn excerpt(s: &str) -> String {
    s.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The epoll wait on a descriptor we can write: a pipe stands in for
    /// /dev/kmsg (this machine's kernel may defer a record written from
    /// user space, so the device itself cannot be timed).
    #[test]
    fn the_wait_ends_when_data_arrives_and_otherwise_after_the_stop_check() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let device = Device::new(File::from(std::os::fd::OwnedFd::from(reader)));
        assert!(device.epoll.is_some(), "epoll takes a pipe");
        let shared = Shared::new(1);
        let started = Instant::now();
        let w = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            writer.write_all(b"4,1,1,-;x\n").unwrap();
            writer
        });
        assert!(device.wait(&shared));
        let woke = started.elapsed();
        assert!(
            woke >= Duration::from_millis(150) && woke < STOP_CHECK,
            "{woke:?}"
        );
        let _writer = w.join().unwrap();
        // Nothing new: the wait lasts the stop check, then says read again.
        let started = Instant::now();
        assert!(device.wait(&shared));
        assert!(
            started.elapsed() + Duration::from_millis(50) >= STOP_CHECK,
            "{:?}",
            started.elapsed()
        );
        shared.stop();
        assert!(!device.wait(&shared), "stopped");
    }
}
