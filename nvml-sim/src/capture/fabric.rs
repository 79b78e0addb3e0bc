//! Fabric (`nvmlDeviceGetGpuFabricInfoV`, NVSwitch systems): the
//! registration's state and status, the NVLink partition, and the health
//! mask and summary.

use super::{version, GpuOut, Walker, NOT_FOUND_FN};
use crate::model::{FabricHealthSection, HealthSummary, IncorrectConfiguration, NvlinkSection};
use crate::schema::{at, FabricFile, FabricState, FabricStatus};
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::time::Instant;

/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*` less one, in
/// order (nvml.h 13.0); the later ones are not read.
const INCORRECT: [IncorrectConfiguration; 5] = [
    IncorrectConfiguration::None,
    IncorrectConfiguration::IncorrectSysguid,
    IncorrectConfiguration::IncorrectChassisSn,
    IncorrectConfiguration::NoPartition,
    IncorrectConfiguration::InsufficientNvlinks,
];

/// A cluster UUID as text (8-4-4-4-12 hex digits).
fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The health mask's rows and the summary, where the struct carries them.
fn health(mask: u32, summary: u8) -> FabricHealthSection {
    let bit = |shift: u32| match (mask >> shift) & 3 {
        1 => Some(Val::Is(true)),
        2 => Some(Val::Is(false)),
        _ => None,
    };
    let inc = (mask >> 8) & 0xf;
    let mut h = FabricHealthSection {
        degraded_bandwidth: bit(0),
        route_recovery: bit(2),
        route_unhealthy: bit(4),
        access_timeout_recovery: bit(6),
        ..FabricHealthSection::default()
    };
    h.incorrect_configuration = INCORRECT
        .get(inc.wrapping_sub(1) as usize)
        .map(|c| Val::Is(*c));
    h.summary = [
        HealthSummary::Healthy,
        HealthSummary::Unhealthy,
        HealthSummary::LimitedCapacity,
    ]
    .get(usize::from(summary).wrapping_sub(1))
    .map(|s| Val::Is(*s));
    h
}

impl Walker {
    pub(super) fn fabric(&mut self, d: nvmlDevice_t, link_count: u32, out: &mut GpuOut) {
        // SAFETY: plain C structs; zero is a valid value.
        let mut fab: nvmlGpuFabricInfo_v3_t = unsafe { std::mem::zeroed() };
        fab.version = version::<nvmlGpuFabricInfo_v3_t>(3);
        let mut ok = call!(self, nvmlDeviceGetGpuFabricInfoV(d, (&raw mut fab).cast()));
        if ok.is_err() {
            // SAFETY: as above.
            fab = unsafe { std::mem::zeroed() };
            fab.version = version::<nvmlGpuFabricInfo_v2_t>(2);
            ok = call!(self, nvmlDeviceGetGpuFabricInfoV(d, (&raw mut fab).cast()));
        }
        let nvlink = out.board.nvlink.get_or_insert_with(NvlinkSection::default);
        if ok.is_err() || fab.state == 0 {
            if link_count > 0 {
                nvlink.fabric = Some(false);
            }
            return;
        }
        nvlink.fabric = Some(true);
        let h = health(fab.healthMask, fab.healthSummary);
        let says = h != FabricHealthSection::default();
        out.gpu.fabric = Some(at(FabricFile {
            state: Some(match fab.state {
                1 => FabricState::NotStarted,
                2 => FabricState::InProgress,
                _ => FabricState::Completed,
            }),
            status: Some(if fab.status == 0 {
                FabricStatus::Success
            } else {
                FabricStatus::Failure
            }),
            clique_id: Some(fab.cliqueId),
            cluster_uuid: Some(uuid_text(&fab.clusterUuid)),
            health: says.then_some(h),
        }));
    }
}
