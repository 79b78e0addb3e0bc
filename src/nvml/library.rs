//! Which libnvidia-ml to load, decided once at start, and loading it. Only
//! configuration mistakes are errors at start (a `--nvml.library` that is
//! missing or not a loadable library, a `--simulate` scenario the
//! simulator cannot build); a system library that fails to load or
//! initialize, now or later, is retried by the supervisor.

use super::fields::DriverBranch;
use std::path::{Path, PathBuf};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::errors::error_name;
use super::raw;
use super::{LibrarySource, StartError};
use crate::snapshot::DriverInfo;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedLibrary {
    /// `libnvidia-ml.so.1` through the dynamic loader's search path, else
    /// the first of `search` that exists (looked at on each attempt: a
    /// driver container may install the library after the exporter
    /// started).
    System {
        search: Vec<PathBuf>,
    },
    Path(PathBuf),
    /// nvml-sim at `path`, told `scenario` before each initialization
    /// through its own export: no environment variable is set, since the
    /// process already runs other threads that may read the environment.
    Simulated {
        path: PathBuf,
        scenario: String,
    },
}

impl ResolvedLibrary {
    pub fn describe(&self) -> String {
        match self {
            ResolvedLibrary::System { .. } => SYSTEM_FILE.to_string(),
            ResolvedLibrary::Path(path) | ResolvedLibrary::Simulated { path, .. } => {
                path.display().to_string()
            }
        }
    }
}

pub const SIM_LIBRARY_ENV: &str = "NVML_SIM_LIBRARY";
/// What independent NVML clients set to choose the simulator's scenario;
/// the exporter itself never sets it (see `ResolvedLibrary::Simulated`).
pub const SIM_SCENARIO_ENV: &str = "NVML_SIM_SCENARIO";
const SIM_FILE: &str = "libnvml_sim.so";
const SYSTEM_FILE: &str = "libnvidia-ml.so.1";

/// Where the GPU Operator's driver container puts the driver's root file
/// system on the host (and so in a pod that mounts the host's `/run/nvidia`
/// there); the NVIDIA container toolkit's `driver-root` then points here.
pub const OPERATOR_DRIVER_ROOT: &str = "/run/nvidia/driver";

/// The directories, relative to a root, that drivers install
/// libnvidia-ml into: Debian and Ubuntu's multiarch directory of this
/// build's architecture (`/usr/lib/aarch64-linux-gnu` on Grace, which
/// dcgm-exporter missed: NVIDIA/dcgm-exporter#621), RHEL and SUSE's
/// `/usr/lib64`, the runfile installer's `/usr/lib`, and GKE's driver
/// installer directory.
fn library_dirs() -> [String; 4] {
    [
        format!("usr/lib/{}-linux-gnu", std::env::consts::ARCH),
        "usr/lib64".to_string(),
        "usr/lib".to_string(),
        "home/kubernetes/bin/nvidia/lib64".to_string(),
    ]
}

