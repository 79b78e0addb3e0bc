//! One verdict per GPU: what to do with it now (`nvidia_gpu_recommended_action`).
//!
//! Every signal that implies an action proposes one, with a reason; the
//! worst action wins (`Action`'s order: none, restart_app, reset_gpu,
//! reboot, check_hardware, rma), and among equal actions the signal listed
//! first below. The signals and when each stops counting:
//!
//! | reason | action | from | until |
//! |---|---|---|---|
//! | `remap_failed` | rma | row remapping failed, as NVML's flag said at any time since boot (MIG hides it while instances exist) | the next boot (the board is replaced) |
//! | `remapper_exhausted` | rma | a memory bank has no spare rows | never |
//! | `sram_threshold` | rma | uncorrectable SRAM errors past NVIDIA's threshold | NVML clears the flag |
//! | `remap_failed_mig` | check_hardware | XID 64 (row remap failure) on a MIG-enabled GPU, whose remap flags NVML hides | the next boot |
//! | `recovery_action_unknown` | check_hardware | NVML's recovery action past 7, newer than ours | NVML says 0 |
//! | `lost` | reboot | NVML: GPU is lost (fell off the bus) | the GPU answers again |
//! | `hung` | reset_gpu | a driver call blocked past the deadline | the call returns |
//! | `recovery_action`, `recovery_action_bus_reset` | reset_gpu or reboot | NVML's recovery action (R570+): 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 7 system reboot; 6 (`BUS_RESET`, "reset the GPU's PCIe bus") a reboot with its own reason | NVML says 0 |
//! | `recovery_action_recover_imex_domain` | none | NVML's recovery action 5 (`RECOVER_IMEX_DOMAIN`): the IMEX domain is to be recovered, which no drain of this node does; the reason names it while nothing else asks for an action, and NvidiaGpuRecoveryActionRequired pages | NVML says 0 |
//! | `remap_pending` | reset_gpu | a row remap waits for a reset | NVML says no longer pending |
//! | `retirement_pending` | reset_gpu | a page retirement waits for a reset | NVML says no longer pending |
//! | `fabric` | check_hardware, or reset_gpu | NVML's fabric health summary says unhealthy (R580+: trays, switches, cables); fabric registration completed with a failure | the summary is healthy again; registration succeeds |
//! | `xid_<bucket>` | the bucket's (`bucket_action`) | an XID whose code NVIDIA's catalog lists (`crate::xid_catalog`, the table the alert rules and the runbook are rendered from) | restart_app: a window after the last such XID; reset_gpu: a GPU reset after it; reboot, check_hardware: the next boot |
//! | `xid_check_uvm`, `xid_update_swfw`, `xid_check_mechanicals`, `xid_contact_support` | check_hardware | an XID of a manual-triage bucket (`CHECK_UVM`, `UPDATE_SWFW`, `CHECK_MECHANICALS`, `CONTACT_SUPPORT`), which NVIDIA's catalog owners say "intentionally resolve to CONTACT_SUPPORT. A human decides" (NVIDIA/NVSentinel `xid_catalog_consistency_test.go`, `manualTriageBuckets`): drained until a person decides | the next boot |
//! | `xid_unlisted` | check_hardware | an XID in NVIDIA's range (1-999) that the catalog lacks (177-184, past 185): NVSentinel's default for a code without a bucket, CONTACT_SUPPORT (`csv.go`, `parseStandardXID`) | the next boot |
//! | `xid_nvlink5_fatal` | reset_gpu | an NVLink5 XID (144-150) whose kernel-log line NVIDIA's decode sheet resolves to `RESET_GPU` (`crate::xid_catalog::nvlink5`) | a GPU reset after it |
//! | `xid_workflow_nvlink_err` | check_hardware | an XID 74 on a Hopper GPU whose registers NVIDIA's `WORKFLOW_NVLINK_ERR` reads as a hardware issue ("check link mechanical connections ... run diags"; `crate::xid_catalog::nvlink_err`) | the next boot |
//! | `xid_nvlink_err_report`, `xid_nvlink_err_repeated` | check_hardware | an XID 74 on a Hopper GPU whose registers ask for a report to NVIDIA (a bit it does not expect, third register bit 13, sympathetic bits alone), or whose ECC/parity bits were seen more than twice on the same link within 24 h (`xid::NVLINK_ERR_REPEAT_WINDOW`): what the catalog's `CONTACT_SUPPORT` gets, as NVSentinel escalates each to `CONTACT_SUPPORT` | the next boot |
//! | `xid_nvlink_err_undecoded`, `xid_nvlink_err_not_hopper` | check_hardware | an XID 74 without its registers (NVML's event alone, a line without them), or on a GPU not known to be Hopper, where NVIDIA's bit table is not valid: the code-wide action (DCGM: "NVLink Critical Error", always failing; NVSentinel: `CONTACT_SUPPORT`) | the next boot |
//! | `xid_nvlink_err_fabric_reset` | reset_gpu | an XID 74 on a Hopper GPU with the fourth register's bit 18 ("a reset of the fabric is required") and company that asks for no more | a GPU reset after it |
//! | `xid_workflow_xid_45` | none | a lone XID 45 on an NVSwitch system: its line names no cause (`caused by previous Xid N`), and no other XID on any GPU of the node within 10 s; the catalog's `WORKFLOW_XID_45` asks for the fabric manager to be restarted | the restart_app window |
//! | `xid_nvlink5_injected` | none | an NVLink5 XID the driver marks injected (`i1`: a drill): counted, judged as a test | a GPU reset after it |
//! | `xid_nvlink5_no_kernel_log`, `xid_nvlink5_undecoded` | none | an NVLink5 XID without the evidence that decodes it: NVML's event alone (the kernel log not read or unreadable, or its line never came), or a line that cannot be read. Never a reset on the bare code: the driver announces any need through NVML's recovery action (`recovery_action`) and XID 154, as for the sheet's `XID_154_EVAL` rows; the reason, shown only while nothing else asks for an action, says which evidence was missing | a GPU reset after it |
//!
//! A GPU reset is known from what NVML shows while the exporter runs (the
//! energy or volatile ECC counters starting again, a pending remap or
//! retirement applied, a lost GPU answering again, NVML initialized again
//! after the driver went away) and from the kernel log (the NVIDIA module
//! loading, a reset procedure's `nvml-exporter: GPU reset` line); a boot
//! starts the kernel log and the exporter afresh, so what lasts "until the
//! next boot" is what the log and the exporter have seen since boot.
//!
//! XIDs that name a MIG instance decide that instance's verdict when their
//! action is restart_app (the instance's application); from reset_gpu up
//! they decide the GPU's, since a reset takes the whole GPU.
//!
//! The sampler publishes the evidence (`snapshot::VerdictEvidence` per GPU,
//! `snapshot::UnnamedEvidence` for addresses only the kernel log names);
//! the join step (`crate::join`) judges it here once per snapshot
//! ([`judge_gpu`], [`judge_unnamed`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::snapshot::{
    Action, FabricHealth, GpuReadings, GpuState, Health, Remembered, SpareRows, UnnamedEvidence,
    UnnamedGpuVerdict, Verdict, XidClass, XidSeen,
};
use crate::xid_catalog::{self, Bucket};

