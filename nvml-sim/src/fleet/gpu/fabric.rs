//! A GPU's NVLink fabric state, following the model's NVLink section's
//! fabric: the registration, its health and the partition, as NVML's
//! `nvmlDeviceGetGpuFabricInfoV` answers them.

use crate::model::FabricHealth;
use crate::scenario::GpuSpec;

/// The fabric registration as the scenario and fabric faults leave it.
#[derive(Debug, Clone)]
pub struct FabricState {
    /// `NVML_GPU_FABRIC_STATE_*` (3 completed on NVSwitch boards, 0 elsewhere)
    /// and the registration's outcome (an nvmlReturn_t).
    pub state: u8,
    pub status: u32,
    /// The fabric's health rows (the board's, the scenario's, then faults').
    pub health: FabricHealth,
    /// The NVLink partition: clique id and cluster UUID (all zero on a
    /// single-node NVSwitch system).
    pub clique: u32,
    pub cluster: [u8; 16],
}

impl FabricState {
    /// The scenario's fabric, its state completed on NVSwitch boards and
    /// not started elsewhere where the scenario does not say.
    pub fn from_spec(spec: &GpuSpec) -> FabricState {
        FabricState {
            state: match spec.fabric.state {
                Some(s) => s,
                None if spec.model.nvswitch_fabric() => 3,
                None => 0,
            },
            status: spec.fabric.status,
            health: spec.fabric.health,
            clique: spec.fabric.clique_id,
            cluster: spec.fabric.cluster_uuid,
        }
    }
}
