//! Driver personalities: which NVIDIA driver branch the library claims to
//! be. One table, [`BRANCHES`], holds every difference between branches
//! that the simulator models; each row is grounded in the `nvml.h` of that
//! branch (NVIDIA/go-nvml `gen/nvml/nvml.h`, one commit per CUDA release)
//! or, where the header and the shipped library disagree, in field reports.
//! `README.md` ("Driver personalities") cites the source of each cell.
//!
//! A scenario's `driver = "535.183.01"` selects the personality, and
//! `NVML_SIM_DRIVER` overrides it. Symbols a branch does not export are
//! removed from this library's dynamic symbol table (see [`hide`]), so
//! `dlsym` (libloading, ctypes) fails for them exactly as on that driver.

use std::sync::Mutex;

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
pub const MANAGED: [&str; 5] = [
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetProcessesUtilizationInfo",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetSramEccErrorStatus",
];

const R535_ABSENT: &[&str] = &[
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetProcessesUtilizationInfo",
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

/// The personality the library presents now. Set before symbols are
/// resolved (library constructor, `nvml_sim_select_scenario`) and at each
/// first `nvmlInit`.
static CURRENT: Mutex<Option<Personality>> = Mutex::new(None);

pub fn current() -> Personality {
    CURRENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Whether the current personality exports `symbol`: exports the branch
/// lacks answer `NVML_ERROR_FUNCTION_NOT_FOUND` if a client resolved them
/// before the personality changed.
pub fn exported(symbol: &str) -> bool {
    if !MANAGED.contains(&symbol) {
        return true;
    }
    current().exports(symbol)
}

/// The personality for a scenario key: `NVML_SIM_DRIVER` if set, else the
/// scenario's `driver`, else the default. Errors name the bad setting.
pub fn resolve(scenario: &crate::scenario::Scenario) -> Result<Personality, String> {
    if let Ok(env) = std::env::var("NVML_SIM_DRIVER") {
        if !env.trim().is_empty() {
            return Personality::parse(&env).map_err(|e| format!("NVML_SIM_DRIVER: {e}"));
        }
    }
    match &scenario.driver {
        Some(d) => Personality::parse(d),
        None => Ok(Personality::default()),
    }
}

/// Makes `p` the current personality and the dynamic symbol table agree
/// with it.
pub fn apply(p: Personality) {
    for name in MANAGED {
        hide(name, !p.exports(name));
    }
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
}

/// Best effort before any `nvmlInit`: the scenario the environment or a
/// host selected, with errors left for `nvmlInit` to report.
pub fn apply_early(scenario_key: Option<&str>) {
    let key = scenario_key
        .map(str::to_string)
        .or_else(|| std::env::var("NVML_SIM_SCENARIO").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| crate::scenario::DEFAULT.to_string());
    let p = crate::scenario::load(&key)
        .ok()
        .and_then(|s| resolve(&s).ok())
        .unwrap_or_default();
    apply(p);
}

/// Runs when the dynamic loader maps the library, before `dlopen` returns:
/// nvml-wrapper resolves every symbol right after, before its `nvmlInit`.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| apply_early(None));
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// Removes `name` from (or restores it to) this library's dynamic symbol
/// table. glibc's lookup skips a defined symbol whose value is 0, so
/// zeroing `st_value` in the mapped `.dynsym` makes `dlsym` fail for it,
/// as for a symbol the library never had; the original value is kept to
/// restore it.
fn hide(name: &str, hidden: bool) {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    elf::set_hidden(name, hidden);
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let _ = (name, hidden);
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
// The ELF structs keep the C field names of <elf.h>.
#[allow(clippy::struct_field_names)]
mod elf {
    use std::ffi::{c_char, c_int, c_long, c_void, CStr};
    use std::sync::Mutex;

    #[repr(C)]
    struct DlPhdrInfo {
        addr: usize,
        name: *const c_char,
        phdr: *const Phdr,
        phnum: u16,
    }

    #[repr(C)]
    struct Phdr {
        p_type: u32,
        p_flags: u32,
        p_offset: u64,
        p_vaddr: u64,
        p_paddr: u64,
        p_filesz: u64,
        p_memsz: u64,
        p_align: u64,
    }

    #[repr(C)]
    struct Dyn {
        d_tag: i64,
        d_val: u64,
    }

    #[repr(C)]
    struct Sym {
        st_name: u32,
        st_info: u8,
        st_other: u8,
        st_shndx: u16,
        st_value: u64,
        st_size: u64,
    }

    extern "C" {
        fn dl_iterate_phdr(
            cb: unsafe extern "C" fn(*mut DlPhdrInfo, usize, *mut c_void) -> c_int,
            data: *mut c_void,
        ) -> c_int;
        fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
        fn sysconf(name: c_int) -> c_long;
    }

    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: i64 = 0;
    const DT_HASH: i64 = 4;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    const PROT_READ: c_int = 1;
    const PROT_WRITE: c_int = 2;
    const PROT_EXEC: c_int = 4;
    const PF_X: u32 = 1;
    const PF_W: u32 = 2;
    const PF_R: u32 = 4;
    const SC_PAGESIZE: c_int = 30;

    /// A byte of this library's image, to find its program headers.
    static ANCHOR: u8 = 0;

    struct Table {
        symtab: usize,
        strtab: usize,
        count: usize,
        /// Protection of the segment holding `.dynsym`, restored after a
        /// store (and kept, execute included, during it).
        prot: c_int,
    }

    /// A managed symbol's name, `.dynsym` entry, original value and the
    /// protection of its page.
    type Entry = (String, usize, u64, c_int);

    static FOUND: Mutex<Option<Vec<Entry>>> = Mutex::new(None);

    unsafe extern "C" fn visit(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
        let info = &*info;
        let anchor = std::ptr::addr_of!(ANCHOR) as usize;
        let phdrs = std::slice::from_raw_parts(info.phdr, info.phnum as usize);
        let ours = phdrs.iter().any(|p| {
            let start = info.addr + p.p_vaddr as usize;
            p.p_type == PT_LOAD && (start..start + p.p_memsz as usize).contains(&anchor)
        });
        if !ours {
            return 0;
        }
        let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return 1;
        };
        // glibc relocates most `.dynamic` pointers in place; others are
        // still offsets from the load address.
        let abs = |v: u64| {
            let v = v as usize;
            if v < info.addr {
                v + info.addr
            } else {
                v
            }
        };
        let (mut symtab, mut strtab, mut hash, mut gnu_hash) = (0, 0, 0, 0);
        let mut d = (info.addr + dynamic.p_vaddr as usize) as *const Dyn;
        while (*d).d_tag != DT_NULL {
            match (*d).d_tag {
                DT_SYMTAB => symtab = abs((*d).d_val),
                DT_STRTAB => strtab = abs((*d).d_val),
                DT_HASH => hash = abs((*d).d_val),
                DT_GNU_HASH => gnu_hash = abs((*d).d_val),
                _ => {}
            }
            d = d.add(1);
        }
        if symtab == 0 || strtab == 0 {
            return 1;
        }
        let count = if hash != 0 {
            *(hash as *const u32).add(1) as usize
        } else if gnu_hash != 0 {
            gnu_symbol_count(gnu_hash)
        } else {
            // `.dynstr` follows `.dynsym` in every linker's default layout.
            (strtab.saturating_sub(symtab)) / std::mem::size_of::<Sym>()
        };
        let prot = phdrs
            .iter()
            .find(|p| {
                let start = info.addr + p.p_vaddr as usize;
                p.p_type == PT_LOAD && (start..start + p.p_memsz as usize).contains(&symtab)
            })
            .map_or(PROT_READ, |p| {
                let mut prot = 0;
                if p.p_flags & PF_R != 0 {
                    prot |= PROT_READ;
                }
                if p.p_flags & PF_W != 0 {
                    prot |= PROT_WRITE;
                }
                if p.p_flags & PF_X != 0 {
                    prot |= PROT_EXEC;
                }
                prot
            });
        *data.cast::<Option<Table>>() = Some(Table {
            symtab,
            strtab,
            count,
            prot,
        });
        1
    }

    /// The symbol count of a GNU hash table: past the highest bucket's
    /// chain end.
    unsafe fn gnu_symbol_count(table: usize) -> usize {
        let words = table as *const u32;
        let nbuckets = *words as usize;
        let symoffset = *words.add(1) as usize;
        let bloom_words = *words.add(2) as usize;
        let buckets = words.add(4 + bloom_words * 2);
        let chains = buckets.add(nbuckets);
        let mut last = (0..nbuckets)
            .map(|i| *buckets.add(i) as usize)
            .max()
            .unwrap_or(0);
        if last < symoffset {
            return symoffset;
        }
        while *chains.add(last - symoffset) & 1 == 0 {
            last += 1;
        }
        last + 1
    }

    fn locate() -> Vec<Entry> {
        let mut table: Option<Table> = None;
        // SAFETY: dl_iterate_phdr calls `visit` with valid program headers
        // of each loaded object; `visit` reads only this library's own.
        unsafe {
            dl_iterate_phdr(visit, std::ptr::addr_of_mut!(table).cast());
        }
        let Some(t) = table else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for i in 0..t.count {
            // SAFETY: i < the table's symbol count.
            unsafe {
                let sym = (t.symtab as *const Sym).add(i);
                let name = CStr::from_ptr((t.strtab + (*sym).st_name as usize) as *const c_char);
                if let Ok(name) = name.to_str() {
                    if super::MANAGED.contains(&name) && (*sym).st_value != 0 {
                        found.push((name.to_string(), sym as usize, (*sym).st_value, t.prot));
                    }
                }
            }
        }
        found
    }

    pub fn set_hidden(name: &str, hidden: bool) {
        let mut guard = FOUND.lock().unwrap_or_else(|e| e.into_inner());
        let found = guard.get_or_insert_with(locate);
        let Some((_, entry, original, prot)) = found.iter().find(|(n, ..)| n == name) else {
            return;
        };
        // SAFETY: `entry` is this library's mapped `.dynsym` entry for
        // `name`; its page is made writable only for the store.
        unsafe {
            let sym = *entry as *mut Sym;
            let value = if hidden { 0 } else { *original };
            if (*sym).st_value == value {
                return;
            }
            let page = sysconf(SC_PAGESIZE).max(4096) as usize;
            let start = *entry & !(page - 1);
            let len = (*entry + std::mem::size_of::<Sym>()) - start;
            if mprotect(start as *mut c_void, len, *prot | PROT_WRITE) != 0 {
                return;
            }
            std::ptr::addr_of_mut!((*sym).st_value).write_volatile(value);
            mprotect(start as *mut c_void, len, *prot);
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
