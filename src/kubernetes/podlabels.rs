//! `--kubernetes.pod-labels`: which of a pod's labels are copied onto its
//! attribution and workload series, under which Prometheus names, and
//! within which bounds.
//!
//! A Kubernetes label key (`team`, `app.kubernetes.io/name`) becomes a
//! Prometheus label name by lower-casing it and writing every character
//! other than a letter, digit or `_` as `_` (`app_kubernetes_io_name`); a
//! key that starts with a digit gets a leading `_`. A name the exporter
//! already puts on those series (`namespace`, `pod`, `gpu`, ...), one that
//! Prometheus owns (`job`, `instance`, `__*`) or the chart's `cluster` is
//! refused: at start for a name or a pattern that matches it, at run time
//! (dropped, counted) for a key that only maps onto it (`Pod`,
//! `gpu-instance`). Each pod keeps at most [`MAX_LABELS_PER_POD`] labels,
//! each value at most [`MAX_VALUE_CHARS`] characters without control
//! characters, and the process learns at most [`MAX_NAMES`] distinct names
//! from patterns in its life: series cost memory, and a pattern must not
//! let a pod's author add series without end.
//!
//! Under dcgm-exporter's naming ([`Naming::Dcgm`], with `--compat.dcgm`) a
//! key keeps its case and only characters other than letters, digits and
//! `_` become `_` (`costCenter` stays `costCenter`), as dcgm-exporter's
//! `utils.SanitizeLabelName` does (NVIDIA/dcgm-exporter
//! `internal/pkg/utils/utils.go`), and the allowlist may hold regular
//! expressions that match anywhere in the key, as its
//! `--kubernetes-pod-label-allowlist-regex` does (Go's `MatchString`,
//! `internal/pkg/transformation/kubernetes.go`). The bounds stay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::snapshot::PodLabels;

/// Labels copied from one pod at most; a pod with more keeps the first by
/// Prometheus name. AMD's device-metrics-exporter allows up to 10 custom
/// labels; a label is a series dimension on every holding of the pod.
pub const MAX_LABELS_PER_POD: usize = 10;

/// Longest value kept, in characters; Kubernetes allows 63, so only a
/// value from a misbehaving source is cut.
pub const MAX_VALUE_CHARS: usize = 128;

/// Distinct Prometheus names learnt from patterns in the process's life.
/// Label names are static strings in the encoder, so each learnt name is
/// allocated once and kept: this bounds that memory.
pub const MAX_NAMES: usize = 64;

/// Label names the exporter itself writes on the pod attribution and
/// workload families, and those Prometheus or the chart add to every
/// series. A pod label may take none of them.
pub const RESERVED_LABELS: &[&str] = &[
    // Every per-GPU series.
    "gpu",
    "uuid",
    // Pod attribution.
    "gpu_instance",
    "compute_instance",
    "namespace",
    "pod",
    "container",
    // Workload attribution and measured use.
    "kind",
    "slurm_job",
    "slurm_step",
    "container_id",
    "container_name",
    "pod_uid",
    "systemd_unit",
    "cgroup",
    "uid",
    "user",
    "engine",
    "estimate",
    "reason",
    "source",
    // Prometheus' target labels, and the chart's `cluster`.
    "job",
    "instance",
    "cluster",
];

/// How a label key becomes a Prometheus label name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    /// Lower snake case: this exporter's own.
    #[default]
    Prometheus,
    /// Case kept, as dcgm-exporter prints it (`--compat.dcgm`).
    Dcgm,
}

