//! The identifiers of a fleet's GPUs: those its `[[gpu]]` tables give,
//! the rest derived from the scenario's name and each GPU's index, none
//! given twice.

use super::gpu::{GpuSpec, Identity};
use crate::identity::{self, PciAddr};
use crate::value::Val;
use std::collections::HashSet;

/// The identifiers a `[[gpu]]` table gives, before derivation and
/// de-duplication over the whole fleet.
#[derive(Debug, Clone, Default)]
pub struct IdentityGiven {
    pub uuid: Option<String>,
    pub serial: Option<Val<String>>,
    pub pci: Option<PciAddr>,
    pub minor: Option<Val<u32>>,
    /// Where the table is, for warnings (`None`: a base scenario's GPU).
    pub offset: Option<usize>,
    /// The index of its `[[gpu]]` table (`None`: a base scenario's GPU).
    pub table: Option<usize>,
}

/// Gives every GPU its identifiers: the scenario's, else derived from the
/// scenario name and index. An identifier given twice (masked captures
/// share one fake UUID or serial) is replaced by the derived one on the
/// later GPU, and `warn` says so.
pub(super) fn resolve_identities(
    scenario: &str,
    gpus: &mut [GpuSpec],
    given: &[IdentityGiven],
    warn: &mut dyn FnMut(&IdentityGiven, String),
) {
    let mut uuids: HashSet<String> = HashSet::new();
    let mut serials: HashSet<String> = HashSet::new();
    let mut buses: HashSet<PciAddr> = given.iter().filter_map(|g| g.pci).collect();
    let mut explicit_buses: HashSet<PciAddr> = HashSet::new();
    for (i, (spec, g)) in gpus.iter_mut().zip(given).enumerate() {
        let index = i as u32;
        let mut uuid = g
            .uuid
            .clone()
            .unwrap_or_else(|| identity::gpu_uuid(scenario, index));
        if !uuids.insert(uuid.to_ascii_lowercase()) {
            let fresh = identity::gpu_uuid(scenario, index);
            warn(
                g,
                format!("GPU {i}: uuid {uuid} repeats an earlier GPU's; GPU {i} answers {fresh} instead"),
            );
            uuid = fresh;
            uuids.insert(uuid.to_ascii_lowercase());
        }
        let serial = match &g.serial {
            Some(Val::NotSupported) => None,
            Some(Val::Is(s)) => Some(s.clone()),
            None => spec
                .model
                .has_serial
                .then(|| identity::gpu_serial(scenario, index)),
        };
        let serial = serial.map(|s| {
            if serials.insert(s.clone()) {
                return s;
            }
            let fresh = identity::gpu_serial(scenario, index);
            warn(
                g,
                format!(
                    "GPU {i}: serial {s} repeats an earlier GPU's; GPU {i} answers {fresh} instead"
                ),
            );
            serials.insert(fresh.clone());
            fresh
        });
        let pci = match g.pci {
            Some(p) if explicit_buses.insert(p) => p,
            explicit => {
                // The derived bus, or the next one no GPU of the scenario uses.
                let mut bus = identity::gpu_bus(index);
                while buses.contains(&PciAddr::on_bus(bus & 0xff)) {
                    bus += 1;
                }
                let fresh = PciAddr::on_bus(bus & 0xff);
                buses.insert(fresh);
                if let Some(p) = explicit {
                    warn(
                        g,
                        format!(
                            "GPU {i}: pci_bus_id {} repeats an earlier GPU's; GPU {i} answers {} instead",
                            p.bus_id(),
                            fresh.bus_id()
                        ),
                    );
                }
                fresh
            }
        };
        let minor = match g.minor {
            Some(Val::NotSupported) => None,
            Some(Val::Is(m)) => Some(m),
            None => Some(index),
        };
        for m in spec.mig.iter_mut().flatten() {
            for u in m.uuid.iter_mut().chain(
                m.compute_instances
                    .iter_mut()
                    .filter_map(|c| c.uuid.as_mut()),
            ) {
                if !uuids.insert(u.to_ascii_lowercase()) {
                    warn(
                        g,
                        format!("GPU {i}: MIG uuid {u} repeats another; GPU {i}'s MIG device gets a derived one"),
                    );
                    u.clear();
                }
            }
            if m.uuid.as_ref().is_some_and(String::is_empty) {
                m.uuid = None;
            }
            for c in &mut m.compute_instances {
                if c.uuid.as_ref().is_some_and(String::is_empty) {
                    c.uuid = None;
                }
            }
        }
        spec.identity = Identity {
            uuid,
            serial,
            pci,
            minor,
        };
    }
}
