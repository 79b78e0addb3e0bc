//! One simulated GPU's state: identity, MIG layout, processes, memory and
//! the counters faults move (ECC, retired pages, remapped rows, NVLink,
//! violation and clock-event time).

use crate::fault::{NvlinkCounter, ProcKind, ProcUse, Reason, RetireCause};
use crate::identity::{self, PciAddr};
use crate::model::{self, FabricHealth, MigProfile, Model};
use crate::scenario::{CiSpec, Counters, GpuSpec, MigSpec, Readings, Settings, SramCounts};
use crate::value::Val;
use std::sync::Arc;

pub const MIB: u64 = 1024 * 1024;
/// `NVML_VALUE_NOT_AVAILABLE` as a process's memory (nvml.h: under WDDM).
pub const NOT_AVAILABLE: u64 = u64::MAX;
/// What a freshly created, empty MIG instance shows as used (nvidia-smi
/// prints about 13 MiB for an idle 1g.10gb).
const MIG_OVERHEAD_MIB: u64 = 13;
/// Context and framebuffer the driver keeps on a GPU with nothing running.
const GPU_OVERHEAD_MIB: u64 = 4;

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub name: String,
    /// Bytes, or [`NOT_AVAILABLE`].
    pub memory: u64,
    pub kind: ProcKind,
    /// (gpu instance id, compute instance id) on MIG-enabled GPUs.
    pub mig: Option<(u32, u32)>,
    /// What it does with the GPU, when declared (see `usage.rs`).
    pub usage: Option<ProcUse>,
}

impl Proc {
    /// Its memory in a sum: nothing where NVML gives none.
    pub fn counted_memory(&self) -> u64 {
        if self.memory == NOT_AVAILABLE {
            0
        } else {
            self.memory
        }
    }
}

