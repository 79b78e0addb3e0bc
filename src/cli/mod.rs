//! Command-line flags, in the style of the Prometheus exporters
//! (`--web.listen-address`, `--collector.<name>`), each also readable from an
//! `NVML_EXPORTER_*` environment variable so a container or unit file can set
//! them without editing the command line. A flag on the command line wins
//! over its variable.
//!
//! Parsing never panics: every problem becomes a `clap::Error` that names the
//! flag and the value, which `main` prints before exiting non-zero.
//!
//! The flag table is [`flags`] (one field per flag, with its variable and
//! default), the value parsers it names are [`values`], and what the flags
//! decide together (flags that need one another, pod attribution, the
//! families switched) is [`validate`]; this file turns them into a
//! [`Config`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, CommandFactory, FromArgMatches, ValueEnum};

use crate::compat::Generation;
use crate::family::{Family, FamilySet};
use crate::kmsg::KernelLogConfig;
use crate::kubernetes::AttributionConfig;
use crate::metric::BuildInfo;
use crate::workloads::WorkloadsConfig;

mod flags;
mod validate;
mod values;

use flags::Flags;
use validate::{
    families_from, kernel_log_asked_by, kubernetes_config, nvsentinel_settings, switched,
    unknown_env,
};
pub use values::{parse_duration, MAX_LIMIT};

/// The default port. 9400 belongs to dcgm-exporter and 9835 to
/// nvidia_gpu_exporter; 9445 is free in the Prometheus default port
/// allocations wiki, so this exporter can run beside either of them while an
/// operator migrates.
pub const DEFAULT_PORT: u16 = 9445;

/// `--collector.xid.max-codes` by default: room for a MIG GPU's seven
/// instances each raising several application codes, while a driver that
/// sends ever new codes costs at most 2 x 64 + 2 series per GPU.
pub const DEFAULT_XID_MAX_CODES: usize = 64;

/// Scenario that a bare `--simulate` runs.
pub const DEFAULT_SCENARIO: &str = "dgx-h100";

/// The shortest `--collect.interval`. Below it a poll of a big node does
/// not finish before the next is due, and every driver call that takes a
/// few milliseconds would pass for a hung GPU.
pub const MIN_COLLECT_INTERVAL: Duration = Duration::from_millis(100);

/// The longest `--collect.interval` with measured use per workload: the
/// driver's per-process sample ring "wraps around after 10 seconds"
/// (open-gpu-kernel-modules `ctrl2080perf.h`; 14 s on an H200,
/// tests/device/h200-580.159.04), so a longer poll would lose samples.
pub const MAX_WORKLOAD_USAGE_INTERVAL: Duration = Duration::from_secs(10);

/// The shortest `--collect.stuck-deadline` given on the command line.
pub const MIN_STUCK_DEADLINE: Duration = Duration::from_millis(100);

/// The shortest stuck deadline derived from the interval (three of them):
/// NVML calls that take a few hundred milliseconds on a busy driver
/// (process lists, the first call after a GPU wakes) are slow, not hung.
pub const MIN_DERIVED_STUCK_DEADLINE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Logfmt,
    Json,
}

/// Where NVML comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Library {
    /// The driver's libnvidia-ml, looked for also under `rootfs`.
    System {
        rootfs: PathBuf,
    },
    Path(PathBuf),
    Simulated {
        scenario: String,
    },
}

/// `--web.listen-address`, validated but not resolved: a host name is looked
/// up when the listener binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// `None` for `:PORT`: every interface, IPv6 and IPv4 alike (as Go's
    /// listeners, so exporter-toolkit's, take it).
    pub host: Option<String>,
    pub port: u16,
}

impl ListenAddress {
    /// The string to hand to the resolver: `[::]:PORT` for `:PORT`, a
    /// dual-stack socket where the kernel allows one (the app falls back
    /// to `0.0.0.0:PORT` where IPv6 is off).
    pub fn to_socket_string(&self) -> String {
        match &self.host {
            None => format!("[::]:{}", self.port),
            Some(h) if h.contains(':') => format!("[{h}]:{}", self.port),
            Some(h) => format!("{h}:{}", self.port),
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            None => write!(f, ":{}", self.port),
            Some(h) if h.contains(':') => write!(f, "[{h}]:{}", self.port),
            Some(h) => write!(f, "{h}:{}", self.port),
        }
    }
}

