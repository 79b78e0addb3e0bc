//! Kubernetes pod attribution: which namespace, pod and container holds
//! each GPU and each MIG device, from the kubelet's pod-resources API:
//! devices of the NVIDIA device plugin, and devices of ResourceClaims
//! (Dynamic Resource Allocation, [`dra`]) resolved through the node's CDI
//! specs ([`cdi`]) and, optionally, its ResourceSlices; with the pods'
//! allowlisted labels ([`podlabels`]) from the kubelet's `/pods` or the API
//! server.
//!
//! A background task asks the kubelet every `refresh_interval` and keeps the
//! answer; the join step (`crate::join`) writes it onto each snapshot, in
//! place ([`Attribution::apply`]). A scrape never talks to the kubelet, and an
//! unreachable kubelet is `nvml_exporter_kubernetes_up 0` plus one log line,
//! never a failed scrape. Whatever else cannot be read (a CDI spec, the
//! API server, a kubelet without the DRA fields) is logged once, counted in
//! `nvml_exporter_kubernetes_read_errors_total`, and leaves the rest of
//! attribution as it is.

mod apiserver;
mod cdi;
mod dra;
mod holders;
mod https;
mod podlabels;
mod podresources;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use hyper::Uri;
use tokio::sync::watch;

use crate::fsread::Reader;
use crate::snapshot::{
    ClaimedDeviceState, KubernetesReadError, KubernetesSource, KubernetesStatus, PodLabels,
    Snapshot,
};
use cdi::{CdiSpecs, MigMinors};
use dra::{Claimed, Outcome};
use holders::{DeviceRef, Holder};
use https::HttpsClient;

pub use https::{parse_base_url, DEFAULT_CA_FILE, DEFAULT_TOKEN_FILE};
pub use podlabels::{Allowlist, AllowlistError, Naming, MAX_LABELS_PER_POD, RESERVED_LABELS};
pub use podresources::KubeletError;

/// Where the kubelet serves pod-resources on every standard node.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Resources the NVIDIA device plugin advertises: whole GPUs, time-sliced
/// GPUs renamed by `renameByDefault`, and MIG devices by profile. A trailing
/// `*` matches any suffix.
pub const DEFAULT_RESOURCE_NAMES: &[&str] = &[
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
];

/// How long one List call, or one HTTPS read, may take before the refresh
/// counts it as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// After this many refresh intervals without a successful List, the last
/// answer is too old to trust and attribution is withdrawn; so are pod
/// labels not read again for as long.
const STALE_AFTER_INTERVALS: u32 = 3;

/// How long this node's ResourceSlices are used before they are read
/// again; a device they do not know is looked up again after one refresh
/// interval at the soonest.
const SLICES_MAX_AGE: Duration = Duration::from_secs(300);

/// Problems remembered to be logged (and counted) once. Past this, a new
/// problem is neither logged nor counted one by one (said once): the
/// memory never starts over, so nothing is logged again while it lasts.
const MAX_REMEMBERED: usize = 65_536;
/// A problem not seen for this many refreshes is gone: forgotten, and
/// logged again if it comes back.
const FORGET_AFTER_REFRESHES: u64 = 3;

/// The problems logged once, with the refresh each was last seen in.
#[derive(Default)]
struct Logged {
    seen: HashMap<String, u64>,
    refresh: u64,
    full_said: bool,
}

impl Logged {
    /// A new refresh: problems not seen for a while are gone.
    fn next_refresh(&mut self) {
        self.refresh += 1;
        let now = self.refresh;
        self.seen
            .retain(|_, last| now - *last <= FORGET_AFTER_REFRESHES);
    }

    /// Whether `key` is new (to be logged and counted); it is remembered.
    fn first(&mut self, key: &str) -> bool {
        if let Some(last) = self.seen.get_mut(key) {
            *last = self.refresh;
            return false;
        }
        if self.seen.len() >= MAX_REMEMBERED {
            if !std::mem::replace(&mut self.full_said, true) {
                tracing::warn!(
                    remembered = MAX_REMEMBERED,
                    "too many distinct pod-attribution problems at once: further ones are neither logged nor counted one by one"
                );
            }
            return false;
        }
        self.seen.insert(key.to_string(), self.refresh);
        true
    }
}

