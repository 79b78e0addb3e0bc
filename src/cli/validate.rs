//! What the flags decide together: pod attribution's configuration (and
//! the flags that need it or an address), the families switched by flag or
//! environment, and `NVML_EXPORTER_*` variables that are no flag's.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::ArgMatches;

use super::flags::{Flags, PodLabelSource};
use super::{disable_id, enable_id};
use crate::family::{Family, FamilySet};
use crate::kubernetes::{self, AttributionConfig};

/// Pod attribution's configuration, when `--kubernetes` or its socket is
/// given; the flags that need it refused without it, and those that need
/// an address without one.
pub(super) fn kubernetes_config(
    flags: &Flags,
    cmd: &mut clap::Command,
) -> Result<Option<AttributionConfig>, clap::Error> {
    let on = flags.kubernetes || flags.pod_resources_socket.is_some();
    let wants = [
        (!flags.pod_labels.is_empty(), "--kubernetes.pod-labels"),
        (
            !flags.pod_label_regexes.is_empty(),
            "--kubernetes.pod-label-allowlist-regex",
        ),
        (flags.pod_uid, "--kubernetes.pod-uid"),
        (flags.dra_labels, "--kubernetes.dra-labels"),
        (flags.resource_slices, "--kubernetes.resource-slices"),
    ];
    if let (false, Some((_, flag))) = (on, wants.iter().find(|(w, _)| *w)) {
        return Err(cmd.error(
            ErrorKind::ArgumentConflict,
            format!("{flag} is part of pod attribution: add --kubernetes"),
        ));
    }
    if !on {
        return Ok(None);
    }
    let url = |flag: &str, value: &str| {
        kubernetes::parse_base_url(value).map_err(|e| format!("{flag}: {e}"))
    };
    // The API server as every pod finds it, unless named.
    let api_server = || -> Result<hyper::Uri, String> {
        match &flags.api_server {
            Some(u) => url("--kubernetes.api-server", u),
            None => match (
                std::env::var("KUBERNETES_SERVICE_HOST"),
                std::env::var("KUBERNETES_SERVICE_PORT"),
            ) {
                (Ok(host), Ok(port)) => {
                    let host = if host.contains(':') {
                        format!("[{host}]")
                    } else {
                        host
                    };
                    url("KUBERNETES_SERVICE_HOST", &format!("https://{host}:{port}"))
                }
                _ => Err(
                    "the API server is not known: set --kubernetes.api-server (outside a pod, \
                     KUBERNETES_SERVICE_HOST and _PORT are not set)"
                        .into(),
                ),
            },
        }
    };
    let node = |needed_by: &str| -> Result<String, String> {
        flags
            .node_name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| format!("{needed_by} needs --kubernetes.node-name (the chart sets it from spec.nodeName)"))
    };
    let invalid = |cmd: &mut clap::Command, msg: String| cmd.error(ErrorKind::InvalidValue, msg);
    if flags.dra_labels && flags.compat_dcgm.is_none() {
        return Err(cmd.error(
            ErrorKind::ArgumentConflict,
            "--kubernetes.dra-labels puts dcgm-exporter's dra_* labels on the DCGM series: it needs --compat.dcgm",
        ));
    }
    if flags.pod_uid && flags.compat_dcgm.is_none() {
        return Err(cmd.error(
            ErrorKind::ArgumentConflict,
            "--kubernetes.pod-uid puts dcgm-exporter's pod_uid on the DCGM series: it needs --compat.dcgm",
        ));
    }
    let pod_labels = if flags.pod_labels.is_empty()
        && flags.pod_label_regexes.is_empty()
        && !flags.pod_uid
    {
        None
    } else {
        // dcgm-exporter keeps a key's case; our own names are lower case.
        let naming = if flags.compat_dcgm.is_some() {
            kubernetes::Naming::Dcgm
        } else {
            kubernetes::Naming::Prometheus
        };
        let allow =
            kubernetes::Allowlist::parse_as(&flags.pod_labels, &flags.pod_label_regexes, naming)
                .map_err(|e| invalid(cmd, e.to_string()))?;
        let source = match flags.pod_labels_source {
            PodLabelSource::Kubelet => {
                let u = flags.kubelet_url.as_deref().ok_or_else(|| {
                    invalid(
                        cmd,
                        "--kubernetes.pod-labels.source=kubelet needs --kubernetes.kubelet-url \
                         (https://<node IP>:10250)"
                            .into(),
                    )
                })?;
                kubernetes::LabelSource::Kubelet(
                    url("--kubernetes.kubelet-url", u).map_err(|e| invalid(cmd, e))?,
                )
            }
            PodLabelSource::ApiServer => kubernetes::LabelSource::ApiServer {
                url: api_server().map_err(|e| invalid(cmd, e))?,
                node: node("--kubernetes.pod-labels.source=api-server")
                    .map_err(|e| invalid(cmd, e))?,
            },
        };
        Some(kubernetes::PodLabelsConfig {
            allow: std::sync::Arc::new(allow),
            source,
            uid: flags.pod_uid,
        })
    };
    let resource_slices = if flags.resource_slices {
        Some((
            api_server().map_err(|e| invalid(cmd, e))?,
            node("--kubernetes.resource-slices").map_err(|e| invalid(cmd, e))?,
        ))
    } else {
        None
    };
    Ok(Some(AttributionConfig {
        socket: flags
            .pod_resources_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(kubernetes::DEFAULT_SOCKET)),
        resource_names: kubernetes::DEFAULT_RESOURCE_NAMES
            .iter()
            .map(|s| s.to_string())
            .chain(flags.resource_names.iter().cloned())
            .collect(),
        refresh_interval: flags.kubernetes_refresh_interval,
        rootfs: flags.rootfs.clone(),
        procfs: flags.procfs.clone(),
        pod_labels,
        dra_labels: flags.dra_labels,
        resource_slices,
        ca_file: flags.kubernetes_ca_file.clone(),
        token_file: flags.kubernetes_token_file.clone(),
    }))
}

