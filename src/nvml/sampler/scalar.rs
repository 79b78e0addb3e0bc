//! One batched `nvmlDeviceGetFieldValues` call per poll for the scalar
//! fields of every enabled family; each family then reads its values from
//! the batch and makes its own calls only for what the batch lacks. A
//! field the driver answered "not supported" (or does not know) leaves the
//! batch until the static refresh: each entry costs the driver time.

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;

use super::super::calls::{is_refresh, Got};
use super::super::fields;
use super::super::raw::{self, FieldValue};
use super::Gpu;
use crate::family::{Family, FamilySet};

/// The batch's answers by field id and scope id; a field the driver did
/// not deliver is not here.
#[derive(Debug, Default)]
pub struct Scalar(HashMap<(u32, u32), FieldValue>);

impl Scalar {
    /// A field asked for with scope id 0 (whole GPU).
    pub fn get(&self, id: u32) -> Option<FieldValue> {
        self.scoped(id, 0)
    }

    pub fn scoped(&self, id: u32, scope: u32) -> Option<FieldValue> {
        self.0.get(&(id, scope)).copied()
    }

    pub fn u64(&self, id: u32) -> Option<u64> {
        self.get(id).and_then(FieldValue::as_u64)
    }
}

/// Fields read in a call of their own, outside the batch: static values
/// (limits, thresholds) read at the static refresh only where the GPU
/// needs them. Each answer pairs with its `T` in `table`; an entry the
/// driver did not deliver is left out.
pub fn read_apart<T: Copy>(
    g: &mut Gpu<'_, '_>,
    family: &'static str,
    table: &[((u32, u32), T)],
) -> Got<Vec<(T, FieldValue)>> {
    let (nvml, h) = (g.nvml, g.handle);
    let requests: Vec<(u32, u32)> = table.iter().map(|&(request, _)| request).collect();
    g.calls
        .run(family, || raw::field_values(nvml, h, &requests))
        .map(|results| {
            table
                .iter()
                .zip(results)
                .filter_map(|(&(_, t), v)| v.ok().map(|v| (t, v)))
                .collect()
        })
}

/// One request of the batch: field id, scope id, and the family whose
/// error count a failure of the entry goes to.
type Request = (u32, u32, &'static str);

/// The scalar field requests of each enabled family, in request order.
fn requests(g: &Gpu<'_, '_>, families: &FamilySet) -> Vec<Request> {
    let mut ids: Vec<Request> = Vec::new();
    let driver = g.driver;
    let mut add_scoped = |family: Family, list: &[(u32, u32)]| {
        if families.contains(family) {
            ids.extend(
                list.iter()
                    .filter(|&&(id, _)| driver.has_field(id))
                    .map(|&(id, scope)| (id, scope, family.name())),
            );
        }
    };
    let mut add = |family: Family, list: &[u32]| {
        let scoped: Vec<(u32, u32)> = list.iter().map(|&id| (id, 0)).collect();
        add_scoped(family, &scoped);
    };
    add(Family::Temperature, &[fields::MEMORY_TEMP]);
    add(
        Family::Pcie,
        &[
            fields::PCIE_TX_BYTES,
            fields::PCIE_RX_BYTES,
            fields::PCIE_REPLAY,
        ],
    );
    add(
        Family::Retirement,
        &[
            fields::RECOVERY_ACTION,
            fields::RETIRED_SBE,
            fields::RETIRED_DBE,
            fields::RETIRED_PENDING,
            fields::REMAPPED_COR,
            fields::REMAPPED_UNC,
            fields::REMAPPED_PENDING,
            fields::REMAPPED_FAILURE,
        ],
    );
    // Counters by location only for `ecc.by-location`: by default the
    // totals alone are exported, and a real driver reads each field.
    let by_location = families.contains(Family::EccByLocation);
    let ecc: Vec<u32> = fields::ECC_FIELDS
        .iter()
        .filter(|(.., location)| by_location || location.is_none())
        .map(|&(id, ..)| id)
        .collect();
    add(Family::Ecc, &ecc);
    add(Family::Power, &[fields::TOTAL_ENERGY]);
    // The instantaneous draw only for `power.instant` (DCGM's
    // DCGM_FI_DEV_POWER_USAGE_INSTANT): one entry more in the batch.
    add(Family::PowerInstant, &[fields::POWER_INSTANT]);
    if let Some(lifetime) = driver.power_smoothing_lifetime_id() {
        add(Family::Power, &[lifetime]);
    }
    add(
        Family::Throttle,
        &[
            fields::REASON_SW_POWER_CAP,
            fields::REASON_SYNC_BOOST,
            fields::PERF_POLICY_THERMAL,
        ],
    );
    if let Some(durations) = driver.throttle_duration_ids() {
        add(Family::Throttle, &durations);
    }
    if is_refresh(g.poll) {
        add(Family::Nvlink, &[fields::NVLINK_LINK_COUNT]);
    }
    // Module and memory draw, where NVML reports scopes beside the GPU's
    // (Grace superchips; memory on Hopper and newer). Their limits are
    // static and read apart, at the static refresh (`power.rs`).
    add_scoped(
        Family::Power,
        &[
            (fields::POWER_AVERAGE, fields::POWER_SCOPE_MODULE),
            (fields::POWER_AVERAGE, fields::POWER_SCOPE_MEMORY),
        ],
    );
    ids
}

/// The batch of `families`' scalar fields, with the NVLink totals that
/// `nvlink.rs` asks for this poll (`nvlink`) and the C2C link fields of
/// `c2c.rs` (`c2c`) riding along.
pub fn sample(
    g: &mut Gpu<'_, '_>,
    families: &FamilySet,
    nvlink: &[(u32, u32)],
    c2c: &[(u32, u32)],
) -> Scalar {
    let mut ids = requests(g, families);
    let driver = g.driver;
    ids.extend(
        nvlink
            .iter()
            .filter(|&&(id, _)| driver.has_field(id))
            .map(|&(id, scope)| (id, scope, Family::Nvlink.name())),
    );
    ids.extend(
        c2c.iter()
            .map(|&(id, scope)| (id, scope, Family::C2c.name())),
    );
    // What the driver said it does not have is not asked again before the
    // static refresh: the families fall back as when it answered so.
    ids.retain(|&(id, scope, _)| !g.calls.absent_fields.contains(&(id, scope)));
    let mut out = Scalar::default();
    if ids.is_empty() {
        return out;
    }
    let requests: Vec<(u32, u32)> = ids.iter().map(|&(id, scope, _)| (id, scope)).collect();
    let (nvml, handle) = (g.nvml, g.handle);
    let Some(results) = g
        .calls
        .run("field_values", || {
            raw::field_values(nvml, handle, &requests)
        })
        .value()
    else {
        return out;
    };
    for (&(id, scope, family), res) in ids.iter().zip(results) {
        match res {
            Ok(v) => {
                out.0.insert((id, scope), v);
            }
            // An id this driver does not know comes back as an invalid
            // argument: absent, like "not supported".
            Err(NvmlError::InvalidArg) => {
                g.calls.absent_fields.insert((id, scope));
            }
            Err(e @ NvmlError::NotSupported) => {
                let _ = g.calls.failure::<()>(family, &e);
                g.calls.absent_fields.insert((id, scope));
            }
            Err(e) => {
                let _ = g.calls.failure::<()>(family, &e);
            }
        }
    }
    out
}
