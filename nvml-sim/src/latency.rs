//! What each call costs a real driver, simulated: a latency profile
//! (`profiles/*.tsv`, format in the README, "Latency profiles") gives every
//! function its cost, and a field batch a cost that depends on its fields.
//! Each call's cost is added to that function's simulated driver time
//! (read through the control socket, `driver-time`, or written beside the
//! call counters to `NVML_SIM_CALL_LOG`), and slept for real only when
//! `NVML_SIM_LATENCY_SLEEP=1`: a benchmark can count the driver's time
//! without waiting it out, or wait it out to see what a caller feels.
//!
//! Off unless `NVML_SIM_LATENCY` names a profile, so tests stay fast.

use crate::value::Invalid;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The built-in profiles, by the name `NVML_SIM_LATENCY` may give instead
/// of a path.
const BUILT_IN: &[(&str, &str)] = &[("h200", include_str!("../profiles/h200.tsv"))];

/// The costs of one driver, in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    calls: HashMap<String, f64>,
    default: f64,
    field_base: f64,
    fields: HashMap<u32, f64>,
    field_default: f64,
}

/// Which column of the profile gives the cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    Median,
    P90,
}

impl Profile {
    /// Parses a profile; `stat` picks the column. The error names the line.
    pub fn parse(text: &str, stat: Stat) -> Result<Profile, Invalid> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let (_, header) = lines.next().ok_or("the profile has no header line")?;
        let cols: Vec<&str> = header.split('\t').map(str::trim).collect();
        let col = |name: &str| cols.iter().position(|c| *c == name);
        let fcol = col("function").ok_or("the header has no `function` column")?;
        let want = match stat {
            Stat::Median => "median_us",
            Stat::P90 => "p90_us",
        };
        let vcol = col(want).ok_or_else(|| format!("the header has no `{want}` column"))?;
        let mut p = Profile {
            calls: HashMap::new(),
            default: 0.0,
            field_base: 0.0,
            fields: HashMap::new(),
            field_default: 0.0,
        };
        for (n, line) in lines {
            let cells: Vec<&str> = line.split('\t').map(str::trim).collect();
            let name = cells.get(fcol).copied().unwrap_or("");
            let raw = cells.get(vcol).copied().unwrap_or("");
            let us: f64 = raw
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "line {}: {want} {raw:?} is not a number of microseconds",
                        n + 1
                    )
                })?;
            match name {
                "" => return Err(Invalid::from(format!("line {}: no function name", n + 1))),
                "default" => p.default = us,
                "field:base" => p.field_base = us,
                "field:default" => p.field_default = us,
                _ => match name.strip_prefix("field:") {
                    Some(id) => {
                        let id: u32 = id
                            .parse()
                            .map_err(|_| format!("line {}: {name:?} is not field:<id>", n + 1))?;
                        p.fields.insert(id, us);
                    }
                    None => {
                        p.calls.insert(name.to_string(), us);
                    }
                },
            }
        }
        Ok(p)
    }

    /// What one call of `function` costs (a field batch: see [`Self::batch`]).
    pub fn call(&self, function: &str) -> f64 {
        self.calls.get(function).copied().unwrap_or(self.default)
    }

    /// What one `nvmlDeviceGetFieldValues` of these field ids costs.
    pub fn batch(&self, ids: impl IntoIterator<Item = u32>) -> f64 {
        self.field_base
            + ids
                .into_iter()
                .map(|id| self.fields.get(&id).copied().unwrap_or(self.field_default))
                .sum::<f64>()
    }
}

/// `NVML_SIM_LATENCY` (a built-in name or a path) and
/// `NVML_SIM_LATENCY_STAT` (`median`, the default, or `p90`), read once. A
/// profile that cannot be read is reported on stderr and no latency is
/// simulated: the driver still answers.
fn active() -> Option<&'static Profile> {
    static PROFILE: OnceLock<Option<Profile>> = OnceLock::new();
    PROFILE
        .get_or_init(|| match load() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("nvml-sim: {e}; simulating no latency");
                None
            }
        })
        .as_ref()
}

fn load() -> Result<Option<Profile>, Invalid> {
    let Some(spec) = crate::settings::latency_profile() else {
        return Ok(None);
    };
    let stat = match crate::settings::latency_stat().as_deref() {
        None | Some("median") => Stat::Median,
        Some("p90") => Stat::P90,
        Some(s) => {
            return Err(Invalid::from(format!(
                "NVML_SIM_LATENCY_STAT={s:?} is neither median nor p90"
            )))
        }
    };
    let text = match BUILT_IN.iter().find(|(name, _)| *name == spec) {
        Some((_, text)) => (*text).to_string(),
        None => std::fs::read_to_string(&spec).map_err(|e| {
            format!(
                "NVML_SIM_LATENCY={spec:?}: neither a built-in profile ({}) nor a readable file: {e}",
                BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            )
        })?,
    };
    Profile::parse(&text, stat)
        .map(Some)
        .map_err(|e| format!("NVML_SIM_LATENCY={spec:?}: {e}").into())
}

