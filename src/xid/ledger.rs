//! One GPU's XID ledger: NVML's copy of an event and the kernel log's
//! paired so that the pair counts once, each event counted under its code
//! (and MIG instance) or folded into `xid="other"`, the latest event of
//! each code and class the verdict reads, and NVLink5 events NVML
//! delivered waiting for the log line that decodes them.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use super::record::{class_name, class_of, system_time, unix, Clock};
use super::{classify, XidEvent, XidKey, XidSource};
use crate::snapshot::{XidClass, XidOther, XidSeen, MAX_XID_CODE};
use crate::state::{GpuRecord, LatestRecord, LinkRepeatsRecord, OtherRecord, XidCountRecord};

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

/// What an event recorded says beyond its count, for the GPU's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// An XID 64 on a MIG-enabled GPU: a row remap failed (NVML hides the
    /// remap flags there), remembered until the next boot.
    pub mig_remap_failure: bool,
}

/// Where a folded event went in `xid="other"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    OverLimit,
    OutOfRange,
}

/// Per GPU: the counts, what the verdict reads, and what pairing and
/// decoding still wait for. Its fields are its own: events come in by
/// `record`, an earlier run's by `restore`, and a GPU replaced at its
/// index is forgotten by `forget_counts`.
#[derive(Default)]
pub struct Ledger {
    xids: BTreeMap<XidKey, (u64, SystemTime)>,
    xid_other: Option<XidOther>,
    /// Recent events, for pairing the two sources.
    recent: VecDeque<Recent>,
    /// The latest event of each code NVIDIA's catalog lists and class
    /// that asks for something (bounded by the catalog), whether or not its
    /// count was folded: what the verdict reads.
    xid_latest: BTreeMap<(XidKey, XidClass), Instant>,
    /// NVLink5 events NVML delivered, waiting (at most `AWAITING_MAX`) for
    /// their kernel-log line: NVML carries the code alone.
    awaiting: VecDeque<(XidKey, Instant)>,
    /// Where the kernel log is read again from its start after a restart
    /// (`Supervisor::log_read_again`): per code, the latest event the
    /// restored counts hold. A log record of that code no later is one
    /// they counted already.
    counted_through: BTreeMap<XidKey, SystemTime>,
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
    /// (`mig_enabled`); `gpu` names the GPU in the log. What the event
    /// says beyond its count is returned (`Recorded`).
    pub fn record(
        &mut self,
        e: XidEvent,
        mig_enabled: bool,
        max_codes: usize,
        gpu: u32,
    ) -> Recorded {
        let recorded = Recorded {
            // NVML hides the remap flags of a MIG-enabled GPU: this XID is
            // the one sign of a failed remap there (`verdict::Remembered`).
            mig_remap_failure: e.code == 64 && mig_enabled,
        };
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
            return recorded;
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
            return recorded;
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
        // Logged at the first fold of each kind, not per event: a driver
        // that floods codes must not flood the log instead.
        match self.count(key, 1, e.wall, max_codes) {
            Some(Fold::OverLimit) if self.xid_other.as_ref().is_some_and(|o| o.over_limit == 1) => {
                tracing::warn!(gpu, xid, max_codes,
                    "this GPU already has --collector.xid.max-codes XID label sets; further new codes are counted as xid=\"other\"");
            }
            Some(Fold::OutOfRange)
                if self.xid_other.as_ref().is_some_and(|o| o.out_of_range == 1) =>
            {
                tracing::warn!(gpu, xid,
                    "XID code outside NVIDIA's range (1 to {MAX_XID_CODE}); counted as xid=\"other\"");
            }
            _ => {}
        }
        recorded
    }

    /// The one count-or-fold rule, for a live event (`n` = 1) and for an
    /// earlier run's count alike: `n` events of `key`, the latest at
    /// `wall`, counted under their own label set, or folded into `other`
    /// when the code is out of NVIDIA's range or the GPU already has
    /// `max_codes` label sets. Which fold, if folded.
    fn count(&mut self, key: XidKey, n: u64, wall: SystemTime, max_codes: usize) -> Option<Fold> {
        if self.has_room(key, max_codes) {
            let c = self.xids.entry(key).or_insert((0, wall));
            // Saturates: a counter never goes backwards, even from a
            // restored count at u64::MAX.
            c.0 = c.0.saturating_add(n);
            c.1 = c.1.max(wall);
            return None;
        }
        if (1..=MAX_XID_CODE).contains(&key.0) {
            self.fold(0, n, wall);
            Some(Fold::OverLimit)
        } else {
            self.fold(n, 0, wall);
            Some(Fold::OutOfRange)
        }
    }

