//! Command-line flags, in the style of the Prometheus exporters
//! (`--web.listen-address`, `--collector.<name>`), each also readable from an
//! `NVML_EXPORTER_*` environment variable so a container or unit file can set
//! them without editing the command line. A flag on the command line wins
//! over its variable.
//!
//! Parsing never panics: every problem becomes a `clap::Error` that names the
//! flag and the value, which `main` prints before exiting non-zero.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};

use crate::compat::Generation;
use crate::family::{Family, FamilySet};
use crate::kmsg::{self, KernelLogConfig};
use crate::kubernetes::{self, AttributionConfig};
use crate::metric::BuildInfo;
use crate::workloads::{self, WorkloadsConfig};

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

/// `--kubernetes.pod-labels.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PodLabelSource {
    Kubelet,
    ApiServer,
}

#[derive(Parser, Debug)]
#[command(
    name = "nvml-exporter",
    version,
    // The last of a repeated flag wins, as in most Unix tools, so a wrapper
    // script's defaults can be overridden by appending.
    args_override_self = true,
    about = "Prometheus exporter for NVIDIA GPUs and MIG instances, built on NVML.",
    after_help = "Every flag can also be set through the environment variable shown with it; \
                  a flag given on the command line wins over its variable.\n\
                  Collector families are switched with --collector.<name>[=BOOL] and \
                  --no-collector.<name>."
)]
struct Flags {
    /// Address to listen on: `:PORT` (every interface, IPv6 and IPv4),
    /// `HOST:PORT` or `[IPv6]:PORT`. Repeatable: every address given is
    /// served (the variable takes a comma-separated list). Port 9445 stays
    /// clear of dcgm-exporter (9400) and nvidia_gpu_exporter (9835).
    #[arg(
        long = "web.listen-address",
        env = "NVML_EXPORTER_WEB_LISTEN_ADDRESS",
        default_value = ":9445",
        value_parser = parse_listen_address,
        value_name = "ADDRESS",
        value_delimiter = ','
    )]
    listen_addresses: Vec<ListenAddress>,

    /// Serve on the sockets systemd passes (socket activation: LISTEN_FDS)
    /// instead of --web.listen-address.
    #[arg(
        long = "web.systemd-socket",
        env = "NVML_EXPORTER_WEB_SYSTEMD_SOCKET",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    systemd_socket: bool,

    /// Path under which the metrics are served.
    #[arg(
        long = "web.telemetry-path",
        env = "NVML_EXPORTER_WEB_TELEMETRY_PATH",
        default_value = "/metrics",
        value_parser = parse_telemetry_path,
        value_name = "PATH"
    )]
    telemetry_path: String,

    /// How often NVML is sampled (Prometheus duration: 500ms, 5s, 1m). The
    /// default of 5s is a third of the usual 15s scrape interval, so every
    /// scrape sees data at most 5s old, while eight GPUs cost only a few
    /// milliseconds of driver time per round.
    /// At least 100ms; at most 10s with --workloads, the span of the
    /// driver's per-process samples.
    #[arg(
        long = "collect.interval",
        env = "NVML_EXPORTER_COLLECT_INTERVAL",
        default_value = "5s",
        value_parser = parse_collect_interval,
        value_name = "DURATION"
    )]
    collect_interval: Duration,

    /// How long one driver call may block before its GPU is reported hung
    /// (`nvidia_gpu_up 0`, readings withdrawn); at least 100ms. Default:
    /// three collect intervals, at least 1s.
    #[arg(
        long = "collect.stuck-deadline",
        env = "NVML_EXPORTER_COLLECT_STUCK_DEADLINE",
        value_parser = parse_stuck_deadline,
        value_name = "DURATION"
    )]
    stuck_deadline: Option<Duration>,

    /// Most distinct XID label sets (code, and MIG instance where the event
    /// names one) per GPU. Each costs two series until the exporter
    /// restarts; events beyond it, and codes outside NVIDIA's range (0,
    /// above 999), are counted as xid="other" so sums stay exact.
    #[arg(
        long = "collector.xid.max-codes",
        env = "NVML_EXPORTER_COLLECTOR_XID_MAX_CODES",
        default_value_t = DEFAULT_XID_MAX_CODES,
        value_parser = parse_xid_max_codes,
        value_name = "N"
    )]
    xid_max_codes: usize,

    /// The kernel log that --collector.xid.kmsg reads: the kernel's
    /// /dev/kmsg, or a regular file of its records (followed as it grows).
    #[arg(
        long = "path.kmsg",
        env = "NVML_EXPORTER_PATH_KMSG",
        default_value = kmsg::DEFAULT_PATH,
        value_name = "PATH"
    )]
    kmsg_path: PathBuf,

    /// Where the exporter keeps, per boot, its XID counts, how far it has
    /// read the kernel log and what it knows of GPU resets, so that a
    /// restart neither lowers a counter nor pages an old event again
    /// (written atomically, at most a few KiB per GPU). A file, not a
    /// directory; `<PATH>.lock` keeps a second exporter off it. `--state.path=`
    /// (empty): nothing is kept. Default /var/lib/nvml-exporter/state.json;
    /// with --simulate, nothing unless given (a simulated fleet is not this
    /// host's).
    #[arg(
        long = "state.path",
        env = "NVML_EXPORTER_STATE_PATH",
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = "",
        value_parser = parse_state_path
    )]
    state_path: Option<PathBuf>,

    /// How long an application-level XID (catalog bucket RESTART_APP, e.g.
    /// 13, 31, 94) keeps a GPU's (or MIG instance's) verdict at
    /// restart_app after the last one.
    #[arg(
        long = "collector.verdict.restart-app-window",
        env = "NVML_EXPORTER_COLLECTOR_VERDICT_RESTART_APP_WINDOW",
        default_value = "10m",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    restart_app_window: Duration,

    /// Load this libnvidia-ml instead of the one the dynamic loader finds.
    /// The file must exist.
    #[arg(
        long = "nvml.library",
        env = "NVML_EXPORTER_NVML_LIBRARY",
        value_name = "PATH",
        conflicts_with = "simulate"
    )]
    nvml_library: Option<PathBuf>,

    #[arg(
        long = "simulate",
        help = concat!(
            "Run on the simulated driver (nvml-sim) instead of a real one: a built-in scenario (",
            env!("NVML_EXPORTER_SCENARIOS"),
            "), a scenario file, or a capture of a real host (`nvidia-smi -q -x` or `nvidia-smi -q` \
             output), replayed. A bare --simulate runs dgx-h100"
        ),
        env = "NVML_EXPORTER_SIMULATE",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = DEFAULT_SCENARIO,
        value_name = "SCENARIO"
    )]
    simulate: Option<String>,

    /// Most scrapes served at once; beyond it a scrape gets 503 at once
    /// instead of queueing. 0 means no limit.
    #[arg(
        long = "web.max-requests",
        env = "NVML_EXPORTER_WEB_MAX_REQUESTS",
        default_value_t = 40,
        value_parser = parse_limit,
        value_name = "N"
    )]
    max_requests: usize,

    /// Most connections open at once, every listen address together; beyond
    /// it four more connections are kept for /-/healthy and /-/ready, and any
    /// other gets a canned 503 and is closed. Bounds memory and file descriptors under a connection
    /// flood; 512 stays clear of the usual 1024 descriptor limit. 0 means no
    /// limit.
    #[arg(
        long = "web.max-connections",
        env = "NVML_EXPORTER_WEB_MAX_CONNECTIONS",
        default_value_t = 512,
        value_parser = parse_limit,
        value_name = "N"
    )]
    max_connections: usize,

    /// How long an answer may wait for a client that does not read it: once
    /// the client stops taking the response, it must take all of it within
    /// this time or the connection is closed. Prometheus' default scrape
    /// timeout; a scrape still unsent after it has been given up anyway.
    #[arg(
        long = "web.write-timeout",
        env = "NVML_EXPORTER_WEB_WRITE_TIMEOUT",
        default_value = "10s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    write_timeout: Duration,

    /// How long a client may take to send a request's headers (also how long
    /// an idle keep-alive connection is kept). Kept below the usual 15s scrape
    /// interval so a scraper sees the close before it reuses the connection.
    #[arg(
        long = "web.read-header-timeout",
        env = "NVML_EXPORTER_WEB_READ_HEADER_TIMEOUT",
        default_value = "10s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    read_header_timeout: Duration,

    /// exporter-toolkit web configuration file (TLS, basic auth, headers).
    #[arg(
        long = "web.config.file",
        env = "NVML_EXPORTER_WEB_CONFIG_FILE",
        value_name = "PATH"
    )]
    web_config_file: Option<PathBuf>,

    /// Answer /-/healthy without basic auth, for probes that cannot send
    /// credentials (only matters when the web config sets basic_auth_users).
    #[arg(
        long = "web.health-without-auth",
        env = "NVML_EXPORTER_WEB_HEALTH_WITHOUT_AUTH",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    health_without_auth: bool,

    /// Attribute GPUs and MIG devices to Kubernetes pods through the
    /// kubelet's pod-resources API (adds `nvidia_gpu_pod_share_ratio` and
    /// `nvidia_gpu_mig_pod_share_ratio`).
    #[arg(
        long = "kubernetes",
        env = "NVML_EXPORTER_KUBERNETES",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    kubernetes: bool,

    /// The kubelet's pod-resources socket; setting it turns on
    /// --kubernetes [default: /var/lib/kubelet/pod-resources/kubelet.sock].
    #[arg(
        long = "kubernetes.pod-resources-socket",
        env = "NVML_EXPORTER_KUBERNETES_POD_RESOURCES_SOCKET",
        value_name = "PATH"
    )]
    pod_resources_socket: Option<PathBuf>,

    /// A further resource name whose devices are GPUs or MIG devices, on top
    /// of nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*; a
    /// trailing `*` matches any suffix. Repeatable.
    #[arg(
        long = "kubernetes.resource-name",
        env = "NVML_EXPORTER_KUBERNETES_RESOURCE_NAME",
        value_name = "NAME",
        value_delimiter = ','
    )]
    resource_names: Vec<String>,

    /// How often pod attribution is refreshed from the kubelet; an ended
    /// pod's attribution disappears within one refresh.
    #[arg(
        long = "kubernetes.refresh-interval",
        env = "NVML_EXPORTER_KUBERNETES_REFRESH_INTERVAL",
        default_value = "10s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    kubernetes_refresh_interval: Duration,

    /// Copy these pod labels onto the pod attribution and workload series
    /// (never onto device series): label keys, or patterns with `*`
    /// (`app.kubernetes.io/*`); repeatable. At most 10 per pod; each key
    /// becomes a lower snake case label name (with --compat.dcgm, its case
    /// kept, as dcgm-exporter prints it), and one the exporter's own
    /// series carry is refused. Read as --kubernetes.pod-labels.source says.
    #[arg(
        long = "kubernetes.pod-labels",
        env = "NVML_EXPORTER_KUBERNETES_POD_LABELS",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pod_labels: Vec<String>,

    /// Also copy the pod labels whose key one of these regular expressions
    /// matches anywhere (dcgm-exporter's flag and semantics: `^team$`,
    /// `app\.kubernetes\.io/.*`); repeatable, within the same bounds. With
    /// --compat.dcgm every copied key keeps its case (`costCenter`), as
    /// dcgm-exporter prints it.
    #[arg(
        long = "kubernetes.pod-label-allowlist-regex",
        alias = "kubernetes-pod-label-allowlist-regex",
        env = "NVML_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        value_name = "REGEX"
    )]
    pod_label_regexes: Vec<String>,

    /// With --compat.dcgm: put the pod's UID (`metadata.uid`) as `pod_uid`
    /// on the series of the pods attributed a device, as dcgm-exporter's
    /// --kubernetes-enable-pod-uid does (that spelling accepted). Read from
    /// where --kubernetes.pod-labels.source says. Off by default.
    #[arg(
        long = "kubernetes.pod-uid",
        alias = "kubernetes-enable-pod-uid",
        env = "NVML_EXPORTER_KUBERNETES_POD_UID"
    )]
    pod_uid: bool,

    /// With --compat.dcgm: put the DRA claim's attributes (dra_claim_name,
    /// dra_claim_namespace, dra_driver_name, dra_pool_name,
    /// dra_device_name; on a MIG device dra_mig_profile and
    /// dra_mig_device_uuid) on the DCGM series of a device a pod holds
    /// through a claim of NVIDIA's GPU driver, as dcgm-exporter's
    /// --kubernetes-enable-dra does (that spelling accepted). Off by default.
    #[arg(
        long = "kubernetes.dra-labels",
        alias = "kubernetes-enable-dra",
        env = "NVML_EXPORTER_KUBERNETES_DRA_LABELS"
    )]
    dra_labels: bool,

    /// Where pod labels are read: `kubelet` (its authenticated /pods at
    /// --kubernetes.kubelet-url: this node's pods only, RBAC get
    /// nodes/pods, Kubernetes 1.33+) or `api-server` (the pods of
    /// --kubernetes.node-name, RBAC list pods in every namespace).
    #[arg(
        long = "kubernetes.pod-labels.source",
        env = "NVML_EXPORTER_KUBERNETES_POD_LABELS_SOURCE",
        value_enum,
        default_value = "kubelet",
        value_name = "SOURCE"
    )]
    pod_labels_source: PodLabelSource,

    /// The kubelet's HTTPS API on this node, e.g. https://10.0.0.7:10250
    /// (the chart sets it from the node's IP).
    #[arg(
        long = "kubernetes.kubelet-url",
        env = "NVML_EXPORTER_KUBERNETES_KUBELET_URL",
        value_name = "URL"
    )]
    kubelet_url: Option<String>,

    /// Where a DRA claim's CDI spec does not say which GPU it holds, look
    /// its device up in this node's ResourceSlices (API server, RBAC list
    /// resourceslices; read when needed, cached).
    #[arg(
        long = "kubernetes.resource-slices",
        env = "NVML_EXPORTER_KUBERNETES_RESOURCE_SLICES",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    resource_slices: bool,

    /// This node's name, for the API server reads (the chart sets it from
    /// spec.nodeName).
    #[arg(
        long = "kubernetes.node-name",
        env = "NVML_EXPORTER_KUBERNETES_NODE_NAME",
        value_name = "NAME"
    )]
    node_name: Option<String>,

    /// The API server [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
    /// as in every pod].
    #[arg(
        long = "kubernetes.api-server",
        env = "NVML_EXPORTER_KUBERNETES_API_SERVER",
        value_name = "URL"
    )]
    api_server: Option<String>,

    /// The CA bundle the kubelet's and the API server's certificates are
    /// checked against.
    #[arg(
        long = "kubernetes.ca-file",
        env = "NVML_EXPORTER_KUBERNETES_CA_FILE",
        default_value = kubernetes::DEFAULT_CA_FILE,
        value_name = "PATH"
    )]
    kubernetes_ca_file: PathBuf,

    /// The bearer token sent to the kubelet and the API server, read again
    /// before every request.
    #[arg(
        long = "kubernetes.token-file",
        env = "NVML_EXPORTER_KUBERNETES_TOKEN_FILE",
        default_value = kubernetes::DEFAULT_TOKEN_FILE,
        value_name = "PATH"
    )]
    kubernetes_token_file: PathBuf,

    /// Attribute GPUs and MIG devices to the workloads of their processes
    /// (Slurm jobs, Docker, Podman and containerd containers, Kubernetes
    /// pods, systemd services, login sessions) from the processes' cgroups
    /// under --path.procfs (adds `nvidia_gpu_workload_share_ratio`,
    /// `nvidia_gpu_mig_workload_share_ratio` and
    /// `nvidia_gpu_workload_memory_used_bytes`, and with the
    /// workload_usage collector measured SM time, energy, time held and
    /// held idle per workload). Needs the host's pids: host PID namespace
    /// or the host's procfs.
    #[arg(
        long = "workloads",
        env = "NVML_EXPORTER_WORKLOADS",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    workloads: bool,

    /// The host's procfs, where the pids NVML lists are found (a container
    /// mounts the host's /proc and points here).
    #[arg(
        long = "path.procfs",
        env = "NVML_EXPORTER_PATH_PROCFS",
        default_value = workloads::DEFAULT_PROCFS,
        value_name = "PATH"
    )]
    procfs: PathBuf,

    /// The host's root file system; workload attribution reads user names
    /// from its etc/passwd, and libnvidia-ml.so.1 is looked for in its
    /// library directories when the dynamic loader does not find it.
    #[arg(
        long = "path.rootfs",
        env = "NVML_EXPORTER_PATH_ROOTFS",
        default_value = workloads::DEFAULT_ROOTFS,
        value_name = "PATH"
    )]
    rootfs: PathBuf,

    /// Most workload holdings (one workload on one GPU or MIG device)
    /// exported; beyond it the rest are left out and counted in
    /// `nvml_exporter_workloads_dropped`. Counters of ended workloads are
    /// kept 5 minutes, giving their slots to new holdings first. 0 means no
    /// limit.
    #[arg(
        long = "workloads.limit",
        env = "NVML_EXPORTER_WORKLOADS_LIMIT",
        default_value_t = 256,
        value_parser = parse_limit,
        value_name = "N"
    )]
    workloads_limit: usize,

    /// How often the pids of known GPU processes are read again (new pids
    /// are read at once); a process moved to another cgroup is corrected
    /// within one refresh.
    #[arg(
        long = "workloads.refresh-interval",
        env = "NVML_EXPORTER_WORKLOADS_REFRESH_INTERVAL",
        default_value = "10s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    workloads_refresh_interval: Duration,

    /// A workload holding a GPU or MIG device is idle while its measured SM
    /// use, averaged since it went idle, stays below this part of the
    /// device (`nvidia_gpu_workload_held_idle_seconds`).
    #[arg(
        long = "workloads.idle-threshold",
        env = "NVML_EXPORTER_WORKLOADS_IDLE_THRESHOLD",
        default_value_t = 0.01,
        value_parser = parse_ratio,
        value_name = "RATIO"
    )]
    workloads_idle_threshold: f64,

    /// Also read Slurm jobs from dcgm-exporter's --hpc-job-mapping-dir
    /// format (one file per GPU index, job ids one per line, written by a
    /// prolog); setting it turns on --workloads. With --compat.dcgm the
    /// DCGM series of a device a file names carry `hpc_job`, one series
    /// per job, as dcgm-exporter's (that spelling accepted; a MIG GPU
    /// instance's file is `<gpu>.<gpu instance>`).
    #[arg(
        long = "workloads.slurm-mapping-dir",
        alias = "hpc-job-mapping-dir",
        env = "NVML_EXPORTER_WORKLOADS_SLURM_MAPPING_DIR",
        value_name = "DIR"
    )]
    slurm_mapping_dir: Option<PathBuf>,

    /// Name Docker and Podman containers (label `container_name`) by asking
    /// this engine API socket (e.g. /var/run/docker.sock,
    /// /run/podman/podman.sock) `GET /containers/<id>/json`, nothing else.
    /// Off by default: the socket grants far more than reading; prefer a
    /// proxy that allows only container inspection. Repeatable; setting it
    /// turns on --workloads.
    #[arg(
        long = "workloads.container-engine-socket",
        env = "NVML_EXPORTER_WORKLOADS_CONTAINER_ENGINE_SOCKET",
        value_name = "PATH",
        value_delimiter = ','
    )]
    container_engine_sockets: Vec<PathBuf>,

    /// Also serve dcgm-exporter's DCGM series (DCGM_FI_DEV_GPU_UTIL, ...),
    /// named as dcgm-exporter GENERATION names them: 4.8 (4.8.3 and 4.8.4,
    /// the default when bare: what GPU Operator v26.7 ships), 4.8.2 (3.5.0
    /// to 4.8.2: host label Hostname), 3.4 (3.4.2 and earlier: no
    /// pci_bus_id) or 4.9 (DCGM 4.7's names, in base units); or the
    /// release as dcgm-exporter names it (4.5.1-4.8.0, 4.8.4, an image
    /// tag). See docs/migrating-from-dcgm-exporter.md.
    #[arg(
        long = "compat.dcgm",
        env = "NVML_EXPORTER_COMPAT_DCGM",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "4.8",
        value_parser = parse_generation,
        value_name = "GENERATION"
    )]
    compat_dcgm: Option<Generation>,

    /// Serve the DCGM series instead of this exporter's nvidia_* families
    /// (its own nvml_exporter_*, process_* and promhttp_* stay). Needs
    /// --compat.dcgm.
    #[arg(
        long = "compat.dcgm.only",
        env = "NVML_EXPORTER_COMPAT_DCGM_ONLY",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    compat_dcgm_only: bool,

    /// The value of the DCGM series' host label (dcgm-exporter's
    /// NODE_NAME); empty: no host label [default: the kernel's host name].
    #[arg(
        long = "compat.dcgm.hostname",
        env = "NVML_EXPORTER_COMPAT_DCGM_HOSTNAME",
        value_name = "NAME"
    )]
    compat_dcgm_hostname: Option<String>,

    /// Selection file: families and metrics allowed and denied, labels
    /// dropped, an interval per family, and the DCGM fields served (YAML,
    /// version 1; or a dcgm-exporter counters CSV). Re-read on SIGHUP and
    /// when it changes; a bad one keeps the last good one
    /// (docs/operations.md).
    #[arg(
        long = "config.file",
        env = "NVML_EXPORTER_CONFIG_FILE",
        value_name = "PATH"
    )]
    config_file: Option<PathBuf>,

    /// Check a selection file and print the series it yields per GPU and
    /// per node on this host (or on --simulate SCENARIO), beside the flags
    /// alone; then exit (0 if the file is valid).
    #[arg(
        long = "config.check",
        env = "NVML_EXPORTER_CONFIG_CHECK",
        value_name = "FILE",
        conflicts_with = "config_file"
    )]
    config_check: Option<PathBuf>,

    /// Least severe log level written.
    #[arg(
        long = "log.level",
        env = "NVML_EXPORTER_LOG_LEVEL",
        default_value = "info",
        value_enum
    )]
    log_level: LogLevel,

    /// Log line format.
    #[arg(
        long = "log.format",
        env = "NVML_EXPORTER_LOG_FORMAT",
        default_value = "logfmt",
        value_enum
    )]
    log_format: LogFormat,
}

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
    pub only: bool,
    /// `--compat.dcgm.hostname`: `None` for the kernel's host name,
    /// `Some("")` for no host label.
    pub hostname: Option<String>,
}

