//! The `kmsg` thread on real files (and on the machine's own /dev/kmsg):
//! backlog, following, garbage, oversized lines, truncation, rotation, a
//! log that appears late, backpressure.

use std::io::Write;
use std::path::Path;

use super::record::MAX_RECORD;
use super::*;

/// A record logged `ago` seconds before now.
fn record(seq: u64, ago: f64, message: &str) -> String {
    let ts = ((uptime().unwrap() - ago).max(0.0) * 1e6) as u64;
    format_record(4, seq, ts, message)
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn start(path: &Path) -> Arc<KernelLog> {
    KernelLog::start(KernelLogConfig {
        path: path.to_path_buf(),
        max_codes: 2,
        resume_after: None,
    })
    .unwrap()
}

/// Takes events until `n` have arrived (at most 10 s).
fn take_until(log: &KernelLog, n: usize) -> Vec<LogEvent> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n && Instant::now() < deadline {
        got.extend(log.take());
        std::thread::sleep(Duration::from_millis(20));
    }
    got
}

fn codes(events: &[LogEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            LogEvent::Xid { xid, .. } => Some(xid.code),
            _ => None,
        })
        .collect()
}

fn problems(log: &KernelLog) -> BTreeMap<&'static str, u64> {
    log.status()
        .problems
        .iter()
        .map(|(p, n)| (p.as_label(), *n))
        .collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn reads_the_backlog_dated_when_logged_then_follows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let mut text = String::new();
    text += &record(1, 300.0, "Linux version 6.1.0");
    text += &record(
        2,
        250.0,
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03",
    );
    text += &record(3, 120.0, "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
    text += &record(4, 60.0, "NVRM: Xid (PCI:0000:5d:00 GPU-I:03 GPU-CI:00): 119, pid=7, name=x, Timeout after 6s of waiting for RPC response");
    text += &record(
        5,
        50.0,
        "nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX Short Error Rate",
    );
    append(&path, &text);
    let log = start(&path);
    let events = take_until(&log, 3);
    assert_eq!(codes(&events), [79, 119]);
    let now = Instant::now();
    match &events[1] {
        &LogEvent::Xid { xid, at, wall, .. } => {
            assert_eq!(xid.gpu, PciAddress::parse("0000:3a:00").unwrap());
            let age = now.duration_since(at).as_secs_f64();
            assert!(
                (115.0..130.0).contains(&age),
                "dated {age} s ago, logged 120 s ago"
            );
            let wall_age = SystemTime::now()
                .duration_since(wall)
                .unwrap()
                .as_secs_f64();
            assert!((115.0..130.0).contains(&wall_age), "{wall_age}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(events[0], LogEvent::DriverLoaded { .. }));
    match &events[2] {
        LogEvent::Xid { xid, .. } => {
            assert_eq!((xid.gpu_instance, xid.compute_instance), (Some(3), Some(0)))
        }
        other => panic!("{other:?}"),
    }
    wait_for("the log open", || log.status().up);

    // A record logged now is found within a follow period or two, dated now.
    append(
        &path,
        &record(
            6,
            0.0,
            "NVRM: Xid (PCI:0000:3a:00): 13, pid=1, name=x, Graphics Exception",
        ),
    );
    let later = take_until(&log, 1);
    assert_eq!(codes(&later), [13]);
    let LogEvent::Xid { at, .. } = &later[0] else {
        unreachable!()
    };
    assert!(at.elapsed() < Duration::from_secs(2), "{:?}", at.elapsed());
    let status = log.status();
    assert_eq!(status.sxids.len(), 1);
    assert_eq!(
        (
            status.sxids[0].switch.as_str(),
            status.sxids[0].sxid,
            status.sxids[0].count
        ),
        ("0000:c3:00.0", Some(20009), 1)
    );
    assert!(status.problems.is_empty(), "{:?}", status.problems);
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn garbage_oversized_and_out_of_order_lines_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let mut text = String::new();
    text += "this is not a record\n";
    text += &record(10, 5.0, "NVRM: Xid (PCI:0000:3a:00): x79, bad code");
    text += &format!("4,11,1,-;{}\n", "x".repeat(3 * MAX_RECORD));
    text += &record(
        12,
        4.0,
        "NVRM: Xid (PCI:0000:3a:00): 48, An uncorrectable double bit error",
    );
    text += &record(
        12,
        3.0,
        "NVRM: Xid (PCI:0000:3a:00): 48, the same sequence number again",
    );
    text += &record(
        9,
        3.0,
        "NVRM: Xid (PCI:0000:3a:00): 48, an older sequence number",
    );
    text += " SUBSYSTEM=pci\n";
    append(&path, &text);
    let log = start(&path);
    assert_eq!(codes(&take_until(&log, 1)), [48]);
    wait_for("every problem counted", || problems(&log).len() == 3);
    assert_eq!(
        problems(&log),
        BTreeMap::from([("malformed", 2), ("oversized", 1), ("out_of_order", 2)])
    );
    // An oversized line split across reads is skipped too, and the next
    // line still counts.
    append(&path, &"y".repeat(200_000));
    append(
        &path,
        &format!(
            "\n{}",
            record(13, 0.0, "NVRM: Xid (PCI:0000:3a:00): 31, pid=1, MMU Fault")
        ),
    );
    assert_eq!(codes(&take_until(&log, 1)), [31]);
    assert_eq!(problems(&log)["oversized"], 2);
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_truncated_or_replaced_file_is_read_again_without_double_counting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    append(
        &path,
        &record(1, 10.0, "NVRM: Xid (PCI:0000:3a:00): 13, first"),
    );
    let log = start(&path);
    assert_eq!(codes(&take_until(&log, 1)), [13]);
    wait_for("caught up", || log.status().up);
    std::thread::sleep(Duration::from_millis(300));

    // copytruncate: the file is emptied, new records follow.
    std::fs::File::create(&path).unwrap();
    wait_for("the truncation noticed", || {
        problems(&log).get("truncated") == Some(&1)
    });
    append(
        &path,
        &record(2, 0.0, "NVRM: Xid (PCI:0000:3a:00): 31, second"),
    );
    assert_eq!(codes(&take_until(&log, 1)), [31]);

    // Replaced at the path; its first record was already read.
    let moved = dir.path().join("kmsg.1");
    std::fs::rename(&path, &moved).unwrap();
    let mut text = record(2, 0.0, "NVRM: Xid (PCI:0000:3a:00): 31, second");
    text += &record(3, 0.0, "NVRM: Xid (PCI:0000:3a:00): 43, third");
    std::fs::write(&path, text).unwrap();
    assert_eq!(codes(&take_until(&log, 1)), [43]);
    assert_eq!(problems(&log).get("rotated"), Some(&1));
    assert_eq!(problems(&log).get("out_of_order"), Some(&1));
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_log_that_cannot_be_read_is_retried_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-yet");
    let log = start(&path);
    wait_for("unreadable counted", || {
        problems(&log).contains_key("unreadable")
    });
    assert!(!log.status().up);
    append(
        &path,
        &record(1, 1.0, "NVRM: Xid (PCI:0000:3a:00): 79, late"),
    );
    assert_eq!(codes(&take_until(&log, 1)), [79]);
    assert!(log.status().up);
    log.shutdown(Instant::now() + Duration::from_secs(5));

    // A directory is neither the device nor a file of records.
    let log = start(dir.path());
    wait_for("unreadable counted", || {
        problems(&log).contains_key("unreadable")
    });
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_full_queue_stops_the_reading_instead_of_growing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let n = QUEUE_CAP + 500;
    let text: String = (1..=n as u64)
        .map(|i| record(i, 1.0, "NVRM: Xid (PCI:0000:3a:00): 13, storm"))
        .collect();
    append(&path, &text);
    let log = start(&path);
    wait_for("the queue to fill", || log.shared.queue_full());
    std::thread::sleep(Duration::from_millis(300));
    let first = log.take();
    // The records of the chunk being read when the queue filled still go
    // in: a record line is longer than 16 bytes.
    assert!(
        first.len() <= QUEUE_CAP + follow::CHUNK / 16,
        "queue grew past its cap: {}",
        first.len()
    );
    let rest = take_until(&log, n - first.len());
    assert_eq!(first.len() + rest.len(), n, "nothing lost");
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

/// The memory bound the docs give for a burst: the queue at its cap holds
/// under 1 MiB of events (`QUEUE_CAP`; docs/operations.md).
#[test]
fn the_queue_at_its_cap_holds_under_a_mebibyte() {
    let bytes = QUEUE_CAP * std::mem::size_of::<LogEvent>();
    assert!(bytes < 1 << 20, "{bytes} bytes");
}

/// A burst asks the poller to take the queue before its round ends
/// (`backlog`), and taking a full queue lets the waiting reader go on: the
/// rest of a file longer than the queue is read without waiting a round.
#[test]
fn a_backlog_is_flagged_and_a_take_wakes_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let n = 3 * QUEUE_CAP;
    let text: String = (1..=n as u64)
        .map(|i| record(i, 1.0, "NVRM: Xid (PCI:0000:3a:00): 13, storm"))
        .collect();
    append(&path, &text);
    let log = start(&path);
    wait_for("the queue to fill", || log.shared.queue_full());
    assert!(log.backlog());
    let mut taken = 0;
    while taken < n {
        wait_for("a backlog or the end", || {
            log.backlog() || log.shared.state().read_to == Some(n as u64)
        });
        taken += log.take().len();
    }
    assert_eq!(taken, n, "nothing lost, nothing twice");
    assert!(!log.backlog());
    log.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn sxids_are_bounded_per_switch() {
    let shared = Shared::new(2);
    let sw = PciAddress::parse("0000:c3:00.0").unwrap();
    for code in [20009, 28006, 20009, 24007, 100_000] {
        shared.sxid(sw, code);
    }
    let st = shared.state();
    assert_eq!(
        st.sxids[&sw],
        BTreeMap::from([(Some(20009), 2), (Some(28006), 1), (None, 2)])
    );
}

/// The machine's own kernel log, where this process may read it: every
/// record parses, and the reader keeps up with it.
#[test]
fn reads_this_machines_dev_kmsg_where_allowed() {
    if std::fs::File::open(DEFAULT_PATH).is_err() {
        eprintln!("/dev/kmsg not readable here: nothing to check");
        return;
    }
    let log = start(Path::new(DEFAULT_PATH));
    wait_for("the device open", || log.status().up);
    std::thread::sleep(Duration::from_millis(500));
    let status = log.status();
    assert!(status.up);
    let bad: Vec<_> = status
        .problems
        .iter()
        .filter(|(p, _)| !matches!(p, KernelLogProblem::Overrun))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    log.shutdown(Instant::now() + Duration::from_secs(5));
}
