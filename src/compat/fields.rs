//! The name map: every DCGM field dcgm-exporter can serve that this
//! exporter knows, with both names it goes by, the unit each name reports
//! in, where its value comes from here, and whether dcgm-exporter serves it
//! by default. One table: the encoder reads it, the selection file and the
//! counters CSV are checked against it, `docs/migrating-from-dcgm-exporter.md`
//! prints it (`tests/e2e/compat.rs` keeps the two equal).
//!
//! Sources, each cited where a row depends on it:
//! - Field ids, the names before DCGM 4.7 and the DCGM 4.7 names that only
//!   rename a field: NVIDIA/DCGM `dcgmlib/dcgm_fields.h` at 72fa3fe (DCGM
//!   4.6.0), its "renamed per DCGM Field Naming Standard" alias block.
//! - What dcgm-exporter serves by default before 4.9: NVIDIA/dcgm-exporter
//!   `etc/default-counters.csv` at d5e5f51 (4.8.2, the newest snapshot
//!   reachable here); 4.8.3 and 4.8.4 did not change it (their release
//!   notes list no counter change).
//! - 4.9.0: its release notes (newreleases.io, NVIDIA/dcgm-exporter 4.9.0)
//!   say it renames the 23 default and profiling-preset fields DCGM 4.7
//!   deprecates, 11 of them to base units (clocks to hertz, energy to
//!   joules, utilization to a 0-1 ratio, memory to bytes, NVLink
//!   throughput to bytes per second), renames the driver-version label to
//!   DCGM_FI_SYSTEM_DRIVER_VERSION and adds DCGM_FI_DEV_FB_CAPACITY_BYTES
//!   to the defaults. Its `etc/default-counters.csv` could not be read
//!   here: the 11 base-unit names are DCGM 4.7's, as NVIDIA's Field
//!   Identifiers reference names them (quoted in jackliusr/research,
//!   `dcgm` guide, section 4.2, read 2026-09-19), not read from NVIDIA's
//!   own file. A name that proves wrong is one cell of this table.
//! - How DCGM computes a value where that decides ours: NVIDIA/DCGM
//!   `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe (framebuffer in whole
//!   MiB, rounded down; NVLink bandwidth as KiB/s over the last interval,
//!   divided by 1000).

use crate::family::Family;
use crate::snapshot::{
    Clock, EccError, EccLocation, EccScope, GpmMetric, GpuReadings, GpuState, MigGpuInstance,
    NvLinkError, PowerLimit, Sensor, Snapshot, SpareRows, Threshold, ThrottleReason,
};

/// The unit a DCGM name reports in. Readings here are in base units
/// (hertz, bytes, ratios, joules, seconds, watts, celsius); each unit says
/// how one converts, the way DCGM computes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count, state, code or bitmask, as NVML gives it.
    Count,
    Celsius,
    Watts,
    /// Whole MHz (NVML's clock unit).
    Megahertz,
    Hertz,
    /// Whole MiB, rounded down (DCGM divides bytes by 1024 * 1024).
    Mebibytes,
    Bytes,
    /// Whole percent, 0 to 100 (NVML's utilization unit).
    Percent,
    /// 0 to 1.
    Ratio,
    /// Whole millijoules (NVML's energy unit).
    Millijoules,
    Joules,
    /// Whole nanoseconds (NVML's violation time unit).
    Nanoseconds,
    /// DCGM's NVLink bandwidth: KiB per second divided by 1000, whole.
    MegabytesPerSecond,
    /// Whole KiB per second (NVML's PCIe throughput unit).
    KibibytesPerSecond,
    BytesPerSecond,
    /// Not a series: a label on every series.
    Label,
}

impl Unit {
    /// A reading in base units, in this unit.
    pub fn convert(self, base: f64) -> f64 {
        match self {
            Unit::Count | Unit::Celsius | Unit::Hertz | Unit::Bytes => base.round(),
            Unit::Watts | Unit::Ratio | Unit::Joules | Unit::BytesPerSecond | Unit::Label => base,
            Unit::Megahertz => (base / 1e6).round(),
            Unit::Mebibytes => (base / 1_048_576.0).floor(),
            Unit::Percent => (base * 100.0).round(),
            Unit::Millijoules => (base * 1e3).round(),
            Unit::Nanoseconds => (base * 1e9).round(),
            Unit::MegabytesPerSecond => (base / 1024.0 / 1000.0).trunc(),
            Unit::KibibytesPerSecond => (base / 1024.0).trunc(),
        }
    }

    /// How the docs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "count",
            Unit::Celsius => "°C",
            Unit::Watts => "W",
            Unit::Megahertz => "MHz",
            Unit::Hertz => "Hz",
            Unit::Mebibytes => "MiB",
            Unit::Bytes => "bytes",
            Unit::Percent => "%",
            Unit::Ratio => "ratio",
            Unit::Millijoules => "mJ",
            Unit::Joules => "J",
            Unit::Nanoseconds => "ns",
            Unit::MegabytesPerSecond => "MB/s",
            Unit::KibibytesPerSecond => "KiB/s",
            Unit::BytesPerSecond => "bytes/s",
            Unit::Label => "label",
        }
    }
}

/// What dcgm-exporter declares a field as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Gauge,
    Counter,
    /// A label on every series of the entity, not a series.
    Label,
}

impl FieldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldKind::Gauge => "gauge",
            FieldKind::Counter => "counter",
            FieldKind::Label => "label",
        }
    }
}

/// Where a field's value comes from.
#[derive(Clone, Copy)]
pub enum Source {
    /// A reading of the GPU. A MIG GPU instance's series carries its GPU's
    /// value, as dcgm-exporter's does: DCGM answers a device field of a
    /// GPU instance from its GPU.
    Gpu(fn(&GpuReadings) -> Option<f64>),
    /// The GPU's reading, or a MIG GPU instance's own.
    Instance {
        gpu: fn(&GpuReadings) -> Option<f64>,
        mig: fn(&MigGpuInstance) -> Option<f64>,
    },
    /// Bytes per second over the last poll interval, from a cumulative
    /// byte counter of the GPU (DCGM derives its throughput fields the
    /// same way from NVML's counters).
    Rate(fn(&GpuReadings) -> Option<u64>),
    /// The same over one NVLink's byte counters: sent, received or both.
    LinkRate { link: u32, tx: bool, rx: bool },
    /// One decoder, JPEG or optical flow engine's GPM activity, by NVML's
    /// GPM metric id: the GPU's, or a MIG GPU instance's own.
    Engine(u32),
    /// A value of the node, the same on every series (DCGM's fields of no
    /// entity, which dcgm-exporter serves on each GPU's series).
    Node(fn(&Snapshot) -> Option<f64>),
    /// The code of the GPU's most recent XID.
    LastXid,
    /// Every XID since the exporter started, one series per code
    /// (dcgm-exporter's `DCGM_EXP_XID_ERRORS_TOTAL{xid}`).
    XidTotals,
    /// Clock event reasons that became active, counted per reason since
    /// start (dcgm-exporter's `DCGM_EXP_CLOCK_EVENTS_TOTAL{clock_event}`).
    ClockEventTotals,
    /// A label value.
    Label(for<'a> fn(&'a Snapshot, &'a GpuState) -> Option<&'a str>),
    /// A label whose DCGM value is an integer (printed as one).
    LabelNumber(fn(&Snapshot, &GpuState) -> Option<u64>),
    /// None here, and why: the field is known, and always absent.
    None(&'static str),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Source::Gpu(_) => "gpu",
            Source::Instance { .. } | Source::Engine(_) => "instance",
            Source::Rate(_) | Source::LinkRate { .. } => "rate",
            Source::Node(_) => "node",
            Source::LastXid => "last_xid",
            Source::XidTotals => "xid_totals",
            Source::ClockEventTotals => "clock_event_totals",
            Source::Label(_) | Source::LabelNumber(_) => "label",
            Source::None(why) => why,
        };
        f.write_str(kind)
    }
}

/// A measured per-workload value dcgm-exporter's per-process mode serves
/// per pod of a shared GPU (`--kubernetes-virtual-gpus`): here from
/// `--workloads`' measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerPod {
    /// The pod's SM time over the last interval, of the whole GPU.
    SmTime,
    /// Memory the pod's processes use on the GPU.
    Memory,
}

/// One DCGM field.
#[derive(Debug)]
pub struct Field {
    /// DCGM's field id.
    pub id: u16,
    /// The name dcgm-exporter serves it under up to 4.8 (go-dcgm's), and
    /// that name's unit.
    pub legacy: &'static str,
    pub legacy_unit: Unit,
    /// The DCGM 4.7 name (dcgm-exporter 4.9) and its unit; the legacy ones
    /// where DCGM 4.7 did not rename the field.
    pub current: &'static str,
    pub current_unit: Unit,
    pub kind: FieldKind,
    /// Served by default by dcgm-exporter before 4.9 (legacy) and by 4.9
    /// (current).
    pub default_legacy: bool,
    pub default_current: bool,
    /// The family whose readings it needs; the compat output switches that
    /// family's sampling on.
    pub family: Option<Family>,
    pub help: &'static str,
    pub source: Source,
    pub per_pod: Option<PerPod>,
    /// A second family whose readings it needs (a MIG instance's own
    /// reading beside the GPU's).
    pub also: Option<Family>,
}

