//! Driver personalities: which NVIDIA driver branch the library claims to
//! be. One table, [`BRANCHES`], holds every difference between branches
//! that the simulator models; each row is grounded in the `nvml.h` of that
//! branch (NVIDIA/go-nvml `gen/nvml/nvml.h`, one commit per CUDA release)
//! or, where the header and the shipped library disagree, in field reports.
//! `README.md` ("Driver personalities") cites the source of each cell.
//!
//! Plain data and pure functions: which personality the library presents
//! now, and the symbol table that follows it, are `driver`'s.

/// One driver branch, as its header and library present it.
#[derive(Debug)]
pub struct Branch {
    /// The branch number: the driver version's first component.
    pub major: u32,
    /// The version string a scenario gets when it names only the branch.
    pub default_version: &'static str,
    /// `nvmlSystemGetCudaDriverVersion`: the CUDA version the branch ships with.
    pub cuda: i32,
    /// `NVML_API_VERSION_STR`, the first component of `nvmlSystemGetNVMLVersion`.
    pub nvml_api: u32,
    /// `NVML_FI_MAX` of the branch's header: field ids at or above it do
    /// not exist there.
    pub fi_max: u32,
    /// Ids below `fi_max` that the branch's header leaves undefined.
    pub undefined: &'static [u32],
    /// `NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE`: 199 in the
    /// R550 and R570+ headers, 200 in R555/R560 (where 199 is
    /// `NVML_FI_DEV_NVLINK_GET_POWER_THRESHOLD_MAX`).
    pub mig_query_capable_id: u32,
    /// `nvmlDevice*RunningProcesses_v3` write 32-byte entries (with
    /// `usedGpuCcProtectedMemory`) instead of `nvmlProcessInfo_v2_t`'s 24.
    pub cc_process_entries: bool,
    /// Where the SW thermal, HW thermal and HW power brake clock-event
    /// durations live, if the branch has them (`None`: ids 251-253 are
    /// something else, or do not exist).
    pub throttle_duration_ids: Option<[u32; 3]>,
    /// Exports of this library that the branch's driver does not have.
    pub absent: &'static [&'static str],
}

/// Every symbol some branch lacks: the ones [`hide`] manages.
pub const MANAGED: [&str; 4] = [
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetSramEccErrorStatus",
];

const R535_ABSENT: &[&str] = &[
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetSramEccErrorStatus",
];
const R550_ABSENT: &[&str] = &["nvmlDeviceGetDriverModel_v2", "nvmlDeviceGetTemperatureV"];
const R560_ABSENT: &[&str] = &["nvmlDeviceGetTemperatureV"];

/// The branches, oldest first. R580 is split at 580.82, where NVIDIA moved
/// the clock-event durations (see [`Personality::throttle_duration_ids`]).
pub const BRANCHES: [Branch; 6] = [
    Branch {
        major: 535,
        default_version: "535.183.01",
        cuda: 12020,
        nvml_api: 12,
        fi_max: 197,
        undefined: &[],
        mig_query_capable_id: 0,
        cc_process_entries: true,
        throttle_duration_ids: None,
        absent: R535_ABSENT,
    },
    Branch {
        major: 545,
        default_version: "545.29.06",
        cuda: 12030,
        nvml_api: 12,
        fi_max: 197,
        undefined: &[],
        mig_query_capable_id: 0,
        cc_process_entries: true,
        throttle_duration_ids: None,
        absent: R535_ABSENT,
    },
    Branch {
        major: 550,
        default_version: "550.127.05",
        cuda: 12040,
        nvml_api: 12,
        fi_max: 200,
        undefined: &[197, 198],
        mig_query_capable_id: 199,
        cc_process_entries: false,
        throttle_duration_ids: None,
        absent: R550_ABSENT,
    },
    Branch {
        major: 560,
        default_version: "560.35.03",
        cuda: 12060,
        nvml_api: 12,
        fi_max: 230,
        undefined: &[],
        mig_query_capable_id: 200,
        cc_process_entries: false,
        throttle_duration_ids: None,
        absent: R560_ABSENT,
    },
    Branch {
        major: 570,
        default_version: "570.133.20",
        cuda: 12080,
        nvml_api: 12,
        fi_max: 269,
        undefined: &[231, 232, 233, 234],
        mig_query_capable_id: 199,
        cc_process_entries: false,
        // 251-253 are power-smoothing fields in the R570 header.
        throttle_duration_ids: None,
        absent: &[],
    },
    Branch {
        major: 580,
        default_version: "580.95.05",
        cuda: 13000,
        nvml_api: 13,
        // The 13.0 header's; the 580.82+ numbering has 269-271 defined too.
        fi_max: 274,
        undefined: &[],
        mig_query_capable_id: 199,
        cc_process_entries: false,
        throttle_duration_ids: Some([251, 252, 253]),
        absent: &[],
    },
];

