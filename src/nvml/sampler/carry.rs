//! Readings of a family that this poll does not read (a per-group
//! interval, `crate::schedule`), carried forward from the poll that last
//! read it, so that its series stay between two reads.

use crate::family::Family;
use crate::schedule::{Schedule, SCHEDULABLE};
use crate::snapshot::GpuReadings;

/// Copies into `to` the readings of every family `schedule` switches on
/// but `due` leaves out of this poll, from `from`, the last poll's
/// readings. Utilization is not carried onto a MIG-enabled GPU, where
/// NVML reports none.
pub fn carry_skipped(
    schedule: &Schedule,
    due: &crate::family::FamilySet,
    mig_enabled: bool,
    from: &GpuReadings,
    to: &mut GpuReadings,
) {
    for &f in SCHEDULABLE {
        if schedule.families().contains(f) && !due.contains(f) {
            if f == Family::Utilization && mig_enabled {
                continue;
            }
            carry(f, from, to);
            to.carried.push(f);
        }
    }
}

fn carry(family: Family, from: &GpuReadings, to: &mut GpuReadings) {
    match family {
        Family::Utilization => to.utilization.clone_from(&from.utilization),
        Family::Gpm => {
            to.activity.clone_from(&from.activity);
            to.engine_activity.clone_from(&from.engine_activity);
            for gi in &mut to.mig {
                if let Some(old) = from.mig.iter().find(|o| o.gpu_instance == gi.gpu_instance) {
                    gi.activity.clone_from(&old.activity);
                    gi.engine_activity.clone_from(&old.engine_activity);
                }
            }
        }
        Family::Memory => {
            to.memory = from.memory;
            to.bar1 = from.bar1;
        }
        Family::Temperature => {
            to.temperatures.clone_from(&from.temperatures);
            to.temperature_thresholds
                .clone_from(&from.temperature_thresholds);
            to.temperature_margin = from.temperature_margin;
            to.temperature_margin_thresholds
                .clone_from(&from.temperature_margin_thresholds);
        }
        Family::Fan => to.fan_speeds.clone_from(&from.fan_speeds),
        Family::Power => {
            to.power_usage_watts = from.power_usage_watts;
            to.power_instant_watts = from.power_instant_watts;
            to.power_limits.clone_from(&from.power_limits);
            to.energy_joules = from.energy_joules;
            to.module_power_watts = from.module_power_watts;
            to.module_power_limits.clone_from(&from.module_power_limits);
            to.memory_power_watts = from.memory_power_watts;
            to.power_smoothing_lifetime_remaining = from.power_smoothing_lifetime_remaining;
        }
        Family::Clocks => {
            to.performance_state = from.performance_state;
            to.clocks_hertz.clone_from(&from.clocks_hertz);
            to.max_clocks_hertz.clone_from(&from.max_clocks_hertz);
            to.applications_clocks_hertz
                .clone_from(&from.applications_clocks_hertz);
        }
        Family::Throttle => {
            to.throttle_active.clone_from(&from.throttle_active);
            to.throttle_seconds.clone_from(&from.throttle_seconds);
        }
        Family::Pcie => to.pcie = from.pcie,
        Family::Mode => {
            to.persistence_mode = from.persistence_mode;
            to.display_active = from.display_active;
            to.compute_mode = from.compute_mode;
            to.vgpu_license = from.vgpu_license;
        }
        Family::Ecc => {
            to.ecc_mode = from.ecc_mode;
            to.ecc_errors.clone_from(&from.ecc_errors);
        }
        Family::Retirement => {
            to.retired_pages.clone_from(&from.retired_pages);
            to.retired_pages_pending = from.retired_pages_pending;
            to.remapped_rows = from.remapped_rows;
            to.remapper_banks.clone_from(&from.remapper_banks);
            to.sram_threshold_exceeded = from.sram_threshold_exceeded;
            to.recovery_action = from.recovery_action;
        }
        Family::Nvlink => {
            to.nvlinks.clone_from(&from.nvlinks);
            to.nvlink_traffic = from.nvlink_traffic;
        }
        Family::Fabric => to.fabric.clone_from(&from.fabric),
        // Not schedulable: read on every poll.
        _ => {}
    }
}
