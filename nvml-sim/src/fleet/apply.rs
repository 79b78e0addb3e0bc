//! Fault application: what each fault of the shared vocabulary (`fault`)
//! does to the running fleet. `apply_at` checks what every fault needs and
//! hands each to the file of its group: `xid.rs`, `ecc.rs` (ECC and
//! SRAM), `retirement.rs` (retired pages, remapped rows, recovery action),
//! `device.rs` (lost, hung, slow GPUs and the driver), `mig.rs`,
//! `processes.rs` (processes and load), `nvlink.rs`, `pcie.rs`,
//! `fabric.rs`, `throttle.rs` and `power.rs` (limit and power smoothing).

mod c2c;
mod device;
mod ecc;
mod fabric;
mod mig;
mod nvlink;
mod pcie;
mod power;
mod processes;
mod retirement;
mod throttle;
mod xid;

use super::{now_us, Event, Sim};
use crate::fault::{Fault, ProcUse};
use crate::value::Invalid;

impl Sim {
    pub fn apply(&mut self, fault: &Fault) -> Result<String, Invalid> {
        let at = self.scenario_t();
        self.apply_at(fault, at)
    }

    /// An event that concerns the whole device (no MIG instance).
    fn device_event(&mut self, gpu: u32, event_type: u32) {
        self.push_event(Event {
            gpu,
            event_type: u64::from(event_type),
            data: 0,
            gpu_instance: u32::MAX,
            compute_instance: u32::MAX,
        });
    }

    /// Refuses a fault on a GPU the fleet lacks; before one that changes
    /// what processes do, settles what that drives (utilization, energy,
    /// the sample buffer) as of now under the old state.
    fn prepare(&mut self, fault: &Fault, t: f64) -> Result<(), Invalid> {
        let n = self.gpus.len();
        if let Some(g) = fault.gpu() {
            if g as usize >= n {
                return Err(Invalid::from(format!(
                    "no GPU {g}: the fleet has {n} GPUs (0..{})",
                    n - 1
                )));
            }
        }
        if fault.changes_use() {
            let now = now_us();
            for g in &mut self.gpus {
                g.advance_energy(t);
                super::usage::advance(g, now);
            }
        }
        Ok(())
    }

