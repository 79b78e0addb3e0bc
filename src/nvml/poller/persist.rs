//! A GPU slot to and from the state file's record (`crate::state`): the
//! XID counts, what the verdict reads, the reset known, what is remembered
//! until boot, and the readings only a reset changes back. Times are kept
//! as seconds since boot, the kernel log's clock, which outlives the
//! process (an `Instant` does not).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::SlotState;
use crate::snapshot::XidClass;
use crate::snapshot::{GpuReadings, RemappedRows, XidOther, MAX_XID_CODE};
use crate::state::{GpuRecord, LatestRecord, LinkRepeatsRecord, OtherRecord, XidCountRecord};
use crate::xid::XidKey;

/// Our clock against the boot's: `now` is `uptime` seconds after boot.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    now: Instant,
    uptime: f64,
}

impl Clock {
    /// `None` where `/proc/uptime` cannot be read: times are then not
    /// kept.
    pub fn read() -> Option<Clock> {
        Some(Clock {
            now: Instant::now(),
            uptime: crate::kmsg::uptime()?,
        })
    }

    /// Seconds since boot at `at`.
    pub fn since_boot(&self, at: Instant) -> f64 {
        if at <= self.now {
            self.uptime - (self.now - at).as_secs_f64()
        } else {
            self.uptime + (at - self.now).as_secs_f64()
        }
    }

    /// The instant `s` seconds after boot.
    pub fn instant(&self, s: f64) -> Instant {
        let ago = self.uptime - s;
        let d = Duration::try_from_secs_f64(ago.abs()).unwrap_or(Duration::ZERO);
        if ago >= 0.0 {
            self.now.checked_sub(d).unwrap_or(self.now)
        } else {
            // A file's time past what an Instant holds is not believed.
            self.now.checked_add(d).unwrap_or(self.now)
        }
    }
}

pub fn class_name(class: XidClass) -> &'static str {
    match class {
        XidClass::Code => "code",
        XidClass::Nvlink5Fatal => "nvlink5_fatal",
        XidClass::Nvlink5Nothing => "nvlink5_nothing",
        XidClass::Nvlink5Undecoded => "nvlink5_undecoded",
        XidClass::Nvlink5NoKernelLog => "nvlink5_no_kernel_log",
        XidClass::Nvlink5Injected => "nvlink5_injected",
        XidClass::NvlinkErrNothing => "nvlink_err_nothing",
        XidClass::NvlinkErrReport => "nvlink_err_report",
        XidClass::NvlinkErrCheckLink => "nvlink_err_check_link",
        XidClass::NvlinkErrFabricReset => "nvlink_err_fabric_reset",
        XidClass::NvlinkErrRepeated => "nvlink_err_repeated",
        XidClass::Xid45Caused => "xid45_caused",
    }
}

pub fn class_of(name: &str) -> Option<XidClass> {
    Some(match name {
        "code" => XidClass::Code,
        "nvlink5_fatal" => XidClass::Nvlink5Fatal,
        "nvlink5_nothing" => XidClass::Nvlink5Nothing,
        "nvlink5_undecoded" => XidClass::Nvlink5Undecoded,
        "nvlink5_no_kernel_log" => XidClass::Nvlink5NoKernelLog,
        "nvlink5_injected" => XidClass::Nvlink5Injected,
        "nvlink_err_nothing" => XidClass::NvlinkErrNothing,
        "nvlink_err_report" => XidClass::NvlinkErrReport,
        "nvlink_err_check_link" => XidClass::NvlinkErrCheckLink,
        "nvlink_err_fabric_reset" => XidClass::NvlinkErrFabricReset,
        "nvlink_err_repeated" => XidClass::NvlinkErrRepeated,
        "xid45_caused" => XidClass::Xid45Caused,
        _ => return None,
    })
}

pub fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn system_time(s: f64) -> SystemTime {
    Duration::try_from_secs_f64(s)
        .ok()
        .and_then(|d| UNIX_EPOCH.checked_add(d))
        .unwrap_or(UNIX_EPOCH)
}

