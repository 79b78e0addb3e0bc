//! What the node's CDI specs say a DRA claim's device is.
//!
//! NVIDIA's GPU DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu,
//! `cmd/gpu-kubelet-plugin/cdi.go`) writes one transient spec per prepared
//! claim, `/var/run/cdi/k8s.gpu.nvidia.com-claim_<claim uid>.yaml`, of kind
//! `k8s.gpu.nvidia.com/claim`, with one device per allocated GPU or MIG
//! device named `<claim uid>-<device>` (`...-gpu-0`,
//! `...-gpu-0-mig-1g10gb-19-0`). The kubelet's pod-resources answer names
//! exactly those CDI devices. A device's own container edits hold its
//! device nodes: `/dev/nvidia<minor>` for a whole GPU; for a MIG device the
//! parent's node plus the GPU instance's and compute instance's capability
//! nodes `/dev/nvidia-caps/nvidia-cap<minor>`, whose minors the driver
//! publishes in `/proc/driver/nvidia-caps/mig-minors` (`gpu<minor>/gi<id>/access`,
//! `gpu<minor>/gi<id>/ci<id>/access`; NVIDIA's MIG user guide, "Device
//! Nodes"). Node paths are the container's (`path`); `hostPath` differs
//! only where a driver container keeps the nodes elsewhere.
//!
//! The specs are read with deadlines and parsed again only when a file
//! changes (size or modification time); a file that cannot be read or
//! parsed is reported to the caller, and the rest still resolve.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::fsread::{ReadError, Reader};
use crate::snapshot::KubernetesReadError;

/// The spec files of claims NVIDIA's GPU DRA driver has prepared:
/// `GenerateTransientSpecName("k8s.gpu.nvidia.com", "claim", uid)`.
pub const NVIDIA_CLAIM_SPEC_PREFIX: &str = "k8s.gpu.nvidia.com-claim_";

/// A spec with every mount and hook of a full driver is tens of kilobytes.
const MAX_SPEC_BYTES: u64 = 4 * 1024 * 1024;

/// Spec files read per directory: a node has one per prepared claim.
/// NVIDIA's claim specs are kept first when a directory holds more.
const MAX_SPEC_FILES: usize = 4096;
/// Directory entries looked at per directory, to choose those files from.
const MAX_LISTED: usize = 65_536;

/// The MIG minors file lists 8 compute instances of 15 GPU instances for
/// each possible GPU: some hundred kilobytes.
const MAX_MIG_MINORS_BYTES: u64 = 4 * 1024 * 1024;

/// A local file (tmpfs, procfs) answers in microseconds; this is for one
/// that does not.
const FILE_DEADLINE: Duration = Duration::from_secs(2);

/// A CDI spec, as far as it names devices (the CDI specification,
/// cncf-tags/container-device-interface SPEC.md). Mounts, hooks,
/// annotations and fields of later versions are not read.
#[derive(Debug, Deserialize)]
struct Spec {
    #[serde(rename = "cdiVersion")]
    _cdi_version: String,
    kind: String,
    #[serde(default)]
    devices: Vec<SpecDevice>,
}

#[derive(Debug, Deserialize)]
struct SpecDevice {
    name: String,
    #[serde(rename = "containerEdits", default)]
    container_edits: ContainerEdits,
}

#[derive(Debug, Default, Deserialize)]
struct ContainerEdits {
    #[serde(rename = "deviceNodes", default)]
    device_nodes: Vec<DeviceNode>,
}

#[derive(Debug, Deserialize)]
struct DeviceNode {
    path: String,
    #[serde(default)]
    minor: Option<i64>,
}

/// A device node of a CDI device: its path in the container and, where
/// the spec says, its minor number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub path: String,
    pub minor: Option<u32>,
}

/// What a CDI device grants, as the exporter can match it to NVML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    /// A whole GPU, by the minor of `/dev/nvidia<minor>`.
    Gpu { minor: u32 },
    /// A MIG device: the parent GPU's minor, the GPU instance and, where
    /// the spec grants one compute instance, that one.
    Mig {
        gpu_minor: u32,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    },
}

/// Why a CDI device's nodes name no GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolvable {
    #[error("no CDI spec on the node defines it")]
    NotInSpecs,
    #[error("its CDI device has no /dev/nvidia<N> or MIG capability node")]
    NoGpuNode,
    #[error("its MIG capability node nvidia-cap{0} is not in the driver's MIG minors file")]
    UnknownCap(u32),
    #[error("it has MIG capability nodes but the driver's MIG minors file could not be read")]
    NoMigMinors,
}

