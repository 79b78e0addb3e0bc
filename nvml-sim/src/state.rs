//! The library's one global state: the simulated fleet, the init reference
//! count, and the condition variable that wakes hung calls and event
//! waiters when the fleet changes. The NVML exports (`ffi`) and the control
//! socket (`control`) both work on it; neither owns it.

use crate::fleet::Sim;
use std::sync::{Condvar, Mutex, MutexGuard};

pub struct State {
    pub refcount: u32,
    pub sim: Option<Sim>,
    /// (scenario key, time scale) the current `sim` was built from.
    pub built_from: Option<(String, f64)>,
    pub control_started: bool,
    /// Why the last selection or `nvmlInit` failed, for
    /// `nvml_sim_last_error`.
    pub last_error: Option<String>,
    /// What the last selected scenario's loader changed or left out
    /// (identifiers made unique, an excerpt, values rounded), one warning
    /// each, for `nvml_sim_last_warnings`.
    pub last_warnings: Vec<String>,
    /// Whether a host process chose the scenario: it reads errors through
    /// `nvml_sim_last_error` and logs them itself, so they are not also
    /// written to stderr (where they would break its log format).
    pub host_reports: bool,
}

impl State {
    /// Keeps `message` for `nvml_sim_last_error`; an independent NVML
    /// client, which has no way to ask, also gets it on stderr.
    pub fn report(&mut self, message: String) {
        if !self.host_reports {
            eprintln!("nvml-sim: {message}");
        }
        self.last_error = Some(message);
    }
}

pub static STATE: Mutex<State> = Mutex::new(State {
    refcount: 0,
    sim: None,
    built_from: None,
    control_started: false,
    last_error: None,
    last_warnings: Vec::new(),
    host_reports: false,
});

/// Wakes hung calls and event waiters when faults change the fleet.
pub static CHANGED: Condvar = Condvar::new();

pub fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}
