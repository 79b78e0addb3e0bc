//! The Prometheus text format 0.0.4 and OpenMetrics 1.0, written side by
//! side from metric families and their samples, plain and gzipped: every
//! form a scrape can ask for.
//!
//! Pure: no NVML, no I/O, and no knowledge of which families exist (the
//! walk over the collectors is `crate::render`'s). A scrape then only picks
//! one of the prepared buffers (see `docs/design.md` for why we write the
//! formats ourselves).

mod format;
mod writer;

use std::io::Write as _;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

pub use format::{write_escaped_label_value, write_f64};
pub use writer::Writer;

/// The Prometheus text format, the default answer to a scrape.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// OpenMetrics, for clients whose `Accept` header asks for it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

impl Exposition {
    /// Both formats as a [`Writer`] finished them, each also gzipped. The
    /// buffers are cut to their length first: an exposition lives until
    /// the next poll's (and while scrapes still send it), and `Bytes`
    /// keeps a `Vec`'s whole allocation.
    pub fn new(mut text: Vec<u8>, mut openmetrics: Vec<u8>) -> Self {
        text.shrink_to_fit();
        openmetrics.shrink_to_fit();
        Exposition {
            text_gzip: gzip(&text),
            openmetrics_gzip: gzip(&openmetrics),
            text: Bytes::from(text),
            openmetrics: Bytes::from(openmetrics),
        }
    }
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
    let mut out = enc.finish().expect("gzip into memory");
    out.shrink_to_fit();
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_gzips_what_it_is_given() {
        let e = Exposition::new(b"text\n".to_vec(), b"om\n# EOF\n".to_vec());
        for (plain, gz) in [
            (&e.text, &e.text_gzip),
            (&e.openmetrics, &e.openmetrics_gzip),
        ] {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
                .unwrap();
            assert_eq!(&out[..], &plain[..]);
        }
    }
}
