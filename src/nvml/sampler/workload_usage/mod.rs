//! What per-workload use accounting reads from NVML (`workload_usage`,
//! with `--workloads`): each process's utilization, accumulated into busy
//! seconds per pid; the MPS clients; the GPU's minor number; and, on a
//! MIG-enabled GPU, its compute slices. `src/workloads/usage.rs` turns
//! these into per-workload counters.
//!
//! This file asks the driver; `ledger.rs` keeps the accounts: what the
//! driver's answers mean, how each poll's window is checked, split and
//! added up.

mod ledger;

use std::time::{SystemTime, UNIX_EPOCH};

use nvml_wrapper::error::NvmlError;

use super::super::calls::{Cached, Got};
use super::super::raw::{self, ProcessList, ProcessUtilizationCall};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, UsageReadings};
use ledger::Ledger;

/// PROFILE_7_SLICE and PROFILE_4_SLICE, the whole-GPU GPU instance
/// profiles of 7-slice boards (A100, H100, B200) and 4-slice ones (A30,
/// RTX PRO 6000 Blackwell).
const WHOLE_GPU_PROFILES: [u32; 2] = [
    nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
    nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
];

pub struct State {
    /// The call this driver answers, once known.
    call: Option<ProcessUtilizationCall>,
    /// Entries the answer buffer holds: grown to what the driver asked for.
    capacity: usize,
    minor: Cached<u32>,
    slices: Cached<u32>,
    ledger: Ledger,
}

impl Default for State {
    fn default() -> Self {
        State {
            call: None,
            capacity: 16,
            minor: Cached::default(),
            slices: Cached::default(),
            ledger: Ledger::default(),
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, mig_enabled: bool, r: &mut GpuReadings) {
        let fam = Family::WorkloadUsage.name();
        let (nvml, h, device, poll) = (g.nvml, g.handle, g.device, g.poll);
        let c = &mut *g.calls;
        let minor_number = self
            .minor
            .get(poll, || c.run(fam, || device.minor_number()));
        let mut usage = UsageReadings {
            epoch: self.ledger.epoch(),
            minor_number,
            ..UsageReadings::default()
        };
        if mig_enabled {
            // nvml.h: no per-process utilization on MIG-enabled GPUs; the
            // instances' GPM activity stands in, weighed by their slices.
            usage.mig_compute_slices = self.slices.get(poll, || {
                c.run(fam, || {
                    let mut last = NvmlError::NotSupported;
                    for profile in WHOLE_GPU_PROFILES {
                        match device.profile_info(profile) {
                            Ok(info) => return Ok(info.slice_count),
                            Err(e) => last = e,
                        }
                    }
                    Err(last)
                })
            });
            r.usage = Some(usage);
            return;
        }
        usage.mps_clients = c
            .run(fam, || raw::running_processes(nvml, h, ProcessList::Mps))
            .value()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.pid)
            .collect();
        let before = now_us();
        self.ledger.note_listed(r, &usage.mps_clients, before);
        let (last_seen, known) = (self.ledger.last_seen(), self.call);
        let mut capacity = self.capacity;
        let mut chosen = known;
        let got = c.run(fam, || {
            let mut read = |call| raw::process_utilization(nvml, h, call, last_seen, &mut capacity);
            match known {
                Some(call) => read(call),
                // The versioned call (R550+) first; a driver without it
                // answers the older one, which every branch has.
                None => match read(ProcessUtilizationCall::Info) {
                    Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound) => {
                        chosen = Some(ProcessUtilizationCall::Samples);
                        read(ProcessUtilizationCall::Samples)
                    }
                    other => {
                        chosen = Some(ProcessUtilizationCall::Info);
                        other
                    }
                },
            }
        });
        self.call = chosen;
        self.capacity = capacity;
        match got {
            Got::Value(answer) => {
                // After the per-process call, so that the device's samples
                // reach at least as far as its answer.
                if let Some(seen) = self.ledger.device_samples_from() {
                    match c.run(fam, || raw::device_utilization_samples(nvml, h, seen)) {
                        Got::Value(samples) => self.ledger.device_samples(samples),
                        Got::Absent => self.ledger.no_device_samples(),
                        Got::Failed => {}
                    }
                }
                self.ledger.add(answer, before);
            }
            // Not supported on this GPU: its use is not measured.
            Got::Absent => {
                r.usage = Some(usage);
                return;
            }
            // A failed read changes nothing: the next one covers its window.
            Got::Failed => {}
        }
        self.ledger.forget(before);
        self.ledger.fill(&mut usage);
        r.usage = Some(usage);
    }
}
