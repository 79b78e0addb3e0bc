//! Encodes a [`Snapshot`] once per poll into every form a scrape can ask
//! for: Prometheus text 0.0.4 and OpenMetrics 1.0, plain and gzipped.
//!
//! Pure: no NVML, no I/O. A scrape then only picks one of the prepared
//! buffers (see `docs/design.md` for why we write the formats ourselves).

mod format;
pub mod sample;
mod writer;

use std::io::Write as _;
use std::time::SystemTime;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::collectors::{Scope, COLLECTORS};
use crate::family::FamilySet;
use crate::snapshot::Snapshot;

pub use format::{write_escaped_label_value, write_f64};
pub use sample::{LabelValue, SampleBuilder, SampleSink, Value};
use writer::Writer;

/// The Prometheus text format, the default answer to a scrape.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// OpenMetrics, for clients whose `Accept` header asks for it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `nvml_exporter_build_info` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

impl BuildInfo {
    /// This build: the crate version, and the git revision when the build
    /// environment passed one in `NVML_EXPORTER_REVISION`.
    pub const fn current() -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: match option_env!("NVML_EXPORTER_REVISION") {
                Some(r) => r,
                None => "unknown",
            },
        }
    }
}

impl Default for BuildInfo {
    fn default() -> Self {
        Self::current()
    }
}

#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    /// Families switched off here are left out of the output.
    pub families: FamilySet,
    pub build: BuildInfo,
}

/// Everything a scrape can be answered with, encoded once per poll.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// [`TEXT_CONTENT_TYPE`]
    pub text: Bytes,
    pub text_gzip: Bytes,
    /// [`OPENMETRICS_CONTENT_TYPE`]
    pub openmetrics: Bytes,
    pub openmetrics_gzip: Bytes,
}

/// Encodes `snapshot` in both formats, plain and gzipped.
///
/// Reads the clock once, for `nvml_exporter_stuck_call_seconds` (how long a
/// blocked driver call has been running as of this render).
pub fn render(snapshot: &Snapshot, ctx: &RenderContext) -> Exposition {
    render_at(snapshot, ctx, SystemTime::now())
}

/// [`render`] with the time given: deterministic, for tests.
pub fn render_at(snapshot: &Snapshot, ctx: &RenderContext, now: SystemTime) -> Exposition {
    let (text, openmetrics) = encode(snapshot, ctx, now);
    Exposition {
        text_gzip: gzip(&text),
        openmetrics_gzip: gzip(&openmetrics),
        text: Bytes::from(text),
        openmetrics: Bytes::from(openmetrics),
    }
}

/// Encodes without compressing: `(text 0.0.4, OpenMetrics)`.
pub fn encode(snapshot: &Snapshot, ctx: &RenderContext, now: SystemTime) -> (Vec<u8>, Vec<u8>) {
    let scope = Scope {
        snapshot,
        build: &ctx.build,
        now,
    };
    // About 45 KB per H100 with every family on (ECC by location and 18
    // NVLinks dominate): sized so that a full fleet rarely regrows.
    let mut w = Writer::with_capacity(4096 + snapshot.gpus.len() * 48 * 1024);
    let mut sink = SampleSink::new();
    for collector in COLLECTORS {
        if !collector.family.map_or(true, |f| ctx.families.contains(f)) {
            continue;
        }
        for metric in collector.metrics {
            sink.clear();
            (metric.collect)(&scope, &mut sink);
            w.family(metric, &mut sink);
        }
    }
    w.finish();
    (w.text, w.openmetrics)
}

/// Level 1 ("fast"). Measured on the 16-GPU x 7-MIG fixture with every
/// family on (723 KB of text): level 1 gives 38.6 KB (18.7x) about six
/// times faster than level 6, which gives 27.3 KB (26.5x); level 9 gains
/// nothing more. Compression runs every poll while the bytes saved per
/// scrape are a few KB, so the fast level wins.
pub const GZIP_LEVEL: Compression = Compression::fast();

/// Gzips `data` once, at render time, so that a scrape asking for gzip
/// costs a copy like any other.
pub fn gzip(data: &[u8]) -> Bytes {
    gzip_with(data, GZIP_LEVEL)
}

pub fn gzip_with(data: &[u8], level: Compression) -> Bytes {
    let mut enc = GzEncoder::new(Vec::with_capacity(data.len() / 4 + 64), level);
    // Compressing into a Vec has no I/O that could fail.
    enc.write_all(data).expect("gzip into memory");
    Bytes::from(enc.finish().expect("gzip into memory"))
}
