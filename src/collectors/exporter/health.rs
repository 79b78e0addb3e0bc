//! The exporter's own health: build, NVML state, sampling freshness, driver
//! errors and calls stuck in the driver. Always on.

use super::super::unix_seconds;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::Health;

pub static COLLECTOR: Collector = Collector {
    family: None,
    metrics: &[
        Metric {
            name: "nvml_exporter_build_info",
            help: "Version and git revision of this exporter; always 1.",
            kind: Kind::Gauge,
            collect: build_info,
        },
        Metric {
            name: "nvml_exporter_nvml_up",
            help: "1 if NVML is loaded and initialized, 0 while the exporter retries.",
            kind: Kind::Gauge,
            collect: nvml_up,
        },
        Metric {
            name: "nvml_exporter_collect_interval_seconds",
            help: "How often every GPU is meant to be sampled (--collect.interval): readings older than a few of these are late.",
            kind: Kind::Gauge,
            collect: interval,
        },
        Metric {
            name: "nvml_exporter_last_sample_timestamp_seconds",
            help: "Unix time the GPU's last complete sample finished.",
            kind: Kind::Gauge,
            collect: last_sample,
        },
        Metric {
            name: "nvml_exporter_sample_duration_seconds",
            help: "How long the GPU's last complete sample took.",
            kind: Kind::Gauge,
            collect: sample_duration,
        },
        Metric {
            name: "nvml_exporter_nvml_errors_total",
            help: "NVML calls that failed, by family and error (not_supported is not counted).",
            kind: Kind::Counter,
            collect: nvml_errors,
        },
        Metric {
            name: "nvml_exporter_gpu_access_denied",
            help: "1 for a GPU NVML counts but this process may not open (NO_PERMISSION on its handle); present only for such GPUs.",
            kind: Kind::Gauge,
            collect: access_denied,
        },
        Metric {
            name: "nvml_exporter_mig_privileged",
            help: "On a MIG-enabled GPU: 1 if NVML grants this process MIG privileges, 0 if not (then XIDs of MIG instances and whole-GPU memory and process totals are not visible).",
            kind: Kind::Gauge,
            collect: mig_privileged,
        },
        Metric {
            name: "nvml_exporter_state_write_errors_total",
            help: "Writes of the state file (--state.path) that failed since start (each retried); present where a state is kept.",
            kind: Kind::Counter,
            collect: state_write_errors,
        },
        Metric {
            name: "nvml_exporter_nvsentinel_events_total",
            help: "Health events for NVIDIA NVSentinel's platform connector (--nvsentinel.socket) since start, by result: sent (the connector answered), failed (a call that failed or timed out; the event waits and is retried), dropped (left out of the full queue, a newer state of the same GPU kept).",
            kind: Kind::Counter,
            collect: nvsentinel_events,
        },
        Metric {
            name: "nvml_exporter_stuck_call_seconds",
            help: "How long a driver call on the GPU has been blocked, as of the last poll; present only while one is stuck.",
            kind: Kind::Gauge,
            collect: stuck_call,
        },
    ],
};

fn build_info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    out.sample()
        .label("version", scope.build.version)
        .label("revision", scope.build.revision)
        .set(1u64);
}

fn nvml_up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    out.sample().set(scope.snapshot.nvml_up);
}

fn interval<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    let interval = scope.snapshot.interval;
    if !interval.is_zero() {
        out.sample().set(interval.as_secs_f64());
    }
}

fn last_sample<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        if let Some(t) = g.last_sample.and_then(unix_seconds) {
            out.gpu(g).set(t);
        }
    }
}

fn sample_duration<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        if let Some(d) = g.sample_duration {
            out.gpu(g).set(d.as_secs_f64());
        }
    }
}

fn nvml_errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        for e in &g.nvml_errors {
            out.gpu(g)
                .label("family", e.family)
                .label("error", &e.error)
                .set(e.count);
        }
    }
}

fn access_denied<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus().filter(|g| g.health == Health::Denied) {
        out.gpu(g).set(1u64);
    }
}

fn mig_privileged<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        if let Some(p) = g.readings.as_ref().and_then(|r| r.mig_privileged) {
            out.gpu(g).set(p);
        }
    }
}

fn state_write_errors<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(n) = scope.snapshot.state_write_errors {
        out.sample().set(n);
    }
}

fn nvsentinel_events<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(n) = scope.snapshot.nvsentinel {
        for (result, count) in [
            ("sent", n.sent),
            ("failed", n.failed),
            ("dropped", n.dropped),
        ] {
            out.sample().label("result", result).set(count);
        }
    }
}

fn stuck_call<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus() {
        if let Some(s) = &g.stuck_call {
            // A clock stepped back reads as just stuck, not as negative.
            let secs = scope
                .now
                .duration_since(s.since)
                .map_or(0.0, |d| d.as_secs_f64());
            out.gpu(g).label("family", s.family).set(secs);
        }
    }
}
