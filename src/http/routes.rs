//! Request routing: a pure function from a request's method, path and
//! headers (plus the latest published exposition) to a response. No I/O and
//! no NVML: a scrape copies prepared bytes.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};
use tokio::sync::Semaphore;

use super::body::Body;
use super::negotiate::{self, Format};
use super::stats::HttpStats;
use super::Published;
use crate::exposition::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use crate::snapshot::HttpRefusal;

const PLAIN: &str = "text/plain; charset=utf-8";

pub struct Router {
    telemetry_path: String,
    latest: Arc<ArcSwapOption<Published>>,
    /// Scrapes by status, and the ones refused over `--web.max-requests`.
    stats: Arc<HttpStats>,
    /// `None`: no limit (`--web.max-requests 0`).
    scrape_limit: Option<Arc<Semaphore>>,
    landing_page: String,
}

impl Router {
    pub fn new(
        telemetry_path: String,
        latest: Arc<ArcSwapOption<Published>>,
        max_requests: usize,
        stats: Arc<HttpStats>,
    ) -> Self {
        let landing_page = landing_page(&telemetry_path);
        Router {
            telemetry_path,
            latest,
            stats,
            scrape_limit: (max_requests > 0).then(|| Arc::new(Semaphore::new(max_requests))),
            landing_page,
        }
    }

    pub fn route(&self, method: &Method, path: &str, headers: &HeaderMap) -> Response<Body> {
        let head = method == Method::HEAD;
        if method != Method::GET && !head {
            let known =
                path == self.telemetry_path || matches!(path, "/" | "/-/healthy" | "/-/ready");
            if !known {
                return text(StatusCode::NOT_FOUND, "Not found.\n", head);
            }
            let mut r = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed: use GET or HEAD.\n",
                false,
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        if path == self.telemetry_path {
            let r = self.metrics(headers, head);
            self.stats.scrape(r.status().as_u16());
            return r;
        }
        match path {
            "/" => {
                let mut r = text(StatusCode::OK, self.landing_page.clone(), head);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                r
            }
            "/-/healthy" => text(StatusCode::OK, "Healthy.\n", head),
            "/-/ready" => match self.latest.load().as_deref() {
                Some(p) if p.ready => text(StatusCode::OK, "Ready.\n", head),
                _ => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Not ready: NVML is not initialized or not every GPU has been sampled yet.\n",
                    head,
                ),
            },
            _ => text(StatusCode::NOT_FOUND, "Not found.\n", head),
        }
    }

    fn metrics(&self, headers: &HeaderMap, head: bool) -> Response<Body> {
        let permit = match &self.scrape_limit {
            None => None,
            Some(limit) => match limit.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    self.stats.refused(HttpRefusal::TooManyScrapes);
                    let mut r = text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Too many concurrent scrapes; retry later.\n",
                        head,
                    );
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return r;
                }
            },
        };
        let Some(published) = self.latest.load_full() else {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "No sample taken yet; retry shortly.\n",
                head,
            );
        };
        let header_str = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let format = negotiate::format(header_str(header::ACCEPT));
        let gzip = negotiate::gzip(header_str(header::ACCEPT_ENCODING));
        let e = &published.exposition;
        let (bytes, content_type) = match (format, gzip) {
            (Format::Text, false) => (&e.text, TEXT_CONTENT_TYPE),
            (Format::Text, true) => (&e.text_gzip, TEXT_CONTENT_TYPE),
            (Format::OpenMetrics, false) => (&e.openmetrics, OPENMETRICS_CONTENT_TYPE),
            (Format::OpenMetrics, true) => (&e.openmetrics_gzip, OPENMETRICS_CONTENT_TYPE),
        };
        let len = bytes.len();
        let body = if head {
            Body::empty()
        } else {
            Body::new(bytes.clone())
        };
        let mut r = Response::new(body.with_permit(permit));
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(
            header::VARY,
            HeaderValue::from_static("Accept, Accept-Encoding"),
        );
        if gzip {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    }
}

/// A short plain-text response; HEAD gets the headers only.
fn text(status: StatusCode, body: impl Into<String>, head: bool) -> Response<Body> {
    let body: String = body.into();
    let len = body.len();
    let mut r = Response::new(if head { Body::empty() } else { Body::new(body) });
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PLAIN));
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

fn landing_page(telemetry_path: &str) -> String {
    let path = html_escape(telemetry_path);
    let version = env!("CARGO_PKG_VERSION");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
         <title>NVML Exporter</title></head>\n<body>\n<h1>NVML Exporter</h1>\n\
         <p>Prometheus exporter for NVIDIA GPUs and MIG instances, version {version}.</p>\n\
         <ul>\n<li><a href=\"{path}\">Metrics</a></li>\n\
         <li><a href=\"/-/healthy\">Health</a></li>\n\
         <li><a href=\"/-/ready\">Readiness</a></li>\n</ul>\n</body>\n</html>\n"
    )
}

