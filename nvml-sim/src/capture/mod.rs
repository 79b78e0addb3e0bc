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
//! Each NVML group has its file, as in `ffi/` and `import/`; all of them
//! write the types of `crate::schema`. It loads the library given (any
//! NVML, the simulator's included: that is how the tests prove a capture
//! replays), never the simulator it is part of.

#![allow(non_snake_case, non_upper_case_globals)]

use crate::model::BoardFile;
use crate::schema::{at, CallErrors, CountersFile, GpuFile, ReadingsFile, ScenarioFile};
use crate::value::Invalid;
use crate::value::NvmlErrorCode;
use nvml_wrapper_sys::bindings::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, CStr};
use std::path::Path;
use std::time::{Duration, Instant};

const NOT_FOUND_FN: u32 = 13;

/// `NVML_STRUCT_VERSION(data, ver)`.
const fn version<T>(v: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (v << 24)
}

/// Bytes in a MiB, the scenario's unit of memory.
const MIB: u64 = 1 << 20;

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

mod clocks;
mod ecc;
mod fabric;
mod fan;
mod fields;
mod info;
mod memory;
mod mig;
mod mode;
mod pcie;
mod power;
mod processes;
mod retirement;
mod temperature;
mod throttle;
mod utilization;

struct Walker {
    lib: NvmlLib,
    /// Exports the library lacks, among those asked for.
    absent: BTreeSet<&'static str>,
    /// How long each call took, by function: `scripts/device-check` keeps
    /// these as the real driver's latencies (BENCHMARKS.md).
    timings: BTreeMap<&'static str, Vec<Duration>>,
    /// How long `nvmlDeviceGetFieldValues` took with each field id alone,
    /// on the first GPU (`fields::FIELD_PROBE`).
    fields: BTreeMap<u32, Vec<Duration>>,
}

/// What `capture` found: the scenario text and the time each NVML call
/// took.
pub struct Captured {
    pub scenario: String,
    pub timings: BTreeMap<&'static str, Vec<Duration>>,
    pub fields: BTreeMap<u32, Vec<Duration>>,
}

/// Minimum, median, 90th percentile and maximum, microseconds.
fn stats(d: &[Duration]) -> [f64; 4] {
    let mut us: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    [at(0.0), at(0.5), at(0.9), at(1.0)]
}

impl Captured {
    /// One line per function: calls, then the minimum, median, 90th
    /// percentile and maximum in microseconds, tab separated, with a header.
    ///
    /// The table is a latency profile (nvml-sim README, "Latency
    /// profiles"): after the functions, `field:base` (the cheapest field
    /// timed alone), one `field:<id>` row per field id timed alone, less
    /// the base, and `field:default` (the median field's).
    pub fn timings_table(&self) -> String {
        let mut out = String::from("function\tcalls\tmin_us\tmedian_us\tp90_us\tmax_us\n");
        let mut row = |name: &str, calls: usize, s: [f64; 4]| {
            out.push_str(&format!(
                "{name}\t{calls}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\n",
                s[0], s[1], s[2], s[3]
            ));
        };
        for (f, d) in &self.timings {
            row(f, d.len(), stats(d));
        }
        let alone: Vec<(u32, usize, [f64; 4])> = self
            .fields
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(id, d)| (*id, d.len(), stats(d)))
            .collect();
        let Some(base) = alone
            .iter()
            .map(|(_, _, s)| *s)
            .min_by(|a, b| a[1].total_cmp(&b[1]))
        else {
            return out;
        };
        row("field:base", 0, base);
        let mut medians = Vec::new();
        for (id, calls, s) in &alone {
            let added = [0, 1, 2, 3].map(|i| (s[i] - base[i]).max(0.0));
            medians.push(added);
            row(&format!("field:{id}"), *calls, added);
        }
        medians.sort_by(|a, b| a[1].total_cmp(&b[1]));
        row("field:default", 0, medians[medians.len() / 2]);
        out
    }
}