/// One spec file's devices by fully qualified name (`kind=name`), or why
/// the file could not be used.
type Parsed = Result<Vec<(String, Vec<Node>)>, (KubernetesReadError, String)>;

struct Cached {
    modified: Option<SystemTime>,
    len: u64,
    parsed: Parsed,
}

/// A failed read or parse of one spec file (or of a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub path: PathBuf,
    pub reason: KubernetesReadError,
    pub detail: String,
}

/// The result of one look at the CDI directories.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every device of every readable spec, by fully qualified name.
    pub devices: HashMap<String, Vec<Node>>,
    /// Spec files of claims NVIDIA's GPU DRA driver prepared.
    pub nvidia_claim_specs: usize,
    /// Files (or directories) that could not be read or parsed this time:
    /// each is reported when it is read, not again until it changes.
    pub problems: Vec<SpecProblem>,
}

/// The CDI directories and what their files said when last read.
pub struct CdiSpecs {
    dirs: Vec<PathBuf>,
    reader: Reader,
    cache: HashMap<PathBuf, Cached>,
    /// Files left out of each directory at the last scan, to say a cut
    /// once, when it changes.
    cut: HashMap<PathBuf, usize>,
}

impl CdiSpecs {
    /// The standard CDI directories under the host's root file system, the
    /// transient one (where the DRA driver writes) first.
    pub fn new(rootfs: &Path, reader: Reader) -> CdiSpecs {
        CdiSpecs {
            dirs: vec![rootfs.join("var/run/cdi"), rootfs.join("etc/cdi")],
            reader,
            cache: HashMap::new(),
            cut: HashMap::new(),
        }
    }

    /// Lists the directories and, with `parse`, reads every spec file that
    /// changed since the last scan. A directory that does not exist is
    /// empty (a node without CDI), not a problem.
    pub fn scan(&mut self, parse: bool) -> Scan {
        let mut scan = Scan::default();
        let mut seen = Vec::new();
        for dir in self.dirs.clone() {
            let files = match self.list(&dir) {
                Ok((files, cut)) => {
                    if self.cut.insert(dir.clone(), cut).unwrap_or(0) != cut && cut > 0 {
                        scan.problems.push(SpecProblem {
                            path: dir.clone(),
                            reason: KubernetesReadError::Dropped,
                            detail: format!(
                                "{cut} files past the {MAX_SPEC_FILES} read per directory were left out \
                                 (NVIDIA's claim specs first): claims they define are unresolved"
                            ),
                        });
                    }
                    files
                }
                Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    scan.problems.push(SpecProblem {
                        path: dir.clone(),
                        reason: reason(&e),
                        detail: e.to_string(),
                    });
                    continue;
                }
            };
            for (name, path) in files {
                let Some(format) = Format::of(&name) else {
                    continue;
                };
                if name.starts_with(NVIDIA_CLAIM_SPEC_PREFIX) {
                    scan.nvidia_claim_specs += 1;
                }
                if !parse {
                    continue;
                }
                seen.push(path.clone());
                let fresh = self.refresh(&path, format);
                match &self.cache.get(&path).map(|c| &c.parsed) {
                    Some(Ok(devices)) => {
                        for (qualified, nodes) in devices {
                            // The first directory's spec wins a name both
                            // define, as the transient one is the driver's.
                            scan.devices
                                .entry(qualified.clone())
                                .or_insert_with(|| nodes.clone());
                        }
                    }
                    Some(Err((reason, detail))) if fresh => scan.problems.push(SpecProblem {
                        path: path.clone(),
                        reason: *reason,
                        detail: detail.clone(),
                    }),
                    _ => {}
                }
            }
        }
        if parse {
            // Forget the specs of claims that ended.
            self.cache.retain(|path, _| seen.contains(path));
        }
        scan
    }

    /// The spec files of `dir` to read, NVIDIA's claim specs first, then by
    /// name, at most `MAX_SPEC_FILES`; and how many were left out.
    fn list(&self, dir: &Path) -> Result<(Vec<(String, PathBuf)>, usize), ReadError> {
        let owned = dir.to_path_buf();
        self.reader.run(dir, FILE_DEADLINE, move || {
            let entries = std::fs::read_dir(&owned).map_err(ReadError::Io)?;
            let mut listed = 0usize;
            let mut files: Vec<(String, PathBuf)> = entries
                .flatten()
                .take(MAX_LISTED)
                .inspect(|_| listed += 1)
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    Format::of(&name).map(|_| (name, e.path()))
                })
                .collect();
            // Sorted before the cut, not cut in directory order: NVIDIA's
            // claims must not be left out for other files.
            files.sort_by(|a, b| {
                let theirs = |n: &str| !n.starts_with(NVIDIA_CLAIM_SPEC_PREFIX);
                (theirs(&a.0), &a.0).cmp(&(theirs(&b.0), &b.0))
            });
            let mut cut = files.len().saturating_sub(MAX_SPEC_FILES);
            files.truncate(MAX_SPEC_FILES);
            if listed == MAX_LISTED {
                // Entries past MAX_LISTED were not looked at: at least one.
                cut += 1;
            }
            Ok((files, cut))
        })
    }

    /// Re-reads `path` if it changed; `true` when it was read now (so its
    /// problem, if any, is new).
    fn refresh(&mut self, path: &Path, format: Format) -> bool {
        let meta = self.reader.metadata(path, FILE_DEADLINE);
        let (modified, len) = match &meta {
            Ok(m) => (m.modified().ok(), m.len()),
            Err(_) => (None, 0),
        };
        if let (Ok(_), Some(c)) = (&meta, self.cache.get(path)) {
            if c.modified == modified && c.len == len && modified.is_some() {
                return false;
            }
        }
        let parsed = match meta {
            Err(e) => Err((reason(&e), e.to_string())),
            Ok(_) => match self
                .reader
                .read_regular(path, MAX_SPEC_BYTES, FILE_DEADLINE)
            {
                Ok(bytes) => parse(&bytes, format),
                Err(e) => Err((reason(&e), e.to_string())),
            },
        };
        self.cache.insert(
            path.to_path_buf(),
            Cached {
                modified,
                len,
                parsed,
            },
        );
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Yaml,
    Json,
}

