//! NVIDIA's XID catalog, every code from 1 to 176 and 185, with the resolution
//! bucket that decides what we do about it: the one table behind the XID
//! alert rules (`alerts/nvidia-gpu.rules.yml`: which rule's regular
//! expression holds a code), the runbook's severity table
//! (`docs/runbooks.md`, "XID severity table") and whatever else needs a
//! code's meaning, such as a per-GPU verdict. `tests/e2e/xid_catalog.rs`
//! renders the rules' regular expressions and the runbook table from it and
//! fails while either differs (`scripts/regenerate` rewrites them);
//! `tests/test_alerts.py` checks the rendered table against the rules and
//! the bucket policy below once more, in promtool's terms.
//!
//! Source: *Analyzing Xid Errors with the Xid Catalog*
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! Ampere and newer: mnemonic, description and "Resolution Bucket
//! (Immediate Action)" per code. The catalog gives no bucket for 162-176
//! and 185; for those the table says which bucket we chose and why: by
//! default NVSentinel's for a code without one, CONTACT_SUPPORT
//! (NVIDIA/NVSentinel `health-monitors/syslog-health-monitor/pkg/xid/parser/csv.go`,
//! `parseStandardXID`: "No action found for XID code, defaulting to
//! CONTACT_SUPPORT"), otherwise the row names its source or reason. Codes
//! 173-176 are the driver's (`nverror.h` of NVIDIA/open-gpu-kernel-modules
//! up to the 595 branch, kept in `xid_catalog/nverror_defines.txt` with its
//! source; a test fails while one of its codes has no row here, or while
//! the file is of another release than [`NVERROR_TAG`]); 185 is named by
//! NVIDIA's R620 notes ([`PAST_NVERROR`]). Codes the catalog marks
//! "Unused" on every Ampere-and-newer product are CONTACT_SUPPORT there:
//! seen at all, a person looks (the verdict's `check_hardware`).
//!
//! The NVLink5 codes 144-150 resolve per event, by the sheet "XID 144-150
//! Decode" (`nvlink5.rs`), not by code.

pub mod nvlink5;
pub mod nvlink_err;

/// The catalog's "Resolution Bucket (Immediate Action)" values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    ContactSupport,
    RestartApp,
    Ignore,
    ResetGpu,
    RestartBm,
    RestartVm,
    CheckMechanicals,
    UpdateSwFw,
    CheckUvm,
    WorkflowXid45,
    WorkflowXid48,
    WorkflowNvlinkErr,
    WorkflowNvlink5Err,
    Xid154,
}

impl Bucket {
    pub const ALL: &'static [Bucket] = &[
        Bucket::ContactSupport,
        Bucket::RestartApp,
        Bucket::Ignore,
        Bucket::ResetGpu,
        Bucket::RestartBm,
        Bucket::RestartVm,
        Bucket::CheckMechanicals,
        Bucket::UpdateSwFw,
        Bucket::CheckUvm,
        Bucket::WorkflowXid45,
        Bucket::WorkflowXid48,
        Bucket::WorkflowNvlinkErr,
        Bucket::WorkflowNvlink5Err,
        Bucket::Xid154,
    ];

    /// As the catalog spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::ContactSupport => "CONTACT_SUPPORT",
            Bucket::RestartApp => "RESTART_APP",
            Bucket::Ignore => "IGNORE",
            Bucket::ResetGpu => "RESET_GPU",
            Bucket::RestartBm => "RESTART_BM",
            Bucket::RestartVm => "RESTART_VM",
            Bucket::CheckMechanicals => "CHECK_MECHANICALS",
            Bucket::UpdateSwFw => "UPDATE_SWFW",
            Bucket::CheckUvm => "CHECK_UVM",
            Bucket::WorkflowXid45 => "WORKFLOW_XID_45",
            Bucket::WorkflowXid48 => "WORKFLOW_XID_48",
            Bucket::WorkflowNvlinkErr => "WORKFLOW_NVLINK_ERR",
            Bucket::WorkflowNvlink5Err => "WORKFLOW_NVLINK5_ERR",
            Bucket::Xid154 => "XID_154",
        }
    }

    /// The severities a code of this bucket may get, unless the table
    /// says it departs: a bucket that says the GPU needs nothing never
    /// pages, one that says reset never goes to chat only. The catalog's
    /// workflow for 48 starts with a reset, 74's checks the link or reports
    /// by register bit (`nvlink_err`: the verdict decides per event, the
    /// rule pages for a person to read the bits), and RESTART_BM (79) asks
    /// for more: a node reboot. The NVLink5 workflow decides per event.
    pub fn severities(self) -> &'static [Severity] {
        use Severity::{Critical, Info, Warning};
        match self {
            Bucket::ResetGpu => &[Critical, Warning],
            Bucket::WorkflowXid48 | Bucket::WorkflowNvlinkErr | Bucket::RestartBm => &[Critical],
            // Each event is decoded (`nvlink5`): the verdict pages the fatal
            // ones, and a code-wide rule would page the non-fatal ones too.
            Bucket::WorkflowNvlink5Err => &[Severity::None],
            Bucket::RestartApp => &[Info, Warning],
            Bucket::ContactSupport
            | Bucket::RestartVm
            | Bucket::CheckMechanicals
            | Bucket::UpdateSwFw
            | Bucket::CheckUvm => &[Warning],
            Bucket::Ignore | Bucket::WorkflowXid45 | Bucket::Xid154 => &[Severity::None],
        }
    }
}

