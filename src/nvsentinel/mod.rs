//! NVIDIA NVSentinel health events (`--nvsentinel.socket`): every change
//! of a GPU's verdict (`nvidia_gpu_recommended_action`) sent to NVSentinel's
//! node-local platform connector as a `HealthEvent`, over gRPC on its unix
//! socket (`PlatformConnector.HealthEventOccurredV1`,
//! `proto/nvsentinel/health_event.proto`).
//!
//! The join step hands each judged snapshot to [`Nvsentinel::observe`],
//! which compares every GPU's and MIG instance's verdict with the last one
//! it saw and queues an event per change (`queue.rs`, bounded). Delivery
//! is [`Nvsentinel::run`]'s, a task of its own (`send.rs`): a connector
//! that is down, slow or refusing holds neither the poll nor a scrape; its
//! events wait, in order, and are retried until it answers.
//!
//! The fields follow NVSentinel's own health monitors: its
//! syslog-health-monitor (`health-monitors/syslog-health-monitor/pkg/xid/
//! xid_handler.go`, `createHealthEventFromResponse`) sends `version` 1 in
//! a `HealthEvents` of version 1, one event per call, entities `PCI` then
//! `GPU_UUID`, the XID code as a string in `errorCode`, `isHealthy` false
//! and `isFatal` unless the action is NONE; its gpu-health-monitor names
//! a GPU's PCI address in the form `0000:da:00.0`.

mod proto;
mod queue;
mod send;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::snapshot::{Action, GpuState, NvsentinelCounts, Snapshot, Verdict};
pub use proto::{HealthEvent, ProcessingStrategy, RecommendedAction};
use queue::{Key, Queue};

/// The `agent` of every event.
pub const AGENT: &str = "nvml-exporter";

/// Events that wait for the connector before the latest state of each GPU
/// wins: every state change of a 16-GPU node with a few MIG instances each
/// several times over.
pub const QUEUE_BOUND: usize = 256;

/// `--nvsentinel.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub socket: PathBuf,
    /// `nodeName`: `--nvsentinel.node-name`, else `NODE_NAME`, else the
    /// kernel's host name.
    pub node_name: String,
    /// `--nvsentinel.dry-run`: `processingStrategy` STORE_ONLY.
    pub dry_run: bool,
    /// How long one call may take before it counts as failed and is
    /// retried.
    pub timeout: Duration,
    /// The exporter runs in a virtual machine: a reboot is `RESTART_VM`.
    pub guest: bool,
}

/// What is shared between the join step and the sending task.
struct Shared {
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    sent: AtomicU64,
    failed: AtomicU64,
}

