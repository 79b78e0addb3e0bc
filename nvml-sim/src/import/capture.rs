//! A capture's element tree written as a scenario: one `[[gpu]]` per
//! `<gpu>`, its identity, settings, pinned readings and counters as the
//! capture printed them, `"N/A"` where it printed N/A, and its board. A
//! board whose PCI device id is a built-in board's starts from that board
//! (`base`) and takes every value the capture prints over it; any other
//! is described whole from the capture (name, memory, power limits,
//! clocks, thresholds, PCI ids, the MIG profiles its instances show).
//! What the capture cannot say (NVLink count, engine counts of an unknown
//! board) keeps the board's or the format's default.
//!
//! Element names follow the DTDs: v13/v12 (`gpu_power_readings`,
//! `clocks_event_reasons`) and older (`power_readings`,
//! `clocks_throttle_reasons`), each read where present.

use super::{Format, Node, ParseError};
use crate::model::{BoardFile, BUILTIN_BOARDS};
use toml::{Table, Value};

/// What nvidia-smi prints for a value NVML does not give.
fn is_na(text: &str) -> bool {
    let t = text.trim();
    t.is_empty()
        || t.starts_with('[')
        || matches!(
            t,
            "N/A"
                | "Not Supported"
                | "Not Available"
                | "Unknown"
                | "Unknown Error"
                | "Insufficient Permissions"
                | "Requested functionality has been deprecated"
                | "Not Found"
                | "None"
        )
        || t.starts_with("Not available")
        || t.starts_with("Not Available")
}

fn fail(node: &Node, message: impl Into<String>) -> ParseError {
    ParseError {
        line: node.line,
        element: Some(node.name.clone()),
        message: message.into(),
    }
}

/// The GPU being read, and what the import has to say about it.
struct Gpu<'a> {
    node: &'a Node,
    index: usize,
    notes: &'a mut Vec<String>,
}

/// A value: absent from the capture, N/A, or its text.
enum Got<'a> {
    Absent,
    Na,
    Is(&'a Node),
}

impl<'a> Gpu<'a> {
    /// The first of `paths` the capture has (DTDs name things differently).
    fn at(&self, paths: &[&str]) -> Got<'a> {
        for p in paths {
            if let Some(n) = self.node.path(p) {
                if n.children.is_empty() && is_na(&n.text) {
                    return Got::Na;
                }
                return Got::Is(n);
            }
        }
        Got::Absent
    }

    fn text(&self, paths: &[&str]) -> Option<&'a str> {
        match self.at(paths) {
            Got::Is(n) => Some(n.text.as_str()),
            _ => None,
        }
    }

    fn note(&mut self, line: usize, message: String) {
        self.notes
            .push(format!("line {line}: GPU {}: {message}", self.index));
    }

    /// A number with its unit (`81920 MiB`, `41 %`, `250.00 W`, `16x`,
    /// `502 KB/s`, `2560 bank(s)`): `None` if absent, N/A in `Val` terms.
    fn number(&self, paths: &[&str]) -> Result<Option<Val>, ParseError> {
        match self.at(paths) {
            Got::Absent => Ok(None),
            Got::Na => Ok(Some(Val::Na)),
            Got::Is(n) => number(&n.text)
                .map(|v| Some(Val::Num(v)))
                .ok_or_else(|| fail(n, format!("`{}` is not a number", n.text))),
        }
    }

    /// A whole number that must fit NVML's unsigned counters.
    fn count(&self, paths: &[&str]) -> Result<Option<Val>, ParseError> {
        let v = self.number(paths)?;
        if let Some(Val::Num(x)) = v {
            if x < 0.0 || x.fract() != 0.0 {
                let n = self.first(paths).expect("read above");
                return Err(fail(n, format!("`{}` is not a whole count", n.text)));
            }
        }
        Ok(v)
    }

    fn first(&self, paths: &[&str]) -> Option<&'a Node> {
        paths.iter().find_map(|p| self.node.path(p))
    }

    /// `Enabled`/`Yes`/`Active`/`True` or their opposites.
    fn flag(&self, paths: &[&str]) -> Result<Option<Val>, ParseError> {
        match self.at(paths) {
            Got::Absent => Ok(None),
            Got::Na => Ok(Some(Val::Na)),
            Got::Is(n) => match n.text.trim() {
                "Enabled" | "Yes" | "Active" | "True" | "Enable" => Ok(Some(Val::Bool(true))),
                "Disabled" | "No" | "Not Active" | "False" | "Disable" => {
                    Ok(Some(Val::Bool(false)))
                }
                t => Err(fail(
                    n,
                    format!("`{t}` is neither Enabled/Yes/Active nor Disabled/No"),
                )),
            },
        }
    }
}

/// A value as it goes into the scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Na,
    Num(f64),
    Bool(bool),
}

impl Val {
    fn num(self) -> Option<f64> {
        match self {
            Val::Num(v) => Some(v),
            _ => None,
        }
    }

    fn toml_int(self) -> Value {
        match self {
            Val::Na => Value::String("N/A".into()),
            Val::Num(v) => Value::Integer(v.round() as i64),
            Val::Bool(b) => Value::Boolean(b),
        }
    }

    fn toml_float(self) -> Value {
        match self {
            Val::Num(v) => Value::Float(v),
            other => other.toml_int(),
        }
    }
}

/// The leading number of `81920 MiB`, `41 %`, `16x`, `0x1E`, `P2`...
fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    let first = t.split_whitespace().next()?;
    let first = first.trim_end_matches(['x', '%']);
    if let Some(hex) = first.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    first.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn hex(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// The calls that answer NOT_SUPPORTED where a capture prints N/A for all
/// they give (`[gpu.errors]`).
fn not_supported(errors: &mut Table, calls: &[&str]) {
    for call in calls {
        errors.insert((*call).into(), Value::String("NOT_SUPPORTED".into()));
    }
}

fn set(t: &mut Table, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        t.insert(key.into(), v);
    }
}

fn sub<'t>(t: &'t mut Table, key: &str) -> &'t mut Table {
    let v = t
        .entry(key.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    match v {
        Value::Table(t) => t,
        _ => unreachable!("only tables are inserted under {key}"),
    }
}

/// `NVML_BRAND_*` names of the board format, by nvidia-smi's wording.
fn brand(text: &str) -> &'static str {
    match text.trim() {
        t if t.eq_ignore_ascii_case("GRID") => "grid",
        "GeForce" => "geforce",
        "Quadro" => "quadro",
        "Tesla" => "tesla",
        "NVS" => "nvs",
        "GRID" => "grid",
        "Titan" | "TITAN" => "titan",
        "NVIDIA Virtual Applications" => "nvidia-vapps",
        "NVIDIA Virtual PC" => "nvidia-vpc",
        "NVIDIA Virtual Compute Server" => "nvidia-vcs",
        "NVIDIA RTX Virtual Workstation" => "nvidia-vws",
        "NVIDIA Cloud Gaming" => "nvidia-cloud-gaming",
        "Quadro RTX" => "quadro-rtx",
        "NVIDIA RTX" => "nvidia-rtx",
        "NVIDIA" => "nvidia",
        "GeForce RTX" => "geforce-rtx",
        "Titan RTX" | "TITAN RTX" => "titan-rtx",
        _ => "unknown",
    }
}

/// Architectures by the board format's names, oldest first.
const ARCHITECTURES: [&str; 9] = [
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
];

/// The architecture nvidia-smi names, or (older DTDs print none) the one
/// the PCI device id belongs to.
fn architecture(printed: Option<&str>, device_id: Option<u32>) -> &'static str {
    if let Some(p) = printed {
        let p = p.to_ascii_lowercase();
        for a in ARCHITECTURES {
            if p.starts_with(a) {
                return a;
            }
        }
    }
    // Device id ranges of NVIDIA's PCI id list (pci-ids.ucw.cz, vendor 10de).
    let Some(id) = device_id.map(|d| d >> 16) else {
        return "unknown";
    };
    match id {
        0x0fc0..=0x0fff | 0x1000..=0x103f | 0x1180..=0x12ff => "kepler",
        0x1340..=0x143f | 0x17c0..=0x17ff => "maxwell",
        0x1d80..=0x1dbf => "volta",
        0x15f0..=0x15ff | 0x1b00..=0x1d7f => "pascal",
        0x1e00..=0x1fff | 0x2180..=0x21ff => "turing",
        0x20b0..=0x20ff | 0x2200..=0x22ff | 0x2400..=0x25ff => "ampere",
        0x2300..=0x23ff => "hopper",
        0x2680..=0x28ff => "ada",
        0x2900..=0x2fff => "blackwell",
        _ => "unknown",
    }
}

