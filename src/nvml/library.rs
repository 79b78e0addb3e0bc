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
    /// `libnvidia-ml.so.1` through the dynamic loader's search path.
    System,
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
            ResolvedLibrary::System => "libnvidia-ml.so.1".to_string(),
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

pub fn resolve(source: &LibrarySource) -> Result<ResolvedLibrary, StartError> {
    match source {
        LibrarySource::System => Ok(ResolvedLibrary::System),
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
    pub driver: DriverInfo,
    /// The branch, for field ids and struct layouts that differ by branch.
    pub branch: DriverBranch,
    pub device_count: u32,
}

/// Loads and initializes the library; `Err` says why NVML is unavailable,
/// in words for the log.
pub fn initialize(lib: &ResolvedLibrary) -> Result<Loaded, String> {
    let result = match lib {
        ResolvedLibrary::System => Nvml::init(),
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
        NvmlError::LibloadingError(inner) => format!("cannot load {}: {inner}", lib.describe()),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("{} is not a usable NVML library: {s}", lib.describe())
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
