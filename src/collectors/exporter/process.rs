//! The exporter process itself, as every Prometheus client library shows
//! it (client_golang's process collector): CPU, memory, start time and
//! file descriptors, so the usual restart and memory alerts work. Always
//! on; read from `/proc/self` in the background (`src/selfstat.rs`).

use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::ProcessStats;

pub static COLLECTOR: Collector = Collector {
    family: None,
    metrics: &[
        Metric {
            name: "process_cpu_seconds_total",
            help: "Total user and system CPU time spent in seconds.",
            kind: Kind::Counter,
            collect: cpu,
        },
        Metric {
            name: "process_resident_memory_bytes",
            help: "Resident memory size in bytes.",
            kind: Kind::Gauge,
            collect: resident,
        },
        Metric {
            name: "process_virtual_memory_bytes",
            help: "Virtual memory size in bytes.",
            kind: Kind::Gauge,
            collect: virtual_memory,
        },
        Metric {
            name: "process_start_time_seconds",
            help: "Start time of the process since unix epoch in seconds.",
            kind: Kind::Gauge,
            collect: start_time,
        },
        Metric {
            name: "process_open_fds",
            help: "Number of open file descriptors.",
            kind: Kind::Gauge,
            collect: open_fds,
        },
        Metric {
            name: "process_max_fds",
            help: "Maximum number of open file descriptors.",
            kind: Kind::Gauge,
            collect: max_fds,
        },
    ],
};

fn stats<'a>(scope: &Scope<'a>) -> Option<&'a ProcessStats> {
    scope.snapshot.process.as_ref()
}

fn cpu<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(s) = stats(scope) {
        out.sample().set(s.cpu_seconds);
    }
}

fn resident<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(v) = stats(scope).and_then(|s| s.resident_memory_bytes) {
        out.sample().set(v);
    }
}

fn virtual_memory<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(v) = stats(scope).and_then(|s| s.virtual_memory_bytes) {
        out.sample().set(v);
    }
}

fn start_time<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(v) = stats(scope).and_then(|s| s.start_time_seconds) {
        out.sample().set(v);
    }
}

fn open_fds<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(v) = stats(scope).and_then(|s| s.open_fds) {
        out.sample().set(v);
    }
}

fn max_fds<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(v) = stats(scope).and_then(|s| s.max_fds) {
        out.sample().set(v);
    }
}
