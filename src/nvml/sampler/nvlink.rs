//! NVLink state, errors and traffic (`nvidia_gpu_nvlink_*`). The link
//! count is cached; what a link does not support, and the KiB counters
//! where the byte counters answer, leave the batches until the static
//! refresh.
//!
//! Each per-link entry costs the driver time (a DGX H100: 18 links, 84
//! entries for state and errors), so what the default families need is
//! read as cheaply as it stays fresh (docs/metrics.md, "Freshness"):
//! - traffic, which moves every poll, as the driver's sum over all links
//!   (`scopeId` = [`fields::NVLINK_ALL_LINKS`]), two entries riding in the
//!   scalar batch;
//! - the per-GPU error totals, in the scalar batch too, every poll; the
//!   per-link error counters and link states are read again when a total
//!   moved, and at least every `SLOW_REFRESH_POLLS` polls. The exported
//!   sums stay sums of the per-link counters (the totals only say when to
//!   read them), so which links a sum covers does not change.
//!
//! With `nvlink.per-link`, or where the driver has no totals, every link
//! is read every poll.
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

use super::super::calls::{is_refresh, Cached, Got, SLOW_REFRESH_POLLS};
use super::super::fields::{self, DriverBranch, NVLINK_ALL_LINKS as ALL};
use super::super::raw::{self, FieldValue};
use super::super::units::kib_to_bytes;
use super::scalar::Scalar;
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{GpuReadings, NvLink, NvLinkBer, NvLinkError, NvLinkTraffic};

#[derive(Default)]
pub struct State {
    links: Cached<u32>,
    /// Requests left out of the batches until the next static refresh:
    /// those the driver answered "not supported" (or did not know), and
    /// the KiB traffic counters where the exact byte counters answered
    /// (the same traffic, asked twice).
    skip: HashSet<(u32, u32)>,
    /// The per-link states and error counters last read, reused while no
    /// total moved.
    held: Option<Held>,
}

/// Per-link readings kept between polls, and the totals they go with.
struct Held {
    read_at: u64,
    totals: Vec<((u32, u32), u64)>,
    links: Vec<HeldLink>,
}

