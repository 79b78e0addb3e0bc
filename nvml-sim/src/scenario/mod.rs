//! Scenario files: the fleet a simulated driver presents and the faults it
//! plays back over time. The built-in scenarios are TOML files in
//! `scenarios/`, compiled in, so they double as examples of the format.
//! What a file may say is `crate::schema`'s (boards: `model::BoardFile`).
//! The floor by steps: `load.rs` finds a scenario (built-in, file or
//! capture), `kept.rs` keeps its parse for the `nvmlInit` that follows;
//! `build.rs` checks a file's types into a [`Scenario`]: its boards
//! (`boards.rs`), each `[[gpu]]` table (`resolve.rs`, its readings and
//! counters `readings.rs`, into what the GPU becomes, `gpu.rs`), the
//! fleet's identities (`identities.rs`) and the exports it lacks
//! (`absent.rs`); `capture.rs` builds a capture's scenario, its errors
//! placed on the capture's lines. Each step names where an error is by a
//! `Site`, which a `Place` turns into the error.

mod absent;
mod boards;
mod build;
mod capture;
mod gpu;
mod identities;
mod kept;
mod load;
mod readings;
mod resolve;
mod topology;
pub use topology::{Level, Placement, Topology, TopologyFile};
#[cfg(test)]
mod tests;

pub use build::parse;
pub use capture::{from_capture, from_import};
pub use gpu::{
    CiSpec, Counters, FabricSpec, FieldPin, GpuSpec, Identity, MigSpec, ProcSpec, Readings,
    RemapSpec, RetiredSpec, Settings, SramCounts,
};
pub use identities::IdentityGiven;
pub use kept::{load_kept, release_parse_memory, take_kept};
pub use load::{load, MAX_FILE_BYTES};

pub use crate::error::ScenarioError;
use crate::fault::Fault;

/// The files of `scenarios/`, by name (compiled in by build.rs: adding a
/// scenario is adding a file).
pub use crate::model::BUILTIN_SCENARIOS as BUILTINS;

pub const DEFAULT: &str = "dgx-h100";

/// A scenario after validation: every name resolved, every layout placed.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub gpus: Vec<GpuSpec>,
    /// Sorted by time.
    pub timeline: Vec<(f64, Fault)>,
    /// The driver version claimed (`driver.rs`); `None`: the default branch.
    pub driver: Option<String>,
    /// Whether the calling process holds the privileges NVML wants for
    /// MIG instance-scoped events and parent-handle aggregates (root,
    /// `CAP_SYS_ADMIN` or the `mig/monitor` capability device).
    pub privileged: bool,
    /// GPU indexes whose handles answer `NVML_ERROR_NO_PERMISSION` (a
    /// device node the container may not open).
    pub denied: Vec<u32>,
    /// The caller shares the host's PID namespace; `false` (a container
    /// without hostPID) makes `nvmlSystemGetProcessName` answer NOT_FOUND.
    pub host_pid_namespace: bool,
    /// What `nvmlGpmMetricsGet` answers for decoder, JPEG and OFA ids past
    /// the engines a GPU (instance) has: `false`, 0 with SUCCESS; `true`,
    /// NOT_SUPPORTED (scenario `gpm_absent_engines`). NVIDIA does not
    /// document which; the exporter must be right either way.
    pub gpm_absent_engines_unsupported: bool,
    /// What the loader changed to make the fleet consistent (identifiers
    /// given twice), for `nvml-sim check` and the library to report.
    pub warnings: Vec<ScenarioError>,
    /// System calls that answer an error instead of their value
    /// (top-level `errors`, as a capture recorded them).
    pub call_errors: Vec<(String, u32)>,
    /// Exports the captured driver lacked, beyond its branch's
    /// (`absent_functions`): removed from the symbol table too.
    pub absent_functions: Vec<String>,
    /// Where each GPU sits on the host (`topology.rs`).
    pub topology: std::sync::Arc<Topology>,
}

/// The part of a scenario something is in: what an imported capture,
/// which has no scenario text, names its line by.
#[derive(Debug, Clone, Copy)]
enum Site<'a> {
    /// The top level (or a base scenario's GPU).
    Top,
    /// A `[board.<key>]` table.
    Board(&'a str),
    /// The `[[gpu]]` table of this index.
    Gpu(usize),
}

/// Makes the error at a site and a byte offset of the file (if it has one).
type Place<'p> = dyn Fn(Site<'_>, Option<usize>, String) -> ScenarioError + 'p;

pub use crate::schema::MAX_GPUS;
