//! Content negotiation for the telemetry path: which exposition format
//! (`Accept`) and whether gzip (`Accept-Encoding`).
//!
//! Follows what Prometheus' own client libraries do: the media ranges are
//! taken in order of q-value (header order breaks ties) and the first one we
//! can serve wins; a header that names nothing we serve gets the text format,
//! which every scraper understands.

/// The two formats an exposition is encoded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.
    OpenMetrics,
}

/// One `type/subtype;params` element with its q-value in thousandths.
struct Range<'a> {
    media: &'a str,
    version: Option<&'a str>,
    q: u16,
}

fn ranges(header: &str) -> Vec<Range<'_>> {
    header
        .split(',')
        .filter_map(|part| {
            let mut params = part.split(';');
            let media = params.next()?.trim();
            if media.is_empty() {
                return None;
            }
            let mut version = None;
            let mut q = 1000;
            for p in params {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let v = v.trim().trim_matches('"');
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = parse_q(v)?,
                    "version" => version = Some(v),
                    _ => {}
                }
            }
            Some(Range { media, version, q })
        })
        .collect()
}

/// RFC 9110 qvalue: `0`, `1`, `0.xyz`, `1.000`. A malformed one drops its
/// element rather than the whole header.
fn parse_q(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{frac:0<3}").parse().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Picks the format for an `Accept` header (`None`: header absent).
pub fn format(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut ranges = ranges(accept);
    // Stable: equal q-values keep the client's order.
    ranges.sort_by_key(|r| std::cmp::Reverse(r.q));
    for r in ranges.iter().filter(|r| r.q > 0) {
        let media = r.media.to_ascii_lowercase();
        match media.as_str() {
            // 0.0.1 is what Prometheus up to 2.x calls OpenMetrics 1.0.
            "application/openmetrics-text"
                if matches!(r.version, None | Some("1.0.0") | Some("0.0.1")) =>
            {
                return Format::OpenMetrics
            }
            "text/plain" if matches!(r.version, None | Some("0.0.4")) => return Format::Text,
            "text/*" | "*/*" => return Format::Text,
            _ => {}
        }
    }
    Format::Text
}

/// Whether an `Accept-Encoding` header allows gzip.
pub fn gzip(accept_encoding: Option<&str>) -> bool {
    let Some(header) = accept_encoding else {
        return false;
    };
    let mut gzip_q = None;
    let mut star_q = None;
    for part in header.split(',') {
        let mut params = part.split(';');
        let coding = params.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = Some(1000);
        for p in params {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = parse_q(v.trim());
                }
            }
        }
        let Some(q) = q else { continue };
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip_q = Some(q),
            "*" => star_q = Some(q),
            _ => {}
        }
    }
    gzip_q.or(star_q).is_some_and(|q| q > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_accept_is_text() {
        assert_eq!(format(None), Format::Text);
        assert_eq!(format(Some("")), Format::Text);
        assert_eq!(format(Some("*/*")), Format::Text);
        assert_eq!(format(Some("application/json")), Format::Text);
    }

    #[test]
    fn prometheus_scrape_headers() {
        // Prometheus 2.42 with OpenMetrics negotiation on (the default).
        let p242 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format(Some(p242)), Format::OpenMetrics);
        // Prometheus 2.x older default.
        let old =
            "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format(Some(old)), Format::OpenMetrics);
        // Prometheus 3 asking for the text format first.
        let p3 = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1";
        assert_eq!(format(Some(p3)), Format::Text);
        // Protobuf is not served: fall through to what comes next.
        let proto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
                     encoding=delimited;q=0.9,application/openmetrics-text;version=1.0.0;q=0.8";
        assert_eq!(format(Some(proto)), Format::OpenMetrics);
    }

    #[test]
    fn q_values_and_order() {
        assert_eq!(
            format(Some("text/plain;q=0.2, application/openmetrics-text;q=0.3")),
            Format::OpenMetrics
        );
        assert_eq!(
            format(Some("application/openmetrics-text;q=0.2, text/plain;q=0.3")),
            Format::Text
        );
        assert_eq!(
            format(Some("application/openmetrics-text, text/plain")),
            Format::OpenMetrics
        );
        assert_eq!(
            format(Some("text/plain, application/openmetrics-text")),
            Format::Text
        );
        assert_eq!(
            format(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        assert_eq!(
            format(Some("APPLICATION/OpenMetrics-Text; Q=1.0")),
            Format::OpenMetrics
        );
        // Unknown OpenMetrics versions are not ours to promise.
        assert_eq!(
            format(Some("application/openmetrics-text;version=2.0.0")),
            Format::Text
        );
        // A malformed q drops only that element.
        assert_eq!(
            format(Some("text/plain;q=x, application/openmetrics-text")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn qvalues() {
        assert_eq!(parse_q("1"), Some(1000));
        assert_eq!(parse_q("1.000"), Some(1000));
        assert_eq!(parse_q("0.5"), Some(500));
        assert_eq!(parse_q("0.05"), Some(50));
        assert_eq!(parse_q("0"), Some(0));
        for bad in ["1.5", "2", "0.1234", "-1", "", "0.x", "abc"] {
            assert_eq!(parse_q(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gzip_negotiation() {
        assert!(!gzip(None));
        assert!(!gzip(Some("")));
        assert!(!gzip(Some("identity")));
        assert!(!gzip(Some("br, deflate")));
        assert!(gzip(Some("gzip")));
        assert!(gzip(Some("deflate, GZIP;q=0.5")));
        assert!(gzip(Some("*")));
        assert!(gzip(Some("x-gzip")));
        assert!(!gzip(Some("gzip;q=0")));
        assert!(!gzip(Some("*, gzip;q=0")));
        assert!(!gzip(Some("*;q=0")));
    }
}
