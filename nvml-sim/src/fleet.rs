//! The simulated fleet at run time: per-GPU state, the physics that moves
//! readings over time, and fault application.
//!
//! Readings are functions of time so that they stay consistent with each
//! other: utilization follows a slow sine around the configured load; power,
//! temperature, clocks and fan follow utilization; energy is the integral of
//! the reported power (NVML reference, `nvmlDeviceGetTotalEnergyConsumption`:
//! "total energy consumption ... in mJ since the driver was last reloaded").

use crate::fault::{EccLocation, EccType, Fault, ProcKind, Reason, RetireCause, RowKind};
use crate::model::{self, MigProfile, Model};
use crate::scenario::{GpuSpec, Scenario};
use std::collections::{HashMap, VecDeque};
use std::f64::consts::PI;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub const MIB: u64 = 1024 * 1024;
/// What a freshly created, empty MIG instance shows as used (nvidia-smi
/// prints about 13 MiB for an idle 1g.10gb).
const MIG_OVERHEAD_MIB: u64 = 13;
/// Context and framebuffer the driver keeps on a GPU with nothing running.
const GPU_OVERHEAD_MIB: u64 = 4;

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub name: String,
    pub memory: u64,
    pub kind: ProcKind,
    /// (gpu instance id, compute instance id) on MIG-enabled GPUs.
    pub mig: Option<(u32, u32)>,
    /// What it does with the GPU, when declared (see `usage.rs`).
    pub usage: Option<crate::usage::ProcUse>,
}