/// Built-in boards by PCI device id.
fn builtin_by_device_id(id: u32) -> Option<(&'static str, BoardFile)> {
    BUILTIN_BOARDS.iter().find_map(|(key, text)| {
        let f: BoardFile = toml::from_str(text).ok()?;
        (f.pci_device_id == Some(id)).then_some((*key, f))
    })
}

fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let s = out
        .trim_matches('-')
        .trim_start_matches("nvidia-")
        .to_string();
    if s.is_empty() {
        "gpu".into()
    } else {
        s
    }
}

const REASONS: &[(&str, &str)] = &[
    ("gpu_idle", "gpu-idle"),
    ("applications_clocks_setting", "applications-clocks-setting"),
    ("sw_power_cap", "sw-power-cap"),
    ("hw_slowdown", "hw-slowdown"),
    ("sync_boost", "sync-boost"),
    ("sw_thermal_slowdown", "sw-thermal-slowdown"),
    ("hw_thermal_slowdown", "hw-thermal-slowdown"),
    ("hw_power_brake_slowdown", "hw-power-brake-slowdown"),
    ("display_clocks_setting", "display-clock-setting"),
];

/// What a GPU contributes: its `[[gpu]]` table and its board table.
struct Read {
    gpu: Table,
    board: Table,
    base: Option<&'static str>,
}

/// The MIG devices of one GPU instance, as the capture lists them.
struct Instance<'a> {
    gi: u32,
    devices: Vec<&'a Node>,
}

fn mig_instances(gpu: &Node) -> Result<Vec<Instance<'_>>, ParseError> {
    let mut out: Vec<Instance> = Vec::new();
    let Some(list) = gpu.child("mig_devices") else {
        return Ok(out);
    };
    for dev in list.children_named("mig_device") {
        let gi_node = dev
            .child("gpu_instance_id")
            .ok_or_else(|| fail(dev, "a MIG device without <gpu_instance_id>"))?;
        let gi = number(&gi_node.text)
            .filter(|v| v.fract() == 0.0 && *v >= 0.0 && *v < 64.0)
            .ok_or_else(|| fail(gi_node, format!("GPU instance id `{}`", gi_node.text)))?
            as u32;
        match out.iter_mut().find(|i| i.gi == gi) {
            Some(i) => i.devices.push(dev),
            None => out.push(Instance {
                gi,
                devices: vec![dev],
            }),
        }
    }
    out.sort_by_key(|i| i.gi);
    Ok(out)
}

fn dev_num(dev: &Node, path: &str) -> Option<f64> {
    dev.path(path).and_then(|n| number(&n.text))
}

/// A compute instance's share of its GPU instance's slices, from SM counts.
fn ci_slices(ci_sms: f64, per_slice: f64, slices: u32) -> u32 {
    if per_slice <= 0.0 {
        return slices;
    }
    ((ci_sms / per_slice).round() as u32).clamp(1, slices)
}

/// The MIG profile table and the `mig` list of one GPU: the base board's
/// profiles where every instance matches one (by GPU instance id, memory
/// and SM count, the memory and engine counts taken from the capture),
/// else profiles made from what the capture shows.
fn mig_layout(
    g: &mut Gpu,
    base: Option<&BoardFile>,
    total_mib: f64,
) -> Result<Option<(Option<Value>, Value)>, ParseError> {
    let instances = mig_instances(g.node)?;
    if instances.is_empty() {
        return Ok(None);
    }
    let mut profiles: Vec<crate::model::ProfileEntry> = base
        .and_then(|b| b.mig.as_ref())
        .and_then(|m| m.profile.clone())
        .unwrap_or_default();
    let rule_id = |p: &crate::model::ProfileEntry, s: u32| -> u32 {
        if let Some(ids) = &p.gpu_instance_ids {
            if let Some(i) = p.placements.iter().position(|&x| x == s) {
                return ids[i];
            }
        }
        match p.slices {
            7 => 0,
            4 => 1,
            3 => 1 + s / 4,
            2 => 3 + s / 2,
            _ if p.memory_slices == 2 => 3 + s / 2,
            _ => 7 + s,
        }
    };
    // (profile index, memory of the instance, SMs of its devices)
    let mut matched = Vec::new();
    for inst in &instances {
        let mem = dev_num(inst.devices[0], "fb_memory_usage/total").unwrap_or(0.0);
        let sms: f64 = inst
            .devices
            .iter()
            .filter_map(|d| dev_num(d, "device_attributes/shared/multiprocessor_count"))
            .sum();
        let best = profiles
            .iter()
            .enumerate()
            .filter(|(_, p)| p.placements.iter().any(|&s| rule_id(p, s) == inst.gi))
            .filter(|(_, p)| (p.memory_mib as f64 - mem).abs() <= 0.03 * mem.max(1.0))
            .min_by_key(|(_, p)| {
                let sm_fit = if inst.devices.len() == 1 {
                    (f64::from(p.sm_count) - sms).abs() as u64
                } else if f64::from(p.sm_count) >= sms {
                    0
                } else {
                    1_000
                };
                (sm_fit, (p.memory_mib as f64 - mem).abs() as u64)
            })
            .map(|(i, _)| i);
        matched.push((best, mem, sms));
    }
    let all_matched = matched.iter().all(|(b, ..)| b.is_some());
    let mut table_changed = !all_matched;
    if all_matched {
        // The base's table, with each seen profile's memory and engines as
        // the capture shows them.
        for (inst, (best, mem, sms)) in instances.iter().zip(&matched) {
            let p = &mut profiles[best.expect("all matched")];
            let d = inst.devices[0];
            let engine = |path: &str| dev_num(d, &format!("device_attributes/shared/{path}"));
            let before = p.clone();
            p.memory_mib = *mem as u64;
            if inst.devices.len() == 1 && *sms > 0.0 {
                p.sm_count = *sms as u32;
            }
            p.copy_engines = engine("copy_engine_count").map_or(p.copy_engines, |v| v as u32);
            p.decoders = engine("decoder_count").map_or(p.decoders, |v| v as u32);
            p.encoders = engine("encoder_count").map_or(p.encoders, |v| v as u32);
            p.jpegs = engine("jpg_count").map_or(p.jpegs, |v| v as u32);
            p.ofas = engine("ofa_count").map_or(p.ofas, |v| v as u32);
            table_changed |= before.memory_mib != p.memory_mib
                || before.sm_count != p.sm_count
                || before.copy_engines != p.copy_engines
                || before.decoders != p.decoders
                || before.encoders != p.encoders
                || before.jpegs != p.jpegs
                || before.ofas != p.ofas;
        }
    } else {
        // Profiles of the instances seen, each placed where its GPU
        // instance id says (ids explicit), in memory-slice order.
        g.note(
            g.node.line,
            format!(
                "MIG instances ({}) not all in a known board's profile table: profiles made from the capture",
                instances.iter().map(|i| i.gi.to_string()).collect::<Vec<_>>().join(", ")
            ),
        );
        profiles.clear();
        let slice_mib = (total_mib / 8.0).max(1.0);
        let mut next_start = 0u32;
        for inst in &instances {
            let d = inst.devices[0];
            let mem = dev_num(d, "fb_memory_usage/total").unwrap_or(0.0);
            let mem_slices = match (mem / slice_mib).round() as u32 {
                0 | 1 => 1,
                2 => 2,
                3 | 4 => 4,
                _ => 8,
            };
            let slices = match (mem_slices, inst.gi) {
                (8, _) => 7,
                (4, 1) => 4,
                (4, _) => 3,
                (m, _) => m,
            };
            let sms: f64 = inst
                .devices
                .iter()
                .filter_map(|x| dev_num(x, "device_attributes/shared/multiprocessor_count"))
                .sum();
            let name = format!("{slices}g.{}gb", (mem / 1024.0).round() as u64);
            let engine = |path: &str| {
                dev_num(d, &format!("device_attributes/shared/{path}")).map_or(0, |v| v as u32)
            };
            let start = next_start;
            next_start += mem_slices;
            if next_start > 8 {
                return Err(fail(
                    d,
                    "the MIG instances take more than the GPU's 8 memory slices",
                ));
            }
            match profiles.iter_mut().find(|p| p.name == name) {
                Some(p) => {
                    p.instances += 1;
                    p.placements.push(start);
                    p.gpu_instance_ids
                        .get_or_insert_with(Vec::new)
                        .push(inst.gi);
                }
                None => profiles.push(crate::model::ProfileEntry {
                    name,
                    profile: match (slices, mem_slices) {
                        (1, 2) => "1_SLICE_REV2",
                        (1, _) => "1_SLICE",
                        (2, _) => "2_SLICE",
                        (3, _) => "3_SLICE",
                        (4, _) => "4_SLICE",
                        _ => "7_SLICE",
                    }
                    .into(),
                    id: match slices {
                        1 if mem_slices == 2 => 15,
                        1 => 19,
                        2 => 14,
                        3 => 9,
                        4 => 5,
                        _ => 0,
                    },
                    slices,
                    memory_slices: mem_slices,
                    instances: 1,
                    placements: vec![start],
                    gpu_instance_ids: Some(vec![inst.gi]),
                    memory_mib: mem as u64,
                    sm_count: if inst.devices.len() == 1 {
                        sms as u32
                    } else {
                        0
                    },
                    copy_engines: engine("copy_engine_count"),
                    decoders: engine("decoder_count"),
                    encoders: engine("encoder_count"),
                    jpegs: engine("jpg_count"),
                    ofas: engine("ofa_count"),
                }),
            }
        }
        // A GPU instance of several compute instances: its SMs are at least
        // theirs.
        for p in &mut profiles {
            if p.sm_count == 0 {
                p.sm_count = p.slices * 16;
            }
        }
        matched.clear();
        for inst in &instances {
            let i = profiles
                .iter()
                .position(|p| {
                    p.gpu_instance_ids
                        .as_ref()
                        .is_some_and(|ids| ids.contains(&inst.gi))
                })
                .expect("made above");
            matched.push((Some(i), 0.0, 0.0));
        }
    }
    let mut list = Vec::new();
    for (inst, (best, ..)) in instances.iter().zip(&matched) {
        let p = &profiles[best.expect("all matched or made")];
        let mut e = Table::new();
        e.insert("profile".into(), Value::String(p.name.clone()));
        e.insert("gpu_instance_id".into(), Value::Integer(i64::from(inst.gi)));
        let per_slice = f64::from(p.sm_count) / f64::from(p.slices.max(1));
        let mut cis = Vec::new();
        let mut ci_ids = Vec::new();
        for d in &inst.devices {
            let id = dev_num(d, "compute_instance_id")
                .filter(|v| v.fract() == 0.0 && (0.0..8.0).contains(v))
                .ok_or_else(|| fail(d, "a MIG device without a compute instance id of 0..=7"))?
                as u32;
            if ci_ids.contains(&id) {
                return Err(fail(
                    d,
                    format!(
                        "compute instance {id} of GPU instance {} listed twice",
                        inst.gi
                    ),
                ));
            }
            ci_ids.push(id);
            let sms = dev_num(d, "device_attributes/shared/multiprocessor_count").unwrap_or(0.0);
            let slices = if inst.devices.len() == 1 {
                p.slices
            } else {
                ci_slices(sms, per_slice, p.slices)
            };
            let mut ci = Table::new();
            ci.insert("id".into(), Value::Integer(i64::from(id)));
            ci.insert("slices".into(), Value::Integer(i64::from(slices)));
            cis.push(Value::Table(ci));
        }
        let used: u32 = cis
            .iter()
            .filter_map(|c| c.get("slices").and_then(Value::as_integer))
            .map(|s| s as u32)
            .sum();
        if used > p.slices {
            // More compute instances than SM counts can tell apart: one
            // slice each.
            for c in &mut cis {
                if let Some(t) = c.as_table_mut() {
                    t.insert("slices".into(), Value::Integer(1));
                }
            }
        }
        if inst.devices.len() > 1 || ci_ids != [0] {
            e.insert("compute_instances".into(), Value::Array(cis));
        }
        if let Some(used) = dev_num(inst.devices[0], "fb_memory_usage/used") {
            if (used as u64) <= p.memory_mib {
                e.insert("memory_used_mib".into(), Value::Integer(used as i64));
            }
        }
        list.push(Value::Table(e));
    }
    let table = if table_changed {
        Some(Value::try_from(&profiles).map_err(|e| fail(g.node, e.to_string()))?)
    } else {
        None
    };
    Ok(Some((table, Value::Array(list))))
}

