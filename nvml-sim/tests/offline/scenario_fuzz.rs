//! Property tests of the scenario-file parser: whatever an operator writes,
//! the simulated driver answers with an error naming the file and line, or
//! builds a fleet; it never panics (a panic inside `nvmlInit` would abort the
//! host process, e.g. the exporter or a Python client).
//!
//! Inputs are arbitrary text and, more usefully, the built-in scenario files
//! with lines dropped, duplicated or with values swapped for hostile ones.
//! Cases that once broke the parser live in `tests/scenario_corpus/` and are
//! replayed on every run.

use std::path::Path;

use nvml_sim::fleet::Sim;
use nvml_sim::scenario::{parse, ScenarioError};
use proptest::prelude::*;

/// The built-in scenario files (`scenarios/`), as the library holds them.
fn builtins() -> Vec<&'static str> {
    nvml_sim::scenario::BUILTINS
        .iter()
        .map(|(_, t)| *t)
        .collect()
}

/// Values that have broken parsers before: huge, negative, fractional,
/// empty, wrong types, unicode.
const HOSTILE: &[&str] = &[
    "-1",
    "0",
    "4294967296",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "0.5",
    "\"\"",
    "\"x\"",
    "[]",
    "{}",
    "true",
    "\"1g.999gb\"",
    "\"\u{1F4A5}\"",
    "[1, 2]",
    "\"7g.80gb,7g.80gb\"",
    "99999999999999999999",
    "\"N/A\"",
    "{ max = 4294967295 }",
    "\"ffffffff:ff:1f.7\"",
    "\"GPU-00000000-0000-0000-0000-000000000000\"",
    "[{ id = 0, slices = 0 }]",
    "{ base = \"h100-sxm5-80gb\" }",
];

/// Parses and, when it parses, builds the fleet: both must return, not panic.
fn check(text: &str) -> Result<(), ScenarioError> {
    let scenario = parse(text, "fuzz.toml", "fuzz")?;
    let sim = Sim::new(&scenario, 1.0);
    drop(sim);
    Ok(())
}

fn assert_error_is_useful(text: &str, err: &ScenarioError) {
    assert_eq!(err.source, "fuzz.toml");
    assert!(!err.message.trim().is_empty(), "empty message for:\n{text}");
    if let Some(line) = err.line {
        let lines = text.lines().count().max(1);
        assert!(
            line >= 1 && line <= lines + 1,
            "line {line} is outside the {lines}-line file:\n{text}"
        );
    }
}

fn mutate(base: &str, op: u8, at: usize, hostile: &str) -> String {
    let mut lines: Vec<String> = base.lines().map(String::from).collect();
    if lines.is_empty() {
        return base.to_string();
    }
    let i = at % lines.len();
    match op % 4 {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        _ => {
            // Replace the value of the nearest `key = value` line.
            if let Some(j) = (i..lines.len())
                .chain(0..i)
                .find(|&j| lines[j].contains(" = "))
            {
                let key = lines[j].split(" = ").next().unwrap_or("").to_string();
                lines[j] = format!("{key} = {hostile}");
            }
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        if let Err(e) = check(&text) {
            assert_error_is_useful(&text, &e);
        }
    }

    #[test]
    fn mutated_builtins_never_panic(
        which in 0..builtins().len(),
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), 0..HOSTILE.len()), 1..4),
    ) {
        let mut text = builtins()[which].to_string();
        for (op, at, h) in ops {
            text = mutate(&text, op, at, HOSTILE[h]);
        }
        if let Err(e) = check(&text) {
            assert_error_is_useful(&text, &e);
        }
    }
}

#[test]
fn builtins_parse_and_build() {
    for text in builtins() {
        check(text).unwrap_or_else(|e| panic!("a built-in scenario fails: {e}"));
    }
}

#[test]
fn corpus_cases_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenario_corpus");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus directory exists") {
        let path = entry.expect("corpus entry").path();
        let text = std::fs::read_to_string(&path).expect("corpus file is UTF-8");
        if let Err(e) = check(&text) {
            assert_error_is_useful(&text, &e);
        }
        replayed += 1;
    }
    assert!(
        replayed >= 5,
        "the corpus went missing from {}",
        dir.display()
    );
}
