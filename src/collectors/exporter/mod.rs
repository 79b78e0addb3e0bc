//! The collectors about the exporter itself rather than its GPUs: its
//! health and sampling (`health.rs`, `nvml_exporter_*`), its own driver
//! time (`driver_time.rs`), the selection file's state (`config.rs`), the
//! HTTP server's counts (`http.rs`) and the process (`process.rs`,
//! `process_*`). Collectors that report on GPUs and on how their own
//! source reads (`kubernetes.rs`, `workloads.rs`, `xid_kmsg.rs`) stay
//! beside their GPU series.

pub(super) mod config;
pub(super) mod driver_time;
pub(super) mod health;
pub(super) mod http;
pub(super) mod process;