fn html_escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Exposition;
    use bytes::Bytes;

    fn router(max: usize) -> (Router, Arc<ArcSwapOption<Published>>) {
        let latest = Arc::new(ArcSwapOption::empty());
        (
            Router::new("/metrics".into(), latest.clone(), max, Arc::default()),
            latest,
        )
    }

    fn publish(latest: &ArcSwapOption<Published>, ready: bool) {
        latest.store(Some(Arc::new(Published {
            exposition: Arc::new(Exposition {
                text: Bytes::from_static(b"text\n"),
                text_gzip: Bytes::from_static(b"text-gz"),
                openmetrics: Bytes::from_static(b"om\n# EOF\n"),
                openmetrics_gzip: Bytes::from_static(b"om-gz"),
            }),
            ready,
        })));
    }

    fn get(r: &Router, path: &str, hdrs: &[(&'static str, &'static str)]) -> Response<Body> {
        let mut h = HeaderMap::new();
        for (k, v) in hdrs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        r.route(&Method::GET, path, &h)
    }

    fn header<'a>(r: &'a Response<Body>, name: &str) -> Option<&'a str> {
        r.headers().get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn metrics_before_first_sample_is_503() {
        let (r, _) = router(4);
        assert_eq!(get(&r, "/metrics", &[]).status(), 503);
        assert_eq!(get(&r, "/-/ready", &[]).status(), 503);
        assert_eq!(get(&r, "/-/healthy", &[]).status(), 200);
    }

    #[test]
    fn negotiated_bodies() {
        let (r, latest) = router(4);
        publish(&latest, true);
        let plain = get(&r, "/metrics", &[]);
        assert_eq!(plain.status(), 200);
        assert_eq!(plain.body().bytes(), "text\n");
        assert_eq!(header(&plain, "content-type"), Some(TEXT_CONTENT_TYPE));
        assert_eq!(header(&plain, "content-encoding"), None);
        assert_eq!(header(&plain, "content-length"), Some("5"));
        assert!(header(&plain, "vary").unwrap().contains("Accept-Encoding"));

        let om = get(
            &r,
            "/metrics",
            &[("accept", "application/openmetrics-text")],
        );
        assert_eq!(om.body().bytes(), "om\n# EOF\n");
        assert_eq!(header(&om, "content-type"), Some(OPENMETRICS_CONTENT_TYPE));

        let gz = get(&r, "/metrics", &[("accept-encoding", "gzip")]);
        assert_eq!(gz.body().bytes(), "text-gz");
        assert_eq!(header(&gz, "content-encoding"), Some("gzip"));

        let omgz = get(
            &r,
            "/metrics",
            &[
                ("accept", "application/openmetrics-text"),
                ("accept-encoding", "gzip"),
            ],
        );
        assert_eq!(omgz.body().bytes(), "om-gz");
        assert_eq!(
            header(&omgz, "content-type"),
            Some(OPENMETRICS_CONTENT_TYPE)
        );
    }

    #[test]
    fn head_has_headers_without_body() {
        let (r, latest) = router(4);
        publish(&latest, true);
        let resp = r.route(&Method::HEAD, "/metrics", &HeaderMap::new());
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "content-length"), Some("5"));
        assert!(resp.body().bytes().is_empty());
    }

    #[test]
    fn readiness_follows_the_snapshot() {
        let (r, latest) = router(4);
        publish(&latest, false);
        assert_eq!(get(&r, "/-/ready", &[]).status(), 503);
        assert_eq!(get(&r, "/metrics", &[]).status(), 200);
        publish(&latest, true);
        assert_eq!(get(&r, "/-/ready", &[]).status(), 200);
    }

    #[test]
    fn methods_and_unknown_paths() {
        let (r, latest) = router(4);
        publish(&latest, true);
        for path in ["/metrics", "/", "/-/healthy", "/-/ready"] {
            let resp = r.route(&Method::POST, path, &HeaderMap::new());
            assert_eq!(resp.status(), 405, "{path}");
            assert_eq!(header(&resp, "allow"), Some("GET, HEAD"));
        }
        assert_eq!(get(&r, "/nope", &[]).status(), 404);
        assert_eq!(get(&r, "/metrics/", &[]).status(), 404);
        assert_eq!(
            r.route(&Method::DELETE, "/nope", &HeaderMap::new())
                .status(),
            404
        );
    }

    #[test]
    fn landing_page_links_the_telemetry_path() {
        let latest = Arc::new(ArcSwapOption::empty());
        let r = Router::new("/gpu/metrics".into(), latest, 0, Arc::default());
        let resp = get(&r, "/", &[]);
        assert_eq!(resp.status(), 200);
        assert_eq!(
            header(&resp, "content-type"),
            Some("text/html; charset=utf-8")
        );
        let body = String::from_utf8(resp.body().bytes().to_vec()).unwrap();
        assert!(body.contains("href=\"/gpu/metrics\""), "{body}");
        assert_eq!(get(&r, "/metrics", &[]).status(), 404);
        assert_eq!(html_escape("/a\"<b>&"), "/a&quot;&lt;b&gt;&amp;");
    }

    #[test]
    fn scrape_limit_holds_until_body_is_dropped() {
        let (r, latest) = router(2);
        publish(&latest, true);
        let a = get(&r, "/metrics", &[]);
        let b = get(&r, "/metrics", &[]);
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
        let c = get(&r, "/metrics", &[]);
        assert_eq!(c.status(), 503);
        assert_eq!(header(&c, "retry-after"), Some("1"));
        // Health endpoints are not limited: probes must get through a flood.
        assert_eq!(get(&r, "/-/healthy", &[]).status(), 200);
        drop(a);
        assert_eq!(get(&r, "/metrics", &[]).status(), 200);
        drop(b);
        let (unlimited, latest) = router(0);
        publish(&latest, true);
        let held: Vec<_> = (0..100).map(|_| get(&unlimited, "/metrics", &[])).collect();
        assert!(held.iter().all(|r| r.status() == 200));
    }
}
