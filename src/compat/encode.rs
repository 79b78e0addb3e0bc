//! The DCGM series of one snapshot, shaped as dcgm-exporter serves them
//! (NVIDIA/dcgm-exporter `internal/pkg/collector/gpu_collector.go` and
//! `internal/pkg/rendermetrics/render_metrics.go` at d5e5f51):
//!
//! - One series per GPU, labelled `gpu`, `UUID`, `pci_bus_id`, `device`
//!   (`nvidia<index>`), `modelName` and the host label; on a GPU in MIG
//!   mode one series per GPU instance instead, adding `GPU_I_PROFILE` and
//!   `GPU_I_ID` (dcgm-exporter's default `-d f` watches a MIG GPU's
//!   instances, not the GPU). An instance carries its own frame buffer
//!   and profiling values and its GPU's value of every other field, as
//!   DCGM answers a device field of a GPU instance from its GPU.
//! - The label fields of the selection (the driver version by default) on
//!   every series.
//! - The XID field with `err_code` and `err_msg` (the XID catalog's
//!   description of the code).
//! - With `--kubernetes`, `pod`, `namespace` and `container` of the one
//!   container that holds the GPU or GPU instance. A device several
//!   containers share keeps its series without pod labels (dcgm-exporter
//!   gives them one holder's labels, or copies the series to each holder
//!   with `--kubernetes-virtual-gpus`: either way a sum by pod counts the
//!   device once per holder). With `--workloads`, each holder of a shared
//!   whole GPU gets series of its own for the fields dcgm-exporter's
//!   per-process mode measures per pod (GPU utilization, frame buffer
//!   used) and for the graphics engine activity, from the holder's
//!   measured SM time and memory.

use std::sync::PoisonError;
use std::time::SystemTime;

use super::fields::{Field, FieldKind, PerPod, Source, Unit};
use super::{Compat, Generation, Selected};
use crate::exposition::Writer;
use crate::metric::{Kind, Metric, SampleBuilder, SampleSink, Scope, Value};
use crate::snapshot::{GpuReadings, GpuState, MigGpuInstance, MigSize, PodAttribution, Snapshot};
use crate::xid_catalog;

/// What the output remembers from render to render: the counters behind
/// its rates, and the `device` label values.
#[derive(Debug, Default)]
pub struct State {
    counters: Vec<Counter>,
    pods: Vec<PodCounter>,
    devices: Vec<String>,
    /// DCGM's name of each GPU instance's profile, by GPU and instance,
    /// with the size it was made from.
    profiles: Vec<((u32, u32), MigSize, String)>,
    /// Per GPU: the clock event reasons last seen, when, and how often
    /// each turned on since (`DCGM_EXP_CLOCK_EVENTS_TOTAL`).
    clock_events: Vec<ClockEvents>,
}

#[derive(Debug)]
struct ClockEvents {
    gpu: u32,
    at: SystemTime,
    mask: u64,
    totals: [u64; super::fields::CLOCK_EVENTS.len()],
}

/// A cumulative counter of a GPU (bytes) as last seen, and its rate over
/// the interval before.
#[derive(Debug)]
struct Counter {
    gpu: u32,
    field: u16,
    at: SystemTime,
    value: u64,
    rate: Option<f64>,
}

/// A pod's SM time on a shared GPU as last seen, and its share of the GPU
/// over the interval before.
#[derive(Debug)]
struct PodCounter {
    gpu: u32,
    namespace: String,
    pod: String,
    container: String,
    at: SystemTime,
    sm_seconds: f64,
    rate: Option<f64>,
    seen: bool,
}

/// One entity dcgm-exporter serves series for: a GPU, or a GPU instance
/// of a GPU in MIG mode.
struct Entity<'a> {
    gpu: &'a GpuState,
    readings: Option<&'a GpuReadings>,
    instance: Option<&'a MigGpuInstance>,
}

impl Entity<'_> {
    fn gpu_instance(&self) -> Option<u32> {
        self.instance.map(|gi| gi.gpu_instance)
    }
}

/// The entities of a snapshot, in GPU order.
fn entities(snapshot: &Snapshot) -> impl Iterator<Item = Entity<'_>> {
    snapshot.gpus.iter().flat_map(|g| {
        let r = g.readings.as_deref();
        let instances = r.map_or(&[][..], |r| r.mig.as_slice());
        let whole = instances.is_empty().then_some(Entity {
            gpu: g,
            readings: r,
            instance: None,
        });
        whole
            .into_iter()
            .chain(instances.iter().map(move |gi| Entity {
                gpu: g,
                readings: r,
                instance: Some(gi),
            }))
    })
}

/// The containers holding an entity.
fn holders<'a>(e: &Entity<'a>) -> impl Iterator<Item = &'a PodAttribution> + 'a {
    let gi = e.gpu_instance();
    e.gpu.pods.iter().filter(move |p| p.gpu_instance == gi)
}

/// Writes every selected field of `compat` for `snapshot` into `w`.
pub fn encode(snapshot: &Snapshot, compat: &Compat, w: &mut Writer) {
    let mut guard = compat.state.lock().unwrap_or_else(PoisonError::into_inner);
    guard.observe(snapshot, &compat.fields);
    let state: &State = &guard;
    let labels: Vec<(&'static str, &Field)> = compat
        .fields
        .iter()
        .filter(|s| s.field.kind == FieldKind::Label && s.field.has_source())
        .map(|s| (s.name, s.field))
        .collect();
    let ctx = Ctx {
        snapshot,
        compat,
        state,
        labels: &labels,
    };
    let mut sink = SampleSink::new();
    for s in &compat.fields {
        if s.field.kind == FieldKind::Label || !s.field.has_source() {
            continue;
        }
        sink.clear();
        ctx.collect(s.field, s.unit, &mut sink);
        let metric = Metric {
            name: s.name,
            help: s.help,
            kind: match s.kind {
                FieldKind::Counter => Kind::ForeignCounter,
                FieldKind::Gauge | FieldKind::Label => Kind::Gauge,
            },
            collect: nothing,
        };
        w.family(&metric, &mut sink);
    }
}

fn nothing(_: &Scope<'_>, _: &mut SampleSink<'_>) {}

struct Ctx<'a> {
    snapshot: &'a Snapshot,
    compat: &'a Compat,
    state: &'a State,
    labels: &'a [(&'static str, &'static Field)],
}

