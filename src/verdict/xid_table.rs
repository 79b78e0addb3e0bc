//! The XID table: each code's resolution bucket in NVIDIA's XID catalog,
//! read from the one table the alert rules and the runbooks share, the
//! "XID severity table" of docs/runbooks.md (`tests/test_alerts.py` holds
//! the rules' regular expressions to it). Compiled in, so the verdict can
//! never disagree with the rules and the runbooks: a code added there is a
//! code the verdict knows.

use std::collections::BTreeMap;
use std::sync::LazyLock;

const RUNBOOKS: &str = include_str!("../../docs/runbooks.md");
const HEADING: &str = "## XID severity table";
/// `| XID | Meaning | Catalog action | Alert | Severity | What to do |`
const CELLS: usize = 6;

static TABLE: LazyLock<BTreeMap<u64, &'static str>> = LazyLock::new(|| parse(RUNBOOKS));

/// The catalog bucket of an XID code, where the table lists the code.
pub fn bucket(code: u64) -> Option<&'static str> {
    TABLE.get(&code).copied()
}

/// Every row: code and bucket.
pub fn rows() -> impl Iterator<Item = (u64, &'static str)> {
    TABLE.iter().map(|(c, b)| (*c, *b))
}

/// The rows of the table's section: those whose first cell is a code.
fn parse(doc: &'static str) -> BTreeMap<u64, &'static str> {
    let Some((_, section)) = doc.split_once(HEADING) else {
        return BTreeMap::new();
    };
    let section = section.split("\n## ").next().unwrap_or("");
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .trim()
                .strip_prefix('|')?
                .strip_suffix('|')?
                .split('|')
                .map(str::trim)
                .collect();
            if cells.len() != CELLS || cells[2].is_empty() {
                return None;
            }
            Some((cells[0].parse().ok()?, cells[2]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_runbook_table() {
        // The codes the issues and FACTS.md name, in the buckets the
        // catalog gives them.
        for (code, bucket_name) in [
            (13, "RESTART_APP"),
            (31, "RESTART_APP"),
            (43, "IGNORE"),
            (48, "WORKFLOW_XID_48"),
            (79, "RESTART_BM"),
            (119, "RESET_GPU"),
            (120, "RESET_GPU"),
        ] {
            assert_eq!(bucket(code), Some(bucket_name), "XID {code}");
        }
        assert!(rows().count() >= 30, "table not found or too short");
        // "any other" is not a code.
        assert_eq!(bucket(0), None);
        assert_eq!(bucket(1000), None);
    }

    #[test]
    fn only_rows_of_that_section_with_a_code_and_a_bucket_count() {
        let doc = "## Other\n| 1 | a | RESET_GPU | x | y | z |\n\
                   ## XID severity table\n| XID | Meaning | Catalog action | Alert | Severity | What |\n\
                   |---|---|---|---|---|---|\n| 8 | stopped | RESTART_APP | A | warning | w |\n\
                   | 9 | no bucket |  | A | warning | w |\n| any other | x | | U | warning | w |\n\
                   | 10 | short | RESET_GPU |\n## Next\n| 11 | a | RESET_GPU | x | y | z |\n";
        assert_eq!(parse(doc), BTreeMap::from([(8, "RESTART_APP")]));
        assert!(parse("no table here").is_empty());
    }
}
