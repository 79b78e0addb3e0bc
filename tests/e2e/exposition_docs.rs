//! docs/metrics.md and the encoders agree: every family a fully populated
//! snapshot produces is documented with its type and unit, and every
//! documented family is produced and registered where the doc says.

use crate::metrics_doc;
use crate::snapshots;

use std::collections::{BTreeMap, BTreeSet};

use nvml_exporter::collectors::COLLECTORS;
use nvml_exporter::family::FamilySet;
use nvml_exporter::render::{encode, RenderContext};

/// `# TYPE` and `# UNIT` per family name from the OpenMetrics output, keyed
/// by the sample name (counters with `_total`).
fn emitted() -> BTreeMap<String, (String, String)> {
    let ctx = RenderContext {
        families: FamilySet::all(),
        ..RenderContext::default()
    };
    let (_, om) = encode(&snapshots::fully_populated(), &ctx, snapshots::now());
    let om = String::from_utf8(om).unwrap();
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut units: BTreeMap<String, String> = BTreeMap::new();
    for line in om.lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("TYPE"), Some(name), Some(kind)) => {
                let sample = if kind == "counter" {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                assert!(
                    out.insert(sample, (kind.to_string(), String::new()))
                        .is_none(),
                    "{name} twice"
                );
            }
            (Some("#"), Some("UNIT"), Some(name), Some(unit)) => {
                units.insert(name.to_string(), unit.to_string());
            }
            _ => {}
        }
    }
    for (name, (kind, unit)) in &mut out {
        let family = if kind == "counter" {
            name.trim_end_matches("_total")
        } else {
            name
        };
        if let Some(u) = units.get(family) {
            *unit = u.clone();
        }
    }
    out
}

#[test]
fn every_emitted_family_is_documented_and_every_documented_one_emitted() {
    let emitted = emitted();
    let documented = metrics_doc::documented_names();
    let emitted_names: BTreeSet<String> = emitted.keys().cloned().collect();
    let undocumented: Vec<_> = emitted_names.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&emitted_names).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "emitted but not in docs/metrics.md: {undocumented:?}\nin docs/metrics.md but not emitted: {missing:?}"
    );
}

#[test]
fn documented_type_and_unit_match_the_output() {
    let emitted = emitted();
    for doc in metrics_doc::documented_families() {
        let Some((kind, unit)) = emitted.get(&doc.name) else {
            continue;
        };
        assert_eq!(&doc.kind, kind, "type of {}", doc.name);
        assert_eq!(&doc.unit, unit, "unit of {}", doc.name);
    }
}

#[test]
fn documented_collector_and_source_match_the_registry() {
    let docs: BTreeMap<String, metrics_doc::DocFamily> = metrics_doc::documented_families()
        .into_iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    let mut registered = BTreeSet::new();
    for c in COLLECTORS {
        for m in c.metrics {
            registered.insert(m.name.to_string());
            let doc = docs
                .get(m.name)
                .unwrap_or_else(|| panic!("{} is registered but not documented", m.name));
            let flag = c.family.map_or("-", |f| f.name());
            assert_eq!(doc.collector, flag, "collector of {}", m.name);
            let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/collectors")
                .join(&doc.source);
            let code =
                std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            assert!(
                code.contains(&format!("\"{}\"", m.name)),
                "{} is not defined in {}",
                m.name,
                src.display()
            );
            assert!(!doc.nvml.is_empty(), "{}: NVML column is empty", m.name);
        }
    }
    let documented: BTreeSet<String> = docs.keys().cloned().collect();
    assert_eq!(
        registered, documented,
        "registered metrics and docs/metrics.md differ"
    );
}

#[test]
fn documented_label_names_match_the_output() {
    let ctx = RenderContext {
        families: FamilySet::all(),
        ..RenderContext::default()
    };
    let (text, _) = encode(&snapshots::fully_populated(), &ctx, snapshots::now());
    let mut emitted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8(text)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        let (name, rest) = line
            .split_once('{')
            .unwrap_or((line.split(' ').next().unwrap(), ""));
        let labels = emitted.entry(name.to_string()).or_default();
        // Label names are the identifiers just before each `="`.
        for piece in rest.split("=\"").take_while(|_| !rest.is_empty()) {
            if let Some(name) = piece.rsplit([',', '{']).next() {
                if !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    labels.insert(name.to_string());
                }
            }
        }
    }
    for doc in metrics_doc::documented_families() {
        let got = emitted.get(&doc.name).cloned().unwrap_or_default();
        assert_eq!(got, doc.label_names(), "label names of {}", doc.name);
    }
}
