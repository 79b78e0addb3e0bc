//! Sampling one GPU: every enabled family's NVML calls, in base units, into
//! a `GpuReadings`. Runs on that GPU's own worker thread.
//!
//! One file per family group, named like the collector that exports it
//! (`src/collectors/<name>.rs` encodes what `sampler/<name>.rs` reads).
//! Each file owns the values it caches between polls. Field values of every
//! family arrive in one batched call first (`scalar.rs`); a family falls
//! back to its own calls only for what the batch did not deliver.

mod c2c;
mod carry;
mod clocks;
mod ecc;
mod fabric;
mod fan;
mod gpm;
mod info;
mod memory;
mod mig;
mod mode;
mod nvlink;
mod pcie;
mod power;
mod processes;
mod retirement;
mod scalar;
mod temperature;
mod throttle;
mod topology;
mod utilization;
mod workload_usage;

use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::{Device, Nvml};

use super::calls::{Calls, Got};
use super::fields::DriverBranch;
use super::raw::{self, DeviceHandle};
use super::watchdog::CallTracker;
use crate::family::Family;
use crate::schedule::Schedule;
use crate::snapshot::{GpuIdentity, GpuReadings};

/// The GPU being sampled, as every family's sampling sees it: the device,
/// how many polls came before this one (what cached values count in), and
/// the calls made on it so far.
pub struct Gpu<'s, 'n> {
    pub nvml: &'n Nvml,
    pub driver: DriverBranch,
    pub device: &'s Device<'n>,
    pub handle: DeviceHandle,
    pub poll: u64,
    pub calls: &'s mut Calls<'n>,
}

pub struct GpuSampler<'n> {
    nvml: &'n Nvml,
    driver: DriverBranch,
    device: Device<'n>,
    handle: DeviceHandle,
    pub calls: Calls<'n>,
    poll: u64,
    architecture: Option<DeviceArchitecture>,
    gpm: gpm::State<'n>,
    mig: mig::State<'n>,
    temperature: temperature::State,
    fan: fan::State,
    mode: mode::State,
    power: power::State,
    clocks: clocks::State,
    throttle: throttle::State,
    pcie: pcie::State,
    ecc: ecc::State,
    nvlink: nvlink::State,
    c2c: c2c::State,
    fabric: fabric::State,
    topology: topology::State,
    processes: processes::State,
    workload_usage: workload_usage::State,
    /// The last poll's readings, kept only while the schedule has families
    /// that skip polls (their readings are carried from here).
    last: Option<GpuReadings>,
}

impl<'n> GpuSampler<'n> {
    pub fn new(
        nvml: &'n Nvml,
        device: Device<'n>,
        index: u32,
        driver: DriverBranch,
        tracker: &'n CallTracker,
    ) -> Self {
        let handle = raw::device_handle(&device);
        GpuSampler {
            nvml,
            driver,
            device,
            handle,
            calls: Calls::new(index, tracker),
            poll: 0,
            architecture: None,
            gpm: gpm::State::default(),
            mig: mig::State::new(nvml, handle),
            temperature: temperature::State::default(),
            fan: fan::State::default(),
            mode: mode::State::default(),
            power: power::State::default(),
            clocks: clocks::State::default(),
            throttle: throttle::State::default(),
            pcie: pcie::State::default(),
            ecc: ecc::State::default(),
            nvlink: nvlink::State::default(),
            c2c: c2c::State::default(),
            fabric: fabric::State::default(),
            topology: topology::State::default(),
            processes: processes::State::default(),
            workload_usage: workload_usage::State::default(),
            last: None,
        }
    }

    /// Reads the identity strings and the UUID. Returns the UUID when it
    /// could be read.
    pub fn identity(&mut self) -> (Option<String>, GpuIdentity) {
        let mut g = Gpu {
            nvml: self.nvml,
            driver: self.driver,
            device: &self.device,
            handle: self.handle,
            poll: self.poll,
            calls: &mut self.calls,
        };
        let (uuid, identity, architecture) = info::sample(&mut g);
        self.architecture = architecture;
        (uuid, identity)
    }

