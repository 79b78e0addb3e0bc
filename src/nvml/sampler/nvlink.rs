//! NVLink state, errors and traffic per link (`nvidia_gpu_nvlink_*`): one
//! more batched field-values call, with the link as scope id. The link
//! count is cached; what a link does not support, and the KiB counters
//! where the byte counters answer, leave the batch until the static
//! refresh.
//!
//! The error counters depend on the NVLink generation: up to NVLink4
//! (Hopper) the DL replay, recovery and CRC counters (161-163, plus the
//! legacy per-link CRC data ids); on Blackwell, where nvml.h calls those
//! unsupported, the NVLink5 link recovery, effective and symbol error
//! counters (213-222). A GPU whose architecture this build does not know
//! is asked both.

use std::collections::{HashMap, HashSet};

use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::error::NvmlError;

use super::super::calls::{is_refresh, Cached, Got};
use super::super::fields;
use super::super::raw::{self, FieldValue};
use super::super::units::kib_to_bytes;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, NvLink, NvLinkBer, NvLinkError};

#[derive(Default)]
pub struct State {
    links: Cached<u32>,
    /// Requests left out of the batch until the next static refresh: those
    /// the driver answered "not supported" (or did not know), and the KiB
    /// traffic counters of a link whose exact byte counters answered (the
    /// same traffic, asked twice). Each entry costs the driver time, and
    /// this batch has one per link and counter (a DGX H100: 162).
    skip: HashSet<(u32, u32)>,
}

/// Which error counters a GPU's NVLink generation has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generations {
    pub legacy: bool,
    pub nvlink5: bool,
}

impl Generations {
    pub fn of(architecture: Option<&DeviceArchitecture>) -> Generations {
        match architecture {
            Some(DeviceArchitecture::Blackwell) => Generations {
                legacy: false,
                nvlink5: true,
            },
            Some(DeviceArchitecture::Unknown) | None => Generations {
                legacy: true,
                nvlink5: true,
            },
            Some(_) => Generations {
                legacy: true,
                nvlink5: false,
            },
        }
    }

    /// The `(field id, scope id)` requests for one link.
    pub fn requests(self, link: u32, with_ber: bool, out: &mut Vec<(u32, u32)>) {
        let mut ids: Vec<u32> = fields::PER_LINK_COMMON.to_vec();
        if self.legacy {
            ids.extend(fields::PER_LINK_LEGACY_ERRORS);
        }
        if self.nvlink5 {
            ids.extend(fields::PER_LINK_NVLINK5_ERRORS);
            if with_ber {
                ids.extend(fields::PER_LINK_NVLINK5_BER);
            }
        }
        out.extend(ids.into_iter().map(|id| (id, link)));
        if self.legacy {
            // Legacy unscoped id: the link is encoded in the id.
            if let Some(id) = fields::nvlink_crc_data_id(link) {
                out.push((id, 0));
            }
        }
    }
}

/// The error counters of one link, from its answers.
pub fn link_errors(link: u32, u: impl Fn(u32, u32) -> Option<u64>) -> Vec<(NvLinkError, u64)> {
    let mut errors: Vec<(NvLinkError, u64)> = [
        (fields::NVLINK_CRC_FLIT, NvLinkError::CrcFlit),
        (fields::NVLINK_REPLAY, NvLinkError::Replay),
        (fields::NVLINK_RECOVERY, NvLinkError::Recovery),
        (fields::NVLINK5_RECOVERY, NvLinkError::Recovery),
        (fields::NVLINK5_RECOVERY_FAILED, NvLinkError::RecoveryFailed),
        (fields::NVLINK5_EFFECTIVE_ERRORS, NvLinkError::Effective),
        (fields::NVLINK5_SYMBOL_ERRORS, NvLinkError::Symbol),
    ]
    .into_iter()
    .filter_map(|(id, kind)| u(id, link).map(|v| (kind, v)))
    .collect();
    if let Some(v) = fields::nvlink_crc_data_id(link).and_then(|id| u(id, 0)) {
        errors.push((NvLinkError::CrcData, v));
    }
    errors.sort_by_key(|(k, _)| *k);
    // One value per kind: a driver answering both generations' recovery
    // counters for a link keeps the DL one.
    errors.dedup_by_key(|(k, _)| *k);
    errors
}