    /// Applies a fault as of scenario time `at` (hang durations count from there).
    pub(super) fn apply_at(&mut self, fault: &Fault, at: f64) -> Result<String, Invalid> {
        let t = self.t();
        self.prepare(fault, t)?;
        match fault {
            Fault::Xid {
                gpu,
                code,
                gpu_instance,
                compute_instance,
                log_only,
                detail,
            } => self.xid(
                *gpu,
                *code,
                (*gpu_instance, *compute_instance),
                *log_only,
                detail.as_deref(),
            ),
            Fault::Ecc {
                gpu,
                error_type,
                location,
                count,
            } => self.ecc(*gpu, *error_type, *location, *count),
            Fault::RetirePage {
                gpu,
                cause,
                pending,
            } => self.retire_page(*gpu, *cause, *pending),
            Fault::RemapRow {
                gpu,
                kind,
                pending,
                failure,
            } => self.remap_row(*gpu, *kind, *pending, *failure),
            Fault::SramThreshold { gpu, exceeded } => self.sram_threshold(*gpu, *exceeded),
            Fault::RecoveryAction { gpu, value } => Ok(self.recovery_action(*gpu, *value)),
            Fault::ClearEcc { gpu } => self.clear_ecc(*gpu),
            Fault::Lose { gpu } => Ok(self.lose(*gpu)),
            Fault::Hang { gpu, seconds } => Ok(self.hang(*gpu, seconds.map(|s| at + s))),
            Fault::Release { gpu } => Ok(self.release(*gpu)),
            Fault::Slow { gpu, ms } => Ok(self.slow(*gpu, *ms)),
            Fault::DriverUnload => Ok(self.driver_unload()),
            Fault::DriverLoad => Ok(self.driver_load()),
            Fault::MigReconfigure { gpu, profiles } => self.mig_reconfigure(*gpu, profiles, t),
            Fault::MigMode {
                gpu,
                enabled,
                activate,
            } => self.mig_mode(*gpu, *enabled, *activate, t),
            Fault::Throttle { gpu, reasons } => self.throttle(*gpu, reasons, t),
            Fault::PowerSmoothing {
                gpu,
                lifetime_percent,
            } => self.power_smoothing(*gpu, *lifetime_percent),
            Fault::PowerLimit { gpu, watts } => self.power_limit(*gpu, *watts),
            Fault::ProcessStart {
                gpu,
                pid,
                name,
                memory_mib,
                kind,
                gpu_instance,
                compute_instance,
                sm_percent,
                memory_percent,
                encoder_percent,
                decoder_percent,
            } => self.process_start(
                *gpu,
                processes::Start {
                    pid: *pid,
                    name,
                    memory_mib: *memory_mib,
                    kind: *kind,
                    instance: (*gpu_instance, *compute_instance),
                    usage: ProcUse::declared(
                        *sm_percent,
                        *memory_percent,
                        *encoder_percent,
                        *decoder_percent,
                    )?,
                },
            ),
            Fault::ProcessStop { pid } => self.process_stop(*pid),
            Fault::ProcessUse {
                pid,
                sm_percent,
                memory_percent,
                encoder_percent,
                decoder_percent,
            } => self.process_use(
                *pid,
                [
                    *sm_percent,
                    *memory_percent,
                    *encoder_percent,
                    *decoder_percent,
                ],
            ),
            Fault::Load { gpu, percent } => self.load(*gpu, *percent, t),
            Fault::NvlinkState { gpu, link, up } => self.nvlink_state(*gpu, *link, *up),
            Fault::NvlinkErrors {
                gpu,
                link,
                counter,
                count,
            } => self.nvlink_errors(*gpu, *link, *counter, *count),
            Fault::C2cState { gpu, link, up } => self.c2c_state(*gpu, *link, *up),
            Fault::C2cErrors {
                gpu,
                link,
                counter,
                count,
            } => self.c2c_errors(*gpu, *link, *counter, *count),
            Fault::Pcie {
                gpu,
                width,
                replays,
            } => self.pcie(*gpu, *width, *replays),
            Fault::Fabric {
                gpu,
                state,
                registered,
            } => self.fabric(*gpu, *state, *registered),
            Fault::FabricHealth {
                gpu,
                summary,
                degraded_bandwidth,
                route_recovery,
                route_unhealthy,
                access_timeout_recovery,
                incorrect_configuration,
            } => self.fabric_health(
                *gpu,
                *summary,
                [
                    *degraded_bandwidth,
                    *route_recovery,
                    *route_unhealthy,
                    *access_timeout_recovery,
                ],
                *incorrect_configuration,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{EccLocation, EccType};

    #[test]
    fn ecc_aggregate_never_below_volatile() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let mut sim = Sim::new(&s, 1.0);
        for f in [
            Fault::Ecc {
                gpu: 1,
                error_type: EccType::Corrected,
                location: EccLocation::L2,
                count: 3,
            },
            Fault::Ecc {
                gpu: 1,
                error_type: EccType::Uncorrected,
                location: EccLocation::Dram,
                count: 1,
            },
            Fault::DriverUnload,
            Fault::DriverLoad,
            Fault::Ecc {
                gpu: 1,
                error_type: EccType::Uncorrected,
                location: EccLocation::Sram,
                count: 2,
            },
        ] {
            sim.apply(&f).unwrap();
            for g in &sim.gpus {
                for et in 0..2 {
                    for loc in 0..8 {
                        assert!(g.ecc.counts[et][1][loc] >= g.ecc.counts[et][0][loc]);
                    }
                }
            }
        }
        let g = &sim.gpus[1];
        assert_eq!(g.ecc.total(1, 0), 2, "the reload cleared volatile counts");
        assert_eq!(g.ecc.total(1, 1), 3);
    }
}
