//! The flag table: one field per flag, with its environment variable, its
//! default and the value parser that types it (`values`). The collector
//! switches are not here: `command` adds a pair per family.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};

use super::values::*;
use super::{ListenAddress, LogFormat, LogLevel, DEFAULT_SCENARIO, DEFAULT_XID_MAX_CODES};
use crate::{kmsg, kubernetes, workloads};

/// `--kubernetes.pod-labels.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum PodLabelSource {
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
pub(super) struct Flags {
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
    pub(super) listen_addresses: Vec<ListenAddress>,

    /// Serve on the sockets systemd passes (socket activation: LISTEN_FDS)
    /// instead of --web.listen-address.
    #[arg(
        long = "web.systemd-socket",
        env = "NVML_EXPORTER_WEB_SYSTEMD_SOCKET",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) systemd_socket: bool,

    /// Path under which the metrics are served.
    #[arg(
        long = "web.telemetry-path",
        env = "NVML_EXPORTER_WEB_TELEMETRY_PATH",
        default_value = "/metrics",
        value_parser = parse_telemetry_path,
        value_name = "PATH"
    )]
    pub(super) telemetry_path: String,

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
    pub(super) collect_interval: Duration,

    /// How long one driver call may block before its GPU is reported hung
    /// (`nvidia_gpu_up 0`, readings withdrawn); at least 100ms. Default:
    /// three collect intervals, at least 1s.
    #[arg(
        long = "collect.stuck-deadline",
        env = "NVML_EXPORTER_COLLECT_STUCK_DEADLINE",
        value_parser = parse_stuck_deadline,
        value_name = "DURATION"
    )]
    pub(super) stuck_deadline: Option<Duration>,

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
    pub(super) xid_max_codes: usize,

    /// The kernel log that --collector.xid.kmsg reads: the kernel's
    /// /dev/kmsg, or a regular file of its records (followed as it grows).
    #[arg(
        long = "path.kmsg",
        env = "NVML_EXPORTER_PATH_KMSG",
        default_value = kmsg::DEFAULT_PATH,
        value_name = "PATH"
    )]
    pub(super) kmsg_path: PathBuf,

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
    pub(super) state_path: Option<PathBuf>,

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
    pub(super) restart_app_window: Duration,

    /// Load this libnvidia-ml instead of the one the dynamic loader finds.
    /// The file must exist.
    #[arg(
        long = "nvml.library",
        env = "NVML_EXPORTER_NVML_LIBRARY",
        value_name = "PATH",
        conflicts_with = "simulate"
    )]
    pub(super) nvml_library: Option<PathBuf>,

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
    pub(super) simulate: Option<String>,

    /// Most scrapes served at once; beyond it a scrape gets 503 at once
    /// instead of queueing. 0 means no limit.
    #[arg(
        long = "web.max-requests",
        env = "NVML_EXPORTER_WEB_MAX_REQUESTS",
        default_value_t = 40,
        value_parser = parse_limit,
        value_name = "N"
    )]
    pub(super) max_requests: usize,

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
    pub(super) max_connections: usize,

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
    pub(super) write_timeout: Duration,

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
    pub(super) read_header_timeout: Duration,

    /// exporter-toolkit web configuration file (TLS, basic auth, headers).
    #[arg(
        long = "web.config.file",
        env = "NVML_EXPORTER_WEB_CONFIG_FILE",
        value_name = "PATH"
    )]
    pub(super) web_config_file: Option<PathBuf>,

    /// Answer /-/healthy without basic auth, for probes that cannot send
    /// credentials (only matters when the web config sets basic_auth_users).
    #[arg(
        long = "web.health-without-auth",
        env = "NVML_EXPORTER_WEB_HEALTH_WITHOUT_AUTH",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) health_without_auth: bool,

    /// Send a health event to NVIDIA NVSentinel's platform connector on
    /// this unix socket at every change of a GPU's verdict
    /// (nvidia_gpu_recommended_action), and each GPU's state once at start
    /// (docs/operations.md, "NVIDIA NVSentinel"). Off when unset.
    #[arg(
        long = "nvsentinel.socket",
        env = "NVML_EXPORTER_NVSENTINEL_SOCKET",
        value_name = "PATH"
    )]
    pub(super) nvsentinel_socket: Option<PathBuf>,

    /// The events' nodeName [default: the NODE_NAME variable (the chart
    /// sets it to the pod's node), else the kernel's host name].
    #[arg(
        long = "nvsentinel.node-name",
        env = "NVML_EXPORTER_NVSENTINEL_NODE_NAME",
        value_name = "NAME"
    )]
    pub(super) nvsentinel_node_name: Option<String>,

    /// Send the events with processingStrategy STORE_ONLY: NVSentinel
    /// stores and shows them but does not cordon, drain or remediate.
    #[arg(
        long = "nvsentinel.dry-run",
        env = "NVML_EXPORTER_NVSENTINEL_DRY_RUN",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) nvsentinel_dry_run: bool,

    /// How long one call to the platform connector may take before it
    /// counts as failed and the event is retried.
    #[arg(
        long = "nvsentinel.timeout",
        env = "NVML_EXPORTER_NVSENTINEL_TIMEOUT",
        default_value = "5s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    pub(super) nvsentinel_timeout: Duration,

    /// Attribute GPUs and MIG devices to Kubernetes pods through the
    /// kubelet's pod-resources API (adds `nvidia_gpu_pod_share_ratio` and
    /// `nvidia_gpu_mig_pod_share_ratio`).
    #[arg(
        long = "kubernetes",
        env = "NVML_EXPORTER_KUBERNETES",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) kubernetes: bool,

    /// The kubelet's pod-resources socket; setting it turns on
    /// --kubernetes [default: /var/lib/kubelet/pod-resources/kubelet.sock].
    #[arg(
        long = "kubernetes.pod-resources-socket",
        env = "NVML_EXPORTER_KUBERNETES_POD_RESOURCES_SOCKET",
        value_name = "PATH"
    )]
    pub(super) pod_resources_socket: Option<PathBuf>,

    /// A further resource name whose devices are GPUs or MIG devices, on top
    /// of nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*; a
    /// trailing `*` matches any suffix. Repeatable.
    #[arg(
        long = "kubernetes.resource-name",
        env = "NVML_EXPORTER_KUBERNETES_RESOURCE_NAME",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub(super) resource_names: Vec<String>,

    /// How often pod attribution is refreshed from the kubelet; an ended
    /// pod's attribution disappears within one refresh.
    #[arg(
        long = "kubernetes.refresh-interval",
        env = "NVML_EXPORTER_KUBERNETES_REFRESH_INTERVAL",
        default_value = "10s",
        value_parser = parse_positive_duration,
        value_name = "DURATION"
    )]
    pub(super) kubernetes_refresh_interval: Duration,

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
    pub(super) pod_labels: Vec<String>,

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
    pub(super) pod_label_regexes: Vec<String>,

    /// With --compat.dcgm: put the pod's UID (`metadata.uid`) as `pod_uid`
    /// on the series of the pods attributed a device, as dcgm-exporter's
    /// --kubernetes-enable-pod-uid does (that spelling accepted). Read from
    /// where --kubernetes.pod-labels.source says. Off by default.
    #[arg(
        long = "kubernetes.pod-uid",
        alias = "kubernetes-enable-pod-uid",
        env = "NVML_EXPORTER_KUBERNETES_POD_UID"
    )]
    pub(super) pod_uid: bool,

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
    pub(super) dra_labels: bool,

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
    pub(super) pod_labels_source: PodLabelSource,

    /// The kubelet's HTTPS API on this node, e.g. https://10.0.0.7:10250
    /// (the chart sets it from the node's IP).
    #[arg(
        long = "kubernetes.kubelet-url",
        env = "NVML_EXPORTER_KUBERNETES_KUBELET_URL",
        value_name = "URL"
    )]
    pub(super) kubelet_url: Option<String>,

    /// Where a DRA claim's CDI spec does not say which GPU it holds, look
    /// its device up in this node's ResourceSlices (API server, RBAC list
    /// resourceslices; read when needed, cached).
    #[arg(
        long = "kubernetes.resource-slices",
        env = "NVML_EXPORTER_KUBERNETES_RESOURCE_SLICES",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) resource_slices: bool,

    /// This node's name, for the API server reads (the chart sets it from
    /// spec.nodeName).
    #[arg(
        long = "kubernetes.node-name",
        env = "NVML_EXPORTER_KUBERNETES_NODE_NAME",
        value_name = "NAME"
    )]
    pub(super) node_name: Option<String>,

    /// The API server [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
    /// as in every pod].
    #[arg(
        long = "kubernetes.api-server",
        env = "NVML_EXPORTER_KUBERNETES_API_SERVER",
        value_name = "URL"
    )]
    pub(super) api_server: Option<String>,

    /// The CA bundle the kubelet's and the API server's certificates are
    /// checked against.
    #[arg(
        long = "kubernetes.ca-file",
        env = "NVML_EXPORTER_KUBERNETES_CA_FILE",
        default_value = kubernetes::DEFAULT_CA_FILE,
        value_name = "PATH"
    )]
    pub(super) kubernetes_ca_file: PathBuf,

    /// The bearer token sent to the kubelet and the API server, read again
    /// before every request.
    #[arg(
        long = "kubernetes.token-file",
        env = "NVML_EXPORTER_KUBERNETES_TOKEN_FILE",
        default_value = kubernetes::DEFAULT_TOKEN_FILE,
        value_name = "PATH"
    )]
    pub(super) kubernetes_token_file: PathBuf,

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
    pub(super) workloads: bool,

    /// The host's procfs, where the pids NVML lists are found (a container
    /// mounts the host's /proc and points here).
    #[arg(
        long = "path.procfs",
        env = "NVML_EXPORTER_PATH_PROCFS",
        default_value = workloads::DEFAULT_PROCFS,
        value_name = "PATH"
    )]
    pub(super) procfs: PathBuf,

    /// The host's root file system; workload attribution reads user names
    /// from its etc/passwd, and libnvidia-ml.so.1 is looked for in its
    /// library directories when the dynamic loader does not find it.
    #[arg(
        long = "path.rootfs",
        env = "NVML_EXPORTER_PATH_ROOTFS",
        default_value = workloads::DEFAULT_ROOTFS,
        value_name = "PATH"
    )]
    pub(super) rootfs: PathBuf,

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
    pub(super) workloads_limit: usize,

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
    pub(super) workloads_refresh_interval: Duration,

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
    pub(super) workloads_idle_threshold: f64,

    /// Also read Slurm jobs from dcgm-exporter's --hpc-job-mapping-dir
    /// format (one file per GPU index, job ids one per line, written by a
    /// prolog); setting it turns on --workloads. With --compat.dcgm the
    /// DCGM series of a device a file names carry `hpc_job`, one series
    /// per job, as dcgm-exporter's (that spelling, and its variable
    /// DCGM_HPC_JOB_MAPPING_DIR after this one's, accepted; a MIG GPU
    /// instance's file is `<gpu>.<gpu instance>`).
    #[arg(
        long = "workloads.slurm-mapping-dir",
        alias = "hpc-job-mapping-dir",
        env = "NVML_EXPORTER_WORKLOADS_SLURM_MAPPING_DIR",
        value_name = "DIR"
    )]
    pub(super) slurm_mapping_dir: Option<PathBuf>,

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
    pub(super) container_engine_sockets: Vec<PathBuf>,

    /// Also serve dcgm-exporter's DCGM series (DCGM_FI_DEV_GPU_UTIL, ...),
    /// named as dcgm-exporter GENERATION names them: 4.8 (4.8.3 and 4.8.4,
    /// the default when bare: what GPU Operator v26.7 ships), 4.8.2 (3.5.0
    /// to 4.8.2: host label Hostname), 3.4 (3.4.2 and earlier: no
    /// pci_bus_id), 4.9 (DCGM 4.7's names, in base units) or 4.10 (4.9's,
    /// the PCIe and NVLink profiling rates renamed _BYTES_PER_SECOND); or
    /// the release as dcgm-exporter names it (4.5.1-4.8.0, 4.8.4, 4.10.0,
    /// an image tag; a release after 4.10 is served as 4.10). See
    /// docs/migrating-from-dcgm-exporter.md.
    #[arg(
        long = "compat.dcgm",
        env = "NVML_EXPORTER_COMPAT_DCGM",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "4.8",
        value_parser = parse_generation,
        value_name = "GENERATION"
    )]
    pub(super) compat_dcgm: Option<GenerationArg>,

    /// Serve the DCGM series instead of this exporter's nvidia_* families
    /// (its own nvml_exporter_*, process_* and promhttp_* stay). Needs
    /// --compat.dcgm.
    #[arg(
        long = "compat.dcgm.only",
        env = "NVML_EXPORTER_COMPAT_DCGM_ONLY",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub(super) compat_dcgm_only: bool,

    /// The value of the DCGM series' host label (dcgm-exporter's
    /// NODE_NAME); empty: no host label [default: the kernel's host name].
    #[arg(
        long = "compat.dcgm.hostname",
        env = "NVML_EXPORTER_COMPAT_DCGM_HOSTNAME",
        value_name = "NAME"
    )]
    pub(super) compat_dcgm_hostname: Option<String>,

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
    pub(super) config_file: Option<PathBuf>,

    /// Check a selection file and print the series it yields per GPU and
    /// per node on this host (or on --simulate SCENARIO), beside the flags
    /// alone; then exit (0 if the file is valid).
    #[arg(
        long = "config.check",
        env = "NVML_EXPORTER_CONFIG_CHECK",
        value_name = "FILE",
        conflicts_with = "config_file"
    )]
    pub(super) config_check: Option<PathBuf>,

    /// Least severe log level written.
    #[arg(
        long = "log.level",
        env = "NVML_EXPORTER_LOG_LEVEL",
        default_value = "info",
        value_enum
    )]
    pub(super) log_level: LogLevel,

    /// Log line format.
    #[arg(
        long = "log.format",
        env = "NVML_EXPORTER_LOG_FORMAT",
        default_value = "logfmt",
        value_enum
    )]
    pub(super) log_format: LogFormat,
}
