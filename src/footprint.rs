//! The process's resident memory, where only the C library and the kernel
//! can help: the exporter's one use of `unsafe` besides NVML's FFI layer
//! (`nvml/raw.rs`), two calls into libc. What each saves on the simulated
//! dgx-h100 is measured in BENCHMARKS.md ("Steady memory: where each MiB
//! goes").
//!
//! - [`one_malloc_arena`]: glibc gives every thread that allocates an arena
//!   of its own (up to eight per core). With a sampler thread per GPU, the
//!   XID thread and the HTTP workers, each kept 60-100 KiB of its own heap
//!   resident; one arena shares the free space. The threads allocate a few
//!   KiB once a poll, so they never contend for it.
//! - [`give_back_start_up_code`]: the code that runs only at start
//!   (parsing flags, the web config, TLS setup, NVML's and the simulator's
//!   initialization) stays mapped after it ran, and the kernel maps code
//!   64 KiB around each page a thread touches (fault-around) and reads
//!   ahead. Once the exporter serves, it asks the kernel to map its code
//!   page by page (`MADV_RANDOM`) and to reclaim what is mapped now
//!   (`MADV_PAGEOUT`, Linux 5.4+): the code of a poll and a scrape comes
//!   back at its next run, page by page, and the rest stays out. Only
//!   file-backed mappings with no anonymous (written) pages are paged out,
//!   so nothing goes to swap, and the kernel skips pages other processes
//!   map too (a shared libc). On kernels without `MADV_PAGEOUT` the call
//!   fails and nothing changes.

#![allow(unsafe_code)]

/// Limits glibc to one malloc arena. Call before any other thread starts.
/// Not glibc (musl): nothing to do, its allocator has no per-thread arenas.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two ints and changes only the allocator's
        // parameters; called before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// One mapping of `/proc/self/smaps` worth paging out: file-backed,
/// readable, not writable, with no anonymous pages.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
}

/// The mappings of an smaps text that hold only clean pages of a file.
fn clean_file_mappings(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut current: Option<Mapping> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            // A header: `start-end perms offset dev inode [path]`.
            if let Some(m) = current.take() {
                out.push(m);
            }
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            let perms = fields.next().unwrap_or("").as_bytes();
            let inode = fields.nth(2).unwrap_or("0");
            let path = fields.next().unwrap_or("");
            // Private (`p`): a shared read-only mapping may be of a file in
            // memory (`/dev/shm`, a memfd), whose pages would go to swap.
            if end > start
                && perms.first() == Some(&b'r')
                && perms.get(1) == Some(&b'-')
                && perms.get(3) == Some(&b'p')
                && inode != "0"
                && path.starts_with('/')
            {
                current = Some(Mapping { start, end });
            }
        } else if first == "Anonymous:" && fields.next().is_some_and(|kib| kib != "0") {
            // Pages this process wrote (relocated read-only data, a
            // private copy): not the file's, so left alone.
            current = None;
        }
    }
    out.extend(current);
    out
}

/// Gives back the pages of code and read-only data run or read only at
/// start (see the module doc), given this process's `/proc/self/smaps`
/// (read by the caller, with a deadline: `crate::selfstat`). Returns how
/// many mappings were advised.
pub fn give_back_start_up_code(smaps: &str) -> usize {
    #[cfg(target_os = "linux")]
    {
        let mappings = clean_file_mappings(smaps);
        for m in &mappings {
            let (addr, len) = (m.start as *mut libc::c_void, m.end - m.start);
            // SAFETY: the range is a mapping of this process, read-only and
            // backed by a file; advice changes how the kernel maps its
            // pages, never their contents, and a page paged out is read
            // back from the file at its next use.
            unsafe {
                libc::madvise(addr, len, libc::MADV_RANDOM);
                libc::madvise(addr, len, libc::MADV_PAGEOUT);
            }
        }
        mappings.len()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = smaps;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0100000 r--p 00000000 fe:01 123 /usr/bin/nvml-exporter
Size:               1024 kB
Rss:                 800 kB
Anonymous:             0 kB
55d0a0100000-55d0a0500000 r-xp 00100000 fe:01 123 /usr/bin/nvml-exporter
Size:               4096 kB
Anonymous:             0 kB
55d0a0500000-55d0a0540000 r--p 00500000 fe:01 123 /usr/bin/nvml-exporter
Size:                256 kB
Anonymous:           144 kB
55d0a0540000-55d0a0541000 rw-p 00540000 fe:01 123 /usr/bin/nvml-exporter
Anonymous:             4 kB
55d0a1000000-55d0a1100000 rw-p 00000000 00:00 0 [heap]
Anonymous:           244 kB
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
Anonymous:            80 kB
7fff00000000-7fff00002000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
";

    #[test]
    fn only_clean_read_only_file_mappings_are_given_back() {
        assert_eq!(
            clean_file_mappings(SMAPS),
            vec![
                Mapping {
                    start: 0x55d0_a000_0000,
                    end: 0x55d0_a010_0000
                },
                Mapping {
                    start: 0x55d0_a010_0000,
                    end: 0x55d0_a050_0000
                },
            ],
            "the relocated read-only data (written: anonymous pages), the data, the heap, \
             anonymous memory and the vdso stay"
        );
    }

    #[test]
    fn garbage_gives_nothing() {
        assert!(clean_file_mappings("not smaps\n\nzz-yy r--p 0 0 1 /x\n").is_empty());
    }

    #[test]
    fn the_running_process_has_code_to_give_back() {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let found = clean_file_mappings(&smaps);
        assert!(!found.is_empty(), "{smaps}");
        // And advising them leaves the process running this code.
        assert_eq!(give_back_start_up_code(&smaps), found.len());
        assert_eq!(clean_file_mappings(&smaps).len(), found.len());
    }
}
