//! Reading the kernel log at start (`--collector.xid.kmsg`): a 1 MiB log
//! (the largest ring buffer most kernels are built with) of ordinary
//! kernel lines with XIDs among them, from the `kmsg` thread's start until
//! the poller could take the last XID. BENCHMARKS.md, "Kernel log".

use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use nvml_exporter::kmsg::{format_record, KernelLog, KernelLogConfig};

/// Writes about 1 MiB of records, one in fifty an XID; returns how many
/// XIDs it wrote.
fn one_mib_log(path: &std::path::Path) -> usize {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let (mut written, mut xids, mut seq) = (0usize, 0usize, 0u64);
    while written < 1 << 20 {
        seq += 1;
        let line = if seq % 50 == 0 {
            xids += 1;
            format_record(4, seq, seq * 1000, &format!(
                "NVRM: Xid (PCI:0000:{:02x}:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter",
                0x18 + (seq % 8) * 0x10
            ))
        } else {
            format_record(6, seq, seq * 1000, &format!(
                "IPv6: ADDRCONF(NETDEV_CHANGE): eth{}: link becomes ready; audit: type=1400 apparmor=\"STATUS\" operation=\"profile_replace\"",
                seq % 4
            ))
        };
        written += line.len();
        f.write_all(line.as_bytes()).unwrap();
    }
    f.flush().unwrap();
    xids
}

fn read_at_start(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let xids = one_mib_log(&path);
    let config = KernelLogConfig {
        path,
        max_codes: 64,
        resume_after: None,
    };
    c.bench_function("kernel log: read 1 MiB at start", |b| {
        b.iter(|| {
            let log = KernelLog::start(config.clone()).unwrap();
            let mut taken = 0;
            while taken < xids {
                taken += log.take().len();
                if taken < xids {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            log.shutdown(Instant::now() + Duration::from_secs(1));
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = read_at_start
}
criterion_main!(benches);
