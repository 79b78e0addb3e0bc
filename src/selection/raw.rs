//! The selection file as written (`--config.file`, YAML, version 1),
//! before validation. Unknown keys are refused, so a misspelt key is an
//! error naming it rather than a setting silently ignored.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a selection file mapping (version, families, metrics, labels, intervals, dcgm)"
)]
pub(crate) struct RawConfig {
    /// Required: the schema version this file is written for.
    pub version: Option<u32>,
    #[serde(default)]
    pub families: Option<RawLists>,
    #[serde(default)]
    pub metrics: Option<RawLists>,
    #[serde(default)]
    pub labels: Option<RawLabels>,
    /// Family name to a Prometheus duration.
    #[serde(default)]
    pub intervals: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub dcgm: Option<RawDcgm>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with allow and/or deny lists"
)]
pub(crate) struct RawLists {
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with a drop list")]
pub(crate) struct RawLabels {
    #[serde(default)]
    pub drop: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields or counters_file"
)]
pub(crate) struct RawDcgm {
    /// DCGM field names, of either generation.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// A dcgm-exporter counters CSV, relative to this file.
    #[serde(default)]
    pub counters_file: Option<String>,
}
