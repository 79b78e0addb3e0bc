//! The only `unsafe` in the exporter: NVML calls that nvml-wrapper does not
//! wrap, or wraps in a way that loses information (see docs/design.md):
//! per-link field values need their scope id, XID events their
//! MIG instance ids, MIG devices their instance ids; remapped rows and the
//! memory v1 fallback are not wrapped at all; process lists are read in
//! the entry layout the driver branch really writes (nvml-wrapper assumes
//! 24-byte `_v3` entries, R535/R545 write 32).
//!
//! Every function resolves its symbol first and answers
//! `FailedToLoadSymbol` (treated as "absent") when the library lacks it,
//! instead of the panic that `NvmlLib`'s convenience methods would raise.

// The FFI layer: the workspace denies `unsafe` everywhere else.
#![allow(unsafe_code)]
// bindgen spells C enum constants in lower case; they are matched as
// constants (a misspelling would fail to resolve and warn as a binding).
#![allow(non_upper_case_globals)]

use std::ffi::CStr;
use std::mem;
use std::sync::Arc;

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;

pub type DeviceHandle = nvmlDevice_t;

macro_rules! sym {
    ($nvml:expr, $name:ident) => {
        match $nvml.lib().$name.as_ref() {
            Ok(f) => *f,
            Err(e) => return Err(NvmlError::FailedToLoadSymbol(e.to_string())),
        }
    };
}

/// `NVML_STRUCT_VERSION(v)`: the struct size in the low bits, the version
/// in the top byte. bindgen drops the C macro, so it is rebuilt here.
const fn struct_version<T>(v: u32) -> u32 {
    (mem::size_of::<T>() as u32) | (v << 24)
}

pub fn device_handle(device: &nvml_wrapper::Device<'_>) -> DeviceHandle {
    // SAFETY: reading the handle out does not use it; it stays valid for
    // the lifetime of the `Nvml` the device borrows.
    unsafe { device.handle() }
}

/// A value from `nvmlDeviceGetFieldValues`, kept in the type NVML gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue {
    Unsigned(u64),
    Signed(i64),
    Double(f64),
}

impl FieldValue {
    pub fn as_u64(self) -> Option<u64> {
        match self {
            FieldValue::Unsigned(v) => Some(v),
            FieldValue::Signed(v) => u64::try_from(v).ok(),
            FieldValue::Double(v) if v >= 0.0 && v.is_finite() => Some(v as u64),
            FieldValue::Double(_) => None,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            FieldValue::Unsigned(v) => v as f64,
            FieldValue::Signed(v) => v as f64,
            FieldValue::Double(v) => v,
        }
    }
}

/// One `nvmlDeviceGetFieldValues` call for all `(field id, scope id)`
/// requests; per-field failures come back per entry. Field ids are sent
/// exactly as given (no renumbering).
pub fn field_values(
    nvml: &Nvml,
    device: DeviceHandle,
    requests: &[(u32, u32)],
) -> Result<Vec<Result<FieldValue, NvmlError>>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetFieldValues);
    // SAFETY: nvmlFieldValue_t is plain old data; zeroed is a valid value.
    let mut values: Vec<nvmlFieldValue_t> = requests
        .iter()
        .map(|&(id, scope)| {
            // SAFETY: nvmlFieldValue_t is plain old data: all zeros is a valid value.
            let mut v: nvmlFieldValue_t = unsafe { mem::zeroed() };
            v.fieldId = id;
            v.scopeId = scope;
            v
        })
        .collect();
    let count = i32::try_from(values.len()).map_err(|_| NvmlError::InvalidArg)?;
    // SAFETY: the buffer holds exactly `count` initialized entries.
    nvml_try(unsafe { f(device, count, values.as_mut_ptr()) })?;
    Ok(values
        .iter()
        .map(|v| {
            nvml_try(v.nvmlReturn)?;
            // SAFETY: the union member read is the one valueType names.
            let value = unsafe {
                match v.valueType {
                    nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => FieldValue::Double(v.value.dVal),
                    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => {
                        FieldValue::Unsigned(u64::from(v.value.uiVal))
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => {
                        FieldValue::Unsigned(v.value.ulVal)
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => {
                        FieldValue::Unsigned(v.value.ullVal)
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => {
                        FieldValue::Signed(v.value.sllVal)
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => {
                        FieldValue::Signed(i64::from(v.value.siVal))
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => {
                        FieldValue::Unsigned(u64::from(v.value.usVal))
                    }
                    other => return Err(NvmlError::UnexpectedVariant(other)),
                }
            };
            Ok(value)
        })
        .collect())
}

/// `(total, reserved, free, used)` from `nvmlDeviceGetMemoryInfo_v2`.
pub fn memory_v2(nvml: &Nvml, device: DeviceHandle) -> Result<(u64, u64, u64, u64), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMemoryInfo_v2);
    // SAFETY: POD struct, version set as nvml.h requires.
    let mut m: nvmlMemory_v2_t = unsafe { mem::zeroed() };
    m.version = struct_version::<nvmlMemory_v2_t>(2);
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut m) })?;
    Ok((m.total, m.reserved, m.free, m.used))
}

/// `(total, free, used)` from the v1 call; `used` includes reserved memory.
pub fn memory_v1(nvml: &Nvml, device: DeviceHandle) -> Result<(u64, u64, u64), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMemoryInfo);
    // SAFETY: POD out-parameter.
    let mut m: nvmlMemory_t = unsafe { mem::zeroed() };
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut m) })?;
    Ok((m.total, m.free, m.used))
}

/// `(total, used)` from `nvmlDeviceGetBAR1MemoryInfo` (a MIG device
/// handle answers for its GPU instance).
pub fn bar1(nvml: &Nvml, device: DeviceHandle) -> Result<(u64, u64), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetBAR1MemoryInfo);
    // SAFETY: POD out-parameter.
    let mut m: nvmlBAR1Memory_t = unsafe { mem::zeroed() };
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut m) })?;
    Ok((m.bar1Total, m.bar1Used))
}

