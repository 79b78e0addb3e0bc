//! MIG (`ffi/mig.rs`): the mode, the GPU instances placed by their ids
//! with their compute instances, and the profile table they need: the base
//! board's where every instance matches one of its profiles (by GPU
//! instance id, memory and SM count, memory and engine counts taken from
//! the capture), else profiles made from what the capture shows.

use super::out::{Facts, Out};
use super::read::{dev_num, fail, number, Gpu, Printed};
use super::{Node, ParseError};
use crate::model::{BoardFile, MigSection, ProfileEntry};
use crate::schema::{at, ComputeInstance, MigEntry, MigInstance};

/// The MIG devices of one GPU instance, as the capture lists them.
struct Instance<'a> {
    gi: u32,
    devices: Vec<&'a Node>,
}

fn instances(gpu: &Node) -> Result<Vec<Instance<'_>>, ParseError> {
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

/// A compute instance's share of its GPU instance's slices, from SM counts.
fn ci_slices(ci_sms: f64, per_slice: f64, slices: u32) -> u32 {
    if per_slice <= 0.0 {
        return slices;
    }
    ((ci_sms / per_slice).round() as u32).clamp(1, slices)
}

/// The GPU instance id a placement gets: the profile's table, else the
/// A100/H100 rule.
fn rule_id(p: &ProfileEntry, s: u32) -> u32 {
    if let Some(ids) = &p.gpu_instance_ids {
        if let Some(i) = p.placements.iter().position(|&x| x == s) {
            return ids[i];
        }
    }
    crate::model::rule_instance_id(p.slices, p.memory_slices, s)
}

fn sms_of(inst: &Instance) -> f64 {
    inst.devices
        .iter()
        .filter_map(|d| dev_num(d, "device_attributes/shared/multiprocessor_count"))
        .sum()
}

/// An engine count of a MIG device.
fn engine(d: &Node, name: &str) -> Option<f64> {
    dev_num(d, &format!("device_attributes/shared/{name}"))
}

/// The profile of the base's table each instance matches (by GPU instance
/// id, memory within 3 % and SM count), if every one does.
fn match_base(profiles: &[ProfileEntry], instances: &[Instance]) -> Option<Vec<usize>> {
    let mut matched = Vec::new();
    for inst in instances {
        let mem = dev_num(inst.devices[0], "fb_memory_usage/total").unwrap_or(0.0);
        let sms = sms_of(inst);
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
        matched.push(best?);
    }
    Some(matched)
}

/// The base's profiles, each seen one with its memory and engines as the
/// capture shows them: whether that changed the table.
fn adjust(profiles: &mut [ProfileEntry], instances: &[Instance], matched: &[usize]) -> bool {
    let mut changed = false;
    for (inst, &best) in instances.iter().zip(matched) {
        let p = &mut profiles[best];
        let d = inst.devices[0];
        let before = p.clone();
        p.memory_mib = dev_num(d, "fb_memory_usage/total").unwrap_or(0.0) as u64;
        let sms = sms_of(inst);
        if inst.devices.len() == 1 && sms > 0.0 {
            p.sm_count = sms as u32;
        }
        let count = |name: &str, was: u32| engine(d, name).map_or(was, |v| v as u32);
        p.copy_engines = count("copy_engine_count", p.copy_engines);
        p.decoders = count("decoder_count", p.decoders);
        p.encoders = count("encoder_count", p.encoders);
        p.jpegs = count("jpg_count", p.jpegs);
        p.ofas = count("ofa_count", p.ofas);
        changed |= before.memory_mib != p.memory_mib
            || before.sm_count != p.sm_count
            || before.copy_engines != p.copy_engines
            || before.decoders != p.decoders
            || before.encoders != p.encoders
            || before.jpegs != p.jpegs
            || before.ofas != p.ofas;
    }
    changed
}