/// The events' source: the last verdict seen per GPU and MIG instance,
/// and the queue the sender empties.
pub struct Nvsentinel {
    settings: Settings,
    last: Mutex<BTreeMap<Key, (Action, &'static str)>>,
    shared: Arc<Shared>,
}

/// One event to raise for a change of verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The verdict asks for `action` because of `reason`.
    Fault(Action, &'static str),
    /// What `reason` asked for no longer holds (or, first seen, nothing is
    /// asked: `reason` is then the verdict's, `none` or a note).
    Healthy(&'static str),
}

/// The events a change of verdict from `prev` (none: first seen since
/// start) to `now` raises, in order. NVSentinel keeps a fault per
/// `checkName` until a healthy event of that name clears it, so a fault
/// whose reason changes is first cleared under its old name. On start
/// every GPU's state is sent once, healthy or not, so a connector that
/// restarted with us learns it.
pub fn changes(prev: Option<(Action, &'static str)>, now: (Action, &'static str)) -> Vec<Change> {
    let mut out = Vec::new();
    let faulty = now.0 != Action::None;
    match prev {
        Some(p) if p == now => return out,
        Some((a, r)) if a != Action::None && (!faulty || r != now.1) => {
            out.push(Change::Healthy(r));
        }
        Some(_) => {}
        None if !faulty => out.push(Change::Healthy(now.1)),
        None => {}
    }
    if faulty {
        out.push(Change::Fault(now.0, now.1));
    }
    out
}

/// NVSentinel's action for ours. check_hardware is where NVIDIA's catalog
/// asks for a person (its CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW
/// and CHECK_UVM buckets, which NVSentinel's catalog test resolves to
/// CONTACT_SUPPORT, `xid_catalog_consistency_test.go`; an unlisted XID,
/// which its syslog monitor sends to CONTACT_SUPPORT, `csv.go`); a fabric
/// NVML calls unhealthy; an unknown recovery action): CONTACT_SUPPORT, not
/// RUN_FIELDDIAG, since a field diagnostic answers none of them and
/// NVSentinel would run one unasked. A reboot is RESTART_BM, RESTART_VM in
/// a virtual machine (the CPU's `hypervisor` flag).
pub fn recommended_action(action: Action, guest: bool) -> RecommendedAction {
    match action {
        Action::None => RecommendedAction::None,
        Action::RestartApp => RecommendedAction::RestartApp,
        Action::ResetGpu => RecommendedAction::ComponentReset,
        Action::Reboot if guest => RecommendedAction::RestartVm,
        Action::Reboot => RecommendedAction::RestartBm,
        Action::CheckHardware | Action::Rma => RecommendedAction::ContactSupport,
    }
}

/// Whether NVSentinel is to act on the GPU (cordon, drain): from a reset
/// up. An application restart leaves the GPU in service.
pub fn is_fatal(action: Action) -> bool {
    action >= Action::ResetGpu
}

/// NVML's bus id (`00000000:3A:00.0`) in the form NVSentinel's monitors
/// and the kernel's sysfs write (`0000:3a:00.0`).
pub fn pci_address(bus_id: &str) -> String {
    let lower = bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// Whether the CPU says it runs under a hypervisor (x86's `hypervisor`
/// flag in `/proc/cpuinfo`, CPUID leaf 1 ECX bit 31, which hypervisors set
/// for their guests). Arm CPUs have no such flag: a Grace guest reads as
/// bare metal (docs/operations.md).
pub fn guest_from_cpuinfo(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
}

impl Nvsentinel {
    pub fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Nvsentinel {
            settings,
            last: Mutex::new(BTreeMap::new()),
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::new(QUEUE_BOUND)),
                wake: tokio::sync::Notify::new(),
                sent: AtomicU64::new(0),
                failed: AtomicU64::new(0),
            }),
        })
    }

    /// Compares the snapshot's verdicts with the last seen and queues an
    /// event per change; `xids` gives the XID codes behind a verdict. A GPU
    /// the snapshot does not judge (NVML down, not sampled yet) keeps its
    /// last state: nothing is said of it.
    pub fn observe(&self, snapshot: &Snapshot, xids: impl Fn(&GpuState, &Verdict) -> Vec<u64>) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let at = SystemTime::now();
        let mut raised = Vec::new();
        for g in snapshot.gpus.iter().filter(|g| !g.verdicts.is_empty()) {
            for v in &g.verdicts {
                let key: Key = (g.uuid.clone(), v.gpu_instance, v.compute_instance);
                let now = (v.action, v.reason);
                for c in changes(last.get(&key).copied(), now) {
                    raised.push((key.clone(), self.event(g, v, c, &xids, at)));
                }
                last.insert(key, now);
            }
            // A MIG instance whose verdict went: it recovered.
            let gone: Vec<Key> = last
                .keys()
                .filter(|k| k.0 == g.uuid && k.1.is_some())
                .filter(|k| {
                    !g.verdicts
                        .iter()
                        .any(|v| (v.gpu_instance, v.compute_instance) == (k.1, k.2))
                })
                .cloned()
                .collect();
            for key in gone {
                let Some((action, reason)) = last.remove(&key) else {
                    continue;
                };
                let v = Verdict {
                    gpu_instance: key.1,
                    compute_instance: key.2,
                    action: Action::None,
                    reason: "none",
                };
                for c in changes(Some((action, reason)), (Action::None, "none")) {
                    raised.push((key.clone(), self.event(g, &v, c, &xids, at)));
                }
            }
        }
        drop(last);
        if raised.is_empty() {
            return;
        }
        if let Ok(mut q) = self.shared.queue.lock() {
            for (key, event) in raised {
                q.push(key, event);
            }
        }
        self.shared.wake.notify_one();
    }

    /// The counts of `nvml_exporter_nvsentinel_events_total`.
    pub fn counts(&self) -> NvsentinelCounts {
        NvsentinelCounts {
            sent: self.shared.sent.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
            dropped: self.shared.queue.lock().map_or(0, |q| q.dropped()),
        }
    }

    /// The event for one change of a GPU's (or MIG instance's) verdict.
    fn event(
        &self,
        g: &GpuState,
        v: &Verdict,
        change: Change,
        xids: &impl Fn(&GpuState, &Verdict) -> Vec<u64>,
        at: SystemTime,
    ) -> HealthEvent {
        let (action, reason, healthy) = match change {
            Change::Fault(a, r) => (a, r, false),
            Change::Healthy(r) => (Action::None, r, true),
        };
        let pci = g.identity.pci_bus_id.as_deref().map(pci_address);
        let mut entities = Vec::new();
        if let Some(p) = &pci {
            entities.push(entity("PCI", p));
        }
        entities.push(entity("GPU_UUID", &g.uuid));
        if let Some(gi) = v.gpu_instance {
            entities.push(entity("GPU_INSTANCE_ID", &gi.to_string()));
            if let Some(ci) = v.compute_instance {
                entities.push(entity("COMPUTE_INSTANCE_ID", &ci.to_string()));
            }
            if let Some(mig) = mig_uuid(g, gi, v.compute_instance) {
                entities.push(entity("MIG_UUID", mig));
            }
        }
        let error_code = if healthy {
            Vec::new()
        } else {
            xids(g, v).iter().map(u64::to_string).collect()
        };
        let device = match v.gpu_instance {
            Some(gi) => format!("GPU {} MIG instance {gi}", g.uuid),
            None => format!("GPU {}", g.uuid),
        };
        let message = if healthy {
            format!("{device}: healthy ({reason} no longer asks for an action)")
        } else {
            format!(
                "{device}: {} recommended ({reason}), nvidia_gpu_recommended_action",
                action.as_label()
            )
        };
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        HealthEvent {
            version: 1,
            agent: AGENT.to_string(),
            component_class: "GPU".to_string(),
            check_name: reason.to_string(),
            is_fatal: is_fatal(action),
            is_healthy: healthy,
            message,
            recommended_action: recommended_action(action, self.settings.guest) as i32,
            error_code,
            entities_impacted: entities,
            metadata: [("action".to_string(), action.as_label().to_string())]
                .into_iter()
                .collect(),
            generated_timestamp: Some(proto::Timestamp {
                seconds: since.as_secs() as i64,
                nanos: since.subsec_nanos() as i32,
            }),
            node_name: self.settings.node_name.clone(),
            processing_strategy: if self.settings.dry_run {
                ProcessingStrategy::StoreOnly
            } else {
                ProcessingStrategy::ExecuteRemediation
            } as i32,
        }
    }
}

fn entity(kind: &str, value: &str) -> proto::Entity {
    proto::Entity {
        entity_type: kind.to_string(),
        entity_value: value.to_string(),
    }
}

/// The MIG device UUID of an instance, where the GPU's readings name one
/// compute instance for it.
fn mig_uuid(g: &GpuState, gi: u32, ci: Option<u32>) -> Option<&str> {
    let r = g.readings.as_ref()?;
    let instance = r.mig.iter().find(|m| m.gpu_instance == gi)?;
    let mut cis = instance
        .compute_instances
        .iter()
        .filter(|c| ci.is_none_or(|ci| c.compute_instance == ci));
    let first = cis.next()?;
    cis.next().is_none().then_some(first.mig_uuid.as_str())
}

#[cfg(test)]
mod tests;