/// Unnamed addresses given a verdict: a node has at most 16 GPUs, and a
/// log that names more is not describing them.
pub const MAX_UNNAMED: usize = 16;

/// What each resolution bucket of NVIDIA's XID catalog asks for, and the
/// reason label it gives. Buckets that ask for nothing (`IGNORE`,
/// `WORKFLOW_XID_45`, and `XID_154`, whose announced action NVML's
/// recovery action carries) give `none`. Where the catalog's action is not
/// one of ours: `RESTART_VM` is a reboot of the VM the exporter runs in;
/// the manual-triage buckets `CONTACT_SUPPORT`, `CHECK_MECHANICALS`,
/// `UPDATE_SWFW` (a driver or firmware update) and `CHECK_UVM` ("where UVM
/// or vGPU is in use, reset the GPU") answer as one, `check_hardware`:
/// drained until a person decides, as NVIDIA's catalog owners resolve them
/// ("intentionally resolve to CONTACT_SUPPORT. A human decides",
/// NVIDIA/NVSentinel `xid_catalog_consistency_test.go`, issue #1888). The
/// match is exhaustive: a bucket added to the catalog does not compile
/// until it has an action here.
pub fn bucket_action(bucket: Bucket) -> (Action, &'static str) {
    match bucket {
        Bucket::RestartApp => (Action::RestartApp, "xid_restart_app"),
        Bucket::ResetGpu => (Action::ResetGpu, "xid_reset_gpu"),
        Bucket::WorkflowXid48 => (Action::ResetGpu, "xid_workflow_xid_48"),
        // Decided per event by its registers (`xid::nvlink_err_class`).
        // Judged by the code alone (NVML's event, a line without
        // registers) it is what every peer makes of the bare code (issue
        // 46): DCGM 4.6 fails its health watch on 74 ("NVLink Critical
        // Error", DcgmHealthWatch.cpp), gpud asks for a reboot and a
        // hardware inspection (xid.go), NVSentinel's syslog monitor sends
        // WORKFLOW_NVLINK_ERR to CONTACT_SUPPORT, which is ours below.
        Bucket::WorkflowNvlinkErr => (Action::CheckHardware, "xid_nvlink_err_undecoded"),
        // Decided per event (`XidClass`); a code judged by its bucket alone
        // is an event without its line: the driver's recovery action and
        // XID 154 carry any need.
        Bucket::WorkflowNvlink5Err => (Action::None, "xid_nvlink5_no_kernel_log"),
        Bucket::RestartBm => (Action::Reboot, "xid_restart_bm"),
        Bucket::RestartVm => (Action::Reboot, "xid_restart_vm"),
        // Manual triage (issue 46): a person decides, as for
        // CONTACT_SUPPORT. 78 (a vGPU host/guest driver mismatch) is fixed
        // by an update, 159 by a reset where UVM or vGPU is in use: the
        // person does that, then the reboot that ends the drain.
        Bucket::UpdateSwFw => (Action::CheckHardware, "xid_update_swfw"),
        Bucket::CheckUvm => (Action::CheckHardware, "xid_check_uvm"),
        Bucket::CheckMechanicals => (Action::CheckHardware, "xid_check_mechanicals"),
        Bucket::ContactSupport => (Action::CheckHardware, "xid_contact_support"),
        // The catalog: "Solo: RESTART_FM, Not Solo: IGNORE"; judged in
        // `judge` (a lone 45 on an NVSwitch system points at the fabric
        // manager).
        Bucket::WorkflowXid45 => (Action::None, "xid_workflow_xid_45"),
        Bucket::Ignore | Bucket::Xid154 => (Action::None, "none"),
    }
}

