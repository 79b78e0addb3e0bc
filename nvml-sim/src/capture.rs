//! `nvml-sim capture`: walks a real `libnvidia-ml.so.1` with the calls the
//! exporter makes and writes the scenario that replays what it answered:
//! identity, settings, readings, counters, MIG layout, processes, fabric,
//! the board (limits, thresholds, MIG profile table with placements), the
//! field values that move with time (energy, PCIe and NVLink bytes,
//! throttle durations, power by scope), the error each call returned
//! (`errors`), GPM support, and the exports the driver lacks
//! (`absent_functions`). Supported event types, which a scenario derives
//! from the board, are written as comments.
//!
//! It loads the library given (any NVML, the simulator's included: that is
//! how the tests prove a capture replays), never the simulator it is part of.

#![allow(non_snake_case, non_upper_case_globals, clippy::too_many_arguments)]

use crate::model::{architecture_name, brand_name, gi_profile_name, rule_instance_id};
use crate::value::nvml_error_name;
use nvml_wrapper_sys::bindings::field_id::*;
use nvml_wrapper_sys::bindings::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_uint, CStr};
use std::path::Path;
use std::time::{Duration, Instant};
use toml::{Table, Value};

const NOT_FOUND_FN: u32 = 13;

/// `NVML_STRUCT_VERSION(data, ver)`.
const fn version<T>(v: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (v << 24)
}

struct Walker {
    lib: NvmlLib,
    /// Exports the library lacks, among those asked for.
    absent: BTreeSet<&'static str>,
    /// How long each call took, by function: `scripts/device-check` keeps
    /// these as the real driver's latencies (BENCHMARKS.md).
    timings: BTreeMap<&'static str, Vec<Duration>>,
}

/// What `capture` found: the scenario text and the time each NVML call
/// took.
pub struct Captured {
    pub scenario: String,
    pub timings: BTreeMap<&'static str, Vec<Duration>>,
}

impl Captured {
    /// One line per function: calls, then the minimum, median, 90th
    /// percentile and maximum in microseconds, tab separated, with a header.
    pub fn timings_table(&self) -> String {
        let mut out = String::from("function\tcalls\tmin_us\tmedian_us\tp90_us\tmax_us\n");
        for (f, d) in &self.timings {
            let mut us: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1e6).collect();
            us.sort_by(f64::total_cmp);
            let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
            out.push_str(&format!(
                "{f}\t{}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\n",
                us.len(),
                at(0.0),
                at(0.5),
                at(0.9),
                at(1.0)
            ));
        }
        out
    }
}

/// Calls an NVML function of the library if it has it: `Ok(())` on
/// success, else the `nvmlReturn_t` (13, FUNCTION_NOT_FOUND, where the
/// export is missing, which is recorded).
macro_rules! call {
    ($w:expr, $f:ident ( $($a:expr),* $(,)? )) => {{
        if $w.lib.$f.is_err() {
            $w.absent.insert(stringify!($f));
            Err(NOT_FOUND_FN)
        } else {
            let started = Instant::now();
            // SAFETY: the arguments are valid pointers to locals of the
            // types the binding declares, or handles NVML gave us.
            let code = unsafe { $w.lib.$f($($a),*) };
            $w.timings.entry(stringify!($f)).or_default().push(started.elapsed());
            match code {
                0 => Ok(()),
                code => Err(code),
            }
        }
    }};
}

/// A string an NVML call writes into a buffer.
fn text(buf: &[c_char]) -> String {
    // SAFETY: NVML NUL-terminates; the buffer was zeroed first.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn na() -> Value {
    Value::String("N/A".into())
}

fn int(v: impl Into<i64>) -> Value {
    Value::Integer(v.into())
}

fn sub<'t>(t: &'t mut Table, key: &str) -> &'t mut Table {
    match t
        .entry(key.to_string())
        .or_insert_with(|| Value::Table(Table::new()))
    {
        Value::Table(t) => t,
        _ => unreachable!("only tables go under {key}"),
    }
}

/// What one GPU's calls answered, as scenario tables.
struct GpuOut {
    gpu: Table,
    board: Table,
    errors: Table,
    events: u64,
}

impl GpuOut {
    /// A call that failed: N/A where the scenario has a key (the caller
    /// writes it), and its error for the call itself.
    fn failed(&mut self, f: &str, code: u32) {
        if code != NOT_FOUND_FN {
            self.errors.insert(f.to_string(), nvml_error_name(code));
        }
    }
}

/// The field ids whose answers a scenario pins: they move with time in a
/// simulation (energy, byte counters, throttle time) or have no key.
const PINNED_FIELDS: &[u32] = &[
    NVML_FI_DEV_PERF_POLICY_POWER,
    NVML_FI_DEV_PERF_POLICY_THERMAL,
    NVML_FI_DEV_PERF_POLICY_SYNC_BOOST,
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    // Clock-event durations (R575/R580 numbering, then 580.82's) and
    // power smoothing's lifetime.
    251,
    252,
    253,
    258,
    263,
    269,
    270,
    271,
];
const PER_LINK_FIELDS: &[u32] = &[
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
    NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES,
];
/// Power fields with a scope (GPU, module, memory): 185-192.
const SCOPED_POWER: std::ops::RangeInclusive<u32> = 185..=192;

impl Walker {
    fn fields(
        &mut self,
        d: nvmlDevice_t,
        wanted: &[(u32, u32)],
    ) -> Vec<(u32, u32, Result<i64, u32>)> {
        let mut values: Vec<nvmlFieldValue_t> = wanted
            .iter()
            .map(|&(id, scope)| {
                // SAFETY: a plain C struct; zero is a valid value.
                let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                v.fieldId = id;
                v.scopeId = scope;
                v
            })
            .collect();
        if values.is_empty()
            || call!(
                self,
                nvmlDeviceGetFieldValues(d, values.len() as i32, values.as_mut_ptr())
            )
            .is_err()
        {
            return Vec::new();
        }
        values
            .iter()
            .map(|v| {
                let answer = if v.nvmlReturn != 0 {
                    Err(v.nvmlReturn)
                } else {
                    // SAFETY: the union member the value type names.
                    Ok(unsafe {
                        match v.valueType {
                            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => {
                                i64::from(v.value.uiVal)
                            }
                            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => {
                                i64::from(v.value.siVal)
                            }
                            nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => v.value.dVal as i64,
                            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => v.value.sllVal,
                            _ => v.value.ullVal as i64,
                        }
                    })
                };
                (v.fieldId, v.scopeId, answer)
            })
            .collect()
    }