impl<'a> Ctx<'a> {
    fn collect(&self, field: &'static Field, unit: Unit, out: &mut SampleSink<'a>) {
        if let Source::XidTotals = field.source {
            return self.xid_totals(out);
        }
        if let Source::ClockEventTotals = field.source {
            return self.clock_event_totals(out);
        }
        for e in entities(self.snapshot) {
            let Some(v) = self.value(field, &e) else {
                continue;
            };
            let mut holders = holders(&e);
            let (first, second) = (holders.next(), holders.next());
            let jobs = self.hpc_jobs(&e);
            // One series per mapped job, as dcgm-exporter copies them.
            for i in 0..jobs.len().max(1) {
                let mut b = self.labels(out.sample(), &e);
                if let Source::LastXid = field.source {
                    let code = v as u64;
                    // dcgm-exporter's text for 0 (`xid_errors.go` at
                    // 3.3.6-3.4.2, l. 21): what it printed before an XID.
                    let msg = match code {
                        0 => "No Error",
                        _ => xid_catalog::lookup(code).map_or("Unknown Error", |x| x.meaning),
                    };
                    b = b.label("err_code", code).label("err_msg", msg);
                }
                if let (Some(p), None) = (first, second) {
                    b = pod_labels(b, p);
                }
                b = b.label_opt("hpc_job", jobs.get(i));
                b.set(Value::Float(unit.convert(v)));
            }
            if second.is_some() && e.instance.is_none() {
                if let Some(per_pod) = field.per_pod {
                    self.per_pod(&e, per_pod, unit, out);
                }
            }
        }
    }

    /// `DCGM_EXP_XID_ERRORS_TOTAL{xid}`: per entity and code, the XIDs
    /// counted since start, with the entity's labels and holder, as
    /// dcgm-exporter's XID total collector serves them. A MIG GPU
    /// instance counts its own XIDs and the whole GPU's, never a
    /// sibling's (as [`last_xid`]).
    fn xid_totals(&self, out: &mut SampleSink<'a>) {
        for e in entities(self.snapshot) {
            let gi = e.instance.map(|gi| gi.gpu_instance);
            let mut codes: Vec<(u64, u64)> = Vec::new();
            for x in e
                .gpu
                .xids
                .iter()
                .filter(|x| x.gpu_instance.is_none() || x.gpu_instance == gi)
            {
                match codes.iter_mut().find(|(c, _)| *c == x.xid) {
                    Some((_, n)) => *n = n.saturating_add(x.count),
                    None => codes.push((x.xid, x.count)),
                }
            }
            codes.sort_unstable();
            let mut holders = holders(&e);
            let (first, second) = (holders.next(), holders.next());
            for (code, n) in codes {
                let mut b = self.labels(out.sample(), &e).label("xid", code);
                if let (Some(p), None) = (first, second) {
                    b = pod_labels(b, p);
                }
                b.set(Value::Float(n as f64));
            }
        }
    }

    /// `DCGM_EXP_CLOCK_EVENTS_TOTAL{clock_event}`: per entity, how often
    /// each reason turned on, for the reasons that did (a MIG GPU
    /// instance carries its GPU's: the reasons are the GPU's).
    fn clock_event_totals(&self, out: &mut SampleSink<'a>) {
        for e in entities(self.snapshot) {
            let Some(c) = self
                .state
                .clock_events
                .iter()
                .find(|c| c.gpu == e.gpu.index)
            else {
                continue;
            };
            let mut holders = holders(&e);
            let (first, second) = (holders.next(), holders.next());
            for (reason, n) in super::fields::CLOCK_EVENTS.iter().zip(c.totals) {
                if n == 0 {
                    continue;
                }
                let mut b = self.labels(out.sample(), &e).label("clock_event", *reason);
                if let (Some(p), None) = (first, second) {
                    b = pod_labels(b, p);
                }
                b.set(Value::Float(n as f64));
            }
        }
    }

    /// The jobs dcgm-exporter's HPC job mapping directory names for `e`
    /// (`--workloads.slurm-mapping-dir`), as it matches them
    /// (NVIDIA/dcgm-exporter `internal/pkg/transformation/hpc.go`): a GPU's
    /// series by the file named for its index; from 4.5.3-4.8.2 a MIG GPU
    /// instance's by the file `<gpu>.<gpu instance>` only (#602), before
    /// it by its GPU's file.
    fn hpc_jobs(&self, e: &Entity<'a>) -> &'a [String] {
        let Some(w) = self.snapshot.workloads.as_ref() else {
            return &[];
        };
        let instance = e
            .gpu_instance()
            .filter(|_| self.compat.generation.hpc_job_by_instance());
        w.hpc_jobs
            .get(&(e.gpu.index, instance))
            .map_or(&[], Vec::as_slice)
    }

    /// The labels every series of `e` carries.
    fn labels<'s>(&self, b: SampleBuilder<'s, 'a>, e: &Entity<'a>) -> SampleBuilder<'s, 'a> {
        let g = e.gpu;
        let device = self.state.devices.get(g.index as usize).map(String::as_str);
        let mut b = b
            .label("gpu", g.index)
            .label("UUID", &g.uuid)
            .label_opt(
                "pci_bus_id",
                g.identity
                    .pci_bus_id
                    .as_deref()
                    .filter(|_| self.compat.generation.has_pci_bus_id()),
            )
            .label_opt("device", device)
            .label_opt("modelName", g.identity.name.as_deref());
        if let Some(gi) = e.instance {
            let profile = self
                .state
                .profiles
                .iter()
                .find(|(k, ..)| *k == (g.index, gi.gpu_instance))
                .map_or(gi.profile.as_str(), |(.., p)| p.as_str());
            b = b
                .label("GPU_I_PROFILE", profile)
                .label("GPU_I_ID", gi.gpu_instance);
        }
        b = b.label_opt(
            self.compat.generation.hostname_label(),
            self.compat.hostname.as_deref(),
        );
        for (name, field) in self.labels {
            match field.source {
                Source::Label(read) => b = b.label_opt(name, read(self.snapshot, g)),
                Source::LabelNumber(read) => b = b.label_opt(name, read(self.snapshot, g)),
                _ => {}
            }
        }
        b
    }