/// Where `libnvidia-ml.so.1` is looked for when the dynamic loader does not
/// find it (a container the NVIDIA toolkit did not inject the library
/// into, a host whose loader cache lacks the driver's directory), in
/// order: under the host root `rootfs` (`--path.rootfs`, when not `/`),
/// under the GPU Operator's driver root, under the driver root as the host
/// root holds it, then under `/`.
pub fn system_candidates(rootfs: &Path) -> Vec<PathBuf> {
    let root = Path::new("/");
    let mut bases = Vec::new();
    if rootfs != root {
        bases.push(rootfs.to_path_buf());
    }
    bases.push(PathBuf::from(OPERATOR_DRIVER_ROOT));
    if rootfs != root {
        bases.push(rootfs.join(OPERATOR_DRIVER_ROOT.trim_start_matches('/')));
    }
    bases.push(root.to_path_buf());
    let mut out = Vec::new();
    for r in &bases {
        for d in library_dirs() {
            let p = r.join(d).join(SYSTEM_FILE);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// `path` with its symbolic links followed as if `root` were `/`: a host's
/// `libnvidia-ml.so.1 -> /usr/lib64/libnvidia-ml.so.580.95.05` names a file
/// of the host, not of this container. `None` when a link leads nowhere or
/// the links loop.
fn resolve_under(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..16 {
        let Ok(target) = std::fs::read_link(&p) else {
            return p.is_file().then_some(p);
        };
        p = if target.is_absolute() {
            root.join(target.strip_prefix("/").ok()?)
        } else {
            p.parent()?.join(target)
        };
    }
    None
}

/// The first of `search` that is a library file, its links followed within
/// the root it was found under.
fn find_system(search: &[PathBuf]) -> Option<PathBuf> {
    search.iter().find_map(|p| {
        // The root is what is left of the path without its library
        // directory: `<root>/usr/lib64/libnvidia-ml.so.1`.
        let root = library_dirs().iter().find_map(|d| {
            let dir = p.parent()?;
            let s = dir.to_str()?.strip_suffix(d.as_str())?;
            Some(PathBuf::from(if s.is_empty() { "/" } else { s }))
        })?;
        resolve_under(&root, p)
    })
}

pub fn resolve(source: &LibrarySource) -> Result<ResolvedLibrary, StartError> {
    match source {
        LibrarySource::System { rootfs } => Ok(ResolvedLibrary::System {
            search: system_candidates(rootfs),
        }),
        LibrarySource::Path(p) => {
            if !p.is_file() {
                return Err(StartError::LibraryNotFound(p.clone()));
            }
            raw::check_loadable(p).map_err(|message| StartError::LibraryUnloadable {
                path: p.clone(),
                message,
            })?;
            Ok(ResolvedLibrary::Path(p.clone()))
        }
        LibrarySource::Simulated { scenario } => {
            let searched = simulator_candidates(
                std::env::var_os(SIM_LIBRARY_ENV).map(PathBuf::from),
                std::env::current_exe().ok().as_deref(),
            );
            let Some(path) = searched.iter().find(|p| p.is_file()) else {
                return Err(StartError::SimulatorNotFound { searched });
            };
            // The simulator checks the scenario when it is chosen: one it
            // could not build is a configuration mistake, said once at
            // start, not an NVML that stays down for ever.
            let sim = raw::select_sim_scenario(path, scenario).map_err(|message| {
                StartError::Scenario {
                    scenario: scenario.clone(),
                    message,
                }
            })?;
            // What the replay changed or left out of its file (identifiers
            // made unique, an excerpt): said once, at start.
            for warning in raw::sim_warnings(&sim) {
                tracing::warn!(scenario = %scenario, "{warning}");
            }
            Ok(ResolvedLibrary::Simulated {
                path: path.clone(),
                scenario: scenario.clone(),
            })
        }
    }
}

/// Where the simulated driver is looked for, in order: `$NVML_SIM_LIBRARY`,
/// next to the executable, `<exe dir>/../lib/nvml-exporter/`, and the parent
/// of the executable's directory (cargo's test binaries live in
/// `target/<profile>/deps/`).
pub fn simulator_candidates(env: Option<PathBuf>, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = env {
        if !p.as_os_str().is_empty() {
            out.push(p);
        }
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        out.push(dir.join(SIM_FILE));
        if let Some(up) = dir.parent() {
            out.push(up.join("lib").join("nvml-exporter").join(SIM_FILE));
            out.push(up.join(SIM_FILE));
        }
    }
    out
}

/// An initialized NVML and what it said about itself.
pub struct Loaded {
    pub nvml: Nvml,
    /// The file loaded, for the log (`libnvidia-ml.so.1` when the dynamic
    /// loader found it).
    pub library: String,
    pub driver: DriverInfo,
    /// The branch, for field ids and struct layouts that differ by branch.
    pub branch: DriverBranch,
    pub device_count: u32,
}

/// Loads and initializes the library; `Err` says why NVML is unavailable,
/// in words for the log.
pub fn initialize(lib: &ResolvedLibrary) -> Result<Loaded, String> {
    let mut library = lib.describe();
    let result = match lib {
        ResolvedLibrary::System { search } => match Nvml::init() {
            // Not found by the loader: the driver's own directories.
            Err(NvmlError::LibloadingError(inner)) => match find_system(search) {
                Some(p) => {
                    library = p.display().to_string();
                    Nvml::builder().lib_path(p.as_os_str()).init()
                }
                None => {
                    return Err(format!(
                        "cannot load {SYSTEM_FILE}: {inner}; not in {} either",
                        search
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            },
            other => other,
        },
        ResolvedLibrary::Path(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        ResolvedLibrary::Simulated { path, scenario } => {
            // Held until NVML has its own handle on the same library.
            let _sim = raw::select_sim_scenario(path, scenario).map_err(|e| {
                format!(
                    "cannot choose scenario {scenario:?} in {}: {e}",
                    path.display()
                )
            })?;
            Nvml::builder().lib_path(path.as_os_str()).init()
        }
    };
    let nvml = result.map_err(|e| match e {
        NvmlError::LibloadingError(inner) => format!("cannot load {library}: {inner}"),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("{library} is not a usable NVML library: {s}")
        }
        other => format!("nvmlInit failed ({}): {other}", error_name(&other)),
    })?;
    let device_count = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount_v2 failed: {e}"))?;
    let driver = DriverInfo {
        driver_version: nvml.sys_driver_version().unwrap_or_default(),
        nvml_version: nvml.sys_nvml_version().unwrap_or_default(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        }),
    };
    let branch = DriverBranch::parse(&driver.driver_version);
    Ok(Loaded {
        nvml,
        library,
        driver,
        branch,
        device_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_documented_order() {
        let got = simulator_candidates(
            Some("/x/sim.so".into()),
            Some(Path::new("/opt/bin/nvml-exporter")),
        );
        assert_eq!(
            got,
            vec![
                PathBuf::from("/x/sim.so"),
                PathBuf::from("/opt/bin/libnvml_sim.so"),
                PathBuf::from("/opt/lib/nvml-exporter/libnvml_sim.so"),
                PathBuf::from("/opt/libnvml_sim.so"),
            ]
        );
        assert_eq!(
            simulator_candidates(Some("".into()), None),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn the_system_search_covers_the_host_root_and_the_operator_driver_root() {
        let arch = format!("usr/lib/{}-linux-gnu", std::env::consts::ARCH);
        let got = system_candidates(Path::new("/host"));
        let want_first = [
            format!("/host/{arch}/libnvidia-ml.so.1"),
            "/host/usr/lib64/libnvidia-ml.so.1".into(),
            "/host/usr/lib/libnvidia-ml.so.1".into(),
            "/host/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.1".into(),
            format!("/run/nvidia/driver/{arch}/libnvidia-ml.so.1"),
        ];
        let got_text: Vec<String> = got.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(got_text[..5], want_first);
        assert!(got_text.contains(&format!("/host/run/nvidia/driver/{arch}/libnvidia-ml.so.1")));
        assert_eq!(
            got_text.last().unwrap(),
            "/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.1"
        );
        // With `/` as the root, nothing is searched twice.
        let plain = system_candidates(Path::new("/"));
        assert_eq!(plain.len(), 8, "{plain:?}");
        assert_eq!(
            plain[0],
            PathBuf::from(format!("/run/nvidia/driver/{arch}/libnvidia-ml.so.1"))
        );
    }

    #[test]
    fn links_are_followed_inside_the_root_they_were_found_under() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("usr/lib64");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnvidia-ml.so.580.95.05"), b"x").unwrap();
        std::os::unix::fs::symlink(
            "/usr/lib64/libnvidia-ml.so.580.95.05",
            dir.join("libnvidia-ml.so.1"),
        )
        .unwrap();
        let search = system_candidates(root.path());
        assert_eq!(
            find_system(&search),
            Some(dir.join("libnvidia-ml.so.580.95.05"))
        );
        // A link that leads nowhere under the root is not a library.
        std::fs::remove_file(dir.join("libnvidia-ml.so.580.95.05")).unwrap();
        assert_eq!(find_system(&search[..4]), None);
    }

    #[test]
    fn a_missing_explicit_library_is_a_start_error() {
        let err = resolve(&LibrarySource::Path(
            "/nonexistent/libnvidia-ml.so.1".into(),
        ))
        .unwrap_err();
        assert!(matches!(err, StartError::LibraryNotFound(_)));
        assert!(err.to_string().contains("/nonexistent/libnvidia-ml.so.1"));
    }

    #[test]
    fn resolving_the_simulator_leaves_the_environment_alone() {
        // Found as `target/debug/libnvml_sim.so` from `target/debug/deps/`.
        let exe = std::env::current_exe().unwrap();
        let sim = exe.parent().unwrap().parent().unwrap().join(SIM_FILE);
        assert!(
            sim.is_file(),
            "{} is missing: run `cargo build --workspace` first",
            sim.display()
        );
        let before = std::env::var_os(SIM_SCENARIO_ENV);
        let got = resolve(&LibrarySource::Simulated {
            scenario: "workstation".into(),
        })
        .unwrap();
        assert!(
            matches!(got, ResolvedLibrary::Simulated { ref scenario, .. } if scenario == "workstation")
        );
        assert_eq!(std::env::var_os(SIM_SCENARIO_ENV), before);
        // A scenario the simulator cannot build is a start error, with its
        // reason.
        let err = resolve(&LibrarySource::Simulated {
            scenario: "a scenario nobody has".into(),
        })
        .unwrap_err();
        assert!(matches!(err, StartError::Scenario { .. }), "{err}");
        assert!(err.to_string().contains("built-in scenarios are"), "{err}");
    }
}
