//! The simulated fleet at run time: the fleet and its timeline (here), one
//! GPU's state (`gpu`), the physics that moves its readings (`physics`)
//! and fault application (`apply`).

mod apply;
mod gpu;
mod physics;
pub mod ring;
pub mod usage;

pub use crate::identity::fnv;
pub use crate::value::unsupported;
pub use gpu::{ComputeInstance, Gpu, GpuInstance, Hang, Mig, Proc, RetiredPage, Violation, MIB};

use crate::fault::Fault;
use crate::scenario::Scenario;
use std::collections::{HashMap, VecDeque};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
    /// System calls that answer an error (scenario top-level `errors`).
    pub call_errors: Vec<(String, u32)>,
    /// Where each GPU sits on the host (`ffi/topology.rs` answers from it).
    pub topology: std::sync::Arc<crate::scenario::Topology>,
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl Sim {
    pub fn new(scenario: &Scenario, scale: f64) -> Sim {
        let mut next_pid = 30000;
        let gpus = scenario
            .gpus
            .iter()
            .enumerate()
            .map(|(i, spec)| Gpu::new(i as u32, spec, &mut next_pid))
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
            call_errors: scenario.call_errors.clone(),
            topology: scenario.topology.clone(),
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
