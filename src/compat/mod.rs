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
#[rustfmt::skip] // generated (names/generate.py), kept as written
pub mod names;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

pub use encode::encode;
pub use fields::{Field, FieldKind, Source, Unit, Variant, FIELDS};

use crate::family::FamilySet;

/// Which dcgm-exporter the output looks like. `--compat.dcgm` also takes
/// dcgm-exporter's own version strings (`4.5.1-4.8.0`, `4.8.4`, an image
/// tag such as `3.3.5-3.4.1-ubuntu22.04`): [`Generation::parse`] says which
/// generation each release is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// 3.4.2 and earlier (2.x included): as 4.8.2, without the
    /// `pci_bus_id` label, which 3.5.0 added (NVIDIA/dcgm-exporter
    /// `pkg/dcgmexporter/pipeline.go`: absent at tag 3.3.6-3.4.2, present
    /// at 3.3.7-3.5.0).
    V3_4,
    /// 3.5.0 to 4.8.2: the names before DCGM 4.7, and the host name in
    /// a label named `Hostname` (`internal/pkg/rendermetrics/render_metrics.go`
    /// at tag 4.5.3-4.8.2, 691c927).
    V4_8_2,
    /// 4.8.3 and 4.8.4: the same names; the host label renamed `hostname`
    /// (NVIDIA/dcgm-exporter#655).
    V4_8,
    /// 4.9: DCGM 4.7's names, 11 of them in base units, and the driver
    /// label renamed DCGM_FI_SYSTEM_DRIVER_VERSION.
    V4_9,
    /// 4.10: 4.9's, with the four PCIe and NVLink profiling rates renamed
    /// `..._BYTES_PER_SECOND` (the 4.10.0 release notes,
    /// github.com/NVIDIA/dcgm-exporter/releases/tag/4.10.0: same unit, the
    /// PCIe pair in the default set as before, the NVLink pair optional).
    V4_10,
}

impl Generation {
    /// What the bare `--compat.dcgm` imitates: what the newest GPU
    /// Operator ships, dcgm-exporter 4.6.0-4.8.3 (NVIDIA/gpu-operator
    /// `deployments/gpu-operator/values.yaml` at v26.7.0).
    pub const DEFAULT: Generation = Generation::V4_8;

    pub const ALL: &'static [Generation] = &[
        Generation::V3_4,
        Generation::V4_8_2,
        Generation::V4_8,
        Generation::V4_9,
        Generation::V4_10,
    ];

    /// The newest generation known here: what a newer release is served as.
    pub const NEWEST: Generation = Generation::V4_10;

    /// As `--compat.dcgm` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Generation::V3_4 => "3.4",
            Generation::V4_8_2 => "4.8.2",
            Generation::V4_8 => "4.8",
            Generation::V4_9 => "4.9",
            Generation::V4_10 => "4.10",
        }
    }

    /// A generation by its name, or the generation of a dcgm-exporter
    /// release named as dcgm-exporter names it: `<DCGM>-<dcgm-exporter>`
    /// (`4.5.1-4.8.0`), the exporter's version alone (`4.8.4`), or an image
    /// tag (`4.5.3-4.8.2-ubuntu22.04`). A release after the newest known
    /// (`4.11.0`, `5.0`) is served as the newest known
    /// ([`Generation::newer_than_known`] says so, for the log). `None` for
    /// 1.x (other names altogether).
    pub fn parse(s: &str) -> Option<Generation> {
        if let Some(g) = Generation::ALL.iter().copied().find(|g| g.as_str() == s) {
            return Some(g);
        }
        match exporter_version(s)? {
            (2, ..) | (3, 0..=4, _) => Some(Generation::V3_4),
            (3, ..) | (4, 0..=7, _) | (4, 8, 0..=2) => Some(Generation::V4_8_2),
            (4, 8, _) => Some(Generation::V4_8),
            (4, 9, _) => Some(Generation::V4_9),
            (4, 10, _) => Some(Generation::V4_10),
            (4.., ..) => Some(Generation::NEWEST),
            _ => None,
        }
    }

    /// Whether `s` names a dcgm-exporter release after the newest
    /// generation known here (served as [`Generation::NEWEST`]).
    pub fn newer_than_known(s: &str) -> bool {
        Generation::ALL.iter().all(|g| g.as_str() != s)
            && matches!(exporter_version(s), Some((4, 11.., _) | (5.., ..)))
    }

    /// Whether its series carry `pci_bus_id`.
    pub fn has_pci_bus_id(self) -> bool {
        self != Generation::V3_4
    }

    /// Which names of the table this generation serves by default.
    pub fn variant(self) -> Variant {
        match self {
            Generation::V3_4 | Generation::V4_8_2 | Generation::V4_8 => Variant::Legacy,
            Generation::V4_9 => Variant::Current,
            Generation::V4_10 => Variant::V4_10,
        }
    }

    /// Whether a MIG GPU instance's series take `hpc_job` from the mapping
    /// file named `<gpu>.<gpu instance>` (4.5.3-4.8.2 and later,
    /// NVIDIA/dcgm-exporter#602) rather than from its GPU's file (earlier
    /// releases). The 4.8.2 generation also covers 3.5.0 to 4.8.1, which
    /// matched the GPU's file: docs/migrating-from-dcgm-exporter.md says so.
    pub fn hpc_job_by_instance(self) -> bool {
        self != Generation::V3_4
    }

    /// The label carrying the host name.
    pub fn hostname_label(self) -> &'static str {
        match self {
            Generation::V3_4 | Generation::V4_8_2 => "Hostname",
            Generation::V4_8 | Generation::V4_9 | Generation::V4_10 => "hostname",
        }
    }
}

