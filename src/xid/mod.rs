//! An XID between its source and the snapshot: the event (from NVML's
//! event set or the kernel log), how it is classified (`classify.rs`: its
//! catalog bucket or its NVLink5 line's decode), each GPU's ledger
//! (`ledger.rs`: the two sources' copies paired, counted or folded into
//! `other`, the latest event of each code the verdict reads, NVLink5
//! events waiting for their line, an XID 64 on a MIG GPU noted as a failed
//! remap; restored from the state file by the same rule that counts a
//! live event), the events of addresses no GPU is named for yet
//! (`unnamed.rs`), and the state file's spelling of them (`record.rs`).
//! The ledger's state is its own: the poller calls its methods and
//! writes none of its fields.
//!
//! Below both the sampler (`crate::nvml`, which routes each event to its
//! GPU's ledger) and the verdict (`crate::verdict`, which judges what the
//! ledger kept, in the join step): what an XID *is* lives here, what to do
//! about it there.

mod classify;
mod ledger;
mod record;
mod unnamed;

use std::time::{Instant, SystemTime};

use crate::snapshot::XidClass;

pub use classify::{
    class_without_line, decided_by_line, is_nvlink5, kept, nvlink5_class, nvlink_err_class,
};
pub use ledger::{Ledger, Recorded, DEDUPE_WINDOW, NVLINK_ERR_REPEAT_WINDOW};
pub use record::Clock;
pub use unnamed::Unnamed;

/// An XID count's key: the XID, and the MIG GPU and compute instance it
/// came from (on MIG-enabled GPUs).
pub type XidKey = (u64, Option<u32>, Option<u32>);

/// Where an XID event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidSource {
    Nvml,
    KernelLog,
}

/// One XID event, from either source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEvent {
    pub code: u64,
    /// How it is judged: by its code, or as its NVLink5 line decodes.
    pub class: XidClass,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub source: XidSource,
    /// When it happened: received from NVML, or logged by the kernel.
    pub at: Instant,
    pub wall: SystemTime,
    /// An XID 74 line's link, where its registers have ECC/parity bits
    /// NVIDIA asks a report for when "seen more than 2 times on the same
    /// link": the ledger counts it there.
    pub nvlink_err_link: Option<u32>,
}

impl XidEvent {
    /// A kernel-log XID line's event, classified by its line (`driver_major`:
    /// the driver that printed it, for NVLink5's encoding).
    pub fn from_kernel_log(
        xid: &crate::kmsg::Xid,
        at: Instant,
        wall: SystemTime,
        driver_major: Option<u32>,
    ) -> XidEvent {
        XidEvent {
            code: xid.code,
            class: classify::line_class(xid, driver_major),
            gpu_instance: xid.gpu_instance,
            compute_instance: xid.compute_instance,
            source: XidSource::KernelLog,
            at,
            wall,
            nvlink_err_link: xid.nvlink_err.and_then(|e| {
                crate::xid_catalog::nvlink_err::counts_on_link(&e.registers)
                    .then_some(e.link)
                    .flatten()
            }),
        }
    }
}
