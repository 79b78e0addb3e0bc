//! A GPU slot to and from the state file's record (`crate::state`): the
//! XID ledger's part (written and restored by the ledger itself,
//! `crate::xid::Ledger`), the reset known, what is remembered until boot,
//! and the readings only a reset changes back. Times are kept as seconds
//! since boot (`crate::xid::Clock`), the kernel log's clock, which
//! outlives the process (an `Instant` does not).

use super::SlotState;
use crate::snapshot::{GpuReadings, RemappedRows};
use crate::state::GpuRecord;
use crate::xid::Clock;

/// The record of a slot whose UUID is known.
pub fn record(st: &SlotState, clock: Option<&Clock>) -> Option<GpuRecord> {
    let uuid = st.uuid.clone()?;
    let readings = st.readings.as_deref().or(st.baseline.as_ref());
    let mut rec = GpuRecord {
        uuid,
        last_reset_s: clock.zip(st.last_reset).map(|(c, at)| c.since_boot(at)),
        remap_failed: st.remembered.remap_failed,
        mig_remap_failure: st.remembered.mig_remap_failure,
        remap_pending: readings.and_then(|r| r.remapped_rows).map(|m| m.pending),
        retirement_pending: readings.and_then(|r| r.retired_pages_pending),
        ..GpuRecord::default()
    };
    st.ledger.save_into(&mut rec, clock);
    Some(rec)
}

/// Adds an earlier run's record to a slot: the ledger takes its part by
/// its own rules (`Ledger::restore`: counts add up, held to what live
/// counting keeps, `max_codes` label sets; what the restored counts hold
/// is not counted again where the kernel log is `read_again`), the reset
/// is the later of the two, what is remembered stays, and the pending
/// repairs become the baseline the first sample is compared with. Not the
/// energy counter: it counts since the driver loaded (nvml.h), and
/// whether a GPU reset starts it again is not documented.
pub fn restore(
    st: &mut SlotState,
    rec: &GpuRecord,
    clock: Option<&Clock>,
    max_codes: usize,
    read_again: bool,
) {
    st.ledger.restore(rec, clock, max_codes, read_again);
    if let Some((c, s)) = clock.zip(rec.last_reset_s) {
        let at = c.instant(s);
        st.last_reset = st.last_reset.max(Some(at));
    }
    st.remembered.remap_failed |= rec.remap_failed;
    st.remembered.mig_remap_failure |= rec.mig_remap_failure;
    st.baseline = Some(GpuReadings {
        remapped_rows: rec.remap_pending.map(|pending| RemappedRows {
            correctable: 0,
            uncorrectable: 0,
            pending,
            failed: false,
        }),
        retired_pages_pending: rec.retirement_pending,
        ..GpuReadings::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_slot_comes_back_as_it_was() {
        let clock = Clock::read().expect("/proc/uptime");
        let now = std::time::Instant::now();
        let earlier = now.checked_sub(Duration::from_secs(30)).unwrap();
        let mut st = SlotState {
            uuid: Some("GPU-1".into()),
            ..SlotState::default()
        };
        st.last_reset = Some(earlier.checked_sub(Duration::from_secs(5)).unwrap());
        st.remembered.mig_remap_failure = true;
        st.readings = Some(std::sync::Arc::new(GpuReadings {
            retired_pages_pending: Some(true),
            ..GpuReadings::default()
        }));
        let rec = record(&st, Some(&clock)).unwrap();
        let json = serde_json::to_string(&rec).unwrap();
        let rec: GpuRecord = serde_json::from_str(&json).unwrap();

        let mut back = SlotState::default();
        restore(&mut back, &rec, Some(&clock), 64, false);
        assert!(back.last_reset.is_some() && back.remembered.mig_remap_failure);
        let base = back.baseline.unwrap();
        assert_eq!(base.retired_pages_pending, Some(true));
    }
}
