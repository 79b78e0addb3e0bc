//! NVLink state, errors and traffic per link (`nvidia_gpu_nvlink_*`): one
//! more batched field-values call, with the link as scope id. The link
//! count is cached.

use std::collections::{BTreeMap, HashMap};

use nvml_wrapper::error::NvmlError;

use super::super::calls::{Cached, Got};
use super::super::fields;
use super::super::raw::{self, FieldValue};
use super::super::units::kib_to_bytes;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, NvLink, NvLinkError};

#[derive(Default)]
pub struct State {
    links: Cached<u32>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar, r: &mut GpuReadings) {
        let fam = Family::Nvlink.name();
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        let from_field = scalar.u64(fields::NVLINK_LINK_COUNT).map(|n| n as u32);
        let links = self
            .links
            .get(g.poll, || match from_field {
                Some(n) => Got::Value(n),
                // No link-count field: probe link states until the driver
                // says a link does not exist.
                None => {
                    let mut n = 0;
                    while n < nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS {
                        match c.run(fam, || raw::nvlink_active(nvml, h, n)) {
                            Got::Value(_) => n += 1,
                            _ => break,
                        }
                    }
                    Got::Value(n)
                }
            })
            .filter(|&n| n > 0);
        let Some(links) = links else {
            return;
        };
        let mut requests = Vec::new();
        for link in 0..links {
            for id in fields::PER_LINK {
                requests.push((id, link));
            }
            if let Some(id) = fields::nvlink_crc_data_id(link) {
                requests.push((id, 0));
            }
        }
        let Some(results) = c.run(fam, || raw::field_values(nvml, h, &requests)).value() else {
            return;
        };
        let mut per_link: BTreeMap<u32, HashMap<u32, FieldValue>> = BTreeMap::new();
        for (&(id, scope), res) in requests.iter().zip(results) {
            let link = if fields::PER_LINK.contains(&id) {
                scope
            } else {
                // Legacy unscoped id: the link is encoded in the id.
                (0..links)
                    .find(|l| fields::nvlink_crc_data_id(*l) == Some(id))
                    .unwrap_or(scope)
            };
            match res {
                Ok(v) => {
                    per_link.entry(link).or_default().insert(id, v);
                }
                Err(NvmlError::InvalidArg) => {}
                Err(e) => {
                    let _ = c.failure::<()>(fam, &e);
                }
            }
        }
        for link in 0..links {
            let vals = per_link.remove(&link).unwrap_or_default();
            let u = |id| vals.get(&id).and_then(|v: &FieldValue| v.as_u64());
            let up = match u(fields::NVLINK_STATE) {
                Some(s) => Some(s == 1),
                None => c.run(fam, || raw::nvlink_active(nvml, h, link)).value(),
            };
            let Some(up) = up else { continue };
            let mut errors = Vec::new();
            for (id, kind) in [
                (fields::NVLINK_CRC_FLIT, NvLinkError::CrcFlit),
                (fields::NVLINK_REPLAY, NvLinkError::Replay),
                (fields::NVLINK_RECOVERY, NvLinkError::Recovery),
            ] {
                if let Some(v) = u(id) {
                    errors.push((kind, v));
                }
            }
            if let Some(v) = fields::nvlink_crc_data_id(link).and_then(u) {
                errors.push((NvLinkError::CrcData, v));
            }
            errors.sort_by_key(|(k, _)| *k);
            let tx_bytes =
                u(fields::NVLINK_TX_BYTES).or_else(|| u(fields::NVLINK_TX_KIB).map(kib_to_bytes));
            let rx_bytes =
                u(fields::NVLINK_RX_BYTES).or_else(|| u(fields::NVLINK_RX_KIB).map(kib_to_bytes));
            r.nvlinks.push(NvLink {
                link,
                up,
                errors,
                tx_bytes,
                rx_bytes,
            });
        }
    }
}