/// `(correctable, uncorrectable, pending, failure)`.
pub fn remapped_rows(
    nvml: &Nvml,
    device: DeviceHandle,
) -> Result<(u32, u32, bool, bool), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetRemappedRows);
    let (mut cor, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: four valid out-pointers.
    nvml_try(unsafe {
        f(
            device,
            &raw mut cor,
            &raw mut unc,
            &raw mut pending,
            &raw mut failed,
        )
    })?;
    Ok((cor, unc, pending != 0, failed != 0))
}

pub fn mig_mode(nvml: &Nvml, device: DeviceHandle) -> Result<(bool, bool), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMigMode);
    let (mut current, mut pending) = (0u32, 0u32);
    // SAFETY: valid out-pointers.
    nvml_try(unsafe { f(device, &raw mut current, &raw mut pending) })?;
    Ok((current == 1, pending == 1))
}

pub fn max_mig_device_count(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMaxMigDeviceCount);
    let mut count = 0u32;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut count) })?;
    Ok(count)
}

pub fn mig_device_by_index(
    nvml: &Nvml,
    device: DeviceHandle,
    index: u32,
) -> Result<DeviceHandle, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMigDeviceHandleByIndex);
    // SAFETY: valid out-pointer; a null handle is only stored, never used
    // unless NVML reported success.
    let mut handle: nvmlDevice_t = std::ptr::null_mut();
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`), called
    // with NVML's device handle and a pointer to our own handle, live for the call.
    nvml_try(unsafe { f(device, index, &raw mut handle) })?;
    Ok(handle)
}

pub fn gpu_instance_id(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstanceId);
    let mut id = 0u32;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut id) })?;
    Ok(id)
}

/// The decoder, JPEG, OFA and encoder engines of a MIG device's GPU
/// instance (`nvmlDeviceGetAttributes_v2`, which answers for MIG device
/// handles).
pub fn mig_engine_counts(nvml: &Nvml, device: DeviceHandle) -> Result<[u32; 4], NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetAttributes_v2);
    // SAFETY: POD; zeroed is a valid value.
    let mut a: nvmlDeviceAttributes_t = unsafe { mem::zeroed() };
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut a) })?;
    Ok([
        a.sharedDecoderCount,
        a.sharedJpegCount,
        a.sharedOfaCount,
        a.sharedEncoderCount,
    ])
}

/// A MIG device's GPU instance slices and memory in MiB
/// (`nvmlDeviceGetAttributes_v2`: `gpuInstanceSliceCount`, `memorySizeMB`).
pub fn mig_size(nvml: &Nvml, device: DeviceHandle) -> Result<(u32, u64), NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetAttributes_v2);
    // SAFETY: POD; zeroed is a valid value.
    let mut a: nvmlDeviceAttributes_t = unsafe { mem::zeroed() };
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut a) })?;
    Ok((a.gpuInstanceSliceCount, a.memorySizeMB))
}

pub fn compute_instance_id(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetComputeInstanceId);
    let mut id = 0u32;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut id) })?;
    Ok(id)
}

fn read_string(
    buf_len: usize,
    call: impl FnOnce(*mut std::os::raw::c_char, u32) -> nvmlReturn_t,
) -> Result<String, NvmlError> {
    let mut buf = vec![0 as std::os::raw::c_char; buf_len];
    nvml_try(call(buf.as_mut_ptr(), buf_len as u32))?;
    // Guarantee termination even if the library filled the whole buffer.
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    // SAFETY: NUL-terminated above, within the buffer.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Ok(s.to_str()?.to_string())
}

/// UUID of any handle, MIG devices included (96 bytes as nvml.h sizes it).
pub fn uuid(nvml: &Nvml, device: DeviceHandle) -> Result<String, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetUUID);
    // SAFETY: the buffer is `len` bytes long.
    read_string(96, |p, len| unsafe { f(device, p, len) })
}

pub fn name(nvml: &Nvml, device: DeviceHandle) -> Result<String, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetName);
    // SAFETY: the buffer is `len` bytes long.
    read_string(96, |p, len| unsafe { f(device, p, len) })
}

pub fn process_name(nvml: &Nvml, pid: u32) -> Result<String, NvmlError> {
    let f = sym!(nvml, nvmlSystemGetProcessName);
    // SAFETY: the buffer is `len` bytes long.
    read_string(256, |p, len| unsafe { f(pid, p, len) })
}

/// A running process as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawProcess {
    pub pid: u32,
    /// `None`: NVML_VALUE_NOT_AVAILABLE (as under WDDM).
    pub used_memory: Option<u64>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessList {
    Compute,
    Graphics,
    /// MPS clients (their work runs in the MPS server's context).
    Mps,
}

/// Compute or graphics processes, in the entry layout this driver really
/// writes. nvml-wrapper reads `_v3` lists as 24-byte `nvmlProcessInfo_v2_t`
/// entries, but R535/R545 write 32 (`usedGpuCcProtectedMemory` appended
/// without a version bump: every entry after the first is misread, and
/// more entries than fit overrun the buffer). As nvitop decides: where
/// `nvmlDeviceGetRunningProcessDetailList` (R550+) is exported, that
/// versioned call is used; else a library with
/// `nvmlDeviceGetConfComputeMemSizeInfo` (R535+) writes 32-byte `_v3`
/// entries, an older one 24-byte entries. The buffer always holds 32 bytes
/// per entry, so even a wrong guess cannot overrun it.
pub fn running_processes(
    nvml: &Nvml,
    device: DeviceHandle,
    list: ProcessList,
) -> Result<Vec<RawProcess>, NvmlError> {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetRunningProcessDetailList.is_ok() {
        return process_detail_list(nvml, device, list);
    }
    let stride = if lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok() {
        mem::size_of::<nvmlProcessDetail_v1_t>()
    } else {
        mem::size_of::<nvmlProcessInfo_v2_t>()
    };
    let f = match list {
        ProcessList::Compute => sym!(nvml, nvmlDeviceGetComputeRunningProcesses_v3),
        ProcessList::Graphics => sym!(nvml, nvmlDeviceGetGraphicsRunningProcesses_v3),
        ProcessList::Mps => sym!(nvml, nvmlDeviceGetMPSComputeRunningProcesses_v3),
    };
    let mut count = 0u32;
    // Processes may start between the sizing call and the read: retry.
    for _ in 0..4 {
        let capacity = count as usize + 8;
        // SAFETY: POD; zeroed entries are valid.
        let mut buf: Vec<nvmlProcessDetail_v1_t> = vec![unsafe { mem::zeroed() }; capacity];
        // Entries of `stride` bytes; the buffer holds `capacity` of the
        // larger 32-byte ones, so at most `capacity` of either fit.
        count = capacity as u32;
        // SAFETY: `count` entries of up to 32 bytes fit in `buf`.
        let ret = unsafe { f(device, &raw mut count, buf.as_mut_ptr().cast()) };
        if ret == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            continue;
        }
        nvml_try(ret)?;
        // SAFETY: the buffer is `capacity * 32` initialized bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                buf.as_ptr().cast::<u8>(),
                capacity * mem::size_of::<nvmlProcessDetail_v1_t>(),
            )
        };
        return Ok(bytes
            .chunks_exact(stride)
            .take((count as usize).min(capacity))
            .map(process_from_entry)
            .collect());
    }
    Err(NvmlError::InsufficientSize(Some(count as usize)))
}

/// The first 24 bytes of either `_v3` entry layout.
fn process_from_entry(entry: &[u8]) -> RawProcess {
    let u32_at =
        |o: usize| u32::from_ne_bytes([entry[o], entry[o + 1], entry[o + 2], entry[o + 3]]);
    let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
    raw_process(u32_at(0), u64_at(8), u32_at(16), u32_at(20))
}

fn raw_process(pid: u32, used: u64, gi: u32, ci: u32) -> RawProcess {
    let instance = |id: u32| (id != u32::MAX).then_some(id);
    RawProcess {
        pid,
        used_memory: (used != u64::MAX).then_some(used),
        gpu_instance: instance(gi),
        compute_instance: instance(ci),
    }
}

fn process_detail_list(
    nvml: &Nvml,
    device: DeviceHandle,
    list: ProcessList,
) -> Result<Vec<RawProcess>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetRunningProcessDetailList);
    let mode = match list {
        ProcessList::Compute => 0, // NVML_PROCESS_MODE_COMPUTE
        ProcessList::Graphics => 1,
        ProcessList::Mps => 2,
    };
    let mut count = 0u32;
    for _ in 0..4 {
        let capacity = count as usize + 8;
        // SAFETY: POD; zeroed entries are valid.
        let mut buf: Vec<nvmlProcessDetail_v1_t> = vec![unsafe { mem::zeroed() }; capacity];
        let mut plist = nvmlProcessDetailList_v1_t {
            version: struct_version::<nvmlProcessDetailList_v1_t>(1),
            mode,
            numProcArrayEntries: capacity as u32,
            procArray: buf.as_mut_ptr(),
        };
        // SAFETY: procArray holds numProcArrayEntries entries.
        let ret = unsafe { f(device, &raw mut plist) };
        count = plist.numProcArrayEntries;
        if ret == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            continue;
        }
        nvml_try(ret)?;
        return Ok(buf
            .iter()
            .take((count as usize).min(capacity))
            .map(|p| raw_process(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId))
            .collect());
    }
    Err(NvmlError::InsufficientSize(Some(count as usize)))
}

/// One process's utilization since the `last_seen` of the query, in
/// percent, and the CPU time (µs) of its newest sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUtilization {
    pub pid: u32,
    pub timestamp_us: u64,
    pub sm: u32,
    pub memory: u32,
    pub encoder: u32,
    pub decoder: u32,
}

/// Which per-process utilization call a driver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessUtilizationCall {
    /// `nvmlDeviceGetProcessesUtilizationInfo` (R550+).
    Info,
    /// `nvmlDeviceGetProcessUtilization` (every branch).
    Samples,
}

/// Per-process utilization since `last_seen` (CPU µs; 0: the driver's
/// whole buffer): `Ok(None)` for NVML_ERROR_NOT_FOUND, no newer sample.
/// One call when `capacity` entries suffice (no sizing call first, whose
/// count a new sample could outdate); retried with the count NVML asks for,
/// which `capacity` keeps: a real R580 asked for more room than the one
/// entry it then wrote (tests/device/h200-580.159.04).
pub fn process_utilization(
    nvml: &Nvml,
    device: DeviceHandle,
    call: ProcessUtilizationCall,
    last_seen: u64,
    capacity: &mut usize,
) -> Result<Option<Vec<ProcessUtilization>>, NvmlError> {
    *capacity = (*capacity).max(1);
    for _ in 0..4 {
        let (ret, count, got) = match call {
            ProcessUtilizationCall::Info => utilization_info(nvml, device, last_seen, *capacity)?,
            ProcessUtilizationCall::Samples => {
                utilization_samples(nvml, device, last_seen, *capacity)?
            }
        };
        match ret {
            nvmlReturn_enum_NVML_ERROR_NOT_FOUND => return Ok(None),
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => {
                *capacity = (count as usize).max(*capacity) + 8;
            }
            _ => {
                nvml_try(ret)?;
                return Ok(Some(got));
            }
        }
    }
    Err(NvmlError::InsufficientSize(Some(*capacity)))
}

type Answer = (nvmlReturn_t, u32, Vec<ProcessUtilization>);

/// The return code, the count NVML wrote back, and the entries it filled
/// of `buf`: either call's struct, whose fields share their names.
macro_rules! answer {
    ($ret:expr, $count:expr, $buf:expr) => {{
        let count = $count;
        let got = $buf
            .iter()
            .take(count as usize)
            .map(|u| ProcessUtilization {
                pid: u.pid,
                timestamp_us: u.timeStamp,
                sm: u.smUtil,
                memory: u.memUtil,
                encoder: u.encUtil,
                decoder: u.decUtil,
            })
            .collect();
        ($ret, count, got)
    }};
}

fn utilization_info(
    nvml: &Nvml,
    device: DeviceHandle,
    last_seen: u64,
    capacity: usize,
) -> Result<Answer, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetProcessesUtilizationInfo);
    // SAFETY: POD; zeroed entries are valid.
    let mut buf: Vec<nvmlProcessUtilizationInfo_v1_t> = vec![unsafe { mem::zeroed() }; capacity];
    let mut info = nvmlProcessesUtilizationInfo_v1_t {
        version: struct_version::<nvmlProcessesUtilizationInfo_v1_t>(1),
        processSamplesCount: capacity as u32,
        lastSeenTimeStamp: last_seen,
        procUtilArray: buf.as_mut_ptr(),
    };
    // SAFETY: procUtilArray holds processSamplesCount entries.
    let ret = unsafe { f(device, &raw mut info) };
    Ok(answer!(ret, info.processSamplesCount, buf))
}

fn utilization_samples(
    nvml: &Nvml,
    device: DeviceHandle,
    last_seen: u64,
    capacity: usize,
) -> Result<Answer, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetProcessUtilization);
    // SAFETY: POD; zeroed entries are valid.
    let mut buf: Vec<nvmlProcessUtilizationSample_t> = vec![unsafe { mem::zeroed() }; capacity];
    let mut count = capacity as u32;
    // SAFETY: the buffer holds `count` entries.
    let ret = unsafe { f(device, buf.as_mut_ptr(), &raw mut count, last_seen) };
    Ok(answer!(ret, count, buf))
}

/// Room for the driver's whole utilization sample ring (72 samples in
/// open-gpu-kernel-modules' `ctrl2080perf.h`; an older header said 100),
/// so one call reads every sample newer than `last_seen`.
const RING_CAPACITY: usize = 128;

/// `nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)`: the device's SM
/// busy percent of each sample newer than `last_seen` (CPU µs), oldest
/// first, as (timestamp, percent); empty on NVML_ERROR_NOT_FOUND (no newer
/// sample). One call, into a buffer larger than the ring: no sizing call
/// whose count a new sample could outdate.
pub fn device_utilization_samples(
    nvml: &Nvml,
    device: DeviceHandle,
    last_seen: u64,
) -> Result<Vec<(u64, u32)>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetSamples);
    // SAFETY: POD; zeroed entries are valid.
    let mut buf: Vec<nvmlSample_t> = vec![unsafe { mem::zeroed() }; RING_CAPACITY];
    let mut count = RING_CAPACITY as u32;
    let mut kind: nvmlValueType_t = 0;
    // SAFETY: the buffer holds `count` entries; valid out-pointers.
    let ret = unsafe {
        f(
            device,
            nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES,
            last_seen,
            &raw mut kind,
            &raw mut count,
            buf.as_mut_ptr(),
        )
    };
    if ret == nvmlReturn_enum_NVML_ERROR_NOT_FOUND {
        return Ok(Vec::new());
    }
    nvml_try(ret)?;
    let mut got: Vec<(u64, u32)> = buf
        .iter()
        .take((count as usize).min(RING_CAPACITY))
        .map(|s| {
            // SAFETY: every member of the union is plain data; which one
            // was written is `kind`.
            let v = unsafe {
                match kind {
                    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => {
                        s.sampleValue.ullVal.min(u64::from(u32::MAX)) as u32
                    }
                    nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => s.sampleValue.dVal.round() as u32,
                    _ => s.sampleValue.uiVal,
                }
            };
            (s.timeStamp, v)
        })
        .collect();
    got.sort_by_key(|s| s.0);
    Ok(got)
}

/// JPEG or OFA engine utilization in percent.
pub fn jpg_utilization(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetJpgUtilization);
    let (mut util, mut period) = (0u32, 0u32);
    // SAFETY: valid out-pointers.
    nvml_try(unsafe { f(device, &raw mut util, &raw mut period) })?;
    Ok(util)
}

pub fn ofa_utilization(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetOfaUtilization);
    let (mut util, mut period) = (0u32, 0u32);
    // SAFETY: valid out-pointers.
    nvml_try(unsafe { f(device, &raw mut util, &raw mut period) })?;
    Ok(util)
}

/// What `nvmlDeviceGetGridLicensableFeatures_v4` says of vGPU software
/// licensing: `None` where the system does not support it (bare metal),
/// else the vGPU feature's state (`Some(None)`: no vGPU feature listed).
pub fn vgpu_license(nvml: &Nvml, device: DeviceHandle) -> Result<Option<Option<bool>>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetGridLicensableFeatures_v4);
    // SAFETY: nvmlGridLicensableFeatures_t is plain old data (no version
    // field): all zeros is a valid value.
    let mut v: nvmlGridLicensableFeatures_t = unsafe { mem::zeroed() };
    // SAFETY: valid out-pointer to a whole struct.
    nvml_try(unsafe { f(device, &raw mut v) })?;
    if v.isGridLicenseSupported == 0 {
        return Ok(None);
    }
    let count = (v.licensableFeaturesCount as usize).min(v.gridLicensableFeatures.len());
    Ok(Some(
        v.gridLicensableFeatures[..count]
            .iter()
            .find(|f| {
                f.featureCode == nvmlGridLicenseFeatureCode_t_NVML_GRID_LICENSE_FEATURE_CODE_VGPU
            })
            .map(|f| f.featureState > 0),
    ))
}

pub fn nvlink_active(nvml: &Nvml, device: DeviceHandle, link: u32) -> Result<bool, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetNvLinkState);
    let mut state: nvmlEnableState_t = 0;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, link, &raw mut state) })?;
    Ok(state == nvmlEnableState_enum_NVML_FEATURE_ENABLED)
}

pub fn gpm_supported(nvml: &Nvml, device: DeviceHandle) -> Result<bool, NvmlError> {
    let f = sym!(nvml, nvmlGpmQueryDeviceSupport);
    let mut s = nvmlGpmSupport_t {
        version: NVML_GPM_SUPPORT_VERSION,
        isSupportedDevice: 0,
    };
    // SAFETY: versioned POD out-parameter.
    nvml_try(unsafe { f(device, &raw mut s) })?;
    Ok(s.isSupportedDevice != 0)
}

/// A GPM sample buffer, freed on drop. Holds a raw pointer, so it is
/// neither Send nor Sync: it lives and dies in its GPU's worker thread.
pub struct GpmBuffer<'n> {
    nvml: &'n Nvml,
    handle: nvmlGpmSample_t,
}

impl<'n> GpmBuffer<'n> {
    pub fn alloc(nvml: &'n Nvml) -> Result<Self, NvmlError> {
        let f = sym!(nvml, nvmlGpmSampleAlloc);
        let mut handle: nvmlGpmSample_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        nvml_try(unsafe { f(&raw mut handle) })?;
        Ok(GpmBuffer { nvml, handle })
    }

    /// Fills this buffer from the whole GPU.
    pub fn fill(&mut self, device: DeviceHandle) -> Result<(), NvmlError> {
        let f = sym!(self.nvml, nvmlGpmSampleGet);
        // SAFETY: handle allocated by nvmlGpmSampleAlloc of this library.
        nvml_try(unsafe { f(device, self.handle) })
    }

    /// Fills this buffer from one MIG GPU instance of `device`.
    pub fn fill_mig(&mut self, device: DeviceHandle, gpu_instance: u32) -> Result<(), NvmlError> {
        let f = sym!(self.nvml, nvmlGpmMigSampleGet);
        // SAFETY: as above.
        nvml_try(unsafe { f(device, gpu_instance, self.handle) })
    }
}

impl Drop for GpmBuffer<'_> {
    fn drop(&mut self) {
        if let Ok(f) = self.nvml.lib().nvmlGpmSampleFree.as_ref() {
            // SAFETY: handle came from nvmlGpmSampleAlloc and is freed once.
            unsafe {
                f(self.handle);
            }
        }
    }
}

/// `nvmlGpmMetricsGet` between two samples; one result per requested id.
pub fn gpm_metrics(
    nvml: &Nvml,
    earlier: &GpmBuffer<'_>,
    later: &GpmBuffer<'_>,
    ids: &[u32],
) -> Result<Vec<Result<f64, NvmlError>>, NvmlError> {
    let f = sym!(nvml, nvmlGpmMetricsGet);
    // SAFETY: POD request; only `numMetrics` entries are read or written
    // (the array's declared size differs between header versions).
    let mut req: Box<nvmlGpmMetricsGet_t> = Box::new(unsafe { mem::zeroed() });
    let n = ids.len().min(req.metrics.len());
    req.version = NVML_GPM_METRICS_GET_VERSION;
    req.numMetrics = n as u32;
    req.sample1 = earlier.handle;
    req.sample2 = later.handle;
    for (slot, id) in req.metrics.iter_mut().zip(ids) {
        slot.metricId = *id;
    }
    // SAFETY: `f` is the library's own symbol (`sym!`); `req` is our own boxed request,
    // versioned, whose `numMetrics` fit its array, and both sample buffers are NVML's,
    // alive while borrowed.
    nvml_try(unsafe { f(&raw mut *req) })?;
    Ok(req.metrics[..n]
        .iter()
        .map(|m| nvml_try(m.nvmlReturn).map(|()| m.value))
        .collect())
}

/// An XID event as NVML delivered it, MIG instance ids included.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent {
    pub device: DeviceHandle,
    pub event_type: u64,
    pub data: u64,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// An NVML event set, shared by the XID thread (which waits on it) and the
/// threads that register GPUs on it under a deadline (`poller/xid.rs`).
/// NVML is thread-safe ("it is safe to make simultaneous NVML calls from
/// multiple threads", nvml.h), and the set is an opaque handle NVML owns
/// until `nvmlEventSetFree`, which runs when the last holder lets go: a
/// registration stuck in a hung driver keeps the set (and NVML) alive.
pub struct EventSet {
    nvml: Arc<Nvml>,
    handle: nvmlEventSet_t,
}

// SAFETY: see the type's comment: NVML calls may come from any thread, and
// the handle is only ever passed to NVML.
unsafe impl Send for EventSet {}
// SAFETY: as for Send; no method mutates the Rust side.
unsafe impl Sync for EventSet {}

impl EventSet {
    pub fn create(nvml: Arc<Nvml>) -> Result<Self, NvmlError> {
        let f = sym!(nvml, nvmlEventSetCreate);
        let mut handle: nvmlEventSet_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        nvml_try(unsafe { f(&raw mut handle) })?;
        Ok(EventSet { nvml, handle })
    }

    /// Registers the GPU at NVML index `index` for `event_types`; returns
    /// its device handle as events name it (an address, as a number, so
    /// that it may cross threads).
    pub fn register_index(&self, index: u32, event_types: u64) -> Result<usize, NvmlError> {
        let device = self.nvml.device_by_index(index)?;
        let handle = device_handle(&device);
        let f = sym!(self.nvml, nvmlDeviceRegisterEvents);
        // SAFETY: set handle from nvmlEventSetCreate, device from NVML.
        nvml_try(unsafe { f(handle, event_types, self.handle) })?;
        Ok(handle as usize)
    }

    /// Waits up to `timeout_ms`; `Timeout` when nothing arrived.
    pub fn wait(&self, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
        let f = sym!(self.nvml, nvmlEventSetWait_v2);
        // SAFETY: POD out-parameter.
        let mut data: nvmlEventData_t = unsafe { mem::zeroed() };
        // SAFETY: `f` is the library's own symbol (`sym!`); the event set is NVML's, alive
        // while `self` is, and the out-pointer is to our own struct, live for the call.
        nvml_try(unsafe { f(self.handle, &raw mut data, timeout_ms) })?;
        Ok(RawEvent {
            device: data.device,
            event_type: data.eventType,
            data: data.eventData,
            gpu_instance: data.gpuInstanceId,
            compute_instance: data.computeInstanceId,
        })
    }
}

impl Drop for EventSet {
    fn drop(&mut self) {
        if let Ok(f) = self.nvml.lib().nvmlEventSetFree.as_ref() {
            // SAFETY: handle came from nvmlEventSetCreate and is freed once.
            unsafe {
                f(self.handle);
            }
        }
    }
}

pub const XID_EVENT: u64 = nvmlEventTypeXidCriticalError as u64;

/// Tells nvml-sim at `path` which scenario its next `nvmlInit` builds,
/// through its own export `nvml_sim_select_scenario` (not part of NVML).
/// Returns the library handle: hold it until NVML has loaded the same
/// library, so the choice cannot be unloaded in between.
pub fn select_sim_scenario(
    path: &std::path::Path,
    scenario: &str,
) -> Result<libloading::Library, String> {
    type Select = unsafe extern "C" fn(*const std::os::raw::c_char) -> nvmlReturn_t;
    let key = std::ffi::CString::new(scenario).map_err(|_| "the name contains a NUL byte")?;
    // SAFETY: loading nvml-sim runs no initialization code with
    // preconditions; it is the library NVML loads next from the same path.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    // SAFETY: the symbol has this signature in nvml-sim (nvml-sim/src/host.rs).
    let select = unsafe { lib.get::<Select>(b"nvml_sim_select_scenario\0") }
        .map_err(|_| "not nvml-sim: it does not export nvml_sim_select_scenario".to_string())?;
    // SAFETY: `key` is a NUL-terminated string that outlives the call.
    if let Err(e) = nvml_try(unsafe { select(key.as_ptr()) }) {
        // nvml-sim keeps the reason for us to log; an older build does not.
        return Err(sim_last_error(&lib).unwrap_or_else(|| e.to_string()));
    }
    Ok(lib)
}

/// nvml-sim's message for its last failed selection or `nvmlInit`
/// (`nvml_sim_last_error`); `None` when it has none or lacks the export.
pub fn sim_last_error(lib: &libloading::Library) -> Option<String> {
    type LastError = unsafe extern "C" fn(*mut std::os::raw::c_char, u32) -> nvmlReturn_t;
    // SAFETY: the symbol has this signature in nvml-sim (src/host.rs).
    let last = unsafe { lib.get::<LastError>(b"nvml_sim_last_error\0") }.ok()?;
    let mut buf = [0 as std::os::raw::c_char; 1024];
    // SAFETY: the buffer is 1024 bytes; the export NUL-terminates in it.
    nvml_try(unsafe { last(buf.as_mut_ptr(), buf.len() as u32) }).ok()?;
    // SAFETY: NUL-terminated within `buf`, as above.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    (!text.is_empty()).then(|| text.into_owned())
}

/// What nvml-sim's loader changed or left out of the scenario last
/// selected (identifiers made unique, an excerpt of a capture, values an
/// import rounded), one `file:line: message` each
/// (`nvml_sim_last_warnings`); none from a build that lacks the export.
pub fn sim_warnings(lib: &libloading::Library) -> Vec<String> {
    type Warnings = unsafe extern "C" fn(*mut std::os::raw::c_char, u32) -> nvmlReturn_t;
    // SAFETY: the symbol has this signature in nvml-sim (src/host.rs).
    let Ok(warnings) = (unsafe { lib.get::<Warnings>(b"nvml_sim_last_warnings\0") }) else {
        return Vec::new();
    };
    let mut buf = vec![0 as std::os::raw::c_char; 1 << 16];
    // SAFETY: the buffer is 64 KiB; the export NUL-terminates in it.
    if nvml_try(unsafe { warnings(buf.as_mut_ptr(), buf.len() as u32) }).is_err() {
        return Vec::new();
    }
    // SAFETY: NUL-terminated within `buf`, as above.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    text.lines().map(str::to_string).collect()
}

/// Whether the dynamic loader can load the library at `path` at all: a
/// file that is not a shared library for this machine is a configuration
/// mistake, not a driver that may come back.
pub fn check_loadable(path: &std::path::Path) -> Result<(), String> {
    // SAFETY: as for NVML's own load of the same file: a driver library's
    // initializers have no preconditions. It is unloaded again at once.
    unsafe { libloading::Library::new(path) }
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What `nvmlDeviceGetGpuFabricInfo[V]` says of a GPU (Hopper and newer on
/// NVSwitch systems): the registration state (`NVML_GPU_FABRIC_STATE_*`: 1
/// not started, 2 in progress, 3 completed) and whether it succeeded, the
/// clique and cluster, and the health mask (v2, R550+) and summary (v3,
/// R580+) where the struct version carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFabric {
    pub state: u32,
    pub registered: bool,
    pub clique_id: u32,
    pub cluster_uuid: [u8; 16],
    pub health_mask: Option<u32>,
    pub health_summary: Option<u8>,
}

/// The fabric info struct versions, newest first: `nvmlDeviceGetGpuFabricInfoV`
/// with `nvmlGpuFabricInfo_v3_t` (13.0 header, R580: adds `healthSummary`),
/// then `_v2_t` (12.4, R550: `version` first, `healthMask` last), then the
/// unversioned `nvmlDeviceGetGpuFabricInfo` (DEPRECATED(13.0)). Layouts in
/// NVIDIA/go-nvml gen/nvml/nvml.h at 9da9e13, lines 3633-3678.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FabricCall {
    V3,
    V2,
    V1,
}

impl FabricCall {
    /// The next older call to try after this one answered that it does not
    /// know the struct version or is not exported.
    pub fn older(self) -> Option<FabricCall> {
        match self {
            FabricCall::V3 => Some(FabricCall::V2),
            FabricCall::V2 => Some(FabricCall::V1),
            FabricCall::V1 => None,
        }
    }
}

/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`: the library predates the struct
/// version asked for (nvml-wrapper 0.13 passes it on as `UnexpectedVariant`).
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: u32 = 25;

