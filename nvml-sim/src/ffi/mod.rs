//! The NVML C ABI. Every export counts its call (and charges its simulated
//! cost, `latency.rs`), runs inside
//! `catch_unwind` (a panic across `extern "C"` would abort the host) and
//! maps `Err(code)` to the `nvmlReturn_t` it returns.
//!
//! Handles are tagged integers, never dereferenced: a bad handle resolves to
//! nothing and gets `NVML_ERROR_INVALID_ARGUMENT` instead of a crash.

#![allow(
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::not_unsafe_ptr_arg_deref
)]

use crate::fleet::{Hang, Sim};
use crate::scenario;
pub use crate::state::{lock, State, CHANGED};
use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_char, c_uint};
use std::sync::MutexGuard;
use std::time::Duration;

// One file per NVML API group, as the NVML reference groups the calls.
pub mod clocks;
pub mod ecc;
pub mod events;
pub mod fabric;
pub mod fan;
pub mod fields;
pub mod gpm;
pub mod info;
pub mod memory;
pub mod mig;
pub mod mode;
pub mod nvlink;
pub mod pcie;
pub mod power;
pub mod processes;
pub mod retirement;
pub mod system;
pub mod temperature;
pub mod throttle;
pub mod topology;
pub mod utilization;

pub type Ret = nvmlReturn_t;
pub type R<T = ()> = Result<T, Ret>;

pub const SUCCESS: Ret = nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: Ret = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: Ret = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: Ret = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: Ret = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: Ret = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const DRIVER_NOT_LOADED: Ret = nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
pub const TIMEOUT: Ret = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub const GPU_IS_LOST: Ret = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const VERSION_MISMATCH: Ret = nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: Ret = nvmlReturn_enum_NVML_ERROR_UNKNOWN;
pub const FUNCTION_NOT_FOUND: Ret = nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND;
pub const NO_PERMISSION: Ret = nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
/// What a branch answers for a call it deprecated (drivers.toml).
pub const DEPRECATED: Ret = nvmlReturn_enum_NVML_ERROR_DEPRECATED;

/// `NVML_STRUCT_VERSION(data, ver)` from nvml.h (not in the bindings).
pub const fn struct_version<T>(v: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (v << 24)
}

pub fn guard(f: impl FnOnce() -> R) -> Ret {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// Defines an exported NVML function whose body evaluates to `R<()>`.
macro_rules! nvml_fn {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> nvml_wrapper_sys::bindings::nvmlReturn_t {
            crate::calls::record(stringify!($name));
            if !crate::driver::exported(stringify!($name)) {
                return crate::ffi::FUNCTION_NOT_FOUND;
            }
            if crate::driver::deprecated(stringify!($name)) {
                return crate::ffi::DEPRECATED;
            }
            let ret = crate::ffi::guard(move || -> crate::ffi::R { $body });
            crate::latency::charge(stringify!($name));
            ret
        }
    };
}
pub(crate) use nvml_fn;

/// Writes through an out-pointer, rejecting null.
pub unsafe fn out<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    p.write(v);
    Ok(())
}

pub fn nonnull<T>(p: *const T) -> R {
    if p.is_null() {
        Err(INVALID_ARGUMENT)
    } else {
        Ok(())
    }
}

/// Copies a NUL-terminated string into a caller buffer of `len` bytes.
pub unsafe fn out_str(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if (len as usize) < s.len() + 1 {
        return Err(INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
    *buf.add(s.len()) = 0;
    Ok(())
}

/// Copies into a fixed `c_char` array field, truncating to fit.
pub fn fill_chars(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if dst.len() > n {
        dst[n] = 0;
    }
}

pub unsafe fn read_cstr<'a>(p: *const c_char) -> R<&'a str> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    std::ffi::CStr::from_ptr(p)
        .to_str()
        .map_err(|_| INVALID_ARGUMENT)
}

// ---- handles ---------------------------------------------------------------

const TAG: u64 = 0x4e56 << 48;
const KIND_DEVICE: u64 = 1;
const KIND_GPU_INSTANCE: u64 = 2;
const KIND_COMPUTE_INSTANCE: u64 = 3;
const KIND_EVENT_SET: u64 = 4;
const KIND_GPM_SAMPLE: u64 = 5;

/// A decoded device handle: a whole GPU, or a MIG device on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dev {
    pub gpu: u32,
    /// (GPU instance id, compute instance id, layout generation)
    pub mig: Option<(u32, u32, u8)>,
}

