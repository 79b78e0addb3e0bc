//! Kernel-log XIDs of a PCI address that no GPU the exporter can name has.
//!
//! Two GPUs leave their address unknown: one hung in its first driver call
//! since the exporter started (named once it answers), and one lost or
//! failing every call since before the exporter started, whose XID 79 is
//! the one line that says what to do with it. Their events wait here,
//! bounded: counted on the GPU once NVML names it, and, while some GPU
//! stays unnamed, judged into a verdict keyed by the address
//! (`nvidia_gpu_recommended_action{pci_bus_id=...}`), so that the GPU that
//! needs a reboot is not the one without a verdict.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::persist::{class_name, unix, Clock};
use super::XidEvent;
use crate::kmsg::PciAddress;
use crate::snapshot::{Action, Health, UnnamedGpuVerdict};
use crate::state::UnnamedRecord;
use crate::verdict::{self, Remembered, XidSeen};

/// Events kept; past this the oldest go (they are counted as `unknown_gpu`
/// problems already).
const MAX_EVENTS: usize = 1024;
/// Addresses given a verdict: a node has at most 16 GPUs, and a log that
/// names more is not describing them.
const MAX_ADDRESSES: usize = 16;

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

    pub fn reset_before(&mut self, at: Instant) {
        self.last_reset = self.last_reset.max(Some(at));
    }

    /// One verdict per address whose events still ask for something, worst
    /// first, at most `MAX_ADDRESSES`.
    pub fn verdicts(&self, now: Instant, restart_app_window: Duration) -> Vec<UnnamedGpuVerdict> {
        let mut addresses: Vec<PciAddress> = Vec::new();
        for (a, _) in &self.events {
            if !addresses.iter().any(|b| b.same_device(a)) {
                addresses.push(*a);
            }
        }
        let mut out: Vec<UnnamedGpuVerdict> = addresses
            .iter()
            .filter_map(|a| {
                let xids: Vec<XidSeen> = self
                    .events
                    .iter()
                    .filter(|(b, _)| b.same_device(a))
                    .map(|(_, e)| XidSeen {
                        code: e.code,
                        class: e.class,
                        gpu_instance: None,
                        compute_instance: None,
                        at: e.at,
                    })
                    .collect();
                let v = verdict::judge(&verdict::Inputs {
                    health: Health::Up,
                    readings: None,
                    xids: &xids,
                    remembered: Remembered::default(),
                    instances: &[],
                    last_reset: self.last_reset,
                    now,
                    restart_app_window,
                });
                let v = v.first()?;
                (v.action != Action::None).then(|| UnnamedGpuVerdict {
                    pci_bus_id: nvml_bus_id(*a),
                    action: v.action,
                    reason: v.reason,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            b.action
                .cmp(&a.action)
                .then(a.pci_bus_id.cmp(&b.pci_bus_id))
        });
        out.truncate(MAX_ADDRESSES);
        out
    }
}

/// As NVML and `nvidia_gpu_info` write it: `00000000:3A:00.0`.
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
    use crate::nvml::poller::XidSource;
    use crate::verdict::XidClass;
    use std::time::SystemTime;

    fn event(code: u64, at: Instant) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: None,
            compute_instance: None,
            source: XidSource::KernelLog,
            at,
            wall: SystemTime::now(),
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
        let v = u.verdicts(now, window);
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].pci_bus_id.as_str(), v[0].action, v[0].reason),
            ("00000000:3A:00.0", Action::Reboot, "xid_restart_bm")
        );
        assert_eq!(v[1].action, Action::RestartApp);
        // Named at last: its events leave for its slot.
        let taken = u.take(PciAddress::parse("00000000:3A:00.0").unwrap());
        assert_eq!(taken.len(), 1);
        assert_eq!(u.verdicts(now, window).len(), 1);
        // A driver load resets what a reset clears.
        u.push(other, event(119, now));
        assert_eq!(u.verdicts(now, window)[0].action, Action::ResetGpu);
        u.reset_before(now + Duration::from_secs(1));
        assert_eq!(u.verdicts(now, window)[0].action, Action::RestartApp);
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
        assert_eq!(u.verdicts(now, Duration::from_secs(1)).len(), MAX_ADDRESSES);
    }
}
