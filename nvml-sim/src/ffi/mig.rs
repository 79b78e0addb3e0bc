//! MIG: mode, MIG device handles, GPU and compute instances and their
//! profiles (NVML reference, "Multi Instance GPU Management").
//! A GPU instance holds one compute instance spanning it unless the
//! scenario splits it; each compute instance is a MIG device.

use super::*;
use crate::fleet::{Gpu, GpuInstance};
use crate::model::{ci_profile_index, MigProfile};

fn sorted_instances(g: &Gpu) -> Vec<&GpuInstance> {
    let mut v: Vec<&GpuInstance> = g
        .mig
        .as_ref()
        .map(|m| m.instances.iter().collect())
        .unwrap_or_default();
    v.sort_by_key(|i| i.id);
    v
}

fn mig_gpu<T>(device: nvmlDevice_t, f: impl FnOnce(&Gpu) -> R<T>) -> R<T> {
    with_gpu(device, |g, _| {
        if !g.model.mig_capable() || g.mig.is_none() {
            return Err(NOT_SUPPORTED);
        }
        f(g)
    })
}

nvml_fn! {
    fn nvmlDeviceGetMigMode(device: nvmlDevice_t, currentMode: *mut c_uint, pendingMode: *mut c_uint) {
        nonnull(currentMode)?;
        nonnull(pendingMode)?;
        let (c, p) = with_gpu(device, |g, _| {
            if !g.model.mig_capable() {
                return Err(NOT_SUPPORTED);
            }
            Ok((g.mig.is_some() as u32, g.mig_pending as u32))
        })?;
        out(currentMode, c)?;
        out(pendingMode, p)
    }
}

