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
//!   (`out_of_order`), so neither counts a record twice, unless the log
//!   opened anew or read again no longer holds the last record read (a
//!   file recreated with its numbering restarted): then it is read from
//!   its start (`renumbered`). A file cut short
//!   and refilled past the old length between two reads is noticed by its
//!   content: the first bytes of the file are kept and compared at each end
//!   of file.
//! - Anything else is refused by name: a character device other than the
//!   kernel log (`/dev/zero`, `/dev/urandom`: each read would be a
//!   "record" for ever), a FIFO, a directory.
//! - A run of `MALFORMED_RUN` lines in a row that are not records (a file
//!   in another format, binary data) makes the reader pause, from a second
//!   doubling to a minute, until a record parses again: a careless path
//!   costs a read a second, not a core.
//! - Records written from user space (any process that may write
//!   `/dev/kmsg`; the kernel marks them, `record.rs`) never count as NVRM's
//!   XIDs, SXIDs, bus falls or driver loads (`user_space`); reset markers
//!   are user space's to write and are read from any record.
//! - A bus-fall line without an XID counts as XID 79 on its GPU, unless an
//!   `Xid ...: 79` line of the same GPU is within `BUS_FALL_PAIR` of it
//!   (older drivers print both for one fall).
//!
//! At the end of `/dev/kmsg` the thread waits in epoll until the kernel
//! logs a record, at most a second (then it reads again, and notices a
//! shutdown); at the end of
//! a file it sleeps `FOLLOW_PERIOD` between reads (epoll does not watch
//! regular files), four reads a second. While the queue of
//! events the poller has not taken yet is full (NVML not up yet, or a
//! burst faster than the poller takes it: it takes a quarter-full queue
//! within 50 ms, between its rounds too), it stops reading (a chunk
//! already read is finished) until the poller takes them: memory stays
//! bounded and, for a file, nothing is lost; `/dev/kmsg` keeps the records
//! in its ring meanwhile, and what the ring overwrote before it was read is
//! counted (`overrun`).

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use mio::unix::SourceFd;

use super::message::{self, Message, Xid};
use super::pci::PciAddress;
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
/// Lines in a row that are not records before the reader pauses.
pub const MALFORMED_RUN: u32 = 256;
const MALFORMED_PAUSE_MIN: Duration = Duration::from_secs(1);
const MALFORMED_PAUSE_MAX: Duration = Duration::from_secs(60);
/// A bus-fall line and an `Xid ...: 79` line of the same GPU this close in
/// kernel time are one fall.
const BUS_FALL_PAIR_US: u64 = 10_000_000;
/// GPUs remembered for that pairing.
const BUS_FALL_KEEP: usize = 64;
/// How many records after `NVRM: The NVIDIA GPU <address>` the rest of a
/// split bus-fall report may come.
const BUS_FALL_SPLIT: u64 = 4;
/// The first bytes of a followed file, kept to notice it replaced in place.
const HEAD: usize = 64;
/// The kernel log's character device, 1:11 (Documentation/admin-guide/devices.txt).
const KMSG_DEVICE: (u32, u32) = (1, 11);

