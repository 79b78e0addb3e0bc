//! Driver personalities: which NVIDIA driver version the library claims to
//! be, and how that version's NVML behaves. The behaviour is data,
//! `drivers.toml`: one row per branch the simulator models exactly, each
//! grounded in the `nvml.h` of that branch (NVIDIA/go-nvml
//! `gen/nvml/nvml.h`, one commit per CUDA release) or, where the header and
//! the shipped library disagree, in field reports (`README.md`, "The driver
//! it claims to be", cites each cell), plus the CUDA version of branches
//! not modelled.
//!
//! Any real driver version can be claimed: it keeps its own version
//! strings and behaves as the nearest modelled row at or below it (the
//! oldest row below them all).
//!
//! Plain data and pure functions: which personality the library presents
//! now, and the symbol table that follows it, are `driver`'s.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One modelled behaviour: a row of `drivers.toml` (the file's comments
/// say what each key means).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Branch {
    /// The first driver version with this behaviour.
    pub since: String,
    /// The version a scenario naming only the branch claims.
    pub version: String,
    pub cuda: String,
    /// The header the row follows (documentation).
    pub header: String,
    pub fi_max: u32,
    #[serde(default)]
    pub undefined: Vec<u32>,
    pub mig_query_capable_id: Option<u32>,
    #[serde(default)]
    pub cc_process_entries: bool,
    pub throttle_duration_ids: Option<[u32; 3]>,
    /// The first and last id of the power smoothing block (Blackwell).
    pub power_smoothing_ids: Option<[u32; 2]>,
    /// The newest `nvmlGpuFabricInfo_v*_t` that `nvmlDeviceGetGpuFabricInfoV`
    /// takes.
    pub fabric_info_version: Option<u32>,
    /// How many fields of the fabric health mask the header defines, in
    /// header order (degraded bandwidth, route recovery, route unhealthy,
    /// access timeout recovery, incorrect configuration).
    #[serde(default)]
    pub fabric_health_fields: u32,
    #[serde(default)]
    pub absent: Vec<String>,
    /// Exports that answer `NVML_ERROR_DEPRECATED`.
    #[serde(default)]
    pub deprecated: Vec<String>,
    /// Field ids whose entries answer `NVML_ERROR_DEPRECATED`.
    #[serde(default)]
    pub deprecated_fields: Vec<u32>,
}

impl Branch {
    /// The branch number: the first component of `since`.
    pub fn major(&self) -> u32 {
        Version::parse(&self.since).map_or(0, |v| v.parts[0])
    }
}

/// `drivers.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub default: String,
    /// Oldest first.
    pub branch: Vec<Branch>,
    /// CUDA versions of branches without a row, by branch number.
    pub cuda: BTreeMap<u32, String>,
}

const DRIVERS_TOML: &str = include_str!("../drivers.toml");

/// The compiled-in table. Its consistency (versions parse, rows ascend,
/// each `version` falls in its own row) is checked by the unit tests.
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        toml::from_str(DRIVERS_TOML).unwrap_or_else(|e| panic!("drivers.toml: {e}"))
    })
}

/// Every symbol some branch lacks: the ones `driver` hides and restores.
pub fn managed() -> &'static [String] {
    static MANAGED: OnceLock<Vec<String>> = OnceLock::new();
    MANAGED.get_or_init(|| {
        let mut all: Vec<String> = table()
            .branch
            .iter()
            .flat_map(|b| b.absent.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    })
}

/// Every export some branch answers `NVML_ERROR_DEPRECATED` for: the
/// calls that look at the personality for it.
pub fn ever_deprecated() -> &'static [String] {
    static DEPRECATED: OnceLock<Vec<String>> = OnceLock::new();
    DEPRECATED.get_or_init(|| {
        let mut all: Vec<String> = table()
            .branch
            .iter()
            .flat_map(|b| b.deprecated.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    })
}

/// A driver version's numeric components (`580.95.05` is 580, 95, 5):
/// versions compare component by component, as NVIDIA numbers them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub parts: Vec<u32>,
}

