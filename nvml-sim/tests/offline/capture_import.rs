//! The capture importer (`nvml-sim import`, `--simulate host.xml`) on real
//! captures (tests/corpus/ at the workspace root) and on broken ones:
//!
//! - every corpus capture imports and loads as a scenario whose fleet builds;
//! - a malformed capture gets an error naming its line and element, and
//!   never a fleet of the GPUs that happened to read;
//! - property tests: arbitrary text, and real captures truncated, with lines
//!   dropped, duplicated or with values swapped for hostile ones, never
//!   panic the readers, the importer or the fleet built from the result.

use std::path::{Path, PathBuf};

use nvml_sim::fleet::Sim;
use nvml_sim::import::{self, Format};
use nvml_sim::scenario;
use proptest::prelude::*;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus")
}

fn captures() -> &'static [(String, String)] {
    static ALL: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    ALL.get_or_init(read_captures)
}

fn read_captures() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![corpus()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "LICENSES") {
                    dirs.push(p);
                }
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            if import::detect(&text).is_some() {
                out.push((p.display().to_string(), text));
            }
        }
    }
    out.sort();
    out
}

/// Imports, loads the scenario and builds the fleet: all must return.
fn replay(text: &str) -> Result<usize, String> {
    let imported = import::import(text, "fuzz").map_err(|e| e.to_string())?;
    let s = scenario::from_capture(text, "fuzz.xml", "fuzz").map_err(|e| e.to_string())?;
    assert_eq!(s.gpus.len(), imported.gpus);
    drop(Sim::new(&s, 1.0));
    Ok(imported.gpus)
}