/// A built-in profile by name (tests, `nvml-sim` tools).
pub fn built_in(name: &str, stat: Stat) -> Option<Result<Profile, Invalid>> {
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| Profile::parse(text, stat))
}

/// Simulated driver time per function, microseconds.
static TIME: Mutex<BTreeMap<&'static str, f64>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The cost of the field batch this thread's call is answering, set by
    /// `nvmlDeviceGetFieldValues` before the call is charged.
    static BATCH: Cell<Option<f64>> = const { Cell::new(None) };
}

/// Prices the field batch being answered (no-op without a profile).
pub fn batch(ids: impl IntoIterator<Item = u32>) {
    if let Some(p) = active() {
        let cost = p.batch(ids);
        BATCH.with(|b| b.set(Some(cost)));
    }
}

/// Charges one finished call of `function` its cost; sleeps it when asked.
pub fn charge(function: &'static str) {
    let pending = BATCH.with(Cell::take);
    let Some(p) = active() else { return };
    let us = pending.unwrap_or_else(|| p.call(function));
    *TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(function)
        .or_insert(0.0) += us;
    if crate::settings::latency_sleep() && us > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(us / 1e6));
    }
}

pub fn snapshot() -> BTreeMap<&'static str, f64> {
    TIME.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn reset() {
    TIME.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The simulated times as a one-line TOML inline table of microseconds
/// (control protocol reply).
pub fn to_inline() -> String {
    let body: Vec<String> = snapshot()
        .into_iter()
        .map(|(n, us)| format!("{n} = {us:.1}"))
        .collect();
    format!("{{ {} }}", body.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_costs_its_base_plus_each_field() {
        let p = Profile::parse(
            "function\tmedian_us\tp90_us\nnvmlDeviceGetPowerUsage\t2.5\t9\ndefault\t1\t1\n\
             field:base\t20\t20\nfield:default\t100\t200\nfield:3\t0.5\t0.5\n",
            Stat::Median,
        )
        .unwrap();
        assert_eq!(p.call("nvmlDeviceGetPowerUsage"), 2.5);
        assert_eq!(p.call("nvmlDeviceGetName"), 1.0);
        assert_eq!(p.batch([3, 3, 7]), 20.0 + 0.5 + 0.5 + 100.0);
        let p90 = Profile::parse(
            "function\tmedian_us\tp90_us\nnvmlDeviceGetPowerUsage\t2.5\t9\n",
            Stat::P90,
        )
        .unwrap();
        assert_eq!(p90.call("nvmlDeviceGetPowerUsage"), 9.0);
    }

    #[test]
    fn a_bad_profile_names_its_line() {
        let e =
            Profile::parse("function\tmedian_us\nnvmlInit_v2\tfast\n", Stat::Median).unwrap_err();
        assert!(e.contains("line 2") && e.contains("fast"), "{e}");
        let e = Profile::parse("fn\tmedian_us\n", Stat::Median).unwrap_err();
        assert!(e.contains("`function`"), "{e}");
        let e = Profile::parse("function\tmedian_us\nfield:x\t1\n", Stat::Median).unwrap_err();
        assert!(e.contains("field:<id>"), "{e}");
    }

    /// The built-in H200 profile is the measured table plus the field
    /// model: its calls cost what the H200 answered in, and the model
    /// reproduces the batches that run timed (profiles/h200.tsv says how).
    #[test]
    fn the_h200_profile_reproduces_the_measured_batches() {
        let p = built_in("h200", Stat::Median).unwrap().unwrap();
        assert_eq!(p.call("nvmlDeviceGetEnforcedPowerLimit"), 2043.4);
        assert_eq!(p.call("nvmlDeviceGetMaxClockInfo"), 1360.7);
        let near = |a: f64, b: f64| (a - b).abs() / b < 0.05;
        assert!(near(p.batch([82, 91, 92, 230]), 24.6));
        let pinned = [
            75, 76, 74, 83, 197, 198, 251, 252, 253, 258, 263, 269, 270, 271,
        ];
        let scoped = (185..=192).flat_map(|f| [f, f, f]);
        assert!(near(p.batch(pinned.into_iter().chain(scoped)), 2985.2));
        // The thresholds as nvmlDeviceGetTemperatureThreshold costs (the
        // run's 8911 us was the first batch, with a first call's cost).
        assert!(near(p.batch([193, 194, 195, 196]), 24.6 + 4.0 * 706.4));
    }
}