    /// The field's value for `e`, in base units: the reading, or where
    /// NVML has none, what DCGM prints there ([`dcgm_blank`]); `None`
    /// where DCGM prints nothing either.
    fn value(&self, field: &Field, e: &Entity<'a>) -> Option<f64> {
        self.reading(field, e)
            .or_else(|| dcgm_blank(field.id, self.compat.generation, e))
    }

    /// The reading for `e`, in base units; `None` where there is none.
    fn reading(&self, field: &Field, e: &Entity<'a>) -> Option<f64> {
        match field.source {
            Source::Gpu(read) => e.readings.and_then(read),
            Source::Instance { gpu, mig } => match e.instance {
                Some(gi) => mig(gi),
                None => e.readings.and_then(gpu),
            },
            Source::Engine(id) => {
                let engines = match e.instance {
                    Some(gi) => &gi.engine_activity,
                    None => &e.readings?.engine_activity,
                };
                engines.iter().find(|(i, _)| *i == id).map(|(_, v)| *v)
            }
            Source::Rate(_) | Source::LinkRate { .. } => {
                e.readings.and(self.state.rate(e.gpu.index, field.id))
            }
            Source::Node(read) => read(self.snapshot),
            Source::LastXid => last_xid(e.gpu, e.instance.map(|gi| gi.gpu_instance)),
            Source::Label(_)
            | Source::LabelNumber(_)
            | Source::None(_)
            | Source::XidTotals
            | Source::ClockEventTotals => None,
        }
    }

    /// One series per holder of a shared whole GPU, with what it used.
    fn per_pod(&self, e: &Entity<'a>, per_pod: PerPod, unit: Unit, out: &mut SampleSink<'a>) {
        for p in holders(e) {
            let v = match per_pod {
                PerPod::SmTime => self.state.pod_rate(e.gpu.index, p),
                PerPod::Memory => pod_memory(self.snapshot, e.gpu.index, p),
            };
            // GPU utilization and graphics activity are the same measure
            // (time a kernel of the pod ran); the unit scales it.
            let Some(v) = v else {
                continue;
            };
            let jobs = self.hpc_jobs(e);
            for i in 0..jobs.len().max(1) {
                let b = pod_labels(self.labels(out.sample(), e), p);
                b.label_opt("hpc_job", jobs.get(i))
                    .set(Value::Float(unit.convert(v)));
            }
        }
    }
}

/// What dcgm-exporter prints for a field NVML gave no value for, where
/// that is not nothing: DCGM stores NVML's error as a blank value
/// (NVIDIA/DCGM `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe, e.g. the
/// memory temperature l. 10974-10988, the fan l. 11216-11229) and
/// dcgm-exporter skips blank values (`internal/pkg/collector/gpu_collector.go`
/// `toString` at tag 4.5.3-4.8.2, l. 373-396; the same switch since 3.x),
/// so most fields are absent, as here. The exceptions, each by generation
/// (docs/migrating-from-dcgm-exporter.md, "What DCGM prints where NVML has
/// no value"), only for a GPU that answered this poll:
/// - `DCGM_FI_DEV_XID_ERRORS` (230): 0 before the first XID up to 3.4
///   (NVIDIA/dcgm-exporter #700 and #646: 4.4.1-4.6.0 printed 0 on every
///   healthy GPU, 4.5.3-4.8.2 prints nothing);
/// - `DCGM_FI_DEV_MEMORY_TEMP` (140): 0 up to 3.4, nothing from DCGM 4 on
///   (#460: 3.3.5-3.4.1 printed 0 on a board without a memory sensor,
///   4.1.1-4.0.4 nothing; DCGM 4.6 stores NVML's error as blank);
/// - `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` (449): 0 on a GPU without
///   NVLink, every generation (DCGM asks NVML for the sum over all links,
///   scope `UINT_MAX`, l. 13917-13921, which is 0 without links; as real
///   dcgm-exporter output on PCIe boards shows).
fn dcgm_blank(id: u16, generation: Generation, e: &Entity<'_>) -> Option<f64> {
    let r = e.readings?;
    let zero = match id {
        230 => generation == Generation::V3_4 && e.gpu.xids.is_empty() && e.gpu.xid_other.is_none(),
        140 => generation == Generation::V3_4,
        449 => r.nvlinks.is_empty(),
        _ => false,
    };
    zero.then_some(0.0)
}

/// The holder's `pod`, `namespace` and `container`, and the pod labels
/// `--kubernetes.pod-labels` allows (dcgm-exporter's
/// `--kubernetes-enable-pod-labels` puts them on its series too), less any
/// that would take the name of a label the DCGM series carry.
fn pod_labels<'s, 'a>(b: SampleBuilder<'s, 'a>, p: &'a PodAttribution) -> SampleBuilder<'s, 'a> {
    let mut b = b
        .label("pod", &p.pod)
        .label("namespace", &p.namespace)
        .label("container", &p.container);
    for (name, value) in &p.labels {
        if !DCGM_LABELS.contains(name) && !name.starts_with("DCGM_") {
            b = b.label(name, value);
        }
    }
    b
}

/// Label names of the DCGM series themselves.
const DCGM_LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "hostname",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "err_code",
    "err_msg",
    "hpc_job",
    "xid",
    "clock_event",
];