/// Every value the `reason` label can take.
pub const REASONS: &[&str] = &[
    "none",
    "remap_failed",
    "remapper_exhausted",
    "sram_threshold",
    "remap_failed_mig",
    "recovery_action_recover_imex_domain",
    "recovery_action_unknown",
    "lost",
    "hung",
    "recovery_action",
    "recovery_action_bus_reset",
    "remap_pending",
    "retirement_pending",
    "fabric",
    "xid_restart_app",
    "xid_check_uvm",
    "xid_reset_gpu",
    "xid_workflow_xid_48",
    "xid_workflow_nvlink_err",
    "xid_nvlink_err_undecoded",
    "xid_nvlink_err_report",
    "xid_nvlink_err_repeated",
    "xid_nvlink_err_fabric_reset",
    "xid_nvlink_err_not_hopper",
    "xid_nvlink5_fatal",
    "xid_nvlink5_undecoded",
    "xid_nvlink5_no_kernel_log",
    "xid_nvlink5_injected",
    "xid_restart_bm",
    "xid_restart_vm",
    "xid_update_swfw",
    "xid_workflow_xid_45",
    "xid_check_mechanicals",
    "xid_contact_support",
    "xid_unlisted",
];

/// `--collector.verdict.restart-app-window` by default: as long as the
/// XID alert rules look back.
pub const DEFAULT_RESTART_APP_WINDOW: Duration = Duration::from_secs(600);

/// The action and reason an XID code asks for, judged by its catalog
/// bucket; a code in NVIDIA's range the catalog does not list by
/// [`UNLISTED`]; `None` outside that range (a corrupt event).
pub fn xid_action(code: u64) -> Option<(Action, &'static str)> {
    xid_class_action(code, XidClass::Code)
}

