//! Encoding cost of one poll: `render::render` on a snapshot taken by the
//! real sampler from the simulated driver, so the benchmark sees the shape a
//! running exporter sees (MIG instances, processes, every family).
//!
//! Run with `cargo bench --bench encode`. The simulated driver must be built
//! in the same profile first (`cargo build --release -p nvml-sim`); the
//! sampler finds `target/release/libnvml_sim.so` from the bench executable in
//! `target/release/deps/`, or wherever `NVML_SIM_LIBRARY` points.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use nvml_exporter::compat::{Compat, Generation};
use nvml_exporter::exposition;
use nvml_exporter::family::FamilySet;
use nvml_exporter::metric::BuildInfo;
use nvml_exporter::nvml::{self, LibrarySource, PollerConfig};
use nvml_exporter::render::{self, RenderContext};
use nvml_exporter::snapshot::Snapshot;

/// Scenarios measured: the 8-GPU DGX H100 the targets are stated for, and
/// `large` (16 GPUs x 7 MIG instances, a process in each).
const SCENARIOS: &[&str] = &["dgx-h100", "large"];

/// Ready snapshots skipped before the one measured: rates (utilization from
/// GPM, PCIe and NVLink throughput) need two samples to exist, and a running
/// exporter serves them, so the first ready snapshot is smaller than what
/// scrapes see.
const SKIP_READY: usize = 2;

/// Starts the real sampler on the simulated driver, waits until every GPU
/// has been through a few polls, keeps that snapshot, and stops sampling.
fn sample(scenario: &str) -> Arc<Snapshot> {
    let (tx, rx) = mpsc::sync_channel::<Arc<Snapshot>>(1);
    let state = Mutex::new((0usize, Some(tx)));
    let publish = Arc::new(move |snap: Snapshot| {
        if snap.ready {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            st.0 += 1;
            if st.0 > SKIP_READY {
                if let Some(tx) = st.1.take() {
                    let _ = tx.send(Arc::new(snap));
                }
            }
        }
    });
    let cfg = PollerConfig {
        library: LibrarySource::Simulated {
            scenario: scenario.to_string(),
        },
        interval: Duration::from_millis(200),
        stuck_deadline: Duration::from_secs(5),
        schedule: nvml_exporter::schedule::Schedule::shared(
            FamilySet::all(),
            Duration::from_millis(200),
        ),
        families: FamilySet::all(),
        xid_max_codes: nvml_exporter::cli::DEFAULT_XID_MAX_CODES,
        kernel_log: None,
        state: None,
    };
    let poller = nvml::start(cfg, publish)
        .unwrap_or_else(|e| panic!("cannot start the sampler on scenario {scenario}: {e}"));
    let snap = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("no ready snapshot from scenario {scenario} within 30 s"));
    // Shutting NVML down lets the simulator load the next scenario on the
    // next init.
    poller.shutdown(Duration::from_secs(5));
    snap
}

fn bench_render(c: &mut Criterion) {
    let ctx = RenderContext {
        families: FamilySet::all(),
        build: BuildInfo::current(),
        ..RenderContext::default()
    };
    // The same with dcgm-exporter's default names served beside ours
    // (--compat.dcgm=4.8): what the compatibility output adds to a poll.
    let with_compat = RenderContext {
        compat: Some(std::sync::Arc::new(Compat::new(
            Generation::V4_8,
            false,
            Some("node-1".into()),
        ))),
        ..ctx.clone()
    };
    for &scenario in SCENARIOS {
        let snap = sample(scenario);
        assert!(
            !snap.gpus.is_empty(),
            "scenario {scenario}: the sampler saw no GPU"
        );
        let expo = render::render(&snap, &ctx);
        eprintln!(
            "{scenario}: {} GPUs; text {} B (gzip {} B), OpenMetrics {} B (gzip {} B)",
            snap.gpus.len(),
            expo.text.len(),
            expo.text_gzip.len(),
            expo.openmetrics.len(),
            expo.openmetrics_gzip.len()
        );

        let mut g = c.benchmark_group(format!("render/{scenario}"));
        g.throughput(Throughput::Bytes(expo.text.len() as u64));
        // What a poll costs the exporter: both formats, plain and gzipped.
        g.bench_function("all_four", |b| {
            b.iter(|| render::render(std::hint::black_box(&snap), &ctx))
        });
        // The pieces, to see what dominates: writing both formats, then
        // compressing each at the exporter's level.
        g.bench_function("encode_both_plain", |b| {
            b.iter(|| render::encode(std::hint::black_box(&snap), &ctx, SystemTime::now()))
        });
        g.bench_function("encode_both_plain_with_compat_dcgm", |b| {
            b.iter(|| render::encode(std::hint::black_box(&snap), &with_compat, SystemTime::now()))
        });
        for (name, plain) in [("text", &expo.text), ("openmetrics", &expo.openmetrics)] {
            g.bench_with_input(BenchmarkId::new("gzip", name), plain, |b, plain| {
                b.iter(|| exposition::gzip(plain))
            });
        }
        g.finish();
    }
}

/// What the join step saves a poll (BENCHMARKS.md, "The join step"):
/// before it, each poll copied every GPU's readings out of its slot and
/// then the whole snapshot once more (twice more with pod attribution and
/// `--workloads`); now the readings are shared (`Arc`) and the snapshot is
/// moved. `deep_copy` is the cost of one such copy of the real sampled
/// snapshot; `judge` what the verdicts cost, which moved from the sampler
/// to the join step.
fn bench_join(c: &mut Criterion) {
    for &scenario in SCENARIOS {
        let snap = sample(scenario);
        let mut g = c.benchmark_group(format!("join/{scenario}"));
        g.bench_function("deep_copy", |b| {
            b.iter(|| {
                let mut copy = Snapshot::clone(std::hint::black_box(&snap));
                for gpu in &mut copy.gpus {
                    gpu.readings = gpu.readings.as_deref().map(|r| Arc::new(r.clone()));
                }
                copy
            })
        });
        g.bench_function("shared_copy", |b| {
            b.iter(|| Snapshot::clone(std::hint::black_box(&snap)))
        });
        let mut judged = Snapshot::clone(&snap);
        g.bench_function("judge", |b| {
            b.iter(|| {
                nvml_exporter::join::judge(
                    std::hint::black_box(&mut judged),
                    std::time::Instant::now(),
                    nvml_exporter::verdict::DEFAULT_RESTART_APP_WINDOW,
                );
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = bench_render, bench_join
}
criterion_main!(benches);