/// The code of the most recent XID of the entity; `None` before the
/// first, and when the most recent was one folded into `xid="other"` (its
/// code is then not known).
///
/// A MIG GPU instance's series carries the XIDs NVML reported for that
/// instance (or for one of its compute instances) and those of the whole
/// GPU, never a sibling instance's: DCGM records an XID that names a GPU or
/// compute instance on that entity only (NVIDIA/DCGM
/// `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe, event loop l. 7876-7893,
/// `RecordXidForGpuInstance`, `RecordXidForComputeInstance`), so an alert by
/// `pod` names the tenant whose instance faulted. An XID of the whole GPU
/// stays on every instance: it stops them all (DCGM keeps it on the GPU
/// entity, which dcgm-exporter does not watch on a MIG GPU; there it has
/// no series at all).
fn last_xid(g: &GpuState, gpu_instance: Option<u32>) -> Option<f64> {
    let newest = g
        .xids
        .iter()
        .filter(|x| x.gpu_instance.is_none() || x.gpu_instance == gpu_instance)
        .max_by_key(|x| x.last_seen)?;
    if g.xid_other
        .as_ref()
        .is_some_and(|o| o.last_seen > newest.last_seen)
    {
        return None;
    }
    Some(newest.xid as f64)
}

/// A GPU instance's profile as DCGM names it, and dcgm-exporter labels
/// it (`GPU_I_PROFILE` is DCGM's DCGM_FI_DEV_NAME of the GPU instance,
/// NVIDIA/dcgm-exporter `internal/pkg/deviceinfo/device_info.go`
/// `populateMigProfileNames`, in every release): `<slices>g.<GiB>gb`, the
/// memory in MiB rounded up to whole GiB (NVIDIA/DCGM
/// `dcgmlib/src/DcgmCacheManager.cpp` at 72fa3fe, l. 382-383): no `+me`
/// or `-me` suffix, and the memory as NVML gives the instance's size,
/// which NVML's own names round otherwise (an H200's `3g.71gb` has
/// 71424 MiB: DCGM's `3g.70gb`).
pub fn dcgm_profile(size: MigSize) -> String {
    format!("{}g.{}gb", size.slices, size.memory_mib.div_ceil(1024))
}

/// Whether a measured workload is this container.
fn is_holder(w: &crate::snapshot::Workload, p: &PodAttribution) -> bool {
    w.namespace.as_deref() == Some(p.namespace.as_str())
        && w.pod.as_deref() == Some(p.pod.as_str())
        && w.container.as_deref() == Some(p.container.as_str())
}

/// Memory the container's processes use on the whole GPU, measured.
fn pod_memory(snapshot: &Snapshot, gpu: u32, p: &PodAttribution) -> Option<f64> {
    let holdings = snapshot.workloads.as_ref()?.holdings.iter();
    let mut used = None;
    for h in
        holdings.filter(|h| h.gpu == gpu && h.gpu_instance.is_none() && is_holder(&h.workload, p))
    {
        used = Some(used.unwrap_or(0) + h.memory_used_bytes?);
    }
    used.map(|b| b as f64)
}

impl State {
    /// Updates the counters behind the selected rates from the snapshot's
    /// newest readings. A counter is compared only with a reading of a
    /// later poll of its GPU; one that went backwards (a driver reload)
    /// has no rate for that interval.
    fn observe(&mut self, snapshot: &Snapshot, fields: &[Selected]) {
        let indexes = snapshot.gpus.iter().map(|g| g.index as usize + 1).max();
        while self.devices.len() < indexes.unwrap_or(0) {
            self.devices.push(format!("nvidia{}", self.devices.len()));
        }
        self.observe_profiles(snapshot);
        for g in &snapshot.gpus {
            let (Some(r), Some(at)) = (g.readings.as_ref(), g.last_sample) else {
                continue;
            };
            for f in fields.iter().map(|s| s.field) {
                // A counter carried forward from an earlier poll is not a
                // new reading: the rate over the last read stands until
                // the family is read again.
                if f.family.is_some_and(|family| r.carried.contains(&family)) {
                    continue;
                }
                match f.source {
                    Source::ClockEventTotals => self.observe_clock_events(g.index, at, r),
                    Source::Rate(read) => self.observe_counter(g.index, f.id, at, read(r)),
                    Source::LinkRate { link, tx, rx } => self.observe_counter(
                        g.index,
                        f.id,
                        at,
                        super::fields::link_bytes(r, link, tx, rx),
                    ),
                    _ => {}
                }
            }
        }
        if fields
            .iter()
            .any(|s| s.field.per_pod == Some(PerPod::SmTime))
        {
            self.observe_pods(snapshot);
        }
    }

    /// DCGM's profile names of the snapshot's GPU instances, kept while
    /// they are unchanged (no allocation on a render that finds them).
    fn observe_profiles(&mut self, snapshot: &Snapshot) {
        let sizes = snapshot.gpus.iter().flat_map(|g| {
            let mig = g.readings.as_deref().map_or(&[][..], |r| r.mig.as_slice());
            mig.iter()
                .filter_map(move |gi| Some(((g.index, gi.gpu_instance), gi.size?)))
        });
        let mut same = true;
        let mut n = 0;
        for (key, size) in sizes.clone() {
            same &= self
                .profiles
                .get(n)
                .is_some_and(|(k, sz, _)| *k == key && *sz == size);
            n += 1;
        }
        if !same || n != self.profiles.len() {
            self.profiles = sizes
                .map(|(k, size)| (k, size, dcgm_profile(size)))
                .collect();
        }
    }

    /// Counts the reasons that turned on since the last reading, as
    /// dcgm-exporter's clock events total collector does between two of
    /// its reads: a GPU's first reading only primes it, and a reading
    /// already seen (a render of the same poll) counts nothing.
    fn observe_clock_events(&mut self, gpu: u32, at: SystemTime, r: &GpuReadings) {
        let Some(mask) = super::fields::clock_event_bits(r) else {
            return;
        };
        let Some(seen) = self.clock_events.iter_mut().find(|c| c.gpu == gpu) else {
            self.clock_events.push(ClockEvents {
                gpu,
                at,
                mask,
                totals: Default::default(),
            });
            return;
        };
        if seen.at == at {
            return;
        }
        let turned_on = mask & !seen.mask;
        for (bit, total) in seen.totals.iter_mut().enumerate() {
            if turned_on & (1 << bit) != 0 {
                *total = total.saturating_add(1);
            }
        }
        seen.at = at;
        seen.mask = mask;
    }