impl Version {
    /// One to three dot-separated decimal numbers (`535`, `536.40`,
    /// `535.183.01`); `None` for anything else.
    pub fn parse(text: &str) -> Option<Version> {
        let parts: Vec<u32> = text
            .split('.')
            .map(|p| {
                if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    None
                } else {
                    p.parse().ok()
                }
            })
            .collect::<Option<_>>()?;
        (1..=3).contains(&parts.len()).then_some(Version { parts })
    }
}

/// `"12.2"` as `nvmlSystemGetCudaDriverVersion` encodes it: 12020.
fn cuda_number(text: &str) -> i32 {
    let mut it = text.split('.').map(|p| p.parse::<i32>().unwrap_or(0));
    let major = it.next().unwrap_or(0);
    let minor = it.next().unwrap_or(0);
    major * 1000 + minor * 10
}

/// A branch's field id, translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Not defined by the branch's header.
    Absent,
    /// SW thermal (0), HW thermal (1) or HW power brake (2) clock-event
    /// duration, nanoseconds.
    ThrottleDuration(usize),
    /// The n-th field of the power smoothing block (Blackwell): 7 is
    /// `HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING` in every header.
    PowerSmoothing(u32),
    /// An id the branch still defines but answers `NVML_ERROR_DEPRECATED`
    /// for.
    Deprecated,
    /// The same meaning as this id in nvml-wrapper-sys's bindings.
    Id(u32),
}

/// A driver version the library claims: the exact version string and
/// the modelled behaviour it gets.
#[derive(Debug, Clone)]
pub struct Personality {
    pub branch: &'static Branch,
    pub version: String,
    /// `nvmlSystemGetCudaDriverVersion`.
    pub cuda: i32,
}

impl Default for Personality {
    fn default() -> Self {
        Personality::parse(&table().default).expect("drivers.toml's default is a version")
    }
}

impl Personality {
    /// A driver version (`"535.183.01"`, `"536.40"`, `"610.57.04"`), or a
    /// modelled branch alone (`"535"`, `"R535"`: that row's `version`).
    /// Only text that is not a driver version is refused.
    pub fn parse(text: &str) -> Result<Personality, crate::value::Invalid> {
        let t = text.trim();
        let t = t.strip_prefix(['R', 'r']).unwrap_or(t);
        let v = Version::parse(t)
            .filter(|v| v.parts[0] > 0)
            .ok_or_else(|| format!("driver `{text}` is not a driver version like 535.183.01"))?;
        let table = table();
        let version = if v.parts.len() == 1 {
            // The newest row of that branch (R580: 580.82's).
            table
                .branch
                .iter()
                .rev()
                .find(|b| b.major() == v.parts[0])
                .map(|b| b.version.clone())
                .ok_or_else(|| {
                    format!(
                        "driver `{text}`: R{} is not a modelled branch, so it has no default version: name a full version like {}.xx.yy (modelled: {})",
                        v.parts[0],
                        v.parts[0],
                        modelled_branches()
                    )
                })?
        } else {
            t.to_string()
        };
        let v = Version::parse(&version).expect("a row's version parses (unit tests)");
        let branch = table
            .branch
            .iter()
            .rev()
            .find(|b| Version::parse(&b.since).is_some_and(|s| s <= v))
            .unwrap_or(&table.branch[0]);
        Ok(Personality {
            branch,
            cuda: cuda_for(v.parts[0]),
            version,
        })
    }

    /// `nvmlSystemGetNVMLVersion`: the NVML API version (the CUDA major
    /// version, as `NVML_API_VERSION_STR` is in each header), then the
    /// driver's.
    pub fn nvml_version(&self) -> String {
        format!("{}.{}", self.cuda / 1000, self.version)
    }

    pub fn exports(&self, symbol: &str) -> bool {
        !self.branch.absent.iter().any(|a| a == symbol)
    }

    /// Whether the branch answers `NVML_ERROR_DEPRECATED` to this export.
    pub fn deprecates(&self, symbol: &str) -> bool {
        self.branch.deprecated.iter().any(|a| a == symbol)
    }