/// A field is its DCGM id.
impl PartialEq for Field {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

/// Which of a field's names: before 4.9, 4.9's, or 4.10's (4.9's but for
/// the fields 4.10 renamed again, [`RENAMED_IN_4_10`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    Legacy,
    Current,
    V4_10,
}

/// The fields dcgm-exporter 4.10.0 renamed, each with its new name, in
/// the same unit (bytes per second): its release notes,
/// github.com/NVIDIA/dcgm-exporter/releases/tag/4.10.0 ("Rename four
/// profiling fields in the shipped collectors. PCIe TX and RX are
/// collected by default. NVLink TX and RX are optional. All four still use
/// bytes per second, and custom collectors can still use the old names").
/// 4.10's own `etc/default-counters.csv` could not be read here (the
/// newest dcgm-exporter snapshot reachable is 4.5.3-4.8.2): everything
/// else in 4.10's default set is taken as 4.9's, which the notes do not
/// say changed.
pub const RENAMED_IN_4_10: &[(u16, &str)] = &[
    (1009, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"),
    (1010, "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND"),
    (1011, "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND"),
    (1012, "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND"),
];

impl Field {
    pub fn name(&self, v: Variant) -> &'static str {
        match v {
            Variant::Legacy => self.legacy,
            Variant::Current => self.current,
            Variant::V4_10 => self.name_in_4_10().unwrap_or(self.current),
        }
    }

    /// The name 4.10 gave it, where 4.10 renamed it.
    pub fn name_in_4_10(&self) -> Option<&'static str> {
        RENAMED_IN_4_10
            .iter()
            .find(|(id, _)| *id == self.id)
            .map(|(_, n)| *n)
    }

    pub fn unit(&self, v: Variant) -> Unit {
        match v {
            Variant::Legacy => self.legacy_unit,
            Variant::Current | Variant::V4_10 => self.current_unit,
        }
    }

    pub fn is_default(&self, v: Variant) -> bool {
        match v {
            Variant::Legacy => self.default_legacy,
            Variant::Current | Variant::V4_10 => self.default_current,
        }
    }

    /// Whether this exporter has a value for it at all.
    pub fn has_source(&self) -> bool {
        !matches!(self.source, Source::None(_))
    }
}

/// A field by any of its names.
pub fn lookup(name: &str) -> Option<(&'static Field, Variant)> {
    FIELDS.iter().find_map(|f| {
        if f.legacy == name {
            Some((f, Variant::Legacy))
        } else if f.current == name {
            Some((f, Variant::Current))
        } else if f.name_in_4_10() == Some(name) {
            Some((f, Variant::V4_10))
        } else {
            None
        }
    })
}

/// What a DCGM field name asks this exporter for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resolved {
    /// A field served here, under the name asked for, in the unit that
    /// name reports in.
    Served {
        field: &'static Field,
        name: &'static str,
        unit: Unit,
    },
    /// A field DCGM knows (its id) that is never served here, and why.
    NotServed { id: u16, why: &'static str },
}

/// What `name` asks for when the output imitates `generation`: any name
/// DCGM or go-dcgm knows (`super::names`, generated from their sources)
/// resolves, as dcgm-exporter resolves it (go-dcgm's `GetFieldID`); `None`
/// for a name neither knows.
///
/// In order: the table's name before DCGM 4.7; under 4.9 and 4.10, the
/// table's 4.9 name; a DCGM or go-dcgm name, by its field id, in the unit DCGM serves
/// that id in (a deprecated alias keeps the unit of the field it names:
/// DCGM 4.6's `DCGM_FI_DEV_GPU_UTIL_RATIO` is field 203, in percent,
/// `dcgm_fields.h` l. 775; go-dcgm 4.6.1's base-unit fields 1600-1612 are
/// their own ids, each the value of an older field in base units); last,
/// a 4.10 name (any generation: its unit is 4.9's); last, a 4.9 name
/// under an older generation, in its own unit.
pub fn resolve(name: &str, generation: super::Generation) -> Option<Resolved> {
    let served = |field: &'static Field, name: &'static str, unit: Unit| {
        Some(match field.source {
            Source::None(why) => Resolved::NotServed { id: field.id, why },
            _ => Resolved::Served { field, name, unit },
        })
    };
    if let Some(f) = all().find(|f| f.legacy == name) {
        return served(f, f.legacy, f.legacy_unit);
    }
    let current = FIELDS.iter().find(|f| f.current == name);
    if generation.variant() != Variant::Legacy {
        if let Some(f) = current {
            return served(f, f.current, f.current_unit);
        }
    }
    // A 4.10 name, under any generation: same unit as 4.9's.
    if let Some(f) = FIELDS.iter().find(|f| f.name_in_4_10() == Some(name)) {
        return served(f, f.name(Variant::V4_10), f.current_unit);
    }
    if let Some((known, id)) = super::names::lookup(name) {
        let base = super::names::BASE_UNIT
            .iter()
            .find(|(b, _)| *b == id)
            .map(|(_, of)| *of);
        let row = all().find(|f| f.id == base.unwrap_or(id));
        return match (row, base) {
            (Some(f), Some(_)) => served(f, known, base_unit(known).unwrap_or(f.legacy_unit)),
            (Some(f), None) => served(f, known, f.legacy_unit),
            (None, _) => Some(Resolved::NotServed {
                id,
                why: why_not_served(id),
            }),
        };
    }
    current.and_then(|f| served(f, f.current, f.current_unit))
}

/// The table, the per-link NVLink fields and the per-engine GPM fields.
fn all() -> impl Iterator<Item = &'static Field> {
    FIELDS
        .iter()
        .chain(LINK_FIELDS.iter())
        .chain(ENGINE_FIELDS.iter())
        .chain(EXPORTER_SERVED.iter())
}

/// dcgm-exporter's own families this exporter serves when a counters file
/// asks for them (none is in its default set: each is commented out in
/// its `etc/default-counters.csv` from 4.6.0-4.8.3 on). Not DCGM fields:
/// the id is none of DCGM's (DCGM's ids stop well below it).
#[rustfmt::skip]
pub static EXPORTER_SERVED: &[Field] = &[
    // NVIDIA/dcgm-exporter `internal/pkg/collector/xid_total_collector.go`
    // at 7ad5832 (4.8.3): per monitored entity (a GPU, or a MIG GPU
    // instance), one counter per XID code in a label `xid`, counting the
    // XID field's values since the exporter started; no series for a code
    // before its first event (no 0 series).
    same(u16::MAX, "DCGM_EXP_XID_ERRORS_TOTAL", Count, Counter, false, F_XID,
        "XIDs since the exporter started, by code.", Source::XidTotals),
    // `clock_events_total_collector.go` at 7ad5832: per entity, each clock
    // event reason counted when it turns on between two readings of the
    // reasons bitmask (the first reading only primes it), in a label
    // `clock_event` named as `clock_events_collector.go` names the bits.
    same(u16::MAX - 1, "DCGM_EXP_CLOCK_EVENTS_TOTAL", Count, Counter, false, F_THROTTLE,
        "Clock event reasons that turned on since the exporter started, by reason.", Source::ClockEventTotals),
];

/// dcgm-exporter's names of the clock event reason bits, lowest bit first
/// (`clock_events_collector.go` at d5e5f51, `clockEventToString`).
pub const CLOCK_EVENTS: [&str; 9] = [
    "gpu_idle",
    "clocks_setting",
    "power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
];

/// DCGM's clock event reasons bitmask of the GPU, `None` where NVML gave
/// no reasons.
pub fn clock_event_bits(r: &GpuReadings) -> Option<u64> {
    clock_event_mask(r).map(|m| m as u64)
}

/// Bytes a link sent, received or both, as NVML counts them.
pub fn link_bytes(r: &GpuReadings, link: u32, tx: bool, rx: bool) -> Option<u64> {
    let l = r.nvlinks.iter().find(|l| l.link == link)?;
    sum_link_bytes(std::slice::from_ref(l), tx, rx)
}

/// The bytes the links sent, received or both; `None` when NVML gave none
/// of them (absent, never 0).
fn sum_link_bytes(links: &[crate::snapshot::NvLink], tx: bool, rx: bool) -> Option<u64> {
    let mut any = false;
    let mut sum = 0u64;
    for l in links {
        for v in [tx.then_some(l.tx_bytes), rx.then_some(l.rx_bytes)]
            .into_iter()
            .flatten()
            .flatten()
        {
            any = true;
            sum = sum.wrapping_add(v);
        }
    }
    any.then_some(sum)
}

/// One link's DCGM bandwidth (`DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n>`): as the
/// total's, over that link (DcgmCacheManager.cpp ReadAndCacheNvLinkBandwidth).
const fn link_bandwidth(id: u16, name: &'static str, link: u32) -> Field {
    per_link(same(
        id,
        name,
        MegabytesPerSecond,
        Counter,
        false,
        F_NVLINK,
        "NVLink traffic received and sent over one link, over the last interval.",
        Source::LinkRate {
            link,
            tx: true,
            rx: true,
        },
    ))
}