    /// One poll: every family `schedule` has due now, the others it
    /// switches on carried from the last poll. `None` when the GPU is lost
    /// or the driver went away during the poll.
    pub fn sample(&mut self, schedule: &Schedule) -> Option<GpuReadings> {
        // Without per-family intervals every family is due: borrowed, so a
        // poll allocates no set. After a failed poll (or a new schedule
        // that skips) nothing is left to carry: read every family once.
        let skipping = schedule.skips() && self.last.is_some();
        let due_now = skipping.then(|| schedule.due(self.poll));
        let due = due_now.as_ref().unwrap_or(schedule.families());
        let GpuSampler {
            nvml,
            driver,
            device,
            handle,
            calls,
            poll,
            architecture,
            gpm,
            mig,
            temperature,
            fan,
            mode,
            power,
            clocks,
            throttle,
            pcie,
            ecc,
            nvlink,
            c2c,
            fabric,
            topology,
            processes,
            workload_usage,
            last,
        } = self;
        let families = due;
        let on = |f: Family| families.contains(f);
        calls.begin_sample(*poll);
        let mut g = Gpu {
            nvml,
            driver: *driver,
            device,
            handle: *handle,
            poll: *poll,
            calls: &mut *calls,
        };
        let r = &mut GpuReadings::default();
        let gpm_ids = gpm::request_ids(on(Family::GpmAllMetrics), *driver);
        let nvlink_totals = if on(Family::Nvlink) {
            nvlink.totals_requests(architecture.as_ref(), on(Family::NvlinkPerLink))
        } else {
            Vec::new()
        };
        let c2c_requests = c2c.requests(&g, on(Family::C2c));
        let scalar = scalar::sample(&mut g, families, &nvlink_totals, &c2c_requests);
        if on(Family::Mode) {
            mode.sample(&mut g, on(Family::ModeVgpuLicense), r);
        }
        // The utilization rates answer only while MIG is off: asked first,
        // their answer tells the MIG mode, read at a slow cadence, that it
        // flipped (`mig.rs`).
        let rates = if on(Family::Utilization) || on(Family::Mig) {
            let fam = if on(Family::Utilization) {
                Family::Utilization
            } else {
                Family::Mig
            };
            utilization::rates(&mut g, fam.name())
        } else {
            Got::Failed
        };
        let answered = match rates {
            Got::Value(_) => Some(true),
            Got::Absent => Some(false),
            Got::Failed => None,
        };
        // MIG mode decides whether MIG devices are enumerated.
        let mig_enabled = on(Family::Mig) && mig.mode(&mut g, answered, r);
        // NVML reports no engine utilization on a MIG-enabled GPU (per
        // instance activity comes from GPM instead): skip the other calls.
        if on(Family::Utilization) && !mig_enabled {
            utilization::sample(&mut g, rates, r);
        }
        if on(Family::Gpm) {
            gpm.sample(&mut g, r, mig_enabled, &gpm_ids, architecture.as_ref());
        }
        if on(Family::Memory) {
            memory::sample(&mut g, mig_enabled, r);
        }
        if on(Family::Temperature) {
            temperature.sample(&mut g, &scalar, r);
        }
        if on(Family::Fan) {
            fan.sample(&mut g, r);
        }
        // Before power: a change in the power throttle reasons has power
        // re-read its limits at once.
        if on(Family::Throttle) {
            throttle.sample(&mut g, &scalar, r);
        }
        if on(Family::Power) {
            let moved = on(Family::Throttle) && throttle.power_moved;
            power.sample(&mut g, &scalar, moved, r);
        }
        if on(Family::Clocks) {
            clocks.sample(&mut g, on(Family::ClocksApplications), r);
        }
        if on(Family::Pcie) {
            pcie.sample(&mut g, &scalar, r);
        }
        if on(Family::Ecc) {
            let by_location = on(Family::EccByLocation);
            ecc.sample(&mut g, &scalar, architecture.as_ref(), by_location, r);
        }
        if on(Family::Retirement) {
            retirement::sample(&mut g, &scalar, r);
        }
        if on(Family::Nvlink) {
            nvlink.sample(
                &mut g,
                &scalar,
                architecture.as_ref(),
                on(Family::NvlinkPerLink),
                r,
            );
        }
        if on(Family::C2c) {
            c2c.sample(&mut g, &scalar, r);
        }
        if on(Family::Fabric) {
            fabric.sample(&mut g, r);
        }
        topology.sample(&mut g, on(Family::Topology), r);
        if on(Family::Processes) || on(Family::ProcessMemory) {
            processes.sample(&mut g, on(Family::ProcessMemory), mig_enabled, r);
        }
        // After the process lists: ended pids are forgotten by them.
        if on(Family::WorkloadUsage) {
            workload_usage.sample(&mut g, mig_enabled, r);
        }
        if mig_enabled && (on(Family::Memory) || on(Family::Processes)) {
            r.mig_privileged = Some(!g.calls.aggregate_withheld);
        }
        if mig_enabled {
            let with_gpm = on(Family::Gpm) && gpm.supported(&mut g);
            r.mig = mig.sample(
                &mut *g.calls,
                with_gpm.then_some(gpm_ids.as_slice()),
                on(Family::MigBar1),
            );
        }
        if let Some(last) = last.as_ref().filter(|_| schedule.skips()) {
            carry::carry_skipped(schedule, families, mig_enabled, last, r);
        }
        *poll += 1;
        if calls.halted() {
            *last = None;
            None
        } else {
            *last = schedule.skips().then(|| r.clone());
            Some(std::mem::take(r))
        }
    }
}