    fn observe_counter(&mut self, gpu: u32, field: u16, at: SystemTime, value: Option<u64>) {
        let i = self
            .counters
            .iter()
            .position(|c| c.gpu == gpu && c.field == field);
        match (i, value) {
            (Some(i), None) => {
                self.counters.swap_remove(i);
            }
            (None, None) => {}
            (None, Some(value)) => self.counters.push(Counter {
                gpu,
                field,
                at,
                value,
                rate: None,
            }),
            (Some(i), Some(value)) => {
                let c = &mut self.counters[i];
                if at > c.at {
                    let dt = at.duration_since(c.at).map_or(0.0, |d| d.as_secs_f64());
                    c.rate = (value >= c.value && dt > 0.0).then(|| (value - c.value) as f64 / dt);
                    c.at = at;
                    c.value = value;
                }
            }
        }
    }

    /// The SM time of each container on a shared whole GPU, from the
    /// measured use per workload (`--workloads`); containers gone are
    /// forgotten.
    fn observe_pods(&mut self, snapshot: &Snapshot) {
        for c in &mut self.pods {
            c.seen = false;
        }
        let accounts = snapshot
            .workloads
            .as_ref()
            .and_then(|w| w.usage.as_ref())
            .map_or(&[][..], |u| u.accounts.as_slice());
        for g in &snapshot.gpus {
            let whole: Vec<&PodAttribution> =
                g.pods.iter().filter(|p| p.gpu_instance.is_none()).collect();
            let Some(at) = g.last_sample.filter(|_| whole.len() > 1) else {
                continue;
            };
            for p in whole {
                let sm = accounts
                    .iter()
                    .filter(|a| {
                        a.gpu == g.index && a.gpu_instance.is_none() && is_holder(&a.workload, p)
                    })
                    // Measured only: an MPS client's share of its server's
                    // time is an estimate, and has no DCGM name.
                    .filter_map(|a| a.sm_seconds)
                    .fold(None, |s: Option<f64>, v| Some(s.unwrap_or(0.0) + v));
                self.observe_pod(g.index, p, at, sm);
            }
        }
        self.pods.retain(|c| c.seen);
    }

    fn observe_pod(&mut self, gpu: u32, p: &PodAttribution, at: SystemTime, sm: Option<f64>) {
        let Some(sm) = sm else {
            return;
        };
        let found = self.pods.iter_mut().find(|c| {
            c.gpu == gpu
                && c.namespace == p.namespace
                && c.pod == p.pod
                && c.container == p.container
        });
        match found {
            Some(c) => {
                c.seen = true;
                if at > c.at {
                    let dt = at.duration_since(c.at).map_or(0.0, |d| d.as_secs_f64());
                    c.rate = (sm >= c.sm_seconds && dt > 0.0)
                        .then(|| ((sm - c.sm_seconds) / dt).min(1.0));
                    c.at = at;
                    c.sm_seconds = sm;
                }
            }
            None => self.pods.push(PodCounter {
                gpu,
                namespace: p.namespace.clone(),
                pod: p.pod.clone(),
                container: p.container.clone(),
                at,
                sm_seconds: sm,
                rate: None,
                seen: true,
            }),
        }
    }

    fn rate(&self, gpu: u32, field: u16) -> Option<f64> {
        self.counters
            .iter()
            .find(|c| c.gpu == gpu && c.field == field)
            .and_then(|c| c.rate)
    }

    fn pod_rate(&self, gpu: u32, p: &PodAttribution) -> Option<f64> {
        self.pods
            .iter()
            .find(|c| {
                c.gpu == gpu
                    && c.namespace == p.namespace
                    && c.pod == p.pod
                    && c.container == p.container
            })
            .and_then(|c| c.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::{fields, Generation};
    use crate::exposition::Writer;
    use crate::family::Family;
    use crate::snapshot::{
        Clock, DriverInfo, Engine, GpmMetric, GpuIdentity, Memory, MigMemory, Pcie, XidCount,
    };
    use std::time::{Duration, UNIX_EPOCH};

    fn gpu(index: u32, r: GpuReadings) -> GpuState {
        let mut g = GpuState::with_readings(index, r);
        g.identity = GpuIdentity {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index)),
            ..GpuIdentity::default()
        };
        g.last_sample = Some(UNIX_EPOCH + Duration::from_secs(100));
        g
    }

    fn readings() -> GpuReadings {
        GpuReadings {
            utilization: vec![(Engine::Gpu, 0.37), (Engine::Memory, 0.05)],
            clocks_hertz: vec![(Clock::Sm, 1_980_000_000.0)],
            memory: Some(Memory {
                total_bytes: 80 << 30,
                used_bytes: (3 << 20) - 1,
                free_bytes: 1 << 30,
                reserved_bytes: Some(512 << 20),
            }),
            energy_joules: Some(3277.357),
            engine_activity: Vec::new(),
            activity: vec![(GpmMetric::Graphics, 0.5)],
            pcie: Pcie {
                tx_bytes: Some(1000),
                ..Pcie::default()
            },
            ..GpuReadings::default()
        }
    }

    fn snapshot(gpus: Vec<GpuState>) -> Snapshot {
        Snapshot {
            driver: Some(DriverInfo {
                driver_version: "580.95.05".into(),
                nvml_version: "13.580.95.05".into(),
                cuda_driver_version: None,
            }),
            gpus,
            ..Snapshot::default()
        }
    }

    fn text(s: &Snapshot, c: &Compat) -> String {
        let mut w = Writer::default();
        encode(s, c, &mut w);
        String::from_utf8(w.text).unwrap()
    }

    fn compat(g: Generation) -> Compat {
        Compat::new(g, false, Some("node-1".into()))
    }