#[derive(Debug, Clone)]
pub struct GpuInstance {
    pub id: u32,
    pub profile: &'static MigProfile,
    pub start: u32,
    pub uuid: String,
    pub load: f64,
    pub phase: f64,
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
    pub model: &'static Model,
    pub uuid: String,
    pub serial: String,
    pub bus: u32,
    pub load: f64,
    pub phase: f64,
    pub period: f64,
    pub mig: Option<Mig>,
    pub mig_pending: bool,
    pub procs: Vec<Proc>,
    /// [error type][0 volatile, 1 aggregate][nvmlMemoryLocation_t]
    pub ecc: [[[u64; 8]; 2]; 2],
    pub remap_corr: u32,
    pub remap_unc: u32,
    pub remap_pending: bool,
    pub remap_failure: bool,
    pub retired: Vec<RetiredPage>,
    pub retired_pending: bool,
    pub lost: bool,
    pub hang: Option<Hang>,
    pub slow_ms: u64,
    pub throttle: u64,
    pub display: bool,
    pub persistence: bool,
    pub energy_mj: f64,
    pub energy_t: f64,
    /// Indexed by nvmlPerfPolicyType_t (0..=5).
    pub violations: [Violation; 6],
    /// Time in the SW thermal, HW thermal and HW power brake clock-event
    /// reasons: the duration fields of the branches that have them.
    pub clock_events: [Violation; 3],
    pub pcie_replay: u32,
    /// Current PCIe link width in lanes (the model's maximum until a fault
    /// retrains the link narrower).
    pub pcie_width: u32,
    /// Bit n set: NVLink link n is inactive.
    pub nvlink_down: u64,
    /// Errors added by faults, per link: (replay, recovery, crc flit, crc data, ecc data).
    pub nvlink_errors_added: Vec<[u64; 5]>,
    /// `NVML_GPU_FABRIC_STATE_*` (3 completed on NVSwitch boards, 0 elsewhere)
    /// and the registration's outcome (an nvmlReturn_t).
    pub fabric_state: u8,
    pub fabric_status: u32,
    pub sram_threshold_exceeded: bool,
    /// The driver's per-process utilization samples.
    pub samples: crate::usage::SampleBuffer,
    /// Pid of the MPS server, on a GPU that runs one.
    pub mps_server: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub gpu: u32,
    pub event_type: u64,
    pub data: u64,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

#[derive(Debug, Default)]
pub struct EventSet {
    pub registered: Vec<(u32, u64)>,
    pub queue: VecDeque<Event>,
}

#[derive(Debug, Clone, Copy)]
pub struct GpmSample {
    pub taken: Option<(u32, Option<u32>, f64)>,
}

pub struct Sim {
    pub scenario: String,
    pub gpus: Vec<Gpu>,
    pub start: Instant,
    pub scale: f64,
    pub timeline: Vec<(f64, Fault)>,
    pub next_timeline: usize,
    pub driver_loaded: bool,
    pub event_sets: HashMap<u32, EventSet>,
    pub next_event_set: u32,
    pub gpm_samples: HashMap<u32, GpmSample>,
    pub next_gpm_sample: u32,
    pub next_pid: u32,
    /// The caller holds NVML's MIG privileges (scenario `privileged`).
    pub privileged: bool,
    /// GPUs whose handles answer NO_PERMISSION (scenario `denied`).
    pub denied: Vec<u32>,
    pub host_pid_namespace: bool,
    /// Scenario `gpm_absent_engines = "not_supported"`.
    pub gpm_absent_engines_unsupported: bool,
}

/// FNV-1a: stable across runs and platforms, so UUIDs and serials are too.
pub fn fnv(data: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64 finalizer: spreads FNV's output so similar seeds (GPU 0, GPU 1)
/// do not give look-alike UUIDs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn uuid_from(seed: &str) -> String {
    let a = mix(fnv(seed));
    let b = mix(fnv(&format!("{seed}/2")));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// PCI bus numbers of the eight GPUs in a DGX H100/A100 chassis.
const DGX_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Utilization waveform around `load`: a sine that never leaves 0..=100, so
/// its integral has a closed form and energy is exact.
#[derive(Clone, Copy)]
struct Wave {
    load: f64,
    amp: f64,
    omega: f64,
    phase: f64,
}

impl Wave {
    fn new(load: f64, period: f64, phase: f64) -> Wave {
        let amp = if load <= 0.0 {
            0.0
        } else {
            load.min(100.0 - load).min(12.0)
        };
        Wave {
            load,
            amp,
            omega: 2.0 * PI / period,
            phase,
        }
    }
    fn flat(self) -> Wave {
        Wave { amp: 0.0, ..self }
    }
    fn at(&self, t: f64) -> f64 {
        self.load + self.amp * (self.omega * t + self.phase).sin()
    }
    /// Integral of `at` from 0 to t (percent-seconds).
    fn integral(&self, t: f64) -> f64 {
        self.load * t
            - self.amp / self.omega * ((self.omega * t + self.phase).cos() - self.phase.cos())
    }
}

impl Gpu {
    fn new(scenario: &str, index: u32, spec: &GpuSpec, next_pid: &mut u32) -> Gpu {
        let uuid = format!("GPU-{}", uuid_from(&format!("{scenario}/gpu/{index}")));
        let serial = format!(
            "{:013}",
            fnv(&format!("{scenario}/serial/{index}")) % 10_000_000_000_000
        );
        let bus = if (index as usize) < DGX_BUSES.len() {
            DGX_BUSES[index as usize]
        } else {
            0x01 + index * 0x08
        };
        let mut ecc = [[[0u64; 8]; 2]; 2];
        if spec.model.ecc {
            // A little corrected-error history, as long-lived boards have.
            ecc[0][1][2] = (index as u64 * 7) % 5;
            ecc[0][1][1] = (index as u64) % 2;
        }
        let mut gpu = Gpu {
            index,
            model: spec.model,
            uuid,
            serial,
            bus,
            load: spec.load,
            phase: (index as f64) * 0.9,
            period: 40.0 + (index % 5) as f64 * 7.0,
            mig: None,
            mig_pending: false,
            procs: Vec::new(),
            ecc,
            remap_corr: 0,
            remap_unc: 0,
            remap_pending: false,
            remap_failure: false,
            retired: Vec::new(),
            retired_pending: false,
            lost: false,
            hang: None,
            slow_ms: 0,
            throttle: 0,
            display: spec.display,
            persistence: spec.persistence,
            energy_mj: 0.0,
            energy_t: 0.0,
            violations: Default::default(),
            clock_events: Default::default(),
            pcie_replay: index % 3,
            pcie_width: spec.model.pcie_width,
            nvlink_down: 0,
            nvlink_errors_added: vec![[0; 5]; spec.model.nvlinks as usize],
            fabric_state: if spec.model.nvswitch_fabric() { 3 } else { 0 },
            fabric_status: 0,
            sram_threshold_exceeded: false,
            samples: crate::usage::SampleBuffer::new(now_us()),
            mps_server: None,
        };
        if let Some(mig) = &spec.mig {
            let names: Vec<String> = mig.iter().map(|m| m.profile.clone()).collect();
            let loads: Vec<f64> = mig.iter().map(|m| m.load).collect();
            gpu.set_mig_layout(&names, &loads)
                .expect("scenario validated the layout");
        }
        gpu.mig_pending = spec.mig_pending.unwrap_or(spec.mig.is_some());
        for p in &spec.processes {
            let pid = p.pid.unwrap_or_else(|| {
                *next_pid += 1;
                *next_pid
            });
            let mig = p
                .mig_instance
                .map(|i| (gpu.mig.as_ref().expect("validated").instances[i].id, 0));
            gpu.procs.push(Proc {
                pid,
                name: p.name.clone(),
                memory: p.memory_mib * MIB,
                kind: p.kind,
                mig,
                usage: p.usage,
            });
        }
        if spec.mps {
            *next_pid += 1;
            gpu.mps_server = Some(*next_pid);
            gpu.procs.push(Proc {
                pid: *next_pid,
                name: "nvidia-cuda-mps-server".into(),
                memory: 25 * MIB,
                kind: ProcKind::Compute,
                mig: None,
                usage: None,
            });
        }
        gpu
    }

    pub fn set_mig_layout(&mut self, names: &[String], loads: &[f64]) -> Result<(), String> {
        let placed = model::place_layout(self.model, names)?;
        let generation = self
            .mig
            .as_ref()
            .map(|m| m.generation.wrapping_add(1))
            .unwrap_or(0);
        let instances = placed
            .into_iter()
            .enumerate()
            .map(|(i, (profile, start))| {
                let id = profile.instance_id_for(start);
                GpuInstance {
                    id,
                    profile,
                    start,
                    uuid: format!(
                        "MIG-{}",
                        uuid_from(&format!("{}/gi/{id}/{generation}", self.uuid))
                    ),
                    load: loads.get(i).copied().unwrap_or(0.0),
                    phase: i as f64 * 1.3,
                }
            })
            .collect();
        self.mig = Some(Mig {
            generation,
            instances,
        });
        Ok(())
    }

    pub fn instance(&self, gi: u32) -> Option<&GpuInstance> {
        self.mig.as_ref()?.instances.iter().find(|i| i.id == gi)
    }

    /// Processes that declare their use set the level, without a wave.
    fn wave(&self) -> Wave {
        match crate::usage::declared_sm(self, None) {
            Some(sm) => Wave::new(sm, self.period, self.phase).flat(),
            None => Wave::new(self.load, self.period, self.phase),
        }
    }

    fn instance_wave(&self, gi: &GpuInstance) -> Wave {
        match crate::usage::declared_sm(self, Some(gi.id)) {
            Some(sm) => Wave::new(sm, self.period, gi.phase).flat(),
            None => Wave::new(gi.load, self.period, gi.phase),
        }
    }

    /// GPU utilization in percent at real time t.
    pub fn util(&self, t: f64) -> f64 {
        match &self.mig {
            Some(m) => {
                m.instances
                    .iter()
                    .map(|i| self.instance_wave(i).at(t) * i.profile.slices as f64)
                    .sum::<f64>()
                    / 7.0
            }
            None => self.wave().at(t),
        }
    }

    fn util_integral(&self, t: f64) -> f64 {
        match &self.mig {
            Some(m) => {
                m.instances
                    .iter()
                    .map(|i| self.instance_wave(i).integral(t) * i.profile.slices as f64)
                    .sum::<f64>()
                    / 7.0
            }
            None => self.wave().integral(t),
        }
    }

    /// Average utilization of a MIG instance (or the whole GPU) over [t1, t2].
    pub fn avg_util(&self, gi: Option<u32>, t1: f64, t2: f64) -> f64 {
        let wave = gi
            .and_then(|g| self.instance(g))
            .map(|i| self.instance_wave(i));
        let at = |t| wave.map(|w| w.at(t)).unwrap_or_else(|| self.util(t));
        let integral = |t| {
            wave.map(|w| w.integral(t))
                .unwrap_or_else(|| self.util_integral(t))
        };
        if t2 - t1 < 1e-6 {
            at(t2)
        } else {
            (integral(t2) - integral(t1)) / (t2 - t1)
        }
    }

    pub fn thermal_throttled(&self) -> bool {
        self.throttle & (Reason::HwThermalSlowdown.bit() | Reason::SwThermalSlowdown.bit()) != 0
    }

    /// Factor throttling applies to clocks and power.
    fn throttle_factor(&self) -> f64 {
        if self.throttle
            & (Reason::HwThermalSlowdown.bit()
                | Reason::HwSlowdown.bit()
                | Reason::HwPowerBrakeSlowdown.bit())
            != 0
        {
            0.55
        } else if self.throttle & (Reason::SwThermalSlowdown.bit() | Reason::SwPowerCap.bit()) != 0
        {
            0.8
        } else {
            1.0
        }
    }

    fn power_span(&self) -> (f64, f64) {
        let idle = self.model.power_idle_mw as f64;
        let busy = self.model.power_default_mw as f64 * 0.9;
        (idle, busy - idle)
    }

    /// Power draw in mW at t.
    pub fn power_mw(&self, t: f64) -> f64 {
        let (idle, span) = self.power_span();
        let f = self.throttle_factor();
        (idle + span * self.util(t) / 100.0) * if f < 1.0 { f.max(0.7) } else { 1.0 }
    }

    /// Brings the energy counter up to t. Called before anything that reads
    /// it and before throttling changes, so the integral is exact.
    pub fn advance_energy(&mut self, t: f64) {
        if t <= self.energy_t {
            return;
        }
        let (idle, span) = self.power_span();
        let f = self.throttle_factor();
        let m = if f < 1.0 { f.max(0.7) } else { 1.0 };
        let du = self.util_integral(t) - self.util_integral(self.energy_t);
        self.energy_mj += m * (idle * (t - self.energy_t) + span * du / 100.0);
        self.energy_t = t;
    }

    pub fn busy(&self, t: f64) -> bool {
        self.util(t) >= 1.0 || self.mig.is_some()
    }

    pub fn pstate(&self, t: f64) -> u32 {
        if self.busy(t) {
            0
        } else {
            8
        }
    }

    pub fn temperature(&self, t: f64) -> u32 {
        let base = 29.0 + (self.index % 3) as f64 + 0.48 * self.util(t);
        let temp = if self.thermal_throttled() {
            base.max(self.model.temp_slowdown as f64 + 1.0)
        } else {
            base
        };
        temp.round() as u32
    }

    pub fn memory_temperature(&self, t: f64) -> Option<u32> {
        self.model.temp_mem_max.map(|_| self.temperature(t) + 6)
    }

    /// Current clock of an nvmlClockType_t, in MHz.
    pub fn clock(&self, clock_type: u32, t: f64) -> Option<u32> {
        let m = self.model;
        let busy = self.busy(t);
        let f = self.throttle_factor();
        let graphics = if busy {
            m.busy_graphics_mhz as f64 * f
        } else {
            m.idle_graphics_mhz as f64
        };
        match clock_type {
            0 | 1 => Some((graphics / 15.0).round() as u32 * 15),
            2 => Some(if busy { m.max_mem_mhz } else { m.idle_mem_mhz }),
            3 => Some(if busy {
                ((m.max_video_mhz as f64 * f) / 15.0).round() as u32 * 15
            } else {
                m.idle_video_mhz
            }),
            _ => None,
        }
    }

    pub fn max_clock(&self, clock_type: u32) -> Option<u32> {
        match clock_type {
            0 => Some(self.model.max_graphics_mhz),
            1 => Some(self.model.max_sm_mhz),
            2 => Some(self.model.max_mem_mhz),
            3 => Some(self.model.max_video_mhz),
            _ => None,
        }
    }

    pub fn fan_percent(&self, t: f64) -> u32 {
        (30.0 + 0.55 * self.util(t)).round() as u32
    }

    pub fn clock_event_reasons(&self, t: f64) -> u64 {
        let idle = u64::from(!self.busy(t));
        idle | self.throttle
    }

    /// PCIe throughput in KB/s: (tx, rx).
    pub fn pcie_kbps(&self, t: f64) -> (u32, u32) {
        let u = self.util(t);
        (
            (2_000.0 + u * 9_000.0) as u32,
            (3_000.0 + u * 24_000.0) as u32,
        )
    }

    /// PCIe byte counters since init: (tx, rx).
    pub fn pcie_bytes(&self, t: f64) -> (u64, u64) {
        let i = self.util_integral(t);
        (
            ((2_000.0 * t + 9_000.0 * i) * 1000.0) as u64,
            ((3_000.0 * t + 24_000.0 * i) * 1000.0) as u64,
        )
    }

    /// NVLink data counter of one link in KiB: (tx, rx).
    pub fn nvlink_kib(&self, link: u32, t: f64) -> (u64, u64) {
        let i = self.util_integral(t);
        let w = 1.0 + (link % 4) as f64 * 0.05;
        ((i * 18_000.0 * w) as u64, (i * 17_500.0 * w) as u64)
    }

    /// Link error counters: (replay, recovery, crc flit, crc data, ecc data),
    /// a static base plus what faults added.
    pub fn nvlink_errors(&self, link: u32) -> [u64; 5] {
        let s = (self.index + link) as u64;
        let mut counts = [s % 3, 0, (s * 5) % 7, 0, s % 2];
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
        let total = self.model.remapper_banks;
        let none = u32::from(self.remap_failure).min(total);
        let high = (self.remap_corr + self.remap_unc).min(total - none);
        [total - high - none, high, 0, 0, none]
    }

    pub fn nvlink_active(&self, link: u32) -> bool {
        self.nvlink_down & (1 << link) == 0
    }

    /// Memory of the whole GPU in bytes: (total, reserved, used, free), v2 meaning.
    pub fn memory(&self) -> (u64, u64, u64, u64) {
        let total = self.model.memory_mib * MIB;
        let reserved = self.model.reserved_mib * MIB;
        let used = match &self.mig {
            Some(m) => m
                .instances
                .iter()
                .map(|i| self.instance_memory(i).2)
                .sum::<u64>(),
            None => {
                GPU_OVERHEAD_MIB * MIB
                    + if self.display { 96 * MIB } else { 0 }
                    + self.procs.iter().map(|p| p.memory).sum::<u64>()
            }
        };
        let used = used.min(total - reserved);
        (total, reserved, used, total - reserved - used)
    }

    /// Memory of one MIG instance: (total, reserved, used, free).
    pub fn instance_memory(&self, gi: &GpuInstance) -> (u64, u64, u64, u64) {
        let total = gi.profile.memory_mib * MIB;
        let used = MIG_OVERHEAD_MIB * MIB
            + self
                .procs
                .iter()
                .filter(|p| p.mig.map(|m| m.0) == Some(gi.id))
                .map(|p| p.memory)
                .sum::<u64>();
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

impl Sim {
    pub fn new(scenario: &Scenario, scale: f64) -> Sim {
        let mut next_pid = 30000;
        let gpus = scenario
            .gpus
            .iter()
            .enumerate()
            .map(|(i, spec)| Gpu::new(&scenario.name, i as u32, spec, &mut next_pid))
            .collect();
        Sim {
            scenario: scenario.name.clone(),
            gpus,
            start: Instant::now(),
            scale,
            timeline: scenario.timeline.clone(),
            next_timeline: 0,
            driver_loaded: true,
            event_sets: HashMap::default(),
            next_event_set: 1,
            gpm_samples: HashMap::default(),
            next_gpm_sample: 1,
            next_pid: 39000,
            privileged: scenario.privileged,
            denied: scenario.denied.clone(),
            host_pid_namespace: scenario.host_pid_namespace,
            gpm_absent_engines_unsupported: scenario.gpm_absent_engines_unsupported,
        }
    }

    /// Real seconds since init: the clock of the physics.
    pub fn t(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Scenario seconds since init: the clock of the timeline.
    pub fn scenario_t(&self) -> f64 {
        self.t() * self.scale
    }

    /// Applies the timeline entries that are due. Returns true if any was.
    pub fn advance(&mut self) -> bool {
        let now = self.scenario_t();
        let mut any = false;
        while self.next_timeline < self.timeline.len() && self.timeline[self.next_timeline].0 <= now
        {
            let (at, fault) = self.timeline[self.next_timeline].clone();
            self.next_timeline += 1;
            if let Err(e) = self.apply_at(&fault, at) {
                eprintln!("nvml-sim: timeline entry at {at}s failed: {e}");
            }
            any = true;
        }
        any
    }

    /// Seconds (real) until the next timeline entry, if any.
    pub fn next_due_in(&self) -> Option<f64> {
        self.timeline
            .get(self.next_timeline)
            .map(|(at, _)| ((at - self.scenario_t()) / self.scale).max(0.0))
    }

    pub fn push_event(&mut self, ev: Event) {
        // nvml.h (nvmlEventSetWait_v2): without privileges, only events
        // that affect the whole device are reported in MIG mode.
        if !self.privileged && ev.gpu_instance != u32::MAX {
            return;
        }
        for set in self.event_sets.values_mut() {
            if set
                .registered
                .iter()
                .any(|(g, mask)| *g == ev.gpu && mask & ev.event_type != 0)
            {
                set.queue.push_back(ev);
            }
        }
    }

    pub fn apply(&mut self, fault: &Fault) -> Result<String, String> {
        let at = self.scenario_t();
        self.apply_at(fault, at)
    }

    /// Applies a fault as of scenario time `at` (hang durations count from there).
    fn apply_at(&mut self, fault: &Fault, at: f64) -> Result<String, String> {
        let t = self.t();
        let n = self.gpus.len();
        if fault.changes_use() {
            // What processes do drives utilization, energy and the sample
            // buffer: settle all three as of now under the old state.
            let now = now_us();
            for g in &mut self.gpus {
                g.advance_energy(t);
                crate::usage::advance(g, now);
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
            } => {
                let g = &self.gpus[*gpu as usize];
                if let Some(gi) = gpu_instance {
                    if g.instance(*gi).is_none() {
                        return Err(format!("GPU {gpu} has no GPU instance {gi}"));
                    }
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
                        if g.instance(*gi).is_none() {
                            return Err(format!("GPU {gpu} has no GPU instance {gi}"));
                        }
                        if compute_instance.unwrap_or(0) != 0 {
                            return Err(format!(
                                "GPU instance {gi} on GPU {gpu} has one compute instance, id 0"
                            ));
                        }
                        Some((*gi, 0))
                    }
                    (Some(_), None) => {
                        return Err(format!("GPU {gpu} is in MIG mode: name a gpu_instance"))
                    }
                    (None, Some(_)) => return Err(format!("GPU {gpu} is not in MIG mode")),
                    (None, None) => None,
                };
                let usage = match [sm_percent, memory_percent, encoder_percent, decoder_percent]
                    .iter()
                    .any(|v| v.is_some())
                {
                    true => Some(crate::usage::ProcUse::default().with(
                        *sm_percent,
                        *memory_percent,
                        *encoder_percent,
                        *decoder_percent,
                    )?),
                    false => None,
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
                let name = g.model.name;
                let Some(added) = g.nvlink_errors_added.get_mut(*link as usize) else {
                    return Err(format!(
                        "GPU {gpu} ({name}) has {nvlinks} NVLink links, no link {link}"
                    ));
                };
                added[counter.nvml()] += count;
                Ok(format!(
                    "GPU {gpu} NVLink {link}: {count} more {counter:?} errors"
                ))
            }
            Fault::Fabric {
                gpu,
                state,
                registered,
            } => {
                let g = &mut self.gpus[*gpu as usize];
                if !g.model.nvswitch_fabric() {
                    return Err(format!(
                        "GPU {gpu} ({}) is not on an NVSwitch fabric",
                        g.model.name
                    ));
                }
                g.fabric_state = state.nvml();
                // NVML_ERROR_UNKNOWN (999) stands for a failed registration.
                g.fabric_status = if *registered { 0 } else { 999 };
                Ok(format!(
                    "GPU {gpu} fabric {state:?}, registered {registered}"
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
                g.pcie_replay = g.pcie_replay.saturating_add(*replays);
                Ok(format!(
                    "GPU {gpu} PCIe x{}, {} replays",
                    g.pcie_width, g.pcie_replay
                ))
            }
        }
    }

    /// Whether a parent-handle aggregate (memory, process lists) of GPU
    /// `gpu` is withheld from this caller: nvml.h gives it "in MIG mode ...
    /// only if the caller has appropriate privileges".
    pub fn aggregate_withheld(&self, gpu: u32) -> bool {
        !self.privileged && self.gpus[gpu as usize].mig.is_some()
    }

    /// `None` (NOT_FOUND) also for every pid when the caller does not share
    /// the host's PID namespace: NVML looks the pid up in the caller's.
    pub fn process_name(&self, pid: u32) -> Option<&str> {
        if !self.host_pid_namespace {
            return None;
        }
        self.gpus
            .iter()
            .flat_map(|g| g.procs.iter())
            .find(|p| p.pid == pid)
            .map(|p| p.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_is_the_integral_of_power() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let mut sim = Sim::new(&s, 1.0);
        let g = &mut sim.gpus[2];
        let mut numeric = 0.0;
        let dt = 0.001;
        let mut t = 0.0;
        while t < 30.0 {
            numeric += g.power_mw(t + dt / 2.0) * dt;
            t += dt;
        }
        g.advance_energy(30.0);
        assert!(
            (g.energy_mj - numeric).abs() / numeric < 1e-4,
            "{} vs {}",
            g.energy_mj,
            numeric
        );
    }

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

    #[test]
    fn readings_rise_and_fall_together() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let sim = Sim::new(&s, 1.0);
        let g = &sim.gpus[4];
        let samples: Vec<(f64, f64, u32, u32)> = (0..120)
            .map(|i| {
                let t = i as f64 * 0.5;
                (
                    g.util(t),
                    g.power_mw(t),
                    g.temperature(t),
                    g.clock(0, t).unwrap(),
                )
            })
            .collect();
        let (lo, hi) = samples.iter().fold((f64::MAX, f64::MIN), |(lo, hi), s| {
            (lo.min(s.0), hi.max(s.0))
        });
        assert!(
            hi - lo > 10.0,
            "utilization moves over a minute: {lo}..{hi}"
        );
        for a in &samples {
            for b in &samples {
                if a.0 > b.0 + 0.5 {
                    assert!(a.1 > b.1, "power follows utilization");
                    assert!(a.2 >= b.2, "temperature follows utilization");
                }
            }
        }
        assert!(
            samples.iter().all(|s| s.3 > g.model.idle_graphics_mhz),
            "a busy GPU runs above idle clocks"
        );
    }

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
