//! ECC mode and error counters (`nvidia_gpu_ecc_enabled`,
//! `nvidia_gpu_ecc_errors_total`), and by location only with
//! `--collector.ecc.by-location` (`nvidia_gpu_ecc_location_errors_total`):
//! counters nobody exports are not read. Counters come from the field batch
//! where the driver has them; `nvmlDeviceGetMemoryErrorCounter` fills in
//! the rest, skipping the combinations the GPU does not support until the
//! next static refresh.

use std::collections::{HashMap, HashSet};

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, MemoryLocation};
use nvml_wrapper::enums::device::DeviceArchitecture;

use super::super::calls::{is_refresh, Cached, Got, SLOW_REFRESH_POLLS};
use super::super::fields;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{EccCount, EccError, EccLocation, EccScope, GpuReadings, ModePair};

#[derive(Default)]
pub struct State {
    /// (error, scope, location) combinations the GPU answered "not
    /// supported" for; skipped until the next static refresh.
    unsupported: HashSet<(u8, u8, u8)>,
    /// The ECC mode (current, pending): it changes only when an operator
    /// sets it (`nvidia-smi -e`) and the GPU is reset, and costs an H200
    /// 0.45 ms a call, so it is re-read every `SLOW_REFRESH_POLLS` polls.
    mode: Cached<(bool, bool)>,
}

impl State {
    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, '_>,
        scalar: &Scalar,
        architecture: Option<&DeviceArchitecture>,
        by_location: bool,
        r: &mut GpuReadings,
    ) {
        if is_refresh(g.poll) {
            self.unsupported.clear();
        }
        let fam = Family::Ecc.name();
        let (d, c) = (g.device, &mut *g.calls);
        let mode = self.mode.get_every(g.poll, SLOW_REFRESH_POLLS, false, || {
            c.run(fam, || d.is_ecc_enabled())
                .map(|m| (m.currently_enabled, m.pending_enabled))
        });
        let Some((current, pending)) = mode else {
            return;
        };
        r.ecc_mode = Some(ModePair { current, pending });
        if !current {
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
        let locations = locations(architecture);
        let located = if by_location { locations.len() } else { 0 };
        // Counters the field batch already delivered need no call.
        let mut from_fields: HashMap<(bool, bool, Option<usize>), u64> = HashMap::new();
        for (id, unc, agg, loc) in fields::ECC_FIELDS {
            if let Some(v) = scalar.u64(id) {
                from_fields.insert((unc, agg, loc), v);
            }
        }
        for (ei, (nv_err, err)) in errors.iter().enumerate() {
            for (si, (nv_scope, scope)) in scopes.iter().enumerate() {
                let (unc, agg) = (ei == 1, si == 1);
                for li in std::iter::once(None).chain((0..located).map(Some)) {
                    let location = li.map_or(EccLocation::All, |i| locations[i].1);
                    let mut push = |count| {
                        r.ecc_errors.push(EccCount {
                            error: *err,
                            scope: *scope,
                            location,
                            count,
                        });
                    };
                    if let Some(&count) = from_fields.get(&(unc, agg, li)) {
                        push(count);
                        continue;
                    }
                    let key = (ei as u8, si as u8, li.map_or(u8::MAX, |i| i as u8));
                    if self.unsupported.contains(&key) {
                        continue;
                    }
                    let got = match li {
                        None => c.run(fam, || d.total_ecc_errors(*nv_err, *nv_scope)),
                        Some(i) => c.run(fam, || {
                            d.memory_error_counter(*nv_err, *nv_scope, locations[i].0)
                        }),
                    };
                    match got {
                        Got::Value(count) => push(count),
                        Got::Absent => {
                            self.unsupported.insert(key);
                        }
                        Got::Failed => {}
                    }
                }
            }
        }
    }
}

/// NVML's memory locations with our label for each, in the order of the
/// location indexes of `fields::ECC_FIELDS`. Before Ampere, device memory
/// is `device_memory`; from Ampere on it is `dram`.
fn locations(architecture: Option<&DeviceArchitecture>) -> [(MemoryLocation, EccLocation); 8] {
    let dram = if architecture.is_some_and(|a| {
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
    [
        (MemoryLocation::L1Cache, EccLocation::L1Cache),
        (MemoryLocation::L2Cache, EccLocation::L2Cache),
        (MemoryLocation::Device, dram),
        (MemoryLocation::RegisterFile, EccLocation::RegisterFile),
        (MemoryLocation::Texture, EccLocation::TextureMemory),
        (MemoryLocation::Shared, EccLocation::TextureShm),
        (MemoryLocation::Cbu, EccLocation::Cbu),
        (MemoryLocation::SRAM, EccLocation::Sram),
    ]
}
