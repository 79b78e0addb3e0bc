//! Collector families: the unit that `--[no-]collector.<family>` switches.
//!
//! The sampler skips the NVML calls of a disabled family and the encoders
//! skip its metrics, so switching one off saves driver time as well as
//! series.

use std::collections::BTreeSet;

macro_rules! families {
    ($($variant:ident => $name:literal, default $on:literal, $help:literal;)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Family { $($variant),+ }

        impl Family {
            pub const ALL: &'static [Family] = &[$(Family::$variant),+];

            /// The name used in `--collector.<name>` and in the
            /// `family` label of `nvml_exporter_nvml_errors_total`.
            pub fn name(self) -> &'static str {
                match self { $(Family::$variant => $name),+ }
            }

            pub fn enabled_by_default(self) -> bool {
                match self { $(Family::$variant => $on),+ }
            }

            pub fn help(self) -> &'static str {
                match self { $(Family::$variant => $help),+ }
            }
        }
    };
}

families! {
    Utilization => "utilization", default true, "Engine utilization (gpu, memory, encoder, decoder, jpeg, ofa).";
    Gpm => "gpm", default true, "GPM activity per GPU and per MIG GPU instance (Hopper and newer).";
    Memory => "memory", default true, "Frame buffer and BAR1 memory.";
    Temperature => "temperature", default true, "Temperatures and their thresholds.";
    Fan => "fan", default true, "Fan speeds.";
    Power => "power", default true, "Power usage, limits and energy.";
    Clocks => "clocks", default true, "Clocks, maximum clocks and performance state.";
    Throttle => "throttle", default true, "Clock event (throttle) reasons and violation time.";
    Pcie => "pcie", default true, "PCIe link, replay errors and traffic counters.";
    Mode => "mode", default true, "Persistence, display and compute mode.";
    Ecc => "ecc", default true, "ECC mode and error counters by location.";
    Retirement => "retirement", default true, "Retired pages, remapped rows and recovery action.";
    Nvlink => "nvlink", default true, "NVLink state, errors and traffic.";
    Xid => "xid", default true, "XID error events.";
    Processes => "processes", default true, "Process counts per GPU.";
    ProcessMemory => "process_memory", default false, "Per-process memory (opt-in: one series per pid).";
    Mig => "mig", default true, "MIG mode, instances and per-instance memory.";
}

/// The set of enabled families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySet(BTreeSet<Family>);

impl FamilySet {
    pub fn defaults() -> Self {
        FamilySet(
            Family::ALL
                .iter()
                .copied()
                .filter(|f| f.enabled_by_default())
                .collect(),
        )
    }

    pub fn all() -> Self {
        FamilySet(Family::ALL.iter().copied().collect())
    }

    pub fn contains(&self, family: Family) -> bool {
        self.0.contains(&family)
    }

    pub fn set(&mut self, family: Family, enabled: bool) {
        if enabled {
            self.0.insert(family);
        } else {
            self.0.remove(&family);
        }
    }
}

impl Default for FamilySet {
    fn default() -> Self {
        Self::defaults()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case() {
        let mut seen = BTreeSet::new();
        for f in Family::ALL {
            assert!(seen.insert(f.name()), "duplicate family name {}", f.name());
            assert!(f.name().chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        }
    }

    #[test]
    fn process_memory_is_opt_in() {
        assert!(!FamilySet::defaults().contains(Family::ProcessMemory));
        assert!(FamilySet::defaults().contains(Family::Ecc));
    }
}
