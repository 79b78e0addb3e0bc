//! What the library is asked to be: the scenario a host selected or the
//! environment names, the driver version to claim instead of the
//! scenario's, the time scale, and where to serve the control socket and
//! write the call log. Every `NVML_SIM_*` variable is read here and
//! nowhere else, so each has one meaning and one error message.

use crate::value::Invalid;
use std::path::PathBuf;
use std::sync::Mutex;

/// The scenario a host process chose through `nvml_sim_select_scenario`
/// (see `host.rs`); it wins over `NVML_SIM_SCENARIO`.
static SELECTED: Mutex<Option<String>> = Mutex::new(None);

/// Records a host's choice (`None`: back to the environment's).
pub fn select_scenario(key: Option<String>) {
    *SELECTED.lock().unwrap_or_else(|e| e.into_inner()) = key;
}

/// The scenario the next first `nvmlInit` builds: the host's selection,
/// else `NVML_SIM_SCENARIO`, else the default built-in.
pub fn scenario_key() -> String {
    SELECTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .or_else(|| std::env::var("NVML_SIM_SCENARIO").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| crate::scenario::DEFAULT.to_string())
}

/// `NVML_SIM_DRIVER`: the driver version to claim instead of the
/// scenario's, if set and not empty.
pub fn driver_override() -> Option<String> {
    std::env::var("NVML_SIM_DRIVER")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// The name errors give the driver override.
pub const DRIVER_VAR: &str = "NVML_SIM_DRIVER";

/// `NVML_SIM_TIME_SCALE`: how many times faster than real time the
/// timeline runs (default 1).
pub fn time_scale() -> Result<f64, Invalid> {
    match std::env::var("NVML_SIM_TIME_SCALE") {
        Err(_) => Ok(1.0),
        Ok(s) => match s.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            _ => Err(Invalid::from(format!(
                "NVML_SIM_TIME_SCALE={s:?} is not a positive number"
            ))),
        },
    }
}

/// `NVML_SIM_CONTROL`: the control socket's path, for the library to serve
/// and for the CLI to talk to.
pub fn control_socket() -> Option<PathBuf> {
    std::env::var_os("NVML_SIM_CONTROL").map(PathBuf::from)
}

/// `NVML_SIM_CALL_LOG`: where the last `nvmlShutdown` writes the call
/// counters.
pub fn call_log() -> Option<PathBuf> {
    std::env::var_os("NVML_SIM_CALL_LOG").map(PathBuf::from)
}

/// `NVML_SIM_LATENCY`: a latency profile, a built-in name (`h200`) or a
/// file path (`latency.rs`); unset or empty, calls cost nothing.
pub fn latency_profile() -> Option<String> {
    std::env::var("NVML_SIM_LATENCY")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// `NVML_SIM_LATENCY_STAT`: which column of the profile a call costs,
/// `median` (default) or `p90` (`latency.rs` checks which).
pub fn latency_stat() -> Option<String> {
    std::env::var("NVML_SIM_LATENCY_STAT")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// `NVML_SIM_LATENCY_SLEEP=1`: each call also waits its cost out for real
/// (default: the cost is only counted).
pub fn latency_sleep() -> bool {
    static SLEEP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SLEEP.get_or_init(|| std::env::var("NVML_SIM_LATENCY_SLEEP").is_ok_and(|v| v.trim() == "1"))
}

/// `NVML_SIM_KMSG`: the file the fleet appends its XIDs to, as kernel log
/// records (`kmsg.rs`).
pub fn kernel_log() -> Option<PathBuf> {
    std::env::var_os(KERNEL_LOG_VAR).map(PathBuf::from)
}

/// The name errors give the kernel log file.
pub const KERNEL_LOG_VAR: &str = "NVML_SIM_KMSG";