/// Everything the flags decide, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every `--web.listen-address`, in order, each served.
    pub listen_addresses: Vec<ListenAddress>,
    /// `--web.systemd-socket`: serve the sockets systemd passes instead.
    pub systemd_socket: bool,
    /// `NVML_EXPORTER_*` variables that are no flag's: warned about once
    /// logging is up (a misspelt variable must not go unnoticed).
    pub unknown_env: Vec<String>,
    pub telemetry_path: String,
    pub collect_interval: Duration,
    pub stuck_deadline: Duration,
    pub library: Library,
    pub families: FamilySet,
    /// Distinct XID label sets per GPU before further ones fold into `other`.
    pub xid_max_codes: usize,
    /// The kernel log, when `--collector.xid.kmsg` (and `xid`) are on.
    pub kernel_log: Option<KernelLogConfig>,
    /// The flag or variable that asked for the kernel log by name
    /// (`--collector.xid.kmsg`, `--path.kmsg` or their variables), where
    /// one did: with the `xid` family off (by flag, or denied by the
    /// selection file) it has no effect, and that is warned about once at
    /// start (`app::run`).
    pub kernel_log_asked_by: Option<&'static str>,
    /// The state kept across restarts (`--state.path`), where kept.
    pub state: Option<StateConfig>,
    /// How long an application XID asks for a restart.
    pub restart_app_window: Duration,
    pub max_requests: usize,
    pub max_connections: usize,
    pub write_timeout: Duration,
    pub read_header_timeout: Duration,
    pub web_config_file: Option<PathBuf>,
    pub health_without_auth: bool,
    /// Pod attribution, when `--kubernetes` or its socket is given.
    pub kubernetes: Option<AttributionConfig>,
    /// Workload attribution, when `--workloads` or a mapping dir is given.
    pub workloads: Option<WorkloadsConfig>,
    /// NVSentinel health events, when `--nvsentinel.socket` is given.
    pub nvsentinel: Option<crate::nvsentinel::Settings>,
    /// dcgm-exporter's names (`--compat.dcgm`), when on.
    pub compat: Option<CompatConfig>,
    /// `--config.file`.
    pub config_file: Option<PathBuf>,
    /// `--config.check FILE`: check it and exit.
    pub config_check: Option<PathBuf>,
    pub log_level: LogLevel,
    pub log_format: LogFormat,
}

/// `--compat.dcgm` and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatConfig {
    pub generation: Generation,
    /// The dcgm-exporter release `--compat.dcgm` named where it is newer
    /// than any generation known here (served as `generation`, the newest).
    pub newer_release: Option<String>,
    pub only: bool,
    /// `--compat.dcgm.hostname`: `None` for the kernel's host name,
    /// `Some("")` for no host label.
    pub hostname: Option<String>,
}

/// `--state.path`, and the procfs whose boot id it is kept for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    pub path: PathBuf,
    pub procfs: PathBuf,
}

fn enable_id(f: Family) -> String {
    format!("collector.{}", f.name())
}

fn disable_id(f: Family) -> String {
    format!("no-collector.{}", f.name())
}

/// The full command, with one flag pair per collector family generated from
/// `Family::ALL` so a new family gets its switch without touching this file.
pub fn command() -> clap::Command {
    let mut cmd = Flags::command().long_version(BuildInfo::long_version());
    for &f in Family::ALL {
        let default = if f == Family::XidKmsg {
            // Switched on below the family table (`parse`).
            "enabled, except with --simulate"
        } else if f.enabled_by_default() {
            "enabled"
        } else {
            "disabled"
        };
        cmd = cmd
            .arg(
                Arg::new(enable_id(f))
                    .long(enable_id(f))
                    .env(format!(
                        "NVML_EXPORTER_COLLECTOR_{}",
                        f.name().to_ascii_uppercase().replace(['.', '-'], "_")
                    ))
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true")
                    .value_parser(BoolishValueParser::new())
                    .action(ArgAction::Set)
                    .value_name("BOOL")
                    .overrides_with(disable_id(f))
                    .help_heading("Collectors")
                    .help(format!(
                        "{} [default: {default}; off: --no-{}]",
                        f.help(),
                        enable_id(f)
                    )),
            )
            .arg(
                Arg::new(disable_id(f))
                    .long(disable_id(f))
                    .action(ArgAction::SetTrue)
                    .overrides_with(enable_id(f))
                    .hide(true),
            );
    }
    cmd
}

/// dcgm-exporter's variable for its HPC job mapping directory, which GPU
/// Operator sets on dcgm-exporter's DaemonSet when HPC job mapping is on.
pub const DCGM_HPC_JOB_MAPPING_DIR: &str = "DCGM_HPC_JOB_MAPPING_DIR";

