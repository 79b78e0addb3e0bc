//! `nvml-exporter --config.check FILE [--simulate SCENARIO|CAPTURE]`:
//! what a selection file costs before it ships. The file is validated as
//! the exporter would load it (an error names the line and exits 1), then
//! the GPUs of this host, or of the simulated fleet or replayed capture,
//! are sampled a few times and rendered twice, with the flags alone and
//! with the file, and the series of each are counted per GPU (those with
//! a `gpu` label, MIG instances included) and per node (the rest), as
//! `tests/e2e/budget.rs` counts them.
//!
//! The sampling itself is the app's (`crate::app`), the one place besides
//! the sampler that starts NVML; this module is the selection side: the
//! settings both the check and the serving exporter derive from the flags,
//! the counting and the report.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cli::{Config, Library};
use crate::metric::BuildInfo;
use crate::render::{self, RenderContext};
use crate::selection::{self, ConfigError, Runtime, RuntimeSettings};
use crate::snapshot::Snapshot;

/// Why a check gave no report.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--config.check: {0}")]
    Sampling(String),
}

/// What the selection is resolved with, from the flags; `path` is the
/// file to follow (`--config.file`) or check.
pub fn runtime_settings(config: &Config) -> RuntimeSettings {
    RuntimeSettings {
        path: config.config_file.clone(),
        base: selection::Base {
            families: config.families.clone(),
            interval: config.collect_interval,
            compat: config.compat.as_ref().map(|c| c.generation),
        },
        compat_only: config.compat.as_ref().is_some_and(|c| c.only),
        hostname: config
            .compat
            .as_ref()
            .and_then(|c| dcgm_hostname(c.hostname.as_deref())),
        workloads: config.workloads.is_some(),
        build: BuildInfo::current(),
        poll_interval: crate::reload::DEFAULT_POLL_INTERVAL,
    }
}

/// The DCGM host label's value: the flag's, none when it is empty, else
/// the kernel's host name (what dcgm-exporter reports outside Kubernetes;
/// the chart passes the node name).
fn dcgm_hostname(flag: Option<&str>) -> Option<String> {
    match flag {
        Some("") => None,
        Some(name) => Some(name.to_string()),
        None => match std::fs::read_to_string("/proc/sys/kernel/hostname") {
            Ok(name) if !name.trim().is_empty() => Some(name.trim().to_string()),
            _ => {
                tracing::warn!(
                    "cannot read the host name: the DCGM series carry no host label (set --compat.dcgm.hostname)"
                );
                None
            }
        },
    }
}

/// Series of one render: per GPU index, and node-level.
#[derive(Debug, Default, PartialEq, Eq)]
struct Count {
    per_gpu: BTreeMap<String, usize>,
    node: usize,
    /// Per metric name, to show where the series are.
    per_metric: BTreeMap<String, usize>,
}

impl Count {
    fn of(text: &str) -> Count {
        let mut c = Count::default();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (name, labels) = line
                .split_once('{')
                .unwrap_or((line.split(' ').next().unwrap_or(line), ""));
            *c.per_metric.entry(name.to_string()).or_default() += 1;
            let gpu = labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix("gpu=\""))
                .map(|v| v.trim_end_matches('"').to_string());
            match gpu {
                Some(g) => *c.per_gpu.entry(g).or_default() += 1,
                None => c.node += 1,
            }
        }
        c
    }

    fn mean(&self) -> f64 {
        if self.per_gpu.is_empty() {
            return 0.0;
        }
        self.per_gpu.values().sum::<usize>() as f64 / self.per_gpu.len() as f64
    }
}

/// Checks `path` and returns the report; `Ok` when the file is valid,
/// whatever it costs. `sample` reads the GPUs for every family of the
/// families it is given, as the exporter would, and returns a snapshot
/// taken once every GPU has been read a few times.
pub fn check(
    config: &Config,
    path: &Path,
    sample: impl FnOnce(crate::family::FamilySet, std::time::Duration) -> Result<Snapshot, String>,
) -> Result<String, CheckError> {
    let mut settings = runtime_settings(config);
    settings.path = Some(path.to_path_buf());
    let with_file = Runtime::new_unwatched(settings.clone())?;
    settings.path = None;
    let flags_alone = Runtime::new_unwatched(settings)?;
    // Read what the flags alone serve too, for the comparison.
    let sampled = with_file.sampled().union(&flags_alone.sampled());
    let snapshot = sample(sampled, with_file.tick()).map_err(CheckError::Sampling)?;
    let before = Count::of(&encode(&snapshot, &flags_alone.render_context().load()));
    let after = Count::of(&encode(&snapshot, &with_file.render_context().load()));
    Ok(report(path, config, &snapshot, &with_file, &before, &after))
}

