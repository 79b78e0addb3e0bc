//! NVLink fabric registration and health (`nvidia_gpu_fabric_*`): on
//! NVSwitch systems the fabric manager must register each GPU before CUDA
//! can use it, and on NVL72 racks a registered GPU can still have degraded
//! bandwidth, an unhealthy route or a wrong configuration. Absent elsewhere.
//!
//! Read through `nvmlDeviceGetGpuFabricInfoV` with the newest struct the
//! driver knows (v3, then v2), else the deprecated unversioned call; the
//! version that answered is kept for the GPU's later polls.

use nvml_wrapper::error::NvmlError;

use super::super::raw::{self, FabricCall, RawFabric, NVML_ERROR_ARGUMENT_VERSION_MISMATCH};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{Fabric, FabricHealth, FabricIssue, FabricPartition, GpuReadings};

#[derive(Default)]
pub struct State {
    /// The newest call this driver answered; `None` before the first.
    call: Option<FabricCall>,
}

impl State {
    pub fn sample(&mut self, g: &mut Gpu<'_, '_>, r: &mut GpuReadings) {
        let fam = Family::Fabric.name();
        let (nvml, h) = (g.nvml, g.handle);
        let start = self.call.unwrap_or(FabricCall::V3);
        let got = g.calls.run_unless_absent("fabric_info", fam, || {
            let mut call = start;
            loop {
                match raw::gpu_fabric_info(nvml, h, call) {
                    Err(e) if asks_an_older_call(&e) => match call.older() {
                        Some(older) => call = older,
                        None => return Err(e),
                    },
                    answer => return answer.map(|info| (info, call)),
                }
            }
        });
        if let Some((info, call)) = got {
            self.call = Some(call);
            r.fabric = Some(decode(&info));
        }
    }
}

/// The driver does not know this struct version, or lacks the function:
/// the next older call may still answer.
fn asks_an_older_call(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::UnexpectedVariant(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound
    )
}

/// The health mask's fields (`NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*` and
/// `_WIDTH_*`, NVIDIA/go-nvml gen/nvml/nvml.h at 9da9e13, lines 3553-3605;
/// degraded bandwidth since the 12.4 header, the next three since 12.8 /
/// R570, incorrect configuration since 13.0 / R580). In each, 0 is "not
/// supported". The first four say 1 for true (in progress, unhealthy,
/// degraded) and 2 for false; incorrect configuration says 1 for none and
/// 2-5 for which check failed (system GUID, chassis serial number, no
/// partition, insufficient NVLinks).
const MASK_FIELDS: [(FabricIssue, u32, u32); 5] = [
    (FabricIssue::DegradedBandwidth, 0, 0x3),
    (FabricIssue::RouteRecovery, 2, 0x3),
    (FabricIssue::RouteUnhealthy, 4, 0x3),
    (FabricIssue::AccessTimeoutRecovery, 6, 0x3),
    (FabricIssue::IncorrectConfiguration, 8, 0xf),
];

/// The conditions a health mask reports, each with whether it holds.
pub fn health_issues(mask: u32) -> Vec<(FabricIssue, bool)> {
    MASK_FIELDS
        .iter()
        .filter_map(|&(issue, shift, width)| {
            let v = (mask >> shift) & width;
            let holds = match (issue, v) {
                (_, 0) => return None,
                (FabricIssue::IncorrectConfiguration, v) => v != 1,
                (_, 1) => true,
                (_, 2) => false,
                // 3 is undefined for the two-bit fields.
                _ => return None,
            };
            Some((issue, holds))
        })
        .collect()
}

/// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*` (9da9e13:3610-3613); 0 is "not
/// supported".
pub fn health_summary(code: u8) -> Option<FabricHealth> {
    match code {
        1 => Some(FabricHealth::Healthy),
        2 => Some(FabricHealth::Unhealthy),
        3 => Some(FabricHealth::LimitedCapacity),
        _ => None,
    }
}