fn encode(kind: u64, gpu: u32, low: u64) -> u64 {
    TAG | kind << 40 | (gpu as u64) << 32 | low
}

fn decode(h: u64, kind: u64) -> Option<(u32, u64)> {
    if h & (0xffff << 48) != TAG || (h >> 40) & 0xff != kind {
        return None;
    }
    Some((((h >> 32) & 0xff) as u32, h & 0xffff_ffff))
}

pub fn device_handle(d: Dev) -> nvmlDevice_t {
    let low = match d.mig {
        None => 0,
        Some((gi, ci, gen)) => {
            1 << 31 | (gen as u64) << 16 | (gi as u64 & 0xff) << 8 | (ci as u64 & 0xff)
        }
    };
    encode(KIND_DEVICE, d.gpu, low) as usize as nvmlDevice_t
}

pub fn decode_device(h: nvmlDevice_t) -> Option<Dev> {
    let (gpu, low) = decode(h as usize as u64, KIND_DEVICE)?;
    if low == 0 {
        return Some(Dev { gpu, mig: None });
    }
    if low & (1 << 31) == 0 {
        return None;
    }
    Some(Dev {
        gpu,
        mig: Some((
            ((low >> 8) & 0xff) as u32,
            (low & 0xff) as u32,
            ((low >> 16) & 0xff) as u8,
        )),
    })
}

pub fn gpu_instance_handle(gpu: u32, gi: u32, gen: u8) -> nvmlGpuInstance_t {
    encode(
        KIND_GPU_INSTANCE,
        gpu,
        (gen as u64) << 16 | (gi as u64) << 8,
    ) as usize as nvmlGpuInstance_t
}

pub fn decode_gpu_instance(h: nvmlGpuInstance_t) -> Option<(u32, u32, u8)> {
    let (gpu, low) = decode(h as usize as u64, KIND_GPU_INSTANCE)?;
    Some((gpu, ((low >> 8) & 0xff) as u32, ((low >> 16) & 0xff) as u8))
}

pub fn compute_instance_handle(gpu: u32, gi: u32, ci: u32, gen: u8) -> nvmlComputeInstance_t {
    encode(
        KIND_COMPUTE_INSTANCE,
        gpu,
        (gen as u64) << 16 | (gi as u64) << 8 | ci as u64,
    ) as usize as nvmlComputeInstance_t
}

pub fn decode_compute_instance(h: nvmlComputeInstance_t) -> Option<(u32, u32, u32, u8)> {
    let (gpu, low) = decode(h as usize as u64, KIND_COMPUTE_INSTANCE)?;
    Some((
        gpu,
        ((low >> 8) & 0xff) as u32,
        (low & 0xff) as u32,
        ((low >> 16) & 0xff) as u8,
    ))
}

pub fn event_set_handle(id: u32) -> nvmlEventSet_t {
    encode(KIND_EVENT_SET, 0, id as u64) as usize as nvmlEventSet_t
}

pub fn decode_event_set(h: nvmlEventSet_t) -> Option<u32> {
    decode(h as usize as u64, KIND_EVENT_SET).map(|(_, id)| id as u32)
}

pub fn gpm_sample_handle(id: u32) -> nvmlGpmSample_t {
    encode(KIND_GPM_SAMPLE, 0, id as u64) as usize as nvmlGpmSample_t
}