/// The record of a slot whose UUID is known.
pub fn record(st: &SlotState, clock: Option<&Clock>) -> Option<GpuRecord> {
    let uuid = st.uuid.clone()?;
    let readings = st.readings.as_deref().or(st.baseline.as_ref());
    Some(GpuRecord {
        uuid,
        xids: st
            .ledger
            .xids
            .iter()
            .map(|(&(code, gi, ci), &(count, last))| XidCountRecord {
                code,
                gpu_instance: gi,
                compute_instance: ci,
                count,
                last_seen: unix(last),
            })
            .collect(),
        other: st.ledger.xid_other.as_ref().map(|o| OtherRecord {
            out_of_range: o.out_of_range,
            over_limit: o.over_limit,
            last_seen: unix(o.last_seen),
        }),
        latest: clock.map_or_else(Vec::new, |c| {
            st.ledger
                .xid_latest
                .iter()
                .map(|(&((code, gi, ci), class), &at)| LatestRecord {
                    code,
                    class: class_name(class).into(),
                    gpu_instance: gi,
                    compute_instance: ci,
                    at_s: c.since_boot(at),
                })
                .collect()
        }),
        last_reset_s: clock.zip(st.last_reset).map(|(c, at)| c.since_boot(at)),
        remap_failed: st.remembered.remap_failed,
        mig_remap_failure: st.remembered.mig_remap_failure,
        remap_pending: readings.and_then(|r| r.remapped_rows).map(|m| m.pending),
        retirement_pending: readings.and_then(|r| r.retired_pages_pending),
        nvlink_err_links: st
            .ledger
            .link_repeats()
            .map(|(link, seen)| LinkRepeatsRecord {
                link,
                seen: seen.iter().map(|&t| unix(t)).collect(),
            })
            .collect(),
    })
}