nvml_fn! {
    /// NVML reference: "Returns zero if MIG is not supported or enabled."
    fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) {
        nonnull(count)?;
        let v = with_gpu(device, |g, _| Ok(if g.mig.is_some() { g.model.mig.compute_slices } else { 0 }))?;
        out(count, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMigDeviceHandleByIndex(device: nvmlDevice_t, index: c_uint, migDevice: *mut nvmlDevice_t) {
        nonnull(migDevice)?;
        let h = with_gpu(device, |g, _| {
            let gen = g.mig.as_ref().map(|m| m.generation).ok_or(NOT_FOUND)?;
            let (gi, ci) = *g.mig_devices().get(index as usize).ok_or(NOT_FOUND)?;
            Ok(device_handle(Dev { gpu: g.index, mig: Some((gi, ci, gen)) }))
        })?;
        out(migDevice, h)
    }
}

nvml_fn! {
    fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, isMigDevice: *mut c_uint) {
        nonnull(isMigDevice)?;
        let v = with_dev(device, |_, d, _| Ok(d.mig.is_some() as u32))?;
        out(isMigDevice, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice: nvmlDevice_t, device: *mut nvmlDevice_t) {
        nonnull(device)?;
        let gpu = with_dev(migDevice, |_, d, _| if d.mig.is_some() { Ok(d.gpu) } else { Err(INVALID_ARGUMENT) })?;
        out(device, device_handle(Dev { gpu, mig: None }))
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) {
        nonnull(id)?;
        let v = with_dev(device, |_, d, _| d.mig.map(|m| m.0).ok_or(NOT_SUPPORTED))?;
        out(id, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) {
        nonnull(id)?;
        let v = with_dev(device, |_, d, _| d.mig.map(|m| m.1).ok_or(NOT_SUPPORTED))?;
        out(id, v)
    }
}

nvml_fn! {
    /// Whole GPUs report the full board; MIG devices their slice.
    fn nvmlDeviceGetAttributes_v2(device: nvmlDevice_t, attributes: *mut nvmlDeviceAttributes_t) {
        nonnull(attributes)?;
        let a = with_dev(device, |sim, d, _| {
            let g = &sim.gpus[d.gpu as usize];
            Ok(match d.mig {
                Some((gi, ci, _)) => {
                    let inst = g.instance(gi).ok_or(INVALID_ARGUMENT)?;
                    let p = &inst.profile;
                    let c = inst.compute_instance(ci).ok_or(INVALID_ARGUMENT)?;
                    nvmlDeviceAttributes_t {
                        multiprocessorCount: p.sm_count * c.slices / p.slices,
                        sharedCopyEngineCount: p.copy_engines,
                        sharedDecoderCount: p.decoders,
                        sharedEncoderCount: p.encoders,
                        sharedJpegCount: p.jpegs,
                        sharedOfaCount: p.ofas,
                        gpuInstanceSliceCount: p.slices,
                        computeInstanceSliceCount: c.slices,
                        memorySizeMB: p.memory_mib,
                    }
                }
                None => nvmlDeviceAttributes_t {
                    multiprocessorCount: g.model.sm_count,
                    sharedCopyEngineCount: 0,
                    sharedDecoderCount: 0,
                    sharedEncoderCount: 0,
                    sharedJpegCount: 0,
                    sharedOfaCount: 0,
                    gpuInstanceSliceCount: 0,
                    computeInstanceSliceCount: 0,
                    memorySizeMB: g.model.memory.total_mib,
                },
            })
        })?;
        out(attributes, a)
    }
}

fn profile_info(p: &MigProfile) -> nvmlGpuInstanceProfileInfo_t {
    nvmlGpuInstanceProfileInfo_t {
        id: p.id,
        isP2pSupported: 0,
        sliceCount: p.slices,
        instanceCount: p.instance_count,
        multiprocessorCount: p.sm_count,
        copyEngineCount: p.copy_engines,
        decoderCount: p.decoders,
        encoderCount: p.encoders,
        jpegCount: p.jpegs,
        ofaCount: p.ofas,
        memorySizeMB: p.memory_mib,
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstanceProfileInfo(device: nvmlDevice_t, profile: c_uint, info: *mut nvmlGpuInstanceProfileInfo_t) {
        nonnull(info)?;
        let v = mig_gpu(device, |g| g.model.profile_by_index(profile).map(profile_info).ok_or(NOT_SUPPORTED))?;
        out(info, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstanceProfileInfoV(device: nvmlDevice_t, profile: c_uint, info: *mut nvmlGpuInstanceProfileInfo_v2_t) {
        nonnull(info)?;
        if (*info).version != struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2) {
            return Err(VERSION_MISMATCH);
        }
        let p = mig_gpu(device, |g| g.model.profile_by_index(profile).cloned().ok_or(NOT_SUPPORTED))?;
        let i = &mut *info;
        let b = profile_info(&p);
        i.id = b.id;
        i.isP2pSupported = b.isP2pSupported;
        i.sliceCount = b.sliceCount;
        i.instanceCount = b.instanceCount;
        i.multiprocessorCount = b.multiprocessorCount;
        i.copyEngineCount = b.copyEngineCount;
        i.decoderCount = b.decoderCount;
        i.encoderCount = b.encoderCount;
        i.jpegCount = b.jpegCount;
        i.ofaCount = b.ofaCount;
        i.memorySizeMB = b.memorySizeMB;
        fill_chars(&mut i.name, &format!("MIG {}", p.name));
        Ok(())
    }
}

fn free_starts(g: &Gpu, p: &MigProfile) -> Vec<u32> {
    let mut used = vec![false; g.model.mig.memory_slices as usize];
    let mut slices = 0;
    for i in sorted_instances(g) {
        slices += i.profile.slices;
        for m in i.start..i.start + i.profile.mem_slices {
            if let Some(u) = used.get_mut(m as usize) {
                *u = true;
            }
        }
    }
    if slices + p.slices > g.model.mig.compute_slices {
        return Vec::new();
    }
    p.starts
        .iter()
        .copied()
        .filter(|&s| (s..s + p.mem_slices).all(|m| used.get(m as usize).is_some_and(|u| !u)))
        .collect()
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(device: nvmlDevice_t, profileId: c_uint, placements: *mut nvmlGpuInstancePlacement_t, count: *mut c_uint) {
        nonnull(count)?;
        let list = mig_gpu(device, |g| {
            let p = g.model.profile_by_id(profileId).ok_or(NOT_SUPPORTED)?;
            Ok(p.starts.iter().map(|&s| nvmlGpuInstancePlacement_t { start: s, size: p.mem_slices }).collect::<Vec<_>>())
        })?;
        if placements.is_null() {
            *count = list.len() as u32;
            return Ok(());
        }
        if (*count as usize) < list.len() {
            *count = list.len() as u32;
            return Err(INSUFFICIENT_SIZE);
        }
        *count = list.len() as u32;
        for (i, pl) in list.into_iter().enumerate() {
            placements.add(i).write(pl);
        }
        Ok(())
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstanceRemainingCapacity(device: nvmlDevice_t, profileId: c_uint, count: *mut c_uint) {
        nonnull(count)?;
        let v = mig_gpu(device, |g| {
            let p = g.model.profile_by_id(profileId).ok_or(NOT_SUPPORTED)?;
            // Greedy: how many more of this profile fit, one after another.
            let mut sim_gpu = g.clone();
            let mut n = 0;
            loop {
                let starts = free_starts(&sim_gpu, p);
                let Some(&s) = starts.first() else { break };
                let m = sim_gpu.mig.as_mut().expect("mig_gpu checked");
                m.instances.push(GpuInstance { id: 100 + n, profile: p.clone(), start: s, uuid: String::new(), load: 0.0, phase: 0.0, compute: Vec::new(), memory_used_mib: None });
                n += 1;
            }
            Ok(n)
        })?;
        out(count, v)
    }
}

nvml_fn! {
    /// The buffer must hold `instanceCount` of the profile (NVML reference).
    fn nvmlDeviceGetGpuInstances(device: nvmlDevice_t, profileId: c_uint, gpuInstances: *mut nvmlGpuInstance_t, count: *mut c_uint) {
        nonnull(count)?;
        nonnull(gpuInstances)?;
        let list = mig_gpu(device, |g| {
            g.model.profile_by_id(profileId).ok_or(NOT_SUPPORTED)?;
            let gen = g.mig.as_ref().map(|m| m.generation).unwrap_or(0);
            Ok(sorted_instances(g)
                .into_iter()
                .filter(|i| i.profile.id == profileId)
                .map(|i| gpu_instance_handle(g.index, i.id, gen))
                .collect::<Vec<_>>())
        })?;
        *count = list.len() as u32;
        for (i, h) in list.into_iter().enumerate() {
            gpuInstances.add(i).write(h);
        }
        Ok(())
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuInstanceById(device: nvmlDevice_t, id: c_uint, gpuInstance: *mut nvmlGpuInstance_t) {
        nonnull(gpuInstance)?;
        let h = mig_gpu(device, |g| {
            let gen = g.mig.as_ref().map(|m| m.generation).unwrap_or(0);
            g.instance(id).map(|i| gpu_instance_handle(g.index, i.id, gen)).ok_or(NOT_FOUND)
        })?;
        out(gpuInstance, h)
    }
}

/// Resolves a GPU instance handle through the usual device prelude.
fn with_gi<T>(h: nvmlGpuInstance_t, f: impl FnOnce(&Gpu, &GpuInstance, u8) -> R<T>) -> R<T> {
    let (gpu, gi, gen) = decode_gpu_instance(h).ok_or(INVALID_ARGUMENT)?;
    with_gpu(device_handle(Dev { gpu, mig: None }), |g, _| {
        let m = g.mig.as_ref().ok_or(INVALID_ARGUMENT)?;
        if m.generation != gen {
            return Err(INVALID_ARGUMENT);
        }
        let inst = g.instance(gi).ok_or(INVALID_ARGUMENT)?;
        f(g, inst, gen)
    })
}

nvml_fn! {
    fn nvmlGpuInstanceGetInfo(gpuInstance: nvmlGpuInstance_t, info: *mut nvmlGpuInstanceInfo_t) {
        nonnull(info)?;
        let v = with_gi(gpuInstance, |g, i, _| {
            Ok(nvmlGpuInstanceInfo_t {
                device: device_handle(Dev { gpu: g.index, mig: None }),
                id: i.id,
                profileId: i.profile.id,
                placement: nvmlGpuInstancePlacement_t { start: i.start, size: i.profile.mem_slices },
            })
        })?;
        out(info, v)
    }
}

fn ci_profile(p: &MigProfile, ci_profile: u32) -> R<nvmlComputeInstanceProfileInfo_t> {
    let slices = match ci_profile {
        0 => 1,
        1 => 2,
        2 => 3,
        3 => 4,
        4 => 7,
        5 => 8,
        6 => 6,
        7 => 1,
        _ => return Err(INVALID_ARGUMENT),
    };
    if slices > p.slices || ci_profile > 4 {
        return Err(NOT_SUPPORTED);
    }
    Ok(nvmlComputeInstanceProfileInfo_t {
        id: ci_profile,
        sliceCount: slices,
        instanceCount: p.slices / slices,
        multiprocessorCount: p.sm_count * slices / p.slices,
        sharedCopyEngineCount: p.copy_engines,
        sharedDecoderCount: p.decoders,
        sharedEncoderCount: p.encoders,
        sharedJpegCount: p.jpegs,
        sharedOfaCount: p.ofas,
    })
}

nvml_fn! {
    fn nvmlGpuInstanceGetComputeInstanceProfileInfo(gpuInstance: nvmlGpuInstance_t, profile: c_uint, engProfile: c_uint, info: *mut nvmlComputeInstanceProfileInfo_t) {
        nonnull(info)?;
        if engProfile != 0 {
            return Err(INVALID_ARGUMENT);
        }
        let v = with_gi(gpuInstance, |_, i, _| ci_profile(&i.profile, profile))?;
        out(info, v)
    }
}

nvml_fn! {
    fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(gpuInstance: nvmlGpuInstance_t, profile: c_uint, engProfile: c_uint, info: *mut nvmlComputeInstanceProfileInfo_v2_t) {
        nonnull(info)?;
        if (*info).version != struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2) {
            return Err(VERSION_MISMATCH);
        }
        if engProfile != 0 {
            return Err(INVALID_ARGUMENT);
        }
        let (b, gi_profile) = with_gi(gpuInstance, |_, i, _| Ok((ci_profile(&i.profile, profile)?, i.profile.clone())))?;
        let v = &mut *info;
        v.id = b.id;
        v.sliceCount = b.sliceCount;
        v.instanceCount = b.instanceCount;
        v.multiprocessorCount = b.multiprocessorCount;
        v.sharedCopyEngineCount = b.sharedCopyEngineCount;
        v.sharedDecoderCount = b.sharedDecoderCount;
        v.sharedEncoderCount = b.sharedEncoderCount;
        v.sharedJpegCount = b.sharedJpegCount;
        v.sharedOfaCount = b.sharedOfaCount;
        let name = if b.sliceCount == gi_profile.slices {
            format!("MIG {}", gi_profile.name)
        } else {
            format!("MIG {}c.{}", b.sliceCount, gi_profile.name)
        };
        fill_chars(&mut v.name, &name);
        Ok(())
    }
}

nvml_fn! {
    fn nvmlGpuInstanceGetComputeInstances(gpuInstance: nvmlGpuInstance_t, profileId: c_uint, computeInstances: *mut nvmlComputeInstance_t, count: *mut c_uint) {
        nonnull(count)?;
        nonnull(computeInstances)?;
        let list = with_gi(gpuInstance, |g, i, gen| {
            ci_profile(&i.profile, profileId)?;
            Ok(i.compute
                .iter()
                .filter(|c| ci_profile_index(c.slices) == profileId)
                .map(|c| compute_instance_handle(g.index, i.id, c.id, gen))
                .collect::<Vec<_>>())
        })?;
        *count = list.len() as u32;
        for (i, h) in list.into_iter().enumerate() {
            computeInstances.add(i).write(h);
        }
        Ok(())
    }
}

nvml_fn! {
    fn nvmlGpuInstanceGetComputeInstanceById(gpuInstance: nvmlGpuInstance_t, id: c_uint, computeInstance: *mut nvmlComputeInstance_t) {
        nonnull(computeInstance)?;
        let h = with_gi(gpuInstance, |g, i, gen| {
            i.compute_instance(id).map(|c| compute_instance_handle(g.index, i.id, c.id, gen)).ok_or(NOT_FOUND)
        })?;
        out(computeInstance, h)
    }
}

unsafe fn ci_info(h: nvmlComputeInstance_t, info: *mut nvmlComputeInstanceInfo_t) -> R {
    nonnull(info)?;
    let (gpu, gi, ci, gen) = decode_compute_instance(h).ok_or(INVALID_ARGUMENT)?;
    let v = with_gi(gpu_instance_handle(gpu, gi, gen), |g, i, gen| {
        let c = i.compute_instance(ci).ok_or(INVALID_ARGUMENT)?;
        Ok(nvmlComputeInstanceInfo_t {
            device: device_handle(Dev {
                gpu: g.index,
                mig: None,
            }),
            gpuInstance: gpu_instance_handle(g.index, i.id, gen),
            id: c.id,
            profileId: ci_profile_index(c.slices),
            placement: nvmlComputeInstancePlacement_t {
                start: c.start,
                size: c.slices,
            },
        })
    })?;
    out(info, v)
}

nvml_fn! {
    fn nvmlComputeInstanceGetInfo_v2(computeInstance: nvmlComputeInstance_t, info: *mut nvmlComputeInstanceInfo_t) {
        ci_info(computeInstance, info)
    }
}

nvml_fn! {
    fn nvmlComputeInstanceGetInfo(computeInstance: nvmlComputeInstance_t, info: *mut nvmlComputeInstanceInfo_t) {
        ci_info(computeInstance, info)
    }
}