fn read_gpu(node: &Node, index: usize, notes: &mut Vec<String>) -> Result<Read, ParseError> {
    let mut g = Gpu { node, index, notes };
    let mut gpu = Table::new();
    let mut board = Table::new();
    let name_node = node
        .child("product_name")
        .ok_or_else(|| fail(node, "a <gpu> without <product_name>: a truncated capture?"))?;
    let name = name_node.text.trim().to_string();
    if name.is_empty() || is_na(&name) {
        return Err(fail(name_node, "the product name is empty"));
    }
    let device_id = g
        .text(&["pci/pci_device_id"])
        .and_then(hex)
        .filter(|&d| d != 0);
    let base = device_id.and_then(builtin_by_device_id);
    board.insert("name".into(), Value::String(name.clone()));
    let arch = architecture(g.text(&["product_architecture"]), device_id);
    if base.is_none() || g.text(&["product_architecture"]).is_some() {
        board.insert("architecture".into(), Value::String(arch.into()));
    }
    if let Some(b) = g.text(&["product_brand"]) {
        board.insert("brand".into(), Value::String(brand(b).into()));
    } else if base.is_none() {
        board.insert("brand".into(), Value::String("unknown".into()));
    }
    if let Some(d) = device_id {
        board.insert("pci_device_id".into(), Value::Integer(i64::from(d)));
    }
    if let Some(s) = g.text(&["pci/pci_sub_system_id"]).and_then(hex) {
        board.insert("pci_subsystem_id".into(), Value::Integer(i64::from(s)));
    }
    let text_or_na = |g: &Gpu, paths: &[&str]| match g.at(paths) {
        Got::Absent => None,
        Got::Na => Some(Value::String("N/A".into())),
        Got::Is(n) => Some(Value::String(n.text.trim().into())),
    };
    set(
        &mut board,
        "board_part_number",
        text_or_na(&g, &["board_part_number"]),
    );
    set(
        &mut board,
        "vbios_version",
        text_or_na(&g, &["vbios_version"]),
    );
    let mut inforom = Table::new();
    for (key, path) in [
        ("image", "inforom_version/img_version"),
        ("oem", "inforom_version/oem_object"),
        ("ecc", "inforom_version/ecc_object"),
        ("power", "inforom_version/pwr_object"),
    ] {
        set(&mut inforom, key, text_or_na(&g, &[path]));
    }
    if !inforom.is_empty() {
        board.insert("inforom".into(), Value::Table(inforom));
    }
    // Identity.
    if let Some(u) = g.text(&["uuid"]) {
        if u.starts_with("GPU-") && u.len() <= 80 {
            gpu.insert("uuid".into(), Value::String(u.into()));
        } else {
            let line = g.first(&["uuid"]).map_or(node.line, |n| n.line);
            g.note(
                line,
                format!("uuid `{u}` is not a GPU- UUID: a derived one is used"),
            );
        }
    }
    set(&mut gpu, "serial", text_or_na(&g, &["serial"]));
    let bus = g
        .text(&["pci/pci_bus_id"])
        .map(str::to_string)
        .or_else(|| node.attr("id").map(str::to_string));
    if let Some(b) = bus {
        if crate::identity::PciAddr::parse(&b).is_some() {
            gpu.insert("pci_bus_id".into(), Value::String(b));
        } else {
            g.note(
                node.line,
                format!(
                    "PCI bus id `{b}` is not DOMAIN:BUS:DEVICE.FUNCTION: a derived one is used"
                ),
            );
        }
    }
    set(
        &mut gpu,
        "minor_number",
        g.count(&["minor_number"])?.map(Val::toml_int),
    );
    // Settings.
    set(
        &mut gpu,
        "persistence",
        g.flag(&["persistence_mode"])?.map(Val::toml_int),
    );
    let display_active = g.flag(&["display_active"])?;
    let display_mode = g.flag(&["display_mode"])?;
    if display_active == Some(Val::Bool(true)) || display_mode == Some(Val::Bool(true)) {
        board.insert("display".into(), Value::Boolean(true));
    }
    set(&mut gpu, "display", display_active.map(Val::toml_int));
    set(&mut gpu, "display_mode", display_mode.map(Val::toml_int));
    match g.at(&["compute_mode"]) {
        Got::Absent => {}
        Got::Na => {
            gpu.insert("compute_mode".into(), Value::String("N/A".into()));
        }
        Got::Is(n) => {
            let m = match n.text.trim() {
                "Default" => "default",
                "Exclusive_Thread" | "Exclusive Thread" => "exclusive-thread",
                "Prohibited" => "prohibited",
                "Exclusive_Process" | "Exclusive Process" => "exclusive-process",
                t => return Err(fail(n, format!("unknown compute mode `{t}`"))),
            };
            gpu.insert("compute_mode".into(), Value::String(m.into()));
        }
    }
    match g.at(&["gpu_virtualization_mode/virtualization_mode"]) {
        Got::Is(n) => {
            let m = match n.text.trim() {
                "None" => None,
                "Pass-Through" => Some("pass-through"),
                "VGPU" => Some("vgpu"),
                "Host VGPU" | "Host_VGPU" => Some("host-vgpu"),
                "Host VSGA" | "Host_VSGA" => Some("host-vsga"),
                t => return Err(fail(n, format!("unknown virtualization mode `{t}`"))),
            };
            set(
                &mut gpu,
                "virtualization_mode",
                m.map(|m| Value::String(m.into())),
            );
        }
        Got::Na => {
            // "None" reads as N/A above; a real N/A is rare.
            if g.text(&["gpu_virtualization_mode/virtualization_mode"])
                .is_none()
                && g.first(&["gpu_virtualization_mode/virtualization_mode"])
                    .is_some_and(|n| n.text.trim() != "None")
            {
                gpu.insert("virtualization_mode".into(), Value::String("N/A".into()));
            }
        }
        Got::Absent => {}
    }
    for (key, path) in [
        ("driver_model", "driver_model/current_dm"),
        ("driver_model_pending", "driver_model/pending_dm"),
    ] {
        if let Some(t) = g.text(&[path]) {
            let m = match t.trim() {
                "WDDM" => "wddm",
                "TCC" | "WDM" => "tcc",
                "MCDM" => "mcdm",
                _ => {
                    let n = g.first(&[path]).expect("read above");
                    return Err(fail(n, format!("unknown driver model `{t}`")));
                }
            };
            gpu.insert(key.into(), Value::String(m.into()));
        }
    }
    // Memory.
    let total = g
        .number(&["fb_memory_usage/total"])?
        .and_then(Val::num)
        .ok_or_else(|| fail(node, "no <fb_memory_usage><total>: a truncated capture?"))?;
    let reserved = g
        .number(&["fb_memory_usage/reserved"])?
        .and_then(Val::num)
        .unwrap_or(0.0);
    let mut memory = Table::new();
    memory.insert("total_mib".into(), Value::Integer(total as i64));
    memory.insert("reserved_mib".into(), Value::Integer(reserved as i64));
    let bar1 = g.number(&["bar1_memory_usage/total"])?;
    if let Some(Val::Num(b)) = bar1 {
        memory.insert("bar1_mib".into(), Value::Integer(b as i64));
    }
    board.insert("memory".into(), Value::Table(memory));
    let mut errors = Table::new();
    if bar1 == Some(Val::Na) {
        not_supported(&mut errors, &["nvmlDeviceGetBAR1MemoryInfo"]);
    }
    // Power limits: the GPU's (v12+ `gpu_power_readings`, older
    // `power_readings`) and the module's.
    let limit = |g: &Gpu, names: &[&str]| -> Result<Option<Val>, ParseError> {
        let paths: Vec<String> = names
            .iter()
            .flat_map(|n| {
                // R610 nests the limits under `GPU Ceiling Power Limit`.
                [
                    format!("gpu_power_readings/{n}"),
                    format!("gpu_power_readings/gpu_ceiling_power_limit/{n}"),
                    format!("power_readings/{n}"),
                ]
            })
            .collect();
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        g.number(&paths)
    };
    let default = limit(&g, &["default_power_limit"])?;
    let min = limit(&g, &["min_power_limit"])?;
    let max = limit(&g, &["max_power_limit"])?;
    let enforced = limit(&g, &["current_power_limit", "enforced_power_limit"])?;
    let requested = limit(&g, &["requested_power_limit", "power_limit"])?;
    let mut power = Table::new();
    let default_w = default
        .and_then(Val::num)
        .or_else(|| requested.and_then(Val::num))
        .or_else(|| enforced.and_then(Val::num));
    match default_w {
        Some(d) => {
            power.insert("default_limit_w".into(), Value::Float(d));
            let lo = min.and_then(Val::num).unwrap_or(d);
            let hi = max.and_then(Val::num).unwrap_or(d);
            let set_w = requested.and_then(Val::num).or(enforced.and_then(Val::num));
            let lo = set_w.map_or(lo, |s| lo.min(s));
            let hi = set_w.map_or(hi, |s| hi.max(s));
            power.insert("min_limit_w".into(), Value::Float(lo.min(d)));
            power.insert("max_limit_w".into(), Value::Float(hi.max(d)));
            if let Some(s) = set_w {
                gpu.insert("power_limit_w".into(), Value::Float(s));
            }
            if let (Some(Val::Num(e)), Some(Val::Num(r))) = (enforced, requested) {
                if (e - r).abs() > 0.005 {
                    gpu.insert("enforced_power_limit_w".into(), Value::Float(e));
                }
            }
        }
        None => {
            // No limit printed: NVML answers NOT_SUPPORTED to every limit.
            power.insert("default_limit_w".into(), Value::Float(100.0));
            not_supported(
                &mut errors,
                &[
                    "nvmlDeviceGetPowerManagementLimit",
                    "nvmlDeviceGetPowerManagementDefaultLimit",
                    "nvmlDeviceGetPowerManagementLimitConstraints",
                    "nvmlDeviceGetEnforcedPowerLimit",
                ],
            );
        }
    }
    if default_w.is_some() {
        for (key, v) in [("min", min), ("max", max), ("default", default)] {
            if v == Some(Val::Na) {
                let call = match key {
                    "default" => "nvmlDeviceGetPowerManagementDefaultLimit",
                    _ => "nvmlDeviceGetPowerManagementLimitConstraints",
                };
                not_supported(&mut errors, &[call]);
            }
        }
        if enforced == Some(Val::Na) {
            not_supported(&mut errors, &["nvmlDeviceGetEnforcedPowerLimit"]);
        }
        if requested == Some(Val::Na) {
            not_supported(&mut errors, &["nvmlDeviceGetPowerManagementLimit"]);
        }
    }
    let module_limit = |g: &Gpu, n: &str| g.number(&[&format!("module_power_readings/{n}")]);
    if let Some(Val::Num(d)) = module_limit(&g, "default_power_limit")? {
        let mut m = Table::new();
        m.insert("default_limit_w".into(), Value::Float(d));
        set(
            &mut m,
            "min_limit_w",
            module_limit(&g, "min_power_limit")?
                .and_then(Val::num)
                .map(Value::Float),
        );
        set(
            &mut m,
            "max_limit_w",
            module_limit(&g, "max_power_limit")?
                .and_then(Val::num)
                .map(Value::Float),
        );
        power.insert("module".into(), Value::Table(m));
    }
    board.insert("power".into(), Value::Table(power));
    // Clocks: the maxima are the board's.
    let mut clocks = Table::new();
    let max_clock = |g: &Gpu, n: &str| g.number(&[&format!("max_clocks/{n}")]);
    let max_g = max_clock(&g, "graphics_clock")?;
    let max_m = max_clock(&g, "mem_clock")?;
    match (max_g.and_then(Val::num), max_m.and_then(Val::num)) {
        (Some(gr), Some(mem)) => {
            clocks.insert("max_graphics_mhz".into(), Value::Integer(gr as i64));
            clocks.insert("max_memory_mhz".into(), Value::Integer(mem as i64));
            for (key, n) in [("max_sm_mhz", "sm_clock"), ("max_video_mhz", "video_clock")] {
                set(
                    &mut clocks,
                    key,
                    max_clock(&g, n)?
                        .and_then(Val::num)
                        .map(|v| Value::Integer(v as i64)),
                );
            }
        }
        _ => {
            if base.is_none() {
                let cur = |n: &str| {
                    g.number(&[&format!("clocks/{n}")])
                        .ok()
                        .flatten()
                        .and_then(Val::num)
                };
                clocks.insert(
                    "max_graphics_mhz".into(),
                    Value::Integer(cur("graphics_clock").unwrap_or(1000.0) as i64),
                );
                clocks.insert(
                    "max_memory_mhz".into(),
                    Value::Integer(cur("mem_clock").unwrap_or(1000.0) as i64),
                );
            }
            not_supported(&mut errors, &["nvmlDeviceGetMaxClockInfo"]);
        }
    }
    if !clocks.is_empty() {
        board.insert("clocks".into(), Value::Table(clocks));
    }
    // Thresholds and T.Limit margins.
    let mut thermal = Table::new();
    for (key, path) in [
        ("shutdown_c", "temperature/gpu_temp_max_threshold"),
        ("slowdown_c", "temperature/gpu_temp_slow_threshold"),
        ("gpu_max_c", "temperature/gpu_temp_max_gpu_threshold"),
        ("memory_max_c", "temperature/gpu_temp_max_mem_threshold"),
        (
            "shutdown_tlimit_c",
            "temperature/gpu_temp_max_tlimit_threshold",
        ),
        (
            "slowdown_tlimit_c",
            "temperature/gpu_temp_slow_tlimit_threshold",
        ),
        (
            "gpu_max_tlimit_c",
            "temperature/gpu_temp_max_gpu_tlimit_threshold",
        ),
        (
            "memory_max_tlimit_c",
            "temperature/gpu_temp_max_mem_tlimit_threshold",
        ),
    ] {
        let v = g.number(&[path])?;
        if let Some(Val::Num(x)) = v {
            if key.ends_with("tlimit_c") || x >= 0.0 {
                thermal.insert(key.into(), Value::Integer(x as i64));
                continue;
            }
        }
        // Absent from an older DTD means NVML was not asked: also N/A
        // for the simulated board, so a base's value does not show.
        thermal.insert(key.into(), Value::String("N/A".into()));
    }
    let has_tlimit = [
        "shutdown_tlimit_c",
        "slowdown_tlimit_c",
        "gpu_max_tlimit_c",
        "memory_max_tlimit_c",
    ]
    .iter()
    .any(|k| thermal.get(*k).is_some_and(Value::is_integer))
        || g.number(&["temperature/gpu_temp_tlimit"])?
            .and_then(Val::num)
            .is_some();
    thermal.insert("tlimit".into(), Value::Boolean(has_tlimit));
    let fan = g.number(&["fan_speed"])?;
    thermal.insert(
        "fans".into(),
        Value::Integer(i64::from(matches!(fan, Some(Val::Num(_))))),
    );
    board.insert("thermal".into(), Value::Table(thermal));
    // PCIe: the maxima are the board's.
    let max_gen = g.number(&["pci/pci_gpu_link_info/pcie_gen/max_link_gen"])?;
    let max_width = g.number(&["pci/pci_gpu_link_info/link_widths/max_link_width"])?;
    let cur_gen = g.number(&["pci/pci_gpu_link_info/pcie_gen/current_link_gen"])?;
    let cur_width = g.number(&["pci/pci_gpu_link_info/link_widths/current_link_width"])?;
    let mut pcie = Table::new();
    let gen = max_gen.and_then(Val::num).or(cur_gen.and_then(Val::num));
    let width = max_width
        .and_then(Val::num)
        .or(cur_width.and_then(Val::num));
    if let Some(v) = gen {
        let top = v.max(cur_gen.and_then(Val::num).unwrap_or(0.0));
        pcie.insert(
            "generation".into(),
            Value::Integer(top.clamp(1.0, 6.0) as i64),
        );
    } else if base.is_none() {
        pcie.insert("generation".into(), Value::Integer(3));
    }
    if let Some(v) = width {
        let top = v.max(cur_width.and_then(Val::num).unwrap_or(0.0));
        pcie.insert("width".into(), Value::Integer(top as i64));
    } else if base.is_none() {
        pcie.insert("width".into(), Value::Integer(16));
    }
    if !pcie.is_empty() {
        board.insert("pcie".into(), Value::Table(pcie));
    }
    if max_gen == Some(Val::Na) {
        not_supported(&mut errors, &["nvmlDeviceGetMaxPcieLinkGeneration"]);
    }
    if max_width == Some(Val::Na) {
        not_supported(&mut errors, &["nvmlDeviceGetMaxPcieLinkWidth"]);
    }
    if cur_width == Some(Val::Na) {
        not_supported(&mut errors, &["nvmlDeviceGetCurrPcieLinkWidth"]);
    }
    // ECC and memory health.
    let ecc_mode = g.flag(&["ecc_mode/current_ecc"])?;
    let ecc_pending = g.flag(&["ecc_mode/pending_ecc"])?;
    let mut ecc = Table::new();
    let ecc_supported = matches!(ecc_mode, Some(Val::Bool(_)));
    ecc.insert("supported".into(), Value::Boolean(ecc_supported));
    match ecc_mode {
        Some(Val::Bool(on)) => {
            gpu.insert("ecc".into(), Value::Boolean(on));
            if let Some(Val::Bool(p)) = ecc_pending {
                gpu.insert("ecc_pending".into(), Value::Boolean(p));
            }
        }
        Some(_) => {
            gpu.insert("ecc".into(), Value::String("N/A".into()));
        }
        None => {}
    }
    let mut counters = Table::new();
    set(
        &mut counters,
        "pcie_replays",
        g.count(&["pci/replay_counter"])?.map(Val::toml_int),
    );
    // ECC counts by location: DTD v12+ prints DRAM and SRAM, older ones
    // single/double bit by location.
    let mut ecc_counts = Table::new();
    let mut any_ecc = false;
    let mut locations: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    for scope in ["volatile", "aggregate"] {
        let mut by_type = Table::new();
        for (ty, old, dram, sram) in [
            (
                "corrected",
                "single_bit",
                "dram_correctable",
                "sram_correctable",
            ),
            (
                "uncorrected",
                "double_bit",
                "dram_uncorrectable",
                "sram_uncorrectable",
            ),
        ] {
            let mut locs = Table::new();
            let mut put = |locs: &mut Table, key: &'static str, v: Option<Val>| {
                if let Some(Val::Num(x)) = v {
                    let prev = locs.get(key).and_then(Value::as_integer).unwrap_or(0);
                    locs.insert(key.into(), Value::Integer(prev + x as i64));
                    any_ecc = true;
                    let set = &mut locations[usize::from(ty == "uncorrected")];
                    if !set.contains(&key) {
                        set.push(key);
                    }
                }
            };
            put(
                &mut locs,
                "dram",
                g.count(&[&format!("ecc_errors/{scope}/{dram}")])?,
            );
            put(
                &mut locs,
                "sram",
                g.count(&[&format!("ecc_errors/{scope}/{sram}")])?,
            );
            if ty == "uncorrected" {
                for part in ["sram_uncorrectable_parity", "sram_uncorrectable_secded"] {
                    put(
                        &mut locs,
                        "sram",
                        g.count(&[&format!("ecc_errors/{scope}/{part}")])?,
                    );
                }
            }
            for (key, loc) in [
                ("dram", "device_memory"),
                ("dram", "dram"),
                ("register_file", "register_file"),
                ("l1", "l1_cache"),
                ("l2", "l2_cache"),
                ("texture", "texture_memory"),
                ("texture_shm", "texture_shm"),
                ("cbu", "cbu"),
                ("sram", "sram"),
            ] {
                put(
                    &mut locs,
                    key,
                    g.count(&[&format!("ecc_errors/{scope}/{old}/{loc}")])?,
                );
            }
            if !locs.is_empty() {
                by_type.insert(ty.into(), Value::Table(locs));
            }
        }
        if !by_type.is_empty() {
            ecc_counts.insert(scope.into(), Value::Table(by_type));
        }
    }
    if any_ecc && matches!(ecc_mode, Some(Val::Bool(true))) {
        // An aggregate count is never below the volatile one (NVML's
        // aggregate includes the current driver load).
        let vol = ecc_counts.get("volatile").cloned();
        if let Some(Value::Table(vol)) = vol {
            let agg = sub(&mut ecc_counts, "aggregate");
            for (ty, locs) in vol {
                let a = sub(agg, &ty);
                for (loc, v) in locs.as_table().cloned().unwrap_or_default() {
                    let have = a.get(&loc).and_then(Value::as_integer).unwrap_or(0);
                    let need = v.as_integer().unwrap_or(0);
                    if have < need {
                        a.insert(loc, Value::Integer(need));
                    }
                }
            }
        }
        // Exactly the locations the capture counts (the others N/A).
        let list =
            |l: &[&str]| Value::Array(l.iter().map(|l| Value::String((*l).into())).collect());
        let mut sets = Table::new();
        sets.insert("corrected".into(), list(&locations[0]));
        sets.insert("uncorrected".into(), list(&locations[1]));
        ecc_counts.insert("locations".into(), Value::Table(sets));
        counters.insert("ecc".into(), Value::Table(ecc_counts));
    } else if matches!(ecc_mode, Some(Val::Bool(true))) {
        counters.insert("ecc".into(), Value::Table(Table::new()));
    }
    let mut sram = Table::new();
    for (key, path) in [
        ("volatile_corrected", "ecc_errors/volatile/sram_correctable"),
        (
            "volatile_uncorrected_parity",
            "ecc_errors/volatile/sram_uncorrectable_parity",
        ),
        (
            "volatile_uncorrected_secded",
            "ecc_errors/volatile/sram_uncorrectable_secded",
        ),
        (
            "aggregate_corrected",
            "ecc_errors/aggregate/sram_correctable",
        ),
        (
            "aggregate_uncorrected_parity",
            "ecc_errors/aggregate/sram_uncorrectable_parity",
        ),
        (
            "aggregate_uncorrected_secded",
            "ecc_errors/aggregate/sram_uncorrectable_secded",
        ),
        (
            "l2",
            "ecc_errors/aggregate_uncorrectable_sram_sources/sram_l2",
        ),
        (
            "sm",
            "ecc_errors/aggregate_uncorrectable_sram_sources/sram_sm",
        ),
        (
            "microcontroller",
            "ecc_errors/aggregate_uncorrectable_sram_sources/sram_microcontroller",
        ),
        (
            "pcie",
            "ecc_errors/aggregate_uncorrectable_sram_sources/sram_pcie",
        ),
        (
            "other",
            "ecc_errors/aggregate_uncorrectable_sram_sources/sram_other",
        ),
    ] {
        if let Some(Val::Num(v)) = g.count(&[path])? {
            sram.insert(key.into(), Value::Integer(v as i64));
        }
    }
    if let Some(Val::Bool(b)) = g.flag(&["ecc_errors/aggregate/sram_threshold_exceeded"])? {
        sram.insert("threshold_exceeded".into(), Value::Boolean(b));
    }
    if !sram.is_empty() && ecc_supported {
        counters.insert("sram".into(), Value::Table(sram));
    }
    // Retired pages (Kepler to Volta, and Turing/Ada boards that still
    // report them): counts, addresses where printed.
    let sbe = g.count(&["retired_pages/multiple_single_bit_retirement/retired_count"])?;
    let dbe = g.count(&["retired_pages/double_bit_retirement/retired_count"])?;
    let retired_numbers = matches!(sbe, Some(Val::Num(_))) || matches!(dbe, Some(Val::Num(_)));
    ecc.insert("page_retirement".into(), Value::Boolean(retired_numbers));
    if retired_numbers {
        let mut pages = Vec::new();
        for (cause, count, path) in [
            ("sbe", sbe, "retired_pages/multiple_single_bit_retirement"),
            ("dbe", dbe, "retired_pages/double_bit_retirement"),
        ] {
            let n = count.and_then(Val::num).unwrap_or(0.0) as u64;
            let listed: Vec<&Node> = node
                .path(&format!("{path}/retired_pagelist"))
                .map(|l| l.children_named("retired_page").collect())
                .unwrap_or_default();
            for i in 0..n {
                let mut p = Table::new();
                let page = listed.get(i as usize);
                let address = page
                    .and_then(|p| p.child("retired_page_address"))
                    .and_then(|a| {
                        hex(&a.text).map(u64::from).or_else(|| {
                            u64::from_str_radix(a.text.trim().trim_start_matches("0x"), 16).ok()
                        })
                    })
                    .unwrap_or(0x1000 * (i + 1) + if cause == "dbe" { 0x100_0000 } else { 0 });
                p.insert("address".into(), Value::Integer(address as i64));
                p.insert("cause".into(), Value::String(cause.into()));
                pages.push(Value::Table(p));
            }
        }
        if pages.len() > 4096 {
            return Err(fail(node, "more than 4096 retired pages"));
        }
        counters.insert("retired_pages".into(), Value::Array(pages));
        if let Some(Val::Bool(p)) = g.flag(&[
            "retired_pages/pending_retirement",
            "retired_pages/pending_blacklist",
        ])? {
            counters.insert("retired_pending".into(), Value::Boolean(p));
        }
    } else if sbe.is_some() || dbe.is_some() {
        counters.insert("retired_pages".into(), Value::String("N/A".into()));
    }
    // Remapped rows (Ampere and newer; N/A in MIG mode, where NVML does
    // not report them).
    let mig_on = g.flag(&["mig_mode/current_mig"])? == Some(Val::Bool(true));
    let corr = g.count(&["remapped_rows/remapped_row_corr"])?;
    let mut row_remapping = matches!(corr, Some(Val::Num(_)));
    if row_remapping {
        let mut r = Table::new();
        set(
            &mut r,
            "correctable",
            corr.and_then(Val::num).map(|v| Value::Integer(v as i64)),
        );
        set(
            &mut r,
            "uncorrectable",
            g.count(&["remapped_rows/remapped_row_unc"])?
                .and_then(Val::num)
                .map(|v| Value::Integer(v as i64)),
        );
        if let Some(Val::Bool(b)) = g.flag(&["remapped_rows/remapped_row_pending"])? {
            r.insert("pending".into(), Value::Boolean(b));
        }
        if let Some(Val::Bool(b)) = g.flag(&["remapped_rows/remapped_row_failure"])? {
            r.insert("failure".into(), Value::Boolean(b));
        }
        let mut h = Table::new();
        let mut banks = 0;
        for k in ["max", "high", "partial", "low", "none"] {
            if let Some(Val::Num(v)) = g.count(&[&format!(
                "remapped_rows/row_remapper_histogram/row_remapper_histogram_{k}"
            )])? {
                h.insert(k.into(), Value::Integer(v as i64));
                banks += v as i64;
            }
        }
        if h.len() == 5 {
            ecc.insert("remapper_banks".into(), Value::Integer(banks));
            r.insert("histogram".into(), Value::Table(h));
        }
        counters.insert("remapped_rows".into(), Value::Table(r));
    } else if mig_on && ecc_supported && arch_at_least(arch, "ampere") {
        // Hidden by MIG mode, not missing from the board.
        row_remapping = true;
    } else if corr.is_some() || g.first(&["remapped_rows"]).is_some() {
        counters.insert("remapped_rows".into(), Value::String("N/A".into()));
    }
    ecc.insert("row_remapping".into(), Value::Boolean(row_remapping));
    board.insert("ecc".into(), Value::Table(ecc));
    // Clock event (throttle) reasons active now, and their time.
    let reasons_node = g.first(&["clocks_event_reasons", "clocks_throttle_reasons"]);
    if let Some(rn) = reasons_node {
        if rn.children.is_empty() && is_na(&rn.text) {
            not_supported(
                &mut errors,
                &[
                    "nvmlDeviceGetSupportedClocksEventReasons",
                    "nvmlDeviceGetSupportedClocksThrottleReasons",
                    "nvmlDeviceGetCurrentClocksEventReasons",
                    "nvmlDeviceGetCurrentClocksThrottleReasons",
                ],
            );
        } else {
            let prefix = if rn.name == "clocks_event_reasons" {
                "clocks_event_reason_"
            } else {
                "clocks_throttle_reason_"
            };
            let mut active = Vec::new();
            let mut unsupported = false;
            let mut supported = Vec::new();
            for (suffix, name) in REASONS {
                match g.flag(&[&format!("{}/{prefix}{suffix}", rn.name)])? {
                    Some(Val::Bool(on)) => {
                        if on {
                            active.push(Value::String((*name).into()));
                        }
                        supported.push(Value::String((*name).into()));
                    }
                    Some(_) => unsupported = true,
                    // Not printed by this DTD: NVML may well report it.
                    None => supported.push(Value::String((*name).into())),
                }
            }
            counters.insert("clock_event_reasons".into(), Value::Array(active));
            if unsupported {
                counters.insert(
                    "supported_clock_event_reasons".into(),
                    Value::Array(supported),
                );
            }
        }
    }
    let mut durations = Table::new();
    for (key, suffix) in [
        ("sw_power_cap", "sw_power_cap"),
        ("sync_boost", "sync_boost"),
        ("sw_thermal_slowdown", "sw_therm_slowdown"),
        ("hw_thermal_slowdown", "hw_therm_slowdown"),
        ("hw_power_brake_slowdown", "hw_power_brake"),
    ] {
        if let Some(Val::Num(us)) = g.count(&[&format!(
            "clocks_event_reasons_counters/clocks_event_reasons_counters_{suffix}"
        )])? {
            durations.insert(key.into(), Value::Integer(us as i64));
        }
    }
    if !durations.is_empty() {
        counters.insert("clock_event_durations_us".into(), Value::Table(durations));
    }
    match g.at(&["gpu_recovery_action"]) {
        Got::Is(n) => {
            let a = match n.text.trim() {
                "None" => "none",
                "Reset" | "GPU Reset" => "gpu-reset",
                "Reboot" | "Node Reboot" => "node-reboot",
                "Drain P2P" => "drain-p2p",
                "Drain and Reset" => "drain-and-reset",
                t => return Err(fail(n, format!("unknown GPU recovery action `{t}`"))),
            };
            counters.insert("recovery_action".into(), Value::String(a.into()));
        }
        Got::Na => {
            // "None" is printed for no action: N/A above caught it.
            if g.first(&["gpu_recovery_action"])
                .is_some_and(|n| n.text.trim() == "None")
            {
                counters.insert("recovery_action".into(), Value::String("none".into()));
            } else {
                counters.insert("recovery_action".into(), Value::String("N/A".into()));
            }
        }
        Got::Absent => {}
    }
    // Pinned readings.
    let mut r = Table::new();
    let pin_int = |r: &mut Table, key: &str, v: Option<Val>| set(r, key, v.map(Val::toml_int));
    pin_int(
        &mut r,
        "temperature_c",
        g.number(&["temperature/gpu_temp"])?,
    );
    pin_int(
        &mut r,
        "memory_temperature_c",
        g.number(&["temperature/memory_temp"])?,
    );
    pin_int(
        &mut r,
        "tlimit_c",
        g.number(&["temperature/gpu_temp_tlimit"])?,
    );
    // NVML's power usage: the 1 s average where the driver prints one,
    // else the instantaneous draw, else (older DTDs) `power_draw`.
    let draw = |g: &Gpu, section: &[&str]| -> Result<Option<Val>, ParseError> {
        let mut seen = None;
        for s in section {
            for name in ["average_power_draw", "instant_power_draw", "power_draw"] {
                match g.number(&[&format!("{s}/{name}")])? {
                    Some(v @ Val::Num(_)) => return Ok(Some(v)),
                    Some(v) => seen = seen.or(Some(v)),
                    None => {}
                }
            }
        }
        Ok(seen)
    };
    set(
        &mut r,
        "power_w",
        draw(&g, &["gpu_power_readings", "power_readings"])?.map(Val::toml_float),
    );
    if let Some(v @ Val::Num(_)) = draw(&g, &["module_power_readings"])? {
        r.insert("module_power_w".into(), v.toml_float());
    }
    if let Some(v @ Val::Num(_)) = draw(&g, &["gpu_memory_power_readings"])? {
        r.insert("memory_power_w".into(), v.toml_float());
    }
    for (key, path) in [
        ("graphics_clock_mhz", "clocks/graphics_clock"),
        ("sm_clock_mhz", "clocks/sm_clock"),
        ("memory_clock_mhz", "clocks/mem_clock"),
        ("video_clock_mhz", "clocks/video_clock"),
    ] {
        pin_int(&mut r, key, g.number(&[path])?);
    }
    match g.at(&["performance_state"]) {
        Got::Is(n) => {
            let p = n
                .text
                .trim()
                .strip_prefix('P')
                .and_then(|p| p.parse::<i64>().ok())
                .filter(|p| (0..=15).contains(p))
                .ok_or_else(|| fail(n, format!("performance state `{}` is not P0..P15", n.text)))?;
            r.insert("pstate".into(), Value::Integer(p));
        }
        Got::Na => {
            r.insert("pstate".into(), Value::String("N/A".into()));
        }
        Got::Absent => {}
    }
    match fan {
        Some(Val::Num(v)) => {
            r.insert("fan_percent".into(), Value::Integer(v.round() as i64));
        }
        Some(_) => {
            r.insert("fan_percent".into(), Value::String("N/A".into()));
        }
        None => {}
    }
    let mut util = Table::new();
    for (key, path) in [
        ("gpu", "utilization/gpu_util"),
        ("memory", "utilization/memory_util"),
        ("encoder", "utilization/encoder_util"),
        ("decoder", "utilization/decoder_util"),
        ("jpeg", "utilization/jpeg_util"),
        ("ofa", "utilization/ofa_util"),
    ] {
        let v = g.number(&[path])?;
        if let Some(Val::Num(x)) = v {
            if x.fract() != 0.0 {
                let line = g.first(&[path]).map_or(node.line, |n| n.line);
                g.note(line, format!("{key} utilization {x} % is not a whole percent, as NVML reports it: rounded to {}", x.round()));
            }
            if !(0.0..=100.0).contains(&x) {
                let n = g.first(&[path]).expect("read above");
                return Err(fail(n, format!("utilization {x} % is outside 0..=100")));
            }
        }
        set(&mut util, key, v.map(Val::toml_int));
    }
    if !util.is_empty() {
        r.insert("utilization".into(), Value::Table(util));
    }
    pin_int(&mut r, "pcie_tx_kbps", g.number(&["pci/tx_util"])?);
    pin_int(&mut r, "pcie_rx_kbps", g.number(&["pci/rx_util"])?);
    if let Some(v) = cur_gen {
        pin_int(&mut r, "pcie_generation", Some(v));
    }
    if let Some(Val::Num(w)) = cur_width {
        r.insert("pcie_width".into(), Value::Integer(w as i64));
    }
    let used = g.number(&["fb_memory_usage/used"])?.and_then(Val::num);
    if let Some(u) = used {
        let room = (total - reserved).max(0.0);
        r.insert("memory_used_mib".into(), Value::Integer(u.min(room) as i64));
        // NVML's free is not always total - reserved - used to the MiB.
        if let Some(Val::Num(f)) = g.number(&["fb_memory_usage/free"])? {
            if f <= total {
                r.insert("memory_free_mib".into(), Value::Integer(f as i64));
            }
        }
    }
    if let Some(Val::Num(b)) = g.number(&["bar1_memory_usage/used"])? {
        let cap = bar1.and_then(Val::num).unwrap_or(b);
        r.insert("bar1_used_mib".into(), Value::Integer(b.min(cap) as i64));
    }
    // MIG.
    let base_file = base.as_ref().map(|(_, f)| f);
    if mig_on {
        match mig_layout(&mut g, base_file, total)? {
            Some((profiles, list)) => {
                if let Some(p) = profiles {
                    let mut mig = Table::new();
                    mig.insert("profile".into(), p);
                    board.insert("mig".into(), Value::Table(mig));
                }
                gpu.insert("mig".into(), list);
            }
            None => {
                gpu.insert("mig".into(), Value::Array(Vec::new()));
            }
        }
    }
    // A MIG mode printed (Enabled or Disabled) means the board answers
    // it, whether or not the simulator knows its profile table.
    let mig_printed = matches!(g.flag(&["mig_mode/current_mig"])?, Some(Val::Bool(_)));
    let base_has_mig = base_file
        .and_then(|b| b.mig.as_ref())
        .and_then(|m| m.profile.as_ref())
        .is_some_and(|p| !p.is_empty());
    if mig_printed && !base_has_mig && !board.contains_key("mig") {
        let mut mig = Table::new();
        mig.insert("supported".into(), Value::Boolean(true));
        board.insert("mig".into(), Value::Table(mig));
    }
    if let Some(Val::Bool(p)) = g.flag(&["mig_mode/pending_mig"])? {
        if mig_printed || base_has_mig {
            gpu.insert("mig_pending".into(), Value::Boolean(p));
        }
    }
    // Processes.
    let mut procs = Vec::new();
    if node
        .child("processes")
        .is_some_and(|p| p.children.is_empty() && p.text.trim() == "N/A")
    {
        // No process list from this driver (GT 730 on R440).
        not_supported(
            &mut errors,
            &[
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetGraphicsRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses_v2",
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                "nvmlDeviceGetRunningProcessDetailList",
            ],
        );
    }
    if let Some(list) = node.child("processes") {
        for p in list.children_named("process_info") {
            let Some(pid) = p.child("pid").and_then(|n| number(&n.text)) else {
                continue;
            };
            let mut e = Table::new();
            e.insert("pid".into(), Value::Integer(pid as i64));
            let name = p.child("process_name").map_or("", |n| n.text.trim());
            e.insert(
                "name".into(),
                Value::String(if name.is_empty() {
                    "?".into()
                } else {
                    name.into()
                }),
            );
            match p.child("used_memory") {
                Some(m) if !is_na(&m.text) => {
                    let v = number(&m.text)
                        .ok_or_else(|| fail(m, format!("`{}` is not a memory size", m.text)))?;
                    e.insert("memory_mib".into(), Value::Integer(v as i64));
                }
                _ => {
                    e.insert("memory_mib".into(), Value::String("N/A".into()));
                }
            }
            let kind = match p.child("type").map(|t| t.text.trim()) {
                Some("G") => "graphics",
                Some("C+G") => "compute+graphics",
                _ => "compute",
            };
            e.insert("kind".into(), Value::String(kind.into()));
            if mig_on {
                let gi = p.child("gpu_instance_id").and_then(|n| number(&n.text));
                let ci = p.child("compute_instance_id").and_then(|n| number(&n.text));
                let Some(gi) = gi else {
                    g.note(
                        p.line,
                        format!("process {pid} on a MIG GPU names no GPU instance: left out"),
                    );
                    continue;
                };
                e.insert("gpu_instance".into(), Value::Integer(gi as i64));
                e.insert(
                    "compute_instance".into(),
                    Value::Integer(ci.unwrap_or(0.0) as i64),
                );
            }
            procs.push(Value::Table(e));
        }
    }
    if !procs.is_empty() {
        gpu.insert("processes".into(), Value::Array(procs));
    }
    // Fabric (NVSwitch systems).
    let state = g.text(&["fabric/state"]);
    if let Some(st) = state {
        let s = match st.trim() {
            "Not Started" | "Not_Started" => "not-started",
            "In Progress" | "In_Progress" => "in-progress",
            "Completed" => "completed",
            t => {
                let n = g.first(&["fabric/state"]).expect("read above");
                return Err(fail(n, format!("unknown fabric state `{t}`")));
            }
        };
        let nvlink = sub(&mut board, "nvlink");
        nvlink.insert("fabric".into(), Value::Boolean(true));
        let mut f = Table::new();
        f.insert("state".into(), Value::String(s.into()));
        if let Some(status) = g.text(&["fabric/status"]) {
            f.insert(
                "status".into(),
                Value::String(if status.trim() == "Success" {
                    "success".into()
                } else {
                    "failure".into()
                }),
            );
        }
        if let Some(Val::Num(c)) = g.count(&["fabric/cliqueId"])? {
            f.insert("clique_id".into(), Value::Integer(c as i64));
        }
        if let Some(u) = g.text(&["fabric/clusterUuid"]) {
            f.insert("cluster_uuid".into(), Value::String(u.trim().into()));
        }
        let mut health = Table::new();
        if let Some(s) = g.text(&["fabric/health/summary"]) {
            health.insert(
                "summary".into(),
                Value::String(
                    match s.trim() {
                        "Healthy" => "healthy",
                        "Unhealthy" => "unhealthy",
                        "Limited Capacity" => "limited-capacity",
                        _ => "N/A",
                    }
                    .into(),
                ),
            );
        }
        if let Some(b) = g.text(&["fabric/health/bandwidth"]) {
            health.insert(
                "degraded_bandwidth".into(),
                Value::Boolean(b.trim() != "Full"),
            );
        }
        for (key, path) in [
            ("route_recovery", "fabric/health/route_recovery_in_progress"),
            ("route_unhealthy", "fabric/health/route_unhealthy"),
            (
                "access_timeout_recovery",
                "fabric/health/access_timeout_recovery",
            ),
        ] {
            if let Some(Val::Bool(b)) = g.flag(&[path])? {
                health.insert(key.into(), Value::Boolean(b));
            }
        }
        match g
            .first(&["fabric/health/incorrect_configuration"])
            .map(|n| n.text.trim())
        {
            Some("None") => {
                health.insert(
                    "incorrect_configuration".into(),
                    Value::String("none".into()),
                );
            }
            Some(t) if !is_na(t) => {
                health.insert("incorrect_configuration".into(), Value::String(slug(t)));
            }
            _ => {}
        }
        if !health.is_empty() {
            f.insert("health".into(), Value::Table(health));
        }
        gpu.insert("fabric".into(), Value::Table(f));
    }
    if !errors.is_empty() {
        gpu.insert("errors".into(), Value::Table(errors));
    }
    if !r.is_empty() {
        gpu.insert("readings".into(), Value::Table(r));
    }
    if !counters.is_empty() {
        gpu.insert("counters".into(), Value::Table(counters));
    }
    Ok(Read {
        gpu,
        board,
        base: base.map(|(k, _)| k),
    })
}