pub fn decode_gpm_sample(h: nvmlGpmSample_t) -> Option<u32> {
    decode(h as usize as u64, KIND_GPM_SAMPLE).map(|(_, id)| id as u32)
}

// ---- call preludes -----------------------------------------------------------

/// Locks the state for a call that needs an initialized library, and plays
/// the timeline up to now.
pub fn initialized() -> R<MutexGuard<'static, State>> {
    let mut st = lock();
    if st.refcount == 0 {
        return Err(UNINITIALIZED);
    }
    let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
    if !sim.driver_loaded {
        return Err(DRIVER_NOT_LOADED);
    }
    if sim.advance() {
        CHANGED.notify_all();
    }
    pinned_error(sim)?;
    Ok(st)
}

/// The error a scenario pins for the call this thread is in (top-level
/// `errors`), if any.
pub fn pinned_error(sim: &Sim) -> R {
    if sim.call_errors.is_empty() {
        return Ok(());
    }
    let call = crate::calls::current();
    match sim.call_errors.iter().find(|(f, _)| f == call) {
        Some((_, code)) => Err(*code),
        None => Ok(()),
    }
}

/// For the system queries that answer without an initialized library:
/// the error the scenario pins for them, once a fleet is built.
pub fn system_call() -> R {
    let st = lock();
    match &st.sim {
        Some(sim) => pinned_error(sim),
        None => Ok(()),
    }
}

/// Prelude of every call on a device: validates the handle and applies the
/// GPU's failure modes (lost, hung, slow) before the call proper.
pub fn device_call(h: nvmlDevice_t) -> R<(MutexGuard<'static, State>, Dev)> {
    let dev = decode_device(h).ok_or(INVALID_ARGUMENT)?;
    let mut st = initialized()?;
    let mut slowed = false;
    loop {
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        let now = sim.scenario_t();
        let (t, scale) = (sim.t(), sim.scale);
        if sim.denied.contains(&dev.gpu) {
            return Err(NO_PERMISSION);
        }
        let gpu = sim.gpus.get_mut(dev.gpu as usize).ok_or(INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(GPU_IS_LOST);
        }
        // A hung driver blocks inside the call rather than failing it.
        let wait = match gpu.hang {
            Some(Hang::Forever) => Some(Duration::from_secs(1)),
            Some(Hang::Until(until)) => {
                if now < until {
                    Some(Duration::from_secs_f64(
                        ((until - now) / scale).clamp(0.001, 1.0),
                    ))
                } else {
                    gpu.hang = None;
                    None
                }
            }
            None => None,
        };
        if let Some(w) = wait {
            st = CHANGED
                .wait_timeout(st, w)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if st.refcount == 0 {
                return Err(UNINITIALIZED);
            }
            if let Some(sim) = st.sim.as_mut() {
                if sim.advance() {
                    CHANGED.notify_all();
                }
            }
            continue;
        }
        if gpu.slow_ms > 0 && !slowed {
            let ms = gpu.slow_ms;
            slowed = true;
            drop(st);
            std::thread::sleep(Duration::from_millis(ms));
            st = initialized()?;
            continue;
        }
        if dev.mig.is_none() && !gpu.call_errors.is_empty() {
            let call = crate::calls::current();
            if let Some((_, code)) = gpu.call_errors.iter().find(|(f, _)| f == call) {
                return Err(*code);
            }
        }
        if let Some((gi, ci, gen)) = dev.mig {
            let ok = gpu
                .mig
                .as_ref()
                .map(|m| m.generation == gen)
                .unwrap_or(false)
                && gpu
                    .instance(gi)
                    .is_some_and(|i| i.compute_instance(ci).is_some());
            if !ok {
                return Err(INVALID_ARGUMENT);
            }
        }
        gpu.advance_energy(t);
        break;
    }
    Ok((st, dev))
}

/// Runs `f` on a device handle that may be a MIG device.
pub fn with_dev<T>(h: nvmlDevice_t, f: impl FnOnce(&mut Sim, Dev, f64) -> R<T>) -> R<T> {
    let (mut st, dev) = device_call(h)?;
    let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
    let t = sim.t();
    f(sim, dev, t)
}