/// Where pod labels are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelSource {
    /// The kubelet's authenticated `/pods` at this base URL.
    Kubelet(Uri),
    /// The API server's pod list, selected by this node's name.
    ApiServer { url: Uri, node: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLabelsConfig {
    pub allow: Arc<Allowlist>,
    pub source: LabelSource,
    /// `--kubernetes.pod-uid`: the pod's `metadata.uid` as `pod_uid` with
    /// its labels (dcgm-exporter's `--kubernetes-enable-pod-uid`).
    pub uid: bool,
}

impl Eq for Allowlist {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributionConfig {
    pub socket: PathBuf,
    /// Resource-name patterns whose devices are GPUs or MIG devices.
    pub resource_names: Vec<String>,
    pub refresh_interval: Duration,
    /// The host's root file system: its `var/run/cdi` and `etc/cdi`.
    pub rootfs: PathBuf,
    /// The host's procfs: its `driver/nvidia-caps/mig-minors`.
    pub procfs: PathBuf,
    /// `--kubernetes.pod-labels`, when given.
    pub pod_labels: Option<PodLabelsConfig>,
    /// `--kubernetes.dra-labels`: the claim's attributes on a claimed
    /// device's DCGM series (dcgm-exporter's `--kubernetes-enable-dra`).
    pub dra_labels: bool,
    /// `--kubernetes.resource-slices`: the API server and this node's name.
    pub resource_slices: Option<(Uri, String)>,
    /// The CA bundle and bearer token for the kubelet and the API server.
    pub ca_file: PathBuf,
    pub token_file: PathBuf,
}

struct Known {
    holders: Vec<Holder>,
    /// The devices each resolved DRA claim device names (by its key):
    /// counted `resolved` only while one of them is a GPU of this node
    /// (`apply`).
    resolved: Vec<(String, Vec<DeviceRef>)>,
    /// Allowlisted labels by (namespace, pod).
    labels: HashMap<(String, String), PodLabels>,
    /// When the kubelet last answered; `None` before the first answer.
    at: Option<Instant>,
}

#[derive(Default)]
struct Health {
    up: bool,
    refresh_errors: u64,
    last_refresh: Option<SystemTime>,
    claimed: BTreeMap<ClaimedDeviceState, u64>,
    read_errors: BTreeMap<(KubernetesSource, KubernetesReadError), u64>,
}

/// What one refresh carries over to the next.
struct Carried {
    cdi: CdiSpecs,
    /// NVIDIA's devices of this node's ResourceSlices, and when read.
    slices: HashMap<(String, String), String>,
    slices_at: Option<Instant>,
    slices_version: usize,
    /// The last pod labels read, and when.
    labels: HashMap<(String, String), PodLabels>,
    labels_at: Option<Instant>,
    /// Problems already logged (and counted, for dropped labels), until
    /// they clear or are gone.
    logged: Logged,
}

/// The latest attribution, shared between the refresh task (writer) and
/// the join step (reader, `crate::join`).
pub struct Attribution {
    config: AttributionConfig,
    known: ArcSwap<Known>,
    health: Mutex<Health>,
    carried: Mutex<Carried>,
    reader: Reader,
    https: HttpsClient,
}

impl Attribution {
    pub fn new(config: AttributionConfig) -> Arc<Self> {
        let reader = Reader::new("kubernetes", 2);
        Arc::new(Attribution {
            known: ArcSwap::from_pointee(Known {
                holders: Vec::new(),
                resolved: Vec::new(),
                labels: HashMap::new(),
                at: None,
            }),
            health: Mutex::new(Health::default()),
            carried: Mutex::new(Carried {
                cdi: CdiSpecs::new(&config.rootfs, reader.clone()),
                slices: HashMap::new(),
                slices_at: None,
                slices_version: 0,
                labels: HashMap::new(),
                labels_at: None,
                logged: Logged::default(),
            }),
            https: HttpsClient::new(
                config.ca_file.clone(),
                config.token_file.clone(),
                reader.clone(),
            ),
            reader,
            config,
        })
    }

    /// Refreshes until `stop` fires. Runs on the async runtime; each call is
    /// bounded by a timeout, so a wedged kubelet cannot pile up calls.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        let mut tick = tokio::time::interval(self.config.refresh_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.refresh().await,
                _ = stop.changed() => return,
            }
        }
    }

    async fn refresh(self: &Arc<Self>) {
        let result = podresources::list(&self.config.socket, CALL_TIMEOUT).await;
        let response = match result {
            Ok(response) => response,
            Err(e) => {
                let mut health = self.health();
                health.refresh_errors += 1;
                // Once per outage, not once per refresh.
                if health.up || health.refresh_errors == 1 {
                    tracing::warn!(error = %e, "pod attribution unavailable");
                }
                health.up = false;
                return;
            }
        };
        // Problems not met again for a few refreshes are gone (counted and
        // logged anew if they come back); only refreshes that look count.
        self.carried().logged.next_refresh();
        let mut holders = holders::from_device_plugin(&response, &self.config.resource_names);
        let (claimed, any_dra) = dra::claimed_devices(&response);
        // CDI specs and the MIG minors are files: read off the runtime.
        let me = self.clone();
        let local = tokio::task::spawn_blocking(move || me.resolve_locally(claimed, any_dra))
            .await
            .unwrap_or_default();
        let outcomes = self.resolve_from_slices(local).await;
        let mut counts: BTreeMap<ClaimedDeviceState, HashSet<String>> = BTreeMap::new();
        let mut resolved = Vec::new();
        for (c, outcome) in &outcomes {
            let state = match outcome {
                Outcome::Resolved(devices) => {
                    resolved.push((c.device_key(), devices.clone()));
                    let dra = (self.config.dra_labels && c.is_nvidia_gpu()).then(|| {
                        let (ns, name) = c.claim.split_once('/').unwrap_or(("", &c.claim));
                        Arc::new(holders::DraAttributes {
                            claim_name: name.to_string(),
                            claim_namespace: ns.to_string(),
                            driver: c.driver.clone(),
                            pool: c.pool.clone(),
                            device: c.device.clone(),
                        })
                    });
                    holders.extend(devices.iter().map(|device| Holder {
                        device: device.clone(),
                        namespace: c.namespace.clone(),
                        pod: c.pod.clone(),
                        container: c.container.clone(),
                        dra: dra.clone(),
                    }));
                    ClaimedDeviceState::Resolved
                }
                Outcome::Unresolved(why) => {
                    self.warn_once(&format!("unresolved {}", c.device_key()), || {
                        tracing::warn!(
                            claim = %c.claim, device = %c.device_key(), reason = %why,
                            cdi_dirs = %format!("{0}/var/run/cdi,{0}/etc/cdi", self.config.rootfs.display()),
                            "a GPU of a DRA claim could not be resolved; it is attributed to no GPU \
                             (are the host's CDI directories mounted there? Helm: podAttribution.dra.enabled; \
                             or use --kubernetes.resource-slices)"
                        )
                    });
                    ClaimedDeviceState::Unresolved
                }
                Outcome::OtherDriver => {
                    self.warn_once(&format!("driver {}", c.driver), || {
                        tracing::info!(
                            driver = %c.driver, claim = %c.claim,
                            "DRA claims of this driver are not GPUs; not attributed"
                        )
                    });
                    ClaimedDeviceState::OtherDriver
                }
            };
            counts.entry(state).or_default().insert(c.device_key());
        }
        holders.sort();
        holders.dedup();
        let labels = self.pod_labels().await;
        self.known.store(Arc::new(Known {
            holders,
            resolved,
            labels,
            at: Some(Instant::now()),
        }));
        let mut health = self.health();
        if !health.up {
            tracing::info!(socket = %self.config.socket.display(), "kubelet pod-resources reachable: pod attribution on");
        }
        health.up = true;
        health.last_refresh = Some(SystemTime::now());
        health.claimed = ClaimedDeviceState::ALL
            .iter()
            .map(|s| (*s, counts.get(s).map_or(0, |d| d.len() as u64)))
            .collect();
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn carried(&self) -> std::sync::MutexGuard<'_, Carried> {
        self.carried.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, source: KubernetesSource, reason: KubernetesReadError) {
        *self
            .health()
            .read_errors
            .entry((source, reason))
            .or_insert(0) += 1;
    }

    /// Runs `log` the first time `key` is seen since it last cleared or
    /// was gone (not seen for `FORGET_AFTER_REFRESHES` refreshes).
    fn warn_once(&self, key: &str, log: impl FnOnce()) -> bool {
        let first = self.carried().logged.first(key);
        if first {
            log();
        }
        first
    }

    /// Forgets `key`: the problem cleared, and is logged again if it comes
    /// back.
    fn cleared(&self, key: &str) {
        self.carried().logged.seen.remove(key);
    }

    /// Resolves each claimed device of NVIDIA's driver from the CDI specs
    /// (blocking: reads files). Also notices a kubelet that reports no
    /// claims while the driver has prepared some.
    fn resolve_locally(&self, claimed: Vec<Claimed>, any_dra: bool) -> Vec<(Claimed, Outcome)> {
        let need_specs = claimed.iter().any(Claimed::is_nvidia_gpu);
        let scan = self.carried().cdi.scan(need_specs);
        for p in &scan.problems {
            self.count(KubernetesSource::Cdi, p.reason);
            let key = format!("cdi {}", p.path.display());
            self.warn_once(&key, || {
                tracing::warn!(path = %p.path.display(), reason = p.reason.as_label(), error = %p.detail,
                    "a CDI spec could not be used for DRA claims")
            });
        }
        if !any_dra && scan.nvidia_claim_specs > 0 {
            self.count(KubernetesSource::KubeletDra, KubernetesReadError::Missing);
            self.warn_once("kubelet without dra", || {
                tracing::warn!(
                    claim_specs = scan.nvidia_claim_specs,
                    "the kubelet reports no DRA claims, yet NVIDIA's DRA driver has prepared some \
                     (CDI specs k8s.gpu.nvidia.com-claim_*): it is older than 1.27 or has \
                     KubeletPodResourcesDynamicResources off (on by default from 1.34); \
                     pods holding GPUs through DRA are not attributed"
                )
            });
        } else if any_dra {
            self.cleared("kubelet without dra");
        }
        let mut mig: Option<Option<Rc<MigMinors>>> = None;
        let mut out = Vec::with_capacity(claimed.len());
        for c in claimed {
            if !c.is_nvidia_gpu() {
                out.push((c, Outcome::OtherDriver));
                continue;
            }
            let result = dra::resolve_from_cdi(
                &c,
                |name| scan.devices.get(name).cloned(),
                || {
                    mig.get_or_insert_with(|| self.mig_minors().map(Rc::new))
                        .clone()
                },
            );
            let outcome = match result {
                Ok(devices) => Outcome::Resolved(devices),
                Err(why) => Outcome::Unresolved(why.to_string()),
            };
            out.push((c, outcome));
        }
        out
    }

    fn mig_minors(&self) -> Option<MigMinors> {
        match cdi::read_mig_minors(&self.reader, &self.config.procfs) {
            Ok(table) => {
                self.cleared("mig minors");
                Some(table)
            }
            Err(p) => {
                self.count(KubernetesSource::Cdi, p.reason);
                self.warn_once("mig minors", || {
                    tracing::warn!(path = %p.path.display(), error = %p.detail,
                        "the driver's MIG minors could not be read; MIG devices of DRA claims are not resolved")
                });
                None
            }
        }
    }

    /// Looks the devices the CDI specs did not resolve up in this node's
    /// ResourceSlices, with `--kubernetes.resource-slices`.
    async fn resolve_from_slices(
        &self,
        mut local: Vec<(Claimed, Outcome)>,
    ) -> Vec<(Claimed, Outcome)> {
        let Some((api, node)) = &self.config.resource_slices else {
            return local;
        };
        let key = |c: &Claimed| (c.pool.clone(), c.device.clone());
        let wanted: Vec<(String, String)> = local
            .iter()
            .filter(|(c, o)| matches!(o, Outcome::Unresolved(_)) && !c.device.is_empty())
            .map(|(c, _)| key(c))
            .collect();
        if wanted.is_empty() {
            return local;
        }
        let (due, mut version) = {
            let carried = self.carried();
            let known = wanted.iter().all(|k| carried.slices.contains_key(k));
            let age = carried.slices_at.map(|at| at.elapsed());
            let due = match age {
                None => true,
                Some(age) if age > SLICES_MAX_AGE => true,
                // A device the slices did not know: look again, but at most
                // once a refresh interval.
                Some(age) => !known && age >= self.config.refresh_interval,
            };
            (due, carried.slices_version)
        };
        if due {
            let read =
                apiserver::slice_uuids(&self.https, api, node, &mut version, CALL_TIMEOUT).await;
            let mut carried = self.carried();
            carried.slices_version = version;
            carried.slices_at = Some(Instant::now());
            match read {
                Ok(uuids) => {
                    carried.slices = uuids;
                    drop(carried);
                    self.cleared("resource slices");
                }
                Err(e) => {
                    drop(carried);
                    self.count(KubernetesSource::ResourceSlices, e.reason());
                    self.warn_once("resource slices", || {
                        tracing::warn!(error = %e, "this node's ResourceSlices could not be read")
                    });
                }
            }
        }
        let carried = self.carried();
        for (c, outcome) in &mut local {
            if let Outcome::Unresolved(_) = outcome {
                if let Some(uuid) = carried.slices.get(&key(c)) {
                    *outcome = Outcome::Resolved(vec![DeviceRef::Uuid(uuid.clone())]);
                }
            }
        }
        local
    }

    /// The allowlisted labels of this node's pods: read now, or as last
    /// read while that is fresh.
    async fn pod_labels(&self) -> HashMap<(String, String), PodLabels> {
        let Some(config) = &self.config.pod_labels else {
            return HashMap::new();
        };
        let read = match &config.source {
            LabelSource::Kubelet(url) => {
                apiserver::pods_from_kubelet(&self.https, url, CALL_TIMEOUT).await
            }
            LabelSource::ApiServer { url, node } => {
                apiserver::pods_from_api_server(&self.https, url, node, CALL_TIMEOUT).await
            }
        };
        match read {
            Ok(pods) => {
                self.cleared("pod labels");
                let mut out = HashMap::with_capacity(pods.len());
                for pod in pods {
                    let mut selected = config.allow.select(&pod.labels);
                    if config.uid {
                        with_uid(&mut selected.labels, pod.uid.as_deref());
                    }
                    for key in &selected.dropped {
                        let once = format!("dropped {}/{} {key}", pod.namespace, pod.name);
                        if self.warn_once(&once, || {
                            tracing::warn!(namespace = %pod.namespace, pod = %pod.name, label = %key,
                                "a pod label the allowlist matches is left out: its name is taken, \
                                 or the pod or the exporter has reached its limit of labels")
                        }) {
                            self.count(KubernetesSource::PodLabels, KubernetesReadError::Dropped);
                        }
                    }
                    if !selected.labels.is_empty() {
                        out.insert((pod.namespace, pod.name), selected.labels);
                    }
                }
                let mut carried = self.carried();
                carried.labels = out.clone();
                carried.labels_at = Some(Instant::now());
                out
            }
            Err(e) => {
                self.count(KubernetesSource::PodLabels, e.reason());
                self.warn_once("pod labels", || {
                    tracing::warn!(error = %e, "pod labels could not be read; the last ones read are kept while fresh")
                });
                let carried = self.carried();
                let fresh = carried.labels_at.is_some_and(|at| {
                    at.elapsed() <= self.config.refresh_interval * STALE_AFTER_INTERVALS
                });
                if fresh {
                    carried.labels.clone()
                } else {
                    HashMap::new()
                }
            }
        }
    }

    /// Fills in each GPU's pods and the kubelet's status, in place (the
    /// join step's, `crate::join`).
    pub fn apply(&self, snapshot: &mut Snapshot) {
        let known = self.known.load();
        let fresh = known
            .at
            .is_some_and(|at| at.elapsed() <= self.config.refresh_interval * STALE_AFTER_INTERVALS);
        for gpu in &mut snapshot.gpus {
            gpu.pods = if fresh {
                holders::attribute(gpu, &known.holders, &known.labels)
            } else {
                Vec::new()
            };
        }
        let nowhere = self.resolved_to_no_gpu(&known, snapshot);
        let health = self.health();
        let mut claimed = health.claimed.clone();
        if nowhere > 0 {
            if let Some(n) = claimed.get_mut(&ClaimedDeviceState::Resolved) {
                *n = n.saturating_sub(nowhere);
            }
            *claimed.entry(ClaimedDeviceState::Unresolved).or_insert(0) += nowhere;
        }
        snapshot.kubernetes = Some(KubernetesStatus {
            up: health.up,
            refresh_errors: health.refresh_errors,
            last_refresh: health.last_refresh,
            claimed_devices: claimed.iter().map(|(s, n)| (*s, *n)).collect(),
            read_errors: health
                .read_errors
                .iter()
                .map(|((s, r), n)| (*s, *r, *n))
                .collect(),
        });
    }
}

