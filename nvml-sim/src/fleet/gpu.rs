//! One simulated GPU's state: identity, load, MIG layout, processes and
//! memory here; the counters faults move in sections as the model's, one
//! file each in `gpu/`, named as the NVML group in `docs/design.md`'s
//! table and resolved from the spec by a function of its own: ECC with
//! retired pages and remapped rows, clock events (`throttle.rs`), energy
//! (`power.rs`), PCIe, NVLink and the fabric.

mod c2c;
mod ecc;
mod fabric;
mod nvlink;
mod pcie;
mod power;
mod throttle;

pub use c2c::C2cState;
pub use ecc::{EccState, RetiredPage};
pub use fabric::FabricState;
pub use nvlink::NvlinkState;
pub use pcie::PcieState;
pub use power::PowerState;
pub use throttle::{ThrottleState, Violation};

use crate::fault::{NvlinkCounter, ProcKind, ProcUse};
use crate::identity::{self, PciAddr};
use crate::model::{self, MigProfile, Model};
use crate::scenario::{CiSpec, GpuSpec, MigSpec, Readings, Settings};
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
    /// The counters faults move, by section (`gpu/<group>.rs`).
    pub ecc: EccState,
    pub throttle: ThrottleState,
    pub power: PowerState,
    pub pcie: PcieState,
    pub nvlink: NvlinkState,
    pub c2c: C2cState,
    pub fabric: FabricState,
    /// `nvmlDeviceGetModuleId`.
    pub module_id: u32,
    /// `nvmlDeviceGetPlatformInfo`; `None`: NOT_SUPPORTED.
    pub platform: Option<crate::schema::PlatformFile>,
    pub lost: bool,
    pub hang: Option<Hang>,
    pub slow_ms: u64,
    /// Utilization integrated up to `power.energy_t` (percent seconds), wave
    /// by wave as load changed: what the PCIe and NVLink byte counters count
    /// from, so that they never go back when a new wave starts.
    pub util_seconds: f64,
    /// The driver's per-process utilization samples.
    pub samples: super::ring::SampleBuffer,
    /// Pid of the MPS server, on a GPU that runs one.
    pub mps_server: Option<u32>,
    /// Field values a capture pinned.
    pub field_pins: Vec<crate::scenario::FieldPin>,
    /// Calls on this GPU's handle that answer an error (`[gpu.errors]`).
    pub call_errors: Vec<(String, u32)>,
}

impl Gpu {
    /// A GPU's starting state from its spec: its identity and load, then
    /// each section of counters by its own constructor, its MIG instances
    /// and its processes.
    pub(super) fn new(index: u32, spec: &GpuSpec, next_pid: &mut u32) -> Gpu {
        let counters = &spec.counters;
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
            ecc: EccState::from_spec(index, spec),
            throttle: ThrottleState::from_counters(counters),
            power: PowerState::from_spec(index, spec),
            pcie: PcieState::from_spec(index, spec),
            nvlink: NvlinkState::new(&spec.model),
            c2c: C2cState::new(&spec.model),
            fabric: FabricState::from_spec(spec),
            module_id: spec.module_id.unwrap_or(index + 1),
            platform: spec.platform.clone(),
            lost: false,
            hang: None,
            slow_ms: 0,
            util_seconds: 0.0,
            samples: super::ring::SampleBuffer::new(super::now_us()),
            mps_server: None,
            call_errors: spec.call_errors.clone(),
            field_pins: spec.field_pins.clone(),
        };
        if let Some(mig) = &spec.mig {
            gpu.set_mig_instances(mig, 0);
        }
        gpu.mig_pending = spec.mig_pending.unwrap_or(spec.mig.is_some());
        gpu.start_processes(spec, next_pid);
        gpu
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
        if let Some(added) = self.nvlink.errors_added.get(link as usize) {
            for (c, a) in counts.iter_mut().zip(added) {
                *c += a;
            }
        }
        counts
    }

    /// The row remapper histogram `[max, high, partial, low, none]` of this
    /// board's banks (see [`EccState::remapper_histogram`]).
    pub fn remapper_histogram(&self) -> [u32; 5] {
        self.ecc.remapper_histogram(self.model.ecc.remapper_banks)
    }

    /// Whether NVML reports remapped rows now: boards that remap, not in
    /// MIG mode (issue 16's blind spot), unless the scenario says "N/A".
    pub fn remaps_rows(&self) -> bool {
        self.model.ecc.row_remapping && self.mig.is_none() && !self.ecc.remap_unsupported
    }

    /// ECC is supported and on.
    pub fn ecc_enabled(&self) -> bool {
        matches!(self.settings.ecc, Some((true, _)))
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

    /// Sets the reasons faults hold from time `t`: the energy counted up to
    /// `t` at the old reasons' power first.
    pub fn set_throttle(&mut self, mask: u64, t: f64) {
        self.advance_energy(t);
        self.throttle.set_throttle(mask, t);
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
