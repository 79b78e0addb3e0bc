//! One record of the kernel's `/dev/kmsg` interface
//! (Documentation/ABI/testing/dev-kmsg): `PRIORITY,SEQUENCE,TIMESTAMP,FLAGS;MESSAGE`,
//! the timestamp in microseconds since boot, then optional continuation
//! lines that start with a space (` KEY=VALUE`). A regular file given as
//! `--path.kmsg` holds the same records, one per line.

/// The longest record the kernel hands out (`CONSOLE_EXT_LOG_MAX`,
/// 8192 bytes): a read buffer of this size takes any record, and a line
/// in a regular file longer than this is not a record.
pub const MAX_RECORD: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub seq: u64,
    pub ts_us: u64,
    /// Logged by the kernel itself (syslog facility 0). The kernel gives
    /// every record written to `/dev/kmsg` from user space a facility of
    /// its own, LOG_USER unless the writer names another, never 0
    /// (`devkmsg_write` in kernel/printk/printk.c: "we enforce LOG_USER, to
    /// be able to reliably distinguish kernel-generated messages from
    /// userspace-injected ones"), so a record of facility 0 was printed by
    /// a driver, NVRM included.
    pub from_kernel: bool,
    pub message: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    Record(Record<'a>),
    /// A ` KEY=VALUE` line belonging to the record before it, or an empty
    /// line: nothing to read.
    Continuation,
    Malformed,
}

/// Reads one line (without its line feed).
pub fn parse(line: &str) -> Line<'_> {
    if line.is_empty() || line.starts_with(' ') {
        return Line::Continuation;
    }
    let Some((header, message)) = line.split_once(';') else {
        return Line::Malformed;
    };
    let mut fields = header.split(',');
    let (Some(prio), Some(seq), Some(ts), Some(_flags)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Line::Malformed;
    };
    // PRIORITY is the syslog facility times 8 plus the level.
    match (number(prio), number(seq), number(ts)) {
        (Some(prio), Some(seq), Some(ts_us)) => Line::Record(Record {
            seq,
            ts_us,
            from_kernel: prio >> 3 == 0,
            message,
        }),
        _ => Line::Malformed,
    }
}

/// Writes a record as the kernel hands it out (what `parse` reads back):
/// for files standing in for /dev/kmsg in tests, benchmarks and drills.
pub fn format(priority: u8, seq: u64, ts_us: u64, message: &str) -> String {
    format!("{priority},{seq},{ts_us},-;{message}\n")
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_record_format() {
        assert_eq!(
            parse("4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."),
            Line::Record(Record {
                seq: 1234,
                ts_us: 5_678_901,
                from_kernel: true,
                message: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            })
        );
        // Extra header fields (the caller id of newer kernels) are allowed;
        // a message may hold semicolons.
        assert!(matches!(
            parse("6,2,3,c,caller=T1;a;b"),
            Line::Record(Record {
                seq: 2,
                ts_us: 3,
                from_kernel: true,
                message: "a;b"
            })
        ));
        let line = format(4, 7, 99, "NVRM: Xid (PCI:0000:3b:00): 13, a");
        assert_eq!(
            parse(line.trim_end()),
            Line::Record(Record {
                seq: 7,
                ts_us: 99,
                from_kernel: true,
                message: "NVRM: Xid (PCI:0000:3b:00): 13, a"
            })
        );
        // Facility 1 (user, priority 8-15) and beyond: written from user
        // space, as `echo ... > /dev/kmsg` does (priority 12: user, warning).
        assert!(matches!(
            parse("12,8,1,-;NVRM: Xid (PCI:0000:3b:00): 48, a"),
            Line::Record(Record {
                from_kernel: false,
                ..
            })
        ));
        assert!(matches!(
            parse("30,9,1,-;x"),
            Line::Record(Record {
                from_kernel: false,
                ..
            })
        ));
        assert_eq!(parse(" SUBSYSTEM=pci"), Line::Continuation);
        assert_eq!(parse(""), Line::Continuation);
    }

    #[test]
    fn anything_else_is_malformed() {
        for bad in [
            "garbage",
            "[  12.345] NVRM: Xid (PCI:0000:3b:00): 79",
            "4,1,2;no flags",
            "x,1,2,-;bad priority",
            "4,-1,2,-;bad sequence",
            "4,1,2.5,-;bad timestamp",
            "4,1,99999999999999999999999,-;too long",
        ] {
            assert_eq!(parse(bad), Line::Malformed, "{bad:?}");
        }
    }
}