/// Alertmanager severity of a rule (`severity` label); `None`: no alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Critical,
    Warning,
    Info,
    None,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
            Severity::None => "none",
        }
    }
}

/// The alert rule whose regular expression holds a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XidAlert {
    Critical,
    Warning,
    Application,
    StoppedProcessing,
    /// No alert: the code is only in `NvidiaGpuXidUnlisted`'s exclusions.
    None,
}

impl XidAlert {
    pub const ALL: &'static [XidAlert] = &[
        XidAlert::Critical,
        XidAlert::Warning,
        XidAlert::Application,
        XidAlert::StoppedProcessing,
        XidAlert::None,
    ];

    /// The rule's name in `alerts/nvidia-gpu.rules.yml`, `none` for none.
    pub fn rule(self) -> &'static str {
        match self {
            XidAlert::Critical => "NvidiaGpuXidCritical",
            XidAlert::Warning => "NvidiaGpuXidWarning",
            XidAlert::Application => "NvidiaGpuXidApplicationError",
            XidAlert::StoppedProcessing => "NvidiaGpuXidStoppedProcessing",
            XidAlert::None => "none",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            XidAlert::Critical => Severity::Critical,
            XidAlert::Warning | XidAlert::StoppedProcessing => Severity::Warning,
            XidAlert::Application => Severity::Info,
            XidAlert::None => Severity::None,
        }
    }
}

/// Where a code's bucket comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The catalog's bucket, and a severity its policy allows.
    Catalog(Bucket),
    /// The catalog's bucket, with a severity its policy does not allow:
    /// the action text says why.
    Departs(Bucket),
    /// The catalog gives no bucket; this is ours (the action says why).
    Ours(Bucket),
}

/// One code of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    pub code: u16,
    /// The catalog's mnemonic, as NVRM prints it in the kernel log.
    pub mnemonic: &'static str,
    pub meaning: &'static str,
    pub source: Source,
    pub alert: XidAlert,
    /// What to do when it happens.
    pub action: &'static str,
}

impl Xid {
    /// The bucket that decides the code's alert: the catalog's, else ours.
    pub fn bucket(&self) -> Bucket {
        match self.source {
            Source::Catalog(b) | Source::Departs(b) | Source::Ours(b) => b,
        }
    }

    /// The catalog's own bucket; `None` where it gives none.
    pub fn catalog_bucket(&self) -> Option<Bucket> {
        match self.source {
            Source::Catalog(b) | Source::Departs(b) => Some(b),
            Source::Ours(_) => None,
        }
    }
}

const fn xid(
    code: u16,
    mnemonic: &'static str,
    meaning: &'static str,
    source: Source,
    alert: XidAlert,
    action: &'static str,
) -> Xid {
    Xid {
        code,
        mnemonic,
        meaning,
        source,
        alert,
        action,
    }
}

