//! The selection file's state (`--config.file`): whether the last load
//! worked, when one last did, and how many reloads worked and failed, as
//! Prometheus and Alertmanager report their own configuration.

use super::super::unix_seconds;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    // Present only with --config.file.
    family: None,
    metrics: &[
        Metric {
            name: "nvml_exporter_config_last_reload_successful",
            help: "1 if the last load of --config.file succeeded; 0 while a bad file waits to be fixed (the last good selection stays in force).",
            kind: Kind::Gauge,
            collect: last_successful,
        },
        Metric {
            name: "nvml_exporter_config_last_reload_success_timestamp_seconds",
            help: "When --config.file was last loaded successfully.",
            kind: Kind::Gauge,
            collect: last_success,
        },
        Metric {
            name: "nvml_exporter_config_reloads_total",
            help: "Reloads of --config.file since start, by result: success (a new selection in force), failure (each load that failed: a change, a SIGHUP, and the retry of an unchanged bad file once a minute).",
            kind: Kind::Counter,
            collect: reloads,
        },
        Metric {
            name: "nvml_exporter_config_dcgm_fields_not_served",
            help: "DCGM fields the selection in force lists (a dcgm-exporter counters CSV, dcgm.fields) that are not served here: each is logged at load with the reason, and the exporter starts, as dcgm-exporter does.",
            kind: Kind::Gauge,
            collect: dcgm_not_served,
        },
    ],
};

fn last_successful<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(c) = &scope.snapshot.config {
        out.sample().set(c.last_reload_successful);
    }
}

fn last_success<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(t) = scope
        .snapshot
        .config
        .and_then(|c| unix_seconds(c.last_success))
    {
        out.sample().set(t);
    }
}

fn dcgm_not_served<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(c) = &scope.snapshot.config {
        out.sample().set(c.dcgm_not_served);
    }
}

fn reloads<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(c) = &scope.snapshot.config {
        out.sample().label("result", "success").set(c.reloads);
        out.sample().label("result", "failure").set(c.failures);
    }
}
