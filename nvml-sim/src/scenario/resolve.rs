//! From a scenario file's `[[gpu]]` table (`crate::schema`) to the GPU it
//! describes (`gpu.rs`): every value checked against its board, MIG
//! instances placed, processes bound to their instances. Errors carry the
//! byte offset of the key where the file gives one.

use super::gpu::{CiSpec, FabricSpec, FieldPin, GpuSpec, Identity, MigSpec, ProcSpec, Settings};
use crate::fault::ProcUse;
use crate::identity::PciAddr;
use crate::model::{self, Model, Placement};
use crate::schema::{CallErrors, FieldAnswer, GpuFile, MigEntry, MigInstance};
use crate::value::Invalid;
use crate::value::Val;
use std::sync::Arc;

/// An error at a byte offset of the file (`None`: the `[[gpu]]` table).
pub(super) type Fail = crate::value::At;

/// `errors = { nvmlFunction = "NOT_SUPPORTED", ... }`: what calls answer
/// instead of their value (a capture's record of a real driver), checked
/// when the file was read.
pub(super) fn call_errors(errors: &CallErrors) -> Vec<(String, u32)> {
    errors
        .iter()
        .map(|(f, e)| (f.to_string(), e.code()))
        .collect()
}

/// Places the MIG entries of a GPU: fixed placements and GPU instance
/// ids where given, the driver's choice elsewhere.
fn mig_specs(model: &Model, raw: &[MigEntry]) -> Result<Vec<MigSpec>, Invalid> {
    let entries: Vec<(String, Option<&MigInstance>)> = raw
        .iter()
        .map(|m| match m {
            MigEntry::Name(n) => (n.clone(), None),
            MigEntry::Full(e) => (e.profile.clone(), Some(e)),
        })
        .collect();
    let mut wanted = Vec::new();
    for (name, e) in &entries {
        let mut start = e.and_then(|e| e.placement);
        if let Some(id) = e.and_then(|e| e.gpu_instance_id) {
            // A capture gives the id, not the placement: the placement
            // whose id it is.
            let p = model
                .profile_by_name(name)
                .ok_or_else(|| format!("unknown MIG profile `{name}` for {}", model.name))?;
            let at = p
                .starts
                .iter()
                .copied()
                .find(|&s| p.instance_id_for(s) == id)
                .ok_or_else(|| {
                    format!(
                        "no placement of `{name}` on {} has GPU instance id {id} (ids: {:?})",
                        model.name,
                        p.starts
                            .iter()
                            .map(|&s| p.instance_id_for(s))
                            .collect::<Vec<_>>()
                    )
                })?;
            if start.is_some_and(|s| s != at) {
                return Err(Invalid::from(format!(
                    "`{name}`: GPU instance id {id} is the one at memory slice {at}, not at {}",
                    start.unwrap_or(0)
                )));
            }
            start = Some(at);
        }
        wanted.push(Placement {
            profile: name,
            start,
        });
    }
    let placed = model::place(model, &wanted)?;
    let mut out = Vec::new();
    for ((name, e), (profile, start)) in entries.iter().zip(placed) {
        if let Some(load) = e.and_then(|e| e.load) {
            if !(0.0..=100.0).contains(&load) {
                return Err(Invalid::from(format!(
                    "MIG instance load {load} is outside 0..=100"
                )));
            }
        }
        let compute_instances = match e.and_then(|e| e.compute_instances.as_ref()) {
            None => vec![CiSpec {
                id: 0,
                slices: profile.slices,
                uuid: None,
            }],
            Some(list) => {
                let mut cis = Vec::new();
                for ci in list {
                    let slices = ci.slices.unwrap_or(profile.slices);
                    if slices == 0 || ci.id > 7 || cis.iter().any(|c: &CiSpec| c.id == ci.id) {
                        return Err(Invalid::from(format!(
                            "`{name}`: compute instance {} (ids are 0..=7, each once; at least one slice)",
                            ci.id
                        )));
                    }
                    cis.push(CiSpec {
                        id: ci.id,
                        slices,
                        uuid: ci.uuid.clone(),
                    });
                }
                let used: u32 = cis.iter().map(|c| c.slices).sum();
                if cis.is_empty() || used > profile.slices {
                    return Err(Invalid::from(format!(
                        "`{name}`: its compute instances take {used} slices of its {}",
                        profile.slices
                    )));
                }
                cis
            }
        };
        if let Some(m) = e.and_then(|e| e.memory_used_mib) {
            if m > profile.memory_mib {
                return Err(Invalid::from(format!(
                    "`{name}`: memory_used_mib {m} is more than its {} MiB",
                    profile.memory_mib
                )));
            }
        }
        out.push(MigSpec {
            profile: name.clone(),
            load: e.and_then(|e| e.load).unwrap_or(0.0),
            start,
            uuid: e.and_then(|e| e.uuid.clone()),
            memory_used_mib: e.and_then(|e| e.memory_used_mib),
            compute_instances,
        });
    }
    Ok(out)
}