/// A code the catalog marks "Unused" on A100, H100, B100 and GB200, with
/// CONTACT_SUPPORT as its bucket.
const fn unused(code: u16, mnemonic: &'static str) -> Xid {
    xid(
        code,
        mnemonic,
        "Unused on Ampere and newer",
        Catalog(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: not expected on Ampere and newer; save the evidence and report it to NVIDIA (Volta and older: NVIDIA's archive catalog)",
    )
}

use Source::{Catalog, Departs, Ours};

/// Every code of the catalog, 1 to 176 and 185, in order.
pub const CATALOG: &[Xid] = &[
    unused(1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD"),
    unused(2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD"),
    unused(3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD"),
    unused(4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY"),
    unused(5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW"),
    unused(6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR"),
    unused(7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR"),
    xid(
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing (channel idle timeout)",
        Catalog(Bucket::RestartApp),
        XidAlert::StoppedProcessing,
        "restart the job; drain and reset if it repeats with other jobs",
    ),
    unused(9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE"),
    unused(10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP"),
    xid(
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application or driver data; nothing for the GPU",
    ),
    unused(12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD"),
    xid(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        "Graphics engine exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application bug; nothing for the GPU",
    ),
    xid(
        14,
        "ROBUST_CHANNEL_FAKE_ERROR",
        "Fake or injected error from user space",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing: an injected test event",
    ),
    unused(15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT"),
    unused(16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT"),
    unused(17, "ROBUST_CHANNEL_PARAMETER_ERROR"),
    unused(18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR"),
    unused(19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER"),
    unused(20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD"),
    unused(21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD"),
    unused(22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD"),
    unused(23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED"),
    unused(24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT"),
    xid(
        25,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "Invalid or illegal push buffer stream",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application bug; nothing for the GPU",
    ),
    unused(26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT"),
    unused(27, "ROBUST_CHANNEL_VP_ERROR"),
    unused(28, "ROBUST_CHANNEL_VP2_ERROR"),
    unused(29, "ROBUST_CHANNEL_BSP_ERROR"),
    unused(30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS"),
    xid(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault (MMU fault)",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application bug (illegal address); nothing for the GPU",
    ),
    xid(
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream (DMA controller)",
        Catalog(Bucket::RestartApp),
        XidAlert::Warning,
        "restart the job; a ticket rather than chat because the catalog traces it to PCIe quality, not the application: check the slot and riser if it recurs",
    ),
    unused(33, "ROBUST_CHANNEL_SEC_ERROR"),
    unused(34, "ROBUST_CHANNEL_MSVLD_ERROR"),
    unused(35, "ROBUST_CHANNEL_MSPDEC_ERROR"),
    unused(36, "ROBUST_CHANNEL_MSPPP_ERROR"),
    xid(
        37,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD",
        "Driver firmware error",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; look at the application if it repeats",
    ),
    xid(
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "Driver firmware error (watchdog timeout)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; report to NVIDIA if it repeats",
    ),
    xid(
        39,
        "ROBUST_CHANNEL_CE0_ERROR",
        "Copy engine exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        40,
        "ROBUST_CHANNEL_CE1_ERROR",
        "Copy engine exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        41,
        "ROBUST_CHANNEL_CE2_ERROR",
        "Copy engine exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    unused(42, "ROBUST_CHANNEL_VIC_ERROR"),
    xid(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing (reset channel verification error)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing: the GPU stays healthy; look at the XID before it",
    ),
    xid(
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics engine fault during context switch",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing on the XID itself; follow the XID it accompanies",
    ),
    xid(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors",
        Catalog(Bucket::WorkflowXid45),
        XidAlert::None,
        "nothing when another XID came with it on any GPU of the node within 10 s, or its line names the cause (caused by previous Xid N; the catalog: not solo, IGNORE); alone on an NVSwitch system, restart Fabric Manager (reason xid_workflow_xid_45)",
    ),
    xid(
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "GPU stopped processing (Ampere and newer)",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    unused(47, "ROBUST_CHANNEL_NVENC0_ERROR"),
    xid(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double-bit (uncorrectable) ECC error",
        Catalog(Bucket::WorkflowXid48),
        XidAlert::Critical,
        "drain, reset; if the error is in SRAM, check the SRAM threshold flag (NvidiaGpuSramErrorThresholdExceeded) for RMA; RMA if remapping fails",
    ),
    unused(49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY"),
    unused(50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR"),
    unused(51, "SILENT_RUNNING_STRESS_TEST_FAILURE"),
    unused(52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE"),
    unused(53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING"),
    xid(
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power is not connected to the GPU board",
        Catalog(Bucket::CheckMechanicals),
        XidAlert::Warning,
        "drained until a person decides: check the board's seating and power connectors (until then the GPU runs at reduced clocks)",
    ),
    unused(55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR"),
    unused(56, "DISPLAY_CHANNEL_EXCEPTION"),
    unused(57, "FB_LINK_TRAINING_FAILURE_ERROR"),
    unused(58, "FB_MEMORY_ERROR"),
    unused(59, "PMU_ERROR"),
    xid(
        60,
        "ROBUST_CHANNEL_SEC2_ERROR",
        "Video processor exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        61,
        "PMU_BREAKPOINT",
        "Internal micro-controller breakpoint/warning (unused on Ampere and newer)",
        Catalog(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: older GPUs only; save the evidence, reset the GPU, report to NVIDIA if it recurs",
    ),
    xid(
        62,
        "PMU_HALT_ERROR",
        "Internal micro-controller halt",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    xid(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "Row remap (or page retirement) recorded",
        Departs(Bucket::Ignore),
        XidAlert::Warning,
        "nothing on the XID itself (NVML's pending remap asks for the reset, remap_pending): reset at the next service window to apply it; a ticket, departing from the catalog, because on MIG GPUs this XID is the only sign of a remap (see below)",
    ),
    xid(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "ECC page retirement or row remap failure",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; RMA where remapping failed (NVML's flag, the verdict's remap_failed)",
    ),
    unused(65, "ROBUST_CHANNEL_NVENC1_ERROR"),
    xid(
        66,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        "Illegal access by driver",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; report to NVIDIA if it repeats",
    ),
    xid(
        67,
        "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION",
        "Illegal access by driver",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; report to NVIDIA if it repeats",
    ),
    xid(
        68,
        "ROBUST_CHANNEL_NVDEC0_ERROR",
        "NVDEC0 (video decoder) exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application or video stream; nothing for the GPU",
    ),
    xid(
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR",
        "Graphics engine class error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "application bug",
    ),
    xid(
        70,
        "ROBUST_CHANNEL_CE3_ERROR",
        "Copy engine 3 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        71,
        "ROBUST_CHANNEL_CE4_ERROR",
        "Copy engine 4 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        72,
        "ROBUST_CHANNEL_CE5_ERROR",
        "Copy engine 5 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    unused(73, "ROBUST_CHANNEL_NVENC2_ERROR"),
    xid(
        74,
        "NVLINK_ERROR",
        "NVLink error",
        Catalog(Bucket::WorkflowNvlinkErr),
        XidAlert::Critical,
        "read the seven registers of its kernel-log line (valid on Hopper): hardware bits, a bit NVIDIA does not expect, sympathetic bits alone or ECC/parity bits seen more than twice on a link in 24 h drain the GPU for a person (check the link's mechanical connections, run field diagnostics, report to NVIDIA); fourth-register bit 18 asks for a GPU reset (the fabric); ignorable bits nothing. Without its registers, or on another architecture, the GPU is drained for a person; the remote end may be the faulty one (the verdict decodes each event)",
    ),
    xid(
        75,
        "ROBUST_CHANNEL_CE6_ERROR",
        "Copy engine 6 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        76,
        "ROBUST_CHANNEL_CE7_ERROR",
        "Copy engine 7 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        77,
        "ROBUST_CHANNEL_CE8_ERROR",
        "Copy engine 8 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        78,
        "VGPU_START_ERROR",
        "vGPU start error",
        Catalog(Bucket::UpdateSwFw),
        XidAlert::Warning,
        "drained until a person decides: update the host and guest drivers to matching versions and check that the vGPU type suits the guest, then reboot",
    ),
    xid(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        Catalog(Bucket::RestartBm),
        XidAlert::Critical,
        "drain; reboot the node (bare metal); reseat or RMA if recurring",
    ),
    xid(
        80,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH",
        "Corrupted data sent to GPU",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; check it if it repeats",
    ),
    unused(81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR"),
    xid(
        82,
        "ROBUST_CHANNEL_NVJPG0_ERROR",
        "NVJPG0 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        83,
        "ROBUST_CHANNEL_NVDEC1_ERROR",
        "NVDEC1 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        84,
        "ROBUST_CHANNEL_NVDEC2_ERROR",
        "NVDEC2 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        85,
        "ROBUST_CHANNEL_CE9_ERROR",
        "Copy engine 9 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        86,
        "ROBUST_CHANNEL_OFA0_ERROR",
        "Optical flow (OFA) exception",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    unused(87, "NVTELEMETRY_DRIVER_REPORT"),
    xid(
        88,
        "ROBUST_CHANNEL_NVDEC3_ERROR",
        "NVDEC3 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        89,
        "ROBUST_CHANNEL_NVDEC4_ERROR",
        "NVDEC4 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    unused(90, "LTC_ERROR"),
    unused(91, "RESERVED_XID"),
    xid(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "High single-bit ECC error rate",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing on the XID itself: the corrected-error rate pages as NvidiaGpuEccCorrectedErrorBurst, remaps as NvidiaGpuRemappedRowsPending",
    ),
    xid(
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "InfoROM wear limit reached (provisioned with nvflash)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing unless intended otherwise: clear the limit with nvflash --elsessionclear",
    ),
    xid(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained ECC error",
        Catalog(Bucket::RestartApp),
        XidAlert::Warning,
        "only the affected application was killed and the page offlined: no reset needed now; a ticket because repeats mean degrading memory",
    ),
    xid(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained ECC error",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "all work on the GPU is affected: drain and reset now",
    ),
    xid(
        96,
        "ROBUST_CHANNEL_NVDEC5_ERROR",
        "NVDEC5 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        97,
        "ROBUST_CHANNEL_NVDEC6_ERROR",
        "NVDEC6 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        98,
        "ROBUST_CHANNEL_NVDEC7_ERROR",
        "NVDEC7 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        99,
        "ROBUST_CHANNEL_NVJPG1_ERROR",
        "NVJPG1 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        100,
        "ROBUST_CHANNEL_NVJPG2_ERROR",
        "NVJPG2 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        101,
        "ROBUST_CHANNEL_NVJPG3_ERROR",
        "NVJPG3 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        102,
        "ROBUST_CHANNEL_NVJPG4_ERROR",
        "NVJPG4 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        103,
        "ROBUST_CHANNEL_NVJPG5_ERROR",
        "NVJPG5 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        104,
        "ROBUST_CHANNEL_NVJPG6_ERROR",
        "NVJPG6 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        105,
        "ROBUST_CHANNEL_NVJPG7_ERROR",
        "NVJPG7 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        106,
        "SMBPBI_TEST_MESSAGE",
        "SMBPBI test message",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing: a test event",
    ),
    xid(
        107,
        "SMBPBI_TEST_MESSAGE_SILENT",
        "SMBPBI test message (silent)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing: a test event",
    ),
    xid(
        108,
        "NVLINK_REMOTE_TRANSLATION_ERROR",
        "NVLink remote translation error (unused)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; if it repeats, check the application's peer-to-peer accesses",
    ),
    xid(
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "Context switch timeout",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; report to NVIDIA if it recurs",
    ),
    xid(
        110,
        "SEC_FAULT_ERROR",
        "Security fault error",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    unused(111, "BUNDLE_ERROR_EVENT"),
    unused(112, "DISP_SUPERVISOR_ERROR"),
    unused(113, "DP_LT_FAILURE"),
    unused(114, "HEAD_RG_UNDERFLOW"),
    unused(115, "CORE_CHANNEL_REGS"),
    unused(116, "WINDOW_CHANNEL_REGS"),
    unused(117, "CURSOR_CHANNEL_REGS"),
    unused(118, "HEAD_REGS"),
    xid(
        119,
        "GSP_RPC_TIMEOUT",
        "GSP RPC timeout",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; update the driver if it recurs",
    ),
    xid(
        120,
        "GSP_ERROR",
        "GSP error",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; update the driver if it recurs",
    ),
    xid(
        121,
        "C2C_ERROR",
        "C2C (Grace to GPU NVLink-C2C) corrected errors (GB200)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing now (corrected); a reset at a service window lets the link retrain",
    ),
    unused(122, "SPI_PMU_RPC_READ_FAIL"),
    unused(123, "SPI_PMU_RPC_WRITE_FAIL"),
    unused(124, "SPI_PMU_RPC_ERASE_FAIL"),
    unused(125, "INFOROM_FS_ERROR"),
    xid(
        126,
        "ROBUST_CHANNEL_CE10_ERROR",
        "Copy engine 10 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        127,
        "ROBUST_CHANNEL_CE11_ERROR",
        "Copy engine 11 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        128,
        "ROBUST_CHANNEL_CE12_ERROR",
        "Copy engine 12 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        129,
        "ROBUST_CHANNEL_CE13_ERROR",
        "Copy engine 13 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        130,
        "ROBUST_CHANNEL_CE14_ERROR",
        "Copy engine 14 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        131,
        "ROBUST_CHANNEL_CE15_ERROR",
        "Copy engine 15 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        132,
        "ROBUST_CHANNEL_CE16_ERROR",
        "Copy engine 16 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        133,
        "ROBUST_CHANNEL_CE17_ERROR",
        "Copy engine 17 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        134,
        "ROBUST_CHANNEL_CE18_ERROR",
        "Copy engine 18 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        135,
        "ROBUST_CHANNEL_CE19_ERROR",
        "Copy engine 19 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        136,
        "ALI_TRAINING_FAIL",
        "NVLink link training failed (H100)",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; check the link's signal integrity if it recurs",
    ),
    xid(
        137,
        "NVLINK_PRIV_ERR",
        "NVLink privilege error (illegal peer-to-peer access)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing for the GPU: usually the application's peer-to-peer access; see XID 94 if it cascades",
    ),
    unused(138, "ROBUST_CHANNEL_DLA_ERROR"),
    xid(
        139,
        "ROBUST_CHANNEL_OFA1_ERROR",
        "OFA1 error",
        Catalog(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU",
    ),
    xid(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "Unrecovered ECC error",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    xid(
        141,
        "ROBUST_CHANNEL_FAST_PATH_ERROR",
        "CUDA fast path error",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; report to NVIDIA if it repeats",
    ),
    xid(
        142,
        "ROBUST_CHANNEL_NVENC3_ERROR",
        "NVENC3 error (GB200)",
        Catalog(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: save the evidence and report it to NVIDIA",
    ),
    xid(
        143,
        "GPU_INIT_ERROR",
        "GPU initialization error (R575 and newer)",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    xid(
        144,
        "NVLINK_SAW_ERROR",
        "NVLink5 SAW error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        145,
        "NVLINK_RLW_ERROR",
        "NVLink5 RLW error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        146,
        "NVLINK_TLW_ERROR",
        "NVLink5 TLW error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        147,
        "NVLINK_TREX_ERROR",
        "NVLink5 TREX error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        148,
        "NVLINK_NVLPW_CTRL_ERROR",
        "NVLink5 NVLPW_CTRL error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        149,
        "NVLINK_NETIR_ERROR",
        "NVLink5 NETIR error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        150,
        "NVLINK_MSE_ERROR",
        "NVLink5 MSE error (Blackwell)",
        Catalog(Bucket::WorkflowNvlink5Err),
        XidAlert::None,
        "decided per event by NVIDIA's decode sheet (NVLink5 XIDs 144-150, below): a fatal event asks for a reset and pages as NvidiaGpuActionRequired, a non-fatal one asks for nothing; without its kernel-log line, nothing on the XID (reason xid_nvlink5_no_kernel_log): the driver's recovery action and XID 154 carry any need",
    ),
    xid(
        151,
        "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        "Key rotation error (confidential computing)",
        Catalog(Bucket::RestartVm),
        XidAlert::Warning,
        "restart the VM that owns the GPU; no GPU reset needed",
    ),
    xid(
        152,
        "ROBUST_CHANNEL_DLA_SMMU_ERROR",
        "DLA SMMU error (not on data center GPUs)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing",
    ),
    xid(
        153,
        "ROBUST_CHANNEL_DLA_TIMEOUT",
        "DLA timeout error (not on data center GPUs)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing",
    ),
    xid(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU recovery action changed (informational)",
        Catalog(Bucket::Xid154),
        XidAlert::None,
        "nothing on the XID itself: the action it announces pages as NvidiaGpuRecoveryActionRequired",
    ),
    xid(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLink5 software-defined error: a link taken down on purpose (Blackwell)",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain; check NVLink counters and fabric health; reset",
    ),
    xid(
        156,
        "RESOURCE_RETIREMENT_EVENT",
        "Resource retirement event (H100 and newer)",
        Catalog(Bucket::ResetGpu),
        XidAlert::Warning,
        "reset at the next service window so the retirement takes effect",
    ),
    xid(
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource retirement failure: no spare resources left to repair (H100 and newer)",
        Departs(Bucket::Ignore),
        XidAlert::Warning,
        "nothing on the GPU now: workloads still run, but the same fault can come back unrepaired: a ticket, departing from the catalog, to plan an RMA (as for exhausted remapper banks)",
    ),
    xid(
        158,
        "GPU_FATAL_TIMEOUT",
        "GPU fatal timeout",
        Catalog(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset",
    ),
    xid(
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI non-data error on a C2C link (Grace superchips)",
        Catalog(Bucket::CheckUvm),
        XidAlert::Warning,
        "drained until a person decides: where UVM or vGPU is in use, reset the GPU; otherwise return it to service",
    ),
    xid(
        160,
        "CHANNEL_RETIREMENT_EVENT",
        "Channel retirement event (R575 and newer)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing",
    ),
    xid(
        161,
        "CHANNEL_RETIREMENT_FAILURE",
        "Channel retirement failure (R575 and newer)",
        Catalog(Bucket::Ignore),
        XidAlert::None,
        "nothing; report to NVIDIA if it repeats",
    ),
    xid(
        162,
        "PSHC_REENGAGED",
        "Power smoothing circuitry capability reengaged (Blackwell)",
        Ours(Bucket::Ignore),
        XidAlert::None,
        "nothing: power smoothing works again (the catalog gives no bucket; ours: good news needs no alert)",
    ),
    xid(
        163,
        "PSHC_DISENGAGED",
        "Power smoothing circuitry capability disengaged (Blackwell)",
        Ours(Bucket::Ignore),
        XidAlert::None,
        "nothing on the GPU: no reset is needed for power smoothing alone; resolve the thermal events that disengaged it (the thermal alerts page on them); if it was disabled by a timeout, reload the driver at the next window (the catalog gives no bucket; ours: the GPU computes on)",
    ),
    xid(
        164,
        "PSHC_LOW_LIFETIME",
        "Power smoothing circuitry lifetime low (Blackwell)",
        Ours(Bucket::Ignore),
        XidAlert::None,
        "nothing on the GPU now: power smoothing will be disabled soon; decide whether the rack can absorb power swings, else plan replacing the GPU (the catalog gives no bucket; ours: the GPU computes on, and NvidiaGpuPowerSmoothingLifetimeLow tickets the wear from the same circuitry's lifetime)",
    ),
    xid(
        165,
        "PSHC_ZERO_LIFETIME",
        "Power smoothing circuitry lifetime exhausted (Blackwell)",
        Ours(Bucket::Ignore),
        XidAlert::None,
        "nothing on the GPU now: the driver disables power smoothing and power swings reach the facility; replace the GPU if they are not acceptable (the catalog gives no bucket; ours: the GPU still computes, and NvidiaGpuPowerSmoothingLifetimeLow tickets it)",
    ),
    xid(
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        "NVLink traffic in confidential computing mode before the link was set up for encryption (Blackwell)",
        Ours(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: confidential computing mode only; save the evidence and report it to NVIDIA (the catalog gives no bucket; ours: NVSentinel's default for a code without one, CONTACT_SUPPORT)",
    ),
    xid(
        167,
        "PCIE_FATAL_TIMEOUT",
        "PCIe fatal timeout (H100 and newer)",
        Ours(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; check the slot, riser and retimers if it recurs (the catalog gives no bucket; ours: as XID 79, the GPU's PCIe link failed)",
    ),
    xid(
        168,
        "REDUCED_GPU_MEMORY_CAPACITY",
        "Reduced GPU memory capacity: errors in the write-protected region",
        Ours(Bucket::ResetGpu),
        XidAlert::Warning,
        "the GPU runs with less memory: enable ECC (so rows can be remapped) and reset the GPU, or reboot, at the next window (the catalog gives no bucket; ours: a reset that can wait)",
    ),
    xid(
        169,
        "SEC2_HALT_ERROR",
        "Internal micro-controller (SEC2) halt (H100 and newer)",
        Ours(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset (the catalog gives no bucket; ours: as XID 62, the other micro-controller halt)",
    ),
    xid(
        170,
        "NVLINK_SECURE_OTHER",
        "NVLink interrupt in confidential computing mode (Blackwell)",
        Ours(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: confidential computing mode only; save the evidence and report it to NVIDIA (the catalog gives no bucket; ours: NVSentinel's default for a code without one, CONTACT_SUPPORT)",
    ),
    xid(
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "Uncorrectable DRAM error: detail of an XID 48",
        Ours(Bucket::WorkflowXid48),
        XidAlert::Critical,
        "as XID 48, which it accompanies: drain, reset; RMA if remapping fails (the catalog gives no bucket; ours: XID 48's)",
    ),
    xid(
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "Uncorrectable SRAM error: detail of an XID 48",
        Ours(Bucket::WorkflowXid48),
        XidAlert::Critical,
        "as XID 48, which it accompanies: drain, reset; check the SRAM threshold flag for RMA (the catalog gives no bucket; ours: XID 48's)",
    ),
    xid(
        173,
        "C2C_FATAL_LINK_FAILURE",
        "Grace to GPU NVLink-C2C link failed (GB200, GB300; driver 580.105.08 and newer)",
        Ours(Bucket::RestartBm),
        XidAlert::Critical,
        "drain, reboot the node: the GPU lost its link to the Grace CPU, which only a node reset retrains; check the board if it recurs (the catalog gives no bucket; ours: a reboot, as gpud decides RebootSystem)",
    ),
    xid(
        174,
        "ROBUST_CHANNEL_RESETCHANNEL_KILL_PROCESS_SILENT",
        "A channel reset ended its process without an error to it (driver 590.44.01 and newer)",
        Ours(Bucket::RestartApp),
        XidAlert::Application,
        "restart the application; nothing for the GPU (the catalog gives no bucket; ours, by its name: a channel reset that ended one process, which RESTART_APP answers; the 595 driver never raises it)",
    ),
    xid(
        175,
        "MEMORY_SUBSYSTEM_ERROR",
        "GSP RPC timeout caused by a memory subsystem error (driver 595.44.02 and newer)",
        Ours(Bucket::ResetGpu),
        XidAlert::Critical,
        "drain, reset; check ECC and remapped rows, RMA if it recurs (the catalog gives no bucket; ours: XID 119's, the timeout it refines, which the driver reports as 175 when a memory error caused it)",
    ),
    xid(
        176,
        "PCIE_CORRECTABLE_ERROR_FAULT",
        "PCIe correctable errors past the driver's fault threshold (driver 595.44.02 and newer)",
        Ours(Bucket::CheckMechanicals),
        XidAlert::Warning,
        "drained until a person decides: the link still works, but its correctable errors passed the driver's fault threshold; check the slot, riser, retimers and cables (nvidia_gpu_pcie_replay_errors_total shows the trend) (the catalog gives no bucket; ours: NVSentinel's default for a code without one, CONTACT_SUPPORT, which a degrading link narrows to a mechanical check)",
    ),
    xid(
        185,
        "SPARING_EVENT",
        "Memory sparing state changed (R620 and newer; the name is NVIDIA's GPU Operational Event's, the driver's own mnemonic is not public)",
        Ours(Bucket::ContactSupport),
        XidAlert::Warning,
        "drained until a person decides: read the event's context in the GPU Operational Events log (nvidia-smi event-log, R620) and act as NVIDIA's event catalog says for it (the catalog gives no bucket; ours: NVSentinel's default for a code without one, CONTACT_SUPPORT)",
    ),
];

/// The highest code public sources name: the catalog's end. Codes up to
/// [`NVERROR_LAST`] are the vendored `nverror.h`'s; past it, those of
/// [`PAST_NVERROR`]. A code the catalog lacks (177-184, past 185) is judged
/// by the verdict's stated policy for unlisted codes
/// (`crate::verdict::xid_action`: CONTACT_SUPPORT, as NVSentinel does for a
/// code without a bucket) and pages as NvidiaGpuXidUnlisted.
pub const LAST_CODE: u16 = 185;

/// The driver release whose `nverror.h` `xid_catalog/nverror_defines.txt`
/// copies (the newest tag of NVIDIA/open-gpu-kernel-modules), and its
/// `ROBUST_CHANNEL_LAST_ERROR`: a test fails while the vendored file says
/// otherwise, so a newer list cannot be copied in without its rows.
pub const NVERROR_TAG: &str = "595.45.04";
pub const NVERROR_LAST: u16 = 176;

/// Codes past the vendored `nverror.h` that NVIDIA names in public text,
/// each with where. R620's `nverror.h` is not public (no tag past 595.45.04
/// in NVIDIA/open-gpu-kernel-modules); 177-184 are not named anywhere
/// public, so they have no row.
pub const PAST_NVERROR: &[(u16, &str)] = &[(
    185,
    "GPU Operational Events, R620 release notes (https://docs.nvidia.com/deploy/gpu-operational-events/latest/release-notes.html): \"SPARING_EVENT (0x003D) reports Xid 185\"",
)];

/// The catalog's entry for a code.
pub fn lookup(code: u64) -> Option<&'static Xid> {
    let code = u16::try_from(code).ok()?;
    let i = CATALOG.binary_search_by_key(&code, |x| x.code).ok()?;
    CATALOG.get(i)
}

/// The codes an alert rule's regular expression holds, ascending.
pub fn codes_of(alert: XidAlert) -> Vec<u16> {
    CATALOG
        .iter()
        .filter(|x| x.alert == alert)
        .map(|x| x.code)
        .collect()
}

/// A rule's `xid=~"..."` alternation: the codes joined by `|`.
pub fn regex_of(codes: &[u16]) -> String {
    codes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_code_from_1_to_176_and_185_once_in_order() {
        let codes: Vec<u16> = CATALOG.iter().map(|x| x.code).collect();
        let want: Vec<u16> = (1..=NVERROR_LAST)
            .chain(PAST_NVERROR.iter().map(|&(c, _)| c))
            .collect();
        assert_eq!(codes, want);
        assert_eq!(codes.last(), Some(&LAST_CODE));
        for x in CATALOG {
            assert!(!x.mnemonic.is_empty() && !x.meaning.is_empty() && !x.action.is_empty());
            assert!(
                !x.action.contains('|') && !x.meaning.contains('|'),
                "{}",
                x.code
            );
        }
        assert_eq!(
            lookup(79).map(|x| x.mnemonic),
            Some("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")
        );
        assert_eq!(lookup(0), None);
        assert_eq!(lookup(177), None);
        assert_eq!(lookup(184), None);
        assert_eq!(lookup(185).map(|x| x.mnemonic), Some("SPARING_EVENT"));
        assert_eq!(lookup(186), None);
        assert_eq!(lookup(65_536 + 79), None);
    }

    #[test]
    fn severity_follows_the_bucket_unless_the_table_says_it_departs() {
        for x in CATALOG {
            let allowed = x.bucket().severities().contains(&x.alert.severity());
            match x.source {
                Source::Departs(_) => {
                    assert!(!allowed, "XID {} departs but needs not", x.code);
                    assert!(
                        x.action.contains("departing from the catalog"),
                        "XID {}",
                        x.code
                    );
                }
                _ => assert!(
                    allowed,
                    "XID {}: {:?} cannot be {:?}",
                    x.code,
                    x.bucket(),
                    x.alert
                ),
            }
        }
        let departures: BTreeSet<u16> = CATALOG
            .iter()
            .filter(|x| matches!(x.source, Source::Departs(_)))
            .map(|x| x.code)
            .collect();
        assert_eq!(departures, [63, 157].into_iter().collect());
    }

    #[test]
    fn only_the_codes_the_catalog_leaves_open_carry_our_bucket() {
        let ours: Vec<u16> = CATALOG
            .iter()
            .filter(|x| x.catalog_bucket().is_none())
            .map(|x| x.code)
            .collect();
        assert_eq!(ours, (162..=176).chain([185]).collect::<Vec<u16>>());
        for x in CATALOG.iter().filter(|x| x.catalog_bucket().is_none()) {
            assert!(
                x.action.contains("the catalog gives no bucket; ours"),
                "XID {}",
                x.code
            );
        }
    }

    #[test]
    fn the_codes_the_issues_name_land_where_they_should() {
        let alert = |code| lookup(code).unwrap().alert;
        // Issue 21: power smoothing, PCIe fatal timeout, reduced memory,
        // SEC2 halt, DRAM/SRAM detail and C2C are classified, not unlisted.
        assert_eq!(alert(167), XidAlert::Critical);
        assert_eq!(alert(169), XidAlert::Critical);
        assert_eq!(alert(171), XidAlert::Critical);
        assert_eq!(alert(172), XidAlert::Critical);
        assert_eq!(alert(168), XidAlert::Warning);
        // Issue 28: power smoothing's XIDs and the NVLink5 codes page
        // nothing by code (the wear has its own alert; NVLink5 events are
        // decoded and the verdict pages the fatal ones).
        for code in [162, 163, 164, 165, 144, 145, 146, 147, 148, 149, 150] {
            assert_eq!(alert(code), XidAlert::None, "{code}");
        }
        assert_eq!(alert(159), XidAlert::Warning);
        assert_eq!(alert(157), XidAlert::Warning);
        // Issue 16: the IGNORE codes stay silent, 95 pages, 8 does not.
        for code in [43, 45, 92, 154] {
            assert_eq!(alert(code), XidAlert::None, "{code}");
        }
        assert_eq!(alert(95), XidAlert::Critical);
        assert_eq!(alert(8), XidAlert::StoppedProcessing);
        assert_eq!(alert(13), XidAlert::Application);
    }

    /// Issue 36, F4, and issue 46: every code the newest public driver
    /// source defines (`nverror.h`, copied with its source) has a row; the
    /// vendored file is the release the catalog says it follows; codes past
    /// it are those NVIDIA's public text names, each with its source; and
    /// the catalog ends at the highest of them. Copying a newer driver's
    /// list in fails here until its release, its last code and every row
    /// are in.
    #[test]
    fn the_catalog_reaches_the_drivers_newest_code() {
        let file = include_str!("xid_catalog/nverror_defines.txt");
        let tag = file
            .lines()
            .take_while(|l| l.starts_with('#') && !l.starts_with("#define"))
            .find_map(|l| l.split_once(", tag ").map(|(_, t)| t))
            .and_then(|t| t.split_whitespace().next())
            .expect("the file names the tag it was copied from");
        assert_eq!(
            tag, NVERROR_TAG,
            "the vendored nverror.h is another release"
        );
        let defines: Vec<(&str, u16)> = file
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define ")?.split_whitespace();
                let name = w.next()?;
                let n = w.next()?.strip_prefix('(')?.strip_suffix(')')?;
                Some((name, n.parse().ok()?))
            })
            .collect();
        let last = defines
            .iter()
            .find(|(name, _)| *name == "ROBUST_CHANNEL_LAST_ERROR")
            .map(|(_, n)| *n)
            .expect("ROBUST_CHANNEL_LAST_ERROR");
        assert_eq!(NVERROR_LAST, last, "the vendored list ends elsewhere");
        let highest = defines.iter().map(|&(_, n)| n).max();
        assert_eq!(
            highest,
            Some(last),
            "a define past ROBUST_CHANNEL_LAST_ERROR"
        );
        assert!(defines.len() > 100);
        for &(code, source) in PAST_NVERROR {
            assert!(code > NVERROR_LAST, "{code} is the vendored list's");
            assert!(source.contains("https://"), "{code}: no source");
            assert!(lookup(u64::from(code)).is_some(), "{code}: no row");
        }
        let newest = PAST_NVERROR.iter().map(|&(c, _)| c).max().unwrap_or(last);
        assert_eq!(
            LAST_CODE,
            newest.max(last),
            "the catalog ends at the newest code named"
        );
        for (name, code) in defines {
            assert!(
                lookup(u64::from(code)).is_some(),
                "{name} ({code}): no catalog row"
            );
        }
        // Ours, each with its stated source or reason (the row's text):
        // 173 gpud's RebootSystem; 174 by its name; 175 the driver marks
        // the GPU for reset; 176 and 185 NVSentinel's default.
        let bucket = |c| lookup(c).map(|x| x.bucket());
        assert_eq!(bucket(173), Some(Bucket::RestartBm));
        assert_eq!(bucket(174), Some(Bucket::RestartApp));
        assert_eq!(bucket(175), Some(Bucket::ResetGpu));
        assert_eq!(bucket(176), Some(Bucket::CheckMechanicals));
        assert_eq!(bucket(185), Some(Bucket::ContactSupport));
    }

    #[test]
    fn regex_alternation() {
        assert_eq!(regex_of(&[8]), "8");
        assert_eq!(regex_of(&[46, 48, 62]), "46|48|62");
        assert_eq!(codes_of(XidAlert::StoppedProcessing), vec![8]);
    }
}