/// The mapping directory `DCGM_HPC_JOB_MAPPING_DIR` names, read as
/// dcgm-exporter reads it (NVIDIA/dcgm-exporter `pkg/cmd/app.go`: the
/// `EnvVars` of `--hpc-job-mapping-dir`), so a unit file or pod spec moved
/// over from dcgm-exporter keeps its jobs. It comes after the flag and
/// this exporter's own variable; empty is unset, as dcgm-exporter takes an
/// empty directory for none.
fn dcgm_hpc_job_mapping_dir() -> Option<PathBuf> {
    std::env::var_os(DCGM_HPC_JOB_MAPPING_DIR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Parses arguments (the first is the program name) and the environment.
/// `Err` carries `--help` and `--version` too; `clap::Error::exit` prints
/// each the right way.
pub fn parse_from<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    let mut flags = Flags::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    if flags.slurm_mapping_dir.is_none() {
        flags.slurm_mapping_dir = dcgm_hpc_job_mapping_dir();
    }
    let mut families = families_from(&matches);
    let kubernetes = kubernetes_config(&flags, &mut cmd)?;
    let nvsentinel = nvsentinel_settings(&flags, &mut cmd)?;
    let state_path = match (&flags.state_path, &flags.simulate) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => PathBuf::new(),
        (None, None) => PathBuf::from(crate::state::DEFAULT_PATH),
    };
    let state = (!state_path.as_os_str().is_empty()).then(|| StateConfig {
        path: state_path,
        procfs: flags.procfs.clone(),
    });
    let simulated = flags.simulate.is_some();
    let library = match (flags.simulate, flags.nvml_library) {
        (Some(scenario), _) if scenario.is_empty() => {
            return Err(cmd.error(
                ErrorKind::InvalidValue,
                "--simulate: the scenario name is empty (leave the value out for dgx-h100)",
            ))
        }
        (Some(scenario), _) => Library::Simulated { scenario },
        (None, Some(path)) => Library::Path(path),
        (None, None) => Library::System {
            rootfs: flags.rootfs.clone(),
        },
    };
    let workloads = (flags.workloads
        || flags.slurm_mapping_dir.is_some()
        || !flags.container_engine_sockets.is_empty())
    .then_some(WorkloadsConfig {
        procfs: flags.procfs,
        rootfs: flags.rootfs,
        limit: if flags.workloads_limit == 0 {
            usize::MAX
        } else {
            flags.workloads_limit
        },
        refresh_interval: flags.workloads_refresh_interval,
        slurm_mapping_dir: flags.slurm_mapping_dir,
        container_engine_sockets: flags.container_engine_sockets,
        idle_threshold: flags.workloads_idle_threshold,
    });
    // Measured use comes with --workloads, unless switched off by name.
    if workloads.is_some() && switched(&matches, Family::WorkloadUsage).is_none() {
        families.set(Family::WorkloadUsage, true);
    }
    // The kernel log is read unless switched off by name (issue 36): the
    // verdict of NVLink5 XIDs and the codes NVML does not deliver need it.
    // Not with --simulate unless asked: this host's log is not the
    // simulated fleet's. A log that cannot be opened is said at start and
    // in nvml_exporter_kernel_log_up, and the exporter runs on without it.
    if switched(&matches, Family::XidKmsg).is_none() {
        families.set(Family::XidKmsg, !simulated);
    }

    if workloads.is_some()
        && !families.contains(Family::Processes)
        && !families.contains(Family::ProcessMemory)
    {
        return Err(cmd.error(
            ErrorKind::ArgumentConflict,
            "--workloads attributes the processes NVML lists: it needs the processes collector \
             (drop --no-collector.processes)",
        ));
    }
    if flags.compat_dcgm_only && flags.compat_dcgm.is_none() {
        return Err(cmd.error(
            ErrorKind::MissingRequiredArgument,
            "--compat.dcgm.only serves the DCGM series instead of this exporter's: it needs --compat.dcgm",
        ));
    }
    if families.contains(Family::WorkloadUsage)
        && flags.collect_interval > MAX_WORKLOAD_USAGE_INTERVAL
    {
        return Err(cmd.error(
            ErrorKind::ArgumentConflict,
            format!(
                "--collect.interval {:?} is longer than the 10s the driver keeps per-process \
                 samples for: measured use per workload (--workloads) would lose samples; \
                 use --collect.interval 10s or less, or --no-collector.workload_usage",
                flags.collect_interval
            ),
        ));
    }
    let kernel_log_asked_by = kernel_log_asked_by(&matches);
    let kernel_log = (families.contains(Family::Xid) && families.contains(Family::XidKmsg))
        .then_some(KernelLogConfig {
            path: flags.kmsg_path,
            max_codes: flags.xid_max_codes,
            resume_after: None,
        });
    Ok(Config {
        listen_addresses: flags.listen_addresses,
        systemd_socket: flags.systemd_socket,
        unknown_env: unknown_env(&cmd),
        telemetry_path: flags.telemetry_path,
        collect_interval: flags.collect_interval,
        stuck_deadline: flags.stuck_deadline.unwrap_or_else(|| {
            flags
                .collect_interval
                .saturating_mul(3)
                .max(MIN_DERIVED_STUCK_DEADLINE)
        }),
        library,
        families,
        xid_max_codes: flags.xid_max_codes,
        kernel_log,
        kernel_log_asked_by,
        state,
        restart_app_window: flags.restart_app_window,
        max_requests: flags.max_requests,
        max_connections: flags.max_connections,
        write_timeout: flags.write_timeout,
        read_header_timeout: flags.read_header_timeout,
        web_config_file: flags.web_config_file,
        health_without_auth: flags.health_without_auth,
        kubernetes,
        workloads,
        nvsentinel,
        compat: flags.compat_dcgm.map(|arg| CompatConfig {
            generation: arg.generation,
            newer_release: arg.newer_release,
            only: flags.compat_dcgm_only,
            hostname: flags.compat_dcgm_hostname,
        }),
        config_file: flags.config_file,
        config_check: flags.config_check,
        log_level: flags.log_level,
        log_format: flags.log_format,
    })
}

#[cfg(test)]
mod tests;
