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
}

pub static STATE: Mutex<State> = Mutex::new(State {
    refcount: 0,
    sim: None,
    built_from: None,
    control_started: false,
});

/// Wakes hung calls and event waiters when faults change the fleet.
pub static CHANGED: Condvar = Condvar::new();

pub fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}