/// What a code the catalog lacks asks for (177-184, past 185, a newer
/// driver's): NVSentinel's default for a code without a bucket,
/// CONTACT_SUPPORT ("No action found for XID code, defaulting to
/// CONTACT_SUPPORT", NVIDIA/NVSentinel
/// `health-monitors/syslog-health-monitor/pkg/xid/parser/csv.go`,
/// `parseStandardXID`), which is `check_hardware` here: a person looks it
/// up (NvidiaGpuXidUnlisted pages too) rather than the GPU serving on.
pub const UNLISTED: (Action, &str) = (Action::CheckHardware, "xid_unlisted");

/// The action and reason an XID event of this class asks for.
pub fn xid_class_action(code: u64, class: XidClass) -> Option<(Action, &'static str)> {
    match class {
        XidClass::Code => match xid_catalog::lookup(code) {
            Some(x) => Some(bucket_action(x.bucket())),
            None if (1..=crate::snapshot::MAX_XID_CODE).contains(&code) => Some(UNLISTED),
            None => None,
        },
        XidClass::Nvlink5Fatal => Some((Action::ResetGpu, "xid_nvlink5_fatal")),
        XidClass::Nvlink5Nothing => Some((Action::None, "none")),
        XidClass::Nvlink5Undecoded => Some((Action::None, "xid_nvlink5_undecoded")),
        XidClass::Nvlink5NoKernelLog => Some((Action::None, "xid_nvlink5_no_kernel_log")),
        XidClass::Nvlink5Injected => Some((Action::None, "xid_nvlink5_injected")),
        XidClass::NvlinkErrNothing => Some((Action::None, "none")),
        // "Report a bug" is the catalog's CONTACT_SUPPORT in NVIDIA's own
        // tools: NVSentinel's catalog test counts contact-support among the
        // manual-triage buckets (a person decides), and its analyzer rules
        // XID74Reg2Bit13Set, XID74Reg3UnexpectedError,
        // XID74Reg0SoloNVLinkError and XID74Reg0ECCParityError send each
        // report-a-bug case to CONTACT_SUPPORT: the same as
        // `Bucket::ContactSupport` here (issue 46).
        XidClass::NvlinkErrReport => Some((Action::CheckHardware, "xid_nvlink_err_report")),
        XidClass::NvlinkErrRepeated => Some((Action::CheckHardware, "xid_nvlink_err_repeated")),
        XidClass::NvlinkErrCheckLink => Some((Action::CheckHardware, "xid_workflow_nvlink_err")),
        // Fourth register bit 18: "These are generally sympathetic or
        // secondary errors, though a reset of the fabric is required. If
        // seen with other bits set or other Xid/SXid, please follow the
        // resolution for those. If seen solo, please report a bug."
        // (NVIDIA's catalog, WORKFLOW_NVLINK_ERR, as NVIDIA/NVSentinel's
        // docs/designs/019-workflow-nvlink-err.md quotes it; its shipped
        // rule XID74Reg3Bit18Set escalates it). The other bits may ask for
        // more; solo it is a report (`nvlink_err::decide`).
        XidClass::NvlinkErrFabricReset => Some((Action::ResetGpu, "xid_nvlink_err_fabric_reset")),
        // "Not Solo: IGNORE": its cause decides, by its own event.
        XidClass::Xid45Caused => Some((Action::None, "none")),
    }
}

/// What an event asks for on this GPU: [`xid_class_action`], except that
/// an XID 74's registers are read only on a GPU NVML names Hopper
/// (`hopper`). NVIDIA: "The first, third, fourth and fifth registers are
/// valid for Hopper-based products" (WORKFLOW_NVLINK_ERR, as NVSentinel's
/// design 019 quotes it); elsewhere (A100, Blackwell, a GPU only the
/// kernel log names) the code's action, its reason saying why.
pub fn xid_event_action(
    code: u64,
    class: XidClass,
    hopper: bool,
) -> Option<(Action, &'static str)> {
    match class {
        XidClass::NvlinkErrNothing
        | XidClass::NvlinkErrReport
        | XidClass::NvlinkErrRepeated
        | XidClass::NvlinkErrCheckLink
        | XidClass::NvlinkErrFabricReset
            if !hopper =>
        {
            let (action, _) = bucket_action(Bucket::WorkflowNvlinkErr);
            Some((action, "xid_nvlink_err_not_hopper"))
        }
        _ => xid_class_action(code, class),
    }
}

