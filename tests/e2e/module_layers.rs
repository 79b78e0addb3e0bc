//! The crate's top-level modules form layers: no two import each other,
//! directly or through others, and each imports only what docs/design.md's
//! "Module map" says, all of it above itself there. Read from the
//! `crate::<module>` paths in each module's whole source, test code left
//! out (`#[cfg(test)]` modules, inline or in files of their own). The same
//! holds for the simulated driver's crate, `nvml-sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file's code without its `#[cfg(test)]` modules: an inline
/// `mod tests { .. }` is cut to the closing brace at its own indentation
/// (the code is rustfmt's), so what follows a test module is read too.
fn without_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).copied().unwrap_or("");
        let item = next.trim_start();
        let inline_mod =
            (item.starts_with("mod ") || item.starts_with("pub mod ")) && item.ends_with('{');
        if lines[i].trim() == "#[cfg(test)]" && inline_mod {
            let indent = &next[..next.len() - item.len()];
            let close = format!("{indent}}}");
            i += 2;
            while i < lines.len() && lines[i] != close {
                i += 1;
            }
            i += 1;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// The files that are test modules of their own (`#[cfg(test)] mod x;`).
fn test_files(src: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![src.to_path_buf()];
    while let Some(path) = todo.pop() {
        if path.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // `a/mod.rs` and `lib.rs` declare `a/x.rs`; `a/b.rs` declares `a/b/x.rs`.
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let dir = match stem {
            "mod" | "lib" | "main" => path.parent().unwrap().to_path_buf(),
            _ => path.with_extension(""),
        };
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            let item = pair[1].trim();
            if pair[0].trim() != "#[cfg(test)]" {
                continue;
            }
            if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    out
}

/// `crate::<module>` references per top-level module of `src/`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    imports_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// `crate::<module>` references per top-level module of a crate's source
/// directory (`bin/` holds other crates: left out).
fn imports_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = src.to_path_buf();
    let tests = test_files(&src);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || tests.contains(&path) {
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
        let code = without_tests(&text);
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

/// docs/design.md's module map, in order: each row's modules and its
/// Imports column (`None`: "everything above").
fn module_map() -> Vec<(Vec<String>, Option<BTreeSet<String>>)> {
    let design =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md"))
            .unwrap();
    let section = design
        .split("\n## Module map")
        .nth(1)
        .expect("docs/design.md has a Module map");
    let mut rows = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let (first, last) = (cells[0], cells[cells.len() - 1]);
        if !first.starts_with('`') {
            continue; // the header and its rule
        }
        let modules = first
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .collect();
        let imports = match last {
            "everything above" => None,
            "-" => Some(BTreeSet::new()),
            names => Some(names.split(',').map(|m| m.trim().to_string()).collect()),
        };
        rows.push((modules, imports));
    }
    rows
}

/// The module map is the code: every module of `src/` has its row, each
/// row's Imports column is what its modules import (a row of several
/// modules: what any of them imports), and everything a module imports is
/// listed above it, or in its own row.
#[test]
fn the_design_module_map_is_the_code() {
    let graph = imports();
    let rows = module_map();
    assert!(
        rows.len() > 15,
        "read too few rows of the module map: {rows:?}"
    );
    let mut above: BTreeSet<String> = BTreeSet::new();
    let mut problems = Vec::new();
    for (modules, said) in &rows {
        let row: BTreeSet<String> = modules.iter().cloned().collect();
        let mut imported = BTreeSet::new();
        for m in modules {
            match graph.get(m) {
                Some(deps) => imported.extend(deps.iter().cloned()),
                None => problems.push(format!("`{m}` is in the map but not a module of src/")),
            }
        }
        for d in imported
            .iter()
            .filter(|d| !above.contains(*d) && !row.contains(*d))
        {
            problems.push(format!("{modules:?} imports `{d}`, which is not above it"));
        }
        if let Some(said) = said.as_ref().filter(|s| **s != imported) {
            problems.push(format!(
                "{modules:?}: the map says it imports {said:?}, the code {imported:?}"
            ));
        }
        above.extend(row);
    }
    for m in graph.keys().filter(|m| !above.contains(*m)) {
        problems.push(format!("`{m}` has no row in the module map"));
    }
    assert!(
        problems.is_empty(),
        "docs/design.md, Module map: {problems:#?}"
    );
}

/// Test modules are cut out to their end, not the file from its first
/// `#[cfg(test)]` on: what follows them is code.
#[test]
fn code_after_a_test_module_is_read() {
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n    fn f() {\n    }\n}\n\nfn g() {\n    crate::c::h();\n}\n#[cfg(test)]\nuse crate::d;\n";
    let code = without_tests(text);
    assert!(
        code.contains("crate::a") && code.contains("crate::c"),
        "{code}"
    );
    assert!(!code.contains("crate::b"), "{code}");
    // An attribute on anything but a module cuts nothing but itself.
    assert!(code.contains("crate::d"), "{code}");
}

#[test]
fn no_two_simulator_modules_import_each_other() {
    let graph = imports_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("nvml-sim/src"));
    assert!(graph.len() > 10, "read too few modules: {graph:?}");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "import circles: {circles:#?}");
    // The boards, the branch table and the vocabularies are data: they
    // know nothing of the fleet, the exports or the process-wide state.
    let data = [
        "model",
        "personality",
        "fault",
        "value",
        "identity",
        "error",
    ];
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
    for above in ["nvml", "verdict", "join"] {
        assert!(!graph["xid"].contains(above), "xid imports {above}");
    }
}