impl Attribution {
    /// How many resolved claim devices name only devices no GPU of the
    /// snapshot can be (a spec's `/dev/nvidia99` on an eight-GPU node):
    /// they are attributed to nothing, so they count as `unresolved`, with
    /// a line once per device (issue 51; probe 5, D13: they counted as
    /// `resolved`). Not while the snapshot has no GPUs (NVML down).
    fn resolved_to_no_gpu(&self, known: &Known, snapshot: &Snapshot) -> u64 {
        if snapshot.gpus.is_empty() {
            return 0;
        }
        let mut nowhere = 0;
        for (key, devices) in &known.resolved {
            let somewhere = devices
                .iter()
                .any(|d| snapshot.gpus.iter().any(|g| holders::may_be_on(g, d)));
            if somewhere {
                continue;
            }
            nowhere += 1;
            self.warn_once(&format!("nowhere {key}"), || {
                tracing::warn!(
                    device = %key, devices = ?devices,
                    "a GPU of a DRA claim names a device no GPU of this node has (its CDI spec's node, e.g. /dev/nvidia99); it is attributed to no GPU and counted as unresolved"
                )
            });
        }
        nowhere
    }
}

/// Adds the pod's UID as `pod_uid` to its labels, in name order; a UID
/// that is not one (empty, or more than a UUID's characters) is left out.
/// `pod_uid` is reserved, so no pod label holds the name.
fn with_uid(labels: &mut PodLabels, uid: Option<&str>) {
    let Some(uid) = uid.filter(|u| {
        !u.is_empty() && u.len() <= 64 && u.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    }) else {
        return;
    };
    let at = labels.partition_point(|(n, _)| *n < "pod_uid");
    labels.insert(at, ("pod_uid", uid.to_string()));
}

