//! dcgm-exporter's names on demand (`--compat.dcgm`): the DCGM series
//! every dashboard, alert rule, cost tool and autoscaler built for
//! dcgm-exporter queries, from the same snapshot as this exporter's own
//! families, in DCGM's units and labels, beside them or instead of them.
//!
//! - [`fields`]: the name map, one row per DCGM field, both generations of
//!   names (before 4.9 and 4.9's), where each value comes from here, and
//!   why a field with no source is absent.
//! - [`encode`]: the series, per GPU and per MIG GPU instance as
//!   dcgm-exporter serves them, with `pod`, `namespace` and `container`
//!   where `--kubernetes` says who holds the device.
//!
//! Off, it costs nothing: no table is built and nothing is allocated (the
//! render never reaches this module without a [`Compat`]).

pub mod encode;
pub mod fields;

use std::sync::{Arc, Mutex};

pub use encode::encode;
pub use fields::{Field, FieldKind, Source, Unit, Variant, FIELDS};

use crate::family::FamilySet;

/// Which dcgm-exporter the output looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// 4.8.2 and earlier: the names before DCGM 4.7, and the host name in
    /// a label named `Hostname`.
    V4_8_2,
    /// 4.8.3 and 4.8.4: the same names; the host label renamed `hostname`
    /// (NVIDIA/dcgm-exporter#655).
    V4_8,
    /// 4.9: DCGM 4.7's names, 11 of them in base units, and the driver
    /// label renamed DCGM_FI_SYSTEM_DRIVER_VERSION.
    V4_9,
}

impl Generation {
    pub const ALL: &'static [Generation] =
        &[Generation::V4_8_2, Generation::V4_8, Generation::V4_9];

    /// As `--compat.dcgm` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Generation::V4_8_2 => "4.8.2",
            Generation::V4_8 => "4.8",
            Generation::V4_9 => "4.9",
        }
    }

    pub fn parse(s: &str) -> Option<Generation> {
        Generation::ALL.iter().copied().find(|g| g.as_str() == s)
    }

    /// Which names of the table this generation serves by default.
    pub fn variant(self) -> Variant {
        match self {
            Generation::V4_8_2 | Generation::V4_8 => Variant::Legacy,
            Generation::V4_9 => Variant::Current,
        }
    }

    /// The label carrying the host name.
    pub fn hostname_label(self) -> &'static str {
        match self {
            Generation::V4_8_2 => "Hostname",
            Generation::V4_8 | Generation::V4_9 => "hostname",
        }
    }
}

/// One served field: the row and the name it is served under (which
/// decides its unit).
pub type Selected = (&'static Field, Variant);

/// What dcgm-exporter of this generation serves by default, less the
/// fields this exporter has no source for.
pub fn default_fields(generation: Generation) -> Vec<Selected> {
    let v = generation.variant();
    FIELDS
        .iter()
        .filter(|f| f.is_default(v) && f.has_source())
        .map(|f| (f, v))
        .collect()
}

/// The families whose readings `fields` need: they are sampled even when
/// their own series are switched off.
pub fn families_needed(fields: &[Selected]) -> FamilySet {
    let mut set = FamilySet::empty();
    for (f, _) in fields {
        if let Some(family) = f.family {
            set.set(family, true);
            if let Some(parent) = family.parent() {
                set.set(parent, true);
            }
        }
    }
    set
}

/// The compatibility output as it is configured: served with this
/// exporter's families or instead of them, under which generation's
/// names, which fields, and what it remembers between renders.
#[derive(Debug, Clone)]
pub struct Compat {
    pub generation: Generation,
    /// Serve only the DCGM series (and the exporter's own self-metrics),
    /// not the `nvidia_*` families.
    pub replace_native: bool,
    /// The host name label's value; `None`: no such label.
    pub hostname: Option<String>,
    pub fields: Vec<Selected>,
    /// Counters seen at the last render, for the rates (shared by the
    /// configurations a reload swaps in, so rates run on).
    pub state: Arc<Mutex<encode::State>>,
}

impl Compat {
    pub fn new(generation: Generation, replace_native: bool, hostname: Option<String>) -> Compat {
        Compat {
            generation,
            replace_native,
            hostname,
            fields: default_fields(generation),
            state: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Family;

    #[test]
    fn generations_parse_and_pick_their_names() {
        for g in Generation::ALL {
            assert_eq!(Generation::parse(g.as_str()), Some(*g));
        }
        assert_eq!(Generation::parse("4.7"), None);
        let legacy = default_fields(Generation::V4_8);
        let current = default_fields(Generation::V4_9);
        assert!(legacy
            .iter()
            .any(|(f, v)| f.name(*v) == "DCGM_FI_DEV_FB_USED"));
        assert!(current
            .iter()
            .any(|(f, v)| f.name(*v) == "DCGM_FI_DEV_FB_USED_BYTES"));
        // No source, no series: the vGPU licence is dcgm-exporter's default
        // but never served here.
        assert!(!legacy.iter().any(|(f, _)| f.id == 526));
        assert_eq!(current.len(), legacy.len() + 1);
    }

    #[test]
    fn the_fields_switch_on_the_families_they_read() {
        let needed = families_needed(&default_fields(Generation::V4_8));
        for f in [
            Family::Clocks,
            Family::Memory,
            Family::Gpm,
            Family::Pcie,
            Family::Nvlink,
            Family::Xid,
        ] {
            assert!(needed.contains(f), "{f:?}");
        }
        assert!(!needed.contains(Family::Fan));
        let occupancy = fields::lookup("DCGM_FI_PROF_SM_OCCUPANCY").unwrap();
        let needed = families_needed(&[occupancy]);
        assert!(needed.contains(Family::GpmAllMetrics) && needed.contains(Family::Gpm));
    }
}