/// A string an NVML call writes into a buffer.
fn text(buf: &[c_char]) -> String {
    // SAFETY: NVML NUL-terminates; the buffer was zeroed first.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Milliwatts as the scenario's watts.
fn watts(mw: u32) -> f64 {
    f64::from(mw) / 1000.0
}

/// What one GPU's calls answered, as scenario tables.
#[derive(Default)]
struct GpuOut {
    gpu: GpuFile,
    board: BoardFile,
    readings: ReadingsFile,
    counters: CountersFile,
    /// `[gpu.errors]`: the calls that failed, by function.
    errors: CallErrors,
    /// `nvmlDeviceGetSupportedEventTypes`, for a comment.
    events: u64,
}

impl GpuOut {
    /// A call that failed: N/A where the scenario has a key (the caller
    /// writes it), and its error for the call itself.
    fn failed(&mut self, f: &str, code: u32) {
        if code != NOT_FOUND_FN {
            self.errors.insert(f, NvmlErrorCode::returned(code));
        }
    }
}

/// What the walk of one GPU learns early and uses later.
struct Facts {
    /// `nvmlDeviceGetArchitecture`.
    arch: Result<u32, u32>,
    /// `nvmlDeviceGetMigMode`: current and pending.
    mig: Result<(u32, u32), u32>,
}

impl Walker {
    /// One GPU, group by group.
    fn gpu(&mut self, index: u32, out: &mut GpuOut) -> Result<(), u32> {
        let mut d: nvmlDevice_t = std::ptr::null_mut();
        call!(self, nvmlDeviceGetHandleByIndex_v2(index, &raw mut d))?;
        let arch = self.identity(d, out);
        self.platform(d, out);
        self.memory(d, out);
        self.power_limits(d, out);
        self.clocks(d, out);
        self.thresholds(d, out);
        self.pcie(d, out);
        self.settings(d, out);
        self.readings(d, out);
        self.utilization(d, out);
        let ecc_on = self.ecc(d, out);
        self.retired_pages(d, out);
        let (mut cur, mut pend) = (0, 0);
        let facts = Facts {
            arch,
            mig: call!(self, nvmlDeviceGetMigMode(d, &raw mut cur, &raw mut pend))
                .map(|()| (cur, pend)),
        };
        self.remapped_rows(d, &facts, ecc_on.is_some(), out);
        self.replays(d, out);
        self.clock_event_reasons(d, out);
        let links = self.field_values(d, out);
        self.fabric(d, links, out);
        self.gpm_and_events(d, out);
        self.mig(d, &facts, out);
        let mig_on = matches!(facts.mig, Ok((1, _)));
        out.gpu.processes = Some(self.processes(d, mig_on));
        out.gpu.readings = Some(at(std::mem::take(&mut out.readings)));
        out.gpu.counters = Some(std::mem::take(&mut out.counters));
        Ok(())
    }

    fn gpm_and_events(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        // SAFETY: a plain C struct; zero is a valid value.
        let mut gpm: nvmlGpmSupport_t = unsafe { std::mem::zeroed() };
        gpm.version = 1;
        let gpm_ok = call!(self, nvmlGpmQueryDeviceSupport(d, &raw mut gpm)).is_ok()
            && gpm.isSupportedDevice != 0;
        out.board.gpm = Some(gpm_ok);
        let _ = call!(
            self,
            nvmlDeviceGetSupportedEventTypes(d, &raw mut out.events)
        );
    }
}

/// Walks the NVML library at `library` and writes the scenario that
/// replays what it answered, named `name`.
pub fn capture(library: &Path, name: &str) -> Result<Captured, Invalid> {
    // SAFETY: loading a library runs its constructors; the caller named
    // an NVML.
    let lib = unsafe { NvmlLib::new(library) }
        .map_err(|e| format!("cannot load {}: {e}", library.display()))?;
    let mut w = Walker {
        lib,
        absent: BTreeSet::new(),
        timings: BTreeMap::new(),
        fields: BTreeMap::new(),
    };
    call!(w, nvmlInit_v2()).map_err(|e| format!("nvmlInit_v2 failed: NVML error {e}"))?;
    let mut doc = ScenarioFile {
        name: Some(name.into()),
        description: Some(format!(
            "captured by `nvml-sim capture` from {}",
            library.display()
        )),
        ..ScenarioFile::default()
    };
    let mut buf = [0 as c_char; 96];
    if call!(w, nvmlSystemGetDriverVersion(buf.as_mut_ptr(), 80)).is_ok() {
        doc.driver = Some(at(text(&buf)));
    }
    let mut cuda = 0;
    if let Err(e) = call!(w, nvmlSystemGetCudaDriverVersion_v2(&raw mut cuda)) {
        let mut errors = CallErrors::default();
        for f in [
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlSystemGetCudaDriverVersion",
        ] {
            errors.insert(f, NvmlErrorCode::returned(e));
        }
        doc.errors = Some(at(errors));
    }
    let mut count = 0;
    call!(w, nvmlDeviceGetCount_v2(&raw mut count))
        .map_err(|e| format!("nvmlDeviceGetCount_v2: NVML error {e}"))?;
    let mut denied = Vec::new();
    let mut comments = Vec::new();
    for i in 0..count {
        let mut out = GpuOut::default();
        if let Err(e) = w.gpu(i, &mut out) {
            if e == nvmlReturn_enum_NVML_ERROR_NO_PERMISSION {
                denied.push(i);
                out.board.name = Some("denied".into());
            } else {
                return Err(Invalid::from(format!(
                    "GPU {i}: nvmlDeviceGetHandleByIndex_v2: NVML error {e}"
                )));
            }
        }
        comments.push(format!(
            "# GPU {i}: supported event types 0x{:x}",
            out.events
        ));
        doc.board.insert(format!("gpu{i}"), at(finish(&mut out)));
        doc.gpu.push(at(GpuFile {
            model: Some(at(format!("gpu{i}"))),
            ..out.gpu
        }));
    }
    if count > 0 && !denied.contains(&0) {
        w.time_fields(0);
    }
    let _ = call!(w, nvmlShutdown());
    if !denied.is_empty() {
        doc.denied = Some(at(denied));
    }
    if !w.absent.is_empty() {
        doc.absent_functions = Some(at(w.absent.iter().map(|f| (*f).to_string()).collect()));
    }
    let body = doc
        .to_toml()
        .map_err(|e| format!("cannot write the scenario: {e}"))?;
    Ok(Captured {
        scenario: format!(
            "# A scenario captured from a real NVML by `nvml-sim capture` (nvml-sim/README.md,\n# \"Capture a real host\"): replay it with `nvml-exporter --simulate FILE`.\n{}\n\n{body}",
            comments.join("\n")
        ),
        timings: w.timings,
        fields: w.fields,
    })
}

/// The GPU's tables put in place, and its board with what a board must
/// have where the calls gave nothing (a denied GPU).
fn finish(out: &mut GpuOut) -> BoardFile {
    let mut board = std::mem::take(&mut out.board);
    board.brand.get_or_insert(crate::model::Brand::Unknown);
    board
        .architecture
        .get_or_insert(crate::model::Architecture::Unknown);
    board
        .memory
        .get_or_insert_with(|| crate::model::MemorySection {
            total_mib: Some(1024),
            ..Default::default()
        });
    let errors = std::mem::take(&mut out.errors);
    if !errors.is_empty() {
        out.gpu.errors = Some(at(errors));
    }
    board
}