impl Naming {
    /// `key` as a Prometheus label name under this naming.
    pub fn name(self, key: &str) -> String {
        match self {
            Naming::Prometheus => prometheus_name(key),
            Naming::Dcgm => dcgm_name(key),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllowlistError {
    #[error(
        "--kubernetes.pod-label-allowlist-regex: {entry:?} is not a regular expression: {reason}"
    )]
    Regex { entry: String, reason: String },
    #[error("--kubernetes.pod-labels: the entry {0:?} is empty or not a label key (letters, digits, '-', '_', '.', '/', and '*' as a wildcard)")]
    Invalid(String),
    #[error("--kubernetes.pod-labels: {entry:?} would be the Prometheus label {name:?}, which the exporter's own series already carry; pick another label")]
    Reserved { entry: String, name: String },
    #[error("--kubernetes.pod-labels: {entry:?} matches {name:?}, a label the exporter's own series already carry; narrow the pattern")]
    PatternReserved { entry: String, name: String },
    #[error("--kubernetes.pod-labels: {first:?} and {second:?} would both be the Prometheus label {name:?}")]
    Collision {
        first: String,
        second: String,
        name: String,
    },
    #[error("--kubernetes.pod-labels: {0} label names given, at most {MAX_LABELS_PER_POD} are copied per pod")]
    TooMany(usize),
}

/// The allowlist: exact keys and `*` patterns, checked at start.
#[derive(Debug)]
pub struct Allowlist {
    /// Exact keys and their Prometheus names.
    exact: BTreeMap<String, &'static str>,
    /// Patterns, split at their `*`s.
    patterns: Vec<Vec<String>>,
    /// Regular expressions (dcgm-exporter's allowlist), matched anywhere.
    regexes: Vec<regex::Regex>,
    naming: Naming,
    /// Names learnt from patterns so far (the exact keys' are in `exact`).
    learnt: Mutex<BTreeMap<String, &'static str>>,
}

impl PartialEq for Allowlist {
    fn eq(&self, other: &Self) -> bool {
        self.exact == other.exact
            && self.patterns == other.patterns
            && self.naming == other.naming
            && self.regexes.len() == other.regexes.len()
            && self
                .regexes
                .iter()
                .zip(&other.regexes)
                .all(|(a, b)| a.as_str() == b.as_str())
    }
}

/// What a pod's labels came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selected {
    pub labels: PodLabels,
    /// Allowed keys left out: a name already taken, or past a limit.
    pub dropped: Vec<String>,
}

impl Allowlist {
    /// Parses the flag's entries; `Err` names the first problem.
    pub fn parse(entries: &[String]) -> Result<Allowlist, AllowlistError> {
        Allowlist::parse_as(entries, &[], Naming::Prometheus)
    }