/// The dcgm-exporter version a release string names: `<DCGM>-<exporter>`,
/// the exporter's version alone, or either with an image variant after it.
/// A bare `x.y` is a version only after the newest known generation (a
/// generation's own name is matched before).
fn exporter_version(s: &str) -> Option<(u32, u32, u32)> {
    let versions: Vec<(u32, u32, u32)> = s.split('-').filter_map(version).collect();
    match versions.as_slice() {
        [e] | [_, e] => Some(*e),
        [] => short_version(s).filter(|v| *v >= (4, 11, 0)),
        _ => None,
    }
}

/// `x.y.z`, each a number.
fn version(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => Some((a, b, c)),
        _ => None,
    }
}

/// `x.y`, each a number, as `(x, y, 0)`.
fn short_version(s: &str) -> Option<(u32, u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?, 0))
}

/// One served field: the row, the name it is served under (which decides
/// its unit), and the type and help it is served with (a counters CSV's,
/// as dcgm-exporter serves them, or the table's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selected {
    pub field: &'static Field,
    pub name: &'static str,
    pub unit: Unit,
    /// Gauge or counter, or a label.
    pub kind: FieldKind,
    pub help: &'static str,
}

impl Selected {
    /// The field under one of the table's two names, as the table types it.
    pub fn of(field: &'static Field, variant: Variant) -> Selected {
        Selected {
            field,
            name: field.name(variant),
            unit: field.unit(variant),
            kind: field.kind,
            help: field.help,
        }
    }
}

/// What dcgm-exporter of this generation serves by default, less the
/// fields this exporter has no source for.
pub fn default_fields(generation: Generation) -> Vec<Selected> {
    let v = generation.variant();
    FIELDS
        .iter()
        .filter(|f| f.is_default(v) && f.has_source())
        .map(|f| Selected::of(f, v))
        .collect()
}

/// `s` as a `&'static str`, each distinct text stored once for the life of
/// the process: a counters CSV's help texts are served as its metric
/// help, and a reload of the same file adds nothing.
pub fn intern(s: &str) -> &'static str {
    static TEXTS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(t) = texts.get(s) {
        return t;
    }
    let t: &'static str = Box::leak(s.to_owned().into_boxed_str());
    texts.insert(t);
    t
}