/// The partition of a GPU in a multi-node NVLink cluster. Single-node
/// NVSwitch systems report an all-zero cluster UUID and clique 0 (HGX H100
/// and H200 on 590.48.01, `tests/corpus`): no partition to name.
pub fn partition(clique_id: u32, cluster_uuid: [u8; 16]) -> Option<FabricPartition> {
    if cluster_uuid.iter().all(|&b| b == 0) {
        return None;
    }
    let hex: String = cluster_uuid.iter().map(|b| format!("{b:02x}")).collect();
    Some(FabricPartition {
        clique_id,
        cluster_uuid: format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        ),
    })
}

pub fn decode(info: &RawFabric) -> Fabric {
    Fabric {
        state: info.state,
        registered: info.registered,
        health_summary: info.health_summary.and_then(health_summary),
        health_issues: info.health_mask.map(health_issues).unwrap_or_default(),
        partition: partition(info.clique_id, info.cluster_uuid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_all_not_supported_mask_reports_nothing() {
        // HGX H100/H200 on 590.48.01 print every health row as N/A.
        assert!(health_issues(0).is_empty());
    }

    #[test]
    fn mask_fields_decode_at_their_shifts() {
        // Degraded bandwidth true (1), route recovery false (2 << 2),
        // route unhealthy true (1 << 4), access timeout not supported,
        // incorrect configuration "insufficient NVLinks" (5 << 8).
        let mask = 1 | (2 << 2) | (1 << 4) | (5 << 8);
        assert_eq!(
            health_issues(mask),
            vec![
                (FabricIssue::DegradedBandwidth, true),
                (FabricIssue::RouteRecovery, false),
                (FabricIssue::RouteUnhealthy, true),
                (FabricIssue::IncorrectConfiguration, true),
            ]
        );
        // A healthy R580 GPU: every field false, configuration "none".
        let healthy = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8);
        assert!(health_issues(healthy).iter().all(|&(_, holds)| !holds));
        assert_eq!(health_issues(healthy).len(), 5);
        // Each failed configuration check is an incorrect configuration.
        for reason in 2..=5 {
            assert_eq!(
                health_issues(reason << 8),
                vec![(FabricIssue::IncorrectConfiguration, true)]
            );
        }
        // Undefined two-bit value 3: not reported either way.
        assert!(health_issues(3).is_empty());
    }

    #[test]
    fn summary_codes() {
        assert_eq!(health_summary(0), None);
        assert_eq!(health_summary(1), Some(FabricHealth::Healthy));
        assert_eq!(health_summary(2), Some(FabricHealth::Unhealthy));
        assert_eq!(health_summary(3), Some(FabricHealth::LimitedCapacity));
        assert_eq!(health_summary(4), None);
    }

    #[test]
    fn partition_only_for_a_real_cluster() {
        assert_eq!(partition(0, [0; 16]), None);
        let mut uuid = [0u8; 16];
        uuid[0] = 0x5a;
        uuid[15] = 0x01;
        assert_eq!(
            partition(3, uuid),
            Some(FabricPartition {
                clique_id: 3,
                cluster_uuid: "5a000000-0000-0000-0000-000000000001".into()
            })
        );
    }

    #[test]
    fn v1_answers_carry_no_health() {
        let f = decode(&RawFabric {
            state: 3,
            registered: true,
            clique_id: 0,
            cluster_uuid: [0; 16],
            health_mask: None,
            health_summary: None,
        });
        assert_eq!(f.health_summary, None);
        assert!(f.health_issues.is_empty());
        assert_eq!(f.partition, None);
    }

    #[test]
    fn older_calls_are_tried_on_version_mismatch_or_a_missing_symbol() {
        assert!(asks_an_older_call(&NvmlError::UnexpectedVariant(25)));
        assert!(asks_an_older_call(&NvmlError::FailedToLoadSymbol(
            "x".into()
        )));
        assert!(!asks_an_older_call(&NvmlError::NotSupported));
        assert!(!asks_an_older_call(&NvmlError::UnexpectedVariant(26)));
        assert_eq!(FabricCall::V3.older(), Some(FabricCall::V2));
        assert_eq!(FabricCall::V1.older(), None);
    }
}