#[cfg(test)]
mod tests {
    use super::holders::{attribute, from_device_plugin, resource_matches};
    use super::podresources::*;
    use super::*;
    use crate::snapshot::{
        GpuIdentity, GpuReadings, GpuState, Health as GpuHealth, MigComputeInstance, MigGpuInstance,
    };

    fn gpu(index: u32, uuid: &str, mig: Vec<MigGpuInstance>) -> GpuState {
        GpuState {
            index,
            uuid: uuid.into(),
            identity: GpuIdentity {
                minor_number: Some(index + 4),
                ..GpuIdentity::default()
            },
            health: GpuHealth::Up,
            last_sample: None,
            sample_duration: None,
            stuck_call: None,
            readings: Some(Arc::new(GpuReadings {
                mig,
                ..Default::default()
            })),
            xids: vec![],
            xid_other: None,
            nvml_errors: vec![],
            driver_time: vec![],
            pods: vec![],
            evidence: None,
            verdicts: vec![],
        }
    }

    fn mig_instance(gi: u32, ci: u32, uuid: &str) -> MigGpuInstance {
        MigGpuInstance {
            gpu_instance: gi,
            profile: "1g.10gb".into(),
            size: None,
            bar1: None,
            memory: None,
            engine_activity: Vec::new(),
            activity: vec![],
            compute_instances: vec![MigComputeInstance {
                compute_instance: ci,
                mig_uuid: uuid.into(),
            }],
        }
    }

