//! Fault application: what each fault of the shared vocabulary (`fault`)
//! does to the running fleet.

use super::gpu::{Hang, Proc, RetiredPage, MIB};
use super::{now_us, Event, Sim};
use crate::fault::{EccLocation, EccType, Fault, ProcUse, RowKind};

impl Sim {
    /// A GPU that registers with an NVSwitch fabric, for the fabric faults.
    fn fabric_gpu(&mut self, gpu: u32) -> Result<&mut super::gpu::Gpu, String> {
        let g = &mut self.gpus[gpu as usize];
        if g.model.nvswitch_fabric() {
            Ok(g)
        } else {
            Err(format!(
                "GPU {gpu} ({}) is not on an NVSwitch fabric",
                g.model.name
            ))
        }
    }

    pub fn apply(&mut self, fault: &Fault) -> Result<String, String> {
        let at = self.scenario_t();
        self.apply_at(fault, at)
    }

    /// Applies a fault as of scenario time `at` (hang durations count from there).
    pub(super) fn apply_at(&mut self, fault: &Fault, at: f64) -> Result<String, String> {
        let t = self.t();
        let n = self.gpus.len();
        if fault.changes_use() {
            // What processes do drives utilization, energy and the sample
            // buffer: settle all three as of now under the old state.
            let now = now_us();
            for g in &mut self.gpus {
                g.advance_energy(t);
                super::usage::advance(g, now);
            }
        }
        if let Some(g) = fault.gpu() {
            if g as usize >= n {
                return Err(format!("no GPU {g}: the fleet has {n} GPUs (0..{})", n - 1));
            }
        }
        match fault {
            Fault::Xid {
                gpu,
                code,
                gpu_instance,
                compute_instance,
                log_only,
                detail,
            } => {
                let g = &self.gpus[*gpu as usize];
                if let Some(gi) = gpu_instance {
                    if g.instance(*gi).is_none() {
                        return Err(format!("GPU {gpu} has no GPU instance {gi}"));
                    }
                }
                let process = g
                    .procs
                    .iter()
                    .find(|p| gpu_instance.is_none_or(|gi| p.mig.is_some_and(|(i, _)| i == gi)))
                    .map(|p| (p.pid, p.name.as_str()));
                crate::kmsg::xid(
                    &g.pci,
                    *code,
                    *gpu_instance,
                    *compute_instance,
                    process,
                    detail.as_deref(),
                );
                if *log_only {
                    return Ok(format!("XID {code} on GPU {gpu} (kernel log only)"));
                }
                self.push_event(Event {
                    gpu: *gpu,
                    event_type: 8,
                    data: *code,
                    gpu_instance: gpu_instance.unwrap_or(u32::MAX),
                    compute_instance: compute_instance.unwrap_or(if gpu_instance.is_some() {
                        0
                    } else {
                        u32::MAX
                    }),
                });
                Ok(format!("XID {code} on GPU {gpu}"))
            }
            Fault::Ecc {
                gpu,
                error_type,
                location,
                count,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.ecc {
                    return Err(format!("GPU {gpu} ({}) has no ECC", g.model.name));
                }
                if !g.ecc_enabled() {
                    return Err(format!("GPU {gpu} has ECC disabled"));
                }
                let et = match error_type {
                    EccType::Corrected => 0,
                    EccType::Uncorrected => 1,
                };
                let loc = location.nvml();
                g.ecc[et][0][loc] += count;
                g.ecc[et][1][loc] += count;
                let event_type = if et == 0 { 1 } else { 2 };
                let _ = EccLocation::Dram;
                self.push_event(Event {
                    gpu: *gpu,
                    event_type,
                    data: 0,
                    gpu_instance: u32::MAX,
                    compute_instance: u32::MAX,
                });
                Ok(format!(
                    "{count} {error_type:?} ECC error(s) at {location:?} on GPU {gpu}"
                ))
            }
            Fault::RetirePage {
                gpu,
                cause,
                pending,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.page_retirement {
                    return Err(format!(
                        "GPU {gpu} ({}) uses row remapping, not page retirement: use remap-row",
                        g.model.name
                    ));
                }
                let address =
                    0x3_2000_0000 + g.retired.len() as u64 * 0x1000 + (*gpu as u64) * 0x10_0000;
                g.retired.push(RetiredPage {
                    address,
                    cause: *cause,
                    timestamp_us: now_us(),
                });
                g.retired_pending |= *pending;
                self.push_event(Event {
                    gpu: *gpu,
                    event_type: 1024,
                    data: 0,
                    gpu_instance: u32::MAX,
                    compute_instance: u32::MAX,
                });
                Ok(format!("page {address:#x} retired on GPU {gpu}"))
            }
            Fault::RemapRow {
                gpu,
                kind,
                pending,
                failure,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.row_remapping {
                    return Err(format!("GPU {gpu} ({}) does not remap rows", g.model.name));
                }
                match kind {
                    RowKind::Correctable => g.remap_corr += 1,
                    RowKind::Uncorrectable => g.remap_unc += 1,
                }
                g.remap_pending |= *pending;
                g.remap_failure |= *failure;
                Ok(format!("row remapped on GPU {gpu}"))
            }
            Fault::RecoveryAction { gpu, value } => {
                let g = &mut self.gpus[*gpu as usize];
                g.recovery_action = Some(crate::value::Val::Is(*value));
                // Set by hand: what the driver asks, pending repairs or not.
                g.reset_pending_at_start = true;
                Ok(format!("GPU {gpu} recovery action {value}"))
            }
            Fault::ClearEcc { gpu } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.ecc {
                    return Err(format!("GPU {gpu} ({}) has no ECC", g.model.name));
                }
                for et in 0..2 {
                    g.ecc[et][0] = [0; 8];
                }
                Ok(format!("GPU {gpu} volatile ECC counters cleared"))
            }
            Fault::Lose { gpu } => {
                self.gpus[*gpu as usize].lost = true;
                Ok(format!("GPU {gpu} fell off the bus"))
            }
            Fault::Hang { gpu, seconds } => {
                self.gpus[*gpu as usize].hang = Some(match seconds {
                    Some(s) => Hang::Until(at + s),
                    None => Hang::Forever,
                });
                Ok(format!("GPU {gpu} hangs"))
            }
            Fault::Release { gpu } => {
                self.gpus[*gpu as usize].hang = None;
                Ok(format!("GPU {gpu} released"))
            }
            Fault::Slow { gpu, ms } => {
                self.gpus[*gpu as usize].slow_ms = *ms;
                Ok(format!("calls on GPU {gpu} take {ms} ms longer"))
            }
            Fault::DriverUnload => {
                self.driver_loaded = false;
                Ok("driver unloaded".into())
            }
            Fault::DriverLoad => {
                if !self.driver_loaded {
                    crate::kmsg::driver_loaded(&crate::driver::current().version);
                    // A driver reload clears volatile ECC counters (NVML
                    // reference, nvmlEccCounterType_t: "Volatile counts are
                    // reset each time the driver loads").
                    for g in &mut self.gpus {
                        for et in 0..2 {
                            g.ecc[et][0] = [0; 8];
                        }
                    }
                }
                self.driver_loaded = true;
                Ok("driver loaded".into())
            }
            Fault::MigReconfigure { gpu, profiles } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.mig_capable() {
                    return Err(format!("GPU {gpu} ({}) does not support MIG", g.model.name));
                }
                if g.mig.is_none() {
                    return Err(format!("GPU {gpu} is not in MIG mode"));
                }
                let loads: Vec<f64> = (0..profiles.len())
                    .map(|i| [60.0, 25.0, 0.0, 45.0][i % 4])
                    .collect();
                g.advance_energy(t);
                g.set_mig_layout(profiles, &loads)?;
                // Destroying an instance ends the processes in it.
                g.procs.retain(|p| p.mig.is_none());
                self.push_event(Event {
                    gpu: *gpu,
                    event_type: 256,
                    data: 0,
                    gpu_instance: u32::MAX,
                    compute_instance: u32::MAX,
                });
                Ok(format!(
                    "GPU {gpu} MIG layout is now {}",
                    profiles.join(" + ")
                ))
            }
            Fault::Throttle { gpu, reasons } => {
                if let Some(r) = reasons.iter().find(|r| !r.throttles()) {
                    return Err(format!("{r:?} is not a throttle reason a fault can set"));
                }
                let mask = reasons.iter().fold(0, |m, r| m | r.bit());
                self.gpus[*gpu as usize].set_throttle(mask, t);
                self.push_event(Event {
                    gpu: *gpu,
                    event_type: 16,
                    data: 0,
                    gpu_instance: u32::MAX,
                    compute_instance: u32::MAX,
                });
                Ok(format!("GPU {gpu} throttle reasons {mask:#x}"))
            }
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
            } => {
                let usage = ProcUse::declared(
                    *sm_percent,
                    *memory_percent,
                    *encoder_percent,
                    *decoder_percent,
                )?;
                let pid = match pid {
                    Some(p) => *p,
                    None => {
                        self.next_pid += 1;
                        self.next_pid
                    }
                };
                let g = &mut self.gpus[*gpu as usize];
                let mig = match (&g.mig, gpu_instance) {
                    (Some(_), Some(gi)) => {
                        let Some(inst) = g.instance(*gi) else {
                            return Err(format!("GPU {gpu} has no GPU instance {gi}"));
                        };
                        let ci = compute_instance.unwrap_or(0);
                        if inst.compute_instance(ci).is_none() {
                            return Err(format!(
                                "GPU instance {gi} on GPU {gpu} has no compute instance {ci}"
                            ));
                        }
                        Some((*gi, ci))
                    }
                    (Some(_), None) => {
                        return Err(format!("GPU {gpu} is in MIG mode: name a gpu_instance"))
                    }
                    (None, Some(_)) => return Err(format!("GPU {gpu} is not in MIG mode")),
                    (None, None) => None,
                };
                g.procs.push(Proc {
                    pid,
                    name: name.clone(),
                    memory: memory_mib * MIB,
                    kind: *kind,
                    mig,
                    usage,
                });
                Ok(format!("process {pid} started on GPU {gpu}"))
            }
            Fault::ProcessStop { pid } => {
                let mut found = false;
                for g in &mut self.gpus {
                    let before = g.procs.len();
                    g.procs.retain(|p| p.pid != *pid);
                    found |= g.procs.len() != before;
                }
                if found {
                    Ok(format!("process {pid} stopped"))
                } else {
                    Err(format!("no process {pid}"))
                }
            }
            Fault::ProcessUse {
                pid,
                sm_percent,
                memory_percent,
                encoder_percent,
                decoder_percent,
            } => {
                let p = self
                    .gpus
                    .iter_mut()
                    .flat_map(|g| g.procs.iter_mut())
                    .find(|p| p.pid == *pid)
                    .ok_or_else(|| format!("no process {pid}"))?;
                let u = p.usage.unwrap_or_default().with(
                    *sm_percent,
                    *memory_percent,
                    *encoder_percent,
                    *decoder_percent,
                )?;
                p.usage = Some(u);
                Ok(format!(
                    "process {pid} uses SM {}%, memory {}%, encoder {}%, decoder {}%",
                    u.sm, u.memory, u.encoder, u.decoder
                ))
            }
            Fault::Load { gpu, percent } => {
                if !(0.0..=100.0).contains(percent) {
                    return Err(format!("load {percent} is outside 0..=100"));
                }
                let g = &mut self.gpus[*gpu as usize];
                g.advance_energy(t);
                // Keep the waveform continuous-ish: only the level changes.
                g.load = *percent;
                // On a MIG-enabled GPU the activity lives in the instances.
                if let Some(m) = &mut g.mig {
                    for i in &mut m.instances {
                        i.load = *percent;
                    }
                }
                g.energy_t = t;
                Ok(format!("GPU {gpu} load {percent}%"))
            }
            Fault::NvlinkState { gpu, link, up } => {
                let g = &mut self.gpus[*gpu as usize];
                if *link >= g.model.nvlinks {
                    return Err(format!(
                        "GPU {gpu} ({}) has {} NVLink links, no link {link}",
                        g.model.name, g.model.nvlinks
                    ));
                }
                if *up {
                    g.nvlink_down &= !(1 << link);
                } else {
                    g.nvlink_down |= 1 << link;
                }
                let state = if *up { "up" } else { "down" };
                Ok(format!("GPU {gpu} NVLink {link} {state}"))
            }
            Fault::NvlinkErrors {
                gpu,
                link,
                counter,
                count,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                let nvlinks = g.model.nvlinks;
                let name = g.model.name.clone();
                let blackwell_links = g.model.nvlink5();
                if nvlinks > 0 && !counter.counted_by(blackwell_links) {
                    let (has, lacks) = if blackwell_links {
                        ("NVLink5", "recovery, recovery-failed, effective, symbol")
                    } else {
                        (
                            "NVLink 1-4",
                            "replay, recovery, crc-flit, crc-data, ecc-data",
                        )
                    };
                    return Err(format!(
                        "GPU {gpu} ({name}) has {has} links, which count {lacks}, not {counter:?} errors"
                    ));
                }
                let Some(added) = g.nvlink_errors_added.get_mut(*link as usize) else {
                    return Err(format!(
                        "GPU {gpu} ({name}) has {nvlinks} NVLink links, no link {link}"
                    ));
                };
                added[counter.index()] += count;
                Ok(format!(
                    "GPU {gpu} NVLink {link}: {count} more {counter:?} errors"
                ))
            }
            Fault::Fabric {
                gpu,
                state,
                registered,
            } => {
                let g = self.fabric_gpu(*gpu)?;
                g.fabric_state = state.nvml();
                // NVML_ERROR_UNKNOWN (999) stands for a failed registration.
                g.fabric_status = if *registered { 0 } else { 999 };
                Ok(format!(
                    "GPU {gpu} fabric {state:?}, registered {registered}"
                ))
            }
            Fault::FabricHealth {
                gpu,
                summary,
                degraded_bandwidth,
                route_recovery,
                route_unhealthy,
                access_timeout_recovery,
                incorrect_configuration,
            } => {
                let g = self.fabric_gpu(*gpu)?;
                let h = &mut g.fabric_health;
                if let Some(s) = summary {
                    h.summary = s.nvml();
                }
                for (i, flag) in [
                    degraded_bandwidth,
                    route_recovery,
                    route_unhealthy,
                    access_timeout_recovery,
                ]
                .into_iter()
                .enumerate()
                {
                    if let Some(f) = flag {
                        h.fields[i] = f.get().map_or(0, |t| if t { 1 } else { 2 });
                    }
                }
                if let Some(c) = incorrect_configuration {
                    h.fields[4] = c.nvml();
                }
                Ok(format!(
                    "GPU {gpu} fabric health summary {}, mask {:#x}",
                    h.summary,
                    h.mask(5)
                ))
            }
            Fault::PowerSmoothing {
                gpu,
                lifetime_percent,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.power_smoothing {
                    return Err(format!(
                        "GPU {gpu} ({}) has no power smoothing",
                        g.model.name
                    ));
                }
                if !(0.0..=100.0).contains(lifetime_percent) {
                    return Err(format!(
                        "lifetime_percent {lifetime_percent} is outside 0..=100"
                    ));
                }
                g.power_smoothing_lifetime = Some(*lifetime_percent);
                Ok(format!(
                    "GPU {gpu} power smoothing circuitry at {lifetime_percent}% of its lifetime"
                ))
            }
            Fault::SramThreshold { gpu, exceeded } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.row_remapping {
                    return Err(format!(
                        "GPU {gpu} ({}) reports no SRAM error status",
                        g.model.name
                    ));
                }
                g.sram_threshold_exceeded = *exceeded;
                Ok(format!("GPU {gpu} SRAM threshold exceeded: {exceeded}"))
            }
            Fault::Pcie {
                gpu,
                width,
                replays,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if let Some(w) = width {
                    if *w == 0 || *w > g.model.pcie_width {
                        return Err(format!(
                            "PCIe width {w} is outside 1..={} for GPU {gpu} ({})",
                            g.model.pcie_width, g.model.name
                        ));
                    }
                    g.pcie_width = *w;
                }
                let Some(count) = g.pcie_replay.as_mut() else {
                    return Err(format!("GPU {gpu} reports no PCIe replay counter"));
                };
                *count = count.saturating_add(*replays);
                Ok(format!("GPU {gpu} PCIe x{}, {count} replays", g.pcie_width))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::EccLocation;

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
                        assert!(g.ecc[et][1][loc] >= g.ecc[et][0][loc]);
                    }
                }
            }
        }
        let g = &sim.gpus[1];
        assert_eq!(g.ecc_total(1, 0), 2, "the reload cleared volatile counts");
        assert_eq!(g.ecc_total(1, 1), 3);
    }
}