    /// The newest fabric info struct version the branch takes (`None`: it
    /// has no `nvmlDeviceGetGpuFabricInfoV`).
    pub fn fabric_info_version(&self) -> Option<u32> {
        self.branch.fabric_info_version
    }

    /// How many health mask fields the branch reports (the others answer
    /// "not supported", 0).
    pub fn fabric_health_fields(&self) -> u32 {
        self.branch.fabric_health_fields
    }

    pub fn throttle_duration_ids(&self) -> Option<[u32; 3]> {
        self.branch.throttle_duration_ids
    }

    /// Whether a field id exists in this branch's header.
    pub fn has_field(&self, id: u32) -> bool {
        id < self.branch.fi_max && id != 0 && !self.branch.undefined.contains(&id)
    }

    /// What a field id of this branch means, in terms of the ids of
    /// nvml-wrapper-sys's bindings that the simulator's field table uses.
    pub fn field(&self, id: u32) -> Field {
        if !self.has_field(id) {
            return Field::Absent;
        }
        if let Some(i) = self
            .throttle_duration_ids()
            .and_then(|ids| ids.iter().position(|&d| d == id))
        {
            return Field::ThrottleDuration(i);
        }
        if self.branch.deprecated_fields.contains(&id) {
            return Field::Deprecated;
        }
        if let Some([first, last]) = self.branch.power_smoothing_ids {
            if (first..=last).contains(&id) {
                return Field::PowerSmoothing(id - first);
            }
        }
        const MIG_QUERY: u32 = 199;
        const NVLINK_POWER_THRESHOLD_MAX: u32 = 200;
        match id {
            // Ids these bindings give to power smoothing or power sync that
            // the branch uses for something not modelled.
            251..=288 => Field::Absent,
            199 | 200 if Some(id) == self.branch.mig_query_capable_id => Field::Id(MIG_QUERY),
            199 | 200 => Field::Id(NVLINK_POWER_THRESHOLD_MAX),
            _ => Field::Id(id),
        }
    }
}

