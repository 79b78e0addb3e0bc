//! Kernel-log XIDs of a PCI address that no GPU the exporter can name has.
//!
//! Two GPUs leave their address unknown: one hung in its first driver call
//! since the exporter started (named once it answers), and one lost or
//! failing every call since before the exporter started, whose XID 79 is
//! the one line that says what to do with it. Their events wait here,
//! bounded: counted on the GPU once NVML names it, and, while some GPU
//! stays unnamed, published as evidence keyed by the address, which the
//! join step judges into a verdict
//! (`nvidia_gpu_recommended_action{pci_bus_id=...}`, `crate::verdict::judge_unnamed`),
//! so that the GPU that needs a reboot is not the one without a verdict.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use super::record::{class_name, class_of, system_time, unix, Clock};
use super::{XidEvent, XidSource};
use crate::kmsg::PciAddress;
use crate::snapshot::{UnnamedEvidence, UnnamedGpuXids, XidClass, XidSeen};
use crate::state::UnnamedRecord;

/// The latest event of each code and class.
type LatestByCode = BTreeMap<(u64, XidClass), Instant>;

/// Events kept; past this the oldest go (they are counted as `unknown_gpu`
/// problems already).
const MAX_EVENTS: usize = 1024;

#[derive(Debug, Default)]
pub struct Unnamed {
    events: VecDeque<(PciAddress, XidEvent)>,
    /// The NVIDIA module loaded after these: every GPU was reset.
    last_reset: Option<Instant>,
}

impl Unnamed {
    pub fn push(&mut self, gpu: PciAddress, e: XidEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((gpu, e));
    }

    /// The events of `gpu`, taken out.
    pub fn take(&mut self, gpu: PciAddress) -> Vec<XidEvent> {
        if !self.events.iter().any(|(a, _)| a.same_device(&gpu)) {
            return Vec::new();
        }
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = self
            .events
            .drain(..)
            .partition(|(a, _)| a.same_device(&gpu));
        self.events = rest;
        mine.into_iter().map(|(_, e)| e).collect()
    }

    /// For the state file.
    pub fn records(&self, clock: &Clock) -> Vec<UnnamedRecord> {
        self.events
            .iter()
            .map(|(gpu, e)| UnnamedRecord {
                pci: gpu.to_string(),
                code: e.code,
                class: class_name(e.class).into(),
                at_s: clock.since_boot(e.at),
                wall: unix(e.wall),
            })
            .collect()
    }

    /// Takes back what an earlier run of this boot left in the state file
    /// (records of an address or class this run cannot read are skipped).
    pub fn restore(&mut self, records: &[UnnamedRecord], clock: &Clock) {
        for u in records {
            let (Some(gpu), Some(class)) = (PciAddress::parse(&u.pci), class_of(&u.class)) else {
                continue;
            };
            self.push(
                gpu,
                XidEvent {
                    code: u.code,
                    class,
                    gpu_instance: None,
                    compute_instance: None,
                    source: XidSource::KernelLog,
                    at: clock.instant(u.at_s),
                    wall: system_time(u.wall),
                    nvlink_err_link: None,
                },
            );
        }
    }

    pub fn reset_before(&mut self, at: Instant) {
        self.last_reset = self.last_reset.max(Some(at));
    }

    /// What the verdicts of the unnamed addresses are judged from: per
    /// address (in the order first seen), the latest event of each code
    /// and class, which is all the verdict reads of them (a later event of
    /// a code holds whenever an earlier one does).
    pub fn evidence(&self) -> UnnamedEvidence {
        let mut gpus: Vec<(PciAddress, LatestByCode)> = Vec::new();
        for (a, e) in &self.events {
            let i = match gpus.iter().position(|(b, _)| b.same_device(a)) {
                Some(i) => i,
                None => {
                    gpus.push((*a, BTreeMap::new()));
                    gpus.len() - 1
                }
            };
            let at = gpus[i].1.entry((e.code, e.class)).or_insert(e.at);
            *at = (*at).max(e.at);
        }
        UnnamedEvidence {
            gpus: gpus
                .into_iter()
                .map(|(a, latest)| UnnamedGpuXids {
                    pci_bus_id: nvml_bus_id(a),
                    xids: latest
                        .into_iter()
                        .map(|((code, class), at)| XidSeen {
                            code,
                            class,
                            gpu_instance: None,
                            compute_instance: None,
                            at,
                        })
                        .collect(),
                })
                .collect(),
            last_reset: self.last_reset,
        }
    }
}

/// As NVML and `nvidia_gpu_info` write it: `00000000:3A:00.0`. An XID
/// line names only domain, bus and device (`PCI:0000:3a:00`); a GPU is
/// function 0 of its device, the function NVML names it by.
fn nvml_bus_id(a: PciAddress) -> String {
    format!(
        "{:08X}:{:02X}:{:02X}.{}",
        a.domain,
        a.bus,
        a.device,
        a.function.unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Action, UnnamedGpuVerdict};
    use crate::verdict::{judge_unnamed, MAX_UNNAMED};
    use std::time::{Duration, SystemTime};

    /// As the join step judges them.
    fn verdicts(u: &Unnamed, now: Instant, window: Duration) -> Vec<UnnamedGpuVerdict> {
        judge_unnamed(&u.evidence(), now, window)
    }

    fn event(code: u64, at: Instant) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: None,
            compute_instance: None,
            source: XidSource::KernelLog,
            at,
            wall: SystemTime::now(),
            nvlink_err_link: None,
        }
    }

    #[test]
    fn an_unnamed_gpus_fall_asks_for_a_reboot_by_its_address_until_named() {
        let mut u = Unnamed::default();
        let now = Instant::now();
        let lost = PciAddress::parse("PCI:0000:3a:00").unwrap();
        let other = PciAddress::parse("0000:5d:00").unwrap();
        u.push(lost, event(79, now));
        u.push(other, event(13, now));
        u.push(other, event(43, now));
        let window = Duration::from_secs(600);
        let v = verdicts(&u, now, window);
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].pci_bus_id.as_str(), v[0].action, v[0].reason),
            ("00000000:3A:00.0", Action::Reboot, "xid_restart_bm")
        );
        assert_eq!(v[1].action, Action::RestartApp);
        // Named at last: its events leave for its slot.
        let taken = u.take(PciAddress::parse("00000000:3A:00.0").unwrap());
        assert_eq!(taken.len(), 1);
        assert_eq!(verdicts(&u, now, window).len(), 1);
        // A driver load resets what a reset clears.
        u.push(other, event(119, now));
        assert_eq!(verdicts(&u, now, window)[0].action, Action::ResetGpu);
        u.reset_before(now + Duration::from_secs(1));
        assert_eq!(verdicts(&u, now, window)[0].action, Action::RestartApp);
    }

    #[test]
    fn bounded() {
        let mut u = Unnamed::default();
        let now = Instant::now();
        for bus in 0..=255u8 {
            for _ in 0..8 {
                u.push(
                    PciAddress {
                        domain: 0,
                        bus,
                        device: 0,
                        function: None,
                    },
                    event(79, now),
                );
            }
        }
        assert_eq!(u.events.len(), MAX_EVENTS);
        // The last 1024 events, 8 per address: one entry per address, one
        // XID each.
        assert_eq!(u.evidence().gpus.len(), MAX_EVENTS / 8);
        assert!(u.evidence().gpus.iter().all(|g| g.xids.len() == 1));
        assert_eq!(verdicts(&u, now, Duration::from_secs(1)).len(), MAX_UNNAMED);
    }
}