/// A per-link field also needs each link's own byte counters, which the
/// sampler reads only for `nvlink.per-link`: without it, a GPU's traffic is
/// read as the driver sums it over its links.
const fn per_link(f: Field) -> Field {
    Field {
        also: Some(Family::NvlinkPerLink),
        ..f
    }
}

/// One link's bytes per second, sent or received (`DCGM_FI_PROF_NVLINK_L<n>_TX_BYTES`).
const fn link_prof(id: u16, name: &'static str, link: u32, tx: bool) -> Field {
    per_link(same(
        id,
        name,
        BytesPerSecond,
        Gauge,
        false,
        F_NVLINK,
        "NVLink bytes per second over one link, over the last interval.",
        Source::LinkRate { link, tx, rx: !tx },
    ))
}

macro_rules! links {
    ($($l:literal: $bw:literal, $tx:literal;)*) => {
        &[$(
            link_bandwidth($bw, concat!("DCGM_FI_DEV_NVLINK_BANDWIDTH_L", $l), $l),
            link_prof($tx, concat!("DCGM_FI_PROF_NVLINK_L", $l, "_TX_BYTES"), $l, true),
            link_prof($tx + 1, concat!("DCGM_FI_PROF_NVLINK_L", $l, "_RX_BYTES"), $l, false),
        )*]
    };
}

/// The per-link NVLink fields, from the byte counters the sampler reads per
/// link; ids from DCGM's dcgm_fields.h (`super::names`, checked there).
#[rustfmt::skip]
pub static LINK_FIELDS: &[Field] = links! {
    0: 440, 1040; 1: 441, 1042; 2: 442, 1044; 3: 443, 1046; 4: 444, 1048; 5: 445, 1050;
    6: 475, 1052; 7: 476, 1054; 8: 477, 1056; 9: 478, 1058; 10: 479, 1060; 11: 480, 1062;
    12: 446, 1064; 13: 447, 1066; 14: 448, 1068; 15: 494, 1070; 16: 495, 1072; 17: 496, 1074;
};

/// One engine's GPM activity (`DCGM_FI_PROF_NVDEC0_ACTIVE`, DCGM 4.6's
/// `DCGM_FI_PROF_NVDEC_UTIL_0_RATIO`), a 0-1 ratio as DCGM's other
/// profiling fields: GPM's percent over 100. It needs GPM's full metric
/// set (`gpm.all-metrics`), the per-engine ids of which the sampler reads.
const fn engine(id: u16, legacy: &'static str, current: &'static str, gpm_id: u32) -> Field {
    renamed(
        id,
        legacy,
        Ratio,
        current,
        Ratio,
        Gauge,
        false,
        F_GPM_ALL,
        "Time one decoder, JPEG or optical flow engine was active, 0 to 1 (GPM).",
        Source::Engine(gpm_id),
    )
}

macro_rules! engines {
    ($($kind:literal $legacy:literal: $($n:literal),*;)*) => {
        &[$($(
            engine(
                ENGINE_BASE[$kind] + $n,
                concat!("DCGM_FI_PROF_", $legacy, $n, "_ACTIVE"),
                concat!("DCGM_FI_PROF_", $legacy, "_UTIL_", $n, "_RATIO"),
                GPM_BASE[$kind] + $n as u32,
            ),
        )*)*]
    };
}

/// DCGM's first field id (dcgm_fields.h at 72fa3fe: 1017, 1025, 1033) and
/// NVML's first GPM metric id (nvml.h `NVML_GPM_METRIC_NVDEC_0_UTIL` 30,
/// `NVJPG_0` 40, `NVOFA_0` 50) of the decoders, JPEG and OFA engines.
const ENGINE_BASE: [u16; 3] = [1017, 1025, 1033];
const GPM_BASE: [u32; 3] = [30, 40, 50];

/// The per-engine GPM fields, DCGM 1017 to 1034 (names checked against
/// `super::names` there): 8 decoders, 8 JPEG engines and 2 optical flow
/// engines, as GPM names them; an engine the GPU or instance lacks has no
/// series.
#[rustfmt::skip]
pub static ENGINE_FIELDS: &[Field] = engines! {
    0 "NVDEC": 0, 1, 2, 3, 4, 5, 6, 7;
    1 "NVJPG": 0, 1, 2, 3, 4, 5, 6, 7;
    2 "NVOFA": 0, 1;
};

/// The unit a go-dcgm base-unit field's name says it is in.
fn base_unit(name: &str) -> Option<Unit> {
    [
        ("_HERTZ", Unit::Hertz),
        ("_BYTES", Unit::Bytes),
        ("_JOULES_TOTAL", Unit::Joules),
        ("_RATIO", Unit::Ratio),
    ]
    .iter()
    .find(|(suffix, _)| name.ends_with(suffix))
    .map(|(_, u)| *u)
}

/// Why a DCGM field the table has no row for is not served.
fn why_not_served(id: u16) -> &'static str {
    match id {
        1000..=1099 => "a DCGM profiling metric that NVML's GPM does not measure",
        _ => "no NVML reading of this exporter gives this DCGM field",
    }
}

/// dcgm-exporter's own families (not DCGM fields), which a counters CSV
/// may list: known, never served here, each with where to look instead.
pub const EXPORTER_FIELDS: &[(&str, &str)] = &[
    ("DCGM_EXP_XID_ERRORS_COUNT", "dcgm-exporter counts XIDs in a time window of its own; nvidia_gpu_xid_errors_total counts every XID"),
    ("DCGM_EXP_CLOCK_EVENTS_COUNT", "dcgm-exporter counts clock events in a time window of its own; nvidia_gpu_clock_throttle_seconds_total times them"),
    ("DCGM_EXP_GPU_HEALTH_STATUS", "DCGM's health checks; nvidia_gpu_recommended_action is this exporter's verdict"),
    ("DCGM_EXP_P2P_STATUS", "DCGM's peer-to-peer probe; NVML has no equivalent"),
];

// Readers: one small function per reading, so that the table stays one
// line per field.