/// `R535, R545, ...`: the branches with a row.
fn modelled_branches() -> String {
    let mut majors: Vec<u32> = table().branch.iter().map(Branch::major).collect();
    majors.dedup();
    majors
        .iter()
        .map(|m| format!("R{m}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CUDA version of a branch: its row's, else the `[cuda]` table's,
/// else the nearest older branch's in either, else the oldest known.
fn cuda_for(major: u32) -> i32 {
    let table = table();
    let mut known: Vec<(u32, &str)> = table
        .branch
        .iter()
        .map(|b| (b.major(), b.cuda.as_str()))
        .chain(table.cuda.iter().map(|(m, c)| (*m, c.as_str())))
        .collect();
    known.sort_by_key(|(m, _)| *m);
    let pick = known
        .iter()
        .rev()
        .find(|(m, _)| *m <= major)
        .or(known.first())
        .map_or("0.0", |(_, c)| c);
    cuda_number(pick)
}

/// The version ranges and the behaviour each gets, one line per row, as
/// `nvml-sim drivers` prints them and README.md lists them.
pub fn listing() -> String {
    let rows = &table().branch;
    let mut out = String::new();
    for (i, b) in rows.iter().enumerate() {
        let range = match (i, rows.get(i + 1)) {
            (0, Some(next)) => format!("versions < {}", next.since),
            (_, Some(next)) => format!("{} <= v < {}", b.since, next.since),
            (_, None) => format!("v >= {}", b.since),
        };
        out.push_str(&format!(
            "{:<12} {:<24} header {:<18} CUDA {}\n",
            b.version, range, b.header, b.cuda
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        let t = table();
        assert!(!t.branch.is_empty());
        let mut last: Option<Version> = None;
        for b in &t.branch {
            let since = Version::parse(&b.since).unwrap_or_else(|| panic!("since {}", b.since));
            assert!(
                last.as_ref().is_none_or(|l| *l < since),
                "rows ascend: {}",
                b.since
            );
            last = Some(since);
            let p = Personality::parse(&b.version).unwrap();
            assert!(
                std::ptr::eq(p.branch, b),
                "{} falls in its own row",
                b.version
            );
            assert!(cuda_number(&b.cuda) >= 7000, "{}", b.cuda);
            assert!(
                !t.cuda.contains_key(&b.major()),
                "R{} has a row and a [cuda] entry",
                b.major()
            );
        }
        Personality::parse(&t.default).unwrap();
        // Every managed symbol is an export of this library.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
        let ffi: String = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        for name in managed().iter().chain(ever_deprecated()) {
            assert!(
                ffi.contains(&format!("fn {name}(")),
                "{name} is not exported"
            );
        }
    }

    #[test]
    fn the_readme_lists_every_row() {
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&listing()),
            "README.md, \"The driver it claims to be\", must hold `nvml-sim drivers`:\n{}",
            listing()
        );
    }

    #[test]
    fn versions_select_their_branch() {
        let p = Personality::parse("535.104.05").unwrap();
        assert_eq!(p.branch.major(), 535);
        assert_eq!(p.version, "535.104.05");
        assert_eq!(p.nvml_version(), "12.535.104.05");
        assert_eq!(Personality::parse("R570").unwrap().version, "570.133.20");
        assert_eq!(Personality::parse("580").unwrap().version, "580.95.05");
        assert_eq!(Personality::default().version, "560.35.03");
    }

    #[test]
    fn any_version_keeps_its_strings_and_takes_the_nearest_behaviour() {
        let p = |v| Personality::parse(v).unwrap();
        // Older than every row: R535's behaviour, its own CUDA.
        for (v, cuda, nvml) in [
            ("352.99", 7050, "7.352.99"),
            ("418.43", 10010, "10.418.43"),
            ("470.74", 11040, "11.470.74"),
            ("525.125.06", 12000, "12.525.125.06"),
        ] {
            assert_eq!(p(v).version, v);
            assert_eq!(p(v).cuda, cuda, "{v}");
            assert_eq!(p(v).nvml_version(), nvml);
            assert_eq!(p(v).branch.since, "535", "{v}");
        }
        // Windows versions have two components.
        assert_eq!(p("536.40").cuda, 12020);
        assert_eq!(p("536.40").branch.since, "535");
        assert_eq!(p("591.86").cuda, 13010);
        // Between rows: the row below.
        assert_eq!(p("565.57.01").branch.since, "560");
        assert_eq!(p("565.57.01").cuda, 12070);
        // R590 to R610 have rows of their own; a later version behaves as
        // the newest row, with its own strings.
        for (v, since, cuda) in [
            ("590.48.01", "590", 13010),
            ("595.58.03", "595", 13020),
            ("610.57.04", "610", 13030),
            ("615.10", "610", 13030),
        ] {
            assert_eq!(p(v).branch.since, since, "{v}");
            assert_eq!(p(v).cuda, cuda, "{v}");
            assert_eq!(p(v).version, v);
        }
        // A branch newer than every CUDA entry: the newest known CUDA.
        assert_eq!(p("700.10").cuda, 13030);
    }

    #[test]
    fn power_smoothing_lifetime_moves_with_the_numbering() {
        // HW circuitry lifetime remaining: 258 in R570 (f420a32:2371), 263
        // in R575 and R580 before 580.82 (62ce1e3:2622, 9da9e13:2717), 258
        // from 580.82 on (2a1f6c3:2740, 2976179:2804, 8b8585b:2830).
        let lifetime = |v: &str| {
            (251..303)
                .find(|&id| Personality::parse(v).unwrap().field(id) == Field::PowerSmoothing(7))
        };
        for (v, id) in [
            ("560.35.03", None),
            ("570.133.20", Some(258)),
            ("575.57.08", Some(263)),
            ("580.65.06", Some(263)),
            ("580.95.05", Some(258)),
            ("590.48.01", Some(258)),
            ("595.91.07", Some(258)),
            ("610.57.04", Some(258)),
        ] {
            assert_eq!(lifetime(v), id, "{v}");
        }
        // R575's power sync fields (254/255) are not power smoothing.
        assert_eq!(
            Personality::parse("575.57.08").unwrap().field(254),
            Field::Absent
        );
    }

    #[test]
    fn deprecated_calls_and_fields_by_branch() {
        let p = |v| Personality::parse(v).unwrap();
        assert!(!p("580.65.06").deprecates("nvmlDeviceGetDisplayMode"));
        assert!(p("580.95.05").deprecates("nvmlDeviceGetDisplayMode"));
        assert!(!p("580.95.05").deprecates("nvmlDeviceGetApplicationsClock"));
        for v in ["590.48.01", "595.91.07", "610.57.04"] {
            for call in [
                "nvmlDeviceGetDisplayMode",
                "nvmlDeviceGetApplicationsClock",
                "nvmlDeviceGetDefaultApplicationsClock",
                "nvmlDeviceGetPowerManagementMode",
            ] {
                assert!(p(v).deprecates(call), "{v} {call}");
            }
            // Deprecated, not removed: the symbol is still exported.
            assert!(p(v).exports("nvmlDeviceGetDisplayMode"));
        }
        assert!(!p("580.95.05").deprecates("nvmlDeviceGetPowerState"));
        assert!(p("590.44.01").deprecates("nvmlDeviceGetPowerState"));
        assert_eq!(p("560.35.03").field(226), Field::Id(226));
        assert_eq!(p("570.133.20").field(226), Field::Deprecated);
        for name in ever_deprecated() {
            assert!(
                managed().iter().all(|m| m != name),
                "{name} is never absent"
            );
        }
        assert_eq!(p("560.35.03").fabric_info_version(), Some(2));
        assert_eq!(p("580.65.06").fabric_info_version(), Some(3));
        assert_eq!(p("545.29.06").fabric_info_version(), None);
        assert_eq!(p("570.133.20").fabric_health_fields(), 4);
        assert_eq!(p("610.57.04").fabric_health_fields(), 5);
    }

    #[test]
    fn bad_versions_name_the_problem() {
        for bad in ["five", "535.x", "", "535..1", "1.2.3.4", "-535", "0.1"] {
            let e = Personality::parse(bad).unwrap_err();
            assert!(e.contains("is not a driver version"), "{bad}: {e}");
        }
        let e = Personality::parse("R470").unwrap_err();
        assert!(e.contains("R470 is not a modelled branch"), "{e}");
        assert!(e.contains("R535"), "{e}");
    }

    #[test]
    fn field_ids_by_branch() {
        let p = |v| Personality::parse(v).unwrap();
        assert!(!p("535.183.01").has_field(197));
        assert!(p("560.35.03").has_field(198));
        assert!(!p("560.35.03").has_field(230));
        assert!(p("570.133.20").has_field(230));
        assert!(!p("550.127.05").has_field(197));
        assert_eq!(p("550.127.05").field(199), Field::Id(199));
        assert_eq!(p("560.35.03").field(200), Field::Id(199));
        assert_eq!(p("560.35.03").field(199), Field::Id(200));
        assert_eq!(p("570.133.20").field(251), Field::PowerSmoothing(0));
        assert!(p("555.58.02").has_field(198) && !p("555.58.02").has_field(226));
        assert_eq!(p("555.58.02").field(200), Field::Id(199));
        assert_eq!(p("575.57.08").field(251), Field::ThrottleDuration(0));
        assert!(p("575.57.08").has_field(231));
        assert_eq!(p("610.57.04").field(270), Field::ThrottleDuration(1));
        assert_eq!(p("580.65.06").field(252), Field::ThrottleDuration(1));
        assert_eq!(p("580.95.05").field(252), Field::PowerSmoothing(1));
        assert_eq!(p("580.95.05").field(271), Field::ThrottleDuration(2));
        assert_eq!(p("570.133.20").throttle_duration_ids(), None);
        assert_eq!(
            p("580.65.06").throttle_duration_ids(),
            Some([251, 252, 253])
        );
        assert_eq!(
            p("580.95.05").throttle_duration_ids(),
            Some([269, 270, 271])
        );
    }
}