fn parse_generation(s: &str) -> Result<Generation, String> {
    Generation::parse(s.trim()).ok_or_else(|| {
        format!(
            "{s:?} is not a dcgm-exporter generation ({}) nor a dcgm-exporter release from 2.x to 4.9 (4.5.1-4.8.0, 4.8.4, 3.3.5-3.4.1-ubuntu22.04)",
            Generation::ALL
                .iter()
                .map(|g| g.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// `--state.path`: any path, or empty for none (clap's own path parser
/// refuses an empty one).
fn parse_state_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
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
    let flags = Flags::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    let mut families = families_from(&matches);
    let kubernetes = kubernetes_config(&flags, &mut cmd)?;
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
        compat: flags.compat_dcgm.map(|generation| CompatConfig {
            generation,
            only: flags.compat_dcgm_only,
            hostname: flags.compat_dcgm_hostname,
        }),
        config_file: flags.config_file,
        config_check: flags.config_check,
        log_level: flags.log_level,
        log_format: flags.log_format,
    })
}

/// Pod attribution's configuration, when `--kubernetes` or its socket is
/// given; the flags that need it refused without it, and those that need
/// an address without one.
fn kubernetes_config(
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
fn unknown_env(cmd: &clap::Command) -> Vec<String> {
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

fn families_from(matches: &ArgMatches) -> FamilySet {
    let mut set = FamilySet::defaults();
    for &f in Family::ALL {
        if let Some(on) = switched(matches, f) {
            set.set(f, on);
        }
    }
    set
}

/// Whether the family was switched on or off by flag or environment.
fn switched(matches: &ArgMatches, f: Family) -> Option<bool> {
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

/// The largest `--web.max-requests` and `--web.max-connections`: far above
/// any descriptor limit, far below what the semaphores behind them accept.
pub const MAX_LIMIT: usize = 1_000_000;

fn parse_limit(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number from 0 (no limit) to {MAX_LIMIT}"))?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_LIMIT)
        .ok_or_else(|| format!("{s} is above the most allowed, {MAX_LIMIT} (0 means no limit)"))
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("{s:?} is not a ratio from 0 to 1 (0.01 is 1 %)"))
}

/// The largest `--collector.xid.max-codes`: every code NVIDIA documents on
/// each of seven MIG instances fits well below it.
pub const MAX_XID_MAX_CODES: usize = 10_000;

fn parse_xid_max_codes(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_XID_MAX_CODES).contains(n))
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {MAX_XID_MAX_CODES}"))
}

fn parse_listen_address(s: &str) -> Result<ListenAddress, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not HOST:PORT or :PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: port {port:?} is not a number from 0 to 65535"))?;
    let host = if host.is_empty() {
        None
    } else if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{s:?}: unclosed '[' in IPv6 address"))?;
        inner
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{s:?}: {inner:?} is not an IPv6 address"))?;
        Some(inner.to_string())
    } else if host.contains(':') {
        return Err(format!(
            "{s:?}: write IPv6 addresses in brackets, e.g. [::1]:{port}"
        ));
    } else if host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        Some(host.to_string())
    } else {
        return Err(format!("{s:?}: {host:?} is not a host name or address"));
    };
    Ok(ListenAddress { host, port })
}

