//! A scenario's parse kept from the host's check to the `nvmlInit` that
//! builds the fleet, and the heap of parsing given back after.

use super::load::load;
use super::{Scenario, ScenarioError, BUILTINS};

/// A scenario parsed before `nvmlInit` (when a host selected it, when the
/// library's symbols were set for it), kept for that `nvmlInit` to build
/// its fleet from: each parse of a capture grows a malloc arena that the
/// host's threads then reuse, so three parses of one capture cost the
/// exporter about a MiB of resident memory for good (BENCHMARKS.md,
/// "Replaying a capture").
struct Kept {
    key: String,
    stamp: Option<(u64, std::time::SystemTime)>,
    scenario: std::sync::Arc<Scenario>,
}

static KEPT: std::sync::Mutex<Option<Kept>> = std::sync::Mutex::new(None);

/// What tells a file scenario's parse stale: its length and change time.
/// Built-in scenarios never change.
fn stamp(name_or_path: &str) -> Option<(u64, std::time::SystemTime)> {
    if BUILTINS.iter().any(|(n, _)| *n == name_or_path) {
        return None;
    }
    let meta = std::fs::metadata(name_or_path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// [`load`], reusing the kept parse of the same scenario, unchanged since,
/// and keeping this one for the next caller.
pub fn load_kept(name_or_path: &str) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    kept(name_or_path, true)
}

/// [`load_kept`] for the `nvmlInit` that builds the fleet: the kept parse
/// is handed over, not kept, so it is freed once the fleet is built.
pub fn take_kept(name_or_path: &str) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    kept(name_or_path, false)
}

fn kept(name_or_path: &str, keep: bool) -> Result<std::sync::Arc<Scenario>, ScenarioError> {
    let mut slot = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let stamp = stamp(name_or_path);
    let scenario = match slot.take() {
        Some(k) if k.key == name_or_path && k.stamp == stamp => k.scenario,
        _ => std::sync::Arc::new(load(name_or_path)?),
    };
    if keep {
        *slot = Some(Kept {
            key: name_or_path.to_string(),
            stamp,
            scenario: std::sync::Arc::clone(&scenario),
        });
    }
    Ok(scenario)
}

/// Gives back to the system the heap a scenario's parsing used, once the
/// scenario is dropped: glibc keeps freed small blocks in the host process
/// otherwise, and the exporter's resident memory on a replayed host would
/// carry a capture's element tree (BENCHMARKS.md, "Replaying a capture").
// The one foreign call of the scenario floor.
#[allow(unsafe_code)]
pub fn release_parse_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim only returns free heap pages.
        unsafe {
            malloc_trim(0);
        }
    }
}