#[test]
fn every_corpus_capture_imports_and_builds_a_fleet() {
    let all = captures();
    assert!(all.len() >= 88, "{} captures", all.len());
    let (mut xml, mut text) = (0, 0);
    for (path, body) in all {
        match import::detect(body) {
            Some(Format::Xml) => xml += 1,
            Some(Format::Text) => text += 1,
            None => unreachable!(),
        }
        replay(body).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    assert!(xml >= 40 && text >= 40, "{xml} XML, {text} text");
}

/// Importing the same capture twice gives the same scenario (no clock, no
/// randomness), and the scenario written is itself a loadable file.
#[test]
fn the_scenario_written_is_deterministic_and_loads_as_a_file() {
    for (path, body) in captures().iter().step_by(9) {
        let a = import::import(body, "host").unwrap();
        let b = import::import(body, "host").unwrap();
        assert_eq!(a.scenario, b.scenario, "{path}");
        scenario::parse(&a.scenario, "host.toml", "host").unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

#[test]
fn a_capture_of_more_gpus_than_a_node_holds_is_refused_before_they_are_read() {
    let gpu =
        "<gpu id=\"00000000:18:00.0\"><product_name>NVIDIA H100 80GB HBM3</product_name></gpu>\n";
    let text = format!(
        "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<driver_version>580.95.05</driver_version>\n{}</nvidia_smi_log>\n",
        gpu.repeat(100_000)
    );
    let e = import::import(&text, "x").unwrap_err();
    assert!(e.message.contains("more than 64 <gpu>"), "{e}");
    assert_eq!(e.line, 4 + 64, "the 65th GPU's line: {e}");
}

#[test]
fn a_malformed_capture_names_its_line_and_element() {
    let h100 = std::fs::read_to_string(corpus().join("k8s-test-infra/qx-h100.xml")).unwrap();
    // Cut inside the fourth GPU: refused whole, never three GPUs served.
    let cut = h100.match_indices("<gpu id=").nth(3).unwrap().0 + 2000;
    let e = import::import(&h100[..cut], "x").unwrap_err();
    assert!(e.message.contains("never closed"), "{e}");
    assert!(e.element.is_some(), "{e}");
    // A value that is not what its element holds.
    let bad = h100.replacen("<gpu_temp>29 C</gpu_temp>", "<gpu_temp>hot</gpu_temp>", 1);
    let line = bad
        .lines()
        .position(|l| l.contains("<gpu_temp>hot"))
        .unwrap()
        + 1;
    let e = import::import(&bad, "x").unwrap_err();
    assert_eq!(
        (e.line, e.element.as_deref()),
        (line, Some("gpu_temp")),
        "{e}"
    );
    assert!(e.to_string().contains("`hot` is not a number"), "{e}");
    // Mismatched tags.
    let bad = h100.replacen("</product_name>", "</product_nam>", 1);
    let e = import::import(&bad, "x").unwrap_err();
    assert_eq!(e.line, 9, "{e}");
    assert!(e.message.contains("closes <product_name>"), "{e}");

    let text = std::fs::read_to_string(
        corpus().join("nvidia_gpu_exporter/linux-x86_64__nvidia-h100-mig__590.48.01.txt"),
    )
    .unwrap();
    // A text capture with a GPU section cut before its memory: refused at
    // the last line it holds.
    let start = text.find("==============NVSMI LOG").unwrap();
    let cut = text[start..].find("    FB Memory Usage").unwrap() + start;
    let e = import::import(&text[..cut], "x").unwrap_err();
    assert!(e.message.contains("cut short"), "{e}");
    assert_eq!(e.line, text[..cut].trim_end().lines().count(), "{e}");
    let bad = text.replacen(
        "Performance State                                  : P0",
        "Performance State                                  : turbo",
        1,
    );
    let e = import::import(&bad, "x").unwrap_err();
    assert_eq!(e.element.as_deref(), Some("performance_state"), "{e}");
    assert_eq!(
        e.line,
        bad.lines().position(|l| l.contains(": turbo")).unwrap() + 1
    );
    // Through the library's loader: the file and the line.
    let dir = std::env::temp_dir().join(format!("nvml-sim-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("host.txt");
    std::fs::write(&f, &bad).unwrap();
    let e = scenario::load(f.to_str().unwrap()).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "{}:{}: <performance_state>",
            f.display(),
            e.line.unwrap()
        )),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Values real captures have held that look broken but are not: masked
/// identifiers, an excerpt, a reformatted element, a non-integer
/// utilization (an edited capture). They import, with notes.
#[test]
fn odd_but_real_captures_import_with_notes() {
    let read = |p: &str| std::fs::read_to_string(corpus().join(p)).unwrap();
    let excerpt = import::import(&read("telegraf/a100-sxm4-v12.xml"), "a").unwrap();
    assert!(
        excerpt
            .notes
            .iter()
            .any(|n| n.contains("attached_gpus says 4, the capture holds 1")),
        "{:?}",
        excerpt.notes
    );
    let edited = import::import(&read("submarine/nvidia-smi-sample-xml-output.xml"), "s").unwrap();
    assert!(
        edited
            .notes
            .iter()
            .any(|n| n.contains("10.3 % is not a whole percent")),
        "{:?}",
        edited.notes
    );
    // Masked UUIDs (one value on both GPUs) are made unique, with a warning.
    let s = scenario::from_capture(&read("telegraf/dual_2080-v13.xml"), "h", "h").unwrap();
    let uuids: std::collections::HashSet<&str> =
        s.gpus.iter().map(|g| g.identity.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 2);
    assert!(s
        .warnings
        .iter()
        .any(|w| w.message.contains("repeats an earlier GPU's")));
}

/// A board the simulator has built in (PCI device id 0x2330: H100 SXM5)
/// starts from it; one it has not (Tesla T4) is described from the capture.
#[test]
fn known_boards_are_bases_and_unknown_ones_are_described() {
    let read = |p: &str| std::fs::read_to_string(corpus().join(p)).unwrap();
    let h100 = import::import(&read("k8s-test-infra/qx-h100.xml"), "h").unwrap();
    let doc: toml::Table = toml::from_str(&h100.scenario).unwrap();
    let board = doc["board"].as_table().unwrap().values().next().unwrap();
    assert_eq!(board["base"].as_str(), Some("h100-sxm5-80gb"));
    let t4 = import::import(&read("k8s-test-infra/qx-t4.xml"), "t").unwrap();
    let doc: toml::Table = toml::from_str(&t4.scenario).unwrap();
    let board = doc["board"].as_table().unwrap().values().next().unwrap();
    assert!(board.get("base").is_none());
    assert_eq!(board["name"].as_str(), Some("Tesla T4"));
    assert_eq!(board["architecture"].as_str(), Some("turing"));
    assert_eq!(board["power"]["default_limit_w"].as_float(), Some(70.0));
    // The H200 MIG capture: a profile table made from the instances seen,
    // two compute instances in GPU instance 2.
    let s = scenario::from_capture(
        &read("nvidia_gpu_exporter/linux-x86_64__nvidia-h200-mig__590.48.01.txt"),
        "m",
        "m",
    )
    .unwrap();
    let mig = s.gpus[0].mig.as_ref().unwrap();
    assert_eq!(mig.len(), 4);
    assert_eq!(mig[0].compute_instances.len(), 2);
    let ids: Vec<u32> = mig
        .iter()
        .map(|m| {
            s.gpus[0]
                .model
                .profile_by_name(&m.profile)
                .unwrap()
                .instance_id_for(m.start)
        })
        .collect();
    assert_eq!(ids, [2, 3, 9, 10]);
}

/// Values that have broken parsers before, for the mutations below.
const HOSTILE: &[&str] = &[
    "",
    "N/A",
    "-1",
    "4294967296 MiB",
    "18446744073709551616",
    "1e308 W",
    "nan %",
    "0x",
    "P99",
    "<",
    "&",
    "&bogus;",
    "]]>",
    "<!--",
    "\u{1F4A5}",
    "99999999999999999999999 us",
    "GPU-00000000-0000-0000-0000-000000000000",
    "ffffffff:ff:1f.7",
    "Enabled",
    "    Nested : deeper",
];

fn mutate(base: &str, op: u8, at: usize, hostile: &str) -> String {
    let mut lines: Vec<String> = base.lines().map(String::from).collect();
    let i = at % lines.len().max(1);
    match op % 5 {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        2 => {
            // Swap a value: between `>` and `</`, or after ` : `.
            let l = &lines[i];
            lines[i] = if let (Some(a), Some(b)) = (l.find('>'), l.rfind("</")) {
                if a < b {
                    format!("{}{hostile}{}", &l[..=a], &l[b..])
                } else {
                    l.clone()
                }
            } else if let Some(c) = l.find(" : ") {
                format!("{}{hostile}", &l[..c + 3])
            } else {
                format!("{l}{hostile}")
            };
        }
        3 => lines.truncate(i),
        _ => lines.insert(i, hostile.to_string()),
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let _ = replay(&text);
        let _ = import::parse_tree(&text);
    }

    #[test]
    fn arbitrary_xml_never_panics(text in "(<[a-z_]{1,8}( id=\"[^\"]{0,5}\")?>|</[a-z_]{1,8}>|[^<]{0,8}|<!--|-->|<!DOCTYPE x \\[|\\]>|&[a-z#0-9]{0,5};){0,60}") {
        let _ = replay(&text);
    }

    #[test]
    fn mutated_real_captures_never_panic(pick in 0usize..1000, op in 0u8..5, at in 0usize..100_000, h in 0usize..HOSTILE.len()) {
        let all = captures();
        let (path, base) = &all[pick % all.len()];
        let text = mutate(base, op, at, HOSTILE[h]);
        if let Err(e) = replay(&text) {
            prop_assert!(!e.trim().is_empty(), "{path}: empty error");
        }
    }
}