    fn line<'t>(t: &'t str, name: &str) -> Vec<&'t str> {
        t.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect()
    }

    #[test]
    fn profiles_are_named_as_dcgm_names_them() {
        let name = |slices, memory_mib| dcgm_profile(MigSize { slices, memory_mib });
        // A100 40GB 1g.5gb (4864 MiB), H100 1g.10gb (9984 MiB) and its
        // media-extension profile (NVML's `1g.10gb+me`), H100 7g.80gb.
        assert_eq!(name(1, 4864), "1g.5gb");
        assert_eq!(name(1, 9984), "1g.10gb");
        assert_eq!(name(7, 80 * 1024), "7g.80gb");
        // One MiB over a GiB rounds up, as DCGM's ceil does.
        assert_eq!(name(2, 20 * 1024 + 1), "2g.21gb");
    }

    #[test]
    fn a_gpu_is_served_in_dcgm_s_units_and_labels() {
        let s = snapshot(vec![gpu(0, readings())]);
        let t = text(&s, &compat(Generation::V4_8));
        assert_eq!(
            line(&t, "DCGM_FI_DEV_SM_CLOCK"),
            ["DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-0\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"node-1\",DCGM_FI_DRIVER_VERSION=\"580.95.05\"} 1980"]
        );
        assert!(t.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
        assert!(line(&t, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0].ends_with("} 3277357"));
        assert!(line(&t, "DCGM_FI_DEV_GPU_UTIL")[0].ends_with("} 37"));
        // Whole MiB, rounded down as DCGM divides.
        assert!(line(&t, "DCGM_FI_DEV_FB_USED")[0].ends_with("} 2"), "{t}");
        assert!(line(&t, "DCGM_FI_DEV_FB_RESERVED")[0].ends_with("} 512"));
        assert!(line(&t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[0].ends_with("} 0.5"));
        // No reading, no series: never a 0 for what NVML did not say.
        for absent in [
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        ] {
            assert!(!t.contains(absent), "{absent}: {t}");
        }
        // A rate needs two polls.
        assert!(!t.contains("DCGM_FI_PROF_PCIE_TX_BYTES"));
    }

    #[test]
    fn generation_4_9_serves_dcgm_4_7_names_in_base_units() {
        let s = snapshot(vec![gpu(0, readings())]);
        let t = text(&s, &compat(Generation::V4_9));
        assert!(line(&t, "DCGM_FI_DEV_SM_CLOCK_HERTZ")[0].ends_with("} 1980000000"));
        assert!(line(&t, "DCGM_FI_DEV_GPU_UTIL_RATIO")[0].ends_with("} 0.37"));
        assert!(
            line(&t, "DCGM_FI_DEV_FB_USED_BYTES")[0].ends_with(&format!("}} {}", (3 << 20) - 1))
        );
        assert!(line(&t, "DCGM_FI_DEV_FB_CAPACITY_BYTES")[0]
            .contains("DCGM_FI_SYSTEM_DRIVER_VERSION=\"580.95.05\""));
        assert!(line(&t, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL")[0].ends_with("} 3277.357"));
        assert!(!t.contains("DCGM_FI_DEV_SM_CLOCK{"));
        // 4.8.2 and earlier call the host label Hostname.
        let old = text(&s, &compat(Generation::V4_8_2));
        assert!(line(&old, "DCGM_FI_DEV_SM_CLOCK")[0].contains(",Hostname=\"node-1\","));
    }

    #[test]
    fn rates_come_from_two_polls_and_a_counter_that_went_back_has_none() {
        let c = compat(Generation::V4_8);
        let mut s = snapshot(vec![gpu(0, readings())]);
        text(&s, &c);
        let g = &mut s.gpus[0];
        g.last_sample = Some(UNIX_EPOCH + Duration::from_secs(102));
        g.readings_mut().pcie.tx_bytes = Some(5000);
        let t = text(&s, &c);
        assert!(
            line(&t, "DCGM_FI_PROF_PCIE_TX_BYTES")[0].ends_with("} 2000"),
            "{t}"
        );
        // The same poll rendered again keeps its rate.
        assert!(line(&text(&s, &c), "DCGM_FI_PROF_PCIE_TX_BYTES")[0].ends_with("} 2000"));
        let g = &mut s.gpus[0];
        g.last_sample = Some(UNIX_EPOCH + Duration::from_secs(104));
        g.readings_mut().pcie.tx_bytes = Some(10);
        assert!(!text(&s, &c).contains("DCGM_FI_PROF_PCIE_TX_BYTES"));
    }

    #[test]
    fn a_family_read_less_often_than_each_poll_keeps_its_rate_between_reads() {
        // `intervals: {pcie: ...}`: the polls between two reads carry the
        // counter forward; 0 there and a spike at the next read would both
        // be wrong.
        let c = compat(Generation::V4_8);
        let mut s = snapshot(vec![gpu(0, readings())]);
        text(&s, &c);
        let poll = |s: &mut Snapshot, at: u64, bytes: u64, carried: bool| {
            let g = &mut s.gpus[0];
            g.last_sample = Some(UNIX_EPOCH + Duration::from_secs(at));
            let r = g.readings_mut();
            r.pcie.tx_bytes = Some(bytes);
            r.carried = if carried { vec![Family::Pcie] } else { vec![] };
            text(s, &c)
        };
        let rate = |t: &str| {
            line(t, "DCGM_FI_PROF_PCIE_TX_BYTES")[0]
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(rate(&poll(&mut s, 102, 5000, false)), "2000");
        assert_eq!(
            rate(&poll(&mut s, 104, 5000, true)),
            "2000",
            "carried: the last rate"
        );
        assert_eq!(
            rate(&poll(&mut s, 106, 13000, false)),
            "2000",
            "over the 4 s since the read"
        );
    }

    fn mig(gpu_instance: u32) -> MigGpuInstance {
        MigGpuInstance {
            gpu_instance,
            profile: "1g.10gb".into(),
            size: None,
            bar1: None,
            memory: None,
            engine_activity: Vec::new(),
            activity: vec![],
            compute_instances: vec![],
        }
    }

    #[test]
    fn a_mig_gpu_has_one_series_per_gpu_instance() {
        let mut r = readings();
        r.utilization.clear();
        r.mig = vec![
            MigGpuInstance {
                gpu_instance: 1,
                profile: "3g.40gb".into(),
                size: None,
                bar1: None,
                memory: Some(MigMemory {
                    total_bytes: 40 << 30,
                    used_bytes: 10 << 20,
                    free_bytes: (40 << 30) - (10 << 20),
                    reserved_bytes: None,
                }),
                engine_activity: Vec::new(),
                activity: vec![(GpmMetric::Graphics, 0.25)],
                compute_instances: vec![],
            },
            MigGpuInstance {
                gpu_instance: 2,
                profile: "4g.40gb".into(),
                size: None,
                bar1: None,
                memory: None,
                engine_activity: Vec::new(),
                activity: vec![],
                compute_instances: vec![],
            },
        ];
        let mut g = gpu(1, r);
        g.pods = vec![PodAttribution {
            namespace: "ml".into(),
            pod: "train-0".into(),
            container: "main".into(),
            gpu_instance: Some(1),
            compute_instance: Some(0),
            labels: vec![("team", "vision".into()), ("device", "clash".into())],
        }];
        let t = text(&snapshot(vec![g]), &compat(Generation::V4_8));
        let fb = line(&t, "DCGM_FI_DEV_FB_USED");
        assert_eq!(fb.len(), 1, "{t}");
        assert!(
            fb[0].contains("GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\"") && fb[0].ends_with("} 10")
        );
        assert!(
            fb[0].contains("pod=\"train-0\",namespace=\"ml\",container=\"main\",team=\"vision\"")
        );
        // A pod label may not take a DCGM label's name.
        assert!(fb[0].contains("device=\"nvidia1\"") && !fb[0].contains("clash"));
        // Device fields: the GPU's value on each instance, as DCGM answers.
        let clocks = line(&t, "DCGM_FI_DEV_SM_CLOCK");
        assert_eq!(clocks.len(), 2);
        assert!(clocks.iter().all(|l| l.ends_with("} 1980")));
        assert!(!clocks[1].contains("pod="), "instance 2 is held by nobody");
        assert!(line(&t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[0].ends_with("} 0.25"));
        // No utilization on a MIG GPU, as NVML.
        assert!(!t.contains("DCGM_FI_DEV_GPU_UTIL"));
    }

    #[test]
    fn mapped_jobs_copy_a_device_s_series_as_dcgm_exporter_s_hpc_mapper() {
        let mut r = readings();
        r.mig = vec![mig(1), mig(2)];
        let mut s = snapshot(vec![gpu(0, readings()), gpu(1, r), gpu(2, readings())]);
        let jobs = |v: &[&str]| v.iter().map(|j| j.to_string()).collect::<Vec<_>>();
        s.workloads = Some(crate::snapshot::WorkloadAttribution {
            hpc_jobs: std::sync::Arc::new(
                [
                    ((0, None), jobs(&["101", "102"])),
                    ((1, None), jobs(&["999"])),
                    ((1, Some(2)), jobs(&["job-a"])),
                ]
                .into_iter()
                .collect(),
            ),
            ..Default::default()
        });
        let clocks = |t: &str| -> Vec<(String, Option<String>)> {
            line(t, "DCGM_FI_DEV_SM_CLOCK")
                .iter()
                .map(|l| {
                    let label = |name: &str| {
                        let at = l.find(&format!(",{name}=\""))? + name.len() + 3;
                        Some(l[at..].split('"').next()?.to_string())
                    };
                    let device = format!(
                        "{}/{}",
                        label("device").unwrap(),
                        label("GPU_I_ID").unwrap_or_default()
                    );
                    (device, label("hpc_job"))
                })
                .collect()
        };
        let some = |j: &str| Some(j.to_string());
        // 4.5.3-4.8.2 and later: a GPU by its index's file, one series per
        // job; a MIG GPU instance by `<gpu>.<gpu instance>` only.
        assert_eq!(
            clocks(&text(&s, &compat(Generation::V4_8))),
            [
                ("nvidia0/".to_string(), some("101")),
                ("nvidia0/".to_string(), some("102")),
                ("nvidia1/1".to_string(), None),
                ("nvidia1/2".to_string(), some("job-a")),
                ("nvidia2/".to_string(), None),
            ]
        );
        // Before: every instance by its GPU's file.
        assert_eq!(
            clocks(&text(&s, &compat(Generation::V3_4)))[2..4],
            [
                ("nvidia1/1".to_string(), some("999")),
                ("nvidia1/2".to_string(), some("999")),
            ]
        );
    }

    #[test]
    fn a_shared_gpu_keeps_its_series_without_pod_labels() {
        let mut g = gpu(0, readings());
        let pod = |name: &str| PodAttribution {
            namespace: "ml".into(),
            pod: name.into(),
            container: "main".into(),
            gpu_instance: None,
            compute_instance: None,
            labels: vec![],
        };
        g.pods = vec![pod("a")];
        let t = text(&snapshot(vec![g.clone()]), &compat(Generation::V4_8));
        assert!(line(&t, "DCGM_FI_DEV_GPU_UTIL")[0].contains("pod=\"a\""));
        g.pods.push(pod("b"));
        let t = text(&snapshot(vec![g]), &compat(Generation::V4_8));
        let util = line(&t, "DCGM_FI_DEV_GPU_UTIL");
        // Without measured use per workload, no value per pod is made up.
        assert_eq!(util.len(), 1, "{t}");
        assert!(!util[0].contains("pod="));
    }

    #[test]
    fn the_last_xid_carries_its_code_and_the_catalog_s_description() {
        let mut g = gpu(0, readings());
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        g.xids = vec![
            XidCount {
                xid: 79,
                gpu_instance: None,
                compute_instance: None,
                count: 1,
                last_seen: at(50),
            },
            XidCount {
                xid: 13,
                gpu_instance: None,
                compute_instance: None,
                count: 4,
                last_seen: at(20),
            },
        ];
        let t = text(&snapshot(vec![g]), &compat(Generation::V4_8));
        let x = line(&t, "DCGM_FI_DEV_XID_ERRORS");
        assert_eq!(x.len(), 1);
        assert!(
            x[0].contains("err_code=\"79\",err_msg=\"") && x[0].ends_with("} 79"),
            "{}",
            x[0]
        );
    }

    #[test]
    fn a_mig_instance_s_xid_is_on_that_instance_only() {
        let mut r = readings();
        r.mig = vec![mig(1), mig(5)];
        let mut g = gpu(0, r);
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        g.xids = vec![XidCount {
            xid: 31,
            gpu_instance: Some(5),
            compute_instance: Some(0),
            count: 1,
            last_seen: at(50),
        }];
        let t = text(&snapshot(vec![g.clone()]), &compat(Generation::V4_8));
        let x = line(&t, "DCGM_FI_DEV_XID_ERRORS");
        assert_eq!(x.len(), 1, "{t}");
        assert!(
            x[0].contains("GPU_I_ID=\"5\"") && x[0].ends_with("} 31"),
            "{}",
            x[0]
        );
        // An XID of the whole GPU is every instance's.
        g.xids.push(XidCount {
            xid: 79,
            gpu_instance: None,
            compute_instance: None,
            count: 1,
            last_seen: at(60),
        });
        let t = text(&snapshot(vec![g]), &compat(Generation::V4_8));
        let x = line(&t, "DCGM_FI_DEV_XID_ERRORS");
        assert_eq!(x.len(), 2, "{t}");
        assert!(x.iter().all(|l| l.ends_with("} 79")), "{x:?}");
    }

    #[test]
    fn a_selection_of_extended_fields_is_served_under_the_names_it_gives() {
        let mut c = compat(Generation::V4_8);
        c.fields = [
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",
            "DCGM_FI_DEV_SERIAL",
        ]
        .iter()
        .map(|n| {
            let (f, v) = fields::lookup(n).unwrap();
            Selected::of(f, v)
        })
        .collect();
        let mut r = readings();
        r.ecc_errors = vec![crate::snapshot::EccCount {
            error: crate::snapshot::EccError::Corrected,
            scope: crate::snapshot::EccScope::Volatile,
            location: crate::snapshot::EccLocation::All,
            count: 7,
        }];
        let mut g = gpu(0, r);
        g.identity.serial = Some("1650924060257".into());
        let t = text(&snapshot(vec![g]), &c);
        let ecc = line(&t, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL");
        assert!(
            ecc[0].contains("DCGM_FI_DEV_SERIAL=\"1650924060257\"") && ecc[0].ends_with("} 7"),
            "{t}"
        );
        // Retired pages are Volta's: none here.
        assert!(!t.contains("DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL"));
        assert!(!t.contains("DCGM_FI_DEV_GPU_UTIL"));
    }

    #[test]
    fn each_holder_of_a_shared_gpu_gets_what_it_measurably_used() {
        use crate::snapshot::{
            UsageAccount, Workload, WorkloadAttribution, WorkloadHolding, WorkloadKind,
            WorkloadUsage,
        };
        let c = compat(Generation::V4_8);
        let pod = |name: &str| PodAttribution {
            namespace: "ml".into(),
            pod: name.into(),
            container: "main".into(),
            gpu_instance: None,
            compute_instance: None,
            labels: vec![],
        };
        let workload = |name: &str| Workload {
            namespace: Some("ml".into()),
            pod: Some(name.into()),
            container: Some("main".into()),
            ..Workload::of(WorkloadKind::Kubernetes)
        };
        let measured = |a: f64, b: f64| WorkloadAttribution {
            holdings: ["a", "b"]
                .iter()
                .map(|n| WorkloadHolding {
                    gpu: 0,
                    gpu_instance: None,
                    compute_instance: None,
                    workload: workload(n),
                    share: 0.5,
                    memory_used_bytes: Some(if *n == "a" { 3 << 30 } else { 1 << 30 }),
                })
                .collect(),
            usage: Some(WorkloadUsage {
                accounts: [("a", a), ("b", b)]
                    .iter()
                    .map(|(n, sm)| UsageAccount {
                        gpu: 0,
                        gpu_instance: None,
                        compute_instance: None,
                        workload: workload(n),
                        sm_seconds: Some(*sm),
                        mps_sm_seconds: None,
                        engine_seconds: vec![],
                        energy_joules: None,
                        mps_energy_joules: None,
                        held_energy_joules: None,
                        held_seconds: 0.0,
                        idle_seconds: None,
                    })
                    .collect(),
                unattributed: vec![],
                refused: 0,
            }),
            ..WorkloadAttribution::default()
        };
        let mut g = gpu(0, readings());
        g.pods = vec![pod("a"), pod("b")];
        let mut s = snapshot(vec![g]);
        s.workloads = Some(measured(10.0, 1.0));
        text(&s, &c);
        s.gpus[0].last_sample = Some(UNIX_EPOCH + Duration::from_secs(110));
        s.workloads = Some(measured(13.0, 1.5));
        let t = text(&s, &c);
        let util = line(&t, "DCGM_FI_DEV_GPU_UTIL");
        assert_eq!(util.len(), 3, "{t}");
        assert!(util
            .iter()
            .any(|l| !l.contains("pod=") && l.ends_with("} 37")));
        assert!(util
            .iter()
            .any(|l| l.contains("pod=\"a\"") && l.ends_with("} 30")));
        assert!(util
            .iter()
            .any(|l| l.contains("pod=\"b\"") && l.ends_with("} 5")));
        let gr = line(&t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE");
        assert!(gr
            .iter()
            .any(|l| l.contains("pod=\"a\"") && l.ends_with("} 0.3")));
        let fb = line(&t, "DCGM_FI_DEV_FB_USED");
        assert!(fb
            .iter()
            .any(|l| l.contains("pod=\"a\"") && l.ends_with("} 3072")));
        assert!(fb
            .iter()
            .any(|l| l.contains("pod=\"b\"") && l.ends_with("} 1024")));
        // A metric the per-process mode does not measure stays one series.
        assert_eq!(line(&t, "DCGM_FI_DEV_SM_CLOCK").len(), 1);
    }
}