impl State {
    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, '_>,
        scalar: &Scalar,
        architecture: Option<&DeviceArchitecture>,
        per_link: bool,
        r: &mut GpuReadings,
    ) {
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
        let generations = Generations::of(architecture);
        if is_refresh(g.poll) {
            self.skip.clear();
        }
        let mut requests = Vec::new();
        for link in 0..links {
            generations.requests(link, per_link, &mut requests);
        }
        requests.retain(|r| !self.skip.contains(r));
        let Some(results) = c.run(fam, || raw::field_values(nvml, h, &requests)).value() else {
            return;
        };
        let mut answers: HashMap<(u32, u32), FieldValue> = HashMap::new();
        for (&request, res) in requests.iter().zip(results) {
            match res {
                Ok(v) => {
                    answers.insert(request, v);
                }
                Err(NvmlError::InvalidArg) => {
                    self.skip.insert(request);
                }
                Err(e) => {
                    if matches!(e, NvmlError::NotSupported) {
                        self.skip.insert(request);
                    }
                    let _ = c.failure::<()>(fam, &e);
                }
            }
        }
        for (exact, kib) in [
            (fields::NVLINK_TX_BYTES, fields::NVLINK_TX_KIB),
            (fields::NVLINK_RX_BYTES, fields::NVLINK_RX_KIB),
        ] {
            for link in 0..links {
                if answers.contains_key(&(exact, link)) {
                    self.skip.insert((kib, link));
                }
            }
        }
        let u = |id: u32, scope: u32| answers.get(&(id, scope)).and_then(|v| v.as_u64());
        for link in 0..links {
            let up = match u(fields::NVLINK_STATE, link) {
                Some(s) => Some(s == 1),
                None => c.run(fam, || raw::nvlink_active(nvml, h, link)).value(),
            };
            let Some(up) = up else { continue };
            let bit_error_rates = [
                (fields::NVLINK5_EFFECTIVE_BER, NvLinkBer::Effective),
                (fields::NVLINK5_SYMBOL_BER, NvLinkBer::Symbol),
            ]
            .into_iter()
            .filter_map(|(id, kind)| u(id, link).map(|v| (kind, fields::nvlink_ber(v))))
            .collect();
            let bytes =
                |exact: u32, kib: u32| u(exact, link).or_else(|| u(kib, link).map(kib_to_bytes));
            r.nvlinks.push(NvLink {
                link,
                up,
                errors: link_errors(link, u),
                bit_error_rates,
                tx_bytes: bytes(fields::NVLINK_TX_BYTES, fields::NVLINK_TX_KIB),
                rx_bytes: bytes(fields::NVLINK_RX_BYTES, fields::NVLINK_RX_KIB),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blackwell_is_asked_the_nvlink5_counters_and_hopper_the_dl_ones() {
        let ids = |arch: Option<&DeviceArchitecture>, ber: bool| {
            let mut out = Vec::new();
            Generations::of(arch).requests(3, ber, &mut out);
            out
        };
        let hopper = ids(Some(&DeviceArchitecture::Hopper), true);
        assert!(hopper.contains(&(fields::NVLINK_REPLAY, 3)));
        assert!(hopper.contains(&(42, 0)), "legacy CRC data id of link 3");
        assert!(!hopper.iter().any(|&(id, _)| (213..=222).contains(&id)));
        let blackwell = ids(Some(&DeviceArchitecture::Blackwell), false);
        for id in [214, 215, 219, 221] {
            assert!(blackwell.contains(&(id, 3)), "{id}");
        }
        assert!(!blackwell
            .iter()
            .any(|&(id, _)| (161..=163).contains(&id) || id == 42));
        assert!(!blackwell.contains(&(fields::NVLINK5_EFFECTIVE_BER, 3)));
        let with_ber = ids(Some(&DeviceArchitecture::Blackwell), true);
        assert!(with_ber.contains(&(fields::NVLINK5_EFFECTIVE_BER, 3)));
        assert!(with_ber.contains(&(fields::NVLINK5_SYMBOL_BER, 3)));
        // Unknown (newer than these bindings): both.
        let unknown = ids(Some(&DeviceArchitecture::Unknown), false);
        assert!(unknown.contains(&(fields::NVLINK_REPLAY, 3)));
        assert!(unknown.contains(&(fields::NVLINK5_RECOVERY, 3)));
    }

    #[test]
    fn nvlink5_counters_fill_the_same_error_family() {
        let answers: HashMap<(u32, u32), u64> = [
            ((215, 0), 4),
            ((214, 0), 1),
            ((219, 0), 250),
            ((221, 0), 9000),
        ]
        .into_iter()
        .collect();
        let errors = link_errors(0, |id, scope| answers.get(&(id, scope)).copied());
        assert_eq!(
            errors,
            vec![
                (NvLinkError::Recovery, 4),
                (NvLinkError::RecoveryFailed, 1),
                (NvLinkError::Effective, 250),
                (NvLinkError::Symbol, 9000),
            ]
        );
    }

    #[test]
    fn dl_counters_keep_their_kinds() {
        let answers: HashMap<(u32, u32), u64> =
            [((161, 7), 5), ((162, 7), 0), ((163, 7), 2), ((103, 0), 3)]
                .into_iter()
                .collect();
        let errors = link_errors(7, |id, scope| answers.get(&(id, scope)).copied());
        assert_eq!(
            errors,
            vec![
                (NvLinkError::CrcFlit, 2),
                (NvLinkError::CrcData, 3),
                (NvLinkError::Replay, 5),
                (NvLinkError::Recovery, 0),
            ]
        );
    }
}