/// One fabric info call. `NotSupported` where the GPU has no fabric,
/// including a state of `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`.
pub fn gpu_fabric_info(
    nvml: &Nvml,
    device: DeviceHandle,
    call: FabricCall,
) -> Result<RawFabric, NvmlError> {
    let raw = match call {
        FabricCall::V3 | FabricCall::V2 => {
            let f = sym!(nvml, nvmlDeviceGetGpuFabricInfoV);
            // SAFETY: POD; the v3 buffer is large enough for either
            // version, and `version` tells the library which one to fill.
            let mut info: nvmlGpuFabricInfo_v3_t = unsafe { mem::zeroed() };
            info.version = if call == FabricCall::V3 {
                struct_version::<nvmlGpuFabricInfo_v3_t>(3)
            } else {
                struct_version::<nvmlGpuFabricInfo_v2_t>(2)
            };
            // SAFETY: `f` is the library's own symbol of the type nvml.h declares
            // (`sym!`); the device handle came from NVML and the out-pointer is to our own
            // struct, live for the call.
            nvml_try(unsafe { f(device, &raw mut info) })?;
            RawFabric {
                state: u32::from(info.state),
                registered: info.status == nvmlReturn_enum_NVML_SUCCESS,
                clique_id: info.cliqueId,
                cluster_uuid: info.clusterUuid,
                health_mask: Some(info.healthMask),
                health_summary: (call == FabricCall::V3).then_some(info.healthSummary),
            }
        }
        FabricCall::V1 => {
            let f = sym!(nvml, nvmlDeviceGetGpuFabricInfo);
            // SAFETY: POD out-parameter.
            let mut info: nvmlGpuFabricInfo_t = unsafe { mem::zeroed() };
            // SAFETY: `f` is the library's own symbol of the type nvml.h declares
            // (`sym!`); the device handle came from NVML and the out-pointer is to our own
            // struct, live for the call.
            nvml_try(unsafe { f(device, &raw mut info) })?;
            RawFabric {
                state: u32::from(info.state),
                registered: info.status == nvmlReturn_enum_NVML_SUCCESS,
                clique_id: info.cliqueId,
                cluster_uuid: info.clusterUuid,
                health_mask: None,
                health_summary: None,
            }
        }
    };
    if raw.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED {
        return Err(NvmlError::NotSupported);
    }
    Ok(raw)
}

