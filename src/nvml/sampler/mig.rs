//! MIG: mode, GPU instances, their compute instances (MIG devices),
//! per-instance memory and GPM activity (`nvidia_gpu_mig_*`). Enumerated
//! again on every poll, so a layout change shows at the next poll: vanished
//! instances are simply not in the new list, and nothing keeps a handle
//! across polls.

use std::collections::{BTreeMap, HashMap};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::calls::{Cached, Calls, Got, SLOW_REFRESH_POLLS};
use super::super::fields::mig_profile_from_name;
use super::super::raw::{self, DeviceHandle};
use super::gpm::{Engines, GpmPair};
use super::{memory, Gpu};
use crate::family::Family;
use crate::snapshot::{
    Bar1Memory, GpuReadings, MigComputeInstance, MigGpuInstance, MigMemory, MigSize, ModePair,
};

impl State<'_> {
    /// MIG mode (current and pending); true when MIG is on now, so that
    /// the MIG devices are enumerated. An operator's setting (`nvidia-smi
    /// -mig`), read every `SLOW_REFRESH_POLLS` polls (171 us a call on the
    /// H200), and at once when `rates_answered` changed: NVML answers the
    /// utilization rates only while MIG is off ("On MIG-enabled GPUs,
    /// querying device utilization rates is not currently supported",
    /// nvml.h, nvmlDeviceGetUtilizationRates), so the poll's cheap rates
    /// call (2 us) tells when the current mode flipped.
    pub fn mode(
        &mut self,
        g: &mut Gpu<'_, '_>,
        rates_answered: Option<bool>,
        r: &mut GpuReadings,
    ) -> bool {
        let moved = rates_answered.is_some()
            && self.rates_answered.is_some()
            && rates_answered != self.rates_answered;
        self.rates_answered = rates_answered.or(self.rates_answered);
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        let mode = self.mode.get_every(g.poll, SLOW_REFRESH_POLLS, moved, || {
            c.run(Family::Mig.name(), || raw::mig_mode(nvml, h))
        });
        match mode {
            Some((current, pending)) => {
                r.mig_mode = Some(ModePair { current, pending });
                current
            }
            None => false,
        }
    }
}

/// What a MIG device (by UUID) is: those never change for one UUID, so
/// they are read once per MIG device.
#[derive(Debug, Clone)]
struct MigIdentity {
    gpu_instance: u32,
    compute_instance: u32,
    profile: Option<String>,
    size: Option<MigSize>,
}

pub struct State<'n> {
    nvml: &'n Nvml,
    parent: DeviceHandle,
    /// MIG mode (current, pending), read at the slow cadence.
    mode: Cached<(bool, bool)>,
    /// Whether the utilization rates answered at the last poll that asked.
    rates_answered: Option<bool>,
    max_devices: Option<u32>,
    known: HashMap<String, MigIdentity>,
    /// GPM samples per GPU instance, keyed by (gpu instance id, profile) so
    /// an instance recreated with another shape starts afresh.
    gpm: HashMap<(u32, String), GpmPair<'n>>,
    /// Decoder, JPEG and OFA engines per GPU instance, keyed alike.
    engines: HashMap<(u32, String), Option<Engines>>,
}

impl<'n> State<'n> {
    pub fn new(nvml: &'n Nvml, parent: DeviceHandle) -> Self {
        State {
            nvml,
            parent,
            mode: Cached::default(),
            rates_answered: None,
            max_devices: None,
            known: HashMap::new(),
            gpm: HashMap::new(),
            engines: HashMap::new(),
        }
    }

