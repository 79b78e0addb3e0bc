//! The driver the library presents now: the current personality (see
//! `personality`) and the dynamic symbol table that agrees with it.
//!
//! A scenario's `driver = "535.183.01"` selects the personality, and
//! `NVML_SIM_DRIVER` overrides it. Symbols a branch does not export are
//! removed from this library's dynamic symbol table (see [`hide`]), so
//! `dlsym` (libloading, ctypes) fails for them exactly as on that driver.

use crate::personality::{managed, Personality};
use std::sync::Mutex;

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod elf;

/// The personality the library presents now. Set before symbols are
/// resolved (library constructor, `nvml_sim_select_scenario`) and at each
/// first `nvmlInit`.
static CURRENT: Mutex<Option<Personality>> = Mutex::new(None);

pub fn current() -> Personality {
    CURRENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Whether the current personality exports `symbol`: exports the branch
/// lacks answer `NVML_ERROR_FUNCTION_NOT_FOUND` if a client resolved them
/// before the personality changed.
pub fn exported(symbol: &str) -> bool {
    let extra = EXTRA_ABSENT.lock().unwrap_or_else(|e| e.into_inner());
    if extra.iter().any(|m| m == symbol) {
        return false;
    }
    drop(extra);
    if !managed().iter().any(|m| m == symbol) {
        return true;
    }
    current().exports(symbol)
}

/// Exports a scenario says its driver lacked beyond its branch's
/// (`absent_functions`, as `nvml-sim capture` records them), and every
/// name hidden that way before (to restore when the scenario changes).
static EXTRA_ABSENT: Mutex<Vec<String>> = Mutex::new(Vec::new());
static EVER_HIDDEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Hides the scenario's extra absent exports, restoring earlier ones.
pub fn apply_absent(extra: &[String]) {
    let mut ever = EVER_HIDDEN.lock().unwrap_or_else(|e| e.into_inner());
    for name in ever.iter().filter(|n| !extra.contains(n)) {
        if !managed().contains(name) {
            hide(name, false);
        }
    }
    for name in extra {
        hide(name, true);
        if !ever.contains(name) {
            ever.push(name.clone());
        }
    }
    *EXTRA_ABSENT.lock().unwrap_or_else(|e| e.into_inner()) = extra.to_vec();
}

/// Whether the current personality answers `NVML_ERROR_DEPRECATED` to
/// `symbol` (drivers.toml `deprecated`); a call no branch deprecates does
/// not look.
pub fn deprecated(symbol: &str) -> bool {
    if !crate::personality::ever_deprecated()
        .iter()
        .any(|d| d == symbol)
    {
        return false;
    }
    CURRENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|p| p.deprecates(symbol))
}

/// The personality for a scenario: `NVML_SIM_DRIVER` if set, else the
/// scenario's `driver`, else the default. Errors name the bad setting.
pub fn resolve(scenario: &crate::scenario::Scenario) -> Result<Personality, crate::value::Invalid> {
    if let Some(env) = crate::settings::driver_override() {
        return Personality::parse(&env)
            .map_err(|e| format!("{}: {e}", crate::settings::DRIVER_VAR).into());
    }
    match &scenario.driver {
        Some(d) => Personality::parse(d),
        None => Ok(Personality::default()),
    }
}

/// Makes `p` the current personality and the dynamic symbol table agree
/// with it.
pub fn apply(p: Personality) {
    for name in managed() {
        hide(name, !p.exports(name));
    }
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
}

/// Best effort before any `nvmlInit`: the scenario the environment or a
/// host selected, with errors left for `nvmlInit` to report.
pub fn apply_early() {
    let scenario = crate::scenario::load_kept(&crate::settings::scenario_key()).ok();
    let p = scenario
        .as_ref()
        .and_then(|s| resolve(s).ok())
        .unwrap_or_default();
    apply(p);
    apply_absent(scenario.as_ref().map_or(&[], |s| &s.absent_functions));
}

/// Runs when the dynamic loader maps the library, before `dlopen` returns:
/// nvml-wrapper resolves every symbol right after, before its `nvmlInit`.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(apply_early);
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// Removes `name` from (or restores it to) this library's dynamic symbol
/// table. glibc's lookup skips a defined symbol whose value is 0, so
/// zeroing `st_value` in the mapped `.dynsym` makes `dlsym` fail for it,
/// as for a symbol the library never had; the original value is kept to
/// restore it.
fn hide(name: &str, hidden: bool) {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    elf::set_hidden(name, hidden);
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let _ = (name, hidden);
}