/// Runs `f` on a whole-GPU handle; MIG devices get NOT_SUPPORTED, as most
/// queries do on real MIG device handles.
pub fn with_gpu<T>(h: nvmlDevice_t, f: impl FnOnce(&mut crate::fleet::Gpu, f64) -> R<T>) -> R<T> {
    with_dev(h, |sim, dev, t| {
        if dev.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        f(&mut sim.gpus[dev.gpu as usize], t)
    })
}

// ---- init and shutdown -------------------------------------------------------

fn init(_flags: c_uint) -> R {
    let mut st = lock();
    if let Some(sim) = &mut st.sim {
        // A timeline's `driver-load` is due on the next call, and while the
        // driver is away the only calls are these.
        sim.advance();
        if !sim.driver_loaded {
            return Err(DRIVER_NOT_LOADED);
        }
    }
    if st.refcount == 0 {
        let key = crate::settings::scenario_key();
        let scale = match crate::settings::time_scale() {
            Ok(scale) => scale,
            Err(e) => {
                st.report(e.into_message());
                return Err(UNKNOWN);
            }
        };
        let scenario = match scenario::take_kept(&key) {
            Ok(scenario) => scenario,
            Err(e) => {
                st.report(format!("bad scenario: {e}"));
                return Err(UNKNOWN);
            }
        };
        if st.built_from.as_ref() != Some(&(key.clone(), scale)) || st.sim.is_none() {
            // `nvml-sim check` shows these too; a host that logs for us
            // (the exporter) would get them raw in its log otherwise.
            if !st.host_reports {
                for w in &scenario.warnings {
                    eprintln!("nvml-sim: {}", w.as_warning());
                }
            }
            st.sim = Some(Sim::new(&scenario, scale));
            st.built_from = Some((key, scale));
        }
        // Resolved at every first init: NVML_SIM_DRIVER may have changed.
        let personality = match crate::driver::resolve(&scenario) {
            Ok(p) => p,
            Err(e) => {
                st.report(format!("bad driver: {e}"));
                return Err(UNKNOWN);
            }
        };
        crate::driver::apply(personality);
        crate::driver::apply_absent(&scenario.absent_functions);
        drop(scenario);
        scenario::release_parse_memory();
        if !st.control_started {
            if let Some(path) = crate::settings::control_socket() {
                match crate::control::start(path) {
                    Ok(()) => st.control_started = true,
                    Err(e) => st.report(format!("control socket: {e}")),
                }
            }
        }
    }
    st.refcount += 1;
    Ok(())
}

nvml_fn! {
    /// NVML reference: "nvmlInit_v2 ... reference counted: every call must be matched by nvmlShutdown".
    fn nvmlInit_v2() { init(0) }
}

nvml_fn! {
    fn nvmlInit() { init(0) }
}

nvml_fn! {
    fn nvmlInitWithFlags(flags: c_uint) { init(flags) }
}

nvml_fn! {
    fn nvmlShutdown() {
        let mut st = lock();
        if st.refcount == 0 {
            return Err(UNINITIALIZED);
        }
        st.refcount -= 1;
        if st.refcount == 0 {
            CHANGED.notify_all();
            crate::calls::write_log();
        }
        Ok(())
    }
}

/// Static messages, as `nvmlErrorString` returns pointers callers never free.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    crate::calls::record("nvmlErrorString");
    let s: &'static std::ffi::CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        22 => c"The requested vgpu operation is not available on target device, becasue ECC is enabled",
        23 => c"Ran out of critical resources, other than memory",
        24 => c"The requested frequency is not supported",
        25 => c"The provided version is invalid/unsupported",
        26 => c"The requested functionality has been deprecated",
        27 => c"The system is not ready for the request",
        28 => c"No GPUs were found",
        29 => c"Resource not in correct state to perform requested operation",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}