pub fn run(path: &Path, shared: &Shared) {
    let mut reader = Reader {
        shared,
        path,
        restarted: false,
        clock: Clock::read(),
        last_seq: None,
        resume_after: shared.resume_after(),
        caught_up_at: None,
        skew: 0.0,
        driver_major: None,
        falls: Vec::new(),
        split_fall: None,
        malformed_run: 0,
        pause: MALFORMED_PAUSE_MIN,
    };
    let mut retry = RETRY_MIN;
    while !shared.stopped() {
        match open(path) {
            Ok((file, meta)) => {
                retry = RETRY_MIN;
                shared.set_open(true);
                // Opened anew (a file replaced at the path): the first
                // record read decides whether its numbering restarted.
                reader.restarted = true;
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

/// How much of the log `last_seq` reads at most: more than any kernel's
/// ring (`log_buf_len` is at most 2 GiB in theory, a few MiB in practice);
/// past it the answer is "not known".
const LAST_SEQ_SCAN: usize = 64 << 20;

/// The sequence number of the newest record the log at `path` holds now,
/// read from its start without waiting (0 where it holds none); `None`
/// where it cannot be read or is longer than `LAST_SEQ_SCAN`. A saved position
/// past it is of another log (a different file at the same path, a
/// crafted state file): `/dev/kmsg` numbers records from boot and never
/// goes back within one.
pub fn last_seq(path: &Path) -> Option<u64> {
    let (mut file, _) = open(path).ok()?;
    let mut buf = vec![0u8; 2 * MAX_RECORD];
    let (mut pending, mut total, mut last) = (Vec::new(), 0usize, None);
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Overwritten while read: the next read has the oldest left.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return None,
        };
        total += n;
        if total > LAST_SEQ_SCAN {
            return None;
        }
        pending.extend_from_slice(&buf[..n]);
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[start..start + end]);
            if let Line::Record(r) = record::parse(&line) {
                last = Some(r.seq);
            }
            start += end + 1;
        }
        pending.drain(..start);
        if pending.len() > MAX_RECORD {
            pending.clear();
        }
    }
    if let Line::Record(r) = record::parse(&String::from_utf8_lossy(&pending)) {
        last = Some(r.seq);
    }
    Some(last.unwrap_or(0))
}

fn open(path: &Path) -> Result<(File, Metadata), String> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let kind = meta.file_type();
    if kind.is_char_device() {
        let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
        if (major, minor) == KMSG_DEVICE {
            return Ok((file, meta));
        }
        return Err(format!(
            "a character device {major}:{minor}, not the kernel log (/dev/kmsg is {}:{})",
            KMSG_DEVICE.0, KMSG_DEVICE.1
        ));
    }
    if kind.is_file() {
        Ok((file, meta))
    } else {
        Err(format!(
            "not the kernel log device (/dev/kmsg) or a regular file, but {}",
            describe(kind)
        ))
    }
}

fn describe(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "neither"
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
    path: &'a Path,
    /// The log was opened anew or read again from its start: the next
    /// record, if not newer than the last read, may begin another log
    /// (`renumbered`).
    restarted: bool,
    clock: Clock,
    last_seq: Option<u64>,
    /// Records up to this sequence number were read by a run before this
    /// one in the same boot (the state file): skipped without a word.
    resume_after: Option<u64>,
    /// When a read last found nothing more to read.
    caught_up_at: Option<Instant>,
    /// The kernel clock's lead over the uptime clock (seconds): they drift
    /// apart on long-running hosts. Measured on each record read live.
    skew: f64,
    /// The driver's major version, from the last module load line read.
    driver_major: Option<u32>,
    /// Per GPU, the kernel time of its last fall (XID 79 or bus-fall line)
    /// and whether it was a bus-fall line.
    falls: Vec<(PciAddress, u64, bool)>,
    /// `NVRM: The NVIDIA GPU <address>` waiting for the rest of its report.
    split_fall: Option<(PciAddress, u64)>,
    /// Lines in a row that were not records, and the next pause.
    malformed_run: u32,
    pause: Duration,
}