/// GPU temperature through `nvmlDeviceGetTemperatureV` (R570+), the
/// successor of the DEPRECATED(13.0) `nvmlDeviceGetTemperature`.
pub fn temperature_v(nvml: &Nvml, device: DeviceHandle) -> Result<i32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetTemperatureV);
    // SAFETY: versioned POD in/out parameter.
    let mut t: nvmlTemperature_v1_t = unsafe { mem::zeroed() };
    t.version = struct_version::<nvmlTemperature_v1_t>(1);
    t.sensorType = nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU;
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut t) })?;
    Ok(t.temperature)
}

/// `nvmlDeviceGetMarginTemperature` (R570+): how far the GPU is below its
/// T.Limit ("distance to nearest slowdown threshold"), in degrees; negative
/// past it.
pub fn margin_temperature(nvml: &Nvml, device: DeviceHandle) -> Result<i32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMarginTemperature);
    // SAFETY: versioned POD in/out parameter.
    let mut m: nvmlMarginTemperature_v1_t = unsafe { mem::zeroed() };
    m.version = struct_version::<nvmlMarginTemperature_v1_t>(1);
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut m) })?;
    Ok(m.marginTemperature)
}

/// Whether the library exports a symbol: the successor calls are chosen
/// where the driver has them.
pub fn exports_temperature_v(nvml: &Nvml) -> bool {
    nvml.lib().nvmlDeviceGetTemperatureV.is_ok()
}

