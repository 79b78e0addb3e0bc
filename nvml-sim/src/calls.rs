//! Per-function call counters, so benchmarks can report NVML calls per poll.
//! Read through the control socket (`calls`) or written to
//! `NVML_SIM_CALL_LOG` when the last `nvmlShutdown` runs.

use std::collections::BTreeMap;
use std::sync::Mutex;

static CALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The export this thread is in, for per-call answers a scenario pins.
    static CURRENT: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

pub fn record(name: &'static str) {
    CURRENT.with(|c| c.set(name));
    let mut calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    *calls.entry(name).or_insert(0) += 1;
}

/// The NVML function this thread is running (`""` outside one).
pub fn current() -> &'static str {
    CURRENT.with(std::cell::Cell::get)
}

pub fn snapshot() -> BTreeMap<&'static str, u64> {
    CALLS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn reset() {
    CALLS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The counters as a TOML document: one `name = count` line per function.
pub fn to_toml() -> String {
    let mut out = String::new();
    for (name, count) in snapshot() {
        out.push_str(&format!("{name} = {count}\n"));
    }
    out
}

/// The counters as a one-line TOML inline table (control protocol reply).
pub fn to_inline() -> String {
    let body: Vec<String> = snapshot()
        .into_iter()
        .map(|(n, c)| format!("{n} = {c}"))
        .collect();
    format!("{{ {} }}", body.join(", "))
}

/// Writes the counters to `NVML_SIM_CALL_LOG`, if set.
pub fn write_log() {
    if let Some(path) = crate::settings::call_log() {
        if let Err(e) = std::fs::write(&path, to_toml()) {
            eprintln!("nvml-sim: cannot write call log {}: {e}", path.display());
        }
    }
}