    fn gpu(&mut self, index: u32, out: &mut GpuOut) -> Result<(), u32> {
        let mut d: nvmlDevice_t = std::ptr::null_mut();
        call!(self, nvmlDeviceGetHandleByIndex_v2(index, &raw mut d))?;
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        let mut buf = [0 as c_char; 96];
        // Identity and the board.
        if call!(self, nvmlDeviceGetName(d, buf.as_mut_ptr(), 96)).is_ok() {
            board.insert("name".into(), Value::String(text(&buf)));
        }
        let mut brand = 0;
        let b = call!(self, nvmlDeviceGetBrand(d, &raw mut brand)).map(|()| brand);
        board.insert(
            "brand".into(),
            Value::String(brand_name(b.unwrap_or(0)).unwrap_or("unknown").into()),
        );
        let mut arch = 0;
        let a = call!(self, nvmlDeviceGetArchitecture(d, &raw mut arch)).map(|()| arch);
        board.insert(
            "architecture".into(),
            Value::String(
                architecture_name(a.unwrap_or(u32::MAX))
                    .unwrap_or("unknown")
                    .into(),
            ),
        );
        let (mut major, mut minor) = (0, 0);
        if call!(
            self,
            nvmlDeviceGetCudaComputeCapability(d, &raw mut major, &raw mut minor)
        )
        .is_ok()
        {
            board.insert(
                "cuda_compute_capability".into(),
                Value::String(format!("{major}.{minor}")),
            );
        }
        // SAFETY: a plain C struct; zero is a valid value.
        let mut pci: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        if call!(self, nvmlDeviceGetPciInfo_v3(d, &raw mut pci)).is_ok() {
            gpu.insert("pci_bus_id".into(), Value::String(text(&pci.busId)));
            board.insert("pci_device_id".into(), int(pci.pciDeviceId));
            board.insert("pci_subsystem_id".into(), int(pci.pciSubSystemId));
        }
        buf = [0; 96];
        if call!(self, nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 96)).is_ok() {
            gpu.insert("uuid".into(), Value::String(text(&buf)));
        }
        buf = [0; 96];
        match call!(self, nvmlDeviceGetSerial(d, buf.as_mut_ptr(), 96)) {
            Ok(()) => gpu.insert("serial".into(), Value::String(text(&buf))),
            Err(_) => gpu.insert("serial".into(), na()),
        };
        let mut minor_number = 0;
        match call!(self, nvmlDeviceGetMinorNumber(d, &raw mut minor_number)) {
            Ok(()) => gpu.insert("minor_number".into(), int(minor_number)),
            Err(_) => gpu.insert("minor_number".into(), na()),
        };
        for (key, f) in [("vbios_version", 0), ("board_part_number", 1)] {
            buf = [0; 96];
            let r = if f == 0 {
                call!(self, nvmlDeviceGetVbiosVersion(d, buf.as_mut_ptr(), 80))
            } else {
                call!(self, nvmlDeviceGetBoardPartNumber(d, buf.as_mut_ptr(), 80))
            };
            board.insert(
                key.into(),
                if r.is_ok() {
                    Value::String(text(&buf))
                } else {
                    na()
                },
            );
        }
        let mut inforom = Table::new();
        for (key, object) in [("oem", 0), ("ecc", 1), ("power", 2), ("den", 3)] {
            buf = [0; 96];
            let r = call!(
                self,
                nvmlDeviceGetInforomVersion(d, object, buf.as_mut_ptr(), 80)
            );
            inforom.insert(
                key.into(),
                if r.is_ok() {
                    Value::String(text(&buf))
                } else {
                    na()
                },
            );
        }
        board.insert("inforom".into(), Value::Table(inforom));
        // Memory.
        // SAFETY: plain C structs; zero is a valid value.
        let mut mem: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
        mem.version = version::<nvmlMemory_v2_t>(2);
        const MIB: u64 = 1 << 20;
        let mut memory = Table::new();
        let mut readings = Table::new();
        if call!(self, nvmlDeviceGetMemoryInfo_v2(d, &raw mut mem)).is_ok() {
            memory.insert("total_mib".into(), int((mem.total / MIB) as i64));
            memory.insert("reserved_mib".into(), int((mem.reserved / MIB) as i64));
            readings.insert("memory_used_mib".into(), int((mem.used / MIB) as i64));
            readings.insert("memory_free_mib".into(), int((mem.free / MIB) as i64));
        } else {
            let mut m1: nvmlMemory_t = unsafe { std::mem::zeroed() };
            if call!(self, nvmlDeviceGetMemoryInfo(d, &raw mut m1)).is_ok() {
                memory.insert("total_mib".into(), int((m1.total / MIB) as i64));
            }
        }
        let mut bar1: nvmlBAR1Memory_t = unsafe { std::mem::zeroed() };
        match call!(self, nvmlDeviceGetBAR1MemoryInfo(d, &raw mut bar1)) {
            Ok(()) => {
                memory.insert("bar1_mib".into(), int((bar1.bar1Total / MIB) as i64));
                readings.insert("bar1_used_mib".into(), int((bar1.bar1Used / MIB) as i64));
            }
            Err(e) => out.errors_insert("nvmlDeviceGetBAR1MemoryInfo", e),
        }
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        board.insert("memory".into(), Value::Table(memory));
        // Power limits.
        let mut power = Table::new();
        let (mut default, mut lo, mut hi, mut limit, mut enforced) = (0, 0, 0, 0, 0);
        let rd = call!(
            self,
            nvmlDeviceGetPowerManagementDefaultLimit(d, &raw mut default)
        );
        let rc = call!(
            self,
            nvmlDeviceGetPowerManagementLimitConstraints(d, &raw mut lo, &raw mut hi)
        );
        let rl = call!(self, nvmlDeviceGetPowerManagementLimit(d, &raw mut limit));
        let re = call!(self, nvmlDeviceGetEnforcedPowerLimit(d, &raw mut enforced));
        let w = |mw: u32| Value::Float(f64::from(mw) / 1000.0);
        let default_mw = if rd.is_ok() {
            default
        } else if rl.is_ok() {
            limit
        } else {
            100_000
        };
        power.insert("default_limit_w".into(), w(default_mw));
        if rc.is_ok() {
            power.insert("min_limit_w".into(), w(lo.min(default_mw)));
            power.insert("max_limit_w".into(), w(hi.max(default_mw)));
        }
        if rl.is_ok() {
            gpu.insert("power_limit_w".into(), w(limit));
        }
        if re.is_ok() && rl.is_ok() && enforced != limit {
            gpu.insert("enforced_power_limit_w".into(), w(enforced));
        }
        board.insert("power".into(), Value::Table(power));
        for (f, r) in [
            ("nvmlDeviceGetPowerManagementDefaultLimit", rd),
            ("nvmlDeviceGetPowerManagementLimitConstraints", rc),
            ("nvmlDeviceGetPowerManagementLimit", rl),
            ("nvmlDeviceGetEnforcedPowerLimit", re),
        ] {
            if let Err(e) = r {
                out.errors_insert(f, e);
            }
        }
        let board = &mut out.board;
        // Clocks.
        let mut clocks = Table::new();
        let mut max_err = None;
        let mut max_ok = false;
        for (t, key) in [
            (0, "max_graphics_mhz"),
            (1, "max_sm_mhz"),
            (2, "max_memory_mhz"),
            (3, "max_video_mhz"),
        ] {
            let mut mhz = 0;
            match call!(self, nvmlDeviceGetMaxClockInfo(d, t, &raw mut mhz)) {
                Ok(()) => {
                    max_ok = true;
                    clocks.insert(key.into(), int(mhz));
                }
                Err(e) => max_err = Some(e),
            }
        }
        for key in ["max_graphics_mhz", "max_memory_mhz"] {
            clocks.entry(key).or_insert(int(1000));
        }
        board.insert("clocks".into(), Value::Table(clocks));
        if let (false, Some(e)) = (max_ok, max_err) {
            out.errors
                .insert("nvmlDeviceGetMaxClockInfo".into(), nvml_error_name(e));
        }
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        for (t, key) in [
            (0, "graphics_clock_mhz"),
            (1, "sm_clock_mhz"),
            (2, "memory_clock_mhz"),
            (3, "video_clock_mhz"),
        ] {
            let mut mhz = 0;
            let v =
                call!(self, nvmlDeviceGetClockInfo(d, t, &raw mut mhz)).map_or(na(), |()| int(mhz));
            readings.insert(key.into(), v);
        }
        // Thresholds, in degrees and as T.Limit margins.
        let mut thermal = Table::new();
        for (t, key) in [
            (0, "shutdown_c"),
            (1, "slowdown_c"),
            (2, "memory_max_c"),
            (3, "gpu_max_c"),
        ] {
            let mut c = 0;
            let v = call!(self, nvmlDeviceGetTemperatureThreshold(d, t, &raw mut c))
                .map_or(na(), |()| int(c));
            thermal.insert(key.into(), v);
        }
        let margins = self.fields(d, &[(193, 0), (194, 0), (195, 0), (196, 0)]);
        let mut any_margin = false;
        for ((_, _, v), key) in margins.iter().zip([
            "shutdown_tlimit_c",
            "slowdown_tlimit_c",
            "memory_max_tlimit_c",
            "gpu_max_tlimit_c",
        ]) {
            match v {
                Ok(m) => {
                    any_margin = true;
                    thermal.insert(key.into(), int(*m));
                }
                Err(_) => {
                    thermal.insert(key.into(), na());
                }
            }
        }
        thermal.insert("tlimit".into(), Value::Boolean(any_margin));
        let mut fans = 0;
        let fans_ok = call!(self, nvmlDeviceGetNumFans(d, &raw mut fans)).is_ok();
        thermal.insert("fans".into(), int(if fans_ok { fans } else { 0 }));
        board.insert("thermal".into(), Value::Table(thermal));
        // PCIe.
        let (mut gen, mut width) = (0, 0);
        let rg = call!(self, nvmlDeviceGetMaxPcieLinkGeneration(d, &raw mut gen));
        let rw = call!(self, nvmlDeviceGetMaxPcieLinkWidth(d, &raw mut width));
        let mut pcie = Table::new();
        pcie.insert(
            "generation".into(),
            int(if rg.is_ok() { gen.clamp(1, 6) } else { 3 }),
        );
        pcie.insert(
            "width".into(),
            int(if rw.is_ok() && width > 0 { width } else { 16 }),
        );
        board.insert("pcie".into(), Value::Table(pcie));
        let (mut cg, mut cw) = (0, 0);
        readings.insert(
            "pcie_generation".into(),
            call!(self, nvmlDeviceGetCurrPcieLinkGeneration(d, &raw mut cg))
                .map_or(na(), |()| int(cg)),
        );
        if call!(self, nvmlDeviceGetCurrPcieLinkWidth(d, &raw mut cw)).is_ok() && cw > 0 {
            readings.insert("pcie_width".into(), int(cw));
        }
        for (key, counter) in [("pcie_tx_kbps", 0), ("pcie_rx_kbps", 1)] {
            let mut v = 0;
            readings.insert(
                key.into(),
                call!(self, nvmlDeviceGetPcieThroughput(d, counter, &raw mut v))
                    .map_or(na(), |()| int(v)),
            );
        }
        // Settings.
        let mut state = 0;
        gpu.insert(
            "persistence".into(),
            call!(self, nvmlDeviceGetPersistenceMode(d, &raw mut state))
                .map_or(na(), |()| Value::Boolean(state == 1)),
        );
        gpu.insert(
            "display".into(),
            call!(self, nvmlDeviceGetDisplayActive(d, &raw mut state))
                .map_or(na(), |()| Value::Boolean(state == 1)),
        );
        let display_mode =
            call!(self, nvmlDeviceGetDisplayMode(d, &raw mut state)).map(|()| state == 1);
        if display_mode == Ok(true) || gpu.get("display") == Some(&Value::Boolean(true)) {
            board.insert("display".into(), Value::Boolean(true));
        }
        gpu.insert(
            "display_mode".into(),
            display_mode.map_or(na(), Value::Boolean),
        );
        let mut mode = 0;
        gpu.insert(
            "compute_mode".into(),
            call!(self, nvmlDeviceGetComputeMode(d, &raw mut mode)).map_or(na(), |()| {
                Value::String(
                    [
                        "default",
                        "exclusive-thread",
                        "prohibited",
                        "exclusive-process",
                    ]
                    .get(mode as usize)
                    .unwrap_or(&"default")
                    .to_string(),
                )
            }),
        );
        let mut virt = 0;
        if call!(self, nvmlDeviceGetVirtualizationMode(d, &raw mut virt)).is_ok() {
            let names = ["none", "pass-through", "vgpu", "host-vgpu", "host-vsga"];
            if let Some(n) = names.get(virt as usize).filter(|n| **n != "none") {
                gpu.insert("virtualization_mode".into(), Value::String((*n).into()));
            }
        }
        let (mut dm, mut dm_pending) = (0, 0);
        if call!(
            self,
            nvmlDeviceGetDriverModel(d, &raw mut dm, &raw mut dm_pending)
        )
        .is_ok()
        {
            let name = |m: u32| {
                Value::String(
                    ["wddm", "tcc", "mcdm"]
                        .get(m as usize)
                        .unwrap_or(&"wddm")
                        .to_string(),
                )
            };
            gpu.insert("driver_model".into(), name(dm));
            gpu.insert("driver_model_pending".into(), name(dm_pending));
        }
        // Readings.
        let mut t = 0;
        readings.insert(
            "temperature_c".into(),
            call!(self, nvmlDeviceGetTemperature(d, 0, &raw mut t)).map_or(na(), |()| int(t)),
        );
        let mut margin: nvmlMarginTemperature_v1_t = unsafe { std::mem::zeroed() };
        margin.version = version::<nvmlMarginTemperature_v1_t>(1);
        if call!(self, nvmlDeviceGetMarginTemperature(d, &raw mut margin)).is_ok() {
            readings.insert("tlimit_c".into(), int(margin.marginTemperature));
        }
        let mut mw = 0;
        readings.insert(
            "power_w".into(),
            call!(self, nvmlDeviceGetPowerUsage(d, &raw mut mw)).map_or(na(), |()| w(mw)),
        );
        let mut p = 0;
        readings.insert(
            "pstate".into(),
            call!(self, nvmlDeviceGetPerformanceState(d, &raw mut p)).map_or(na(), |()| {
                if p > 15 {
                    na()
                } else {
                    int(p)
                }
            }),
        );
        if fans_ok && fans > 0 {
            let speeds: Vec<Value> = (0..fans)
                .map(|f| {
                    let mut s = 0;
                    call!(self, nvmlDeviceGetFanSpeed_v2(d, f, &raw mut s))
                        .map_or(int(0), |()| int(s))
                })
                .collect();
            readings.insert("fan_percent".into(), Value::Array(speeds));
        }
        let mut util = Table::new();
        let mut u: nvmlUtilization_t = unsafe { std::mem::zeroed() };
        match call!(self, nvmlDeviceGetUtilizationRates(d, &raw mut u)) {
            Ok(()) => {
                util.insert("gpu".into(), int(u.gpu));
                util.insert("memory".into(), int(u.memory));
            }
            Err(_) => {
                util.insert("gpu".into(), na());
                util.insert("memory".into(), na());
            }
        }
        for key in ["encoder", "decoder", "jpeg", "ofa"] {
            let (mut v, mut period) = (0, 0);
            let r = match key {
                "encoder" => call!(
                    self,
                    nvmlDeviceGetEncoderUtilization(d, &raw mut v, &raw mut period)
                ),
                "decoder" => call!(
                    self,
                    nvmlDeviceGetDecoderUtilization(d, &raw mut v, &raw mut period)
                ),
                "jpeg" => call!(
                    self,
                    nvmlDeviceGetJpgUtilization(d, &raw mut v, &raw mut period)
                ),
                _ => call!(
                    self,
                    nvmlDeviceGetOfaUtilization(d, &raw mut v, &raw mut period)
                ),
            };
            util.insert(key.into(), r.map_or(na(), |()| int(v)));
        }
        readings.insert("utilization".into(), Value::Table(util));
        // ECC and memory health.
        let mut counters = Table::new();
        let (mut cur, mut pend) = (0, 0);
        let ecc_mode = call!(self, nvmlDeviceGetEccMode(d, &raw mut cur, &raw mut pend));
        let mut ecc = Table::new();
        ecc.insert("supported".into(), Value::Boolean(ecc_mode.is_ok()));
        match ecc_mode {
            Ok(()) => {
                gpu.insert("ecc".into(), Value::Boolean(cur == 1));
                gpu.insert("ecc_pending".into(), Value::Boolean(pend == 1));
            }
            Err(_) => {
                gpu.insert("ecc".into(), na());
            }
        }
        if ecc_mode.is_ok() && cur == 1 {
            let locs = [
                "l1",
                "l2",
                "dram",
                "register_file",
                "texture",
                "texture_shm",
                "cbu",
                "sram",
            ];
            let mut counts = Table::new();
            let mut sets = Table::new();
            for (ty, ty_name) in [(0, "corrected"), (1, "uncorrected")] {
                let mut have = Vec::new();
                for (scope, scope_name) in [(0, "volatile"), (1, "aggregate")] {
                    for (l, loc) in locs.iter().enumerate() {
                        let mut n = 0;
                        if call!(
                            self,
                            nvmlDeviceGetMemoryErrorCounter(d, ty, scope, l as u32, &raw mut n)
                        )
                        .is_ok()
                        {
                            sub(sub(&mut counts, scope_name), ty_name)
                                .insert((*loc).into(), int(n as i64));
                            if !have.contains(loc) {
                                have.push(*loc);
                            }
                        }
                    }
                }
                sets.insert(
                    ty_name.into(),
                    Value::Array(have.iter().map(|l| Value::String((*l).into())).collect()),
                );
            }
            counts.insert("locations".into(), Value::Table(sets));
            counters.insert("ecc".into(), Value::Table(counts));
            let mut sram: nvmlEccSramErrorStatus_v1_t = unsafe { std::mem::zeroed() };
            sram.version = version::<nvmlEccSramErrorStatus_v1_t>(1);
            if call!(self, nvmlDeviceGetSramEccErrorStatus(d, &raw mut sram)).is_ok() {
                let mut s = Table::new();
                for (k, v) in [
                    ("volatile_corrected", sram.volatileCor),
                    ("volatile_uncorrected_parity", sram.volatileUncParity),
                    ("volatile_uncorrected_secded", sram.volatileUncSecDed),
                    ("aggregate_corrected", sram.aggregateCor),
                    ("aggregate_uncorrected_parity", sram.aggregateUncParity),
                    ("aggregate_uncorrected_secded", sram.aggregateUncSecDed),
                    ("l2", sram.aggregateUncBucketL2),
                    ("sm", sram.aggregateUncBucketSm),
                    ("microcontroller", sram.aggregateUncBucketMcu),
                    ("pcie", sram.aggregateUncBucketPcie),
                    ("other", sram.aggregateUncBucketOther),
                ] {
                    s.insert(k.into(), int(v as i64));
                }
                s.insert(
                    "threshold_exceeded".into(),
                    Value::Boolean(sram.bThresholdExceeded != 0),
                );
                counters.insert("sram".into(), Value::Table(s));
            }
        }
        let mut board_ecc = ecc;
        // Retired pages.
        let mut pages = Vec::new();
        let mut retire_ok = false;
        for (cause, name) in [(0, "sbe"), (1, "dbe")] {
            let mut count = 0;
            if call!(
                self,
                nvmlDeviceGetRetiredPages_v2(
                    d,
                    cause,
                    &raw mut count,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                )
            )
            .is_ok()
                || count > 0
            {
                retire_ok = true;
                let mut addrs = vec![0u64; count as usize];
                let mut times = vec![0u64; count as usize];
                if count > 0
                    && call!(
                        self,
                        nvmlDeviceGetRetiredPages_v2(
                            d,
                            cause,
                            &raw mut count,
                            addrs.as_mut_ptr(),
                            times.as_mut_ptr()
                        )
                    )
                    .is_ok()
                {
                    for (a, t) in addrs.iter().zip(&times).take(count as usize) {
                        let mut p = Table::new();
                        p.insert("address".into(), int(*a as i64));
                        p.insert("cause".into(), Value::String(name.into()));
                        p.insert("timestamp_us".into(), int(*t as i64));
                        pages.push(Value::Table(p));
                    }
                }
            }
        }
        board_ecc.insert("page_retirement".into(), Value::Boolean(retire_ok));
        if retire_ok {
            counters.insert("retired_pages".into(), Value::Array(pages));
            let mut pending = 0;
            if call!(
                self,
                nvmlDeviceGetRetiredPagesPendingStatus(d, &raw mut pending)
            )
            .is_ok()
            {
                counters.insert("retired_pending".into(), Value::Boolean(pending == 1));
            }
        }
        // MIG mode first: remapped rows are not reported in it.
        let (mut mig_cur, mut mig_pend) = (0, 0);
        let mig_mode = call!(
            self,
            nvmlDeviceGetMigMode(d, &raw mut mig_cur, &raw mut mig_pend)
        );
        let (mut corr, mut unc, mut rpend, mut fail) = (0, 0, 0, 0);
        let remap = call!(
            self,
            nvmlDeviceGetRemappedRows(
                d,
                &raw mut corr,
                &raw mut unc,
                &raw mut rpend,
                &raw mut fail
            )
        );
        let arch_ampere_up =
            a.is_ok_and(|a| a >= NVML_DEVICE_ARCH_AMPERE && a != NVML_DEVICE_ARCH_UNKNOWN);
        board_ecc.insert(
            "row_remapping".into(),
            Value::Boolean(remap.is_ok() || (mig_cur == 1 && arch_ampere_up && ecc_mode.is_ok())),
        );
        if remap.is_ok() {
            let mut r = Table::new();
            r.insert("correctable".into(), int(corr));
            r.insert("uncorrectable".into(), int(unc));
            r.insert("pending".into(), Value::Boolean(rpend != 0));
            r.insert("failure".into(), Value::Boolean(fail != 0));
            let mut h: nvmlRowRemapperHistogramValues_t = unsafe { std::mem::zeroed() };
            if call!(self, nvmlDeviceGetRowRemapperHistogram(d, &raw mut h)).is_ok() {
                let mut t = Table::new();
                for (k, v) in [
                    ("max", h.max),
                    ("high", h.high),
                    ("partial", h.partial),
                    ("low", h.low),
                    ("none", h.none),
                ] {
                    t.insert(k.into(), int(v));
                }
                board_ecc.insert(
                    "remapper_banks".into(),
                    int(h.max + h.high + h.partial + h.low + h.none),
                );
                r.insert("histogram".into(), Value::Table(t));
            }
            counters.insert("remapped_rows".into(), Value::Table(r));
        }
        board.insert("ecc".into(), Value::Table(board_ecc));
        let mut replays = 0;
        counters.insert(
            "pcie_replays".into(),
            call!(self, nvmlDeviceGetPcieReplayCounter(d, &raw mut replays))
                .map_or(na(), |()| int(replays)),
        );
        // Clock event reasons.
        let (mut active, mut supported) = (0u64, 0u64);
        let ra = call!(
            self,
            nvmlDeviceGetCurrentClocksEventReasons(d, &raw mut active)
        )
        .or_else(|_| {
            call!(
                self,
                nvmlDeviceGetCurrentClocksThrottleReasons(d, &raw mut active)
            )
        });
        let rs = call!(
            self,
            nvmlDeviceGetSupportedClocksEventReasons(d, &raw mut supported)
        )
        .or_else(|_| {
            call!(
                self,
                nvmlDeviceGetSupportedClocksThrottleReasons(d, &raw mut supported)
            )
        });
        let names = |mask: u64| -> Value {
            Value::Array(
                crate::fault::REASON_NAMES
                    .iter()
                    .filter(|(bit, _)| mask & bit != 0)
                    .map(|(_, n)| Value::String((*n).into()))
                    .collect(),
            )
        };
        match (ra, rs) {
            (Ok(()), Ok(())) => {
                counters.insert("clock_event_reasons".into(), names(active));
                counters.insert("supported_clock_event_reasons".into(), names(supported));
            }
            (Err(e), _) | (_, Err(e)) => {
                for f in [
                    "nvmlDeviceGetCurrentClocksEventReasons",
                    "nvmlDeviceGetCurrentClocksThrottleReasons",
                    "nvmlDeviceGetSupportedClocksEventReasons",
                    "nvmlDeviceGetSupportedClocksThrottleReasons",
                ] {
                    out.errors.insert(f.into(), nvml_error_name(e));
                }
            }
        }
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        // Fields: the recovery action and memory temperature have keys;
        // the rest that move with time are pinned.
        let links = self.fields(
            d,
            &[
                (NVML_FI_DEV_NVLINK_LINK_COUNT, 0),
                (NVML_FI_DEV_NVLINK_GET_VERSION, 0),
                (NVML_FI_DEV_MEMORY_TEMP, 0),
                (230, 0),
            ],
        );
        let link_count = match links.first() {
            Some((_, _, Ok(n))) if *n > 0 => *n as u32,
            _ => 0,
        };
        let mut nvlink = Table::new();
        if link_count > 0 {
            nvlink.insert("links".into(), int(link_count));
            if let Some((_, _, Ok(v))) = links.get(1) {
                nvlink.insert("version".into(), int(*v));
            }
        }
        readings.insert(
            "memory_temperature_c".into(),
            match links.get(2) {
                Some((_, _, Ok(t))) => int(*t),
                _ => na(),
            },
        );
        counters.insert(
            "recovery_action".into(),
            match links.get(3) {
                Some((_, _, Ok(a))) => Value::String(
                    [
                        "none",
                        "gpu-reset",
                        "node-reboot",
                        "drain-p2p",
                        "drain-and-reset",
                    ]
                    .get(*a as usize)
                    .unwrap_or(&"none")
                    .to_string(),
                ),
                _ => na(),
            },
        );
        let mut wanted: Vec<(u32, u32)> = PINNED_FIELDS.iter().map(|&f| (f, 0)).collect();
        wanted.extend(SCOPED_POWER.flat_map(|f| (0..3).map(move |s| (f, s))));
        for l in 0..link_count {
            wanted.extend(PER_LINK_FIELDS.iter().map(|&f| (f, l)));
        }
        let mut fields = Table::new();
        for (id, scope, v) in self.fields(d, &wanted) {
            let key = if scope == 0 {
                id.to_string()
            } else {
                format!("{id}:{scope}")
            };
            fields.insert(key, v.map_or_else(nvml_error_name, int));
        }
        // Power of the module and memory scopes: board limits and readings.
        let scoped = |f: u32, s: u32| {
            fields
                .get(&if s == 0 {
                    f.to_string()
                } else {
                    format!("{f}:{s}")
                })
                .and_then(Value::as_integer)
        };
        if let Some(avg) = scoped(NVML_FI_DEV_POWER_AVERAGE, 1) {
            readings.insert("module_power_w".into(), Value::Float(avg as f64 / 1000.0));
            let mut m = Table::new();
            for (k, f) in [
                ("default_limit_w", 189),
                ("min_limit_w", 190),
                ("max_limit_w", 191),
            ] {
                if let Some(v) = scoped(f, 1) {
                    m.insert(k.into(), Value::Float(v as f64 / 1000.0));
                }
            }
            if m.contains_key("default_limit_w") {
                sub(board, "power").insert("module".into(), Value::Table(m));
            }
        }
        if let Some(avg) = scoped(NVML_FI_DEV_POWER_AVERAGE, 2) {
            readings.insert("memory_power_w".into(), Value::Float(avg as f64 / 1000.0));
        }
        gpu.insert("fields".into(), Value::Table(fields));
        // Fabric.
        let mut fab: nvmlGpuFabricInfo_v3_t = unsafe { std::mem::zeroed() };
        fab.version = version::<nvmlGpuFabricInfo_v3_t>(3);
        let mut fab_ok = call!(self, nvmlDeviceGetGpuFabricInfoV(d, (&raw mut fab).cast()));
        if fab_ok.is_err() {
            fab = unsafe { std::mem::zeroed() };
            fab.version = version::<nvmlGpuFabricInfo_v2_t>(2);
            fab_ok = call!(self, nvmlDeviceGetGpuFabricInfoV(d, (&raw mut fab).cast()));
        }
        if fab_ok.is_ok() && fab.state != 0 {
            nvlink.insert("fabric".into(), Value::Boolean(true));
            let mut f = Table::new();
            f.insert(
                "state".into(),
                Value::String(
                    ["not-supported", "not-started", "in-progress", "completed"]
                        .get(fab.state as usize)
                        .unwrap_or(&"completed")
                        .to_string(),
                ),
            );
            f.insert(
                "status".into(),
                Value::String(
                    if fab.status == 0 {
                        "success"
                    } else {
                        "failure"
                    }
                    .into(),
                ),
            );
            f.insert("clique_id".into(), int(fab.cliqueId));
            let u = fab.clusterUuid;
            f.insert(
                "cluster_uuid".into(),
                Value::String(format!(
                    "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                    u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]
                )),
            );
            let mut h = Table::new();
            let bit = |shift: u32| match (fab.healthMask >> shift) & 3 {
                1 => Some(true),
                2 => Some(false),
                _ => None,
            };
            for (k, shift) in [
                ("degraded_bandwidth", 0),
                ("route_recovery", 2),
                ("route_unhealthy", 4),
                ("access_timeout_recovery", 6),
            ] {
                if let Some(b) = bit(shift) {
                    h.insert(k.into(), Value::Boolean(b));
                }
            }
            let inc = (fab.healthMask >> 8) & 0xf;
            if let Some(n) = [
                "none",
                "incorrect-sysguid",
                "incorrect-chassis-sn",
                "no-partition",
                "insufficient-nvlinks",
            ]
            .get(inc.wrapping_sub(1) as usize)
            {
                h.insert("incorrect_configuration".into(), Value::String((*n).into()));
            }
            if let Some(s) = ["healthy", "unhealthy", "limited-capacity"]
                .get(usize::from(fab.healthSummary).wrapping_sub(1))
            {
                h.insert("summary".into(), Value::String((*s).into()));
            }
            if !h.is_empty() {
                f.insert("health".into(), Value::Table(h));
            }
            gpu.insert("fabric".into(), Value::Table(f));
        } else if nvlink.get("links").is_some() {
            nvlink.insert("fabric".into(), Value::Boolean(false));
        }
        board.insert("nvlink".into(), Value::Table(nvlink));
        // GPM and events.
        let mut gpm: nvmlGpmSupport_t = unsafe { std::mem::zeroed() };
        gpm.version = 1;
        let gpm_ok = call!(self, nvmlGpmQueryDeviceSupport(d, &raw mut gpm)).is_ok()
            && gpm.isSupportedDevice != 0;
        board.insert("gpm".into(), Value::Boolean(gpm_ok));
        let _ = call!(
            self,
            nvmlDeviceGetSupportedEventTypes(d, &raw mut out.events)
        );
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        // MIG: the profile table with its placements, and the instances.
        let mut profiles = Vec::new();
        for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
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
            let mut p = Table::new();
            p.insert(
                "name".into(),
                Value::String(name.rsplit(' ').next().unwrap_or(&name).to_string()),
            );
            p.insert("profile".into(), Value::String(profile_name.into()));
            p.insert("id".into(), int(info.id));
            p.insert("slices".into(), int(info.sliceCount));
            p.insert("memory_slices".into(), int(places[0].size));
            p.insert("instances".into(), int(info.instanceCount));
            p.insert(
                "placements".into(),
                Value::Array(places.iter().map(|x| int(x.start)).collect()),
            );
            p.insert("memory_mib".into(), int(info.memorySizeMB as i64));
            p.insert("sm_count".into(), int(info.multiprocessorCount));
            p.insert("copy_engines".into(), int(info.copyEngineCount));
            p.insert("decoders".into(), int(info.decoderCount));
            p.insert("encoders".into(), int(info.encoderCount));
            p.insert("jpegs".into(), int(info.jpegCount));
            p.insert("ofas".into(), int(info.ofaCount));
            profiles.push((info.id, places, p));
        }
        if mig_mode.is_ok() {
            let mut mig = Table::new();
            mig.insert("supported".into(), Value::Boolean(true));
            let compute = profiles
                .iter()
                .filter_map(|(_, _, p)| p.get("slices")?.as_integer())
                .max()
                .unwrap_or(7);
            let memory = profiles
                .iter()
                .flat_map(|(_, places, _)| places.iter().map(|x| i64::from(x.start + x.size)))
                .max()
                .unwrap_or(8);
            mig.insert("compute_slices".into(), int(compute.clamp(1, 8)));
            mig.insert("memory_slices".into(), int(memory.clamp(1, 8)));
            gpu.insert("mig_pending".into(), Value::Boolean(mig_pend == 1));
            // The instances, from their MIG devices.
            let mut instances: Vec<(u32, u32, Table, Vec<Value>)> = Vec::new();
            if mig_cur == 1 {
                let mut count = 0;
                let _ = call!(self, nvmlDeviceGetMaxMigDeviceCount(d, &raw mut count));
                for i in 0..count {
                    let mut md: nvmlDevice_t = std::ptr::null_mut();
                    if call!(self, nvmlDeviceGetMigDeviceHandleByIndex(d, i, &raw mut md)).is_err()
                    {
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
                    let mut gi_info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
                    if call!(self, nvmlDeviceGetGpuInstanceById(d, gi, &raw mut gih)).is_err()
                        || call!(self, nvmlGpuInstanceGetInfo(gih, &raw mut gi_info)).is_err()
                    {
                        continue;
                    }
                    let mut cih: nvmlComputeInstance_t = std::ptr::null_mut();
                    let mut ci_info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
                    let ci_slices = if call!(
                        self,
                        nvmlGpuInstanceGetComputeInstanceById(gih, ci, &raw mut cih)
                    )
                    .is_ok()
                        && call!(self, nvmlComputeInstanceGetInfo_v2(cih, &raw mut ci_info)).is_ok()
                    {
                        ci_info.placement.size
                    } else {
                        0
                    };
                    let entry = match instances.iter_mut().position(|x| x.0 == gi) {
                        Some(at) => &mut instances[at],
                        None => {
                            let mut e = Table::new();
                            if let Some((_, _, p)) =
                                profiles.iter().find(|(id, ..)| *id == gi_info.profileId)
                            {
                                e.insert("profile".into(), p["name"].clone());
                            }
                            e.insert("placement".into(), int(gi_info.placement.start));
                            e.insert("gpu_instance_id".into(), int(gi));
                            let mut mm: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
                            mm.version = version::<nvmlMemory_v2_t>(2);
                            if call!(self, nvmlDeviceGetMemoryInfo_v2(md, &raw mut mm)).is_ok() {
                                e.insert("memory_used_mib".into(), int((mm.used / MIB) as i64));
                            }
                            instances.push((gi, gi_info.profileId, e, Vec::new()));
                            instances.last_mut().expect("pushed")
                        }
                    };
                    let mut c = Table::new();
                    c.insert("id".into(), int(ci));
                    if ci_slices > 0 {
                        c.insert("slices".into(), int(ci_slices));
                    }
                    c.insert("uuid".into(), Value::String(text(&uuid)));
                    entry.3.push(Value::Table(c));
                }
            }
            // Each placed instance's GPU instance id, in its profile's table.
            for (gi, profile_id, e, _) in &instances {
                if let Some((_, places, p)) = profiles.iter_mut().find(|(id, ..)| id == profile_id)
                {
                    let start = e.get("placement").and_then(Value::as_integer).unwrap_or(0) as u32;
                    let slices = p.get("slices").and_then(Value::as_integer).unwrap_or(1) as u32;
                    let ids = p.entry("gpu_instance_ids").or_insert_with(|| {
                        Value::Array(
                            places
                                .iter()
                                .map(|x| int(rule_instance_id(slices, x.size, x.start)))
                                .collect(),
                        )
                    });
                    if let (Some(arr), Some(i)) = (
                        ids.as_array_mut(),
                        places.iter().position(|x| x.start == start),
                    ) {
                        arr[i] = int(*gi);
                    }
                }
            }
            if !profiles.is_empty() {
                mig.insert(
                    "profile".into(),
                    Value::Array(
                        profiles
                            .into_iter()
                            .map(|(_, _, p)| Value::Table(p))
                            .collect(),
                    ),
                );
            }
            board.insert("mig".into(), Value::Table(mig));
            if mig_cur == 1 {
                let list = instances
                    .into_iter()
                    .map(|(_, _, mut e, cis)| {
                        e.insert("compute_instances".into(), Value::Array(cis));
                        Value::Table(e)
                    })
                    .collect();
                gpu.insert("mig".into(), Value::Array(list));
            }
        }
        // Processes.
        gpu.insert(
            "processes".into(),
            Value::Array(self.processes(d, mig_cur == 1)),
        );
        gpu.insert("readings".into(), Value::Table(readings));
        gpu.insert("counters".into(), Value::Table(counters));
        Ok(())
    }

    fn processes(&mut self, d: nvmlDevice_t, mig: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for (kind, graphics) in [("compute", false), ("graphics", true)] {
            let mut count: c_uint = 0;
            let first = if graphics {
                call!(
                    self,
                    nvmlDeviceGetGraphicsRunningProcesses_v3(
                        d,
                        &raw mut count,
                        std::ptr::null_mut()
                    )
                )
            } else {
                call!(
                    self,
                    nvmlDeviceGetComputeRunningProcesses_v3(
                        d,
                        &raw mut count,
                        std::ptr::null_mut()
                    )
                )
            };
            if first.is_err() && first != Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE) {
                continue;
            }
            // R535 and R545 write 32-byte `_v3` entries (with protected
            // memory) where the detail list is not exported, as the
            // exporter reads them; every later branch 24.
            let stride = if self.lib.nvmlDeviceGetRunningProcessDetailList.is_err()
                && self.lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok()
            {
                32
            } else {
                24
            };
            let cap = count as usize + 4;
            let mut raw = vec![0u64; cap * stride / 8];
            let mut n = cap as c_uint;
            let r = if graphics {
                call!(
                    self,
                    nvmlDeviceGetGraphicsRunningProcesses_v3(
                        d,
                        &raw mut n,
                        raw.as_mut_ptr().cast()
                    )
                )
            } else {
                call!(
                    self,
                    nvmlDeviceGetComputeRunningProcesses_v3(d, &raw mut n, raw.as_mut_ptr().cast())
                )
            };
            if r.is_err() {
                continue;
            }
            let list: Vec<nvmlProcessInfo_t> = (0..(n as usize).min(cap))
                .map(|i| {
                    let e = &raw[i * stride / 8..];
                    nvmlProcessInfo_t {
                        pid: e[0] as u32,
                        usedGpuMemory: e[1],
                        gpuInstanceId: e[2] as u32,
                        computeInstanceId: (e[2] >> 32) as u32,
                    }
                })
                .collect();
            for p in &list {
                if let Some(existing) = out.iter_mut().find_map(|v: &mut Value| {
                    let t = v.as_table_mut()?;
                    (t.get("pid")?.as_integer()? == i64::from(p.pid)).then_some(t)
                }) {
                    existing.insert("kind".into(), Value::String("compute+graphics".into()));
                    continue;
                }
                let mut t = Table::new();
                t.insert("pid".into(), int(p.pid));
                let mut name = [0 as c_char; 256];
                let name = if call!(
                    self,
                    nvmlSystemGetProcessName(p.pid, name.as_mut_ptr(), 256)
                )
                .is_ok()
                {
                    text(&name)
                } else {
                    format!("pid {}", p.pid)
                };
                t.insert("name".into(), Value::String(name));
                t.insert(
                    "memory_mib".into(),
                    if p.usedGpuMemory == u64::MAX {
                        na()
                    } else {
                        int((p.usedGpuMemory >> 20) as i64)
                    },
                );
                t.insert("kind".into(), Value::String(kind.into()));
                if mig {
                    t.insert("gpu_instance".into(), int(p.gpuInstanceId));
                    t.insert("compute_instance".into(), int(p.computeInstanceId));
                }
                out.push(Value::Table(t));
            }
        }
        out
    }
}

