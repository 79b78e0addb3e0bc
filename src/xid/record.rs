//! The state file's spelling of what the XID room keeps (`crate::state`):
//! times as seconds since boot, the kernel log's clock, which outlives the
//! process (an `Instant` does not), wall times as Unix seconds, and each
//! class by its one name.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::snapshot::XidClass;

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

/// Each class's name in the state file, written once: `class_name`'s
/// match is exhaustive (a class added does not compile until it is named
/// here), and `class_of` reads the same names back.
macro_rules! class_names {
    ($($class:ident => $name:literal,)*) => {
        pub fn class_name(class: XidClass) -> &'static str {
            match class {
                $(XidClass::$class => $name,)*
            }
        }

        /// `None` for a name no class has (a newer exporter's): the
        /// record is skipped.
        pub fn class_of(name: &str) -> Option<XidClass> {
            match name {
                $($name => Some(XidClass::$class),)*
                _ => None,
            }
        }
    };
}

class_names! {
    Code => "code",
    Nvlink5Fatal => "nvlink5_fatal",
    Nvlink5Nothing => "nvlink5_nothing",
    Nvlink5Undecoded => "nvlink5_undecoded",
    Nvlink5NoKernelLog => "nvlink5_no_kernel_log",
    Nvlink5Injected => "nvlink5_injected",
    NvlinkErrNothing => "nvlink_err_nothing",
    NvlinkErrReport => "nvlink_err_report",
    NvlinkErrCheckLink => "nvlink_err_check_link",
    NvlinkErrFabricReset => "nvlink_err_fabric_reset",
    NvlinkErrRepeated => "nvlink_err_repeated",
    Xid45Caused => "xid45_caused",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_reads_back_by_its_name() {
        let classes = [
            XidClass::Code,
            XidClass::Nvlink5Fatal,
            XidClass::Nvlink5Nothing,
            XidClass::Nvlink5Undecoded,
            XidClass::Nvlink5NoKernelLog,
            XidClass::Nvlink5Injected,
            XidClass::NvlinkErrNothing,
            XidClass::NvlinkErrReport,
            XidClass::NvlinkErrCheckLink,
            XidClass::NvlinkErrFabricReset,
            XidClass::NvlinkErrRepeated,
            XidClass::Xid45Caused,
        ];
        for class in classes {
            assert_eq!(class_of(class_name(class)), Some(class), "{class:?}");
        }
        assert_eq!(class_of("nvlink6_fatal"), None);
    }

    #[test]
    fn times_past_any_clock_are_not_believed() {
        let clock = Clock::read().expect("/proc/uptime");
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
}
