//! One GPU's XID ledger: NVML's copy of an event and the kernel log's
//! paired so that the pair counts once, each event counted under its code
//! (and MIG instance) or folded into `xid="other"`, the latest event of
//! each code and class the verdict reads, and NVLink5 events NVML
//! delivered waiting for the log line that decodes them.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use super::{classify, XidEvent, XidKey, XidSource};
use crate::snapshot::{XidClass, XidOther, XidSeen, MAX_XID_CODE};

/// XID dedupe: the driver raises an XID through NVML and prints it to the
/// kernel log at the same moment. An event from one source pairs with an
/// unpaired event of the other source of the same code on the same GPU
/// (and the same MIG instance, where both name one) that happened within
/// `DEDUPE_WINDOW` of it; a pair counts once. NVML events are dated when
/// received (within 200 ms), log records by their kernel timestamp, read
/// through the uptime clock and corrected by the skew measured on records
/// read as they are logged.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(10);
/// Events kept for pairing: long enough for the kernel log reader to catch
/// up after NVML (it queues records until the poller takes them, once a
/// round), few enough to stay small under an XID storm, past which an
/// event may count twice.
const DEDUPE_KEEP: Duration = Duration::from_secs(300);
const DEDUPE_MAX: usize = 256;
/// NVLink5 events from NVML waiting for the kernel-log line that decodes
/// them; past this the oldest is judged undecoded at once.
const AWAITING_MAX: usize = 64;
/// What the verdict reads, per GPU: past this, an event of a new code and
/// MIG instance is kept under its code alone (judged on the GPU).
const LATEST_MAX: usize = 256;

#[derive(Debug, Clone, Copy)]
struct Recent {
    key: XidKey,
    source: XidSource,
    at: Instant,
    paired: bool,
}

/// NVIDIA's `WORKFLOW_NVLINK_ERR` asks a report for ECC/parity bits "seen
/// more than 2 times on the same link" and gives no period; NVSentinel's
/// rules (`XID74Reg0ECCParityError`, `RepeatedXID74Reg2HardwareIssue`)
/// count "on the same NVLink and GPU within 24 hours", which we take.
pub const NVLINK_ERR_REPEAT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Links counted per GPU: an H100 has 18, a crafted log may name more.
const LINKS_MAX: usize = 64;

/// A log record dated this little after the latest counted event of its
/// code is the same event: the kernel's timestamp and NVML's arrival time
/// of one event differ by milliseconds.
const COUNTED_SLACK: Duration = Duration::from_secs(2);

/// Per GPU: the counts, what the verdict reads, and what pairing and
/// decoding still wait for.
#[derive(Default)]
pub struct Ledger {
    pub xids: BTreeMap<XidKey, (u64, SystemTime)>,
    pub xid_other: Option<XidOther>,
    /// Recent events, for pairing the two sources.
    recent: VecDeque<Recent>,
    /// The latest event of each code NVIDIA's catalog lists and class
    /// that asks for something (bounded by the catalog), whether or not its
    /// count was folded: what the verdict reads.
    pub xid_latest: BTreeMap<(XidKey, XidClass), Instant>,
    /// NVLink5 events NVML delivered, waiting (at most `AWAITING_MAX`) for
    /// their kernel-log line: NVML carries the code alone.
    awaiting: VecDeque<(XidKey, Instant)>,
    /// Where the kernel log is read again from its start after a restart
    /// (`Supervisor::log_read_again`): per code, the latest event the
    /// restored counts hold. A log record of that code no later is one
    /// they counted already.
    pub counted_through: BTreeMap<XidKey, SystemTime>,
    /// Per NVLink link: when XID 74 lines with ECC/parity bits were logged
    /// on it, the latest `LINK_REPEATS_ALLOWED + 1` within
    /// `NVLINK_ERR_REPEAT_WINDOW` of the newest (kept in the state file).
    link_repeats: BTreeMap<u32, Vec<SystemTime>>,
}