impl Reader<'_> {
    /// Waits while the poller has not taken the queued events; false when
    /// stopped.
    fn wait_for_room(&self) -> bool {
        self.shared.wait_for_room()
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
                    if self.paused() {
                        return;
                    }
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
        let mut place = Place::default();
        let mut chunk = vec![0u8; CHUNK];
        // After a wait at the end, whether the file was cut (and perhaps
        // refilled past where we were) is asked before reading on: a read
        // at the old offset would start in the middle of other records.
        let mut woke = false;
        while self.wait_for_room() {
            if std::mem::take(&mut woke) {
                let Some(restarted) = self.restart_if_cut(&mut file, &mut place) else {
                    return;
                };
                if restarted {
                    continue;
                }
            }
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
                place.read(&chunk[..n]);
                self.lines(&chunk[..n], &mut place.partial, &mut place.skipping);
                if self.paused() {
                    return;
                }
                continue;
            }
            // At the end: has the file been cut short, or replaced?
            let Some(restarted) = self.restart_if_cut(&mut file, &mut place) else {
                return;
            };
            if restarted {
                continue;
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
            woke = true;
        }
    }

    /// Whether the file was cut since `place` (then counted, and read
    /// again from its start); `None` when it can no longer be followed.
    fn restart_if_cut(&mut self, file: &mut File, place: &mut Place) -> Option<bool> {
        if !cut(file, place.offset, &place.head)? {
            return Some(false);
        }
        self.shared.problem(
            Problem::Truncated,
            "the kernel log file shrank or was refilled with other records: reading it again from its start (records already read are skipped)",
        );
        file.seek(SeekFrom::Start(0)).ok()?;
        *place = Place::default();
        self.restarted = true;
        Some(true)
    }

    /// After a restart, a record numbered at or below the last one read:
    /// true where the log now holds no record past that one, i.e. it is
    /// another log numbered from the start (a file recreated at the path,
    /// the simulator's drill), whose records are read from its start
    /// instead of skipped as already read until its numbers pass the old
    /// log's (issue 51). A file refilled with the records read before
    /// holds the old last one again, and they stay skipped.
    fn renumbered(&mut self, seq: u64) -> bool {
        let Some(last) = self.last_seq else {
            return false;
        };
        let Some(newest) = last_seq(self.path).filter(|&n| n < last) else {
            return false;
        };
        tracing::warn!(path = %self.path.display(), last_read = last, newest, first = seq,
            "the kernel log now holds records numbered below the last one read (another log at this path): reading it from its start");
        self.last_seq = None;
        self.resume_after = None;
        true
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
                self.malformed_run = self.malformed_run.saturating_add(1);
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
        self.malformed_run = 0;
        self.pause = MALFORMED_PAUSE_MIN;
        if std::mem::take(&mut self.restarted)
            && self.last_seq.is_some_and(|last| record.seq <= last)
        {
            self.renumbered(record.seq);
        }
        if let Some(resume) = self.resume_after {
            if self.last_seq.is_none() && record.seq > resume.saturating_add(1) && record.seq > 1 {
                self.shared.problem(
                    Problem::Overrun,
                    "kernel log records logged while the exporter was stopped were overwritten before it started: XIDs among them are lost",
                );
            }
            if record.seq <= resume {
                // Counted by the run before; only the driver's version,
                // which dates the encoding of later lines, is still wanted.
                if let Ok(Message::DriverLoaded { major }) = message::classify(record.message) {
                    if record.from_kernel {
                        self.driver_major = major;
                    }
                }
                self.last_seq = Some(record.seq);
                return;
            }
            self.resume_after = None;
        }
        if self.last_seq.is_some_and(|last| record.seq <= last) {
            self.shared.problem(
                Problem::OutOfOrder,
                "a kernel log record did not follow the one before it (sequence number not larger): skipped",
            );
            return;
        }
        self.last_seq = Some(record.seq);
        self.record(&record);
        // After its event is queued: a take that sees this position has
        // the record's event too.
        self.shared.read_to(record.seq);
    }

    /// What a new record says, queued for the poller.
    fn record(&mut self, record: &record::Record<'_>) {
        let observed = Instant::now();
        let age = self.age(record.ts_us, observed);
        let at = observed.checked_sub(age).unwrap_or(observed);
        let message = match message::classify(record.message) {
            Ok(Message::Other) => return,
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
            Ok(m) => m,
        };
        let from_driver_only = !matches!(message, Message::GpuReset(_) | Message::GpuResetUuid(_));
        if from_driver_only && !record.from_kernel {
            self.shared.problem(
                Problem::UserSpace,
                &format!(
                    "a kernel log record written from user space, not by the kernel, reads like the driver's: not counted ({:?})",
                    excerpt(record.message)
                ),
            );
            return;
        }
        let xid = |xid: Xid, driver_major| LogEvent::Xid {
            xid,
            at,
            wall: SystemTime::now()
                .checked_sub(age)
                .unwrap_or_else(SystemTime::now),
            driver_major,
        };
        let event = match message {
            Message::Other => return,
            Message::Sxid { switch, code } => {
                self.shared.sxid(switch, code);
                return;
            }
            Message::Xid(x) => {
                if x.code == 79 && self.fall(x.gpu, record.ts_us, false) {
                    return;
                }
                xid(x, self.driver_major)
            }
            Message::BusFallStart(gpu) => {
                self.split_fall = Some((gpu, record.seq));
                return;
            }
            Message::BusFallEnd | Message::BusFall(_) => {
                let gpu = match message {
                    Message::BusFall(gpu) => gpu,
                    _ => match self.split_fall.take() {
                        Some((gpu, seq)) if record.seq - seq <= BUS_FALL_SPLIT => gpu,
                        _ => return,
                    },
                };
                if self.fall(gpu, record.ts_us, true) {
                    return;
                }
                xid(
                    Xid {
                        gpu,
                        gpu_instance: None,
                        compute_instance: None,
                        code: 79,
                        nvlink5: None,
                        nvlink_err: None,
                        caused_by: None,
                    },
                    self.driver_major,
                )
            }
            Message::DriverLoaded { major } => {
                self.driver_major = major;
                LogEvent::DriverLoaded { at }
            }
            Message::GpuReset(gpu) => LogEvent::GpuReset { gpu, at },
            Message::GpuResetUuid(uuid) => LogEvent::GpuResetUuid { uuid, at },
        };
        self.shared.push(event);
    }

    /// Notes a fall of `gpu` at kernel time `ts_us`; true when it is the
    /// second report of a fall already counted: an `Xid ...: 79` line and a
    /// bus-fall line of the same GPU within `BUS_FALL_PAIR_US` (either
    /// order). Two lines of the same kind are two falls.
    fn fall(&mut self, gpu: PciAddress, ts_us: u64, bus_fall_line: bool) -> bool {
        if let Some(i) = self.falls.iter().position(|(g, _, _)| g.same_device(&gpu)) {
            let (_, last, was_line) = self.falls.remove(i);
            if was_line != bus_fall_line && ts_us.abs_diff(last) <= BUS_FALL_PAIR_US {
                return true;
            }
        }
        if self.falls.len() >= BUS_FALL_KEEP {
            self.falls.remove(0);
        }
        self.falls.push((gpu, ts_us, bus_fall_line));
        false
    }

    /// After a run of lines that are not records, waits (doubling up to a
    /// minute) before reading on; true when stopped meanwhile.
    fn paused(&mut self) -> bool {
        if self.malformed_run < MALFORMED_RUN {
            return false;
        }
        self.malformed_run = 0;
        let pause = self.pause;
        tracing::warn!(
            pause_s = pause.as_secs(),
            "{MALFORMED_RUN} kernel log lines in a row are not /dev/kmsg records: pausing before reading on (is --path.kmsg the kernel log?)"
        );
        self.pause = (self.pause * 2).min(MALFORMED_PAUSE_MAX);
        self.shared.sleep(pause)
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

/// How far a regular file has been read, and what of it is held.
struct Place {
    offset: u64,
    /// The file's first bytes (up to `HEAD`): a file refilled with other
    /// records past `offset` starts differently.
    head: Vec<u8>,
    /// A line not ended yet.
    partial: Vec<u8>,
    /// Skipping the rest of an oversized line.
    skipping: bool,
}

impl Default for Place {
    fn default() -> Self {
        Place {
            offset: 0,
            head: Vec::with_capacity(HEAD),
            partial: Vec::with_capacity(MAX_RECORD),
            skipping: false,
        }
    }
}

impl Place {
    /// Moves past `chunk`, just read at `offset`, keeping the file's head.
    fn read(&mut self, chunk: &[u8]) {
        if self.head.len() < HEAD && self.offset == self.head.len() as u64 {
            let more = (HEAD - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..more]);
        }
        self.offset += chunk.len() as u64;
    }
}

/// Whether the file was cut since `offset` bytes were read from it: it is
/// shorter, or no longer begins with `head` (what was read from its start),
/// as a file cut and refilled past the old length does. `None` when it
/// cannot be asked.
fn cut(file: &File, offset: u64, head: &[u8]) -> Option<bool> {
    let len = file.metadata().ok()?.len();
    if len < offset {
        return Some(true);
    }
    let mut now = vec![0u8; head.len()];
    Some(match file.read_at(&mut now, 0) {
        Ok(n) => n != head.len() || now != head,
        Err(_) => false,
    })
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
