//! The crate's top-level modules form layers: no two import each other,
//! directly or through others (docs/design.md, "Module map"). Read from
//! the `crate::<module>` paths in each module's source, test code left out.
//! The same holds for the simulated driver's crate, `nvml-sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `crate::<module>` references per top-level module of `src/`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    imports_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// `crate::<module>` references per top-level module of a crate's source
/// directory (`bin/` holds other crates: left out).
fn imports_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = src.to_path_buf();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Unit tests may reach anywhere; the layering is about the code.
        let code = text.split("#[cfg(test)]").next().unwrap();
        let deps = out.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for piece in line.split("crate::").skip(1) {
                let dep: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !dep.is_empty() && dep != module {
                    deps.insert(dep);
                }
            }
        }
    }
    out
}

fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(m) = todo.pop() {
        for d in graph.get(&m).into_iter().flatten() {
            if d == to {
                return true;
            }
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    false
}

fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut circles = Vec::new();
    for (module, deps) in graph {
        for dep in deps {
            if reaches(graph, dep, module) {
                circles.push(format!("{module} -> {dep} -> ... -> {module}"));
            }
        }
    }
    circles
}

#[test]
fn no_two_modules_import_each_other() {
    let graph = imports();
    assert!(graph.len() > 10, "read too few modules: {graph:?}");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn no_two_simulator_modules_import_each_other() {
    let graph = imports_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("nvml-sim/src"));
    assert!(graph.len() > 10, "read too few modules: {graph:?}");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "import circles: {circles:#?}");
    // The boards, the branch table and the vocabularies are data: they
    // know nothing of the fleet, the exports or the process-wide state.
    let data = ["model", "personality", "fault", "value", "identity"];
    for module in data {
        assert!(
            graph[module].iter().all(|d| data.contains(&d.as_str())),
            "{module} imports {:?}",
            graph[module]
        );
    }
    // One global state, reached by the exports and the control socket,
    // owned by neither.
    assert!(!graph["control"].contains("ffi"), "{graph:?}");
}

#[test]
fn the_writers_and_the_families_do_not_know_each_other() {
    let graph = imports();
    assert!(!graph["exposition"].contains("collectors"), "{graph:?}");
    assert!(!graph["exposition"].contains("render"), "{graph:?}");
    assert!(!graph["collectors"].contains("exposition"), "{graph:?}");
    assert!(!graph["collectors"].contains("render"), "{graph:?}");
    // Only the sampler talks to NVML.
    for (module, deps) in &graph {
        if module != "nvml" && module != "app" {
            assert!(!deps.contains("nvml"), "{module} imports nvml");
        }
    }
}

/// What an XID is (its event, its class, its ledger: `src/xid/`) sits
/// below both the sampler and the verdict; what to do about it is judged
/// in the join step alone. The sampler routes XIDs to their GPU and
/// judges nothing, so a verdict never runs on a poller thread.
#[test]
fn only_the_join_step_judges_and_xids_sit_below_both() {
    let graph = imports();
    for (module, deps) in &graph {
        if module != "join" {
            assert!(!deps.contains("verdict"), "{module} imports verdict");
        }
    }
    assert!(graph["nvml"].contains("xid"), "{graph:?}");
    assert!(graph["verdict"].contains("xid"), "{graph:?}");
    for above in ["nvml", "verdict", "join"] {
        assert!(!graph["xid"].contains(above), "xid imports {above}");
    }
}

/// `super::<file>` references between the files of each folder of a
/// crate's source, test code left out: folder path -> file -> files.
fn sibling_imports(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        let names: BTreeSet<String> = files
            .iter()
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .filter(|n| n != "mod")
            .collect();
        let graph = out
            .entry(dir.strip_prefix(src).unwrap().display().to_string())
            .or_default();
        for path in &files {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if name == "mod" {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let deps = graph.entry(name.clone()).or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for piece in line.split("super::").skip(1) {
                    // `super::x`, and each name of `super::{x, y::z}`.
                    let piece = piece.strip_prefix('{').unwrap_or(piece);
                    for part in piece.split(',') {
                        let dep: String = part
                            .trim_start()
                            .chars()
                            .take_while(|c| {
                                c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'
                            })
                            .collect();
                        if dep != name && names.contains(&dep) {
                            deps.insert(dep);
                        }
                        if part.contains('}') {
                            break;
                        }
                    }
                }
            }
        }
    }
    out
}

/// No two files of one folder import each other through `super::`, in
/// either crate (nvml-sim's `fleet/gpu.rs` held `usage.rs`'s sample ring
/// while `usage.rs` read `gpu.rs`'s GPU: the ring is `fleet/ring.rs` now).
#[test]
fn no_two_files_of_a_folder_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in [root.join("src"), root.join("nvml-sim/src")] {
        let folders = sibling_imports(&src);
        assert!(
            folders.len() > 5,
            "read too few folders of {}",
            src.display()
        );
        for (folder, graph) in folders {
            found.extend(
                circles(&graph)
                    .into_iter()
                    .map(|c| format!("{}/{folder}: {c}", src.display())),
            );
        }
    }
    assert!(found.is_empty(), "file import circles: {found:#?}");
}

#[test]
fn the_sampler_hands_over_and_the_join_step_completes() {
    let graph = imports();
    // The sampler publishes plain data: it knows nothing of what is joined
    // onto it (attribution, the process's statistics) nor of the step
    // that joins it, so a slow kubelet or /proc never reaches a poll.
    for later in [
        "join",
        "kubernetes",
        "workloads",
        "selfstat",
        "render",
        "http",
    ] {
        assert!(!graph["nvml"].contains(later), "nvml imports {later}");
    }
    // The join step is the one place a snapshot is completed and rendered.
    for module in ["join", "app"] {
        assert!(graph.contains_key(module), "{graph:?}");
    }
    for step in ["kubernetes", "workloads", "verdict", "render"] {
        assert!(graph["join"].contains(step), "join does not import {step}");
    }
    // Wiring starts the attribution tasks, but judges and renders nothing.
    for step in ["verdict", "render"] {
        assert!(!graph["app"].contains(step), "app imports {step}");
    }
}

/// The exporter's files that allow `unsafe` are exactly those that
/// `Cargo.toml`'s lint comment names: a reviewer reads the list there, so a
/// file that starts allowing `unsafe` must say so in it.
#[test]
fn cargo_toml_names_every_file_that_allows_unsafe() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let comment: String = manifest
        .lines()
        .skip_while(|l| !l.contains("unsafe is allowed"))
        .take_while(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!comment.is_empty(), "Cargo.toml lost its unsafe comment");
    let mut files = vec![root.join("src")];
    let mut allowing = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs")
            && std::fs::read_to_string(&path)
                .unwrap()
                .contains("allow(unsafe_code)")
        {
            let rel = path.strip_prefix(root).unwrap();
            allowing.insert(rel.to_str().unwrap().to_string());
        }
    }
    assert!(!allowing.is_empty(), "the FFI layer allows unsafe");
    for file in &allowing {
        assert!(
            comment.contains(file.as_str()),
            "{file} allows unsafe but Cargo.toml's comment does not name it: {comment}"
        );
    }
}