impl GpuFile {
    /// The spec of the GPUs of this table, on board `model`; their
    /// identities are the caller's to derive and de-duplicate. Each part
    /// is checked in the order its errors are named: MIG instances,
    /// processes, settings, call errors and field pins, then readings,
    /// counters and fabric by their own resolvers.
    pub(super) fn resolve(mut self, model: &Arc<Model>) -> Result<GpuSpec, Fail> {
        let readings_at = self.readings.as_ref().map(|r| r.span().start);
        let readings = self.readings.take().map(toml::Spanned::into_inner);
        let counters = self.counters.take();
        let at_table = |m: String| Fail::new(None, m);
        let load = self.load.unwrap_or(0.0);
        if !(0.0..=100.0).contains(&load) {
            return Err(at_table(format!("load {load} is outside 0..=100 percent")));
        }
        let mig = match &self.mig {
            None => None,
            Some(list) => Some(
                mig_specs(model, list.get_ref())
                    .map_err(|m| Fail::new(Some(list.span().start), m))?,
            ),
        };
        let processes = self.processes(model, mig.as_deref())?;
        if self.mig_pending.is_some() && !model.mig_capable() {
            return Err(at_table(format!(
                "{} does not support MIG (mig_pending)",
                model.name
            )));
        }
        let settings = self.settings(model)?;
        let call_errors = self
            .errors
            .as_ref()
            .map_or_else(Vec::new, |e| call_errors(e.get_ref()));
        let field_pins = self.fields.as_ref().map_or_else(Vec::new, |f| {
            f.get_ref()
                .iter()
                .map(|p| FieldPin {
                    id: p.id,
                    scope: p.scope,
                    answer: match p.answer {
                        FieldAnswer::Value(v) => Ok(v),
                        FieldAnswer::Error(e) => Err(e.code()),
                    },
                })
                .collect()
        });
        let readings = readings
            .map(|r| r.resolve(model))
            .transpose()
            .map_err(|m| Fail::new(readings_at, m))?
            .unwrap_or_default();
        let counters = counters
            .map(|c| c.resolve(model))
            .transpose()
            .map_err(|m| Fail::new(None, m))?
            .unwrap_or_default();
        let fabric = match &self.fabric {
            Some(f) => f
                .get_ref()
                .resolve(model)
                .map_err(|m| Fail::new(Some(f.span().start), m))?,
            None => FabricSpec {
                health: model.nvlink.fabric_health,
                ..FabricSpec::default()
            },
        };
        if let Some(s) = self
            .platform
            .as_ref()
            .and_then(|p| p.chassis_serial.as_ref())
        {
            if s.len() > 16 {
                return Err(at_table(format!(
                    "platform.chassis_serial `{s}` is longer than the 16 bytes of nvmlPlatformInfo_t"
                )));
            }
        }
        Ok(GpuSpec {
            model: model.clone(),
            load,
            mig,
            processes,
            mig_pending: self.mig_pending,
            mps: self.mps.unwrap_or(false),
            identity: Identity {
                uuid: String::new(),
                serial: None,
                pci: PciAddr::on_bus(0),
                minor: None,
            },
            identity_given: super::IdentityGiven::default(),
            settings,
            readings,
            counters,
            call_errors,
            fabric,
            module_id: self.module_id,
            platform: self.platform.clone(),
            field_pins,
        })
    }