/// Reasons given at action none: an event that asks for nothing by itself
/// but says which evidence the verdict lacked.
pub const NOTES: &[&str] = &[
    "recovery_action_recover_imex_domain",
    "xid_nvlink5_no_kernel_log",
    "xid_nvlink5_undecoded",
    "xid_nvlink5_injected",
    "xid_workflow_xid_45",
];

/// XIDs within this of a 45 make it not solo (the catalog's "Not Solo":
/// the other XID's resolution decides).
pub const XID_45_SOLO_WINDOW: Duration = Duration::from_secs(10);

/// Whether `reason` is one of [`NOTES`].
pub fn is_note(reason: &str) -> bool {
    NOTES.contains(&reason)
}

/// What the verdict of one GPU is judged from.
pub struct Inputs<'a> {
    pub health: Health,
    /// The GPU's current readings (absent while lost or hung).
    pub readings: Option<&'a GpuReadings>,
    pub xids: &'a [XidSeen],
    /// The XIDs of the node's GPUs, this one's included: a 45 is not solo
    /// where another GPU's XID came with it (a 48 on one GPU ends a job
    /// that spans the others, each of which logs a 45).
    pub node_xids: &'a [XidSeen],
    pub remembered: Remembered,
    /// The MIG instances the GPU has now, (GPU instance, compute
    /// instance): an XID naming another is judged on the GPU.
    pub instances: &'a [(u32, u32)],
    /// The latest GPU reset known.
    pub last_reset: Option<Instant>,
    pub now: Instant,
    pub restart_app_window: Duration,
    /// NVML names the GPU's architecture Hopper: where NVIDIA's XID 74
    /// bit table is valid.
    pub hopper: bool,
}

/// The GPU's verdict, then one per MIG instance with its own; empty where
/// the GPU cannot be judged (not sampled yet, denied, failing every call).
pub fn judge(i: &Inputs<'_>) -> Vec<Verdict> {
    if !matches!(i.health, Health::Up | Health::Lost | Health::Hung) {
        return Vec::new();
    }
    let mut gpu = Worst::default();
    if i.remembered.remap_failed {
        gpu.offer(Action::Rma, "remap_failed");
    }
    if let Some(r) = i.readings {
        gpu.offer_readings(r);
    }
    if i.remembered.mig_remap_failure {
        gpu.offer(Action::CheckHardware, "remap_failed_mig");
    }
    match i.health {
        Health::Lost => gpu.offer(Action::Reboot, "lost"),
        Health::Hung => gpu.offer(Action::ResetGpu, "hung"),
        _ => {}
    }
    let mut instances: BTreeMap<(u32, Option<u32>), Worst> = BTreeMap::new();
    // Only what matters (the rule the ledger keeps by); the rest asks for
    // nothing and carries no note.
    for x in i.xids.iter().filter(|x| x.class.matters(x.code)) {
        let Some((action, reason)) = xid_event_action(x.code, x.class, i.hopper) else {
            continue;
        };
        if action == Action::None && is_note(reason) {
            if note_holds(x, reason, i) {
                gpu.note(reason);
            }
            continue;
        }
        if !holds(action, x.at, i) {
            continue;
        }
        // Only an instance the GPU has gets a series of its own: the
        // series stay as bounded as the GPU's instances, whatever a log
        // line names.
        let exists = |gi| {
            i.instances
                .iter()
                .any(|&(g, c)| g == gi && x.compute_instance.is_none_or(|ci| ci == c))
        };
        match (action, x.gpu_instance) {
            (Action::RestartApp, Some(gi)) if exists(gi) => instances
                .entry((gi, x.compute_instance))
                .or_default()
                .offer(action, reason),
            _ => gpu.offer(action, reason),
        }
    }
    let mut out = vec![gpu.verdict(None, None)];
    out.extend(
        instances
            .into_iter()
            .map(|((gi, ci), w)| w.verdict(Some(gi), ci)),
    );
    out
}

