//! MIG (`ffi/mig.rs`): the board's profile table with every profile's
//! placements, the mode now and pending, and the GPU instances with their
//! placement, id, memory in use and compute instances (with UUIDs).

use super::{text, version, Facts, GpuOut, Walker, MIB, NOT_FOUND_FN};
use crate::model::{gi_profile_name, rule_instance_id, MigSection, ProfileEntry};
use crate::schema::{at, ComputeInstance, MigEntry, MigInstance};
use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_char, c_uint};
use std::time::Instant;

/// A profile the GPU has: its id, placements and table entry.
struct Profile {
    id: u32,
    places: Vec<nvmlGpuInstancePlacement_t>,
    entry: ProfileEntry,
}

/// A GPU instance seen through its MIG devices: its id, profile id and
/// entry.
struct Seen {
    gi: u32,
    profile_id: u32,
    entry: MigInstance,
}

impl Walker {
    pub(super) fn mig(&mut self, d: nvmlDevice_t, facts: &Facts, out: &mut GpuOut) {
        let mut profiles = self.profiles(d);
        let Ok((mig_cur, mig_pend)) = facts.mig else {
            return;
        };
        let compute = profiles.iter().map(|p| p.entry.slices).max().unwrap_or(7);
        let memory = profiles
            .iter()
            .flat_map(|p| p.places.iter().map(|x| x.start + x.size))
            .max()
            .unwrap_or(8);
        out.gpu.mig_pending = Some(mig_pend == 1);
        let seen = if mig_cur == 1 {
            self.instances(d, &profiles)
        } else {
            Vec::new()
        };
        // Each placed instance's GPU instance id, in its profile's table.
        for s in &seen {
            let Some(p) = profiles.iter_mut().find(|p| p.id == s.profile_id) else {
                continue;
            };
            let start = s.entry.placement.unwrap_or(0);
            let (slices, places) = (p.entry.slices, &p.places);
            let ids = p.entry.gpu_instance_ids.get_or_insert_with(|| {
                places
                    .iter()
                    .map(|x| rule_instance_id(slices, x.size, x.start))
                    .collect()
            });
            if let Some(i) = places.iter().position(|x| x.start == start) {
                ids[i] = s.gi;
            }
        }
        out.board.mig = Some(MigSection {
            supported: Some(true),
            compute_slices: Some(compute.clamp(1, 8)),
            memory_slices: Some(memory.clamp(1, 8)),
            profile: (!profiles.is_empty())
                .then(|| profiles.into_iter().map(|p| p.entry).collect()),
            exclusions: None,
        });
        if mig_cur == 1 {
            out.gpu.mig = Some(at(seen
                .into_iter()
                .map(|s| MigEntry::Full(s.entry))
                .collect()));
        }
    }