    /// `gpm_ids`: the GPM metrics to read per GPU instance, `None` for no
    /// GPM (not supported, or the family is off).
    /// `bar1`: read each instance's BAR1 too (family `mig.bar1`).
    pub fn sample(
        &mut self,
        c: &mut Calls<'_>,
        gpm_ids: Option<&[u32]>,
        bar1: bool,
    ) -> Vec<MigGpuInstance> {
        let fam = Family::Mig.name();
        let (nvml, parent) = (self.nvml, self.parent);
        if self.max_devices.is_none() {
            self.max_devices = c
                .run(fam, || raw::max_mig_device_count(nvml, parent))
                .value();
        }
        let Some(max) = self.max_devices else {
            return Vec::new();
        };

        let mut instances: BTreeMap<u32, MigGpuInstance> = BTreeMap::new();
        let mut first_device: BTreeMap<u32, DeviceHandle> = BTreeMap::new();
        let mut seen = Vec::new();
        for index in 0..max {
            let Got::Value(handle) = c.run(fam, || {
                match raw::mig_device_by_index(nvml, parent, index) {
                    // An empty slot in the MIG device table, not a failure.
                    Err(NvmlError::NotFound | NvmlError::InvalidArg) => {
                        Err(NvmlError::NotSupported)
                    }
                    other => other,
                }
            }) else {
                continue;
            };
            let Some(uuid) = c.run(fam, || raw::uuid(nvml, handle)).value() else {
                continue;
            };
            let identity = match self.known.get(&uuid) {
                Some(id) => id.clone(),
                None => {
                    let Some(gi) = c.run(fam, || raw::gpu_instance_id(nvml, handle)).value() else {
                        continue;
                    };
                    let Some(ci) = c
                        .run(fam, || raw::compute_instance_id(nvml, handle))
                        .value()
                    else {
                        continue;
                    };
                    let profile = c
                        .run(fam, || raw::name(nvml, handle))
                        .value()
                        .and_then(|n| mig_profile_from_name(&n));
                    // Once per MIG device: its GPU instance's slices and
                    // memory, which DCGM names the profile by.
                    let size = c
                        .run(fam, || raw::mig_size(nvml, handle))
                        .value()
                        .map(|(slices, memory_mib)| MigSize { slices, memory_mib });
                    let id = MigIdentity {
                        gpu_instance: gi,
                        compute_instance: ci,
                        profile,
                        size,
                    };
                    self.known.insert(uuid.clone(), id.clone());
                    id
                }
            };
            seen.push(uuid.clone());
            first_device.entry(identity.gpu_instance).or_insert(handle);
            let gi = instances
                .entry(identity.gpu_instance)
                .or_insert_with(|| MigGpuInstance {
                    gpu_instance: identity.gpu_instance,
                    profile: String::new(),
                    size: identity.size,
                    memory: None,
                    bar1: None,
                    engine_activity: Vec::new(),
                    activity: Vec::new(),
                    compute_instances: Vec::new(),
                });
            if gi.profile.is_empty() {
                if let Some(p) = &identity.profile {
                    gi.profile = p.clone();
                }
            }
            gi.compute_instances.push(MigComputeInstance {
                compute_instance: identity.compute_instance,
                mig_uuid: uuid,
            });
        }
        self.known.retain(|uuid, _| seen.contains(uuid));

        for (gi_id, gi) in &mut instances {
            gi.compute_instances.sort_by_key(|ci| ci.compute_instance);
            if let Some(&h) = first_device.get(gi_id) {
                // MIG devices of one GPU instance share its memory.
                gi.memory = memory::read(nvml, h, c, fam, false).map(|m| MigMemory {
                    total_bytes: m.total_bytes,
                    used_bytes: m.used_bytes,
                    free_bytes: m.free_bytes,
                    reserved_bytes: m.reserved_bytes,
                });
                if bar1 {
                    gi.bar1 = c.run(fam, || raw::bar1(nvml, h)).value().map(
                        |(total_bytes, used_bytes)| Bar1Memory {
                            total_bytes,
                            used_bytes,
                        },
                    );
                }
            }
        }

        let live: Vec<(u32, String)> = instances
            .values()
            .map(|gi| (gi.gpu_instance, gi.profile.clone()))
            .collect();
        self.gpm.retain(|key, _| live.contains(key));
        self.engines.retain(|key, _| live.contains(key));
        if let Some(ids) = gpm_ids {
            for gi in instances.values_mut() {
                let key = (gi.gpu_instance, gi.profile.clone());
                let engines = *self.engines.entry(key.clone()).or_insert_with(|| {
                    let h = *first_device.get(&gi.gpu_instance)?;
                    c.run(Family::Gpm.name(), || raw::mig_engine_counts(nvml, h))
                        .value()
                        .map(Engines::from_counts)
                });
                let pair = self.gpm.entry(key).or_default();
                let id = gi.gpu_instance;
                (gi.activity, gi.engine_activity) =
                    pair.step(nvml, c, ids, engines, |b| b.fill_mig(parent, id));
            }
        }
        instances.into_values().collect()
    }
}