impl Ledger {
    /// Counts an XID event under its own label set, or folds it into
    /// `other` when the code is out of range or the GPU already has
    /// `max_codes` label sets (each costs two series until restart). The
    /// second event of a pair from the two sources is not counted again.
    ///
    /// An event keeps its MIG instance only on a MIG-enabled GPU
    /// (`mig_enabled`); `gpu` names the GPU in the log.
    pub fn record(&mut self, e: XidEvent, mig_enabled: bool, max_codes: usize, gpu: u32) {
        let (gi, ci) = if mig_enabled {
            (e.gpu_instance, e.compute_instance)
        } else {
            (None, None)
        };
        let key = (e.code, gi, ci);
        if e.source == XidSource::KernelLog
            && self
                .counted_through
                .get(&key)
                .is_some_and(|t| e.wall <= *t + COUNTED_SLACK)
        {
            // Counted by an earlier run of this boot, whose restored
            // counts hold it.
            return;
        }
        if let Some(link) = e
            .nvlink_err_link
            .filter(|_| e.source == XidSource::KernelLog)
        {
            if self.repeated_on_link(link, e.wall) {
                self.note_latest(key, XidClass::NvlinkErrRepeated, e.at);
            }
        }
        // NVML's event of a code decided by its line (NVLink5, 74) waits
        // for that line.
        let nvlink5_from_nvml = e.source == XidSource::Nvml && classify::decided_by_line(e.code);
        if let Some(partner) = self.pair(key, &e) {
            // Counted already. The log's line of an NVLink5 event NVML
            // delivered first decodes it.
            if partner.source == XidSource::Nvml && classify::decided_by_line(e.code) {
                if let Some(i) = self
                    .awaiting
                    .iter()
                    .position(|&(k, at)| k == partner.key && at == partner.at)
                {
                    self.awaiting.remove(i);
                    self.note_latest(partner.key, e.class, partner.at);
                }
            }
            return;
        }
        if nvlink5_from_nvml {
            if self.awaiting.len() >= AWAITING_MAX {
                if let Some((k, at)) = self.awaiting.pop_front() {
                    self.note_latest(k, classify::class_without_line(k.0), at);
                }
            }
            self.awaiting.push_back((key, e.at));
        } else {
            self.note_latest(key, e.class, e.at);
        }
        let xid = e.code;
        let in_range = (1..=MAX_XID_CODE).contains(&xid);
        if in_range && (self.xids.contains_key(&key) || self.xids.len() < max_codes) {
            let c = self.xids.entry(key).or_insert((0, e.wall));
            // Saturates: a counter never goes backwards, even from a
            // restored count at u64::MAX.
            c.0 = c.0.saturating_add(1);
            c.1 = c.1.max(e.wall);
            return;
        }
        let other = self.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: e.wall,
        });
        other.last_seen = other.last_seen.max(e.wall);
        // Logged at the first fold of each kind, not per event: a driver
        // that floods codes must not flood the log instead.
        if in_range {
            other.over_limit = other.over_limit.saturating_add(1);
            if other.over_limit == 1 {
                tracing::warn!(gpu, xid, max_codes,
                    "this GPU already has --collector.xid.max-codes XID label sets; further new codes are counted as xid=\"other\"");
            }
        } else {
            other.out_of_range = other.out_of_range.saturating_add(1);
            if other.out_of_range == 1 {
                tracing::warn!(gpu, xid,
                    "XID code outside NVIDIA's range (1 to {MAX_XID_CODE}); counted as xid=\"other\"");
            }
        }
    }

    pub fn xids_seen(&self) -> Vec<XidSeen> {
        self.xid_latest
            .iter()
            .map(
                |(&((code, gpu_instance, compute_instance), class), &at)| XidSeen {
                    code,
                    class,
                    gpu_instance,
                    compute_instance,
                    at,
                },
            )
            .collect()
    }

    /// Counts an ECC/parity XID 74 on `link` logged at `wall`; whether the
    /// link has now seen more than NVIDIA allows within the window.
    fn repeated_on_link(&mut self, link: u32, wall: SystemTime) -> bool {
        use crate::xid_catalog::nvlink_err::LINK_REPEATS_ALLOWED;
        if !self.link_repeats.contains_key(&link) && self.link_repeats.len() >= LINKS_MAX {
            return false;
        }
        let seen = self.link_repeats.entry(link).or_default();
        seen.push(wall);
        keep_window(seen, wall);
        seen.len() > LINK_REPEATS_ALLOWED
    }

    /// The ECC/parity XID 74s counted per link, for the state file.
    pub fn link_repeats(&self) -> impl Iterator<Item = (u32, &[SystemTime])> {
        self.link_repeats.iter().map(|(&l, s)| (l, s.as_slice()))
    }

    /// Adds an earlier run's counts of a link (the state file's), held to
    /// what counting keeps.
    pub fn restore_link_repeats(&mut self, link: u32, seen: &[SystemTime]) {
        if !self.link_repeats.contains_key(&link) && self.link_repeats.len() >= LINKS_MAX {
            return;
        }
        let mine = self.link_repeats.entry(link).or_default();
        mine.extend_from_slice(seen);
        if let Some(&newest) = mine.iter().max() {
            keep_window(mine, newest);
        }
    }

    /// Keeps the latest event of a code and class the verdict may act on.
    pub fn note_latest(&mut self, key: XidKey, class: XidClass, at: Instant) {
        // Kept too: an event at action none whose reason says what
        // evidence it lacked (NVLink5 without its line).
        if !classify::kept(key.0, class) {
            return;
        }
        let full = self.xid_latest.len() >= LATEST_MAX;
        let key = if full && !self.xid_latest.contains_key(&(key, class)) {
            (key.0, None, None)
        } else {
            key
        };
        let latest = self.xid_latest.entry((key, class)).or_insert(at);
        *latest = (*latest).max(at);
    }

    /// NVLink5 events NVML delivered at least `wait` ago whose line never
    /// came are judged without the kernel log.
    pub fn settle(&mut self, now: Instant, wait: Duration) {
        while let Some(&(key, at)) = self.awaiting.front() {
            if now.saturating_duration_since(at) < wait {
                break;
            }
            self.awaiting.pop_front();
            self.note_latest(key, classify::class_without_line(key.0), at);
        }
    }

    /// Pairs `e` with an event of the other source; the partner, if `e` is
    /// the second of a pair (counted already).
    fn pair(&mut self, key: XidKey, e: &XidEvent) -> Option<Recent> {
        if let Some(keep_from) = Instant::now().checked_sub(DEDUPE_KEEP) {
            self.recent.retain(|r| r.at >= keep_from);
        }
        let same = |a: Option<u32>, b: Option<u32>| a.is_none() || b.is_none() || a == b;
        let partner = self.recent.iter_mut().find(|r| {
            !r.paired
                && r.source != e.source
                && r.key.0 == key.0
                && same(r.key.1, key.1)
                && same(r.key.2, key.2)
                && r.at.max(e.at).duration_since(r.at.min(e.at)) <= DEDUPE_WINDOW
        });
        if let Some(r) = partner {
            r.paired = true;
            return Some(*r);
        }
        if self.recent.len() >= DEDUPE_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            key,
            source: e.source,
            at: e.at,
            paired: false,
        });
        None
    }
}
/// Keeps, sorted, the latest `LINK_REPEATS_ALLOWED + 1` times within
/// `NVLINK_ERR_REPEAT_WINDOW` before `newest`: all that deciding "more
/// than 2" needs.
fn keep_window(seen: &mut Vec<SystemTime>, newest: SystemTime) {
    use crate::xid_catalog::nvlink_err::LINK_REPEATS_ALLOWED;
    let from = newest.checked_sub(NVLINK_ERR_REPEAT_WINDOW);
    seen.retain(|t| from.is_none_or(|f| *t > f));
    seen.sort_unstable();
    seen.dedup();
    let extra = seen.len().saturating_sub(LINK_REPEATS_ALLOWED + 1);
    seen.drain(..extra);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU's part of the poller (`GpuSlot::record_xid`): whether MIG is
    /// on, and the ledger.
    #[derive(Default)]
    struct Slot {
        mig_enabled: bool,
        ledger: Ledger,
    }

    impl Slot {
        fn record_xid(&mut self, e: XidEvent, max_codes: usize) {
            self.ledger.record(e, self.mig_enabled, max_codes, 0);
        }
    }

    /// An event from NVML, received now, with the wall time `wall`.
    fn nvml_event(code: u64, gi: Option<u32>, ci: Option<u32>, wall: SystemTime) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: gi,
            compute_instance: ci,
            source: XidSource::Nvml,
            at: Instant::now(),
            wall,
            nvlink_err_link: None,
        }
    }

    fn event(code: u64, gi: Option<u32>, source: XidSource, at: Instant) -> XidEvent {
        XidEvent {
            code,
            class: XidClass::Code,
            gpu_instance: gi,
            compute_instance: gi.map(|_| 0),
            source,
            at,
            wall: SystemTime::now(),
            nvlink_err_link: None,
        }
    }

    fn count(slot: &Slot, code: u64) -> u64 {
        slot.ledger
            .xids
            .iter()
            .filter(|(k, _)| k.0 == code)
            .map(|(_, v)| v.0)
            .sum()
    }

    #[test]
    fn an_xid_seen_by_nvml_and_in_the_kernel_log_counts_once() {
        use XidSource::{KernelLog, Nvml};
        let mut slot = Slot::default();
        // Dated ahead of the clock, so that "an hour earlier" exists on a
        // machine up for less than an hour.
        let secs = Duration::from_secs;
        let now = Instant::now() + secs(4000);
        // NVML first, the log's record of it (logged a moment earlier) later.
        slot.record_xid(event(79, None, Nvml, now), 64);
        slot.record_xid(
            event(79, None, KernelLog, now.checked_sub(secs(1)).unwrap()),
            64,
        );
        assert_eq!(count(&slot, 79), 1);
        // The log first, NVML later.
        slot.record_xid(event(48, None, KernelLog, now), 64);
        slot.record_xid(event(48, None, Nvml, now + secs(2)), 64);
        assert_eq!(count(&slot, 48), 1);
        // A storm seen by both: pairs, one to one.
        for _ in 0..3 {
            slot.record_xid(event(13, None, Nvml, now), 64);
        }
        for _ in 0..3 {
            slot.record_xid(event(13, None, KernelLog, now), 64);
        }
        assert_eq!(count(&slot, 13), 3);
        // Outside the window, or from the same source: two events.
        slot.record_xid(
            event(79, None, KernelLog, now + DEDUPE_WINDOW + secs(5)),
            64,
        );
        assert_eq!(count(&slot, 79), 2);
        slot.record_xid(event(31, None, Nvml, now), 64);
        slot.record_xid(event(31, None, Nvml, now), 64);
        assert_eq!(count(&slot, 31), 2);
        // A record from long before (read at start) pairs with nothing.
        slot.record_xid(
            event(94, None, KernelLog, now.checked_sub(secs(3600)).unwrap()),
            64,
        );
        slot.record_xid(event(94, None, Nvml, now), 64);
        assert_eq!(count(&slot, 94), 2);
    }

    #[test]
    fn dedupe_matches_a_log_line_without_an_instance_to_the_instances_event() {
        use XidSource::{KernelLog, Nvml};
        let mut slot = Slot {
            mig_enabled: true,
            ..Slot::default()
        };
        let now = Instant::now();
        slot.record_xid(event(31, Some(3), Nvml, now), 64);
        slot.record_xid(event(31, None, KernelLog, now), 64);
        slot.record_xid(event(31, Some(4), KernelLog, now), 64);
        let st = &slot.ledger;
        assert_eq!(st.xids[&(31, Some(3), Some(0))].0, 1);
        assert_eq!(
            st.xids[&(31, Some(4), Some(0))].0,
            1,
            "another instance: another event"
        );
        assert!(!st.xids.contains_key(&(31, None, None)));
        // The verdict's record keeps the catalogued codes.
        assert_eq!(st.xid_latest.len(), 2);
    }

    #[test]
    fn an_nvlink5_event_from_nvml_waits_for_its_log_line_then_is_judged_without_it() {
        use XidSource::{KernelLog, Nvml};
        let mut slot = Slot::default();
        let now = Instant::now();
        let nvlink5 = |source, class, at| XidEvent {
            class,
            ..event(145, None, source, at)
        };
        // NVML first: nothing decided yet; the log's non-fatal line pairs
        // with it and decides: nothing to do.
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, now), 64);
        assert!(slot.ledger.xids_seen().is_empty());
        slot.record_xid(nvlink5(KernelLog, XidClass::Nvlink5Nothing, now), 64);
        slot.ledger.settle(now + DEDUPE_WINDOW * 2, DEDUPE_WINDOW);
        assert!(slot.ledger.xids_seen().is_empty());
        assert_eq!(count(&slot, 145), 1);
        // A fatal line decides a reset.
        let later = now + Duration::from_secs(60);
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, later), 64);
        slot.record_xid(nvlink5(KernelLog, XidClass::Nvlink5Fatal, later), 64);
        let seen = slot.ledger.xids_seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].class, XidClass::Nvlink5Fatal);
        // No line within the window: judged without the kernel log (kept
        // for its reason, asking for nothing).
        let last = later + Duration::from_secs(60);
        slot.record_xid(nvlink5(Nvml, XidClass::Nvlink5NoKernelLog, last), 64);
        slot.ledger
            .settle(last + Duration::from_secs(1), DEDUPE_WINDOW);
        assert_eq!(slot.ledger.xids_seen().len(), 1, "still waiting");
        slot.ledger.settle(last + DEDUPE_WINDOW, DEDUPE_WINDOW);
        let seen = slot.ledger.xids_seen();
        assert!(seen.iter().any(|x| x.class == XidClass::Nvlink5NoKernelLog));
        assert_eq!(count(&slot, 145), 3);
    }

    #[test]
    fn what_the_verdict_reads_stays_bounded() {
        let mut slot = Slot {
            mig_enabled: true,
            ..Slot::default()
        };
        let now = Instant::now();
        for gi in 0..15 {
            for ci in 0..8 {
                for code in [13, 31, 43, 48, 119] {
                    let e = XidEvent {
                        compute_instance: Some(ci),
                        ..event(code, Some(gi), XidSource::KernelLog, now)
                    };
                    slot.record_xid(e, 64);
                }
            }
        }
        let st = &slot.ledger;
        assert!(
            st.xid_latest.len() <= LATEST_MAX + 4,
            "{}",
            st.xid_latest.len()
        );
        // Past the bound, each code lands on the GPU: none is forgotten.
        for code in [13, 31, 48, 119] {
            assert!(
                st.xid_latest.keys().any(|((c, _, _), _)| *c == code),
                "{code}"
            );
        }
    }

    #[test]
    fn xids_keep_instance_ids_only_on_mig_gpus() {
        let mut slot = Slot::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        slot.record_xid(nvml_event(79, Some(0), Some(0), t), 64);
        slot.record_xid(
            nvml_event(79, Some(0), Some(0), t + Duration::from_secs(1)),
            64,
        );
        slot.mig_enabled = true;
        slot.record_xid(nvml_event(31, Some(3), Some(0), t), 64);
        let st = &slot.ledger;
        assert_eq!(
            st.xids.get(&(79, None, None)),
            Some(&(2, t + Duration::from_secs(1)))
        );
        assert_eq!(st.xids.get(&(31, Some(3), Some(0))), Some(&(1, t)));
    }

    #[test]
    fn xids_past_the_limit_or_out_of_range_fold_into_other() {
        let mut slot = Slot::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        slot.mig_enabled = true;
        for code in [13, 31, 13] {
            slot.record_xid(nvml_event(code, None, None, t), 2);
        }
        // A third label set: the same code on a MIG instance is one too.
        slot.record_xid(nvml_event(13, Some(1), Some(0), t), 2);
        slot.record_xid(nvml_event(79, None, None, t + Duration::from_secs(1)), 2);
        // Known label sets keep counting past the limit.
        slot.record_xid(nvml_event(31, None, None, t), 2);
        for bad in [0, MAX_XID_CODE + 1, u64::from(u32::MAX), u64::MAX] {
            slot.record_xid(nvml_event(bad, None, None, t), 2);
        }
        let st = &slot.ledger;
        assert_eq!(st.xids.len(), 2);
        assert_eq!(st.xids[&(13, None, None)].0, 2);
        assert_eq!(st.xids[&(31, None, None)].0, 2);
        let other = st.xid_other.as_ref().expect("folded events");
        assert_eq!((other.over_limit, other.out_of_range), (2, 4));
        assert_eq!(other.count(), 6);
        assert_eq!(
            other.last_seen,
            t + Duration::from_secs(1),
            "the latest folded event"
        );
        let total: u64 = st.xids.values().map(|v| v.0).sum::<u64>() + other.count();
        assert_eq!(total, 10, "every event is counted somewhere");
    }

    /// Issue 46: "If seen more than 2 times on the same link, report a
    /// bug" (NVIDIA's WORKFLOW_NVLINK_ERR, ECC/parity bits): the third
    /// ECC/parity XID 74 on one link within 24 hours asks for a report;
    /// two, other links, older events or NVML's copy do not.
    #[test]
    fn a_link_that_repeats_ecc_errors_asks_for_a_report() {
        use XidSource::{KernelLog, Nvml};
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = Instant::now();
        let line = |link, secs: u64, source| XidEvent {
            class: XidClass::NvlinkErrNothing,
            wall: t0 + Duration::from_secs(secs),
            nvlink_err_link: Some(link),
            ..event(74, None, source, at + Duration::from_secs(secs))
        };
        let repeated = |slot: &Slot| {
            slot.ledger
                .xids_seen()
                .iter()
                .any(|x| x.class == XidClass::NvlinkErrRepeated)
        };
        let mut slot = Slot::default();
        // Two on link 3, one on link 4, one a day and more before.
        slot.record_xid(line(3, 0, KernelLog), 64);
        slot.record_xid(line(3, 25 * 3600, KernelLog), 64);
        slot.record_xid(line(4, 25 * 3600 + 1, KernelLog), 64);
        slot.record_xid(line(3, 25 * 3600 + 2, KernelLog), 64);
        slot.record_xid(line(3, 25 * 3600 + 3, Nvml), 64);
        assert!(!repeated(&slot), "{:?}", slot.ledger.xids_seen());
        // The third within the window on link 3.
        slot.record_xid(line(3, 26 * 3600, KernelLog), 64);
        assert!(repeated(&slot));
        // Kept per link, and restored into a fresh ledger they still count.
        let kept: Vec<(u32, Vec<SystemTime>)> = slot
            .ledger
            .link_repeats()
            .map(|(l, s)| (l, s.to_vec()))
            .collect();
        assert_eq!(
            kept.iter().map(|(l, s)| (*l, s.len())).collect::<Vec<_>>(),
            [(3, 3), (4, 1)]
        );
        let mut back = Slot::default();
        for (l, s) in &kept {
            back.ledger.restore_link_repeats(*l, s);
        }
        back.record_xid(line(4, 26 * 3600 + 1, KernelLog), 64);
        assert!(!repeated(&back), "two on link 4");
        back.record_xid(line(4, 26 * 3600 + 2, KernelLog), 64);
        assert!(repeated(&back), "the third on link 4, one of them restored");
    }
}
