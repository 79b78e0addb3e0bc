//! Field values (`ffi/fields.rs`): the NVLink count and version, memory
//! temperature and recovery action (keys of their own); the fields that
//! move with time, pinned as `[gpu.fields]` (energy, PCIe and NVLink
//! bytes, throttle durations, power by scope); and from the scoped power
//! fields, the module's limits and the module's and memory's draw.

use super::{GpuOut, Walker, NOT_FOUND_FN};
use crate::model::{NvlinkSection, PowerSection, ScopeSection};
use crate::schema::{at, FieldAnswer, FieldPins, RecoveryAction};
use crate::value::{NvmlErrorCode, Val};
use nvml_wrapper_sys::bindings::field_id::*;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

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

/// The field ids `capture` times alone on the first GPU, for a latency
/// profile: every id the exporter reads on some branch (its scalar batch
/// with the NVLink error totals 38, 45, 52, 59, its per-link NVLink batch
/// asked for link 0) and those the capture reads.
const FIELD_PROBE: &[u32] = &[
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
    28, 29, 30, 31, 38, 39, 45, 52, 59, 60, 61, 74, 75, 76, 82, 83, 91, 92, 94, 138, 139, 142, 143,
    144, 145, 161, 162, 163, 165, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197,
    198, 202, 204, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 230, 251, 252, 253, 258, 263,
    269, 270, 271,
];

/// Times each field is asked alone: the first answers of a function cost
/// more than the next (BENCHMARKS.md, "Real hardware"), so each is asked
/// this many times.
const FIELD_REPEATS: usize = 5;

impl Walker {
    /// Times `nvmlDeviceGetFieldValues` with each of `FIELD_PROBE` alone on
    /// GPU `index` (its own timings, not the function's).
    pub(super) fn time_fields(&mut self, index: u32) {
        let mut d: nvmlDevice_t = std::ptr::null_mut();
        if call!(self, nvmlDeviceGetHandleByIndex_v2(index, &raw mut d)).is_err() {
            return;
        }
        let Ok(get) = self.lib.nvmlDeviceGetFieldValues.as_ref().map(|f| *f) else {
            return;
        };
        for &id in FIELD_PROBE {
            for _ in 0..FIELD_REPEATS {
                // SAFETY: a plain C struct; zero is a valid value.
                let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                v.fieldId = id;
                let started = Instant::now();
                // SAFETY: one entry, a handle NVML gave us.
                let code = unsafe { get(d, 1, &raw mut v) };
                let took = started.elapsed();
                if code != 0 {
                    break;
                }
                self.fields.entry(id).or_default().push(took);
            }
        }
    }

    /// The answers to `wanted` (field id, scope id), each its value or its
    /// `nvmlReturn_t`; none where the call itself failed.
    pub(super) fn fields(
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

    /// The keyed and pinned fields; returns the NVLink count.
    pub(super) fn field_values(&mut self, d: nvmlDevice_t, out: &mut GpuOut) -> u32 {
        let keyed = self.fields(
            d,
            &[
                (NVML_FI_DEV_NVLINK_LINK_COUNT, 0),
                (NVML_FI_DEV_NVLINK_GET_VERSION, 0),
                (NVML_FI_DEV_MEMORY_TEMP, 0),
                (230, 0),
            ],
        );
        let answer = |i: usize| keyed.get(i).and_then(|(_, _, v)| v.ok());
        let link_count = answer(0).filter(|n| *n > 0).map_or(0, |n| n as u32);
        let mut nvlink = NvlinkSection::default();
        if link_count > 0 {
            nvlink.links = Some(link_count);
            nvlink.version = answer(1).map(|v| v as u32);
        }
        out.board.nvlink = Some(nvlink);
        out.readings.memory_temperature_c =
            Some(answer(2).map_or(Val::NotSupported, |t| Val::Is(t as u32)));
        out.counters.recovery_action = Some(answer(3).map_or(Val::NotSupported, |a| {
            Val::Is(
                RecoveryAction::ALL
                    .get(a as usize)
                    .copied()
                    .unwrap_or(RecoveryAction::None),
            )
        }));
        let mut wanted: Vec<(u32, u32)> = PINNED_FIELDS.iter().map(|&f| (f, 0)).collect();
        wanted.extend(SCOPED_POWER.flat_map(|f| (0..3).map(move |s| (f, s))));
        for l in 0..link_count {
            wanted.extend(PER_LINK_FIELDS.iter().map(|&f| (f, l)));
        }
        let mut fields = FieldPins::default();
        for (id, scope, v) in self.fields(d, &wanted) {
            let answer = match v {
                Ok(v) => FieldAnswer::Value(v),
                Err(e) => FieldAnswer::Error(NvmlErrorCode::returned(e)),
            };
            fields.insert(id, scope, answer);
        }
        scoped_power(&fields, out);
        out.gpu.fields = Some(at(fields));
        link_count
    }
}

/// The module's (scope 1) and memory's (scope 2) draw, and the module's
/// limits, from the scoped power fields.
fn scoped_power(fields: &FieldPins, out: &mut GpuOut) {
    let scoped = |f: u32, s: u32| match fields.get(f, s) {
        Some(FieldAnswer::Value(mw)) => Some(mw as f64 / 1000.0),
        _ => None,
    };
    if let Some(avg) = scoped(NVML_FI_DEV_POWER_AVERAGE, 1) {
        out.readings.module_power_w = Some(Val::Is(avg));
        let module = ScopeSection {
            default_limit_w: scoped(NVML_FI_DEV_POWER_DEFAULT_LIMIT, 1),
            min_limit_w: scoped(NVML_FI_DEV_POWER_MIN_LIMIT, 1),
            max_limit_w: scoped(NVML_FI_DEV_POWER_MAX_LIMIT, 1),
            ..ScopeSection::default()
        };
        if module.default_limit_w.is_some() {
            out.board
                .power
                .get_or_insert_with(PowerSection::default)
                .module = Some(module);
        }
    }
    if let Some(avg) = scoped(NVML_FI_DEV_POWER_AVERAGE, 2) {
        out.readings.memory_power_w = Some(Val::Is(avg));
    }
}