impl GpuOut {
    fn errors_insert(&mut self, f: &str, code: u32) {
        self.failed(f, code);
    }
}

/// Walks the NVML library at `library` and writes the scenario that
/// replays what it answered, named `name`.
pub fn capture(library: &Path, name: &str) -> Result<Captured, String> {
    // SAFETY: loading a library runs its constructors; the caller named
    // an NVML.
    let lib = unsafe { NvmlLib::new(library) }
        .map_err(|e| format!("cannot load {}: {e}", library.display()))?;
    let mut w = Walker {
        lib,
        absent: BTreeSet::new(),
        timings: BTreeMap::new(),
    };
    call!(w, nvmlInit_v2()).map_err(|e| format!("nvmlInit_v2 failed: NVML error {e}"))?;
    let mut doc = Table::new();
    doc.insert("name".into(), Value::String(name.into()));
    doc.insert(
        "description".into(),
        Value::String(format!(
            "captured by `nvml-sim capture` from {}",
            library.display()
        )),
    );
    let mut buf = [0 as c_char; 96];
    if call!(w, nvmlSystemGetDriverVersion(buf.as_mut_ptr(), 80)).is_ok() {
        doc.insert("driver".into(), Value::String(text(&buf)));
    }
    let mut errors = Table::new();
    let mut cuda = 0;
    if let Err(e) = call!(w, nvmlSystemGetCudaDriverVersion_v2(&raw mut cuda)) {
        errors.insert(
            "nvmlSystemGetCudaDriverVersion_v2".into(),
            nvml_error_name(e),
        );
        errors.insert("nvmlSystemGetCudaDriverVersion".into(), nvml_error_name(e));
    }
    let mut count = 0;
    call!(w, nvmlDeviceGetCount_v2(&raw mut count))
        .map_err(|e| format!("nvmlDeviceGetCount_v2: NVML error {e}"))?;
    let mut boards = Table::new();
    let mut gpus = Vec::new();
    let mut denied = Vec::new();
    let mut comments = Vec::new();
    for i in 0..count {
        let mut out = GpuOut {
            gpu: Table::new(),
            board: Table::new(),
            errors: Table::new(),
            events: 0,
        };
        if let Err(e) = w.gpu(i, &mut out) {
            if e == nvmlReturn_enum_NVML_ERROR_NO_PERMISSION {
                denied.push(Value::Integer(i64::from(i)));
                out.board
                    .insert("name".into(), Value::String("denied".into()));
            } else {
                return Err(format!(
                    "GPU {i}: nvmlDeviceGetHandleByIndex_v2: NVML error {e}"
                ));
            }
        }
        comments.push(format!(
            "# GPU {i}: supported event types 0x{:x}",
            out.events
        ));
        let key = format!("gpu{i}");
        for k in ["brand", "architecture"] {
            out.board
                .entry(k)
                .or_insert(Value::String("unknown".into()));
        }
        out.board.entry("memory").or_insert_with(|| {
            let mut m = Table::new();
            m.insert("total_mib".into(), int(1024));
            Value::Table(m)
        });
        boards.insert(key.clone(), Value::Table(out.board));
        let mut g = Table::new();
        g.insert("model".into(), Value::String(key));
        for (k, v) in out.gpu {
            g.insert(k, v);
        }
        if !out.errors.is_empty() {
            g.insert("errors".into(), Value::Table(out.errors));
        }
        gpus.push(Value::Table(g));
    }
    let _ = call!(w, nvmlShutdown());
    if !errors.is_empty() {
        doc.insert("errors".into(), Value::Table(errors));
    }
    if !denied.is_empty() {
        doc.insert("denied".into(), Value::Array(denied));
    }
    if !w.absent.is_empty() {
        doc.insert(
            "absent_functions".into(),
            Value::Array(
                w.absent
                    .iter()
                    .map(|f| Value::String((*f).to_string()))
                    .collect(),
            ),
        );
    }
    doc.insert("board".into(), Value::Table(boards));
    doc.insert("gpu".into(), Value::Array(gpus));
    let body = toml::to_string(&doc).map_err(|e| format!("cannot write the scenario: {e}"))?;
    Ok(Captured {
        scenario: format!(
            "# A scenario captured from a real NVML by `nvml-sim capture` (nvml-sim/README.md,\n# \"Capture a real host\"): replay it with `nvml-exporter --simulate FILE`.\n{}\n\n{body}",
            comments.join("\n")
        ),
        timings: w.timings,
    })
}