/// Adds an earlier run's record to a slot: counts add up (events the slot
/// counted before its UUID was read are this run's), the latest and the
/// reset are the later of the two, what is remembered stays, and the
/// pending repairs become the baseline the first sample is compared with.
/// Not the energy counter: it counts since the driver loaded (nvml.h), and
/// whether a GPU reset starts it again is not documented.
///
/// The file is held to what counting holds live XIDs to: codes in NVIDIA's
/// range and at most `max_codes` label sets (`--collector.xid.max-codes`,
/// perhaps lower now than when the file was written); the rest is counted
/// under `xid="other"`.
pub fn restore(st: &mut SlotState, rec: &GpuRecord, clock: Option<&Clock>, max_codes: usize) {
    let (mut out_of_range, mut over_limit, mut folded_seen) = (0u64, 0u64, UNIX_EPOCH);
    for x in &rec.xids {
        let key: XidKey = (x.code, x.gpu_instance, x.compute_instance);
        let seen = system_time(x.last_seen);
        if !(1..=MAX_XID_CODE).contains(&x.code) {
            out_of_range = out_of_range.saturating_add(x.count);
            folded_seen = folded_seen.max(seen);
            continue;
        }
        if !st.ledger.xids.contains_key(&key) && st.ledger.xids.len() >= max_codes {
            over_limit = over_limit.saturating_add(x.count);
            folded_seen = folded_seen.max(seen);
            continue;
        }
        let c = st.ledger.xids.entry(key).or_insert((0, seen));
        c.0 = c.0.saturating_add(x.count);
        c.1 = c.1.max(seen);
    }
    if out_of_range.saturating_add(over_limit) > 0 {
        let other = st.ledger.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: folded_seen,
        });
        other.out_of_range = other.out_of_range.saturating_add(out_of_range);
        other.over_limit = other.over_limit.saturating_add(over_limit);
        other.last_seen = other.last_seen.max(folded_seen);
    }
    if let Some(o) = &rec.other {
        let seen = system_time(o.last_seen);
        let mine = st.ledger.xid_other.get_or_insert(XidOther {
            out_of_range: 0,
            over_limit: 0,
            last_seen: seen,
        });
        mine.out_of_range = mine.out_of_range.saturating_add(o.out_of_range);
        mine.over_limit = mine.over_limit.saturating_add(o.over_limit);
        mine.last_seen = mine.last_seen.max(seen);
    }
    if let Some(c) = clock {
        for l in &rec.latest {
            let Some(class) = class_of(&l.class) else {
                continue;
            };
            let key: XidKey = (l.code, l.gpu_instance, l.compute_instance);
            st.ledger.note_latest(key, class, c.instant(l.at_s));
        }
        if let Some(s) = rec.last_reset_s {
            let at = c.instant(s);
            st.last_reset = st.last_reset.max(Some(at));
        }
    }
    for l in &rec.nvlink_err_links {
        let seen: Vec<SystemTime> = l.seen.iter().map(|&s| system_time(s)).collect();
        st.ledger.restore_link_repeats(l.link, &seen);
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
        let mut st = SlotState::default();
        restore(&mut st, &rec, Some(&clock), 2);
        assert_eq!(st.ledger.xids.len(), 2, "{:?}", st.ledger.xids);
        assert_eq!(
            st.ledger.xids[&(13, None, None)].0,
            u64::MAX,
            "saturated, not wrapped"
        );
        let other = st.ledger.xid_other.expect("the rest under xid=\"other\"");
        assert_eq!(other.over_limit, 2);
        assert_eq!(other.out_of_range, u64::MAX);
        assert_eq!(
            clock.instant(clock.uptime + 1.8e19),
            clock.now,
            "a time past any Instant"
        );
        assert_eq!(
            system_time(1.8e19),
            UNIX_EPOCH,
            "a time past any SystemTime"
        );
    }

    #[test]
    fn a_slot_comes_back_as_it_was() {
        let clock = Clock::read().expect("/proc/uptime");
        let earlier = clock.now.checked_sub(Duration::from_secs(30)).unwrap();
        let mut st = SlotState {
            uuid: Some("GPU-1".into()),
            ..SlotState::default()
        };
        st.ledger
            .xids
            .insert((48, None, None), (3, system_time(1.7e9)));
        st.ledger
            .note_latest((48, None, None), XidClass::Code, earlier);
        st.ledger
            .note_latest((149, None, None), XidClass::Nvlink5Fatal, earlier);
        st.last_reset = Some(earlier.checked_sub(Duration::from_secs(5)).unwrap());
        st.remembered.mig_remap_failure = true;
        let day = |s: f64| system_time(1.8e9 + s);
        st.ledger.restore_link_repeats(7, &[day(0.0), day(60.0)]);
        st.readings = Some(std::sync::Arc::new(GpuReadings {
            retired_pages_pending: Some(true),
            ..GpuReadings::default()
        }));
        let rec = record(&st, Some(&clock)).unwrap();
        let json = serde_json::to_string(&rec).unwrap();
        let rec: GpuRecord = serde_json::from_str(&json).unwrap();

        let mut back = SlotState::default();
        // One event counted before the UUID was read: it adds up.
        back.ledger
            .xids
            .insert((48, None, None), (1, system_time(1.8e9)));
        restore(&mut back, &rec, Some(&clock), 64);
        assert_eq!(back.ledger.xids[&(48, None, None)].0, 4);
        assert_eq!(back.ledger.xid_latest.len(), 2);
        let at = back.ledger.xid_latest[&((149, None, None), XidClass::Nvlink5Fatal)];
        assert!(
            at.max(earlier) - at.min(earlier) < Duration::from_millis(5),
            "the time comes back"
        );
        assert!(back.last_reset.is_some() && back.remembered.mig_remap_failure);
        let links: Vec<_> = back
            .ledger
            .link_repeats()
            .map(|(l, s)| (l, s.to_vec()))
            .collect();
        assert_eq!(
            links,
            [(7, vec![day(0.0), day(60.0)])],
            "the link's ECC repeats"
        );
        let base = back.baseline.unwrap();
        assert_eq!(base.retired_pages_pending, Some(true));
    }
}