fn arch_at_least(arch: &str, than: &str) -> bool {
    let pos = |a: &str| ARCHITECTURES.iter().position(|x| *x == a);
    matches!((pos(arch), pos(than)), (Some(a), Some(b)) if a >= b)
}

/// The scenario that replays `root` (an `nvidia_smi_log`), the notes the
/// import makes, and how many GPUs it holds.
pub fn to_scenario(
    root: &Node,
    name: &str,
    format: Format,
) -> Result<(String, Vec<String>, usize), ParseError> {
    let mut notes = Vec::new();
    let gpus: Vec<&Node> = root.children_named("gpu").collect();
    if gpus.is_empty() {
        return Err(fail(root, "the capture has no <gpu>"));
    }
    let attached = root
        .child("attached_gpus")
        .and_then(|n| number(&n.text))
        .map(|v| v as usize);
    if let Some(a) = attached {
        if a != gpus.len() {
            notes.push(format!(
                "line {}: attached_gpus says {a}, the capture holds {} <gpu>: the fleet has the {} it holds (an excerpt?)",
                root.child("attached_gpus").map_or(root.line, |n| n.line),
                gpus.len(),
                gpus.len()
            ));
        }
    }
    let mut doc = Table::new();
    doc.insert("name".into(), Value::String(name.into()));
    // R610 prints `610.57.04 [Deprecated; ... Use KMD Version instead]`.
    let driver = root
        .child("driver_version")
        .and_then(|n| n.text.split_whitespace().next())
        .map(str::to_string);
    let mut description = format!(
        "imported from an `nvidia-smi -q{}` capture",
        if format == Format::Xml { " -x" } else { "" }
    );
    if let Some(ts) = root
        .child("timestamp")
        .map(|n| n.text.trim())
        .filter(|t| !t.is_empty())
    {
        description.push_str(&format!(" taken {ts}"));
    }
    doc.insert("description".into(), Value::String(description));
    if let Some(d) = driver.filter(|d| !is_na(d)) {
        if crate::personality::Personality::parse(&d).is_ok() {
            doc.insert("driver".into(), Value::String(d));
        } else {
            let n = root.child("driver_version").expect("read above");
            notes.push(format!(
                "line {}: driver version `{d}` is not one the simulator can claim: it claims its default",
                n.line
            ));
        }
    }
    // nvidia-smi prints "Not Found" where NVML found no CUDA driver.
    if let Some(c) = root.child("cuda_version").filter(|c| is_na(&c.text)) {
        let mut errors = Table::new();
        for call in [
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetCudaDriverVersion_v2",
        ] {
            errors.insert(
                call.into(),
                Value::String(
                    if c.text.trim() == "Not Found" {
                        "NOT_FOUND"
                    } else {
                        "NOT_SUPPORTED"
                    }
                    .into(),
                ),
            );
        }
        doc.insert("errors".into(), Value::Table(errors));
    }
    let mut boards = Table::new();
    let mut gpu_tables = Vec::new();
    for (i, node) in gpus.iter().enumerate() {
        let mut read = read_gpu(node, i, &mut notes)?;
        if let Some(b) = read.base {
            read.board.insert("base".into(), Value::String(b.into()));
        }
        let stem = format!(
            "{}-captured",
            read.base.map_or_else(
                || slug(
                    read.board
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("gpu")
                ),
                str::to_string
            )
        );
        // One board per distinct description.
        let key = match boards
            .iter()
            .find(|(_, v)| v.as_table() == Some(&read.board))
        {
            Some((k, _)) => k.clone(),
            None => {
                let mut key = stem.clone();
                let mut n = 2;
                while boards.contains_key(&key) {
                    key = format!("{stem}-{n}");
                    n += 1;
                }
                boards.insert(key.clone(), Value::Table(read.board));
                key
            }
        };
        let mut t = Table::new();
        t.insert("model".into(), Value::String(key));
        for (k, v) in read.gpu {
            t.insert(k, v);
        }
        gpu_tables.push(Value::Table(t));
    }
    doc.insert("board".into(), Value::Table(boards));
    doc.insert("gpu".into(), Value::Array(gpu_tables));
    let body =
        toml::to_string(&doc).map_err(|e| fail(root, format!("cannot write the scenario: {e}")))?;
    let mut out = String::from("# A copy of a real host, written by `nvml-sim import` from an nvidia-smi capture\n# (nvml-sim/README.md, \"A copy of a real host\"). Edit and keep it.\n");
    for n in &notes {
        out.push_str(&format!("# note: {n}\n"));
    }
    out.push('\n');
    out.push_str(&body);
    Ok((out, notes, gpus.len()))
}