#[derive(Debug, Clone)]
pub struct GpuInstance {
    pub id: u32,
    pub profile: MigProfile,
    pub start: u32,
    pub uuid: String,
    pub load: f64,
    pub phase: f64,
    /// Its compute instances, each a MIG device; by default one, id 0,
    /// spanning it.
    pub compute: Vec<ComputeInstance>,
    /// Memory in use, pinned by the scenario (`None`: from its processes).
    pub memory_used_mib: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ComputeInstance {
    pub id: u32,
    /// First compute slice within the GPU instance.
    pub start: u32,
    pub slices: u32,
    /// The MIG device's UUID.
    pub uuid: String,
}

impl GpuInstance {
    pub fn compute_instance(&self, ci: u32) -> Option<&ComputeInstance> {
        self.compute.iter().find(|c| c.id == ci)
    }
}

#[derive(Debug, Clone)]
pub struct Mig {
    /// Bumped on every reconfiguration so stale MIG handles stop resolving.
    pub generation: u8,
    pub instances: Vec<GpuInstance>,
}

#[derive(Debug, Clone, Default)]
pub struct Violation {
    pub acc_ns: u64,
    pub since: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct RetiredPage {
    pub address: u64,
    pub cause: RetireCause,
    pub timestamp_us: u64,
}

#[derive(Debug, Clone)]
pub enum Hang {
    Until(f64),
    Forever,
}

#[derive(Debug, Clone)]
pub struct Gpu {
    pub index: u32,
    pub model: Arc<Model>,
    pub uuid: String,
    /// `None`: NOT_SUPPORTED (no inforom serial, or the scenario's "N/A").
    pub serial: Option<String>,
    pub pci: PciAddr,
    pub minor: Option<u32>,
    pub load: f64,
    pub phase: f64,
    pub period: f64,
    pub mig: Option<Mig>,
    pub mig_pending: bool,
    pub procs: Vec<Proc>,
    pub settings: Settings,
    /// What the scenario pins (README, "Pinned readings").
    pub readings: Readings,
    /// [error type][0 volatile, 1 aggregate][nvmlMemoryLocation_t]
    pub ecc: [[[u64; 8]; 2]; 2],
    pub sram: SramCounts,
    pub remap_corr: u32,
    pub remap_unc: u32,
    pub remap_pending: bool,
    pub remap_failure: bool,
    /// The histogram the scenario gave, and the rows remapped then.
    pub remap_histogram: Option<([u32; 5], u32)>,
    /// The scenario says "N/A" to remapped rows / retired pages.
    pub remap_unsupported: bool,
    pub retired_unsupported: bool,
    pub retired: Vec<RetiredPage>,
    pub retired_pending: bool,
    pub lost: bool,
    pub hang: Option<Hang>,
    pub slow_ms: u64,
    pub throttle: u64,
    /// Reasons the scenario set that no fault changes (applications
    /// clocks, display clock), and the idle reason if it pinned it.
    pub fixed_reasons: u64,
    pub idle_reason: Option<bool>,
    pub energy_mj: f64,
    pub energy_t: f64,
    /// Utilization integrated up to `energy_t` (percent seconds), wave by
    /// wave as load changed: what the PCIe and NVLink byte counters count
    /// from, so that they never go back when a new wave starts.
    pub util_seconds: f64,
    /// Indexed by nvmlPerfPolicyType_t (0..=5).
    pub violations: [Violation; 6],
    /// Time in the SW thermal, HW thermal and HW power brake clock-event
    /// reasons: the duration fields of the branches that have them.
    pub clock_events: [Violation; 3],
    /// `None`: the scenario says "N/A".
    pub pcie_replay: Option<u32>,
    /// Current PCIe link width in lanes (the model's maximum until a fault
    /// retrains the link narrower).
    pub pcie_width: u32,
    /// Bit n set: NVLink link n is inactive.
    pub nvlink_down: u64,
    /// Errors added by faults, per link, indexed by [`NvlinkCounter::index`].
    pub nvlink_errors_added: Vec<[u64; NvlinkCounter::COUNT]>,
    /// `NVML_GPU_FABRIC_STATE_*` (3 completed on NVSwitch boards, 0 elsewhere)
    /// and the registration's outcome (an nvmlReturn_t).
    pub fabric_state: u8,
    pub fabric_status: u32,
    /// The fabric's health rows (the board's, the scenario's, then faults').
    pub fabric_health: FabricHealth,
    /// The NVLink partition: clique id and cluster UUID (all zero on a
    /// single-node NVSwitch system).
    pub fabric_clique: u32,
    pub fabric_cluster: [u8; 16],
    /// Power smoothing circuitry lifetime remaining, percent; `None` on
    /// boards without power smoothing or where the scenario says "N/A".
    pub power_smoothing_lifetime: Option<f64>,
    pub sram_threshold_exceeded: bool,
    /// The driver's per-process utilization samples.
    pub samples: super::ring::SampleBuffer,
    /// Pid of the MPS server, on a GPU that runs one.
    pub mps_server: Option<u32>,
    /// Per error type (corrected, uncorrected), bit n: memory location n
    /// has ECC counters.
    pub ecc_locations: [u8; 2],
    /// `nvmlClocksEventReason*` bits the GPU reports.
    pub supported_reasons: u64,
    /// Field values a capture pinned.
    pub field_pins: Vec<crate::scenario::FieldPin>,
    /// Calls on this GPU's handle that answer an error (`[gpu.errors]`).
    pub call_errors: Vec<(String, u32)>,
    /// The recovery action the scenario pins (`None`: derived), and
    /// whether a reset was already pending when it was pinned.
    pub recovery_action: Option<Val<u32>>,
    pub reset_pending_at_start: bool,
}

/// The pages the scenario's counters retired (none where it says "N/A").
fn retired_pages(counters: &Counters) -> Vec<RetiredPage> {
    match &counters.retired_pages {
        Some(Val::Is(pages)) => pages
            .iter()
            .map(|p| RetiredPage {
                address: p.address,
                cause: p.cause,
                timestamp_us: p.timestamp_us.unwrap_or_else(super::now_us),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Gpu {
    /// A GPU's starting state from its spec: the fields in the struct's
    /// order, then what the scenario's counters say of clock events, its
    /// MIG instances and its processes, each by a function of its own.
    pub(super) fn new(index: u32, spec: &GpuSpec, next_pid: &mut u32) -> Gpu {
        let counters = &spec.counters;
        let ecc = counters.ecc.unwrap_or_else(|| {
            let mut ecc = [[[0u64; 8]; 2]; 2];
            if spec.model.ecc.supported {
                // A little corrected-error history, as long-lived boards have.
                ecc[0][1][2] = (index as u64 * 7) % 5;
                ecc[0][1][1] = (index as u64) % 2;
            }
            ecc
        });
        let remap = counters.remapped_rows.and_then(|r| match r {
            Val::Is(r) => Some(r),
            Val::NotSupported => None,
        });
        let remap_rows = remap.map_or(0, |r| r.correctable + r.uncorrectable);
        let sram = counters.sram.unwrap_or_default();
        let mut gpu = Gpu {
            index,
            model: spec.model.clone(),
            uuid: spec.identity.uuid.clone(),
            serial: spec.identity.serial.clone(),
            pci: spec.identity.pci,
            minor: spec.identity.minor,
            load: spec.load,
            phase: (index as f64) * 0.9,
            period: 40.0 + (index % 5) as f64 * 7.0,
            mig: None,
            mig_pending: false,
            procs: Vec::new(),
            settings: spec.settings.clone(),
            readings: spec.readings.clone(),
            ecc,
            sram,
            remap_corr: remap.map_or(0, |r| r.correctable),
            remap_unc: remap.map_or(0, |r| r.uncorrectable),
            remap_pending: remap.is_some_and(|r| r.pending),
            remap_failure: remap.is_some_and(|r| r.failure),
            remap_histogram: remap.and_then(|r| r.histogram).map(|h| (h, remap_rows)),
            remap_unsupported: counters.remapped_rows == Some(Val::NotSupported),
            retired_unsupported: counters.retired_pages == Some(Val::NotSupported),
            retired: retired_pages(counters),
            retired_pending: counters.retired_pending,
            lost: false,
            hang: None,
            slow_ms: 0,
            throttle: 0,
            fixed_reasons: 0,
            idle_reason: None,
            energy_mj: 0.0,
            energy_t: 0.0,
            util_seconds: 0.0,
            violations: Default::default(),
            clock_events: Default::default(),
            pcie_replay: match counters.pcie_replays {
                None => Some(index % 3),
                Some(v) => v.get(),
            },
            pcie_width: spec.readings.pcie_width.unwrap_or(spec.model.pcie.width),
            nvlink_down: 0,
            nvlink_errors_added: vec![[0; NvlinkCounter::COUNT]; spec.model.nvlink.links as usize],
            fabric_state: match spec.fabric.state {
                Some(s) => s,
                None if spec.model.nvswitch_fabric() => 3,
                None => 0,
            },
            fabric_status: spec.fabric.status,
            fabric_health: spec.fabric.health,
            fabric_clique: spec.fabric.clique_id,
            fabric_cluster: spec.fabric.cluster_uuid,
            power_smoothing_lifetime: match spec.readings.power_smoothing_lifetime_percent {
                Some(v) => v.get(),
                // Circuitry that has seen a little use: 100, 99, 98, 97 %.
                None => spec
                    .model
                    .power_smoothing
                    .then(|| 100.0 - f64::from(index % 4)),
            },
            sram_threshold_exceeded: sram.threshold_exceeded,
            samples: super::ring::SampleBuffer::new(super::now_us()),
            mps_server: None,
            call_errors: spec.call_errors.clone(),
            field_pins: spec.field_pins.clone(),
            // L1, L2, DRAM, register file and SRAM: HBM boards have no
            // texture or CBU counters.
            ecc_locations: counters.ecc_locations.unwrap_or([0b1000_1111; 2]),
            supported_reasons: counters
                .supported_clock_event_reasons
                .as_ref()
                .map_or(0x1ff, |r| r.iter().fold(0, |m, r| m | r.bit())),
            recovery_action: counters.recovery_action,
            reset_pending_at_start: remap.is_some_and(|r| r.pending) || counters.retired_pending,
        };
        gpu.start_clock_events(counters);
        if let Some(mig) = &spec.mig {
            gpu.set_mig_instances(mig, 0);
        }
        gpu.mig_pending = spec.mig_pending.unwrap_or(spec.mig.is_some());
        gpu.start_processes(spec, next_pid);
        gpu
    }

    /// The time in violation and clock-event reasons the scenario's
    /// counters give, and the reasons it sets.
    fn start_clock_events(&mut self, counters: &Counters) {
        let [power_cap, sync_boost, sw_thermal, hw_thermal, power_brake] =
            counters.clock_event_durations_us.map(|us| us * 1000);
        self.violations[0].acc_ns = power_cap;
        self.violations[1].acc_ns = sw_thermal;
        self.violations[2].acc_ns = sync_boost;
        self.clock_events[0].acc_ns = sw_thermal;
        self.clock_events[1].acc_ns = hw_thermal;
        self.clock_events[2].acc_ns = power_brake;
        if let Some(reasons) = &counters.clock_event_reasons {
            let mask = |keep: fn(&Reason) -> bool| {
                reasons
                    .iter()
                    .filter(|r| keep(r))
                    .fold(0, |m, r| m | r.bit())
            };
            self.fixed_reasons = mask(|r| !r.throttles() && *r != Reason::GpuIdle);
            self.idle_reason = Some(reasons.contains(&Reason::GpuIdle));
            self.set_throttle(mask(|r| r.throttles()), 0.0);
        }
    }

    /// The spec's processes (bound to the MIG instances already made) and
    /// the MPS server, pids handed out from `next_pid` where not given.
    fn start_processes(&mut self, spec: &GpuSpec, next_pid: &mut u32) {
        for p in &spec.processes {
            let pid = p.pid.unwrap_or_else(|| {
                *next_pid += 1;
                *next_pid
            });
            let mig = p.mig_instance.map(|i| {
                (
                    self.mig.as_ref().expect("validated").instances[i].id,
                    p.compute_instance,
                )
            });
            self.procs.push(Proc {
                pid,
                name: p.name.clone(),
                memory: p.memory_mib.map_or(NOT_AVAILABLE, |m| m * MIB),
                kind: p.kind,
                mig,
                usage: p.usage,
            });
        }
        if spec.mps {
            *next_pid += 1;
            self.mps_server = Some(*next_pid);
            self.procs.push(Proc {
                pid: *next_pid,
                name: "nvidia-cuda-mps-server".into(),
                memory: 25 * MIB,
                kind: ProcKind::Compute,
                mig: None,
                usage: None,
            });
        }
    }

    /// Replaces the MIG layout with these profiles, placed as `nvidia-smi
    /// mig -cgi` would, one compute instance each (fault `mig-reconfigure`).
    pub fn set_mig_layout(
        &mut self,
        names: &[String],
        loads: &[f64],
    ) -> Result<(), crate::value::Invalid> {
        let placed = model::place_layout(&self.model, names)?;
        let generation = self
            .mig
            .as_ref()
            .map(|m| m.generation.wrapping_add(1))
            .unwrap_or(0);
        let specs: Vec<MigSpec> = placed
            .into_iter()
            .enumerate()
            .map(|(i, (profile, start))| MigSpec {
                profile: profile.name.clone(),
                load: loads.get(i).copied().unwrap_or(0.0),
                start,
                uuid: None,
                memory_used_mib: None,
                compute_instances: vec![CiSpec {
                    id: 0,
                    slices: profile.slices,
                    uuid: None,
                }],
            })
            .collect();
        self.set_mig_instances(&specs, generation);
        Ok(())
    }

    /// Creates GPU instances the scenario placed (profiles and placements
    /// already validated).
    fn set_mig_instances(&mut self, specs: &[MigSpec], generation: u8) {
        let instances = specs
            .iter()
            .enumerate()
            .filter_map(|(i, spec)| {
                let profile = self.model.profile_by_name(&spec.profile)?.clone();
                let id = profile.instance_id_for(spec.start);
                let uuid = spec
                    .uuid
                    .clone()
                    .unwrap_or_else(|| identity::mig_uuid(&self.uuid, id, 0, generation));
                let mut first = 0;
                let compute = spec
                    .compute_instances
                    .iter()
                    .map(|c| {
                        let start = first;
                        first += c.slices;
                        ComputeInstance {
                            id: c.id,
                            start,
                            slices: c.slices,
                            uuid: c.uuid.clone().unwrap_or_else(|| {
                                if c.id == 0 {
                                    uuid.clone()
                                } else {
                                    identity::mig_uuid(&self.uuid, id, c.id, generation)
                                }
                            }),
                        }
                    })
                    .collect();
                Some(GpuInstance {
                    id,
                    profile,
                    start: spec.start,
                    uuid,
                    load: spec.load,
                    phase: i as f64 * 1.3,
                    compute,
                    memory_used_mib: spec.memory_used_mib,
                })
            })
            .collect();
        self.mig = Some(Mig {
            generation,
            instances,
        });
    }

    /// The MIG devices, in the order NVML enumerates them: (GPU instance
    /// id, compute instance id), by GPU instance id then compute instance.
    pub fn mig_devices(&self) -> Vec<(u32, u32)> {
        let mut v: Vec<(u32, u32)> = self
            .mig
            .iter()
            .flat_map(|m| &m.instances)
            .flat_map(|i| i.compute.iter().map(move |c| (i.id, c.id)))
            .collect();
        v.sort_unstable();
        v
    }

    pub fn instance(&self, gi: u32) -> Option<&GpuInstance> {
        self.mig.as_ref()?.instances.iter().find(|i| i.id == gi)
    }

    /// Link error counters, indexed by [`NvlinkCounter::index`]: a static
    /// base plus what faults added. NVLink5 links count symbol errors
    /// before FEC corrects them; their other counters start at 0.
    pub fn nvlink_errors(&self, link: u32) -> [u64; NvlinkCounter::COUNT] {
        let s = (self.index + link) as u64;
        let mut counts = [0; NvlinkCounter::COUNT];
        if self.model.nvlink5() {
            counts[NvlinkCounter::Symbol.index()] = (s * 37) % 101;
        } else {
            counts[NvlinkCounter::Replay.index()] = s % 3;
            counts[NvlinkCounter::CrcFlit.index()] = (s * 5) % 7;
            counts[NvlinkCounter::EccData.index()] = s % 2;
        }
        if let Some(added) = self.nvlink_errors_added.get(link as usize) {
            for (c, a) in counts.iter_mut().zip(added) {
                *c += a;
            }
        }
        counts
    }

    /// The row remapper histogram `[max, high, partial, low, none]`: every
    /// bank starts with all its spare rows; each remapped row takes one from
    /// a bank of its own (to `high`), and a remap failure leaves a bank with
    /// none.
    pub fn remapper_histogram(&self) -> [u32; 5] {
        if let Some(([max, high, partial, low, none], rows_then)) = self.remap_histogram {
            // Each row remapped since takes a bank from max to high.
            let more = (self.remap_corr + self.remap_unc).saturating_sub(rows_then);
            let moved = more.min(max);
            return [max - moved, high + moved, partial, low, none];
        }
        let total = self.model.ecc.remapper_banks;
        let none = u32::from(self.remap_failure).min(total);
        let high = (self.remap_corr + self.remap_unc).min(total - none);
        [total - high - none, high, 0, 0, none]
    }

    /// Whether NVML reports remapped rows now: boards that remap, not in
    /// MIG mode (issue 16's blind spot), unless the scenario says "N/A".
    pub fn remaps_rows(&self) -> bool {
        self.model.ecc.row_remapping && self.mig.is_none() && !self.remap_unsupported
    }

    /// ECC is supported and on.
    pub fn ecc_enabled(&self) -> bool {
        matches!(self.settings.ecc, Some((true, _)))
    }

    pub fn nvlink_active(&self, link: u32) -> bool {
        self.nvlink_down & (1 << link) == 0
    }

    /// Memory of the whole GPU in bytes: (total, reserved, used, free), v2 meaning.
    pub fn memory(&self) -> (u64, u64, u64, u64) {
        let total = self.model.memory.total_mib * MIB;
        let reserved = self.model.memory.reserved_bytes;
        let used = match (&self.mig, self.readings.memory_used) {
            (_, Some(used)) => used,
            (Some(m), None) => m
                .instances
                .iter()
                .map(|i| self.instance_memory(i).2)
                .sum::<u64>(),
            (None, None) => {
                GPU_OVERHEAD_MIB * MIB
                    + if self.settings.display_active == Val::Is(true) {
                        96 * MIB
                    } else {
                        0
                    }
                    + self.procs.iter().map(Proc::counted_memory).sum::<u64>()
            }
        };
        let used = used.min(total - reserved);
        let free = match self.readings.memory_free {
            // As pinned, while nothing has changed the memory in use.
            Some(f) if self.readings.memory_used.is_some() => f,
            _ => total - reserved - used,
        };
        (total, reserved, used, free)
    }

    /// Memory of one MIG instance: (total, reserved, used, free).
    pub fn instance_memory(&self, gi: &GpuInstance) -> (u64, u64, u64, u64) {
        let total = gi.profile.memory_mib * MIB;
        let used = match gi.memory_used_mib {
            Some(used) => used * MIB,
            None => {
                MIG_OVERHEAD_MIB * MIB
                    + self
                        .procs
                        .iter()
                        .filter(|p| p.mig.map(|m| m.0) == Some(gi.id))
                        .map(Proc::counted_memory)
                        .sum::<u64>()
            }
        };
        let used = used.min(total);
        (total, 0, used, total - used)
    }

    fn set_violation(&mut self, policy: usize, active: bool, t: f64) {
        Self::track(&mut self.violations[policy], active, t);
    }

    fn track(v: &mut Violation, active: bool, t: f64) {
        match (active, v.since) {
            (true, None) => v.since = Some(t),
            (false, Some(s)) => {
                v.acc_ns += ((t - s) * 1e9) as u64;
                v.since = None;
            }
            _ => {}
        }
    }

    pub fn violation_ns(&self, policy: usize, t: f64) -> u64 {
        Self::elapsed_ns(&self.violations[policy], t)
    }

    /// 0 SW thermal, 1 HW thermal, 2 HW power brake.
    pub fn clock_event_ns(&self, reason: usize, t: f64) -> u64 {
        Self::elapsed_ns(&self.clock_events[reason], t)
    }

    fn elapsed_ns(v: &Violation, t: f64) -> u64 {
        v.acc_ns
            + v.since
                .map(|s| ((t - s).max(0.0) * 1e9) as u64)
                .unwrap_or(0)
    }

    pub fn set_throttle(&mut self, mask: u64, t: f64) {
        self.advance_energy(t);
        self.throttle = mask;
        let has = |r: Reason| mask & r.bit() != 0;
        self.set_violation(0, has(Reason::SwPowerCap), t);
        self.set_violation(
            1,
            has(Reason::HwThermalSlowdown) || has(Reason::SwThermalSlowdown),
            t,
        );
        self.set_violation(2, has(Reason::SyncBoost), t);
        self.set_violation(
            3,
            has(Reason::HwSlowdown) || has(Reason::HwPowerBrakeSlowdown),
            t,
        );
        let events = [
            has(Reason::SwThermalSlowdown),
            has(Reason::HwThermalSlowdown),
            has(Reason::HwPowerBrakeSlowdown),
        ];
        for (v, active) in self.clock_events.iter_mut().zip(events) {
            Self::track(v, active, t);
        }
    }

    pub fn ecc_total(&self, error_type: usize, counter: usize) -> u64 {
        self.ecc[error_type][counter].iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use crate::fleet::Sim;

    #[test]
    fn memory_adds_up_and_mig_fits() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let sim = Sim::new(&s, 1.0);
        for g in &sim.gpus {
            let (total, reserved, used, free) = g.memory();
            assert_eq!(total, reserved + used + free);
            if let Some(m) = &g.mig {
                for i in &m.instances {
                    let (t, _, u, f) = g.instance_memory(i);
                    assert_eq!(t, u + f);
                    assert!(t <= total);
                }
            }
        }
        assert_eq!(sim.gpus[7].pstate(10.0), 8);
        assert_eq!(sim.gpus[2].pstate(10.0), 0);
    }
}