pub fn exports_clocks_event_reasons(nvml: &Nvml) -> bool {
    nvml.lib().nvmlDeviceGetCurrentClocksEventReasons.is_ok()
        && nvml.lib().nvmlDeviceGetSupportedClocksEventReasons.is_ok()
}

/// `nvmlDeviceGetSupportedClocksEventReasons` (12.2 header, R535 on): the
/// successor of `nvmlDeviceGetSupportedClocksThrottleReasons`,
/// DEPRECATED(13.0).
pub fn supported_clocks_event_reasons(nvml: &Nvml, device: DeviceHandle) -> Result<u64, NvmlError> {
    reasons(device, sym!(nvml, nvmlDeviceGetSupportedClocksEventReasons))
}

/// `nvmlDeviceGetCurrentClocksEventReasons`, likewise the successor of
/// `nvmlDeviceGetCurrentClocksThrottleReasons`.
pub fn current_clocks_event_reasons(nvml: &Nvml, device: DeviceHandle) -> Result<u64, NvmlError> {
    reasons(device, sym!(nvml, nvmlDeviceGetCurrentClocksEventReasons))
}

type ReasonsFn = unsafe extern "C" fn(nvmlDevice_t, *mut std::os::raw::c_ulonglong) -> nvmlReturn_t;