    /// Every GPU instance profile the GPU has, with its placements.
    fn profiles(&mut self, d: nvmlDevice_t) -> Vec<Profile> {
        let mut profiles = Vec::new();
        for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
            // SAFETY: a plain C struct; zero is a valid value.
            let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            info.version = version::<nvmlGpuInstanceProfileInfo_v2_t>(2);
            if call!(
                self,
                nvmlDeviceGetGpuInstanceProfileInfoV(d, index, &raw mut info)
            )
            .is_err()
            {
                continue;
            }
            let mut places = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; 16];
            let mut n: c_uint = places.len() as c_uint;
            if call!(
                self,
                nvmlDeviceGetGpuInstancePossiblePlacements_v2(
                    d,
                    info.id,
                    places.as_mut_ptr(),
                    &raw mut n
                )
            )
            .is_err()
                || n == 0
            {
                continue;
            }
            places.truncate(n as usize);
            let Some(profile_name) = gi_profile_name(index) else {
                continue;
            };
            let name = text(&info.name);
            profiles.push(Profile {
                id: info.id,
                entry: ProfileEntry {
                    name: name.rsplit(' ').next().unwrap_or(&name).to_string(),
                    profile: profile_name.into(),
                    id: info.id,
                    slices: info.sliceCount,
                    memory_slices: places[0].size,
                    instances: info.instanceCount,
                    placements: places.iter().map(|x| x.start).collect(),
                    gpu_instance_ids: None,
                    memory_mib: info.memorySizeMB,
                    sm_count: info.multiprocessorCount,
                    copy_engines: info.copyEngineCount,
                    decoders: info.decoderCount,
                    encoders: info.encoderCount,
                    jpegs: info.jpegCount,
                    ofas: info.ofaCount,
                },
                places,
            });
        }
        profiles
    }

    /// The GPU instances, from their MIG devices.
    fn instances(&mut self, d: nvmlDevice_t, profiles: &[Profile]) -> Vec<Seen> {
        let mut seen: Vec<Seen> = Vec::new();
        let mut count = 0;
        let _ = call!(self, nvmlDeviceGetMaxMigDeviceCount(d, &raw mut count));
        for i in 0..count {
            let mut md: nvmlDevice_t = std::ptr::null_mut();
            if call!(self, nvmlDeviceGetMigDeviceHandleByIndex(d, i, &raw mut md)).is_err() {
                continue;
            }
            let (mut gi, mut ci) = (0, 0);
            if call!(self, nvmlDeviceGetGpuInstanceId(md, &raw mut gi)).is_err()
                || call!(self, nvmlDeviceGetComputeInstanceId(md, &raw mut ci)).is_err()
            {
                continue;
            }
            let mut uuid = [0 as c_char; 96];
            let _ = call!(self, nvmlDeviceGetUUID(md, uuid.as_mut_ptr(), 96));
            let mut gih: nvmlGpuInstance_t = std::ptr::null_mut();
            // SAFETY: plain C structs; zero is a valid value.
            let mut gi_info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
            if call!(self, nvmlDeviceGetGpuInstanceById(d, gi, &raw mut gih)).is_err()
                || call!(self, nvmlGpuInstanceGetInfo(gih, &raw mut gi_info)).is_err()
            {
                continue;
            }
            let ci_slices = self.ci_slices(gih, ci);
            let at = match seen.iter().position(|s| s.gi == gi) {
                Some(at) => at,
                None => {
                    // SAFETY: a plain C struct; zero is a valid value.
                    let mut mm: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
                    mm.version = version::<nvmlMemory_v2_t>(2);
                    let used = call!(self, nvmlDeviceGetMemoryInfo_v2(md, &raw mut mm))
                        .ok()
                        .map(|()| mm.used / MIB);
                    seen.push(Seen {
                        gi,
                        profile_id: gi_info.profileId,
                        entry: MigInstance {
                            profile: profiles
                                .iter()
                                .find(|p| p.id == gi_info.profileId)
                                .map(|p| p.entry.name.clone())
                                .unwrap_or_default(),
                            placement: Some(gi_info.placement.start),
                            gpu_instance_id: Some(gi),
                            memory_used_mib: used,
                            compute_instances: Some(Vec::new()),
                            ..MigInstance::default()
                        },
                    });
                    seen.len() - 1
                }
            };
            seen[at]
                .entry
                .compute_instances
                .get_or_insert_with(Vec::new)
                .push(ComputeInstance {
                    id: ci,
                    slices: (ci_slices > 0).then_some(ci_slices),
                    uuid: Some(text(&uuid)),
                });
        }
        seen
    }

    /// The slices of compute instance `ci` (0 where NVML does not say).
    fn ci_slices(&mut self, gih: nvmlGpuInstance_t, ci: u32) -> u32 {
        let mut cih: nvmlComputeInstance_t = std::ptr::null_mut();
        // SAFETY: a plain C struct; zero is a valid value.
        let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
        if call!(
            self,
            nvmlGpuInstanceGetComputeInstanceById(gih, ci, &raw mut cih)
        )
        .is_ok()
            && call!(self, nvmlComputeInstanceGetInfo_v2(cih, &raw mut info)).is_ok()
        {
            info.placement.size
        } else {
            0
        }
    }
}