fn encode(snapshot: &Snapshot, ctx: &RenderContext) -> String {
    let (text, _) = render::encode(snapshot, ctx, std::time::SystemTime::now());
    String::from_utf8_lossy(&text).into_owned()
}

fn report(
    path: &Path,
    config: &Config,
    snapshot: &Snapshot,
    runtime: &Runtime,
    before: &Count,
    after: &Count,
) -> String {
    let sel = runtime.selection();
    let fleet = match &config.library {
        Library::Simulated { scenario } => format!("simulated {scenario}"),
        _ => "this host".to_string(),
    };
    let mut out = format!(
        "{}: valid\nfleet: {fleet}, {} GPUs{}\n\n",
        path.display(),
        snapshot.gpus.len(),
        if snapshot.ready {
            ""
        } else {
            " (not every GPU answered)"
        }
    );
    out += &format!("{:<28}{:>14}{:>16}\n", "", "flags alone", "with the file");
    out += &format!(
        "{:<28}{:>14.1}{:>16.1}\n",
        "series per GPU (mean)",
        before.mean(),
        after.mean()
    );
    out += &format!(
        "{:<28}{:>14}{:>16}\n",
        "series per node", before.node, after.node
    );
    out += &format!(
        "{:<28}{:>14}{:>16}\n",
        "series in all",
        before.per_gpu.values().sum::<usize>() + before.node,
        after.per_gpu.values().sum::<usize>() + after.node
    );
    out += "\nper GPU:\n";
    for (gpu, n) in &after.per_gpu {
        out += &format!(
            "  gpu {gpu:<4}{:>10}{:>16}\n",
            before.per_gpu.get(gpu).copied().unwrap_or(0),
            n
        );
    }
    let ctx = runtime.render_context().load();
    out += &format!(
        "\nfamilies served: {}\n",
        ctx.families.enabled_names().join(", ")
    );
    if !sel.intervals.is_empty() {
        out += &format!(
            "intervals: {} (workers poll every {}ms)\n",
            sel.intervals
                .iter()
                .map(|(f, d)| format!("{} {}ms", f.name(), d.as_millis()))
                .collect::<Vec<_>>()
                .join(", "),
            runtime.tick().as_millis()
        );
    }
    if let Some(c) = &ctx.compat {
        out += &format!(
            "DCGM fields served ({}): {}\n",
            c.generation.as_str(),
            c.fields
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for w in &sel.warnings {
        out += &format!("note: {w}\n");
    }
    out += "\nseries by metric, with the file (most first):\n";
    let mut by: Vec<_> = after.per_metric.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (name, n) in by {
        out += &format!("  {n:>6}  {name}\n");
    }
    out += "\nNot counted: the exporter's process_* and promhttp_* self-metrics (about a dozen per node), \
            and the series of pods and workloads (--kubernetes, --workloads: one per holder of a device); \
            they come on top of these.\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_counted_per_gpu_label_and_per_node() {
        let text = "# HELP x y\n# TYPE x gauge\n\
            nvidia_gpu_up{gpu=\"0\",uuid=\"a\"} 1\n\
            nvidia_gpu_up{gpu=\"1\",uuid=\"b\"} 1\n\
            DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"b\",GPU_I_ID=\"1\"} 3\n\
            nvml_exporter_nvml_up 1\n\
            nvidia_gpu_driver_info{driver_version=\"580\"} 1\n";
        let c = Count::of(text);
        assert_eq!(c.per_gpu.get("0"), Some(&1));
        assert_eq!(c.per_gpu.get("1"), Some(&2));
        assert_eq!(c.node, 2);
        assert_eq!(c.mean(), 1.5);
        assert_eq!(c.per_metric.get("nvidia_gpu_up"), Some(&2));
    }
}