/// The families whose readings `fields` need: they are sampled even when
/// their own series are switched off.
pub fn families_needed(fields: &[Selected]) -> FamilySet {
    let mut set = FamilySet::empty();
    for s in fields {
        for family in [s.field.family, s.field.also].into_iter().flatten() {
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

    fn names(fields: &[Selected]) -> BTreeSet<&'static str> {
        fields.iter().map(|s| s.name).collect()
    }

    #[test]
    fn generations_parse_and_pick_their_names() {
        for g in Generation::ALL {
            assert_eq!(Generation::parse(g.as_str()), Some(*g));
        }
        assert_eq!(Generation::parse("4.7"), None);
        // dcgm-exporter's own version strings, as users name them.
        for (s, g) in [
            ("4.5.1-4.8.0", Generation::V4_8_2),
            ("4.5.3-4.8.2", Generation::V4_8_2),
            ("4.8.0", Generation::V4_8_2),
            ("4.6.0-4.8.3", Generation::V4_8),
            ("4.8.4", Generation::V4_8),
            ("3.3.9-3.6.1", Generation::V4_8_2),
            ("3.3.7-3.5.0", Generation::V4_8_2),
            ("3.3.5-3.4.1-ubuntu22.04", Generation::V3_4),
            ("2.2.9-2.4.1", Generation::V3_4),
            ("4.9.0", Generation::V4_9),
            ("4.10.0", Generation::V4_10),
            ("4.10.3", Generation::V4_10),
            ("4.8.0-4.10.1-ubuntu22.04", Generation::V4_10),
            // Newer than any known: served as the newest known.
            ("4.11.0", Generation::V4_10),
            ("5.0.0", Generation::V4_10),
            ("5.1", Generation::V4_10),
        ] {
            assert_eq!(Generation::parse(s), Some(g), "{s}");
        }
        for (s, newer) in [
            ("4.11.0", true),
            ("5.1", true),
            ("4.10.0", false),
            ("4.10", false),
            ("4.9.0", false),
            ("1.1.0", false),
        ] {
            assert_eq!(Generation::newer_than_known(s), newer, "{s}");
        }
        for s in [
            "1.1.0",
            "4.7",
            "1.2",
            "4.8.x",
            "latest",
            "4.5.1-4.8.0-4.8.1",
        ] {
            assert_eq!(Generation::parse(s), None, "{s}");
        }
        assert!(!Generation::V3_4.has_pci_bus_id() && Generation::V4_8_2.has_pci_bus_id());
        let legacy = default_fields(Generation::V4_8);
        let current = default_fields(Generation::V4_9);
        assert!(legacy.iter().any(|s| s.name == "DCGM_FI_DEV_FB_USED"));
        assert!(current
            .iter()
            .any(|s| s.name == "DCGM_FI_DEV_FB_USED_BYTES"));
        // The vGPU licence is dcgm-exporter's default, served as DCGM
        // answers it; no source, no series: the inforom versions are not.
        assert!(legacy.iter().any(|s| s.field.id == 526));
        assert!(!FIELDS.iter().any(|f| f.id == 56 && f.has_source()));
        assert_eq!(current.len(), legacy.len() + 1);
        // 4.10: 4.9's set, the PCIe pair under its new names.
        let v4_10 = names(&default_fields(Generation::V4_10));
        let v4_9 = names(&current);
        assert_eq!(v4_10.len(), v4_9.len());
        let added: Vec<_> = v4_10.difference(&v4_9).copied().collect();
        assert_eq!(
            added,
            [
                "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
                "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
            ]
        );
        let (f, v) = fields::lookup("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND").unwrap();
        assert_eq!((f.id, v), (1012, Variant::V4_10));
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
        // The vGPU licence's call is made for the DCGM field only.
        assert!(needed.contains(Family::ModeVgpuLicense) && needed.contains(Family::Mode));
        assert!(!crate::family::FamilySet::defaults().contains(Family::ModeVgpuLicense));
        let (f, v) = fields::lookup("DCGM_FI_PROF_SM_OCCUPANCY").unwrap();
        let needed = families_needed(&[Selected::of(f, v)]);
        assert!(needed.contains(Family::GpmAllMetrics) && needed.contains(Family::Gpm));
        // A link's own traffic needs the per-link counters, which the
        // sampler reads only for nvlink.per-link (else the driver's sum).
        let link0 = &fields::LINK_FIELDS[0];
        assert_eq!(link0.legacy, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0");
        let needed = families_needed(&[Selected::of(link0, fields::Variant::Legacy)]);
        assert!(needed.contains(Family::NvlinkPerLink) && needed.contains(Family::Nvlink));
    }
}
