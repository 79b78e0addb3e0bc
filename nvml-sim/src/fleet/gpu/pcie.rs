//! A GPU's PCIe link state, following the model's PCIe section: what
//! PCIe faults move.

use crate::scenario::GpuSpec;

/// The replay counter and the link's current width.
#[derive(Debug, Clone)]
pub struct PcieState {
    /// `None`: the scenario says "N/A".
    pub replay: Option<u32>,
    /// Current PCIe link width in lanes (the model's maximum until a fault
    /// retrains the link narrower).
    pub width: u32,
}

impl PcieState {
    /// The scenario's replay count and width, or a few replays by GPU index
    /// (as a fleet shows) and the board's full width.
    pub fn from_spec(index: u32, spec: &GpuSpec) -> PcieState {
        PcieState {
            replay: match spec.counters.pcie_replays {
                None => Some(index % 3),
                Some(v) => v.get(),
            },
            width: spec.readings.pcie_width.unwrap_or(spec.model.pcie.width),
        }
    }
}