    /// Whether `key` is counted under its own label set: a code in
    /// NVIDIA's range, whose label set the GPU has, or has room for.
    fn has_room(&self, key: XidKey, max_codes: usize) -> bool {
        (1..=MAX_XID_CODE).contains(&key.0)
            && (self.xids.contains_key(&key) || self.xids.len() < max_codes)
    }

    /// Adds folded events to `other`, the latest at `seen`.
    fn fold(&mut self, out_of_range: u64, over_limit: u64, seen: SystemTime) {
        let other = self.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: seen,
        });
        other.out_of_range = other.out_of_range.saturating_add(out_of_range);
        other.over_limit = other.over_limit.saturating_add(over_limit);
        other.last_seen = other.last_seen.max(seen);
    }

    /// Forgets the counts: another GPU now has this GPU's index.
    pub fn forget_counts(&mut self) {
        self.xids.clear();
        self.xid_other = None;
    }

    /// The counts, per code and MIG instance: how many, and the latest.
    pub fn counts(&self) -> impl Iterator<Item = (XidKey, u64, SystemTime)> + '_ {
        self.xids.iter().map(|(&k, &(n, last))| (k, n, last))
    }

    /// The events folded into `xid="other"`, if any.
    pub fn other(&self) -> Option<&XidOther> {
        self.xid_other.as_ref()
    }

    /// Writes the XID part of a GPU's state file record: the counts, what
    /// is folded, the latest events the verdict reads (only where times
    /// since boot can be kept, `clock`), the ECC/parity XID 74s per link.
    pub fn save_into(&self, rec: &mut GpuRecord, clock: Option<&Clock>) {
        rec.xids = self
            .counts()
            .map(|((code, gi, ci), count, last)| XidCountRecord {
                code,
                gpu_instance: gi,
                compute_instance: ci,
                count,
                last_seen: unix(last),
            })
            .collect();
        rec.other = self.xid_other.as_ref().map(|o| OtherRecord {
            out_of_range: o.out_of_range,
            over_limit: o.over_limit,
            last_seen: unix(o.last_seen),
        });
        rec.latest = clock.map_or_else(Vec::new, |c| {
            self.xid_latest
                .iter()
                .map(|(&((code, gi, ci), class), &at)| LatestRecord {
                    code,
                    class: class_name(class).into(),
                    gpu_instance: gi,
                    compute_instance: ci,
                    at_s: c.since_boot(at),
                })
                .collect()
        });
        rec.nvlink_err_links = self
            .link_repeats()
            .map(|(link, seen)| LinkRepeatsRecord {
                link,
                seen: seen.iter().map(|&t| unix(t)).collect(),
            })
            .collect();
    }

    /// Adds an earlier run's record (the state file's) by the rules a live
    /// event follows: its counts through `count` (so the file is held to
    /// NVIDIA's range and `max_codes` label sets, perhaps fewer now than
    /// when it was written; events this ledger counted before its GPU's
    /// UUID was read are this run's, and add up), what it folded into
    /// `other`, its latest events through `note_latest` (only with a
    /// `clock`), its links' ECC/parity repeats. Where the kernel log is
    /// read again from its start (`log_read_again`), what the counts hold
    /// is noted, so that a log record no later is not counted twice.
    pub fn restore(
        &mut self,
        rec: &GpuRecord,
        clock: Option<&Clock>,
        max_codes: usize,
        log_read_again: bool,
    ) {
        for x in &rec.xids {
            let key: XidKey = (x.code, x.gpu_instance, x.compute_instance);
            let seen = system_time(x.last_seen);
            if x.count == 0 && !self.has_room(key, max_codes) {
                // Nothing to fold: `other` is not made for it.
                continue;
            }
            self.count(key, x.count, seen, max_codes);
        }
        if let Some(o) = &rec.other {
            self.fold(o.out_of_range, o.over_limit, system_time(o.last_seen));
        }
        if let Some(c) = clock {
            for l in &rec.latest {
                let Some(class) = class_of(&l.class) else {
                    continue;
                };
                let key: XidKey = (l.code, l.gpu_instance, l.compute_instance);
                self.note_latest(key, class, c.instant(l.at_s));
            }
        }
        for l in &rec.nvlink_err_links {
            let seen: Vec<SystemTime> = l.seen.iter().map(|&s| system_time(s)).collect();
            self.restore_link_repeats(l.link, &seen);
        }
        if log_read_again {
            for x in &rec.xids {
                let seen = system_time(x.last_seen);
                let t = self
                    .counted_through
                    .entry((x.code, x.gpu_instance, x.compute_instance))
                    .or_insert(seen);
                *t = (*t).max(seen);
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
    fn link_repeats(&self) -> impl Iterator<Item = (u32, &[SystemTime])> {
        self.link_repeats.iter().map(|(&l, s)| (l, s.as_slice()))
    }

    /// Adds an earlier run's counts of a link (the state file's), held to
    /// what counting keeps.
    fn restore_link_repeats(&mut self, link: u32, seen: &[SystemTime]) {
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
    fn note_latest(&mut self, key: XidKey, class: XidClass, at: Instant) {
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

    /// Issue 50: an earlier run's counts come back by the rule that counts
    /// a live event. The same events, once recorded live and once restored
    /// as the state file's records of them (one each, in the order they
    /// came), make the same ledger: the same label sets, the same counts
    /// and times, the same folds into `other`.
    #[test]
    fn restored_counts_follow_the_rule_live_events_follow() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s);
        let events: Vec<(u64, Option<u32>, Option<u32>, SystemTime)> = vec![
            (13, None, None, t(0)),
            (31, Some(1), Some(0), t(1)),
            (13, None, None, t(2)),
            (0, None, None, t(3)),
            (43, None, None, t(4)),
            // Past the limit of three label sets: folded.
            (13, Some(2), Some(0), t(5)),
            (48, None, None, t(6)),
            (MAX_XID_CODE + 1, None, None, t(7)),
            (79, None, None, t(8)),
            // Known label sets still count.
            (31, Some(1), Some(0), t(9)),
            (13, None, None, t(4)),
        ];
        let max_codes = 3;
        let mut live = Slot {
            mig_enabled: true,
            ..Slot::default()
        };
        for &(code, gi, ci, wall) in &events {
            live.record_xid(nvml_event(code, gi, ci, wall), max_codes);
        }
        let rec = GpuRecord {
            xids: events
                .iter()
                .map(|&(code, gi, ci, wall)| XidCountRecord {
                    code,
                    gpu_instance: gi,
                    compute_instance: ci,
                    count: 1,
                    last_seen: unix(wall),
                })
                .collect(),
            ..GpuRecord::default()
        };
        let mut restored = Ledger::default();
        restored.restore(&rec, None, max_codes, false);
        assert_eq!(live.ledger.xids, restored.xids);
        assert_eq!(live.ledger.xid_other, restored.xid_other);
        // Not a pair of empty ledgers: three label sets, five folds.
        assert_eq!(restored.xids.len(), 3);
        assert_eq!(restored.xids[&(13, None, None)], (3, t(4)));
        let other = restored.xid_other.as_ref().expect("folded");
        assert_eq!((other.over_limit, other.out_of_range), (3, 2));
        assert_eq!(other.last_seen, t(8));

        // And the live ledger written and read back is the same again.
        let clock = Clock::read().expect("/proc/uptime");
        let mut file = GpuRecord::default();
        live.ledger.save_into(&mut file, Some(&clock));
        let mut back = Ledger::default();
        back.restore(&file, Some(&clock), max_codes, false);
        assert_eq!(live.ledger.xids, back.xids);
        assert_eq!(live.ledger.xid_other, back.xid_other);
        assert_eq!(
            live.ledger.xid_latest.keys().collect::<Vec<_>>(),
            back.xid_latest.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_file_is_held_to_the_bounds_of_live_counting_and_never_panics() {
        let xid = |code, count| XidCountRecord {
            code,
            gpu_instance: None,
            compute_instance: None,
            count,
            last_seen: 1.7e9,
        };
        // Written under a larger --collector.xid.max-codes, with a code
        // outside NVIDIA's range and counts and times no clock holds.
        let rec = GpuRecord {
            uuid: "GPU-1".into(),
            xids: vec![
                xid(13, u64::MAX),
                xid(13, 5),
                xid(31, 1),
                xid(43, 2),
                xid(0, 7),
            ],
            other: Some(OtherRecord {
                out_of_range: u64::MAX,
                over_limit: 0,
                last_seen: 1e300,
            }),
            ..GpuRecord::default()
        };
        let clock = Clock::read().expect("/proc/uptime");
        let mut ledger = Ledger::default();
        ledger.restore(&rec, Some(&clock), 2, false);
        assert_eq!(ledger.xids.len(), 2, "{:?}", ledger.xids);
        assert_eq!(
            ledger.xids[&(13, None, None)].0,
            u64::MAX,
            "saturated, not wrapped"
        );
        let other = ledger.xid_other.expect("the rest under xid=\"other\"");
        assert_eq!(other.over_limit, 2);
        assert_eq!(other.out_of_range, u64::MAX);
    }

    #[test]
    fn a_ledger_comes_back_as_it_was() {
        let clock = Clock::read().expect("/proc/uptime");
        let earlier = Instant::now().checked_sub(Duration::from_secs(30)).unwrap();
        let mut ledger = Ledger::default();
        ledger
            .xids
            .insert((48, None, None), (3, system_time(1.7e9)));
        ledger.note_latest((48, None, None), XidClass::Code, earlier);
        ledger.note_latest((149, None, None), XidClass::Nvlink5Fatal, earlier);
        let day = |s: f64| system_time(1.8e9 + s);
        ledger.restore_link_repeats(7, &[day(0.0), day(60.0)]);
        let mut rec = GpuRecord::default();
        ledger.save_into(&mut rec, Some(&clock));
        let json = serde_json::to_string(&rec).unwrap();
        let rec: GpuRecord = serde_json::from_str(&json).unwrap();

        let mut back = Ledger::default();
        // One event counted before the UUID was read: it adds up.
        back.xids.insert((48, None, None), (1, system_time(1.8e9)));
        back.restore(&rec, Some(&clock), 64, false);
        assert_eq!(back.xids[&(48, None, None)].0, 4);
        assert_eq!(back.xid_latest.len(), 2);
        let at = back.xid_latest[&((149, None, None), XidClass::Nvlink5Fatal)];
        assert!(
            at.max(earlier) - at.min(earlier) < Duration::from_millis(5),
            "the time comes back"
        );
        let links: Vec<_> = back.link_repeats().map(|(l, s)| (l, s.to_vec())).collect();
        assert_eq!(
            links,
            [(7, vec![day(0.0), day(60.0)])],
            "the link's ECC repeats"
        );
        // Where the kernel log is read again from its start, a record no
        // later than the restored counts' latest is not counted again.
        let mut again = Ledger::default();
        again.restore(&rec, Some(&clock), 64, true);
        let line = |wall| XidEvent {
            wall,
            ..event(48, None, XidSource::KernelLog, Instant::now())
        };
        again.record(line(system_time(1.7e9)), false, 64, 0);
        assert_eq!(again.xids[&(48, None, None)].0, 3, "counted already");
        again.record(line(system_time(1.7e9 + 60.0)), false, 64, 0);
        assert_eq!(again.xids[&(48, None, None)].0, 4, "a later event");
    }

    #[test]
    fn an_xid_64_on_a_mig_gpu_is_a_failed_remap() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        let mut ledger = Ledger::default();
        let remap = |l: &mut Ledger, code, mig| {
            l.record(nvml_event(code, None, None, t), mig, 64, 0)
                .mig_remap_failure
        };
        assert!(remap(&mut ledger, 64, true));
        assert!(
            !remap(&mut ledger, 64, false),
            "no MIG: NVML shows the flags"
        );
        assert!(!remap(&mut ledger, 63, true));
    }
}