    /// Parses keys and `*` patterns, and regular expressions
    /// (`--kubernetes.pod-label-allowlist-regex`), naming labels as `naming`
    /// says. A regular expression is not checked against the reserved
    /// names at start (`.*` is the usual one): a key it matches whose name
    /// is reserved is left out and counted, as a pattern's is.
    pub fn parse_as(
        entries: &[String],
        regexes: &[String],
        naming: Naming,
    ) -> Result<Allowlist, AllowlistError> {
        let mut compiled = Vec::new();
        for entry in regexes {
            let re = regex::RegexBuilder::new(entry)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| AllowlistError::Regex {
                    entry: entry.clone(),
                    reason: e.to_string(),
                })?;
            compiled.push(re);
        }
        let mut exact = BTreeMap::new();
        let mut patterns = Vec::new();
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty()
                || !entry
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./*".contains(c))
            {
                return Err(AllowlistError::Invalid(entry.to_string()));
            }
            if entry.contains('*') {
                let parts: Vec<String> = entry.split('*').map(str::to_string).collect();
                if let Some(name) = RESERVED_LABELS.iter().find(|r| glob_matches(&parts, r)) {
                    return Err(AllowlistError::PatternReserved {
                        entry: entry.to_string(),
                        name: (*name).to_string(),
                    });
                }
                if glob_matches(&parts, "__") {
                    return Err(AllowlistError::PatternReserved {
                        entry: entry.to_string(),
                        name: "__".to_string(),
                    });
                }
                if !patterns.contains(&parts) {
                    patterns.push(parts);
                }
                continue;
            }
            let name = naming.name(entry);
            if is_reserved(&name) {
                return Err(AllowlistError::Reserved {
                    entry: entry.to_string(),
                    name,
                });
            }
            if let Some(first) = names.get(&name) {
                if first != entry {
                    return Err(AllowlistError::Collision {
                        first: first.clone(),
                        second: entry.to_string(),
                        name,
                    });
                }
                continue;
            }
            names.insert(name.clone(), entry.to_string());
            exact.insert(entry.to_string(), &*Box::leak(name.into_boxed_str()));
        }
        if exact.len() > MAX_LABELS_PER_POD {
            return Err(AllowlistError::TooMany(exact.len()));
        }
        Ok(Allowlist {
            exact,
            patterns,
            regexes: compiled,
            naming,
            learnt: Mutex::new(BTreeMap::new()),
        })
    }

    /// The Prometheus name for `key` if the allowlist takes it: `None` for a
    /// key it does not name or match, and for a matched key whose name is
    /// reserved or past [`MAX_NAMES`] (`Err` then, to be counted).
    fn name_for(&self, key: &str) -> Option<Result<&'static str, ()>> {
        if let Some(name) = self.exact.get(key) {
            return Some(Ok(name));
        }
        if !self.patterns.iter().any(|p| glob_matches(p, key))
            && !self.regexes.iter().any(|r| r.is_match(key))
        {
            return None;
        }
        let name = self.naming.name(key);
        if is_reserved(&name) {
            return Some(Err(()));
        }
        if let Some(n) = self.exact.values().find(|n| **n == name) {
            return Some(Ok(n));
        }
        let mut learnt = self.learnt.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = learnt.get(&name) {
            return Some(Ok(n));
        }
        if learnt.len() >= MAX_NAMES {
            return Some(Err(()));
        }
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        learnt.insert(name, leaked);
        Some(Ok(leaked))
    }

    /// The labels of a pod the allowlist keeps, sorted by Prometheus name,
    /// and the allowed keys it had to leave out.
    pub fn select(&self, labels: &BTreeMap<String, String>) -> Selected {
        let mut out = Selected::default();
        let mut taken: BTreeMap<&'static str, String> = BTreeMap::new();
        // Keys named outright come first: a pattern's match never takes
        // their name nor their place under the limit (a dashboard selects
        // on them; adding a pattern must not remove one).
        let mut named: BTreeSet<&'static str> = BTreeSet::new();
        for (key, value) in labels {
            if let Some(name) = self.exact.get(key) {
                taken.insert(name, clean_value(value));
                named.insert(name);
            }
        }
        // BTreeMap: keys in order, so which of two colliding keys wins does
        // not depend on the answer's order.
        for (key, value) in labels {
            if self.exact.contains_key(key) {
                continue;
            }
            match self.name_for(key) {
                None => {}
                Some(Err(())) => out.dropped.push(key.clone()),
                Some(Ok(name)) => {
                    if taken.contains_key(name) {
                        out.dropped.push(key.clone());
                    } else {
                        taken.insert(name, clean_value(value));
                    }
                }
            }
        }
        // Past the limit, the last pattern-matched names go (never more
        // named keys than the limit: `parse` refuses that).
        while taken.len() > MAX_LABELS_PER_POD {
            let Some(last) = taken.keys().rev().find(|n| !named.contains(*n)).copied() else {
                break;
            };
            taken.remove(last);
            out.dropped.push(last.to_string());
        }
        out.labels = taken.into_iter().collect();
        out
    }
}

fn is_reserved(name: &str) -> bool {
    name.starts_with("__") || RESERVED_LABELS.contains(&name)
}

/// A label key as a Prometheus label name: lower snake case, valid
/// (`[a-z_][a-z0-9_]*`).
pub fn prometheus_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// A label key as dcgm-exporter names it: every character other than an
/// ASCII letter, digit or `_` becomes `_`, case kept (its
/// `utils.SanitizeLabelName`); a leading digit gets a `_` before it, so
/// that the name is valid.
pub fn dcgm_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Whether `text` matches a pattern split at its `*`s (each `*` any run of
/// characters, `/` and `.` included).
fn glob_matches(parts: &[String], text: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return text.is_empty();
    };
    let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last.as_str())
}

/// A value without control characters, at most [`MAX_VALUE_CHARS`] long.
fn clean_value(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_VALUE_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Result<Allowlist, AllowlistError> {
        Allowlist::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_become_valid_lower_snake_case_names() {
        assert_eq!(prometheus_name("team"), "team");
        assert_eq!(
            prometheus_name("app.kubernetes.io/name"),
            "app_kubernetes_io_name"
        );
        assert_eq!(prometheus_name("Cost-Centre"), "cost_centre");
        assert_eq!(prometheus_name("9lives"), "_9lives");
        assert_eq!(prometheus_name(""), "_");
    }

    #[test]
    fn globs_match_anywhere() {
        let parts = |p: &str| p.split('*').map(str::to_string).collect::<Vec<_>>();
        assert!(glob_matches(&parts("team"), "team"));
        assert!(!glob_matches(&parts("team"), "teams"));
        assert!(glob_matches(
            &parts("app.kubernetes.io/*"),
            "app.kubernetes.io/name"
        ));
        assert!(glob_matches(&parts("*queue*"), "kueue.x-k8s.io/queue-name"));
        assert!(glob_matches(&parts("a*b*c"), "abc"));
        assert!(!glob_matches(&parts("a*b*c"), "acb"));
        assert!(
            !glob_matches(&parts("ab*ba"), "aba"),
            "no overlap of the ends"
        );
        assert!(glob_matches(&parts("*"), ""));
    }

    #[test]
    fn collisions_with_our_labels_are_refused_at_start() {
        assert_eq!(
            list(&["Pod"]).unwrap_err(),
            AllowlistError::Reserved {
                entry: "Pod".into(),
                name: "pod".into()
            }
        );
        assert!(matches!(
            list(&["gpu-instance"]),
            Err(AllowlistError::Reserved { .. })
        ));
        assert!(matches!(
            list(&["__meta"]),
            Err(AllowlistError::Reserved { .. })
        ));
        assert!(matches!(
            list(&["*"]),
            Err(AllowlistError::PatternReserved { .. })
        ));
        assert!(matches!(
            list(&["po*"]),
            Err(AllowlistError::PatternReserved { .. })
        ));
        assert_eq!(
            list(&["a.b", "a-b"]).unwrap_err(),
            AllowlistError::Collision {
                first: "a.b".into(),
                second: "a-b".into(),
                name: "a_b".into()
            }
        );
        assert!(matches!(list(&["te am"]), Err(AllowlistError::Invalid(_))));
        assert!(matches!(list(&[""]), Err(AllowlistError::Invalid(_))));
        let eleven: Vec<String> = (0..11).map(|i| format!("l{i}")).collect();
        assert_eq!(
            Allowlist::parse(&eleven).unwrap_err(),
            AllowlistError::TooMany(11)
        );
        assert!(list(&["team", "team", "app.kubernetes.io/*"]).is_ok());
    }

    #[test]
    fn only_allowed_labels_are_kept_bounded_and_clean() {
        // `P*` matches no label of ours, but the key `Pod` maps onto one.
        let allow = list(&["team", "app.kubernetes.io/*", "P*"]).unwrap();
        let got = allow.select(&labels(&[
            ("team", "vision\n"),
            ("app.kubernetes.io/name", "trainer"),
            ("secret", "x"),
            ("Pod", "x"),
            ("Priority", "high"),
        ]));
        assert_eq!(
            got.labels,
            [
                ("app_kubernetes_io_name", "trainer".to_string()),
                ("priority", "high".to_string()),
                ("team", "vision".to_string())
            ]
        );
        assert_eq!(got.dropped, ["Pod"], "dropped at run time");
        let long = "x".repeat(500);
        let got = allow.select(&labels(&[("team", &long)]));
        assert_eq!(got.labels[0].1.chars().count(), MAX_VALUE_CHARS);

        // Two keys with one name: the first in key order wins.
        let got = allow.select(&labels(&[
            ("app.kubernetes.io/a-b", "1"),
            ("app.kubernetes.io/a.b", "2"),
        ]));
        assert_eq!(got.labels, [("app_kubernetes_io_a_b", "1".to_string())]);
        assert_eq!(got.dropped, ["app.kubernetes.io/a.b"]);

        // At most MAX_LABELS_PER_POD per pod.
        let many: Vec<(String, String)> = (0..15)
            .map(|i| (format!("app.kubernetes.io/k{i:02}"), "v".to_string()))
            .collect();
        let got = allow.select(&many.into_iter().collect());
        assert_eq!(got.labels.len(), MAX_LABELS_PER_POD);
        assert_eq!(got.dropped.len(), 5);
    }

    /// Issue 41 (probe 5, D1): `team` named outright lost its place to
    /// `app_kubernetes_io_*` names, which sort first.
    #[test]
    fn a_key_named_outright_wins_over_pattern_matches() {
        let allow = list(&["team", "app.kubernetes.io/*"]).unwrap();
        let mut many: Vec<(String, String)> = (0..15)
            .map(|i| (format!("app.kubernetes.io/k{i:02}"), "v".to_string()))
            .collect();
        many.push(("team".into(), "ml".into()));
        let got = allow.select(&many.into_iter().collect());
        assert_eq!(got.labels.len(), MAX_LABELS_PER_POD);
        assert!(got.labels.contains(&("team", "ml".to_string())), "{got:?}");
        assert_eq!(got.dropped.len(), 6);
        assert!(!got.dropped.contains(&"team".to_string()));
    }

    #[test]
    fn patterns_learn_a_bounded_number_of_names() {
        let allow = list(&["x/*"]).unwrap();
        for i in 0..MAX_NAMES {
            let got = allow.select(&labels(&[(&format!("x/{i}"), "v")]));
            assert_eq!(got.labels.len(), 1);
        }
        let got = allow.select(&labels(&[("x/one-more", "v")]));
        assert!(got.labels.is_empty());
        assert_eq!(got.dropped, ["x/one-more"]);
        // A name learnt before is still served.
        assert_eq!(allow.select(&labels(&[("x/3", "v")])).labels.len(), 1);
    }

    #[test]
    fn dcgm_naming_keeps_case_and_regexes_match_anywhere_in_the_key() {
        assert_eq!(dcgm_name("costCenter"), "costCenter");
        assert_eq!(
            dcgm_name("app.kubernetes.io/Name"),
            "app_kubernetes_io_Name"
        );
        assert_eq!(dcgm_name("9lives"), "_9lives");
        let regexes = [r"app\.kubernetes\.io/.*".to_string(), "^cost".to_string()];
        let allow = Allowlist::parse_as(&["Team".to_string()], &regexes, Naming::Dcgm).unwrap();
        let got = allow.select(&labels(&[
            ("Team", "ml"),
            ("costCenter", "42"),
            ("app.kubernetes.io/Name", "nb"),
            ("not-cost", "x"),
            ("other", "y"),
        ]));
        assert_eq!(
            got.labels,
            vec![
                ("Team", "ml".to_string()),
                ("app_kubernetes_io_Name", "nb".to_string()),
                ("costCenter", "42".to_string()),
            ]
        );
        // Our own naming, for the same regular expression: lower case.
        let own = Allowlist::parse_as(&[], &regexes, Naming::Prometheus).unwrap();
        let got = own.select(&labels(&[("costCenter", "42")]));
        assert_eq!(got.labels, vec![("costcenter", "42".to_string())]);
    }

    #[test]
    fn a_regex_matching_a_reserved_name_leaves_that_key_out_and_a_bad_one_is_refused() {
        let allow = Allowlist::parse_as(&[], &[".*".to_string()], Naming::Dcgm).unwrap();
        let got = allow.select(&labels(&[("pod", "x"), ("team", "ml")]));
        assert_eq!(got.labels, vec![("team", "ml".to_string())]);
        assert_eq!(got.dropped, vec!["pod".to_string()]);
        let err = Allowlist::parse_as(&[], &["(".to_string()], Naming::Dcgm).unwrap_err();
        assert!(matches!(err, AllowlistError::Regex { .. }), "{err}");
        assert!(err.to_string().contains("\"(\""), "{err}");
    }
}