impl Format {
    /// CDI spec files are `.yaml` or `.json`; anything else in the
    /// directory is not one.
    fn of(name: &str) -> Option<Format> {
        let ext = Path::new(name).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

fn reason(e: &ReadError) -> KubernetesReadError {
    match e {
        ReadError::TimedOut(_) | ReadError::Busy => KubernetesReadError::Timeout,
        ReadError::TooLarge { .. } => KubernetesReadError::Malformed,
        ReadError::Io(_) | ReadError::NotRegular(_) => KubernetesReadError::Unreadable,
    }
}

fn parse(bytes: &[u8], format: Format) -> Parsed {
    if format == Format::Yaml {
        if let Some(line) = crate::fsread::yaml_nesting_too_deep(bytes) {
            return Err((
                KubernetesReadError::Malformed,
                format!(
                    "line {line}: nested deeper than {} levels: refused before parsing",
                    crate::fsread::MAX_YAML_NESTING
                ),
            ));
        }
    }
    let spec: Spec = match format {
        Format::Yaml => yaml_serde::from_slice(bytes).map_err(|e| e.to_string()),
        Format::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
    }
    // The parser quotes what it read: a link to any file (`/etc/passwd`)
    // would be logged. Its values are not shown, and the rest is bounded.
    .map_err(|e| crate::fsread::excerpt(&crate::fsread::redact_values(&e)))
    .map_err(|e| (KubernetesReadError::Malformed, e))?;
    if !spec.kind.contains('/') {
        return Err((
            KubernetesReadError::Malformed,
            format!(
                "kind {:?} is not vendor/class",
                crate::fsread::excerpt(&spec.kind)
            ),
        ));
    }
    Ok(spec
        .devices
        .into_iter()
        .map(|d| {
            let nodes = d
                .container_edits
                .device_nodes
                .into_iter()
                .map(|n| Node {
                    minor: n.minor.and_then(|m| u32::try_from(m).ok()),
                    path: n.path,
                })
                .collect();
            (format!("{}={}", spec.kind, d.name), nodes)
        })
        .collect())
}

/// A MIG capability: the GPU (by minor) and instance its node grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigCap {
    pub gpu_minor: u32,
    pub gpu_instance: u32,
    pub compute_instance: Option<u32>,
}

/// Capability minors to what they grant, from the driver's
/// `/proc/driver/nvidia-caps/mig-minors` (`config 1`, `monitor 2`,
/// `gpu0/gi0/access 3`, `gpu0/gi0/ci0/access 4`, ...).
pub type MigMinors = HashMap<u32, MigCap>;

pub fn parse_mig_minors(text: &str) -> MigMinors {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((cap, minor)) = line.split_once(' ') else {
            continue;
        };
        let Ok(minor) = minor.trim().parse::<u32>() else {
            continue;
        };
        let mut parts = cap.split('/');
        let gpu = parts
            .next()
            .and_then(|p| p.strip_prefix("gpu")?.parse().ok());
        let gi = parts
            .next()
            .and_then(|p| p.strip_prefix("gi")?.parse().ok());
        let (ci, access) = match (parts.next(), parts.next(), parts.next()) {
            (Some("access"), None, None) => (None, true),
            (Some(ci), Some("access"), None) => match ci.strip_prefix("ci").map(str::parse) {
                Some(Ok(ci)) => (Some(ci), true),
                _ => (None, false),
            },
            _ => (None, false),
        };
        if let (Some(gpu_minor), Some(gpu_instance), true) = (gpu, gi, access) {
            out.insert(
                minor,
                MigCap {
                    gpu_minor,
                    gpu_instance,
                    compute_instance: ci,
                },
            );
        }
    }
    out
}