/// The verdicts of one GPU of a snapshot, judged at `now` from its health,
/// readings and the evidence its sampler published, and the XIDs of the
/// node's GPUs (`node_xids`); empty without evidence (NVML down).
pub fn judge_gpu(
    g: &GpuState,
    node_xids: &[XidSeen],
    now: Instant,
    restart_app_window: Duration,
) -> Vec<Verdict> {
    let Some(e) = &g.evidence else {
        return Vec::new();
    };
    judge(&Inputs {
        health: g.health,
        readings: g.readings.as_deref(),
        xids: &e.xids,
        node_xids,
        remembered: e.remembered,
        instances: &e.instances,
        last_reset: e.last_reset,
        now,
        restart_app_window,
        hopper: g.identity.architecture.as_deref() == Some("Hopper"),
    })
}

/// The XID codes behind a verdict of the GPU, judged at `now` as
/// [`judge_gpu`] judged it: those of the GPU's XIDs (of the verdict's MIG
/// instance, for an instance's) whose action and reason are the verdict's
/// and still hold; sorted, each once. Empty for a verdict no XID decided
/// (`hung`, `remap_pending`, ...).
pub fn xids_behind(
    g: &GpuState,
    v: &Verdict,
    now: Instant,
    restart_app_window: Duration,
) -> Vec<u64> {
    let Some(e) = &g.evidence else {
        return Vec::new();
    };
    let hopper = g.identity.architecture.as_deref() == Some("Hopper");
    let i = Inputs {
        health: g.health,
        readings: None,
        xids: &e.xids,
        node_xids: &[],
        remembered: e.remembered,
        instances: &e.instances,
        last_reset: e.last_reset,
        now,
        restart_app_window,
        hopper,
    };
    let mut codes: Vec<u64> = e
        .xids
        .iter()
        .filter(|x| {
            v.gpu_instance.is_none()
                || (x.gpu_instance, x.compute_instance) == (v.gpu_instance, v.compute_instance)
        })
        .filter(|x| xid_event_action(x.code, x.class, hopper) == Some((v.action, v.reason)))
        .filter(|x| holds(v.action, x.at, &i))
        .map(|x| x.code)
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// One verdict per unnamed address whose XIDs still ask for something,
/// worst first, at most `MAX_UNNAMED`. An unnamed GPU is judged on its
/// log lines alone: no readings, no MIG instances, nothing remembered.
pub fn judge_unnamed(
    e: &UnnamedEvidence,
    now: Instant,
    restart_app_window: Duration,
) -> Vec<UnnamedGpuVerdict> {
    let mut out: Vec<UnnamedGpuVerdict> = e
        .gpus
        .iter()
        .filter_map(|g| {
            let v = judge(&Inputs {
                health: Health::Up,
                readings: None,
                xids: &g.xids,
                node_xids: &[],
                remembered: Remembered::default(),
                instances: &[],
                last_reset: e.last_reset,
                now,
                restart_app_window,
                // Unknown: the log names an address NVML does not.
                hopper: false,
            });
            let v = v.first()?;
            (v.action != Action::None).then(|| UnnamedGpuVerdict {
                pci_bus_id: g.pci_bus_id.clone(),
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
    out.truncate(MAX_UNNAMED);
    out
}

/// Whether a note (`NOTES`) still says something now: as long as a reset
/// would have been asked for; a 45 only where it is solo on an NVSwitch
/// system (fabric state known) and recent, as the catalog's workflow
/// asks the fabric manager be restarted then. Solo: no other XID within
/// `XID_45_SOLO_WINDOW` on this GPU or any other of the node (a 45 whose
/// line names its cause never gets here: `XidClass::Xid45Caused`).
fn note_holds(x: &XidSeen, reason: &str, i: &Inputs<'_>) -> bool {
    if reason != "xid_workflow_xid_45" {
        return holds(Action::ResetGpu, x.at, i);
    }
    let nvswitch = i.readings.is_some_and(|r| r.fabric.is_some());
    let solo = !i.xids.iter().chain(i.node_xids).any(|o| {
        o.code != x.code
            && o.at.max(x.at).saturating_duration_since(o.at.min(x.at)) < XID_45_SOLO_WINDOW
    });
    nvswitch && solo && holds(Action::RestartApp, x.at, i)
}

/// Whether an XID's action still holds now.
fn holds(action: Action, at: Instant, i: &Inputs<'_>) -> bool {
    match action {
        Action::None => false,
        Action::RestartApp => i.now.saturating_duration_since(at) < i.restart_app_window,
        Action::ResetGpu => i.last_reset.is_none_or(|reset| reset < at),
        // A reboot restarts the kernel log and the exporter: what is
        // known of this boot still stands.
        Action::Reboot | Action::CheckHardware | Action::Rma => true,
    }
}

/// The worst action offered so far; the first offer wins a tie.
#[derive(Default)]
struct Worst {
    best: Option<(Action, &'static str)>,
    /// The first note (`NOTES`) offered: the reason while the action is
    /// none.
    note: Option<&'static str>,
}

impl Worst {
    fn offer(&mut self, action: Action, reason: &'static str) {
        if action != Action::None && self.best.is_none_or(|(a, _)| action > a) {
            self.best = Some((action, reason));
        }
    }

    fn note(&mut self, reason: &'static str) {
        self.note.get_or_insert(reason);
    }

    /// The signals NVML reports, in the order of the module's table.
    fn offer_readings(&mut self, r: &GpuReadings) {
        let remap = r.remapped_rows;
        if remap.is_some_and(|m| m.failed) {
            self.offer(Action::Rma, "remap_failed");
        }
        if r.remapper_banks
            .iter()
            .any(|(rows, n)| *rows == SpareRows::Exhausted && *n > 0)
        {
            self.offer(Action::Rma, "remapper_exhausted");
        }
        if r.sram_threshold_exceeded == Some(true) {
            self.offer(Action::Rma, "sram_threshold");
        }
        // nvmlGpuRecoveryAction_t (nvml.h: 0 NONE, 1 GPU_RESET, 2
        // NODE_REBOOT, 3 DRAIN_P2P, 4 DRAIN_AND_RESET, 5
        // RECOVER_IMEX_DOMAIN; 6 BUS_RESET "reset the GPU's PCIe bus" and
        // 7 SYSTEM_REBOOT "reboot the system" added between NVML v610 and
        // v615, cuda-python's DeviceGpuRecoveryAction). Each named as
        // NVIDIA names it (issue 36): 6 is a reboot here, with its own
        // reason, since the runbook's reset (`nvidia-smi -r`) is not a bus
        // reset and a reboot is one; 5 is a recovery of the IMEX domain,
        // not of this GPU or node: no drain of ours does it, the reason
        // names it and NvidiaGpuRecoveryActionRequired pages. A value we
        // do not know is looked at, never ignored.
        match r.recovery_action {
            None | Some(0) => {}
            Some(2 | 7) => self.offer(Action::Reboot, "recovery_action"),
            Some(6) => self.offer(Action::Reboot, "recovery_action_bus_reset"),
            Some(1 | 3 | 4) => self.offer(Action::ResetGpu, "recovery_action"),
            Some(5) => self.note("recovery_action_recover_imex_domain"),
            Some(_) => self.offer(Action::CheckHardware, "recovery_action_unknown"),
        }
        if remap.is_some_and(|m| m.pending) {
            self.offer(Action::ResetGpu, "remap_pending");
        }
        if r.retired_pages_pending == Some(true) {
            self.offer(Action::ResetGpu, "retirement_pending");
        }
        if let Some(f) = &r.fabric {
            // NVML says the fabric itself is unhealthy (NVL72: trays,
            // switches, cables); a registration that failed is retried by
            // a reset. Limited capacity and the mask's transient conditions
            // leave the GPU working: NvidiaGpuFabricUnhealthy covers them.
            if f.health_summary == Some(FabricHealth::Unhealthy) {
                self.offer(Action::CheckHardware, "fabric");
            }
            if f.state == 3 && !f.registered {
                self.offer(Action::ResetGpu, "fabric");
            }
        }
    }

    fn verdict(&self, gpu_instance: Option<u32>, compute_instance: Option<u32>) -> Verdict {
        let (action, reason) = self
            .best
            .unwrap_or((Action::None, self.note.unwrap_or("none")));
        Verdict {
            gpu_instance,
            compute_instance,
            action,
            reason,
        }
    }
}

#[cfg(test)]
mod tests;
