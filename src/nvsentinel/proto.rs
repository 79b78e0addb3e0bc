//! NVSentinel's health event messages, as far as the exporter sends them,
//! declared by hand with prost's derive (as `kubernetes/podresources.rs`
//! does) so building needs no `protoc`. Tags, names and enum values follow
//! `proto/nvsentinel/health_event.proto`, NVIDIA/NVSentinel's
//! `data-models/protobufs/health_event.proto` (package `datamodels`); the
//! fields left out (`quarantineOverrides`, `drainOverrides`) are never
//! set, which proto3 encodes as absent. `google.protobuf.Timestamp` and
//! `Empty` are declared here too, with their well-known tags.

use std::collections::HashMap;

/// The RPC's path: `/<package>.<service>/<method>`.
pub const HEALTH_EVENT_OCCURRED_V1: &str = "/datamodels.PlatformConnector/HealthEventOccurredV1";

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthEvents {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(message, repeated, tag = "2")]
    pub events: Vec<HealthEvent>,
}

/// `ProcessingStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum ProcessingStrategy {
    Unspecified = 0,
    ExecuteRemediation = 1,
    StoreOnly = 2,
}

/// `RecommendedAction`: the values the exporter sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum RecommendedAction {
    None = 0,
    ComponentReset = 2,
    ContactSupport = 5,
    RunFielddiag = 6,
    RestartVm = 15,
    RestartBm = 24,
    RestartApp = 39,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Entity {
    #[prost(string, tag = "1")]
    pub entity_type: String,
    #[prost(string, tag = "2")]
    pub entity_value: String,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `google.protobuf.Empty`: the RPC's answer.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthEvent {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub agent: String,
    #[prost(string, tag = "3")]
    pub component_class: String,
    #[prost(string, tag = "4")]
    pub check_name: String,
    #[prost(bool, tag = "5")]
    pub is_fatal: bool,
    #[prost(bool, tag = "6")]
    pub is_healthy: bool,
    #[prost(string, tag = "7")]
    pub message: String,
    #[prost(enumeration = "RecommendedAction", tag = "8")]
    pub recommended_action: i32,
    #[prost(string, repeated, tag = "9")]
    pub error_code: Vec<String>,
    #[prost(message, repeated, tag = "10")]
    pub entities_impacted: Vec<Entity>,
    #[prost(map = "string, string", tag = "11")]
    pub metadata: HashMap<String, String>,
    #[prost(message, optional, tag = "12")]
    pub generated_timestamp: Option<Timestamp>,
    #[prost(string, tag = "13")]
    pub node_name: String,
    #[prost(enumeration = "ProcessingStrategy", tag = "16")]
    pub processing_strategy: i32,
}