/// `super::<file>` references between the files of each folder of a
/// crate's source, test code left out: folder path -> file -> files.
fn sibling_imports(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let tests = test_files(src);
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !tests.contains(&path) {
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
            let code = without_tests(&text);
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

/// nvml-sim allows `unsafe` per module, by name in its `lib.rs` (the
/// exports, the capture, the symbol table), not crate-wide: a module that
/// starts to need it says so there. Every file of the crate is read: one
/// outside those modules that allows it (on a function) is named in the
/// crate docs of `lib.rs`.
#[test]
fn the_simulator_allows_unsafe_only_in_named_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("nvml-sim/src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    assert!(
        !lib.contains("#![allow(unsafe_code)]"),
        "nvml-sim allows unsafe crate-wide again"
    );
    let lines: Vec<&str> = lib.lines().collect();
    let allowed: Vec<&str> = lines
        .windows(2)
        .filter(|w| w[0].trim() == "#[allow(unsafe_code)]")
        .filter_map(|w| w[1].trim().strip_prefix("pub mod "))
        .collect();
    assert_eq!(
        allowed,
        ["capture;", "driver;", "ffi;", "host;"],
        "the modules allowed unsafe"
    );
    let docs: String = lines
        .iter()
        .filter(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut files = vec![root.clone()];
    let mut read = 0;
    let mut untold = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || path == root.join("lib.rs") {
            continue;
        }
        read += 1;
        if !std::fs::read_to_string(&path)
            .unwrap()
            .contains("allow(unsafe_code)")
        {
            continue;
        }
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let module = rel.split(['/', '.']).next().unwrap_or_default();
        if !allowed.contains(&format!("{module};").as_str()) && !docs.contains(rel.as_str()) {
            untold.push(rel);
        }
    }
    assert!(read > 50, "read too few files of nvml-sim/src: {read}");
    assert!(
        untold.is_empty(),
        "these files of nvml-sim/src allow unsafe outside the modules lib.rs allows, \
         and lib.rs's crate docs do not name them: {untold:?}"
    );
}

/// A target whose test harness `Cargo.toml` turns off (`test = false`:
/// the two binaries, thin mains over their libraries) holds no test and no
/// module of its own, whose tests would silently never run.
#[test]
fn the_binaries_without_a_test_harness_hold_no_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (manifest, main) in [
        ("Cargo.toml", "src/main.rs"),
        ("nvml-sim/Cargo.toml", "nvml-sim/src/bin/nvml-sim.rs"),
    ] {
        let toml = std::fs::read_to_string(root.join(manifest)).unwrap();
        let bin = toml
            .split("[[bin]]")
            .nth(1)
            .unwrap_or_else(|| panic!("{manifest} has no [[bin]]"));
        let bin = bin.split("\n[").next().unwrap_or_default();
        assert!(bin.contains(&format!(
            "path = \"{}\"",
            main.trim_start_matches("nvml-sim/")
        )));
        assert!(bin.contains("test = false"), "{manifest}: {bin}");
        let code = std::fs::read_to_string(root.join(main)).unwrap();
        for line in code.lines().map(str::trim_start) {
            assert!(
                !line.starts_with("#[test]")
                    && !line.starts_with("#[cfg(test)]")
                    && !line.starts_with("mod ")
                    && !line.starts_with("pub mod "),
                "{main} has no test harness (`test = false` in {manifest}), so it holds \
                 no test and no module: {line}"
            );
        }
    }
}

