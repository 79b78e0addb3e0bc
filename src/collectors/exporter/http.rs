//! The HTTP server's own counts (`src/http/stats.rs`): scrapes of the
//! telemetry path by status code, under client_golang's promhttp name that
//! node_exporter users' dashboards read, and what was refused before any
//! handler, by reason. Always on. Counted as of the last poll: the
//! exposition is prepared once per poll, so a scrape sees the counts of
//! the scrapes before that poll, not itself.

use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: None,
    metrics: &[
        Metric {
            name: "promhttp_metric_handler_requests_total",
            help: "Total number of scrapes by HTTP status code.",
            kind: Kind::Counter,
            collect: scrapes,
        },
        Metric {
            name: "nvml_exporter_http_refusals_total",
            help: "Requests and connections refused before reaching a handler, by reason (unauthorized, rate_limited, auth_queue_full, too_many_scrapes, connection_limit, tls_handshake, plain_http_on_tls, malformed_request).",
            kind: Kind::Counter,
            collect: refusals,
        },
    ],
};

fn scrapes<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for &(code, n) in scope.snapshot.http.iter().flat_map(|h| &h.scrapes) {
        out.sample().label("code", u32::from(code)).set(n);
    }
}

fn refusals<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for &(why, n) in scope.snapshot.http.iter().flat_map(|h| &h.refusals) {
        out.sample().label("reason", why.as_label()).set(n);
    }
}
