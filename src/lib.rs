//! nvml-exporter: a Prometheus exporter for NVIDIA GPUs and MIG instances.
//!
//! The core types, in the order data flows through them:
//! - [`snapshot::Snapshot`]: plain data, everything known about every GPU at
//!   one moment. The boundary between sampling and encoding.
//! - [`family::Family`]: the collector families that flags switch on and off.

pub mod app;
pub mod cli;
pub mod collectors;
pub mod exposition;
pub mod family;
pub mod http;
pub mod kubernetes;
pub mod logging;
pub mod metric;
pub mod nvml;
pub mod render;
pub mod snapshot;
pub mod web_config;