/// A link's number, whether it was up, and its error counters.
type HeldLink = (u32, bool, Vec<(NvLinkError, u64)>);

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

    /// The `(field id, scope id)` requests for one link: its state and
    /// error counters (those exported only per link, and the bit error
    /// rates, with `per_link`), and its traffic counters with `traffic`.
    pub fn requests(self, link: u32, per_link: bool, traffic: bool, out: &mut Vec<(u32, u32)>) {
        let mut ids: Vec<u32> = vec![fields::NVLINK_STATE];
        if traffic {
            ids.extend(fields::PER_LINK_TRAFFIC);
        }
        if self.legacy {
            ids.extend(fields::PER_LINK_LEGACY_ERRORS);
        }
        if self.nvlink5 {
            ids.extend(fields::PER_LINK_NVLINK5_ERRORS);
            if per_link {
                ids.extend(fields::PER_LINK_NVLINK5_DETAIL);
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

    /// The per-GPU totals that say whether the per-link error counters
    /// the default sums use moved, with the kind each stands for.
    pub fn totals(self) -> Vec<((u32, u32), NvLinkError)> {
        let mut out = Vec::new();
        if self.legacy {
            out.extend([
                ((fields::NVLINK_CRC_FLIT_TOTAL, 0), NvLinkError::CrcFlit),
                ((fields::NVLINK_CRC_DATA_TOTAL, 0), NvLinkError::CrcData),
                ((fields::NVLINK_REPLAY_TOTAL, 0), NvLinkError::Replay),
                ((fields::NVLINK_RECOVERY_TOTAL, 0), NvLinkError::Recovery),
            ]);
        }
        if self.nvlink5 {
            out.extend([
                ((fields::NVLINK5_RECOVERY, ALL), NvLinkError::Recovery),
                (
                    (fields::NVLINK5_EFFECTIVE_ERRORS, ALL),
                    NvLinkError::Effective,
                ),
            ]);
        }
        out
    }
}

/// Traffic over all links: exact bytes where the driver has them, else
/// its KiB counters.
const TRAFFIC_TOTALS: [(u32, u32); 4] = [
    (fields::NVLINK_TX_BYTES, ALL),
    (fields::NVLINK_RX_BYTES, ALL),
    (fields::NVLINK_TX_KIB, ALL),
    (fields::NVLINK_RX_KIB, ALL),
];

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
    /// What this poll asks in the scalar batch: the error totals and the
    /// traffic over all links, unless every link is read anyway
    /// (`per_link`) or the GPU has no links.
    pub fn totals_requests(
        &self,
        architecture: Option<&DeviceArchitecture>,
        per_link: bool,
    ) -> Vec<(u32, u32)> {
        if per_link || self.links.peek() == Some(&0) {
            return Vec::new();
        }
        let mut out: Vec<(u32, u32)> = Generations::of(architecture)
            .totals()
            .into_iter()
            .map(|(request, _)| request)
            .collect();
        out.extend(TRAFFIC_TOTALS);
        out.retain(|r| !self.skip.contains(r));
        out
    }

    /// The GPU's links into `r.nvlinks` (and its traffic into
    /// `r.nvlink_traffic`): read per link when due, else the held per-link
    /// readings again, which no total says have moved.
    pub fn sample(
        &mut self,
        g: &mut Gpu<'_, '_>,
        scalar: &Scalar,
        architecture: Option<&DeviceArchitecture>,
        per_link: bool,
        r: &mut GpuReadings,
    ) {
        let Some(links) = self.link_count(g, scalar) else {
            self.held = None;
            return;
        };
        let generations = Generations::of(architecture);
        if is_refresh(g.poll) {
            self.skip.clear();
        }
        // Traffic over all links: `None` where the driver does not sum it
        // (read per link then), `Some(None)` where this poll's read failed.
        let traffic = if per_link {
            None
        } else {
            self.traffic(scalar, &g.calls.absent_fields, g.driver)
        };
        let totals: Vec<((u32, u32), u64)> = generations
            .totals()
            .into_iter()
            .filter_map(|(request, _)| {
                let v = scalar.scoped(request.0, request.1)?.as_u64()?;
                Some((request, v))
            })
            .collect();
        let due = per_link
            || traffic.is_none()
            || match &self.held {
                None => true,
                Some(h) => {
                    g.poll >= h.read_at + SLOW_REFRESH_POLLS
                        || h.totals != totals
                        || !covered(h, &totals, generations)
                }
            };
        if due {
            let with_traffic = traffic.is_none();
            self.read_links(g, links, generations, per_link, with_traffic, r);
            self.held = (!r.nvlinks.is_empty()).then(|| Held {
                read_at: g.poll,
                totals,
                links: r
                    .nvlinks
                    .iter()
                    .map(|l| (l.link, l.up, l.errors.clone()))
                    .collect(),
            });
        } else if let Some(h) = &self.held {
            r.nvlinks = h
                .links
                .iter()
                .map(|(link, up, errors)| NvLink {
                    link: *link,
                    up: *up,
                    errors: errors.clone(),
                    bit_error_rates: Vec::new(),
                    tx_bytes: None,
                    rx_bytes: None,
                })
                .collect();
        }
        if !r.nvlinks.is_empty() {
            r.nvlink_traffic = traffic.flatten();
        }
    }

    /// The GPU's link count (cached), `None` where it has no links.
    fn link_count(&mut self, g: &mut Gpu<'_, '_>, scalar: &Scalar) -> Option<u32> {
        let fam = Family::Nvlink.name();
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        let from_field = scalar.u64(fields::NVLINK_LINK_COUNT).map(|n| n as u32);
        self.links
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
            .filter(|&n| n > 0)
    }

    /// The traffic over all links from the scalar batch: exact bytes, else
    /// KiB. `None` where the driver sums neither (or they were not asked);
    /// `Some(None)` where they were asked and the read failed, so that a
    /// failed poll leaves the series out rather than switching sources
    /// (exact bytes and KiB differ, and a counter that steps back reads as
    /// a reset).
    fn traffic(
        &mut self,
        scalar: &Scalar,
        absent: &HashSet<(u32, u32)>,
        driver: DriverBranch,
    ) -> Option<Option<NvLinkTraffic>> {
        let get = |id: u32| scalar.scoped(id, ALL).and_then(FieldValue::as_u64);
        let exact = (get(fields::NVLINK_TX_BYTES), get(fields::NVLINK_RX_BYTES));
        if exact.0.is_some() || exact.1.is_some() {
            self.skip.insert((fields::NVLINK_TX_KIB, ALL));
            self.skip.insert((fields::NVLINK_RX_KIB, ALL));
            return Some(Some(NvLinkTraffic {
                tx_bytes: exact.0,
                rx_bytes: exact.1,
            }));
        }
        let kib = (get(fields::NVLINK_TX_KIB), get(fields::NVLINK_RX_KIB));
        if kib.0.is_some() || kib.1.is_some() {
            return Some(Some(NvLinkTraffic {
                tx_bytes: kib.0.map(kib_to_bytes),
                rx_bytes: kib.1.map(kib_to_bytes),
            }));
        }
        let asked = TRAFFIC_TOTALS
            .iter()
            .any(|r| driver.has_field(r.0) && !absent.contains(r) && !self.skip.contains(r));
        asked.then_some(None)
    }

    /// Reads every link's state and error counters (and traffic with
    /// `with_traffic`) in one batch into `r.nvlinks`.
    fn read_links(
        &mut self,
        g: &mut Gpu<'_, '_>,
        links: u32,
        generations: Generations,
        per_link: bool,
        with_traffic: bool,
        r: &mut GpuReadings,
    ) {
        let fam = Family::Nvlink.name();
        let (nvml, h, c) = (g.nvml, g.handle, &mut *g.calls);
        let mut requests = Vec::new();
        for link in 0..links {
            generations.requests(link, per_link, with_traffic, &mut requests);
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

/// Whether every error kind the held links report has a total this poll
/// to say when it moves. A kind without one (a driver without the total)
/// is read per link every poll.
fn covered(h: &Held, totals: &[((u32, u32), u64)], generations: Generations) -> bool {
    let kinds: HashSet<NvLinkError> = h
        .links
        .iter()
        .flat_map(|(_, _, errors)| errors.iter().map(|(k, _)| *k))
        .collect();
    let answered: HashSet<(u32, u32)> = totals.iter().map(|(r, _)| *r).collect();
    kinds.iter().all(|kind| {
        generations
            .totals()
            .iter()
            .any(|(r, k)| k == kind && answered.contains(r))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blackwell_is_asked_the_nvlink5_counters_and_hopper_the_dl_ones() {
        let ids = |arch: Option<&DeviceArchitecture>, ber: bool| {
            let mut out = Vec::new();
            Generations::of(arch).requests(3, ber, true, &mut out);
            out
        };
        let hopper = ids(Some(&DeviceArchitecture::Hopper), true);
        assert!(hopper.contains(&(fields::NVLINK_REPLAY, 3)));
        assert!(hopper.contains(&(42, 0)), "legacy CRC data id of link 3");
        assert!(!hopper.iter().any(|&(id, _)| (213..=222).contains(&id)));
        let blackwell = ids(Some(&DeviceArchitecture::Blackwell), false);
        // What the per-GPU sums need: recovery and effective errors.
        for id in [215, 219] {
            assert!(blackwell.contains(&(id, 3)), "{id}");
        }
        assert!(!blackwell
            .iter()
            .any(|&(id, _)| (161..=163).contains(&id) || id == 42));
        assert!(!blackwell.contains(&(fields::NVLINK5_EFFECTIVE_BER, 3)));
        // Failed recoveries and symbol errors are exported per link only.
        assert!(!blackwell.contains(&(214, 3)) && !blackwell.contains(&(221, 3)));
        let per_link = ids(Some(&DeviceArchitecture::Blackwell), true);
        for id in [214, 215, 219, 221] {
            assert!(per_link.contains(&(id, 3)), "{id}");
        }
        assert!(per_link.contains(&(fields::NVLINK5_EFFECTIVE_BER, 3)));
        assert!(per_link.contains(&(fields::NVLINK5_SYMBOL_BER, 3)));
        // Unknown (newer than these bindings): both.
        let unknown = ids(Some(&DeviceArchitecture::Unknown), false);
        assert!(unknown.contains(&(fields::NVLINK_REPLAY, 3)));
        assert!(unknown.contains(&(fields::NVLINK5_RECOVERY, 3)));
    }

    #[test]
    fn each_default_error_kind_has_a_total_that_says_when_it_moved() {
        let hopper = Generations::of(Some(&DeviceArchitecture::Hopper));
        let ids: Vec<(u32, u32)> = hopper.totals().iter().map(|(r, _)| *r).collect();
        assert_eq!(ids, [(38, 0), (45, 0), (52, 0), (59, 0)]);
        // NVLink5's are its per-link counters summed over all links.
        let blackwell = Generations::of(Some(&DeviceArchitecture::Blackwell));
        let ids: Vec<(u32, u32)> = blackwell.totals().iter().map(|(r, _)| *r).collect();
        assert_eq!(ids, [(215, u32::MAX), (219, u32::MAX)]);
        // Every kind a default sum exports has one, on each generation.
        for g in [hopper, blackwell] {
            let mut requests = Vec::new();
            g.requests(0, false, false, &mut requests);
            let kinds: Vec<NvLinkError> =
                link_errors(0, |id, scope| requests.contains(&(id, scope)).then_some(1))
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect();
            assert!(!kinds.is_empty());
            for kind in kinds {
                assert!(kind.summed_by_default(), "{kind:?}");
                assert!(g.totals().iter().any(|(_, k)| *k == kind), "{kind:?}");
            }
        }
        // Traffic is asked per link only when the totals are not read.
        let mut requests = Vec::new();
        hopper.requests(0, false, false, &mut requests);
        assert!(!requests
            .iter()
            .any(|&(id, _)| [138, 139, 202, 204].contains(&id)));
    }

    #[test]
    fn held_links_are_read_again_for_a_kind_without_a_total() {
        let h = Held {
            read_at: 0,
            totals: Vec::new(),
            links: vec![(0, true, vec![(NvLinkError::Replay, 3)])],
        };
        let hopper = Generations::of(Some(&DeviceArchitecture::Hopper));
        assert!(covered(&h, &[((52, 0), 3)], hopper));
        assert!(!covered(&h, &[((38, 0), 0)], hopper), "no replay total");
        assert!(!covered(&h, &[], hopper));
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
