//! nvml-exporter: a Prometheus exporter for NVIDIA GPUs and MIG instances.
//!
//! The pipeline's modules, in the order data flows through them:
//! 1. [`nvml`]: samples every GPU through NVML on background threads (the
//!    only module that imports `nvml_wrapper`) and publishes a
//! 2. [`snapshot::Snapshot`]: plain data, everything known about every GPU
//!    at one moment; the boundary between sampling and encoding. Handed
//!    over by value to
//! 3. [`join`]: the join step, which completes it in place: pod
//!    attribution ([`kubernetes`]), workload attribution ([`workloads`]),
//!    the process's own statistics, the verdicts ([`verdict`]); then
//! 4. [`render`]: once per poll, walks every enabled collector
//!    ([`collectors`], one file per family, each a [`metric::Collector`] of
//!    [`metric::Metric`]s) over the snapshot into
//! 5. [`exposition`]: the text 0.0.4 and OpenMetrics writers and gzip,
//!    giving an [`exposition::Exposition`] of prepared bytes that
//! 6. [`http`] serves to every scrape without touching NVML.
//!
//! Around it: [`family::Family`] (what `--[no-]collector.<name>` switches),
//! [`xid_catalog`] (NVIDIA's XID catalog, the one table behind the XID
//! rules and runbook), [`kmsg`] (the kernel log, the second XID source),
//! [`xid`] (an XID event's class and each GPU's ledger of them),
//! [`verdict`] (what to do with each GPU now), [`state`] (what is kept
//! across restarts), [`fsread`] (file reads with a deadline), [`selfstat`]
//! (the process's own `process_*` statistics), [`footprint`] (its resident
//! memory), [`cli`] (flags), [`web_config`] (TLS and auth), [`logging`],
//! and [`app`], which wires the parts together.

pub mod app;
pub mod cli;
pub mod collectors;
pub mod compat;
pub mod exposition;
pub mod family;
pub mod footprint;
pub mod fsread;
pub mod http;
pub mod join;
pub mod kmsg;
pub mod kubernetes;
pub mod logging;
pub mod metric;
pub mod nvml;
pub mod nvsentinel;
pub mod reload;
pub mod render;
pub mod schedule;
pub mod selection;
pub mod selection_check;
pub mod selfstat;
pub mod snapshot;
pub mod state;
pub mod unix_grpc;
pub mod verdict;
pub mod web_config;
pub mod workloads;
pub mod xid;
pub mod xid_catalog;
