//! Sampling one GPU: every family's NVML calls, in base units, into a
//! `GpuReadings`. Runs on that GPU's own worker thread.

use std::collections::{BTreeMap, HashMap, HashSet};

use nvml_wrapper::enum_wrappers::device::{
    Brand, Clock as NvClock, ComputeMode as NvComputeMode, EccCounter, MemoryError, MemoryLocation,
    PerformancePolicy, PerformanceState, RetirementCause as NvCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enums::device::{DeviceArchitecture, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::errors::{classify, Class, ErrorBook};
use super::fields;
use super::mig::MigSampler;
use super::raw::{self, DeviceHandle, FieldValue, GpmBuffer};
use super::units;
use super::watchdog::CallTracker;
use crate::family::{Family, FamilySet};
use crate::snapshot::*;

/// Values that only change on reconfiguration are re-read this often (in
/// polls), which keeps the per-poll call count down.
const STATIC_REFRESH_POLLS: u64 = 60;

/// The outcome of one NVML call.
pub enum Got<T> {
    Value(T),
    /// Not supported here: absent, not an error.
    Absent,
    /// Failed (counted), or skipped because the GPU is lost.
    Failed,
}

impl<T> Got<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// Gathers the calls behind one cached list (thresholds, limits, maximum
/// clocks). Unsupported calls are left out; any failure fails the whole
/// list, so the cache retries it at the next poll instead of keeping an
/// incomplete one until its refresh.
pub struct Batch<T> {
    out: Vec<T>,
    failed: bool,
}

impl<T> Batch<T> {
    pub fn new() -> Self {
        Batch {
            out: Vec::new(),
            failed: false,
        }
    }

    /// The call's value, if it has one; notes a failure.
    pub fn take<V>(&mut self, got: Got<V>) -> Option<V> {
        match got {
            Got::Value(v) => Some(v),
            Got::Absent => None,
            Got::Failed => {
                self.failed = true;
                None
            }
        }
    }

    pub fn push(&mut self, item: T) {
        self.out.push(item);
    }

    pub fn finish(self) -> Got<Vec<T>> {
        if self.failed {
            Got::Failed
        } else {
            Got::Value(self.out)
        }
    }
}

/// Runs calls with stuck-call tracking and failure accounting. Once the GPU
/// is lost or the driver is gone, further calls are skipped: they would
/// only fail the same way.
pub struct Calls<'a> {
    pub gpu: u32,
    pub tracker: &'a CallTracker,
    pub errors: ErrorBook,
    pub lost: bool,
    pub driver_gone: bool,
    /// Calls that failed (not absent) during the current sample.
    pub failed_this_sample: u32,
    pub answered_this_sample: u32,
}

impl<'a> Calls<'a> {
    pub fn new(gpu: u32, tracker: &'a CallTracker) -> Self {
        Calls {
            gpu,
            tracker,
            errors: ErrorBook::default(),
            lost: false,
            driver_gone: false,
            failed_this_sample: 0,
            answered_this_sample: 0,
        }
    }

    pub fn halted(&self) -> bool {
        self.lost || self.driver_gone
    }

    pub fn run<T>(
        &mut self,
        family: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Got<T> {
        if self.halted() {
            return Got::Failed;
        }
        self.tracker.enter(family);
        let result = f();
        self.tracker.exit();
        match result {
            Ok(v) => {
                self.answered_this_sample += 1;
                Got::Value(v)
            }
            Err(e) => self.failure(family, &e),
        }
    }

    /// Accounts for an error that came back from a call (or from one entry
    /// of a batched call).
    pub fn failure<T>(&mut self, family: &'static str, e: &NvmlError) -> Got<T> {
        match classify(e) {
            Class::Absent => {
                self.answered_this_sample += 1;
                Got::Absent
            }
            Class::Lost => {
                self.lost = true;
                self.errors.record(family, "gpu_is_lost");
                Got::Failed
            }
            Class::DriverGone => {
                self.driver_gone = true;
                if self.errors.record(family, &super::errors::error_name(e)) {
                    tracing::warn!(gpu = self.gpu, family, error = %e, "NVML lost its driver during a call");
                }
                Got::Failed
            }
            Class::Error(name) => {
                self.failed_this_sample += 1;
                if self.errors.record(family, &name) {
                    tracing::warn!(gpu = self.gpu, family, error = %e,
                        "NVML call failed; the reading is absent (logged once per GPU, family and error)");
                }
                Got::Failed
            }
        }
    }
}

/// A value re-read every `STATIC_REFRESH_POLLS` polls, or on the next poll
/// after a failure.
struct Cached<T> {
    value: Option<T>,
    next_read: u64,
}

impl<T: Clone> Cached<T> {
    fn new() -> Self {
        Cached {
            value: None,
            next_read: 0,
        }
    }

    fn get(&mut self, poll: u64, read: impl FnOnce() -> Got<T>) -> Option<T> {
        if poll >= self.next_read {
            match read() {
                Got::Value(v) => {
                    self.value = Some(v);
                    self.next_read = poll + STATIC_REFRESH_POLLS;
                }
                Got::Absent => {
                    self.value = None;
                    self.next_read = poll + STATIC_REFRESH_POLLS;
                }
                Got::Failed => {
                    self.value = None;
                    self.next_read = poll + 1;
                }
            }
        }
        self.value.clone()
    }
}

/// Whole-GPU GPM: the previous sample is kept so that each poll yields
/// ratios over the last interval.
pub struct GpmPair<'n> {
    prev: Option<GpmBuffer<'n>>,
    scratch: Option<GpmBuffer<'n>>,
}

impl<'n> GpmPair<'n> {
    pub fn new() -> Self {
        GpmPair {
            prev: None,
            scratch: None,
        }
    }

    /// Takes a sample with `fill` and, when a previous one exists, returns
    /// the metric ratios between the two.
    pub fn step(
        &mut self,
        nvml: &'n Nvml,
        calls: &mut Calls<'_>,
        fill: impl FnOnce(&mut GpmBuffer<'n>) -> Result<(), NvmlError>,
    ) -> Vec<(GpmMetric, f64)> {
        let family = Family::Gpm.name();
        if self.scratch.is_none() {
            self.scratch = calls.run(family, || GpmBuffer::alloc(nvml)).value();
        }
        let Some(mut current) = self.scratch.take() else {
            return Vec::new();
        };
        if calls.run(family, || fill(&mut current)).value().is_none() {
            // Keep the buffer for next time; a failed fill says nothing
            // about the previous sample, which stays valid.
            self.scratch = Some(current);
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(prev) = &self.prev {
            let ids = gpm_request_ids();
            if let Some(results) = calls
                .run(family, || raw::gpm_metrics(nvml, prev, &current, &ids))
                .value()
            {
                let by_id: HashMap<u32, f64> = ids
                    .iter()
                    .zip(results)
                    .filter_map(|(id, r)| match r {
                        Ok(v) if v.is_finite() => Some((*id, v)),
                        Ok(_) => None,
                        Err(e) => {
                            let _ = calls.failure::<()>(family, &e);
                            None
                        }
                    })
                    .collect();
                out = gpm_ratios(&by_id);
            }
        }
        self.scratch = self.prev.take();
        self.prev = Some(current);
        out
    }
}

/// GPM metric ids requested per sample (nvml.h `nvmlGpmMetricId_t`).
fn gpm_request_ids() -> Vec<u32> {
    let mut ids = vec![1, 2, 3, 4, 5, 10, 11, 12, 13];
    ids.extend(30..=37); // NVDEC 0-7
    ids.extend(40..=47); // NVJPG 0-7
    ids.extend(50..=51); // NVOFA 0-1
    ids
}

/// Maps GPM results (percent) to ratios; per-engine decoder, JPEG and OFA
/// utilizations are averaged over the engines the GPU reports.
pub fn gpm_ratios(by_id: &HashMap<u32, f64>) -> Vec<(GpmMetric, f64)> {
    let single = [
        (1, GpmMetric::Graphics),
        (2, GpmMetric::Sm),
        (3, GpmMetric::SmOccupancy),
        (5, GpmMetric::Tensor),
        (10, GpmMetric::Dram),
        (11, GpmMetric::Fp64),
        (12, GpmMetric::Fp32),
        (13, GpmMetric::Fp16),
        (4, GpmMetric::Integer),
    ];
    let mut out: Vec<(GpmMetric, f64)> = single
        .iter()
        .filter_map(|(id, m)| by_id.get(id).map(|v| (*m, units::percent_to_ratio(*v))))
        .collect();
    for (range, metric) in [
        (30..=37, GpmMetric::NvDec),
        (40..=47, GpmMetric::NvJpg),
        (50..=51, GpmMetric::NvOfa),
    ] {
        let vals: Vec<f64> = range.filter_map(|id| by_id.get(&id).copied()).collect();
        if !vals.is_empty() {
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            out.push((metric, units::percent_to_ratio(mean)));
        }
    }
    out
}

pub struct GpuSampler<'n> {
    nvml: &'n Nvml,
    device: Device<'n>,
    handle: DeviceHandle,
    families: FamilySet,
    pub calls: Calls<'n>,
    poll: u64,
    architecture: Option<DeviceArchitecture>,
    gpm_supported: Cached<bool>,
    gpm: GpmPair<'n>,
    mig: MigSampler<'n>,
    thresholds: Cached<Vec<(Threshold, f64)>>,
    max_clocks: Cached<Vec<(Clock, f64)>>,
    power_static: Cached<Vec<(PowerLimit, f64)>>,
    pcie_max: Cached<(Option<u32>, Option<u32>)>,
    supported_reasons: Cached<u64>,
    fan_count: Cached<u32>,
    nvlink_links: Cached<u32>,
    /// (error, scope, location) combinations the GPU answered "not
    /// supported" for; skipped until the next static refresh.
    ecc_unsupported: HashSet<(u8, u8, u8)>,
    /// Calls with a field-value alternative that answered "not supported";
    /// skipped until the next static refresh.
    absent_calls: HashSet<&'static str>,
    process_names: HashMap<u32, String>,
}

impl<'n> GpuSampler<'n> {
    pub fn new(
        nvml: &'n Nvml,
        device: Device<'n>,
        index: u32,
        families: FamilySet,
        tracker: &'n CallTracker,
    ) -> Self {
        let handle = raw::device_handle(&device);
        GpuSampler {
            nvml,
            device,
            handle,
            families,
            calls: Calls::new(index, tracker),
            poll: 0,
            architecture: None,
            gpm_supported: Cached::new(),
            gpm: GpmPair::new(),
            mig: MigSampler::new(nvml, handle),
            thresholds: Cached::new(),
            max_clocks: Cached::new(),
            power_static: Cached::new(),
            pcie_max: Cached::new(),
            supported_reasons: Cached::new(),
            fan_count: Cached::new(),
            nvlink_links: Cached::new(),
            ecc_unsupported: HashSet::new(),
            absent_calls: HashSet::new(),
            process_names: HashMap::new(),
        }
    }

    fn on(&self, f: Family) -> bool {
        self.families.contains(f)
    }

    /// Reads the identity strings and the UUID. Returns the UUID when it
    /// could be read.
    pub fn identity(&mut self) -> (Option<String>, GpuIdentity) {
        let fam = "info";
        let d = &self.device;
        let c = &mut self.calls;
        let uuid = c.run(fam, || d.uuid()).value();
        let name = c.run(fam, || d.name()).value();
        let brand = c.run(fam, || d.brand()).value().map(brand_name);
        let arch = c.run(fam, || d.architecture()).value();
        self.architecture = arch.clone();
        let pci_bus_id = c.run(fam, || d.pci_info()).value().map(|p| p.bus_id);
        let serial = c.run(fam, || d.serial()).value();
        let vbios_version = c.run(fam, || d.vbios_version()).value();
        let compute_capability = c
            .run(fam, || d.cuda_compute_capability())
            .value()
            .map(|cc| format!("{}.{}", cc.major, cc.minor));
        let board_part_number = c.run(fam, || d.board_part_number()).value();
        let identity = GpuIdentity {
            name,
            brand,
            architecture: arch.map(|a| a.to_string()),
            pci_bus_id,
            serial,
            vbios_version,
            compute_capability,
            board_part_number,
        };
        (uuid, identity)
    }

    /// One poll of every enabled family. `None` when the GPU is lost or the
    /// driver went away during the poll.
    pub fn sample(&mut self) -> Option<GpuReadings> {
        self.calls.failed_this_sample = 0;
        self.calls.answered_this_sample = 0;
        if self.poll % STATIC_REFRESH_POLLS == 0 {
            self.ecc_unsupported.clear();
            self.absent_calls.clear();
        }
        let mut r = GpuReadings::default();
        let scalar = self.scalar_fields();
        let mig_enabled = self.mode_and_mig(&mut r);
        // NVML reports no engine utilization on a MIG-enabled GPU (per
        // instance activity comes from GPM instead): skip the five calls.
        if self.on(Family::Utilization) && !mig_enabled {
            self.utilization(&mut r);
        }
        if self.on(Family::Gpm) {
            self.gpm_whole(&mut r, mig_enabled);
        }
        if self.on(Family::Memory) {
            self.memory(&mut r);
        }
        if self.on(Family::Temperature) {
            self.temperature(&mut r, &scalar);
        }
        if self.on(Family::Fan) {
            self.fans(&mut r);
        }
        if self.on(Family::Power) {
            self.power(&mut r, &scalar);
        }
        if self.on(Family::Clocks) {
            self.clocks(&mut r);
        }
        if self.on(Family::Throttle) {
            self.throttle(&mut r, &scalar);
        }
        if self.on(Family::Pcie) {
            self.pcie(&mut r, &scalar);
        }
        if self.on(Family::Ecc) {
            self.ecc(&mut r, &scalar);
        }
        if self.on(Family::Retirement) {
            self.retirement(&mut r, &scalar);
        }
        if self.on(Family::Nvlink) {
            self.nvlink(&mut r, &scalar);
        }
        if self.on(Family::Processes) || self.on(Family::ProcessMemory) {
            self.processes(&mut r);
        }
        if self.on(Family::Mig) && mig_enabled {
            let gpm = self.on(Family::Gpm) && self.gpm_supported_now();
            r.mig = self.mig.sample(&mut self.calls, gpm);
        }
        self.poll += 1;
        if self.calls.halted() {
            None
        } else {
            Some(r)
        }
    }

    /// One batched field-values call for the scalar fields of all enabled
    /// families.
    fn scalar_fields(&mut self) -> HashMap<u32, FieldValue> {
        let mut ids: Vec<(u32, &'static str)> = Vec::new();
        if self.on(Family::Temperature) {
            ids.push((fields::MEMORY_TEMP, Family::Temperature.name()));
        }
        if self.on(Family::Pcie) {
            ids.push((fields::PCIE_TX_BYTES, Family::Pcie.name()));
            ids.push((fields::PCIE_RX_BYTES, Family::Pcie.name()));
            ids.push((fields::PCIE_REPLAY, Family::Pcie.name()));
        }
        if self.on(Family::Retirement) {
            let fam = Family::Retirement.name();
            for id in [
                fields::RECOVERY_ACTION,
                fields::RETIRED_SBE,
                fields::RETIRED_DBE,
                fields::RETIRED_PENDING,
                fields::REMAPPED_COR,
                fields::REMAPPED_UNC,
                fields::REMAPPED_PENDING,
                fields::REMAPPED_FAILURE,
            ] {
                ids.push((id, fam));
            }
        }
        if self.on(Family::Ecc) {
            for (id, ..) in fields::ECC_FIELDS {
                ids.push((id, Family::Ecc.name()));
            }
        }
        if self.on(Family::Power) {
            ids.push((fields::TOTAL_ENERGY, Family::Power.name()));
        }
        if self.on(Family::Throttle) {
            let fam = Family::Throttle.name();
            ids.push((fields::REASON_SW_POWER_CAP, fam));
            ids.push((fields::REASON_SYNC_BOOST, fam));
            ids.push((fields::PERF_POLICY_THERMAL, fam));
            for id in fields::thermal_and_brake_reason_ids(self.nvml.field_id_scheme()) {
                ids.push((id, fam));
            }
        }
        if self.on(Family::Nvlink) && self.poll % STATIC_REFRESH_POLLS == 0 {
            ids.push((fields::NVLINK_LINK_COUNT, Family::Nvlink.name()));
        }
        let mut out = HashMap::new();
        if ids.is_empty() {
            return out;
        }
        let requests: Vec<(u32, u32)> = ids.iter().map(|(id, _)| (*id, 0)).collect();
        let (nvml, handle) = (self.nvml, self.handle);
        if let Some(results) = self
            .calls
            .run("field_values", || {
                raw::field_values(nvml, handle, &requests)
            })
            .value()
        {
            for ((id, fam), res) in ids.iter().zip(results) {
                match res {
                    Ok(v) => {
                        out.insert(*id, v);
                    }
                    // An id this driver does not know comes back as an
                    // invalid argument: absent, like "not supported".
                    Err(NvmlError::InvalidArg) => {}
                    Err(e) => {
                        let _ = self.calls.failure::<()>(fam, &e);
                    }
                }
            }
        }
        out
    }

    fn mode_and_mig(&mut self, r: &mut GpuReadings) -> bool {
        let d = &self.device;
        let c = &mut self.calls;
        if self.families.contains(Family::Mode) {
            let fam = Family::Mode.name();
            r.persistence_mode = c.run(fam, || d.is_in_persistent_mode()).value();
            r.display_active = c.run(fam, || d.is_display_active()).value();
            r.compute_mode = c.run(fam, || d.compute_mode()).value().map(|m| match m {
                NvComputeMode::Default => ComputeMode::Default,
                NvComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
                NvComputeMode::Prohibited => ComputeMode::Prohibited,
                NvComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
            });
        }
        // MIG mode decides whether MIG devices are enumerated, so it is read
        // when either the mig family or GPM (per-instance) needs it.
        if self.families.contains(Family::Mig) {
            let (nvml, h) = (self.nvml, self.handle);
            if let Some((current, pending)) =
                c.run(Family::Mig.name(), || raw::mig_mode(nvml, h)).value()
            {
                r.mig_mode = Some(ModePair { current, pending });
                return current;
            }
        }
        false
    }

    fn utilization(&mut self, r: &mut GpuReadings) {
        let fam = Family::Utilization.name();
        let (nvml, h, d) = (self.nvml, self.handle, &self.device);
        let c = &mut self.calls;
        if let Some(u) = c.run(fam, || d.utilization_rates()).value() {
            r.utilization
                .push((Engine::Gpu, units::percent_to_ratio(f64::from(u.gpu))));
            r.utilization
                .push((Engine::Memory, units::percent_to_ratio(f64::from(u.memory))));
        }
        if let Some(u) = c.run(fam, || d.encoder_utilization()).value() {
            r.utilization.push((
                Engine::Encoder,
                units::percent_to_ratio(f64::from(u.utilization)),
            ));
        }
        if let Some(u) = c.run(fam, || d.decoder_utilization()).value() {
            r.utilization.push((
                Engine::Decoder,
                units::percent_to_ratio(f64::from(u.utilization)),
            ));
        }
        if let Some(u) = c.run(fam, || raw::jpg_utilization(nvml, h)).value() {
            r.utilization
                .push((Engine::Jpeg, units::percent_to_ratio(f64::from(u))));
        }
        if let Some(u) = c.run(fam, || raw::ofa_utilization(nvml, h)).value() {
            r.utilization
                .push((Engine::Ofa, units::percent_to_ratio(f64::from(u))));
        }
    }

    fn gpm_supported_now(&mut self) -> bool {
        let (nvml, h, poll) = (self.nvml, self.handle, self.poll);
        let c = &mut self.calls;
        self.gpm_supported
            .get(poll, || {
                c.run(Family::Gpm.name(), || raw::gpm_supported(nvml, h))
            })
            .unwrap_or(false)
    }

    fn gpm_whole(&mut self, r: &mut GpuReadings, mig_enabled: bool) {
        // With MIG on, activity is per GPU instance (nvmlGpmMigSampleGet).
        if mig_enabled || !self.gpm_supported_now() {
            return;
        }
        let (nvml, h) = (self.nvml, self.handle);
        r.activity = self.gpm.step(nvml, &mut self.calls, |b| b.fill(h));
    }

    fn memory(&mut self, r: &mut GpuReadings) {
        let fam = Family::Memory.name();
        let (nvml, h, d) = (self.nvml, self.handle, &self.device);
        r.memory = read_memory(nvml, h, &mut self.calls, fam);
        r.bar1 = self
            .calls
            .run(fam, || d.bar1_memory_info())
            .value()
            .map(|b| Bar1Memory {
                total_bytes: b.total,
                used_bytes: b.used,
            });
    }

    fn temperature(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Temperature.name();
        let d = &self.device;
        let c = &mut self.calls;
        if let Some(t) = c.run(fam, || d.temperature(TemperatureSensor::Gpu)).value() {
            r.temperatures.push((Sensor::Gpu, f64::from(t)));
        }
        if let Some(v) = scalar.get(&fields::MEMORY_TEMP) {
            r.temperatures.push((Sensor::Memory, v.as_f64()));
        }
        let poll = self.poll;
        r.temperature_thresholds = self
            .thresholds
            .get(poll, || {
                let list = [
                    (TemperatureThreshold::Shutdown, Threshold::Shutdown),
                    (TemperatureThreshold::Slowdown, Threshold::Slowdown),
                    (TemperatureThreshold::MemoryMax, Threshold::MemoryMax),
                    (TemperatureThreshold::GpuMax, Threshold::GpuMax),
                    (TemperatureThreshold::AcousticMin, Threshold::AcousticMin),
                    (
                        TemperatureThreshold::AcousticCurr,
                        Threshold::AcousticCurrent,
                    ),
                    (TemperatureThreshold::AcousticMax, Threshold::AcousticMax),
                ];
                let mut batch = Batch::new();
                for (nv, ours) in list {
                    if let Some(v) = batch.take(c.run(fam, || d.temperature_threshold(nv))) {
                        batch.push((ours, f64::from(v)));
                    }
                }
                batch.finish()
            })
            .unwrap_or_default();
    }

    fn fans(&mut self, r: &mut GpuReadings) {
        let fam = Family::Fan.name();
        let d = &self.device;
        let c = &mut self.calls;
        // No fan count (passively cooled boards): no fan series at all.
        let Some(n) = self
            .fan_count
            .get(self.poll, || c.run(fam, || d.num_fans()))
        else {
            return;
        };
        for i in 0..n {
            if let Some(s) = c.run(fam, || d.fan_speed(i)).value() {
                r.fan_speeds
                    .push((i, units::percent_to_ratio(f64::from(s))));
            }
        }
    }

    fn power(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Power.name();
        let d = &self.device;
        let c = &mut self.calls;
        r.power_usage_watts = c
            .run(fam, || d.power_usage())
            .value()
            .map(units::milliwatts_to_watts);
        if let Some(v) = c.run(fam, || d.enforced_power_limit()).value() {
            r.power_limits
                .push((PowerLimit::Enforced, units::milliwatts_to_watts(v)));
        }
        if let Some(v) = c.run(fam, || d.power_management_limit()).value() {
            r.power_limits
                .push((PowerLimit::Management, units::milliwatts_to_watts(v)));
        }
        r.energy_joules = match scalar.get(&fields::TOTAL_ENERGY).and_then(|v| v.as_u64()) {
            Some(mj) => Some(units::millijoules_to_joules(mj)),
            None => call_unless_absent(c, &mut self.absent_calls, "energy", fam, || {
                d.total_energy_consumption()
            })
            .map(units::millijoules_to_joules),
        };
        let statics = self
            .power_static
            .get(self.poll, || {
                let mut batch = Batch::new();
                if let Some(v) = batch.take(c.run(fam, || d.power_management_limit_default())) {
                    batch.push((PowerLimit::Default, units::milliwatts_to_watts(v)));
                }
                if let Some(v) = batch.take(c.run(fam, || d.power_management_limit_constraints())) {
                    batch.push((PowerLimit::Min, units::milliwatts_to_watts(v.min_limit)));
                    batch.push((PowerLimit::Max, units::milliwatts_to_watts(v.max_limit)));
                }
                batch.finish()
            })
            .unwrap_or_default();
        r.power_limits.extend(statics);
    }

    fn clocks(&mut self, r: &mut GpuReadings) {
        let fam = Family::Clocks.name();
        let d = &self.device;
        let c = &mut self.calls;
        let kinds = [
            (NvClock::Graphics, Clock::Graphics),
            (NvClock::SM, Clock::Sm),
            (NvClock::Memory, Clock::Memory),
            (NvClock::Video, Clock::Video),
        ];
        for (nv, ours) in kinds {
            if let Some(v) = c.run(fam, || d.clock_info(nv)).value() {
                r.clocks_hertz.push((ours, units::mhz_to_hertz(v)));
            }
        }
        r.max_clocks_hertz = self
            .max_clocks
            .get(self.poll, || {
                let mut batch = Batch::new();
                for (nv, ours) in kinds {
                    if let Some(v) = batch.take(c.run(fam, || d.max_clock_info(nv))) {
                        batch.push((ours, units::mhz_to_hertz(v)));
                    }
                }
                batch.finish()
            })
            .unwrap_or_default();
        r.performance_state = c
            .run(fam, || d.performance_state())
            .value()
            .and_then(pstate_number);
    }

    fn throttle(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Throttle.name();
        let d = &self.device;
        let c = &mut self.calls;
        let supported = self.supported_reasons.get(self.poll, || {
            c.run(fam, || d.supported_throttle_reasons().map(|b| b.bits()))
        });
        if let (Some(supported), Some(current)) = (
            supported,
            c.run(fam, || d.current_throttle_reasons().map(|b| b.bits()))
                .value(),
        ) {
            r.throttle_active = throttle_flags(supported, current);
        }
        let [sw_thermal, hw_thermal, brake] =
            fields::thermal_and_brake_reason_ids(self.nvml.field_id_scheme());
        let from_fields = [
            (fields::REASON_SW_POWER_CAP, ThrottleReason::SwPowerCap),
            (fields::REASON_SYNC_BOOST, ThrottleReason::SyncBoost),
            (sw_thermal, ThrottleReason::SwThermal),
            (hw_thermal, ThrottleReason::HwThermal),
            (brake, ThrottleReason::HwPowerBrake),
        ];
        for (id, reason) in from_fields {
            if let Some(ns) = scalar.get(&id).and_then(|v| v.as_u64()) {
                r.throttle_seconds
                    .push((reason, units::nanoseconds_to_seconds(ns)));
            }
        }
        // Drivers without the clock-event duration fields still report the
        // thermal policy violation time (field 75) in the same batch.
        if !r
            .throttle_seconds
            .iter()
            .any(|(have, _)| *have == ThrottleReason::SwThermal)
        {
            if let Some(ns) = scalar
                .get(&fields::PERF_POLICY_THERMAL)
                .and_then(|v| v.as_u64())
            {
                r.throttle_seconds
                    .push((ThrottleReason::SwThermal, units::nanoseconds_to_seconds(ns)));
            }
        }
        // Without any of those fields, the violation-status calls cover
        // power, thermal and sync boost.
        let fallback = [
            (PerformancePolicy::Power, ThrottleReason::SwPowerCap),
            (PerformancePolicy::Thermal, ThrottleReason::SwThermal),
            (PerformancePolicy::SyncBoost, ThrottleReason::SyncBoost),
        ];
        for (policy, reason) in fallback {
            if r.throttle_seconds.iter().any(|(have, _)| *have == reason) {
                continue;
            }
            if let Some(v) = c.run(fam, || d.violation_status(policy)).value() {
                r.throttle_seconds
                    .push((reason, units::nanoseconds_to_seconds(v.violation_time)));
            }
        }
    }

    fn pcie(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Pcie.name();
        let d = &self.device;
        let c = &mut self.calls;
        r.pcie.link_generation_current = c.run(fam, || d.current_pcie_link_gen()).value();
        r.pcie.link_width_current = c.run(fam, || d.current_pcie_link_width()).value();
        let (gen_max, width_max) = self
            .pcie_max
            .get(self.poll, || {
                let g = c.run(fam, || d.max_pcie_link_gen());
                let w = c.run(fam, || d.max_pcie_link_width());
                match (g, w) {
                    (Got::Failed, _) | (_, Got::Failed) => Got::Failed,
                    (g, w) => Got::Value((g.value(), w.value())),
                }
            })
            .unwrap_or((None, None));
        r.pcie.link_generation_max = gen_max;
        r.pcie.link_width_max = width_max;
        r.pcie.replay_errors = match scalar.get(&fields::PCIE_REPLAY).and_then(|v| v.as_u64()) {
            Some(v) => Some(v),
            None => call_unless_absent(c, &mut self.absent_calls, "pcie_replay", fam, || {
                d.pcie_replay_counter()
            })
            .map(u64::from),
        };
        r.pcie.tx_bytes = scalar.get(&fields::PCIE_TX_BYTES).and_then(|v| v.as_u64());
        r.pcie.rx_bytes = scalar.get(&fields::PCIE_RX_BYTES).and_then(|v| v.as_u64());
    }

    fn ecc(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Ecc.name();
        let d = &self.device;
        let c = &mut self.calls;
        let Some(mode) = c.run(fam, || d.is_ecc_enabled()).value() else {
            return;
        };
        r.ecc_mode = Some(ModePair {
            current: mode.currently_enabled,
            pending: mode.pending_enabled,
        });
        if !mode.currently_enabled {
            return;
        }
        let errors = [
            (MemoryError::Corrected, EccError::Corrected),
            (MemoryError::Uncorrected, EccError::Uncorrected),
        ];
        let scopes = [
            (EccCounter::Volatile, EccScope::Volatile),
            (EccCounter::Aggregate, EccScope::Aggregate),
        ];
        let dram = if self.architecture.as_ref().is_some_and(|a| {
            matches!(
                a,
                DeviceArchitecture::Kepler
                    | DeviceArchitecture::Maxwell
                    | DeviceArchitecture::Pascal
                    | DeviceArchitecture::Volta
            )
        }) {
            EccLocation::DeviceMemory
        } else {
            EccLocation::Dram
        };
        // Order matches the location indexes of `fields::ECC_FIELDS`.
        let locations = [
            (MemoryLocation::L1Cache, EccLocation::L1Cache),
            (MemoryLocation::L2Cache, EccLocation::L2Cache),
            (MemoryLocation::Device, dram),
            (MemoryLocation::RegisterFile, EccLocation::RegisterFile),
            (MemoryLocation::Texture, EccLocation::TextureMemory),
            (MemoryLocation::Shared, EccLocation::TextureShm),
            (MemoryLocation::Cbu, EccLocation::Cbu),
            (MemoryLocation::SRAM, EccLocation::Sram),
        ];
        // Counters the field batch already delivered need no call.
        let mut from_fields: HashMap<(bool, bool, Option<usize>), u64> = HashMap::new();
        for (id, unc, agg, loc) in fields::ECC_FIELDS {
            if let Some(v) = scalar.get(&id).and_then(|v| v.as_u64()) {
                from_fields.insert((unc, agg, loc), v);
            }
        }
        for (ei, (nv_err, err)) in errors.iter().enumerate() {
            for (si, (nv_scope, scope)) in scopes.iter().enumerate() {
                let (unc, agg) = (ei == 1, si == 1);
                for li in std::iter::once(None).chain((0..locations.len()).map(Some)) {
                    let location = li.map_or(EccLocation::All, |i| locations[i].1);
                    let push = |r: &mut GpuReadings, count| {
                        r.ecc_errors.push(EccCount {
                            error: *err,
                            scope: *scope,
                            location,
                            count,
                        })
                    };
                    if let Some(&count) = from_fields.get(&(unc, agg, li)) {
                        push(r, count);
                        continue;
                    }
                    let key = (ei as u8, si as u8, li.map_or(u8::MAX, |i| i as u8));
                    if self.ecc_unsupported.contains(&key) {
                        continue;
                    }
                    let got = match li {
                        None => c.run(fam, || d.total_ecc_errors(nv_err.clone(), nv_scope.clone())),
                        Some(i) => c.run(fam, || {
                            d.memory_error_counter(
                                nv_err.clone(),
                                nv_scope.clone(),
                                locations[i].0.clone(),
                            )
                        }),
                    };
                    match got {
                        Got::Value(count) => push(r, count),
                        Got::Absent => {
                            self.ecc_unsupported.insert(key);
                        }
                        Got::Failed => {}
                    }
                }
            }
        }
    }

    fn retirement(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Retirement.name();
        let (nvml, h, d) = (self.nvml, self.handle, &self.device);
        let c = &mut self.calls;
        let absent = &mut self.absent_calls;
        let field = |id: u32| scalar.get(&id).and_then(|v| v.as_u64());
        for (id, nv, ours, key) in [
            (
                fields::RETIRED_SBE,
                NvCause::MultipleSingleBitEccErrors,
                RetirementCause::SingleBitEcc,
                "retired_sbe",
            ),
            (
                fields::RETIRED_DBE,
                NvCause::DoubleBitEccError,
                RetirementCause::DoubleBitEcc,
                "retired_dbe",
            ),
        ] {
            let count = field(id).or_else(|| {
                call_unless_absent(c, absent, key, fam, || d.retired_pages(nv))
                    .map(|p| p.len() as u64)
            });
            if let Some(count) = count {
                r.retired_pages.push((ours, count));
            }
        }
        r.retired_pages_pending = field(fields::RETIRED_PENDING).map(|v| v != 0).or_else(|| {
            call_unless_absent(c, absent, "retired_pending", fam, || {
                d.are_pages_pending_retired()
            })
        });
        let remap_fields = [
            fields::REMAPPED_COR,
            fields::REMAPPED_UNC,
            fields::REMAPPED_PENDING,
            fields::REMAPPED_FAILURE,
        ]
        .map(field);
        r.remapped_rows = match remap_fields {
            [Some(cor), Some(unc), Some(pending), Some(failed)] => Some(RemappedRows {
                correctable: cor,
                uncorrectable: unc,
                pending: pending != 0,
                failed: failed != 0,
            }),
            _ => call_unless_absent(c, absent, "remapped_rows", fam, || {
                raw::remapped_rows(nvml, h)
            })
            .map(|(cor, unc, pending, failed)| RemappedRows {
                correctable: u64::from(cor),
                uncorrectable: u64::from(unc),
                pending,
                failed,
            }),
        };
        r.recovery_action = scalar
            .get(&fields::RECOVERY_ACTION)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok());
    }

    fn nvlink(&mut self, r: &mut GpuReadings, scalar: &HashMap<u32, FieldValue>) {
        let fam = Family::Nvlink.name();
        let (nvml, h) = (self.nvml, self.handle);
        let c = &mut self.calls;
        let from_field = scalar
            .get(&fields::NVLINK_LINK_COUNT)
            .and_then(|v| v.as_u64())
            .map(|n| n as u32);
        let links = self
            .nvlink_links
            .get(self.poll, || match from_field {
                Some(n) => Got::Value(n),
                // No link-count field: probe link states until the driver
                // says a link does not exist.
                None => {
                    let mut n = 0;
                    while n < nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS {
                        match c.run(fam, || raw::nvlink_active(nvml, h, n)) {
                            Got::Value(_) => n += 1,
                            _ => break,
                        }
                    }
                    Got::Value(n)
                }
            })
            .filter(|&n| n > 0);
        let Some(links) = links else {
            return;
        };
        let mut requests = Vec::new();
        for link in 0..links {
            for id in fields::PER_LINK {
                requests.push((id, link));
            }
            if let Some(id) = fields::nvlink_crc_data_id(link) {
                requests.push((id, 0));
            }
        }
        let Some(results) = c.run(fam, || raw::field_values(nvml, h, &requests)).value() else {
            return;
        };
        let mut per_link: BTreeMap<u32, HashMap<u32, FieldValue>> = BTreeMap::new();
        for (&(id, scope), res) in requests.iter().zip(results) {
            let link = if fields::PER_LINK.contains(&id) {
                scope
            } else {
                // Legacy unscoped id: the link is encoded in the id.
                (0..links)
                    .find(|l| fields::nvlink_crc_data_id(*l) == Some(id))
                    .unwrap_or(scope)
            };
            match res {
                Ok(v) => {
                    per_link.entry(link).or_default().insert(id, v);
                }
                Err(NvmlError::InvalidArg) => {}
                Err(e) => {
                    let _ = c.failure::<()>(fam, &e);
                }
            }
        }
        for link in 0..links {
            let vals = per_link.remove(&link).unwrap_or_default();
            let up = match vals.get(&fields::NVLINK_STATE).and_then(|v| v.as_u64()) {
                Some(s) => Some(s == 1),
                None => c.run(fam, || raw::nvlink_active(nvml, h, link)).value(),
            };
            let Some(up) = up else { continue };
            let u = |id| vals.get(&id).and_then(|v: &FieldValue| v.as_u64());
            let mut errors = Vec::new();
            for (id, kind) in [
                (fields::NVLINK_CRC_FLIT, NvLinkError::CrcFlit),
                (fields::NVLINK_REPLAY, NvLinkError::Replay),
                (fields::NVLINK_RECOVERY, NvLinkError::Recovery),
            ] {
                if let Some(v) = u(id) {
                    errors.push((kind, v));
                }
            }
            if let Some(v) = fields::nvlink_crc_data_id(link).and_then(u) {
                errors.push((NvLinkError::CrcData, v));
            }
            errors.sort_by_key(|(k, _)| *k);
            let tx_bytes = u(fields::NVLINK_TX_BYTES)
                .or_else(|| u(fields::NVLINK_TX_KIB).map(units::kib_to_bytes));
            let rx_bytes = u(fields::NVLINK_RX_BYTES)
                .or_else(|| u(fields::NVLINK_RX_KIB).map(units::kib_to_bytes));
            r.nvlinks.push(NvLink {
                link,
                up,
                errors,
                tx_bytes,
                rx_bytes,
            });
        }
    }

    fn processes(&mut self, r: &mut GpuReadings) {
        let fam = Family::Processes.name();
        let nvml = self.nvml;
        let d = &self.device;
        let c = &mut self.calls;
        let with_names = self.families.contains(Family::ProcessMemory);
        let compute = c.run(fam, || d.running_compute_processes()).value();
        let graphics = c.run(fam, || d.running_graphics_processes()).value();
        let live: HashSet<u32> = compute
            .iter()
            .chain(graphics.iter())
            .flatten()
            .map(|p| p.pid)
            .collect();
        self.process_names.retain(|pid, _| live.contains(pid));
        let names = &mut self.process_names;
        let mut convert = |list: Vec<ProcessInfo>| -> Vec<Process> {
            list.into_iter()
                .map(|p| {
                    let name = if with_names {
                        match names.get(&p.pid) {
                            Some(n) => Some(n.clone()),
                            None => {
                                let n = c
                                    .run(Family::ProcessMemory.name(), || {
                                        raw::process_name(nvml, p.pid)
                                    })
                                    .value();
                                if let Some(n) = &n {
                                    names.insert(p.pid, n.clone());
                                }
                                n
                            }
                        }
                    } else {
                        None
                    };
                    Process {
                        pid: p.pid,
                        name,
                        used_memory_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                        gpu_instance: p.gpu_instance_id,
                        compute_instance: p.compute_instance_id,
                    }
                })
                .collect()
        };
        r.compute_processes = compute.map(&mut convert);
        r.graphics_processes = graphics.map(&mut convert);
    }
}

/// A call standing in for a field the batch did not deliver; once it says
/// "not supported" it is skipped until the next static refresh.
fn call_unless_absent<T>(
    c: &mut Calls<'_>,
    absent: &mut HashSet<&'static str>,
    key: &'static str,
    family: &'static str,
    f: impl FnOnce() -> Result<T, NvmlError>,
) -> Option<T> {
    if absent.contains(key) {
        return None;
    }
    match c.run(family, f) {
        Got::Value(v) => Some(v),
        Got::Absent => {
            absent.insert(key);
            None
        }
        Got::Failed => None,
    }
}

/// Frame buffer memory: v2 (reserved reported apart) where the driver has
/// it, else v1 (where `used` includes reserved memory).
pub fn read_memory(
    nvml: &Nvml,
    h: DeviceHandle,
    c: &mut Calls<'_>,
    fam: &'static str,
) -> Option<Memory> {
    match c.run(fam, || raw::memory_v2(nvml, h)) {
        Got::Value((total, reserved, free, used)) => Some(Memory {
            total_bytes: total,
            used_bytes: used,
            free_bytes: free,
            reserved_bytes: Some(reserved),
        }),
        Got::Absent => c
            .run(fam, || raw::memory_v1(nvml, h))
            .value()
            .map(|(total, free, used)| Memory {
                total_bytes: total,
                used_bytes: used,
                free_bytes: free,
                reserved_bytes: None,
            }),
        Got::Failed => None,
    }
}

pub fn throttle_flags(supported: u64, current: u64) -> Vec<(ThrottleReason, bool)> {
    const BITS: [(u64, ThrottleReason); 9] = [
        (0x1, ThrottleReason::GpuIdle),
        (0x2, ThrottleReason::ApplicationsClocks),
        (0x4, ThrottleReason::SwPowerCap),
        (0x8, ThrottleReason::HwSlowdown),
        (0x10, ThrottleReason::SyncBoost),
        (0x20, ThrottleReason::SwThermal),
        (0x40, ThrottleReason::HwThermal),
        (0x80, ThrottleReason::HwPowerBrake),
        (0x100, ThrottleReason::DisplayClocks),
    ];
    BITS.iter()
        .filter(|(bit, _)| supported & bit != 0)
        .map(|(bit, reason)| (*reason, current & bit != 0))
        .collect()
}

fn pstate_number(p: PerformanceState) -> Option<u32> {
    use PerformanceState::*;
    Some(match p {
        Zero => 0,
        One => 1,
        Two => 2,
        Three => 3,
        Four => 4,
        Five => 5,
        Six => 6,
        Seven => 7,
        Eight => 8,
        Nine => 9,
        Ten => 10,
        Eleven => 11,
        Twelve => 12,
        Thirteen => 13,
        Fourteen => 14,
        Fifteen => 15,
        Unknown => return None,
    })
}

fn brand_name(b: Brand) -> String {
    let s = match b {
        Brand::Unknown => "Unknown",
        Brand::Quadro => "Quadro",
        Brand::Tesla => "Tesla",
        Brand::NVS => "NVS",
        Brand::GRID => "GRID",
        Brand::GeForce => "GeForce",
        Brand::Titan => "Titan",
        Brand::VApps => "NVIDIA Virtual Applications",
        Brand::VPC => "NVIDIA Virtual PC",
        Brand::VCS => "NVIDIA Virtual Compute Server",
        Brand::VWS => "NVIDIA RTX Virtual Workstation",
        Brand::CloudGaming => "NVIDIA Cloud Gaming",
        other => return format!("{other:?}"),
    };
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_supported_throttle_reasons_appear() {
        let flags = throttle_flags(0x1 | 0x40, 0x40 | 0x4);
        assert_eq!(
            flags,
            vec![
                (ThrottleReason::GpuIdle, false),
                (ThrottleReason::HwThermal, true)
            ]
        );
    }

    #[test]
    fn gpm_percent_becomes_ratio_and_engines_average() {
        let mut by_id = HashMap::new();
        by_id.insert(2, 50.0);
        by_id.insert(30, 10.0);
        by_id.insert(31, 30.0);
        let got = gpm_ratios(&by_id);
        assert!(got.contains(&(GpmMetric::Sm, 0.5)));
        assert!(got.contains(&(GpmMetric::NvDec, 0.2)));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::Graphics));
        assert!(!got.iter().any(|(m, _)| *m == GpmMetric::NvJpg));
    }

    #[test]
    fn pstates_map_to_numbers() {
        assert_eq!(pstate_number(PerformanceState::Zero), Some(0));
        assert_eq!(pstate_number(PerformanceState::Twelve), Some(12));
        assert_eq!(pstate_number(PerformanceState::Unknown), None);
    }

    #[test]
    fn cached_values_refresh_on_schedule_and_retry_failures() {
        let mut c: Cached<u32> = Cached::new();
        let mut reads = 0;
        assert_eq!(
            c.get(0, || {
                reads += 1;
                Got::Failed
            }),
            None
        );
        assert_eq!(
            c.get(1, || {
                reads += 1;
                Got::Value(7)
            }),
            Some(7)
        );
        assert_eq!(
            c.get(2, || {
                reads += 1;
                Got::Value(8)
            }),
            Some(7)
        );
        assert_eq!(
            c.get(1 + STATIC_REFRESH_POLLS, || {
                reads += 1;
                Got::Value(9)
            }),
            Some(9)
        );
        assert_eq!(reads, 3);
    }
}