fn parse_telemetry_path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') {
        return Err(format!("{s:?} must start with '/'"));
    }
    if s == "/" || s.starts_with("/-/") {
        return Err(format!(
            "{s:?} is taken by the landing page or the health endpoints"
        ));
    }
    if s.contains(['?', '#']) || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} must be a plain path"));
    }
    Ok(s.to_string())
}

fn parse_at_least(s: &str, min: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min {
        return Err(format!(
            "{s:?} is shorter than the shortest allowed, {}ms",
            min.as_millis()
        ));
    }
    Ok(d)
}

fn parse_collect_interval(s: &str) -> Result<Duration, String> {
    parse_at_least(s, MIN_COLLECT_INTERVAL)
}

fn parse_stuck_deadline(s: &str) -> Result<Duration, String> {
    parse_at_least(s, MIN_STUCK_DEADLINE)
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be longer than zero"));
    }
    Ok(d)
}

/// Parses a Prometheus duration: integers with units, largest unit first,
/// each unit at most once (`1h30m`, `500ms`, `2d`). A bare `0` is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const UNITS: &[(&str, u64)] = &[
        ("y", 365 * 24 * 3_600_000),
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let bad = || format!("{s:?} is not a duration like 500ms, 5s, 1m or 1h30m");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut next_unit = 0;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..letters];
        rest = &rest[letters..];
        let pos = UNITS[next_unit..]
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(bad)?;
        let (_, ms) = UNITS[next_unit + pos];
        next_unit += pos + 1;
        total_ms = n
            .checked_mul(ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    Ok(Duration::from_millis(total_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        let mut v = vec!["nvml-exporter"];
        v.extend_from_slice(args);
        parse_from(v)
    }

    #[test]
    fn command_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.listen_addresses.len(), 1);
        assert_eq!(c.listen_addresses[0].to_string(), ":9445");
        assert_eq!(c.listen_addresses[0].port, DEFAULT_PORT);
        assert!(!c.systemd_socket);
        assert_eq!(c.telemetry_path, "/metrics");
        assert_eq!(c.collect_interval, Duration::from_secs(5));
        assert_eq!(c.stuck_deadline, Duration::from_secs(15));
        assert_eq!(
            c.library,
            Library::System {
                rootfs: PathBuf::from("/")
            }
        );
        // The family table's defaults, and the kernel log (issue 36).
        let mut families = FamilySet::defaults();
        families.set(Family::XidKmsg, true);
        assert_eq!(c.families, families);
        assert_eq!(c.log_level, LogLevel::Info);
        assert_eq!(c.log_format, LogFormat::Logfmt);
    }

    #[test]
    fn simulate_bare_and_named() {
        let bare = parse(&["--simulate"]).unwrap();
        assert_eq!(
            bare.library,
            Library::Simulated {
                scenario: "dgx-h100".into()
            }
        );
        let bare_then_flag = parse(&["--simulate", "--log.level", "debug"]).unwrap();
        assert_eq!(bare_then_flag.library, bare.library);
        let named = parse(&["--simulate", "workstation"]).unwrap();
        assert_eq!(
            named.library,
            Library::Simulated {
                scenario: "workstation".into()
            }
        );
        let eq = parse(&["--simulate=faults"]).unwrap();
        assert_eq!(
            eq.library,
            Library::Simulated {
                scenario: "faults".into()
            }
        );
    }

    #[test]
    fn simulate_and_library_conflict() {
        let e = parse(&["--simulate", "--nvml.library", "/x.so"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
    }

    #[test]
    fn collector_flags() {
        let c = parse(&["--no-collector.ecc", "--collector.process_memory"]).unwrap();
        assert!(!c.families.contains(Family::Ecc));
        assert!(c.families.contains(Family::ProcessMemory));
        let c = parse(&["--collector.ecc=false"]).unwrap();
        assert!(!c.families.contains(Family::Ecc));
        // Last one on the command line wins.
        let c = parse(&["--no-collector.ecc", "--collector.ecc"]).unwrap();
        assert!(c.families.contains(Family::Ecc));
        let c = parse(&["--collector.ecc", "--no-collector.ecc"]).unwrap();
        assert!(!c.families.contains(Family::Ecc));
        assert!(parse(&["--collector.nonsense"]).is_err());
        assert!(parse(&["--collector.ecc=maybe"]).is_err());
    }

    #[test]
    fn every_family_has_a_switch() {
        for &f in Family::ALL {
            let on = format!("--collector.{}", f.name());
            let off = format!("--no-collector.{}", f.name());
            assert!(parse(&[&on]).unwrap().families.contains(f));
            assert!(!parse(&[&off]).unwrap().families.contains(f));
        }
    }

    #[test]
    fn intervals_and_deadlines_have_floors() {
        for (flag, bad) in [
            ("--collect.interval", "1ms"),
            ("--collect.interval", "99ms"),
            ("--collect.stuck-deadline", "10ms"),
        ] {
            let e = parse(&[flag, bad]).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            let msg = e.to_string();
            assert!(msg.contains(flag) && msg.contains("100ms"), "{msg}");
        }
        let c = parse(&["--collect.interval", "100ms"]).unwrap();
        assert_eq!(c.collect_interval, MIN_COLLECT_INTERVAL);
        // Three intervals would be 300ms: the derived deadline is 1s.
        assert_eq!(c.stuck_deadline, MIN_DERIVED_STUCK_DEADLINE);
        let c = parse(&[
            "--collect.interval",
            "100ms",
            "--collect.stuck-deadline",
            "200ms",
        ])
        .unwrap();
        assert_eq!(c.stuck_deadline, Duration::from_millis(200));
    }

    #[test]
    fn the_state_is_kept_by_default_on_a_real_driver_and_only_when_asked_with_simulate() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            c.state.map(|s| (s.path, s.procfs)),
            Some((
                PathBuf::from("/var/lib/nvml-exporter/state.json"),
                PathBuf::from("/proc")
            ))
        );
        assert_eq!(parse(&["--simulate"]).unwrap().state, None);
        assert_eq!(
            parse(&["--state.path="]).unwrap().state,
            None,
            "empty: nothing kept"
        );
        assert_eq!(parse(&["--state.path"]).unwrap().state, None);
        let c = parse(&[
            "--simulate",
            "--state.path",
            "/tmp/s.json",
            "--path.procfs",
            "/host/proc",
        ])
        .unwrap();
        assert_eq!(
            c.state.map(|s| (s.path, s.procfs)),
            Some((PathBuf::from("/tmp/s.json"), PathBuf::from("/host/proc")))
        );
    }

    #[test]
    fn the_kernel_log_is_read_by_default_with_the_xid_family_but_not_with_simulate() {
        assert_eq!(
            parse(&[]).unwrap().kernel_log.map(|k| k.path),
            Some(PathBuf::from("/dev/kmsg")),
            "read by default (issue 36)"
        );
        assert_eq!(
            parse(&["--no-collector.xid.kmsg"]).unwrap().kernel_log,
            None
        );
        assert_eq!(parse(&["--simulate"]).unwrap().kernel_log, None);
        assert!(parse(&["--simulate", "--collector.xid.kmsg"])
            .unwrap()
            .kernel_log
            .is_some());
        let c = parse(&["--collector.xid.kmsg", "--collector.xid.max-codes=9"]).unwrap();
        assert_eq!(
            c.kernel_log,
            Some(KernelLogConfig {
                path: PathBuf::from("/dev/kmsg"),
                max_codes: 9,
                resume_after: None,
            })
        );
        let c = parse(&["--collector.xid.kmsg", "--path.kmsg", "/tmp/kmsg"]).unwrap();
        assert_eq!(
            c.kernel_log.map(|k| k.path),
            Some(PathBuf::from("/tmp/kmsg"))
        );
        // A detail switch shows nothing while its family is off.
        let c = parse(&["--collector.xid.kmsg", "--no-collector.xid"]).unwrap();
        assert_eq!(c.kernel_log, None);
        assert!(
            c.families.contains(Family::Verdict),
            "the verdict is on by default"
        );
    }

    #[test]
    fn the_restart_app_window_is_a_positive_duration() {
        assert_eq!(
            parse(&[]).unwrap().restart_app_window,
            crate::verdict::DEFAULT_RESTART_APP_WINDOW
        );
        let c = parse(&["--collector.verdict.restart-app-window", "90s"]).unwrap();
        assert_eq!(c.restart_app_window, Duration::from_secs(90));
        let err = parse(&["--collector.verdict.restart-app-window", "0s"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--collector.verdict.restart-app-window"),
            "{err}"
        );
    }

    #[test]
    fn stuck_deadline_follows_interval_unless_set() {
        let c = parse(&["--collect.interval", "1s"]).unwrap();
        assert_eq!(c.stuck_deadline, Duration::from_secs(3));
        let c = parse(&[
            "--collect.interval",
            "1s",
            "--collect.stuck-deadline",
            "10s",
        ])
        .unwrap();
        assert_eq!(c.stuck_deadline, Duration::from_secs(10));
    }

    #[test]
    fn xid_max_codes_is_bounded_and_leaves_the_xid_switch_alone() {
        assert_eq!(parse(&[]).unwrap().xid_max_codes, DEFAULT_XID_MAX_CODES);
        let c = parse(&["--collector.xid.max-codes", "8", "--no-collector.xid"]).unwrap();
        assert_eq!(c.xid_max_codes, 8);
        assert!(!c.families.contains(Family::Xid));
        let c = parse(&["--collector.xid.max-codes=3", "--collector.xid"]).unwrap();
        assert_eq!(c.xid_max_codes, 3);
        assert!(c.families.contains(Family::Xid));
        for bad in ["0", "-1", "10001", "18446744073709551615", "lots"] {
            let arg = format!("--collector.xid.max-codes={bad}");
            let e = parse(&[&arg]).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains("--collector.xid.max-codes") && msg.contains("from 1 to 10000"),
                "{bad}: {msg}"
            );
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn durations() {
        let ok = [
            ("0", 0),
            ("500ms", 500),
            ("1s", 1000),
            ("1m", 60_000),
            ("1h30m", 5_400_000),
            ("1m500ms", 60_500),
            ("2d", 172_800_000),
            ("1y", 31_536_000_000),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        for s in [
            "",
            "5",
            "s",
            "1.5s",
            "1s1m",
            "1s1s",
            "-1s",
            "1x",
            "1 s",
            "99999999999999y",
        ] {
            assert!(parse_duration(s).is_err(), "{s:?} should be rejected");
        }
        assert!(parse(&["--collect.interval", "0s"]).is_err());
        assert!(parse(&["--collect.interval", "fast"]).is_err());
    }

    #[test]
    fn listen_addresses() {
        let ok = [
            (":9445", None, 9445),
            ("127.0.0.1:0", Some("127.0.0.1"), 0),
            ("localhost:80", Some("localhost"), 80),
            ("[::1]:9445", Some("::1"), 9445),
        ];
        for (s, host, port) in ok {
            let a = parse_listen_address(s).unwrap();
            assert_eq!(a.host.as_deref(), host, "{s}");
            assert_eq!(a.port, port, "{s}");
            assert_eq!(a.to_string(), s);
        }
        assert_eq!(
            parse_listen_address("[::1]:1").unwrap().to_socket_string(),
            "[::1]:1"
        );
        for s in [
            "9445", "host:", ":99999", "::1:80", "[::1:80", "[zz]:80", "a b:1",
        ] {
            assert!(parse_listen_address(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn every_listen_address_is_kept() {
        let c = parse(&[
            "--web.listen-address",
            "127.0.0.1:1",
            "--web.listen-address",
            "[::1]:2",
        ])
        .unwrap();
        let all: Vec<String> = c.listen_addresses.iter().map(ToString::to_string).collect();
        assert_eq!(all, ["127.0.0.1:1", "[::1]:2"]);
        assert_eq!(
            parse_listen_address(":9445").unwrap().to_socket_string(),
            "[::]:9445"
        );
    }

    #[test]
    fn telemetry_paths() {
        assert!(parse_telemetry_path("/metrics").is_ok());
        assert!(parse_telemetry_path("/gpu/metrics").is_ok());
        for s in ["metrics", "/", "/-/ready", "/m?x", "/a b"] {
            assert!(parse_telemetry_path(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn repeatable_flags_accumulate_while_others_override() {
        let c = parse(&[
            "--kubernetes",
            "--kubernetes.resource-name",
            "example.com/gpu",
            "--kubernetes.resource-name",
            "other.io/mig-*",
            "--collect.interval",
            "1s",
            "--collect.interval",
            "2s",
        ])
        .unwrap();
        let names = c.kubernetes.expect("--kubernetes given");
        assert!(names.resource_names.iter().any(|n| n == "example.com/gpu"));
        assert!(names.resource_names.iter().any(|n| n == "other.io/mig-*"));
        assert_eq!(c.collect_interval, Duration::from_secs(2));
    }

    #[test]
    fn pod_labels_and_resource_slices_are_checked_at_start() {
        let c = parse(&[
            "--kubernetes",
            "--kubernetes.pod-labels=team,app.kubernetes.io/*",
            "--kubernetes.kubelet-url=https://10.0.0.7:10250",
            "--kubernetes.resource-slices",
            "--kubernetes.node-name=node-1",
            "--kubernetes.api-server=https://10.96.0.1:443",
            "--path.rootfs=/host",
        ])
        .unwrap();
        let k = c.kubernetes.expect("--kubernetes given");
        let labels = k.pod_labels.expect("--kubernetes.pod-labels given");
        assert!(matches!(labels.source, kubernetes::LabelSource::Kubelet(_)));
        let (api, node) = k
            .resource_slices
            .expect("--kubernetes.resource-slices given");
        assert_eq!(
            (api.to_string().as_str(), node.as_str()),
            ("https://10.96.0.1:443/", "node-1")
        );
        assert_eq!(k.rootfs, PathBuf::from("/host"));

        let refused = |args: &[&str], says: &str| {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
        };
        refused(&["--kubernetes.pod-labels=team"], "add --kubernetes");
        // The whole sentence, so that a line continuation that lost its
        // backslash (a run of spaces in the middle) shows.
        refused(
            &["--kubernetes", "--kubernetes.pod-labels=team"],
            "--kubernetes.pod-labels.source=kubelet needs --kubernetes.kubelet-url \
             (https://<node IP>:10250)",
        );
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
            refused(
                &[
                    "--kubernetes",
                    "--kubernetes.resource-slices",
                    "--kubernetes.node-name=node-1",
                ],
                "the API server is not known: set --kubernetes.api-server (outside a pod, \
                 KUBERNETES_SERVICE_HOST and _PORT are not set)",
            );
        }
        refused(
            &[
                "--kubernetes",
                "--kubernetes.pod-labels=pod",
                "--kubernetes.kubelet-url=https://n:10250",
            ],
            "already carry",
        );
        refused(
            &[
                "--kubernetes",
                "--kubernetes.pod-labels=team",
                "--kubernetes.kubelet-url=http://n:10250",
            ],
            "https",
        );
        refused(
            &[
                "--kubernetes",
                "--kubernetes.pod-labels=team",
                "--kubernetes.pod-labels.source=api-server",
                "--kubernetes.api-server=https://a:6443",
            ],
            "--kubernetes.node-name",
        );
        refused(
            &[
                "--kubernetes",
                "--kubernetes.resource-slices",
                "--kubernetes.api-server=https://a:6443",
            ],
            "--kubernetes.node-name",
        );
    }

    #[test]
    fn limits_are_bounded_at_parse_time() {
        let c = parse(&[
            "--web.max-connections",
            "0",
            "--web.max-requests",
            "1000000",
        ])
        .unwrap();
        assert_eq!((c.max_connections, c.max_requests), (0, MAX_LIMIT));
        for flag in ["--web.max-connections", "--web.max-requests"] {
            for bad in ["18446744073709551615", "1000001", "-1", "many", ""] {
                let e = parse(&[&format!("{flag}={bad}")]).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::ValueValidation, "{flag} {bad:?}");
                assert_eq!(e.exit_code(), 2);
                let msg = e.to_string();
                assert!(msg.contains(flag), "{msg}");
            }
        }
    }

    #[test]
    fn write_timeout() {
        assert_eq!(parse(&[]).unwrap().write_timeout, Duration::from_secs(10));
        let c = parse(&["--web.write-timeout", "30s"]).unwrap();
        assert_eq!(c.write_timeout, Duration::from_secs(30));
        assert!(parse(&["--web.write-timeout", "0s"]).is_err());
    }

    #[test]
    fn errors_name_the_flag() {
        let e = parse(&["--web.listen-address", "nope"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("--web.listen-address"), "{msg}");
        assert!(msg.contains("nope"), "{msg}");
        let e = parse(&["--log.level", "loud"]).unwrap_err();
        assert!(e.to_string().contains("--log.level"));
    }

    #[test]
    fn workloads_flags() {
        assert_eq!(parse(&[]).unwrap().workloads, None);
        let c = parse(&["--workloads"]).unwrap().workloads.unwrap();
        assert_eq!(c.procfs, PathBuf::from("/proc"));
        assert_eq!(c.rootfs, PathBuf::from("/"));
        assert_eq!(c.limit, 256);
        assert_eq!(c.slurm_mapping_dir, None);
        let c = parse(&[
            "--workloads.slurm-mapping-dir",
            "/run/dcgm-job-map",
            "--path.procfs",
            "/host/proc",
            "--workloads.limit",
            "0",
        ])
        .unwrap()
        .workloads
        .expect("a mapping dir turns attribution on");
        assert_eq!(c.procfs, PathBuf::from("/host/proc"));
        assert_eq!(c.limit, usize::MAX);
        // Measured use comes with it, unless switched off by name.
        assert!(parse(&["--workloads"])
            .unwrap()
            .families
            .contains(Family::WorkloadUsage));
        assert!(!parse(&[]).unwrap().families.contains(Family::WorkloadUsage));
        let c = parse(&["--workloads", "--no-collector.workload_usage"]).unwrap();
        assert!(!c.families.contains(Family::WorkloadUsage));
        let e = parse(&["--workloads", "--no-collector.processes"]).unwrap_err();
        assert!(e.to_string().contains("processes collector"), "{e}");
        // A poll longer than the driver's per-process sample ring.
        assert!(parse(&["--workloads", "--collect.interval", "10s"]).is_ok());
        let e = parse(&["--workloads", "--collect.interval", "15s"]).unwrap_err();
        assert!(e.to_string().contains("--collect.interval 15s"), "{e}");
        assert!(parse(&[
            "--workloads",
            "--collect.interval",
            "15s",
            "--no-collector.workload_usage"
        ])
        .is_ok());
        assert!(parse(&[
            "--workloads",
            "--no-collector.processes",
            "--collector.process_memory"
        ])
        .is_ok());
        assert!(parse(&["--workloads.limit", "many"]).is_err());
        let c = parse(&[
            "--workloads.container-engine-socket",
            "/var/run/docker.sock,/run/podman/podman.sock",
        ])
        .unwrap()
        .workloads
        .expect("an engine socket turns attribution on");
        assert_eq!(c.container_engine_sockets.len(), 2);
    }
}