/// Reads the MIG minors file under `procfs`.
pub fn read_mig_minors(reader: &Reader, procfs: &Path) -> Result<MigMinors, SpecProblem> {
    let path = procfs.join("driver/nvidia-caps/mig-minors");
    match reader.read(&path, MAX_MIG_MINORS_BYTES, FILE_DEADLINE) {
        Ok(bytes) => Ok(parse_mig_minors(&String::from_utf8_lossy(&bytes))),
        Err(e) => Err(SpecProblem {
            reason: reason(&e),
            detail: e.to_string(),
            path,
        }),
    }
}

/// What a CDI device's nodes grant. `mig` is the MIG minors table, read
/// by the caller once it knows a device has capability nodes (`None`: not
/// readable).
pub fn grants(nodes: &[Node], mig: Option<&MigMinors>) -> Result<Vec<Grant>, Unresolvable> {
    let mut gpus = Vec::new();
    let mut caps = Vec::new();
    // Only the driver's own node paths, exactly: a relative path or one
    // through `..` that ends in nvidia3 is no GPU (a spec attributed them
    // to GPU 3).
    let digits = |n: &str| -> Option<u32> {
        (!n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| n.parse().ok())
            .flatten()
    };
    for node in nodes {
        if let Some(n) = node.path.strip_prefix("/dev/nvidia-caps/nvidia-cap") {
            if let Some(minor) = node.minor.or_else(|| digits(n)) {
                caps.push(minor);
            }
        } else if let Some(n) = node.path.strip_prefix("/dev/nvidia") {
            // nvidia-modeset, nvidiactl (minors 254, 255) and nvidia-uvm
            // are not GPUs; neither are the DRM nodes.
            if let Some(minor) = digits(n) {
                if minor < 254 {
                    gpus.push(minor);
                }
            }
        }
    }
    if !caps.is_empty() {
        let mig = mig.ok_or(Unresolvable::NoMigMinors)?;
        let mut found = Vec::new();
        for minor in &caps {
            let cap = mig.get(minor).ok_or(Unresolvable::UnknownCap(*minor))?;
            found.push(*cap);
        }
        // A compute instance's node says all; a GPU instance's alone grants
        // the whole instance.
        let with_ci: Vec<&MigCap> = found
            .iter()
            .filter(|c| c.compute_instance.is_some())
            .collect();
        let chosen: Vec<&MigCap> = if with_ci.is_empty() {
            found.iter().collect()
        } else {
            with_ci
        };
        let mut out: Vec<Grant> = chosen
            .into_iter()
            .map(|c| Grant::Mig {
                gpu_minor: c.gpu_minor,
                gpu_instance: c.gpu_instance,
                compute_instance: c.compute_instance,
            })
            .collect();
        out.sort();
        out.dedup();
        return Ok(out);
    }
    if gpus.is_empty() {
        return Err(Unresolvable::NoGpuNode);
    }
    gpus.sort_unstable();
    gpus.dedup();
    Ok(gpus.into_iter().map(|minor| Grant::Gpu { minor }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str, minor: Option<u32>) -> Node {
        Node {
            path: path.into(),
            minor,
        }
    }

    /// The layout of the driver's MIG minors table, as a real R580 driver
    /// wrote it (tests/fixtures/dra/mig-minors) and the DRA driver's
    /// internal/common/nvcaps.go quotes it (gpu0/gi0/access 3 ...
    /// gpu6/gi11/ci7/access 920).
    fn minors_table(gpus: u32) -> String {
        let mut s = String::from("config 1\nmonitor 2\n");
        for g in 0..gpus {
            for gi in 0..15 {
                let base = 3 + g * 135 + gi * 9;
                s += &format!("gpu{g}/gi{gi}/access {base}\n");
                for ci in 0..8 {
                    s += &format!("gpu{g}/gi{gi}/ci{ci}/access {}\n", base + 1 + ci);
                }
            }
        }
        s
    }

    #[test]
    fn a_real_drivers_mig_minors_table_parses() {
        // An H200 on R580 (tests/fixtures/dra/README.md): 32 GPU minors.
        let real = include_str!("../../tests/fixtures/dra/mig-minors");
        let t = parse_mig_minors(real);
        assert_eq!(t.len(), 32 * 15 * 9);
        assert_eq!(real, minors_table(32), "the layout the tests build on");
    }

    #[test]
    fn the_mig_minors_table_parses_as_the_driver_writes_it() {
        let t = parse_mig_minors(&minors_table(8));
        assert_eq!(
            t[&3],
            MigCap {
                gpu_minor: 0,
                gpu_instance: 0,
                compute_instance: None
            }
        );
        assert_eq!(
            t[&439],
            MigCap {
                gpu_minor: 3,
                gpu_instance: 3,
                compute_instance: Some(3)
            }
        );
        assert_eq!(
            t[&920],
            MigCap {
                gpu_minor: 6,
                gpu_instance: 11,
                compute_instance: Some(7)
            }
        );
        assert!(!t.contains_key(&1), "config is not an instance");
        assert!(parse_mig_minors("garbage\ngpu0/gi1/x 7\ngpu0/gix/access 8\n").is_empty());
    }

    #[test]
    fn device_nodes_grant_gpus_and_mig_instances() {
        let t = parse_mig_minors(&minors_table(8));
        let whole = [
            node("/dev/nvidia3", None),
            node("/dev/dri/card4", None),
            node("/dev/dri/renderD131", None),
        ];
        assert_eq!(grants(&whole, None), Ok(vec![Grant::Gpu { minor: 3 }]));
        // GPU 1, GPU instance 2, compute instance 0: caps 3+135+18=156, 157.
        let mig = [
            node("/dev/nvidia1", None),
            node("/dev/nvidia-caps/nvidia-cap156", Some(156)),
            node("/dev/nvidia-caps/nvidia-cap157", None),
        ];
        assert_eq!(
            grants(&mig, Some(&t)),
            Ok(vec![Grant::Mig {
                gpu_minor: 1,
                gpu_instance: 2,
                compute_instance: Some(0)
            }])
        );
        assert_eq!(grants(&mig, None), Err(Unresolvable::NoMigMinors));
        assert_eq!(
            grants(&[node("/dev/nvidia-caps/nvidia-cap9999", None)], Some(&t)),
            Err(Unresolvable::UnknownCap(9999))
        );
        let control = [
            node("/dev/nvidiactl", None),
            node("/dev/nvidia-uvm", None),
            node("/dev/nvidia-modeset", None),
            node("/dev/nvidia255", None),
        ];
        assert_eq!(grants(&control, None), Err(Unresolvable::NoGpuNode));
        // Issue 41 (probe 5, D13): any path ending in nvidiaN counted.
        let junk = [
            node("../../etc/nvidia3", None),
            node("/dev/../../etc/nvidia3", None),
            node("/dev/nvidia+3", None),
            node("/tmp/nvidia-caps/nvidia-cap156", None),
        ];
        assert_eq!(grants(&junk, Some(&t)), Err(Unresolvable::NoGpuNode));
    }

    #[test]
    fn specs_parse_in_yaml_and_json_and_bad_ones_say_why() {
        let yaml = br"---
cdiVersion: 0.5.0
kind: k8s.gpu.nvidia.com/claim
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- name: 8a1c-gpu-0
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /run/nvidia/driver/dev/nvidia0
    hooks:
    - hookName: createContainer
      path: /usr/bin/nvidia-cdi-hook
";
        let parsed = parse(yaml, Format::Yaml).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].0, "k8s.gpu.nvidia.com/claim=8a1c-gpu-0");
        assert_eq!(parsed[0].1, [node("/dev/nvidia0", None)]);
        let json = br#"{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","minor":0}]}}]}"#;
        assert_eq!(
            parse(json, Format::Json).unwrap()[0].1,
            [node("/dev/nvidia0", Some(0))]
        );
        for bad in [
            &b"kind: x/y\n"[..],
            b"cdiVersion: 0.5.0\nkind: noclass\n",
            b"cdiVersion: [\n",
            b"\xff\xfe",
        ] {
            let e = parse(bad, Format::Yaml).unwrap_err();
            assert_eq!(e.0, KubernetesReadError::Malformed, "{e:?}");
        }
        // Issue 41 (probe 5, D12): a spec linked to /etc/passwd logged a
        // 1,650-character line of its content.
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:SECRET:/home/alice:/bin/sh\n";
        let e = parse(passwd.as_bytes(), Format::Yaml).unwrap_err();
        assert!(!e.1.contains("alice") && !e.1.contains("SECRET"), "{}", e.1);
        let e = parse(
            format!("kind: {}\n", "k".repeat(10_000)).as_bytes(),
            Format::Yaml,
        )
        .unwrap_err();
        assert!(e.1.len() < 400, "{}", e.1);
        // Issue 41 (probe 5, D5): 200,000 `[` parsed for about 45 s,
        // stalling pod attribution; now refused before parsing.
        let deep = format!(
            "cdiVersion: 0.5.0\nkind: a/b\ndevices: {}",
            "[".repeat(200_000)
        );
        let e = parse(deep.as_bytes(), Format::Yaml).unwrap_err();
        assert_eq!(e.0, KubernetesReadError::Malformed);
        assert!(
            e.1.contains("line 3: nested deeper than 64 levels"),
            "{}",
            e.1
        );
    }

    /// Issue 41 (probe 5, D7): 10,000 other specs beside NVIDIA's claim
    /// specs cut the listing in directory order: 7 of 8 claims unresolved,
    /// and nothing said the directory was cut.
    #[test]
    fn nvidia_claim_specs_survive_a_cut_and_the_cut_is_said_once() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("var/run/cdi");
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..MAX_SPEC_FILES + 10 {
            std::fs::write(dir.join(format!("aaa-junk-{i}.json")), "{}").unwrap();
        }
        for i in 0..8 {
            std::fs::write(
                dir.join(format!("k8s.gpu.nvidia.com-claim_u{i}.yaml")),
                format!("cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: u{i}-gpu-{i}\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{i}\n"),
            )
            .unwrap();
        }
        let mut specs = CdiSpecs::new(root.path(), Reader::new("cdi-cut-test", 1));
        let scan = specs.scan(true);
        assert_eq!(scan.nvidia_claim_specs, 8);
        for i in 0..8 {
            assert!(
                scan.devices
                    .contains_key(&format!("k8s.gpu.nvidia.com/claim=u{i}-gpu-{i}")),
                "claim {i} resolved"
            );
        }
        let cut: Vec<_> = scan
            .problems
            .iter()
            .filter(|p| p.reason == KubernetesReadError::Dropped)
            .collect();
        assert_eq!(cut.len(), 1, "{:?}", scan.problems);
        assert!(
            cut[0].detail.starts_with("18 files past the 4096"),
            "{}",
            cut[0].detail
        );
        let again = specs.scan(true);
        assert!(
            again
                .problems
                .iter()
                .all(|p| p.reason != KubernetesReadError::Dropped),
            "said once, not at every scan"
        );
    }

    #[test]
    fn a_scan_reads_changed_files_once_and_reports_bad_ones_once() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("var/run/cdi");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("k8s.gpu.nvidia.com-claim_u1.yaml"),
            "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: u1-gpu-2\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia2\n",
        )
        .unwrap();
        std::fs::write(dir.join("broken.yaml"), "cdiVersion: [").unwrap();
        std::fs::write(dir.join("README"), "not a spec").unwrap();
        let mut specs = CdiSpecs::new(root.path(), Reader::new("cdi-test", 1));
        let listed = specs.scan(false);
        assert_eq!(listed.nvidia_claim_specs, 1);
        assert!(listed.devices.is_empty() && listed.problems.is_empty());
        let first = specs.scan(true);
        assert_eq!(
            first.devices["k8s.gpu.nvidia.com/claim=u1-gpu-2"],
            [node("/dev/nvidia2", None)]
        );
        assert_eq!(first.problems.len(), 1);
        assert!(first.problems[0].path.ends_with("broken.yaml"));
        let second = specs.scan(true);
        assert!(second.problems.is_empty(), "reported once per change");
        assert_eq!(second.devices.len(), 1);
    }
}