/// `--nvsentinel.socket` and its options; the options refused without
/// it. The node name is the flag's, else `NODE_NAME`'s, else empty (the
/// app puts the kernel's host name there).
pub(super) fn nvsentinel_settings(
    flags: &Flags,
    cmd: &mut clap::Command,
) -> Result<Option<crate::nvsentinel::Settings>, clap::Error> {
    let Some(socket) = flags.nvsentinel_socket.clone() else {
        if flags.nvsentinel_dry_run || flags.nvsentinel_node_name.is_some() {
            return Err(cmd.error(
                ErrorKind::MissingRequiredArgument,
                "--nvsentinel.dry-run and --nvsentinel.node-name shape the health events \
                 --nvsentinel.socket sends: they need --nvsentinel.socket",
            ));
        }
        return Ok(None);
    };
    let node_name = flags
        .nvsentinel_node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok())
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    Ok(Some(crate::nvsentinel::Settings {
        socket,
        node_name,
        dry_run: flags.nvsentinel_dry_run,
        timeout: flags.nvsentinel_timeout,
        guest: false,
    }))
}

/// Build-time variables (build.rs, the Dockerfile; cargo also sets them
/// for the processes it runs) an environment may carry along, and the
/// systemd unit's `NVML_EXPORTER_ARGS` (extra flags its `ExecStart` passes,
/// deploy/systemd/nvml-exporter.env), and the release and test scripts'
/// settings (scripts/cross, scripts/debian-rootfs, scripts/build-image,
/// tests/test_release.py), which a shell that ran them keeps exported:
/// not flags, not mistakes.
const BUILD_ENV: &[&str] = &[
    "NVML_EXPORTER_REVISION",
    "NVML_EXPORTER_BUILD_DATE",
    "NVML_EXPORTER_RUSTC",
    "NVML_EXPORTER_TARGET",
    "NVML_EXPORTER_SCENARIOS",
    "NVML_EXPORTER_ARGS",
    "NVML_EXPORTER_CROSS_CACHE",
    "NVML_EXPORTER_ROOTFS_CACHE",
    "NVML_EXPORTER_RELEASE_PREBUILT",
    "NVML_EXPORTER_OTHER_ARCH_EXE",
    "NVML_EXPORTER_IMAGE_WORKDIR",
];

/// `NVML_EXPORTER_*` variables in the environment that no flag reads.
pub(super) fn unknown_env(cmd: &clap::Command) -> Vec<String> {
    let known: std::collections::BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .filter_map(|e| e.to_str().map(str::to_string))
        .chain(BUILD_ENV.iter().map(|s| s.to_string()))
        .collect();
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("NVML_EXPORTER_") && !known.contains(k))
        .collect()
}

pub(super) fn families_from(matches: &ArgMatches) -> FamilySet {
    let mut set = FamilySet::defaults();
    for &f in Family::ALL {
        if let Some(on) = switched(matches, f) {
            set.set(f, on);
        }
    }
    set
}

/// Whether the family was switched on or off by flag or environment.
/// The flag or variable that asked for the kernel log by name: an explicit
/// `--collector.xid.kmsg` (true), or `--path.kmsg`, on the command line or
/// in the environment. The default (on, off under `--simulate`) asks
/// nothing.
pub(super) fn kernel_log_asked_by(matches: &ArgMatches) -> Option<&'static str> {
    let given = |id: &str| {
        matches.value_source(id).and_then(|s| match s {
            ValueSource::CommandLine => Some(true),
            ValueSource::EnvVariable => Some(false),
            _ => None,
        })
    };
    let kmsg = enable_id(Family::XidKmsg);
    if switched(matches, Family::XidKmsg) == Some(true) {
        match given(&kmsg) {
            Some(true) => return Some("--collector.xid.kmsg"),
            Some(false) => return Some("NVML_EXPORTER_COLLECTOR_XID_KMSG"),
            None => {}
        }
    }
    if switched(matches, Family::XidKmsg) == Some(false) {
        return None;
    }
    match given("kmsg_path") {
        Some(true) => Some("--path.kmsg"),
        Some(false) => Some("NVML_EXPORTER_PATH_KMSG"),
        None => None,
    }
}

pub(super) fn switched(matches: &ArgMatches, f: Family) -> Option<bool> {
    // `overrides_with` leaves only the last of the pair given on the
    // command line; an environment value for `--collector.x` is applied
    // even then, so the command-line `--no-` must be checked first.
    let disabled_on_cli = matches.get_flag(&disable_id(f))
        && matches.value_source(&disable_id(f)) == Some(ValueSource::CommandLine);
    if disabled_on_cli {
        Some(false)
    } else {
        matches.get_one::<bool>(&enable_id(f)).copied()
    }
}