fn reasons(device: DeviceHandle, f: ReasonsFn) -> Result<u64, NvmlError> {
    let mut bits: std::os::raw::c_ulonglong = 0;
    // SAFETY: valid out-pointer; `f` is the library's own export.
    nvml_try(unsafe { f(device, &raw mut bits) })?;
    Ok(bits)
}

/// `bThresholdExceeded` of `nvmlDeviceGetSramEccErrorStatus`: the GPU's
/// uncorrectable SRAM errors crossed NVIDIA's RMA threshold.
pub fn sram_threshold_exceeded(nvml: &Nvml, device: DeviceHandle) -> Result<bool, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetSramEccErrorStatus);
    // SAFETY: POD out-parameter whose version field says which layout we
    // expect.
    let mut status: nvmlEccSramErrorStatus_v1_t = unsafe { mem::zeroed() };
    status.version = struct_version::<nvmlEccSramErrorStatus_v1_t>(1);
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut status) })?;
    Ok(status.bThresholdExceeded != 0)
}

/// `nvmlDeviceGetRowRemapperHistogram`: how many memory banks have each
/// level of spare rows left, `[max, high, partial, low, none]`.
pub fn row_remapper_histogram(nvml: &Nvml, device: DeviceHandle) -> Result<[u32; 5], NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetRowRemapperHistogram);
    // SAFETY: POD out-parameter.
    let mut h: nvmlRowRemapperHistogramValues_t = unsafe { mem::zeroed() };
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares (`sym!`); the
    // device handle came from NVML and the out-pointer is to our own struct, live for the
    // call.
    nvml_try(unsafe { f(device, &raw mut h) })?;
    Ok([h.max, h.high, h.partial, h.low, h.none])
}

