//! Reads the family table of `docs/metrics.md`, so tests can hold the
//! documentation and the exporter's output to each other.
//!
//! A family row is a table row whose first cell is a metric name in
//! backticks: `| \`name\` | type | unit | labels | collector | source | nvml |`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocFamily {
    /// As it appears on samples (counters with `_total`).
    pub name: String,
    /// `gauge` or `counter`.
    pub kind: String,
    /// Empty when the family has no unit.
    pub unit: String,
    pub labels: String,
    /// `--collector.<name>` that switches it, `-` when always on.
    pub collector: String,
    /// File name in `src/collectors/`.
    pub source: String,
    pub nvml: String,
}

impl DocFamily {
    /// Every label the family's series may carry: `gpu` and `uuid` unless
    /// the row says "no gpu/uuid", plus each backticked name in the Labels
    /// column (the doc never backticks label values).
    pub fn label_names(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        if !self.labels.contains("no gpu/uuid") {
            out.insert("gpu".to_string());
            if !self.labels.contains("no uuid") {
                out.insert("uuid".to_string());
            }
        }
        for (i, part) in self.labels.split('`').enumerate() {
            if i % 2 == 1 {
                out.insert(part.to_string());
            }
        }
        out
    }
}

pub fn metrics_doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md")
}

/// Every documented family, in document order.
pub fn documented_families() -> Vec<DocFamily> {
    let path = metrics_doc_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_families(&text)
}

pub fn parse_families(markdown: &str) -> Vec<DocFamily> {
    markdown
        .lines()
        .filter_map(|line| {
            let row = line.trim().strip_prefix('|')?.strip_suffix('|')?;
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let name = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            if name.contains('`') || cells.len() < 7 {
                return None;
            }
            let bare = |s: &str| s.trim_matches('`').to_string();
            Some(DocFamily {
                name: name.to_string(),
                kind: cells[1].to_string(),
                unit: cells[2].to_string(),
                labels: cells[3].to_string(),
                collector: cells[4].to_string(),
                source: bare(cells[5]),
                nvml: cells[6].to_string(),
            })
        })
        .collect()
}

pub fn documented_names() -> std::collections::BTreeSet<String> {
    documented_families().into_iter().map(|f| f.name).collect()
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn reads_rows_with_a_backticked_name_only() {
        let md = "| Metric | Type |\n|---|---|\n\
                  | `a_total` | counter | | `x` | ecc | `ecc.rs` | `nvmlX` |\n\
                  | not a row | gauge | | | | | |\n";
        let rows = parse_families(md);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "a_total");
        assert_eq!(rows[0].kind, "counter");
        assert_eq!(rows[0].unit, "");
        assert_eq!(rows[0].source, "ecc.rs");
        let labels: Vec<String> = rows[0].label_names().into_iter().collect();
        assert_eq!(labels, ["gpu", "uuid", "x"]);
    }
}