/// A branch's field id, translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Not defined by the branch's header.
    Absent,
    /// SW thermal (0), HW thermal (1) or HW power brake (2) clock-event
    /// duration, nanoseconds.
    ThrottleDuration(usize),
    /// A power-smoothing field: Blackwell only, no simulated board has it.
    PowerSmoothing,
    /// The same meaning as this id in nvml-wrapper-sys's bindings.
    Id(u32),
}

/// The default personality's branch: the driver nvml-sim always claimed.
pub const DEFAULT_BRANCH: u32 = 560;

/// A driver version the library claims: its branch row plus the exact
/// version string.
#[derive(Debug, Clone)]
pub struct Personality {
    pub branch: &'static Branch,
    pub version: String,
    minor: u32,
}

impl Default for Personality {
    fn default() -> Self {
        Personality::parse(
            BRANCHES
                .iter()
                .find(|b| b.major == DEFAULT_BRANCH)
                .map_or("560.35.03", |b| b.default_version),
        )
        .expect("the default branch is in the table")
    }
}

impl Personality {
    /// `"535.183.01"`, `"535"` or `"R535"` (the branch's default version).
    pub fn parse(text: &str) -> Result<Personality, String> {
        let t = text.trim();
        let t = t.strip_prefix(['R', 'r']).unwrap_or(t);
        let known = || {
            BRANCHES
                .iter()
                .map(|b| format!("R{}", b.major))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = t.split('.');
        let major: u32 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("driver `{text}` is not a driver version like 535.183.01"))?;
        let rest: Vec<&str> = parts.collect();
        if rest
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
            || rest.len() > 2
        {
            return Err(format!(
                "driver `{text}` is not a driver version like 535.183.01"
            ));
        }
        let branch = BRANCHES.iter().find(|b| b.major == major).ok_or_else(|| {
            format!(
                "driver `{text}`: branch R{major} is not simulated (known: {})",
                known()
            )
        })?;
        let version = if rest.is_empty() {
            branch.default_version.to_string()
        } else {
            t.to_string()
        };
        let minor = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        Ok(Personality {
            branch,
            version,
            minor,
        })
    }

    /// `nvmlSystemGetNVMLVersion`: the NVML API version, then the driver's.
    pub fn nvml_version(&self) -> String {
        format!("{}.{}", self.branch.nvml_api, self.version)
    }

    pub fn exports(&self, symbol: &str) -> bool {
        !self.branch.absent.contains(&symbol)
    }

    /// From 580.82 (CUDA 13.0 Update 1) the durations live at 269-271 and
    /// 251-253 are power smoothing again, as in R570 (the 13.1 header;
    /// nvml-wrapper 0.13's `detect_field_id_scheme` switches at 580.82).
    fn renumbered(&self) -> bool {
        self.branch.major > 580 || (self.branch.major == 580 && self.minor >= 82)
    }

    pub fn throttle_duration_ids(&self) -> Option<[u32; 3]> {
        if self.renumbered() {
            Some([269, 270, 271])
        } else {
            self.branch.throttle_duration_ids
        }
    }

    /// Whether a field id exists in this branch's header.
    pub fn has_field(&self, id: u32) -> bool {
        let fi_max = if self.renumbered() {
            289
        } else {
            self.branch.fi_max
        };
        id < fi_max && id != 0 && !self.branch.undefined.contains(&id)
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
        const MIG_QUERY: u32 = 199;
        const NVLINK_POWER_THRESHOLD_MAX: u32 = 200;
        match id {
            // Power smoothing (Blackwell) in every branch that has these ids.
            251..=273 => Field::PowerSmoothing,
            199 | 200 if id == self.branch.mig_query_capable_id => Field::Id(MIG_QUERY),
            199 | 200 => Field::Id(NVLINK_POWER_THRESHOLD_MAX),
            _ => Field::Id(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_select_their_branch() {
        let p = Personality::parse("535.104.05").unwrap();
        assert_eq!(p.branch.major, 535);
        assert_eq!(p.version, "535.104.05");
        assert_eq!(p.nvml_version(), "12.535.104.05");
        assert_eq!(Personality::parse("R570").unwrap().version, "570.133.20");
        assert_eq!(Personality::default().version, "560.35.03");
    }

    #[test]
    fn bad_versions_name_the_problem() {
        let e = Personality::parse("470.82.01").unwrap_err();
        assert!(e.contains("R470 is not simulated"), "{e}");
        assert!(e.contains("R535"), "{e}");
        assert!(Personality::parse("five").is_err());
        assert!(Personality::parse("535.x").is_err());
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
        assert_eq!(p("570.133.20").field(251), Field::PowerSmoothing);
        assert_eq!(p("580.65.06").field(252), Field::ThrottleDuration(1));
        assert_eq!(p("580.95.05").field(252), Field::PowerSmoothing);
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