/// `nvmlPlatformInfo_v2_t`'s bytes (the InfiniBand GUID is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawPlatform {
    pub chassis_serial: [u8; 16],
    pub slot: u8,
    pub tray: u8,
    pub host_id: u8,
    pub module_id: u8,
}

/// `nvmlDeviceGetPlatformInfo` with the v2 struct: the 12.8 header (R570)
/// that introduced the call defines both versions, so every driver that
/// has the symbol takes v2. nvml-wrapper 0.13 does not wrap it. Before
/// R570 the symbol is missing (`FailedToLoadSymbol`, "absent"); boards
/// without platform data answer NOT_SUPPORTED.
pub fn platform_info(nvml: &Nvml, device: DeviceHandle) -> Result<RawPlatform, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetPlatformInfo);
    // SAFETY: POD; all zeros is a valid value.
    let mut info: nvmlPlatformInfo_v2_t = unsafe { mem::zeroed() };
    info.version = struct_version::<nvmlPlatformInfo_v2_t>(2);
    // SAFETY: `f` is the library's own symbol of the type nvml.h declares
    // (`sym!`); the device handle came from NVML and the out-pointer is to
    // our own struct, live for the call.
    nvml_try(unsafe { f(device, &raw mut info) })?;
    Ok(RawPlatform {
        chassis_serial: info.chassisSerialNumber,
        slot: info.slotNumber,
        tray: info.trayIndex,
        host_id: info.hostId,
        module_id: info.moduleId,
    })
}

