//! Collector families: the unit that `--[no-]collector.<family>` switches.
//!
//! The sampler skips the NVML calls of a disabled family and the encoders
//! skip its metrics, so switching one off saves driver time as well as
//! series.
//!
//! A family named `<parent>.<detail>` (node_exporter style, e.g.
//! `nvlink.per-link`) is a detail switch: off by default, it adds finer
//! series of what its parent family samples (per link, per memory
//! location) on top of the parent's default aggregates. It reads the
//! parent's readings, so it shows nothing while the parent is off. The
//! default set stays within a series budget per GPU (`docs/metrics.md`,
//! "Default set and switches").

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
    Power => "power", default true, "Power usage, limits and energy; module and memory power where NVML reports those scopes; power smoothing circuitry lifetime.";
    Clocks => "clocks", default true, "Clocks, maximum clocks and performance state.";
    Throttle => "throttle", default true, "Clock event (throttle) reasons and violation time.";
    Pcie => "pcie", default true, "PCIe link, replay errors and traffic counters.";
    Mode => "mode", default true, "Persistence, display and compute mode.";
    Ecc => "ecc", default true, "ECC mode and error counters (totals per error type and counter scope).";
    Retirement => "retirement", default true, "Retired pages, remapped rows, row remapper histogram, SRAM error threshold and recovery action.";
    Nvlink => "nvlink", default true, "NVLink links up/down, errors and traffic, summed over each GPU's links.";
    C2c => "c2c", default false, "NVLink-C2C links between a Grace CPU and its GPU (GB200, GB300, GH200): state per link and, R575 on, CRC, replay and back-to-back replay errors (opt-in: 4 series per link, 40 per GPU on GB200).";
    Fabric => "fabric", default true, "NVLink fabric registration state, health and partition (NVSwitch systems, Hopper and newer).";
    Topology => "topology", default false, "GPU topology as nvidia-smi topo -m shows it: per ordered GPU pair the connection (NV# or the PCIe level) and its NVLink count, per GPU its CPU and NUMA affinity; read at start and when an NVLink link changes state (opt-in: 2 series per peer GPU, 15 per GPU on 8 GPUs).";
    Xid => "xid", default true, "XID error events.";
    Verdict => "verdict", default true, "One verdict per GPU (and per MIG instance with its own fault): the action to take now and the signal that decided it.";
    Processes => "processes", default true, "Process counts per GPU.";
    ProcessMemory => "process_memory", default false, "Per-process memory (opt-in: one series per pid).";
    Mig => "mig", default true, "MIG mode, instances and per-instance memory (used, total).";
    WorkloadUsage => "workload_usage", default false, "Measured use per workload: SM and engine time, energy, device time held and held idle (on with --workloads unless switched off).";
    DriverTime => "driver_time", default false, "The exporter's own driver time: NVML calls and the time they took per GPU and family, to see where a poll's driver time goes (opt-in: two series per family that made calls, about 36 per GPU on an H100).";
    GpmAllMetrics => "gpm.all-metrics", default false, "All GPM metrics (adds sm_occupancy, fp64, fp32, fp16, integer, tensor_dfma, tensor_hmma, tensor_imma, nvdec, nvjpg, nvofa, nvenc to graphics, sm, tensor, dram), per GPU and per MIG GPU instance.";
    EccByLocation => "ecc.by-location", default false, "ECC error counters by memory location (L1, L2, DRAM, register file, ...), beside the totals.";
    NvlinkPerLink => "nvlink.per-link", default false, "NVLink state, errors and traffic per link (and bit error rates on NVLink5), beside the per-GPU sums (H100: 120 series per GPU).";
    MigMemoryFree => "mig.memory-free", default false, "Free memory per MIG GPU instance (total minus used).";
    MigBar1 => "mig.bar1", default false, "BAR1 memory per MIG GPU instance (total, used), from the instance's own handle.";
    ClocksApplications => "clocks.applications", default false, "Applications clocks: the SM and memory clocks an operator set (nvidia-smi -ac), read every 12th poll.";
    PowerInstant => "power.instant", default false, "Instantaneous power draw, beside the 1 s average of power.";
    ModeVgpuLicense => "mode.vgpu-license", default false, "Whether the vGPU software licence is held, in a vGPU guest (absent on bare metal, where NVML supports no licensing), read every 12th poll.";
    XidKmsg => "xid.kmsg", default false, "XIDs (and NVSwitch SXIDs) from the kernel log at --path.kmsg as well, since boot: the codes NVML does not deliver (79, 119, 120) and those from before the exporter started; each event counted once. Needs CAP_SYSLOG where kernel.dmesg_restrict is 1; without the log, NVLink5 XIDs (144-150) ask for nothing of their own and the driver's recovery action decides.";
}

/// The set of enabled families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySet(BTreeSet<Family>);

impl Family {
    /// The family a detail switch refines (`nvlink` for `nvlink.per-link`);
    /// `None` for a top-level family.
    pub fn parent(self) -> Option<Family> {
        let (parent, _) = self.name().split_once('.')?;
        Family::from_name(parent)
    }

    /// The family `--collector.<name>` names.
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.iter().copied().find(|f| f.name() == name)
    }
}

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

    pub fn empty() -> Self {
        FamilySet(BTreeSet::new())
    }

    /// Every family on in either set.
    pub fn union(&self, other: &FamilySet) -> FamilySet {
        FamilySet(self.0.union(&other.0).copied().collect())
    }

    /// The families switched on, in `Family::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = Family> + '_ {
        self.0.iter().copied()
    }

    pub fn contains(&self, family: Family) -> bool {
        self.0.contains(&family)
    }

    /// The names of the families switched on, in `Family::ALL` order.
    pub fn enabled_names(&self) -> Vec<&'static str> {
        Family::ALL
            .iter()
            .filter(|f| self.contains(**f))
            .map(|f| f.name())
            .collect()
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
            let top = f.name().split('.').next().unwrap();
            // Digits after the first letter, as in `c2c` (NVLink-C2C).
            assert!(top.starts_with(|c: char| c.is_ascii_lowercase()));
            assert!(top
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        }
    }

    #[test]
    fn detail_switches_refine_a_default_family_and_are_off_by_default() {
        let details: Vec<_> = Family::ALL
            .iter()
            .filter(|f| f.name().contains('.'))
            .collect();
        assert!(details.len() >= 4);
        for f in details {
            let parent = f
                .parent()
                .unwrap_or_else(|| panic!("{}: no parent family", f.name()));
            assert!(parent.parent().is_none(), "{}: one level only", f.name());
            assert!(parent.enabled_by_default(), "{}", f.name());
            assert!(!f.enabled_by_default(), "{} must be opt-in", f.name());
            let detail = f.name().split_once('.').unwrap().1;
            assert!(
                detail
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{}: node_exporter style is lower-case-with-dashes (digits as in `mig.bar1`)",
                f.name()
            );
        }
        assert_eq!(Family::NvlinkPerLink.parent(), Some(Family::Nvlink));
        assert_eq!(Family::Nvlink.parent(), None);
    }

    #[test]
    fn process_memory_is_opt_in() {
        assert!(!FamilySet::defaults().contains(Family::ProcessMemory));
        assert!(FamilySet::defaults().contains(Family::Ecc));
    }
}