/// A row of the group table: its group (`None` for the last row, the
/// files of no one group) and each folder's cell, as the names quoted in it.
type GroupRow = (Option<String>, Vec<Vec<String>>);

/// docs/design.md's "One name per NVML group" table: its folders (the
/// header) and its rows.
fn group_table() -> (Vec<String>, Vec<GroupRow>) {
    let design =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md"))
            .unwrap();
    let section = design
        .split("\n### One name per NVML group")
        .nth(1)
        .expect("docs/design.md has a section \"One name per NVML group\"");
    let quoted = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut lines = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    let header: Vec<&str> = lines.next().unwrap().trim_matches('|').split('|').collect();
    let folders = header[1..].iter().flat_map(|c| quoted(c)).collect();
    let mut rows = Vec::new();
    for line in lines.skip(1) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let group = (!cells[0].starts_with('(')).then(|| cells[0].to_string());
        rows.push((group, cells[1..].iter().map(|c| quoted(c)).collect()));
    }
    (folders, rows)
}

/// The files of a folder that keeps a file per group: `name.rs`, and a
/// folder `name/` for a group that is a module folder of its own.
fn group_folder_entries(folder: &Path) -> BTreeSet<String> {
    std::fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                format!("{name}/")
            } else {
                name
            }
        })
        .filter(|n| Path::new(n).extension().is_some_and(|x| x == "rs") || n.ends_with('/'))
        .collect()
}

/// One NVML group, one file name: in each folder that keeps a file per
/// group (the sampler, the collectors, and nvml-sim's exports, importer,
/// capture and fault application) a group's file is named as the group,
/// and docs/design.md's table is the folders: every file it names exists,
/// and a file it does not name (a `thermal.rs` beside `temperature.rs`)
/// fails here.
#[test]
fn each_nvml_group_has_one_name() {
    let (folders, rows) = group_table();
    assert_eq!(folders.len(), 7, "the table's folders: {folders:?}");
    assert!(
        rows.len() > 15,
        "read too few rows of the group table: {rows:?}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for (i, folder) in folders.iter().enumerate() {
        let mut named = BTreeSet::new();
        for (group, cells) in &rows {
            let Some(cell) = cells.get(i) else {
                problems.push(format!("the row of {group:?} has no cell for {folder}"));
                continue;
            };
            if let (Some(group), Some(first)) = (group, cell.first()) {
                if *first != format!("{group}.rs") && *first != format!("{group}/") {
                    problems.push(format!(
                        "{folder}: group {group}'s file is `{first}`, not `{group}.rs`"
                    ));
                }
            }
            named.extend(cell.iter().cloned());
        }
        let present = group_folder_entries(&root.join(folder));
        for missing in named.difference(&present) {
            problems.push(format!("{folder}/{missing} is in the table but not a file"));
        }
        for unnamed in present.difference(&named) {
            problems.push(format!(
                "{folder}/{unnamed} is not in docs/design.md's group table: a group's \
                 file has the group's name there"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/design.md, One name per NVML group: {problems:#?}"
    );
}
