//! Fabric (`nvmlDeviceGetGpuFabricInfoV`, NVSwitch systems): the
//! registration state and status, the NVLink partition and the health
//! rows.

use super::out::{Facts, Out};
use super::read::{fail, is_na, slug, Got, Gpu, Printed};
use super::ParseError;
use crate::model::{FabricHealthSection, HealthSummary, IncorrectConfiguration, NvlinkSection};
use crate::schema::{at, FabricFile, FabricState, FabricStatus};
use crate::value::Val;

pub fn registration(g: &Gpu, facts: &Facts, out: &mut Out) -> Result<(), ParseError> {
    let st = match g.at(&["fabric/state"]) {
        Got::Is(n) => n.text.as_str(),
        Got::Na => {
            outside_the_fabric(facts, out);
            return Ok(());
        }
        Got::Absent => return Ok(()),
    };
    let state = match st.trim() {
        "Not Started" | "Not_Started" => FabricState::NotStarted,
        "In Progress" | "In_Progress" => FabricState::InProgress,
        "Completed" => FabricState::Completed,
        t => {
            let n = g.first(&["fabric/state"]).expect("read above");
            return Err(fail(n, format!("unknown fabric state `{t}`")));
        }
    };
    out.board
        .nvlink
        .get_or_insert_with(NvlinkSection::default)
        .fabric = Some(true);
    let mut f = FabricFile {
        state: Some(state),
        status: g.text(&["fabric/status"]).map(|s| {
            if s.trim() == "Success" {
                FabricStatus::Success
            } else {
                FabricStatus::Failure
            }
        }),
        cluster_uuid: g.text(&["fabric/clusterUuid"]).map(|u| u.trim().into()),
        ..FabricFile::default()
    };
    if let Some(Printed::Num(c)) = g.count(&["fabric/cliqueId"])? {
        f.clique_id = Some(g.fits(&["fabric/cliqueId"], c)?);
    }
    let mut health = FabricHealthSection {
        summary: g.text(&["fabric/health/summary"]).map(|s| match s.trim() {
            "Healthy" => Val::Is(HealthSummary::Healthy),
            "Unhealthy" => Val::Is(HealthSummary::Unhealthy),
            "Limited Capacity" => Val::Is(HealthSummary::LimitedCapacity),
            _ => Val::NotSupported,
        }),
        degraded_bandwidth: g
            .text(&["fabric/health/bandwidth"])
            .map(|b| Val::Is(b.trim() != "Full")),
        ..FabricHealthSection::default()
    };
    for (row, path) in [
        (
            &mut health.route_recovery,
            "fabric/health/route_recovery_in_progress",
        ),
        (&mut health.route_unhealthy, "fabric/health/route_unhealthy"),
        (
            &mut health.access_timeout_recovery,
            "fabric/health/access_timeout_recovery",
        ),
    ] {
        if let Some(Printed::Bool(b)) = g.flag(&[path])? {
            *row = Some(Val::Is(b));
        }
    }
    health.incorrect_configuration = match g
        .first(&["fabric/health/incorrect_configuration"])
        .map(|n| n.text.trim())
    {
        Some("None") => Some(Val::Is(IncorrectConfiguration::None)),
        Some(t) if !is_na(t) => Some(incorrect_configuration(g, t)?),
        _ => None,
    };
    let says = health.summary.is_some()
        || health.degraded_bandwidth.is_some()
        || health.route_recovery.is_some()
        || health.route_unhealthy.is_some()
        || health.access_timeout_recovery.is_some()
        || health.incorrect_configuration.is_some();
    if says {
        f.health = Some(health);
    }
    out.gpu.fabric = Some(at(f));
    Ok(())
}

/// A misconfiguration by its printed name (`Incorrect SysGUID`).
fn incorrect_configuration(g: &Gpu, text: &str) -> Result<Val<IncorrectConfiguration>, ParseError> {
    let name = toml::Value::String(slug(text));
    name.try_into().map(Val::Is).map_err(|_| {
        let n = g
            .first(&["fabric/health/incorrect_configuration"])
            .expect("read above");
        fail(n, format!("unknown incorrect configuration `{text}`"))
    })
}

/// A board whose NVLinks go to an NVSwitch fabric (HGX, DGX, NVL72) on
/// which NVML answers no fabric state: the GPU is outside its fabric (a VM
/// given one GPU of the node), and NVML reports none of its NVLinks either.
/// The H200 passed through alone at 580.159.04 answered no link count and
/// no fabric info (tests/device/h200-580.159.04/capture.toml) where its
/// board has 18 links: the replay serves neither, rather than the board's.
fn outside_the_fabric(facts: &Facts, out: &mut Out) {
    let on_fabric = facts
        .base
        .as_ref()
        .and_then(|(key, _)| crate::model::model_by_key(key))
        .is_some_and(|m| m.nvswitch_fabric());
    if on_fabric {
        out.board.nvlink = Some(NvlinkSection {
            links: Some(0),
            fabric: Some(false),
            ..NvlinkSection::default()
        });
    }
}
