//! One batched `nvmlDeviceGetFieldValues` call per poll for the scalar
//! fields of every enabled family; each family then reads its values from
//! the batch and makes its own calls only for what the batch lacks.

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;

use super::super::calls::is_refresh;
use super::super::fields;
use super::super::raw::{self, FieldValue};
use super::Gpu;
use crate::family::{Family, FamilySet};

/// The batch's answers by field id; a field the driver did not deliver is
/// not here.
#[derive(Debug, Default)]
pub struct Scalar(HashMap<u32, FieldValue>);

impl Scalar {
    pub fn get(&self, id: u32) -> Option<FieldValue> {
        self.0.get(&id).copied()
    }

    pub fn u64(&self, id: u32) -> Option<u64> {
        self.get(id).and_then(FieldValue::as_u64)
    }
}

/// The scalar field ids each enabled family reads, in request order.
fn requests(g: &Gpu<'_, '_>, families: &FamilySet) -> Vec<(u32, &'static str)> {
    let mut ids: Vec<(u32, &'static str)> = Vec::new();
    let mut add = |family: Family, list: &[u32]| {
        if families.contains(family) {
            ids.extend(list.iter().map(|&id| (id, family.name())));
        }
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
    let [sw_thermal, hw_thermal, brake] =
        fields::thermal_and_brake_reason_ids(g.nvml.field_id_scheme());
    add(
        Family::Throttle,
        &[
            fields::REASON_SW_POWER_CAP,
            fields::REASON_SYNC_BOOST,
            fields::PERF_POLICY_THERMAL,
            sw_thermal,
            hw_thermal,
            brake,
        ],
    );
    if is_refresh(g.poll) {
        add(Family::Nvlink, &[fields::NVLINK_LINK_COUNT]);
    }
    ids
}

pub fn sample(g: &mut Gpu<'_, '_>, families: &FamilySet) -> Scalar {
    let ids = requests(g, families);
    let mut out = Scalar::default();
    if ids.is_empty() {
        return out;
    }
    let requests: Vec<(u32, u32)> = ids.iter().map(|(id, _)| (*id, 0)).collect();
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
    for ((id, family), res) in ids.iter().zip(results) {
        match res {
            Ok(v) => {
                out.0.insert(*id, v);
            }
            // An id this driver does not know comes back as an invalid
            // argument: absent, like "not supported".
            Err(NvmlError::InvalidArg) => {}
            Err(e) => {
                let _ = g.calls.failure::<()>(family, &e);
            }
        }
    }
    out
}