/// Profiles of the instances seen, each placed where its GPU instance id
/// says (ids explicit), in memory-slice order; and which each instance is.
fn made(
    instances: &[Instance],
    total_mib: f64,
) -> Result<(Vec<ProfileEntry>, Vec<usize>), ParseError> {
    let mut profiles: Vec<ProfileEntry> = Vec::new();
    let slice_mib = (total_mib / 8.0).max(1.0);
    let mut next_start = 0u32;
    for inst in instances {
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
        let name = format!("{slices}g.{}gb", (mem / 1024.0).round() as u64);
        let count = |n: &str| engine(d, n).map_or(0, |v| v as u32);
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
            None => profiles.push(ProfileEntry {
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
                    sms_of(inst) as u32
                } else {
                    0
                },
                copy_engines: count("copy_engine_count"),
                decoders: count("decoder_count"),
                encoders: count("encoder_count"),
                jpegs: count("jpg_count"),
                ofas: count("ofa_count"),
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
    let which = instances
        .iter()
        .map(|inst| {
            profiles
                .iter()
                .position(|p| {
                    p.gpu_instance_ids
                        .as_ref()
                        .is_some_and(|ids| ids.contains(&inst.gi))
                })
                .expect("made above")
        })
        .collect();
    Ok((profiles, which))
}

/// One GPU instance's entry: its profile, id, compute instances (sized by
/// their SM counts) and memory in use.
fn entry(inst: &Instance, p: &ProfileEntry) -> Result<MigEntry, ParseError> {
    let per_slice = f64::from(p.sm_count) / f64::from(p.slices.max(1));
    let mut cis = Vec::new();
    for d in &inst.devices {
        let id = dev_num(d, "compute_instance_id")
            .filter(|v| v.fract() == 0.0 && (0.0..8.0).contains(v))
            .ok_or_else(|| fail(d, "a MIG device without a compute instance id of 0..=7"))?
            as u32;
        if cis.iter().any(|c: &ComputeInstance| c.id == id) {
            return Err(fail(
                d,
                format!(
                    "compute instance {id} of GPU instance {} listed twice",
                    inst.gi
                ),
            ));
        }
        let sms = dev_num(d, "device_attributes/shared/multiprocessor_count").unwrap_or(0.0);
        let slices = if inst.devices.len() == 1 {
            p.slices
        } else {
            ci_slices(sms, per_slice, p.slices)
        };
        cis.push(ComputeInstance {
            id,
            slices: Some(slices),
            uuid: None,
        });
    }
    if cis.iter().filter_map(|c| c.slices).sum::<u32>() > p.slices {
        // More compute instances than SM counts can tell apart: one slice
        // each.
        for c in &mut cis {
            c.slices = Some(1);
        }
    }
    let whole = inst.devices.len() == 1 && cis[0].id == 0;
    Ok(MigEntry::Full(MigInstance {
        profile: p.name.clone(),
        gpu_instance_id: Some(inst.gi),
        compute_instances: (!whole).then_some(cis),
        memory_used_mib: dev_num(inst.devices[0], "fb_memory_usage/used")
            .filter(|used| (*used as u64) <= p.memory_mib)
            .map(|used| used as u64),
        ..MigInstance::default()
    }))
}

/// The MIG profile table (where the base's will not do) and the `mig`
/// list of one GPU in MIG mode: `None` where it shows no instance.
#[allow(clippy::type_complexity)]
fn instances_and_profiles(
    g: &mut Gpu,
    base: Option<&BoardFile>,
    total_mib: f64,
) -> Result<Option<(Option<Vec<ProfileEntry>>, Vec<MigEntry>)>, ParseError> {
    let instances = instances(g.node)?;
    if instances.is_empty() {
        return Ok(None);
    }
    let mut profiles: Vec<ProfileEntry> = base
        .and_then(|b| b.mig.as_ref())
        .and_then(|m| m.profile.clone())
        .unwrap_or_default();
    let (which, changed) = match match_base(&profiles, &instances) {
        Some(matched) => {
            let changed = adjust(&mut profiles, &instances, &matched);
            (matched, changed)
        }
        None => {
            g.note(
                g.node.line,
                format!(
                    "MIG instances ({}) not all in a known board's profile table: profiles made from the capture",
                    instances.iter().map(|i| i.gi.to_string()).collect::<Vec<_>>().join(", ")
                ),
            );
            let (made, which) = made(&instances, total_mib)?;
            profiles = made;
            (which, true)
        }
    };
    let list = instances
        .iter()
        .zip(&which)
        .map(|(inst, &i)| entry(inst, &profiles[i]))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some((changed.then_some(profiles), list)))
}

pub fn layout(g: &mut Gpu, facts: &Facts, total_mib: f64, out: &mut Out) -> Result<(), ParseError> {
    let mig_on = g.flag(&["mig_mode/current_mig"])? == Some(Printed::Bool(true));
    let base = facts.base.as_ref().map(|(_, f)| f);
    if mig_on {
        match instances_and_profiles(g, base, total_mib)? {
            Some((profiles, list)) => {
                if let Some(p) = profiles {
                    out.board.mig = Some(MigSection {
                        profile: Some(p),
                        ..MigSection::default()
                    });
                }
                out.gpu.mig = Some(at(list));
            }
            None => out.gpu.mig = Some(at(Vec::new())),
        }
    }
    // A MIG mode printed (Enabled or Disabled) means the board answers
    // it, whether or not the simulator knows its profile table.
    let printed = matches!(g.flag(&["mig_mode/current_mig"])?, Some(Printed::Bool(_)));
    let base_has_mig = base
        .and_then(|b| b.mig.as_ref())
        .and_then(|m| m.profile.as_ref())
        .is_some_and(|p| !p.is_empty());
    if printed && !base_has_mig && out.board.mig.is_none() {
        out.board.mig = Some(MigSection {
            supported: Some(true),
            ..MigSection::default()
        });
    }
    if let Some(Printed::Bool(p)) = g.flag(&["mig_mode/pending_mig"])? {
        if printed || base_has_mig {
            out.gpu.mig_pending = Some(p);
        }
    }
    Ok(())
}