    fn pod(ns: &str, name: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: ns.into(),
            containers: vec![ContainerResources {
                name: container.into(),
                devices: vec![ContainerDevices {
                    resource_name: resource.into(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                }],
                dynamic_resources: vec![],
            }],
        }
    }

    fn defaults() -> Vec<String> {
        DEFAULT_RESOURCE_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn config(refresh_interval: Duration) -> AttributionConfig {
        AttributionConfig {
            socket: "/nonexistent".into(),
            resource_names: defaults(),
            refresh_interval,
            rootfs: "/nonexistent".into(),
            procfs: "/nonexistent".into(),
            pod_labels: None,
            dra_labels: false,
            resource_slices: None,
            ca_file: DEFAULT_CA_FILE.into(),
            token_file: DEFAULT_TOKEN_FILE.into(),
        }
    }

    #[test]
    fn device_ids_of_every_plugin_strategy_parse() {
        assert_eq!(
            DeviceRef::parse("GPU-abc"),
            Some(DeviceRef::Uuid("GPU-abc".into()))
        );
        assert_eq!(
            DeviceRef::parse("GPU-abc::3"),
            Some(DeviceRef::Uuid("GPU-abc".into()))
        );
        assert_eq!(
            DeviceRef::parse("MIG-x"),
            Some(DeviceRef::Uuid("MIG-x".into()))
        );
        assert_eq!(DeviceRef::parse("2"), Some(DeviceRef::Index(2)));
        assert_eq!(DeviceRef::parse("2::1"), Some(DeviceRef::Index(2)));
        assert_eq!(DeviceRef::parse("eth0"), None);
        // GKE's device plugin: device nodes, MIG GPU instances, sharing.
        assert_eq!(DeviceRef::parse("nvidia3"), Some(DeviceRef::Minor(3)));
        assert_eq!(DeviceRef::parse("nvidia3/vgpu2"), Some(DeviceRef::Minor(3)));
        let gi = Some(DeviceRef::MigMinor {
            gpu_minor: 0,
            gpu_instance: 7,
            compute_instance: None,
        });
        assert_eq!(DeviceRef::parse("nvidia0/gi7"), gi);
        assert_eq!(DeviceRef::parse("nvidia0/gi7/vgpu1"), gi);
        assert_eq!(DeviceRef::parse("nvidia"), None);
        assert_eq!(DeviceRef::parse("nvidia0/gix"), None);
    }

    #[test]
    fn only_gpu_resources_count() {
        let patterns = defaults();
        assert!(resource_matches(&patterns, "nvidia.com/gpu"));
        assert!(resource_matches(&patterns, "nvidia.com/mig-3g.40gb"));
        assert!(!resource_matches(&patterns, "nvidia.com/gpu-other"));
        assert!(!resource_matches(&patterns, "example.com/nic"));
    }

    #[test]
    fn shared_and_mig_devices_attribute_to_every_holder() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![
                pod("a", "p1", "c", "nvidia.com/gpu", &["GPU-0::0"]),
                pod("b", "p2", "c", "nvidia.com/gpu", &["GPU-0::1"]),
                pod("c", "p3", "c", "nvidia.com/mig-1g.10gb", &["MIG-1"]),
                pod("d", "p4", "c", "example.com/nic", &["GPU-0"]),
                // Two replicas of the same GPU in one container: one holding.
                pod("e", "p5", "c", "nvidia.com/gpu", &["1::0", "1::1"]),
            ],
        };
        let holders = from_device_plugin(&response, &defaults());
        let g0 = gpu(0, "GPU-0", vec![]);
        let g1 = gpu(1, "GPU-1", vec![mig_instance(7, 0, "MIG-1")]);
        let none = HashMap::new();
        let pods0: Vec<_> = attribute(&g0, &holders, &none)
            .into_iter()
            .map(|p| p.pod)
            .collect();
        assert_eq!(pods0, ["p1", "p2"]);
        let pods1 = attribute(&g1, &holders, &none);
        assert_eq!(pods1.len(), 2);
        let mig = pods1.iter().find(|p| p.pod == "p3").expect("MIG holder");
        assert_eq!((mig.gpu_instance, mig.compute_instance), (Some(7), Some(0)));
        let whole = pods1.iter().find(|p| p.pod == "p5").expect("index holder");
        assert_eq!(whole.gpu_instance, None);
    }

    #[test]
    fn claims_resolved_by_minor_land_on_their_gpu_and_mig_instance() {
        let holder = |device: DeviceRef, pod: &str| Holder {
            device,
            namespace: "ml".into(),
            pod: pod.into(),
            container: "main".into(),
            dra: None,
        };
        // GPU 1 has minor 5; its GPU instance 2 compute instance 0.
        let g1 = gpu(1, "GPU-1", vec![mig_instance(2, 0, "MIG-a")]);
        let holders = [
            holder(DeviceRef::Minor(5), "whole"),
            // The same container also holds it by UUID: one holding.
            holder(DeviceRef::Uuid("GPU-1".into()), "whole"),
            holder(
                DeviceRef::MigMinor {
                    gpu_minor: 5,
                    gpu_instance: 2,
                    compute_instance: Some(0),
                },
                "mig",
            ),
            // An instance this GPU does not have (reconfigured since).
            holder(
                DeviceRef::MigMinor {
                    gpu_minor: 5,
                    gpu_instance: 9,
                    compute_instance: None,
                },
                "gone",
            ),
            holder(DeviceRef::Minor(1), "other-gpu"),
        ];
        let labels: HashMap<_, _> = [(
            ("ml".to_string(), "mig".to_string()),
            vec![("team", "vision".to_string())],
        )]
        .into_iter()
        .collect();
        let got = attribute(&g1, &holders, &labels);
        let places: Vec<_> = got
            .iter()
            .map(|p| (p.pod.as_str(), p.gpu_instance, p.compute_instance))
            .collect();
        assert_eq!(places, [("mig", Some(2), Some(0)), ("whole", None, None)]);
        assert_eq!(got[0].labels, [("team", "vision".to_string())]);
        assert!(got[1].labels.is_empty());
    }

    #[test]
    fn stale_answers_are_withdrawn() {
        let attribution = Attribution::new(config(Duration::from_millis(1)));
        attribution.known.store(Arc::new(Known {
            resolved: Vec::new(),
            holders: vec![Holder {
                device: DeviceRef::Index(0),
                namespace: "a".into(),
                pod: "p".into(),
                container: "c".into(),
                dra: None,
            }],
            labels: HashMap::new(),
            at: Instant::now().checked_sub(Duration::from_secs(1)),
        }));
        let mut snapshot = Snapshot {
            gpus: vec![gpu(0, "GPU-0", vec![])],
            ..Default::default()
        };
        snapshot.gpus[0].pods = holders::attribute(
            &snapshot.gpus[0],
            &attribution.known.load().holders,
            &HashMap::new(),
        );
        assert_eq!(snapshot.gpus[0].pods.len(), 1, "attributed while fresh");
        attribution.apply(&mut snapshot);
        assert!(snapshot.gpus[0].pods.is_empty());
        assert_eq!(snapshot.kubernetes.map(|k| k.up), Some(false));
    }

    /// Issue 41 (probe 5, D1): past 1,024 keys the whole set was cleared,
    /// so every key was logged and counted again at each refresh.
    #[test]
    fn a_problem_is_logged_once_for_as_long_as_it_lasts() {
        let mut logged = Logged::default();
        let mut firsts = 0;
        for _ in 0..5 {
            logged.next_refresh();
            firsts += (0..5_000)
                .filter(|i| logged.first(&format!("dropped ns/p{i} k")))
                .count();
        }
        assert_eq!(firsts, 5_000, "each once, across refreshes");
        // Gone for a while, then back: new again.
        for _ in 0..=FORGET_AFTER_REFRESHES {
            logged.next_refresh();
            assert!(!logged.first("dropped ns/p0 k"), "still there");
        }
        for _ in 0..=FORGET_AFTER_REFRESHES {
            logged.next_refresh();
        }
        assert_eq!(logged.seen.len(), 0, "forgotten once gone");
        assert!(logged.first("dropped ns/p0 k"));
        // Bounded: past the cap a new key is not remembered, and not new.
        for i in 0..MAX_REMEMBERED {
            logged.first(&i.to_string());
        }
        assert!(!logged.first("one more"));
        assert!(logged.seen.len() <= MAX_REMEMBERED);
    }

    #[test]
    fn the_pod_uid_goes_in_name_order_and_a_forged_one_is_left_out() {
        let mut labels: PodLabels = vec![("app", "a".into()), ("team", "ml".into())];
        with_uid(&mut labels, Some("9f1c2d3e-0000-4a5b-8c9d-000000000001"));
        assert_eq!(
            labels.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            ["app", "pod_uid", "team"]
        );
        let mut forged: PodLabels = Vec::new();
        with_uid(&mut forged, Some("x\"} 1\nevil{"));
        with_uid(&mut forged, Some(""));
        with_uid(&mut forged, None);
        assert!(forged.is_empty());
    }
}