// ---- topology (`sampler/topology.rs`) -------------------------------------

/// The handle of the GPU at `index` (`nvmlDeviceGetHandleByIndex_v2`), for
/// the topology queries that name two GPUs.
pub fn handle_by_index(nvml: &Nvml, index: u32) -> Result<DeviceHandle, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetHandleByIndex_v2);
    let mut h: nvmlDevice_t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(index, &raw mut h) })?;
    Ok(h)
}

/// `nvmlGpuTopologyLevel_t` between two GPUs (0, 10, ..., 50).
pub fn common_ancestor(nvml: &Nvml, a: DeviceHandle, b: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetTopologyCommonAncestor);
    let mut level: nvmlGpuTopologyLevel_t = 0;
    // SAFETY: valid out-pointer; both handles from this library.
    nvml_try(unsafe { f(a, b, &raw mut level) })?;
    Ok(level)
}

/// Words of the CPU and NUMA node masks asked: 64 x 64 bits, more CPUs
/// than any host the driver supports has.
const MASK_WORDS: usize = 64;

fn bits(words: &[std::os::raw::c_ulong]) -> Vec<u32> {
    let width = std::os::raw::c_ulong::BITS as usize;
    let mut out = Vec::new();
    for (w, word) in words.iter().enumerate() {
        for b in 0..width {
            if word & (1 << b) != 0 {
                out.push((w * width + b) as u32);
            }
        }
    }
    out
}

/// The CPUs near the GPU (`nvmlDeviceGetCpuAffinity`).
pub fn cpu_affinity(nvml: &Nvml, device: DeviceHandle) -> Result<Vec<u32>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetCpuAffinity);
    let mut words = [0 as std::os::raw::c_ulong; MASK_WORDS];
    // SAFETY: the buffer holds MASK_WORDS words, as told.
    nvml_try(unsafe { f(device, MASK_WORDS as u32, words.as_mut_ptr()) })?;
    Ok(bits(&words))
}

/// The NUMA nodes near the GPU (`nvmlDeviceGetMemoryAffinity`, scope
/// NODE): nvidia-smi's "NUMA Affinity".
pub fn memory_affinity(nvml: &Nvml, device: DeviceHandle) -> Result<Vec<u32>, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetMemoryAffinity);
    let mut words = [0 as std::os::raw::c_ulong; MASK_WORDS];
    // SAFETY: as above.
    nvml_try(unsafe {
        f(
            device,
            MASK_WORDS as u32,
            words.as_mut_ptr(),
            NVML_AFFINITY_SCOPE_NODE,
        )
    })?;
    Ok(bits(&words))
}

/// The GPU's own NUMA node where it is one (`nvmlDeviceGetNumaNodeId`):
/// nvidia-smi's "GPU NUMA ID".
pub fn numa_node_id(nvml: &Nvml, device: DeviceHandle) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetNumaNodeId);
    let mut node: u32 = 0;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, &raw mut node) })?;
    Ok(node)
}

/// What NVLink `link` reaches (`nvmlIntNvLinkDeviceType_t`: GPU 0, IBM
/// NPU 1, NVSwitch 2, unknown 0xFF).
pub fn nvlink_remote_type(nvml: &Nvml, device: DeviceHandle, link: u32) -> Result<u32, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetNvLinkRemoteDeviceType);
    let mut t: nvmlIntNvLinkDeviceType_t = 0;
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, link, &raw mut t) })?;
    Ok(t)
}

/// The PCI bus id of the device at the far end of NVLink `link`.
pub fn nvlink_remote_bus_id(
    nvml: &Nvml,
    device: DeviceHandle,
    link: u32,
) -> Result<String, NvmlError> {
    let f = sym!(nvml, nvmlDeviceGetNvLinkRemotePciInfo_v2);
    // SAFETY: plain C struct of integers and char arrays; all-zero is valid.
    let mut p: nvmlPciInfo_t = unsafe { mem::zeroed() };
    // SAFETY: valid out-pointer.
    nvml_try(unsafe { f(device, link, &raw mut p) })?;
    // NVML NUL-terminates busId; the last byte is forced to NUL in case
    // it did not.
    p.busId[p.busId.len() - 1] = 0;
    // SAFETY: NUL-terminated within the array (above).
    let s = unsafe { CStr::from_ptr(p.busId.as_ptr()) };
    Ok(s.to_string_lossy().into_owned())
}
