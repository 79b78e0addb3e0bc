//! Free memory per MIG GPU instance, behind `--collector.mig.memory-free`.
//! A MIG instance has no reserved memory, so free is exactly total minus
//! used (`nvidia_gpu_mig_memory_total_bytes - nvidia_gpu_mig_memory_used_bytes`):
//! by default that series is left to PromQL, saving one series per
//! instance (112 on a 16 x 7 MIG node).

use super::mig;
use crate::family::Family;
use crate::metric::{Collector, Kind, Metric};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::MigMemoryFree),
    metrics: &[Metric {
        name: "nvidia_gpu_mig_memory_free_bytes",
        help: "Free memory in the MIG GPU instance.",
        kind: Kind::Gauge,
        collect: |s, o| mig::memory(s, o, |m| m.free_bytes),
    }],
};