    /// The `[[gpu.processes]]`, each bound to its MIG instance and compute
    /// instance on a MIG-enabled GPU.
    fn processes(&self, model: &Model, mig: Option<&[MigSpec]>) -> Result<Vec<ProcSpec>, Fail> {
        let at_table = |m: String| Fail::new(None, m);
        let mut processes = Vec::new();
        for p in self.processes.iter().flatten() {
            let n = mig.map_or(0, <[MigSpec]>::len);
            let mig_instance = match (p.mig_instance, p.gpu_instance) {
                (Some(_), Some(_)) => {
                    return Err(at_table(format!(
                        "process `{}`: give mig_instance or gpu_instance, not both",
                        p.name
                    )))
                }
                (Some(i), None) if i >= n => {
                    return Err(at_table(format!(
                        "process `{}` names mig_instance {i}, but this GPU has {n} MIG instances",
                        p.name
                    )))
                }
                (Some(i), None) => Some(i),
                (None, Some(gi)) => {
                    let specs = mig.unwrap_or_default();
                    let found = specs.iter().position(|m| {
                        model
                            .profile_by_name(&m.profile)
                            .is_some_and(|p| p.instance_id_for(m.start) == gi)
                    });
                    Some(found.ok_or_else(|| {
                        at_table(format!(
                            "process `{}` names gpu_instance {gi}, which this GPU does not have",
                            p.name
                        ))
                    })?)
                }
                (None, None) => None,
            };
            if mig_instance.is_none() && mig.is_some() {
                return Err(at_table(format!(
                    "process `{}` runs on a MIG-enabled GPU and must name its mig_instance (or gpu_instance)",
                    p.name
                )));
            }
            let compute_instance = p.compute_instance.unwrap_or(0);
            if let Some(i) = mig_instance {
                let spec = &mig.expect("checked above")[i];
                if !spec
                    .compute_instances
                    .iter()
                    .any(|c| c.id == compute_instance)
                {
                    return Err(at_table(format!(
                        "process `{}` names compute_instance {compute_instance}, which its GPU instance does not have",
                        p.name
                    )));
                }
            } else if p.compute_instance.is_some() {
                return Err(at_table(format!(
                    "process `{}`: compute_instance on a GPU without MIG",
                    p.name
                )));
            }
            let usage = ProcUse::declared(
                p.sm_percent,
                p.memory_percent,
                p.encoder_percent,
                p.decoder_percent,
            )
            .map_err(|m| at_table(format!("process `{}`: {m}", p.name)))?;
            processes.push(ProcSpec {
                pid: p.pid,
                name: p.name.clone(),
                memory_mib: p.memory_mib.get(),
                kind: p.kind,
                mig_instance,
                compute_instance,
                usage,
            });
        }
        Ok(processes)
    }

    /// What the GPU is set to: display, ECC, power limits (within the
    /// board's), modes.
    fn settings(&self, model: &Model) -> Result<Settings, Fail> {
        let at_table = |m: String| Fail::new(None, m);
        let display_active = self.display.unwrap_or(Val::Is(false));
        if display_active == Val::Is(true) && !model.display_capable {
            return Err(at_table(format!("{} has no display output", model.name)));
        }
        let ecc = match self.ecc {
            Some(Val::NotSupported) => None,
            _ if !model.ecc.supported => {
                if matches!(self.ecc, Some(Val::Is(true))) || self.ecc_pending == Some(true) {
                    return Err(at_table(format!("{} has no ECC", model.name)));
                }
                None
            }
            Some(Val::Is(current)) => Some((current, self.ecc_pending.unwrap_or(current))),
            None => Some((
                model.ecc.default,
                self.ecc_pending.unwrap_or(model.ecc.default),
            )),
        };
        let limit_mw = |w: &Option<toml::Spanned<f64>>, key: &str| -> Result<Option<u32>, Fail> {
            let Some(w) = w else { return Ok(None) };
            let mw = (w.get_ref() * 1000.0).round();
            if !(f64::from(model.power.min_mw)..=f64::from(model.power.max_mw)).contains(&mw) {
                return Err(Fail::new(
                    Some(w.span().start),
                    format!(
                        "{key} {} is outside {}'s limits {}..={} W",
                        w.get_ref(),
                        model.name,
                        f64::from(model.power.min_mw) / 1000.0,
                        f64::from(model.power.max_mw) / 1000.0
                    ),
                ));
            }
            Ok(Some(mw as u32))
        };
        let power_limit_mw = limit_mw(&self.power_limit_w, "power_limit_w")?;
        let enforced_power_limit_mw =
            limit_mw(&self.enforced_power_limit_w, "enforced_power_limit_w")?;
        let driver_model = match (self.driver_model, self.driver_model_pending) {
            (None, None) => None,
            (Some(c), p) => Some((c.nvml(), p.unwrap_or(c).nvml())),
            (None, Some(_)) => {
                return Err(at_table("driver_model_pending without driver_model".into()))
            }
        };
        Ok(Settings {
            persistence: self.persistence.unwrap_or(Val::Is(!model.display_capable)),
            display_active,
            display_mode: self.display_mode.unwrap_or(display_active),
            compute_mode: self.compute_mode.map_or(Val::Is(0), |m| match m {
                Val::NotSupported => Val::NotSupported,
                Val::Is(m) => Val::Is(m as u32),
            }),
            ecc,
            power_limit_mw,
            enforced_power_limit_mw,
            virtualization_mode: self.virtualization_mode.map_or(Val::Is(0), |m| match m {
                Val::NotSupported => Val::NotSupported,
                Val::Is(m) => Val::Is(m as u32),
            }),
            driver_model,
        })
    }
}