/// The value a labelled reading has for `key`.
fn by_label<K: PartialEq, V: Copy>(readings: &[(K, V)], key: K) -> Option<V> {
    readings.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn clock(r: &GpuReadings, c: Clock) -> Option<f64> {
    by_label(&r.clocks_hertz, c)
}

fn max_clock(r: &GpuReadings, c: Clock) -> Option<f64> {
    by_label(&r.max_clocks_hertz, c)
}

fn temperature(r: &GpuReadings, s: Sensor) -> Option<f64> {
    by_label(&r.temperatures, s)
}

fn threshold(r: &GpuReadings, t: Threshold) -> Option<f64> {
    by_label(&r.temperature_thresholds, t)
}

fn power_limit(r: &GpuReadings, l: PowerLimit) -> Option<f64> {
    by_label(&r.power_limits, l)
}

fn utilization(r: &GpuReadings, e: crate::snapshot::Engine) -> Option<f64> {
    by_label(&r.utilization, e)
}

fn activity(r: &GpuReadings, m: GpmMetric) -> Option<f64> {
    by_label(&r.activity, m)
}

fn mig_activity(gi: &MigGpuInstance, m: GpmMetric) -> Option<f64> {
    by_label(&gi.activity, m)
}

/// NVML's total over every memory location.
fn ecc(r: &GpuReadings, e: EccError, s: EccScope) -> Option<f64> {
    r.ecc_errors
        .iter()
        .find(|c| c.error == e && c.scope == s && c.location == EccLocation::All)
        .map(|c| c.count as f64)
}

fn retired(r: &GpuReadings, c: crate::snapshot::RetirementCause) -> Option<f64> {
    by_label(&r.retired_pages, c).map(|v| v as f64)
}

fn banks(r: &GpuReadings, s: SpareRows) -> Option<f64> {
    by_label(&r.remapper_banks, s).map(|v| v as f64)
}

/// The sum over the links that report the kind; absent where none does.
fn nvlink_errors(r: &GpuReadings, e: NvLinkError) -> Option<f64> {
    let mut any = false;
    let sum: u64 = r
        .nvlinks
        .iter()
        .flat_map(|l| &l.errors)
        .filter(|(k, _)| *k == e)
        .map(|(_, v)| {
            any = true;
            *v
        })
        .sum();
    any.then_some(sum as f64)
}

fn nvlink_bytes(r: &GpuReadings, tx: bool, rx: bool) -> Option<u64> {
    let mut readings = Vec::new();
    for (want, direction) in [(tx, true), (rx, false)] {
        if want {
            readings.extend(r.nvlink_bytes(direction));
        }
    }
    (!readings.is_empty()).then(|| readings.into_iter().fold(0u64, u64::wrapping_add))
}

fn throttle_seconds(r: &GpuReadings, t: ThrottleReason) -> Option<f64> {
    by_label(&r.throttle_seconds, t)
}

/// The current clock event reasons as NVML's bitmask
/// (`nvmlClocksEventReason*`, the same bits as DCGM_CLOCKS_EVENT_REASON_*):
/// a reason the GPU does not support is never active, so the reasons it
/// supports give the whole mask.
fn clock_event_mask(r: &GpuReadings) -> Option<f64> {
    if r.throttle_active.is_empty() {
        return None;
    }
    let bit = |t: ThrottleReason| -> u64 {
        match t {
            ThrottleReason::GpuIdle => 0x1,
            ThrottleReason::ApplicationsClocks => 0x2,
            ThrottleReason::SwPowerCap => 0x4,
            ThrottleReason::HwSlowdown => 0x8,
            ThrottleReason::SyncBoost => 0x10,
            ThrottleReason::SwThermal => 0x20,
            ThrottleReason::HwThermal => 0x40,
            ThrottleReason::HwPowerBrake => 0x80,
            ThrottleReason::DisplayClocks => 0x100,
            ThrottleReason::Thermal => 0,
        }
    };
    let mask = r
        .throttle_active
        .iter()
        .filter(|(_, on)| *on)
        .fold(0u64, |m, (t, _)| m | bit(*t));
    Some(mask as f64)
}

/// DCGM's DCGM_FI_DEV_VGPU_LICENSE_STATUS (NVIDIA/DCGM
/// `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe): 0 where the system
/// supports no vGPU licensing, else 1 if the vGPU feature's state is above
/// 0; no value (a blank, which dcgm-exporter drops) where the call failed
/// or no vGPU feature is listed.
fn vgpu_license_status(r: &GpuReadings) -> Option<f64> {
    match r.vgpu_license? {
        crate::snapshot::VgpuLicense::Unsupported => Some(0.0),
        crate::snapshot::VgpuLicense::Supported(held) => flag(held),
    }
}

fn flag(b: Option<bool>) -> Option<f64> {
    b.map(|b| f64::from(u8::from(b)))
}

fn mig_fb(gi: &MigGpuInstance, f: fn(&crate::snapshot::MigMemory) -> u64) -> Option<f64> {
    gi.memory.as_ref().map(|m| f(m) as f64)
}

fn driver_version<'a>(s: &'a Snapshot, _: &'a GpuState) -> Option<&'a str> {
    s.driver.as_ref().map(|d| d.driver_version.as_str())
}

fn nvml_version<'a>(s: &'a Snapshot, _: &'a GpuState) -> Option<&'a str> {
    s.driver.as_ref().map(|d| d.nvml_version.as_str())
}

/// NVML's CUDA driver version as DCGM prints it: `12.8` is 12080.
fn cuda_driver_version(s: &Snapshot, _: &GpuState) -> Option<u64> {
    let v = s.driver.as_ref()?.cuda_driver_version.as_deref()?;
    let (major, minor) = v.split_once('.')?;
    Some(major.parse::<u64>().ok()? * 1000 + minor.parse::<u64>().ok()? * 10)
}

/// The GPU's place in its rack, where the driver gave one.
fn platform(g: &GpuState) -> Option<&crate::snapshot::Platform> {
    g.identity.platform.as_ref()
}

fn brand<'a>(_: &'a Snapshot, g: &'a GpuState) -> Option<&'a str> {
    g.identity.brand.as_deref()
}

fn serial<'a>(_: &'a Snapshot, g: &'a GpuState) -> Option<&'a str> {
    g.identity.serial.as_deref()
}

fn vbios<'a>(_: &'a Snapshot, g: &'a GpuState) -> Option<&'a str> {
    g.identity.vbios_version.as_deref()
}

use crate::snapshot::Engine;
use crate::snapshot::RetirementCause as Rc;
use FieldKind::{Counter, Gauge, Label};
#[allow(clippy::enum_glob_use)] // the table's unit column reads as units
use Unit::*;

/// A field DCGM 4.7 did not rename.
#[allow(clippy::too_many_arguments)]
const fn same(
    id: u16,
    name: &'static str,
    unit: Unit,
    kind: FieldKind,
    default: bool,
    family: Option<Family>,
    help: &'static str,
    source: Source,
) -> Field {
    Field {
        id,
        legacy: name,
        legacy_unit: unit,
        current: name,
        current_unit: unit,
        kind,
        default_legacy: default,
        default_current: default,
        family,
        help,
        source,
        per_pod: None,
        also: None,
    }
}

/// A field DCGM 4.7 renamed (its unit changing or not).
#[allow(clippy::too_many_arguments)]
const fn renamed(
    id: u16,
    legacy: &'static str,
    legacy_unit: Unit,
    current: &'static str,
    current_unit: Unit,
    kind: FieldKind,
    default: bool,
    family: Option<Family>,
    help: &'static str,
    source: Source,
) -> Field {
    Field {
        id,
        legacy,
        legacy_unit,
        current,
        current_unit,
        kind,
        default_legacy: default,
        default_current: default,
        family,
        help,
        source,
        per_pod: None,
        also: None,
    }
}

/// BAR1, read per MIG instance by `mig.bar1`.
const fn bar1(f: Field) -> Field {
    Field {
        also: Some(Family::MigBar1),
        ..f
    }
}

const fn pod(f: Field, p: PerPod) -> Field {
    Field {
        per_pod: Some(p),
        ..f
    }
}

const F_CLOCKS: Option<Family> = Some(Family::Clocks);
const F_TEMP: Option<Family> = Some(Family::Temperature);
const F_POWER: Option<Family> = Some(Family::Power);
const F_UTIL: Option<Family> = Some(Family::Utilization);
const F_MEM: Option<Family> = Some(Family::Memory);
const F_PCIE: Option<Family> = Some(Family::Pcie);
const F_ECC: Option<Family> = Some(Family::Ecc);
const F_RET: Option<Family> = Some(Family::Retirement);
const F_NVLINK: Option<Family> = Some(Family::Nvlink);

const F_THROTTLE: Option<Family> = Some(Family::Throttle);
const F_GPM: Option<Family> = Some(Family::Gpm);
const F_GPM_ALL: Option<Family> = Some(Family::GpmAllMetrics);
const F_MODE: Option<Family> = Some(Family::Mode);
const F_MIG: Option<Family> = Some(Family::Mig);
const F_FAN: Option<Family> = Some(Family::Fan);
const F_XID: Option<Family> = Some(Family::Xid);
const F_CLOCKS_APP: Option<Family> = Some(Family::ClocksApplications);
const F_POWER_INSTANT: Option<Family> = Some(Family::PowerInstant);
const F_VGPU_LICENSE: Option<Family> = Some(Family::ModeVgpuLicense);

/// Every field, in dcgm-exporter's counters CSV order (clocks,
/// temperature, power, PCIe, utilization, errors, memory, ECC, retired
/// pages, NVLink, remapped rows, labels, profiling), the fields of its
/// extended sets after the defaults of each group. One row per field,
/// unformatted, so that the table reads as one.
#[rustfmt::skip]
pub static FIELDS: &[Field] = &[
    // Clocks
    renamed(100, "DCGM_FI_DEV_SM_CLOCK", Megahertz, "DCGM_FI_DEV_SM_CLOCK_HERTZ", Hertz, Gauge, true, F_CLOCKS,
        "SM clock frequency.", Source::Gpu(|r| clock(r, Clock::Sm))),
    renamed(101, "DCGM_FI_DEV_MEM_CLOCK", Megahertz, "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", Hertz, Gauge, true, F_CLOCKS,
        "Memory clock frequency.", Source::Gpu(|r| clock(r, Clock::Memory))),
    renamed(102, "DCGM_FI_DEV_VIDEO_CLOCK", Megahertz, "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ", Hertz, Gauge, false, F_CLOCKS,
        "Video engine clock frequency.", Source::Gpu(|r| clock(r, Clock::Video))),
    same(113, "DCGM_FI_DEV_MAX_SM_CLOCK", Megahertz, Gauge, false, F_CLOCKS,
        "Maximum SM clock frequency.", Source::Gpu(|r| max_clock(r, Clock::Sm))),
    same(114, "DCGM_FI_DEV_MAX_MEM_CLOCK", Megahertz, Gauge, false, F_CLOCKS,
        "Maximum memory clock frequency.", Source::Gpu(|r| max_clock(r, Clock::Memory))),
    same(115, "DCGM_FI_DEV_MAX_VIDEO_CLOCK", Megahertz, Gauge, false, F_CLOCKS,
        "Maximum video engine clock frequency.", Source::Gpu(|r| max_clock(r, Clock::Video))),
    // DCGM reads both with nvmlDeviceGetApplicationsClock; here its nvml.h
    // successor, nvmlDeviceGetClock(NVML_CLOCK_ID_APP_CLOCK_TARGET).
    same(110, "DCGM_FI_DEV_APP_SM_CLOCK", Megahertz, Gauge, false, F_CLOCKS_APP,
        "SM applications clock (the target set with nvidia-smi -ac).", Source::Gpu(|r| by_label(&r.applications_clocks_hertz, Clock::Sm))),
    same(111, "DCGM_FI_DEV_APP_MEM_CLOCK", Megahertz, Gauge, false, F_CLOCKS_APP,
        "Memory applications clock (the target set with nvidia-smi -ac).", Source::Gpu(|r| by_label(&r.applications_clocks_hertz, Clock::Memory))),
    renamed(112, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Count, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Count, Gauge, false, F_THROTTLE,
        "Current clock event (throttle) reasons, NVML's bitmask.", Source::Gpu(clock_event_mask)),
    same(190, "DCGM_FI_DEV_PSTATE", Count, Gauge, false, F_CLOCKS,
        "Performance state, 0 (P0) to 15.", Source::Gpu(|r| r.performance_state.map(f64::from))),
    // Temperature
    renamed(140, "DCGM_FI_DEV_MEMORY_TEMP", Celsius, "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", Celsius, Gauge, true, F_TEMP,
        "Memory temperature.", Source::Gpu(|r| temperature(r, Sensor::Memory))),
    renamed(150, "DCGM_FI_DEV_GPU_TEMP", Celsius, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", Celsius, Gauge, true, F_TEMP,
        "GPU temperature.", Source::Gpu(|r| temperature(r, Sensor::Gpu))),
    renamed(151, "DCGM_FI_DEV_MEM_MAX_OP_TEMP", Celsius, "DCGM_FI_DEV_MEMORY_MAX_OP_TEMP_CELSIUS", Celsius, Gauge, false, F_TEMP,
        "Maximum operating temperature of the memory.", Source::Gpu(|r| threshold(r, Threshold::MemoryMax))),
    renamed(152, "DCGM_FI_DEV_GPU_MAX_OP_TEMP", Celsius, "DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS", Celsius, Gauge, false, F_TEMP,
        "Maximum operating temperature of the GPU.", Source::Gpu(|r| threshold(r, Threshold::GpuMax))),
    renamed(153, "DCGM_FI_DEV_GPU_TEMP_LIMIT", Celsius, "DCGM_FI_DEV_GPU_TEMP_MARGIN_CELSIUS", Celsius, Gauge, false, F_TEMP,
        "Degrees the GPU is below its T.Limit temperature.", Source::Gpu(|r| r.temperature_margin)),
    renamed(158, "DCGM_FI_DEV_SLOWDOWN_TEMP", Celsius, "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS", Celsius, Gauge, false, F_TEMP,
        "Temperature at which the GPU slows down.", Source::Gpu(|r| threshold(r, Threshold::Slowdown))),
    renamed(159, "DCGM_FI_DEV_SHUTDOWN_TEMP", Celsius, "DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS", Celsius, Gauge, false, F_TEMP,
        "Temperature at which the GPU shuts down.", Source::Gpu(|r| threshold(r, Threshold::Shutdown))),
    same(191, "DCGM_FI_DEV_FAN_SPEED", Percent, Gauge, false, F_FAN,
        "Speed of the GPU's first fan (nvmlDeviceGetFanSpeed).", Source::Gpu(|r| r.fan_speeds.iter().find(|(i, _)| *i == 0).map(|(_, v)| *v))),
    // Power
    renamed(155, "DCGM_FI_DEV_POWER_USAGE", Watts, "DCGM_FI_DEV_BOARD_POWER_WATTS", Watts, Gauge, true, F_POWER,
        "Power draw.", Source::Gpu(|r| r.power_usage_watts)),
    // NVML_FI_DEV_POWER_INSTANT, as DCGM reads it.
    same(157, "DCGM_FI_DEV_POWER_USAGE_INSTANT", Watts, Gauge, false, F_POWER_INSTANT,
        "Instantaneous power draw.", Source::Gpu(|r| r.power_instant_watts)),
    renamed(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Millijoules, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", Joules, Counter, true, F_POWER,
        "Energy used since the driver was loaded.", Source::Gpu(|r| r.energy_joules)),
    renamed(160, "DCGM_FI_DEV_POWER_MGMT_LIMIT", Watts, "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", Watts, Gauge, false, F_POWER,
        "Power management limit.", Source::Gpu(|r| power_limit(r, PowerLimit::Management))),
    renamed(161, "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", Watts, "DCGM_FI_DEV_BOARD_POWER_LIMIT_MIN_WATTS", Watts, Gauge, false, F_POWER,
        "Lowest power limit that can be set.", Source::Gpu(|r| power_limit(r, PowerLimit::Min))),
    renamed(162, "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", Watts, "DCGM_FI_DEV_BOARD_POWER_LIMIT_MAX_WATTS", Watts, Gauge, false, F_POWER,
        "Highest power limit that can be set.", Source::Gpu(|r| power_limit(r, PowerLimit::Max))),
    renamed(163, "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", Watts, "DCGM_FI_DEV_BOARD_POWER_LIMIT_DEFAULT_WATTS", Watts, Gauge, false, F_POWER,
        "Default power limit.", Source::Gpu(|r| power_limit(r, PowerLimit::Default))),
    renamed(164, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", Watts, "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", Watts, Gauge, false, F_POWER,
        "Power limit the GPU enforces.", Source::Gpu(|r| power_limit(r, PowerLimit::Enforced))),
    // PCIe
    renamed(202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Count, "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", Count, Counter, true, F_PCIE,
        "PCIe replays (retries).", Source::Gpu(|r| r.pcie.replay_errors.map(|v| v as f64))),
    // Defaults of dcgm-exporter 2.2.9 to 3.3.6, which DCGM deprecates for
    // the two PCIE_*_BYTES fields below; DCGM reads them from
    // nvmlDeviceGetPcieThroughput (KB/s over 20 ms), here the same bytes
    // from NVML's PCIe byte counters over the poll interval.
    same(200, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", KibibytesPerSecond, Counter, false, F_PCIE,
        "PCIe KiB sent per second over the last interval (NVML's PCIe byte counters, R555+).", Source::Rate(|r| r.pcie.tx_bytes)),
    same(201, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", KibibytesPerSecond, Counter, false, F_PCIE,
        "PCIe KiB received per second over the last interval (NVML's PCIe byte counters, R555+).", Source::Rate(|r| r.pcie.rx_bytes)),
    same(235, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", Count, Gauge, false, F_PCIE,
        "Maximum PCIe link generation.", Source::Gpu(|r| r.pcie.link_generation_max.map(f64::from))),
    same(236, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", Count, Gauge, false, F_PCIE,
        "Maximum PCIe link width, lanes.", Source::Gpu(|r| r.pcie.link_width_max.map(f64::from))),
    same(237, "DCGM_FI_DEV_PCIE_LINK_GEN", Count, Gauge, false, F_PCIE,
        "Current PCIe link generation.", Source::Gpu(|r| r.pcie.link_generation_current.map(f64::from))),
    same(238, "DCGM_FI_DEV_PCIE_LINK_WIDTH", Count, Gauge, false, F_PCIE,
        "Current PCIe link width, lanes.", Source::Gpu(|r| r.pcie.link_width_current.map(f64::from))),
    // Utilization (NVML reports none on a MIG-enabled GPU)
    pod(renamed(203, "DCGM_FI_DEV_GPU_UTIL", Percent, "DCGM_FI_DEV_GPU_UTIL_RATIO", Ratio, Gauge, true, F_UTIL,
        "GPU utilization: time a kernel ran over the sample period.", Source::Gpu(|r| utilization(r, Engine::Gpu))), PerPod::SmTime),
    renamed(204, "DCGM_FI_DEV_MEM_COPY_UTIL", Percent, "DCGM_FI_DEV_MEMORY_UTIL_RATIO", Ratio, Gauge, true, F_UTIL,
        "Memory utilization: time the memory was read or written.", Source::Gpu(|r| utilization(r, Engine::Memory))),
    renamed(206, "DCGM_FI_DEV_ENC_UTIL", Percent, "DCGM_FI_DEV_ENC_UTIL_RATIO", Ratio, Gauge, true, F_UTIL,
        "Encoder utilization.", Source::Gpu(|r| utilization(r, Engine::Encoder))),
    renamed(207, "DCGM_FI_DEV_DEC_UTIL", Percent, "DCGM_FI_DEV_DEC_UTIL_RATIO", Ratio, Gauge, true, F_UTIL,
        "Decoder utilization.", Source::Gpu(|r| utilization(r, Engine::Decoder))),
    // Errors and violations
    renamed(230, "DCGM_FI_DEV_XID_ERRORS", Count, "DCGM_FI_DEV_XID_ERROR", Count, Gauge, true, F_XID,
        "Code of the most recent XID since the exporter started; before the first, 0 under 3.4, absent later (as dcgm-exporter).", Source::LastXid),
    same(240, "DCGM_FI_DEV_POWER_VIOLATION", Nanoseconds, Counter, false, F_THROTTLE,
        "Time held below its clocks by the power limit (NVML perf policy power).", Source::Gpu(|r| throttle_seconds(r, ThrottleReason::SwPowerCap))),
    same(241, "DCGM_FI_DEV_THERMAL_VIOLATION", Nanoseconds, Counter, false, F_THROTTLE,
        "Time held below its clocks by thermal limits (NVML perf policy thermal; drivers before R575).", Source::Gpu(|r| throttle_seconds(r, ThrottleReason::Thermal))),
    same(242, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", Nanoseconds, Counter, false, F_THROTTLE,
        "Time held below its clocks by sync boost.", Source::Gpu(|r| throttle_seconds(r, ThrottleReason::SyncBoost))),
    same(243, "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", Nanoseconds, Counter, false, None,
        "Board limit violation time.", Source::None("NVML's board limit policy time is not read here")),
    same(244, "DCGM_FI_DEV_LOW_UTIL_VIOLATION", Nanoseconds, Counter, false, None,
        "Low utilization violation time.", Source::None("NVML's low utilization policy time is not read here")),
    same(245, "DCGM_FI_DEV_RELIABILITY_VIOLATION", Nanoseconds, Counter, false, None,
        "Reliability violation time.", Source::None("NVML's reliability policy time is not read here")),
    // Memory
    // Not a default before 4.9; 4.9 serves the capacity in bytes by default.
    Field { default_current: true, ..renamed(250, "DCGM_FI_DEV_FB_TOTAL", Mebibytes, "DCGM_FI_DEV_FB_CAPACITY_BYTES", Bytes, Gauge, false, F_MEM,
        "Total frame buffer memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.memory.map(|m| m.total_bytes as f64), mig: |gi| mig_fb(gi, |m| m.total_bytes) }) },
    renamed(251, "DCGM_FI_DEV_FB_FREE", Mebibytes, "DCGM_FI_DEV_FB_FREE_BYTES", Bytes, Gauge, true, F_MEM,
        "Free frame buffer memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.memory.map(|m| m.free_bytes as f64), mig: |gi| mig_fb(gi, |m| m.free_bytes) }),
    pod(renamed(252, "DCGM_FI_DEV_FB_USED", Mebibytes, "DCGM_FI_DEV_FB_USED_BYTES", Bytes, Gauge, true, F_MEM,
        "Used frame buffer memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.memory.map(|m| m.used_bytes as f64), mig: |gi| mig_fb(gi, |m| m.used_bytes) }), PerPod::Memory),
    // DCGM reads a GPU instance's frame buffer from the instance's own
    // handle (DcgmCacheManager.cpp ReadAndCacheFBMemoryInfo, l. 14162ff).
    renamed(253, "DCGM_FI_DEV_FB_RESERVED", Mebibytes, "DCGM_FI_DEV_FB_RESERVED_BYTES", Bytes, Gauge, true, F_MEM,
        "Frame buffer memory the driver reserves (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.memory.and_then(|m| m.reserved_bytes).map(|v| v as f64), mig: |gi| gi.memory.and_then(|m| m.reserved_bytes).map(|v| v as f64) }),
    renamed(254, "DCGM_FI_DEV_FB_USED_PERCENT", Ratio, "DCGM_FI_DEV_FB_USED_RATIO", Ratio, Gauge, false, F_MEM,
        "Used over total less reserved frame buffer memory, 0 to 1 (of the GPU instance, on MIG).", Source::Instance { gpu: fb_used_ratio, mig: mig_fb_used_ratio }),
    // DCGM reads a GPU instance's BAR1 from its own handle too
    // (DcgmCacheManager.cpp, BAR1 case, l. 11516).
    bar1(same(90, "DCGM_FI_DEV_BAR1_TOTAL", Mebibytes, Gauge, false, F_MEM,
        "Total BAR1 memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.bar1.map(|b| b.total_bytes as f64), mig: |gi| gi.bar1.map(|b| b.total_bytes as f64) })),
    bar1(same(92, "DCGM_FI_DEV_BAR1_USED", Mebibytes, Gauge, false, F_MEM,
        "Used BAR1 memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.bar1.map(|b| b.used_bytes as f64), mig: |gi| gi.bar1.map(|b| b.used_bytes as f64) })),
    bar1(same(93, "DCGM_FI_DEV_BAR1_FREE", Mebibytes, Gauge, false, F_MEM,
        "Free BAR1 memory (of the GPU instance, on MIG).", Source::Instance { gpu: |r| r.bar1.map(|b| b.total_bytes.saturating_sub(b.used_bytes) as f64), mig: |gi| gi.bar1.map(|b| b.total_bytes.saturating_sub(b.used_bytes) as f64) })),
    // ECC
    renamed(300, "DCGM_FI_DEV_ECC_CURRENT", Count, "DCGM_FI_DEV_ECC_MODE", Count, Gauge, false, F_ECC,
        "1 if ECC is on.", Source::Gpu(|r| flag(r.ecc_mode.map(|m| m.current)))),
    same(301, "DCGM_FI_DEV_ECC_PENDING", Count, Gauge, false, F_ECC,
        "1 if ECC is on after the next reboot.", Source::Gpu(|r| flag(r.ecc_mode.map(|m| m.pending)))),
    same(310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Count, Counter, false, F_ECC,
        "Corrected (single-bit) ECC errors since the driver was loaded.", Source::Gpu(|r| ecc(r, EccError::Corrected, EccScope::Volatile))),
    same(311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Count, Counter, false, F_ECC,
        "Uncorrected (double-bit) ECC errors since the driver was loaded.", Source::Gpu(|r| ecc(r, EccError::Uncorrected, EccScope::Volatile))),
    same(312, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", Count, Counter, false, F_ECC,
        "Corrected (single-bit) ECC errors over the GPU's life.", Source::Gpu(|r| ecc(r, EccError::Corrected, EccScope::Aggregate))),
    same(313, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", Count, Counter, false, F_ECC,
        "Uncorrected (double-bit) ECC errors over the GPU's life.", Source::Gpu(|r| ecc(r, EccError::Uncorrected, EccScope::Aggregate))),
    // Retired pages (before Ampere)
    renamed(390, "DCGM_FI_DEV_RETIRED_SBE", Count, "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", Count, Counter, false, F_RET,
        "Pages retired after single-bit errors.", Source::Gpu(|r| retired(r, Rc::SingleBitEcc))),
    renamed(391, "DCGM_FI_DEV_RETIRED_DBE", Count, "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", Count, Counter, false, F_RET,
        "Pages retired after double-bit errors.", Source::Gpu(|r| retired(r, Rc::DoubleBitEcc))),
    renamed(392, "DCGM_FI_DEV_RETIRED_PENDING", Count, "DCGM_FI_DEV_PAGE_RETIRED_PENDING", Count, Counter, false, F_RET,
        "1 if a page waits to be retired at the next reboot.", Source::Gpu(|r| flag(r.retired_pages_pending))),
    // NVLink (up to NVLink4: NVML calls these counters unsupported on NVLink5)
    renamed(409, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Count, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", Count, Counter, false, F_NVLINK,
        "NVLink flow-control CRC errors, all links.", Source::Gpu(|r| nvlink_errors(r, NvLinkError::CrcFlit))),
    renamed(419, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", Count, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", Count, Counter, false, F_NVLINK,
        "NVLink data CRC errors, all links.", Source::Gpu(|r| nvlink_errors(r, NvLinkError::CrcData))),
    renamed(429, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", Count, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", Count, Counter, false, F_NVLINK,
        "NVLink replays, all links.", Source::Gpu(|r| nvlink_errors(r, NvLinkError::Replay))),
    renamed(439, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", Count, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", Count, Counter, false, F_NVLINK,
        "NVLink recoveries, all links.", Source::Gpu(|r| nvlink_errors(r, NvLinkError::Recovery))),
    renamed(449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", MegabytesPerSecond, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", BytesPerSecond, Counter, true, F_NVLINK,
        "NVLink traffic received and sent, all links, over the last interval.", Source::Rate(|r| nvlink_bytes(r, true, true))),
    // vGPU
    same(526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", Count, Gauge, true, F_VGPU_LICENSE,
        "1 if the vGPU software licence is held; 0 if not, and where NVML supports no vGPU licensing (bare metal), as DCGM answers.", Source::Gpu(vgpu_license_status)),
    // Remapped rows (Ampere and newer; not on a MIG-enabled GPU)
    renamed(393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Count, "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", Count, Counter, true, F_RET,
        "Rows remapped after uncorrectable errors.", Source::Gpu(|r| r.remapped_rows.map(|m| m.uncorrectable as f64))),
    renamed(394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Count, "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", Count, Counter, true, F_RET,
        "Rows remapped after correctable errors.", Source::Gpu(|r| r.remapped_rows.map(|m| m.correctable as f64))),
    renamed(395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", Count, "DCGM_FI_DEV_ROW_REMAP_FAILED", Count, Gauge, true, F_RET,
        "1 if a row remap failed.", Source::Gpu(|r| flag(r.remapped_rows.map(|m| m.failed)))),
    same(396, "DCGM_FI_DEV_ROW_REMAP_PENDING", Count, Gauge, false, F_RET,
        "1 if a row remap waits for a GPU reset.", Source::Gpu(|r| flag(r.remapped_rows.map(|m| m.pending)))),
    renamed(385, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX", Count, "DCGM_FI_DEV_BANK_REMAP_AVAIL_MAX", Count, Gauge, false, F_RET,
        "Memory banks with every spare row left.", Source::Gpu(|r| banks(r, SpareRows::Max))),
    renamed(386, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_HIGH", Count, "DCGM_FI_DEV_BANK_REMAP_AVAIL_HIGH", Count, Gauge, false, F_RET,
        "Memory banks with many spare rows left.", Source::Gpu(|r| banks(r, SpareRows::High))),
    renamed(387, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_PARTIAL", Count, "DCGM_FI_DEV_BANK_REMAP_AVAIL_PARTIAL", Count, Gauge, false, F_RET,
        "Memory banks with some spare rows left.", Source::Gpu(|r| banks(r, SpareRows::Partial))),
    renamed(388, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW", Count, "DCGM_FI_DEV_BANK_REMAP_AVAIL_LOW", Count, Gauge, false, F_RET,
        "Memory banks with few spare rows left.", Source::Gpu(|r| banks(r, SpareRows::Low))),
    renamed(389, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE", Count, "DCGM_FI_DEV_BANK_REMAP_AVAIL_NONE", Count, Gauge, false, F_RET,
        "Memory banks with no spare row left.", Source::Gpu(|r| banks(r, SpareRows::Exhausted))),
    renamed(1523, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", Count, "DCGM_FI_DEV_GPU_RECOVERY_ACTION", Count, Gauge, false, F_RET,
        "Recovery the driver asks for (NVML's code: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover the IMEX domain, 6 PCIe bus reset, 7 system reboot).", Source::Gpu(|r| r.recovery_action.map(f64::from))),
    // Modes
    renamed(66, "DCGM_FI_DEV_PERSISTENCE_MODE", Count, "DCGM_FI_DEV_GPU_PERSISTENCE_MODE", Count, Gauge, false, F_MODE,
        "1 if persistence mode is on.", Source::Gpu(|r| flag(r.persistence_mode))),
    same(67, "DCGM_FI_DEV_MIG_MODE", Count, Gauge, false, F_MIG,
        "1 if MIG mode is on.", Source::Gpu(|r| flag(r.mig_mode.map(|m| m.current)))),
    // Of the node, on every series: DCGM's count of the GPUs it sees, here
    // NVML's (nvmlDeviceGetCount): every GPU known since start.
    same(4, "DCGM_FI_DEV_COUNT", Count, Gauge, false, None,
        "Number of GPUs on the node.", Source::Node(|s| Some(s.gpus.len() as f64))),
    // Static configuration, as labels on every series
    renamed(1, "DCGM_FI_DRIVER_VERSION", Unit::Label, "DCGM_FI_SYSTEM_DRIVER_VERSION", Unit::Label, Label, true, None,
        "Driver version.", Source::Label(driver_version)),
    renamed(2, "DCGM_FI_NVML_VERSION", Unit::Label, "DCGM_FI_SYSTEM_NVML_VERSION", Unit::Label, Label, false, None,
        "NVML version.", Source::Label(nvml_version)),
    renamed(51, "DCGM_FI_DEV_BRAND", Unit::Label, "DCGM_FI_DEV_GPU_BRAND", Unit::Label, Label, false, None,
        "Device brand.", Source::Label(brand)),
    renamed(53, "DCGM_FI_DEV_SERIAL", Unit::Label, "DCGM_FI_DEV_BOARD_SERIAL", Unit::Label, Label, false, None,
        "Device serial number.", Source::Label(serial)),
    same(85, "DCGM_FI_DEV_VBIOS_VERSION", Unit::Label, Label, false, None,
        "VBIOS version.", Source::Label(vbios)),
    // Label rows users' counters files carry. DCGM reads each from NVML
    // (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe: the CUDA
    // driver version l. 10258-10271, nvmlSystemGetCudaDriverVersion_v2's
    // integer, 1000 * major + 10 * minor; the minor number l. 10664-10679;
    // the name, UUID and PCI bus id from nvmlDeviceGetName, GetUUID and
    // GetPciInfo_v3, l. 10290, 10604, 10894) and dcgm-exporter puts the
    // value in a label named as the counters file names the field
    // (`labels[counter.FieldName] = v`, `gpu_collector.go` at 4.5.3-4.8.2).
    same(5, "DCGM_FI_CUDA_DRIVER_VERSION", Unit::Label, Label, false, None,
        "CUDA driver version, 1000 * major + 10 * minor.", Source::LabelNumber(cuda_driver_version)),
    renamed(50, "DCGM_FI_DEV_NAME", Unit::Label, "DCGM_FI_DEV_GPU_NAME", Unit::Label, Label, false, None,
        "Device name.", Source::Label(|_, g| g.identity.name.as_deref())),
    renamed(54, "DCGM_FI_DEV_UUID", Unit::Label, "DCGM_FI_DEV_GPU_UUID", Unit::Label, Label, false, None,
        "Device UUID.", Source::Label(|_, g| Some(g.uuid.as_str()))),
    renamed(55, "DCGM_FI_DEV_MINOR_NUMBER", Unit::Label, "DCGM_FI_DEV_GPU_MINOR_NUMBER", Unit::Label, Label, false, None,
        "Device node minor number (/dev/nvidiaN).", Source::LabelNumber(|_, g| g.identity.minor_number.map(u64::from))),
    renamed(57, "DCGM_FI_DEV_PCI_BUSID", Unit::Label, "DCGM_FI_DEV_PCI_BUS_ID", Unit::Label, Label, false, None,
        "PCI bus id.", Source::Label(|_, g| g.identity.pci_bus_id.as_deref())),
    // Where the GPU sits in its NVL72 rack (issue 49): DCGM 4.x's platform
    // fields 571-577 (`dcgm_fields.h`, "Serial number of the chassis
    // containing this GPU" ...), nvmlDeviceGetPlatformInfo's answer. The
    // chassis serial and InfiniBand GUID are DCGM strings, the others its
    // integers; all identity of the GPU, served as label rows like the
    // minor number, from the platform info read once at start; absent
    // where the driver gives none (before R570, Hopper and older) and for
    // the slot and tray nvidia-smi prints as N/A (the HGX B200).
    same(572, "DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER", Unit::Label, Label, false, None,
        "Serial number of the chassis (NVL72 rack) containing the GPU.", Source::Label(|_, g| platform(g)?.chassis_serial.as_deref())),
    same(573, "DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER", Unit::Label, Label, false, None,
        "Slot number in the rack containing the GPU (switch trays counted).", Source::LabelNumber(|_, g| platform(g)?.slot.map(u64::from))),
    same(574, "DCGM_FI_DEV_PLATFORM_TRAY_INDEX", Unit::Label, Label, false, None,
        "Compute tray index in the chassis containing the GPU (switch trays not counted).", Source::LabelNumber(|_, g| platform(g)?.tray.map(u64::from))),
    same(575, "DCGM_FI_DEV_PLATFORM_HOST_ID", Unit::Label, Label, false, None,
        "Index of the node within the slot containing the GPU.", Source::LabelNumber(|_, g| platform(g).map(|p| u64::from(p.host_id)))),
    same(577, "DCGM_FI_DEV_PLATFORM_MODULE_ID", Unit::Label, Label, false, None,
        "Id of the GPU (module) within the node.", Source::LabelNumber(|_, g| platform(g).map(|p| u64::from(p.module_id)))),
    same(571, "DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID", Unit::Label, Label, false, None,
        "InfiniBand GUID of the GPU.", Source::None("the platform info's InfiniBand GUID is not kept here")),
    same(576, "DCGM_FI_DEV_PLATFORM_PEER_TYPE", Unit::Label, Label, false, None,
        "NVLink peer type the platform indicates.", Source::None("the platform info's peer type is not kept here: nvml.h does not name its values")),
    // DCGM's name of its own process (nvmlSystemGetProcessName(getpid()),
    // l. 10227-10239): dcgm-exporter's or nv-hostengine's.
    renamed(3, "DCGM_FI_PROCESS_NAME", Unit::Label, "DCGM_FI_SYSTEM_PROCESS_NAME", Unit::Label, Label, false, None,
        "Name of DCGM's own process.", Source::None("the name of DCGM's own process (dcgm-exporter or nv-hostengine), which does not run here")),
    renamed(56, "DCGM_FI_DEV_OEM_INFOROM_VER", Unit::Label, "DCGM_FI_DEV_INFOROM_OEM_VERSION", Unit::Label, Label, false, None,
        "OEM inforom version.", Source::None("inforom versions are not read here")),
    renamed(80, "DCGM_FI_DEV_ECC_INFOROM_VER", Unit::Label, "DCGM_FI_DEV_INFOROM_ECC_VERSION", Unit::Label, Label, false, None,
        "ECC inforom version.", Source::None("inforom versions are not read here")),
    renamed(81, "DCGM_FI_DEV_POWER_INFOROM_VER", Unit::Label, "DCGM_FI_DEV_INFOROM_POWER_VERSION", Unit::Label, Label, false, None,
        "Power inforom version.", Source::None("inforom versions are not read here")),
    renamed(82, "DCGM_FI_DEV_INFOROM_IMAGE_VER", Unit::Label, "DCGM_FI_DEV_INFOROM_IMAGE_VERSION", Unit::Label, Label, false, None,
        "Inforom image version.", Source::None("inforom versions are not read here")),
    // Profiling (DCP). Here from GPM: Hopper and newer, per GPU and per MIG
    // GPU instance; absent on Volta, Ampere and Ada, where only DCGM's own
    // profiling module measures them.
    pod(renamed(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", Ratio, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", Ratio, Gauge, true, F_GPM,
        "Time the graphics or compute engine was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Graphics), mig: |gi| mig_activity(gi, GpmMetric::Graphics) }), PerPod::SmTime),
    renamed(1002, "DCGM_FI_PROF_SM_ACTIVE", Ratio, "DCGM_FI_PROF_SM_UTIL_RATIO", Ratio, Gauge, false, F_GPM,
        "Time an SM had at least one warp, averaged over the SMs, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Sm), mig: |gi| mig_activity(gi, GpmMetric::Sm) }),
    renamed(1003, "DCGM_FI_PROF_SM_OCCUPANCY", Ratio, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Warps resident on an SM over the most it holds, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::SmOccupancy), mig: |gi| mig_activity(gi, GpmMetric::SmOccupancy) }),
    renamed(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Ratio, "DCGM_FI_PROF_TENSOR_UTIL_RATIO", Ratio, Gauge, true, F_GPM,
        "Time the tensor pipe was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Tensor), mig: |gi| mig_activity(gi, GpmMetric::Tensor) }),
    renamed(1005, "DCGM_FI_PROF_DRAM_ACTIVE", Ratio, "DCGM_FI_PROF_DRAM_UTIL_RATIO", Ratio, Gauge, true, F_GPM,
        "Time the memory interface was busy, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Dram), mig: |gi| mig_activity(gi, GpmMetric::Dram) }),
    renamed(1006, "DCGM_FI_PROF_PIPE_FP64_ACTIVE", Ratio, "DCGM_FI_PROF_FP64_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the FP64 pipe was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Fp64), mig: |gi| mig_activity(gi, GpmMetric::Fp64) }),
    renamed(1007, "DCGM_FI_PROF_PIPE_FP32_ACTIVE", Ratio, "DCGM_FI_PROF_FP32_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the FP32 pipe was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Fp32), mig: |gi| mig_activity(gi, GpmMetric::Fp32) }),
    renamed(1008, "DCGM_FI_PROF_PIPE_FP16_ACTIVE", Ratio, "DCGM_FI_PROF_FP16_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the FP16 pipe was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Fp16), mig: |gi| mig_activity(gi, GpmMetric::Fp16) }),
    renamed(1016, "DCGM_FI_PROF_PIPE_INT_ACTIVE", Ratio, "DCGM_FI_PROF_INT_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the integer pipe was active, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::Integer), mig: |gi| mig_activity(gi, GpmMetric::Integer) }),
    renamed(1013, "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", Ratio, "DCGM_FI_PROF_IMMA_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the tensor pipe ran integer (IMMA) instructions, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::TensorImma), mig: |gi| mig_activity(gi, GpmMetric::TensorImma) }),
    renamed(1014, "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", Ratio, "DCGM_FI_PROF_HMMA_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the tensor pipe ran half-precision (HMMA) instructions, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::TensorHmma), mig: |gi| mig_activity(gi, GpmMetric::TensorHmma) }),
    renamed(1015, "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", Ratio, "DCGM_FI_PROF_DFMA_UTIL_RATIO", Ratio, Gauge, false, F_GPM_ALL,
        "Time the tensor pipe ran double-precision (DFMA) instructions, 0 to 1 (GPM).", Source::Instance { gpu: |r| activity(r, GpmMetric::TensorDfma), mig: |gi| mig_activity(gi, GpmMetric::TensorDfma) }),
    same(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", BytesPerSecond, Gauge, true, F_PCIE,
        "PCIe bytes sent per second over the last interval (NVML's PCIe byte counters, R555+).", Source::Rate(|r| r.pcie.tx_bytes)),
    same(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", BytesPerSecond, Gauge, true, F_PCIE,
        "PCIe bytes received per second over the last interval (NVML's PCIe byte counters, R555+).", Source::Rate(|r| r.pcie.rx_bytes)),
    same(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", BytesPerSecond, Gauge, false, F_NVLINK,
        "NVLink bytes sent per second over the last interval, all links.", Source::Rate(|r| nvlink_bytes(r, true, false))),
    same(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", BytesPerSecond, Gauge, false, F_NVLINK,
        "NVLink bytes received per second over the last interval, all links.", Source::Rate(|r| nvlink_bytes(r, false, true))),
];

/// DCGM's used-frame-buffer ratio: used over total less reserved.
fn fb_used_ratio(r: &GpuReadings) -> Option<f64> {
    let m = r.memory?;
    let usable = m.total_bytes.saturating_sub(m.reserved_bytes.unwrap_or(0));
    (usable > 0).then(|| m.used_bytes as f64 / usable as f64)
}

/// The same of a MIG GPU instance, from its own memory.
fn mig_fb_used_ratio(gi: &MigGpuInstance) -> Option<f64> {
    let m = gi.memory?;
    let usable = m.total_bytes.saturating_sub(m.reserved_bytes.unwrap_or(0));
    (usable > 0).then(|| m.used_bytes as f64 / usable as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_and_ids_are_unique_and_shaped_like_dcgm_s() {
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for f in FIELDS {
            assert!(ids.insert(f.id), "field id {} twice", f.id);
            for n in [f.legacy, f.current] {
                assert!(
                    n.starts_with("DCGM_FI_")
                        && n.bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                    "{n}"
                );
            }
            assert!(names.insert(f.legacy), "{} twice", f.legacy);
            if f.current != f.legacy {
                assert!(names.insert(f.current), "{} twice", f.current);
            }
            assert!(f.help.ends_with('.'), "{}: help", f.legacy);
            assert_eq!(
                f.kind == FieldKind::Label,
                f.legacy_unit == Unit::Label,
                "{}",
                f.legacy
            );
            assert_eq!(
                f.legacy_unit == Unit::Label,
                f.current_unit == Unit::Label,
                "{}",
                f.legacy
            );
        }
        for (n, why) in EXPORTER_FIELDS {
            assert!(n.starts_with("DCGM_EXP_") && !why.is_empty());
            assert!(lookup(n).is_none());
        }
    }

    #[test]
    fn the_4_9_renames_are_the_23_defaults_11_of_them_to_base_units() {
        // dcgm-exporter 4.9.0's release notes: 23 default and
        // profiling-preset fields renamed (the driver-version label among
        // them), 11 of them to base units; the capacity in bytes joins the
        // defaults.
        let renamed: Vec<_> = FIELDS
            .iter()
            .filter(|f| f.default_legacy && f.legacy != f.current)
            .collect();
        assert_eq!(
            renamed.len(),
            23,
            "{:?}",
            renamed.iter().map(|f| f.legacy).collect::<Vec<_>>()
        );
        let rescaled = renamed
            .iter()
            .filter(|f| f.legacy_unit != f.current_unit)
            .count();
        assert_eq!(rescaled, 11);
        let defaults_legacy = FIELDS.iter().filter(|f| f.default_legacy).count();
        let defaults_current = FIELDS.iter().filter(|f| f.default_current).count();
        // default-counters.csv before 4.9: 26 uncommented rows; 4.9 adds
        // the capacity in bytes.
        assert_eq!(defaults_legacy, 26);
        assert_eq!(defaults_current, defaults_legacy + 1);
    }

    #[test]
    fn the_per_link_fields_have_dcgm_s_ids() {
        assert_eq!(LINK_FIELDS.len(), 54);
        for f in LINK_FIELDS {
            assert_eq!(
                super::super::names::lookup(f.legacy).map(|(_, id)| id),
                Some(f.id),
                "{}",
                f.legacy
            );
        }
    }

    #[test]
    fn the_per_engine_fields_have_dcgm_s_ids_and_gpm_s() {
        assert_eq!(ENGINE_FIELDS.len(), 18);
        for f in ENGINE_FIELDS {
            for name in [f.legacy, f.current] {
                assert_eq!(
                    super::super::names::lookup(name).map(|(_, id)| id),
                    Some(f.id),
                    "{name}"
                );
            }
        }
        let gpm = |name: &str| match all().find(|f| f.legacy == name).map(|f| f.source) {
            Some(Source::Engine(id)) => id,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(gpm("DCGM_FI_PROF_NVDEC0_ACTIVE"), 30);
        assert_eq!(gpm("DCGM_FI_PROF_NVDEC7_ACTIVE"), 37);
        assert_eq!(gpm("DCGM_FI_PROF_NVJPG0_ACTIVE"), 40);
        assert_eq!(gpm("DCGM_FI_PROF_NVJPG7_ACTIVE"), 47);
        assert_eq!(gpm("DCGM_FI_PROF_NVOFA1_ACTIVE"), 51);
    }

    #[test]
    fn units_convert_as_dcgm_computes_them() {
        assert_eq!(Megahertz.convert(1_980_000_000.0), 1980.0);
        assert_eq!(Mebibytes.convert(3.0 * 1_048_576.0 - 1.0), 2.0);
        assert_eq!(Percent.convert(0.37), 37.0);
        assert_eq!(Millijoules.convert(3277.357), 3_277_357.0);
        assert_eq!(Nanoseconds.convert(1.5), 1.5e9);
        // 100 MiB/s of NVLink traffic: 102400 KiB/s, DCGM's 102.
        assert_eq!(MegabytesPerSecond.convert(100.0 * 1_048_576.0), 102.0);
        assert_eq!(Ratio.convert(0.25), 0.25);
    }

    #[test]
    fn either_name_finds_the_field() {
        let (f, v) = lookup("DCGM_FI_DEV_FB_USED").unwrap();
        assert_eq!((f.id, v), (252, Variant::Legacy));
        let (f, v) = lookup("DCGM_FI_DEV_FB_USED_BYTES").unwrap();
        assert_eq!((f.id, v, f.unit(v)), (252, Variant::Current, Bytes));
        assert!(lookup("DCGM_FI_DEV_NOT_A_FIELD").is_none());
    }
}
