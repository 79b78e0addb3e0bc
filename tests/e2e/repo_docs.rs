//! The docs say what the repository has. The READMEs name every built-in
//! scenario (the project README, where a newcomer picks one for
//! `--simulate`, and nvml-sim's) and every built-in board (nvml-sim's),
//! from `nvml-sim scenarios` and `nvml-sim boards`, the data itself, so a
//! scenario or board added without a line in the docs fails here; every
//! repository path a doc names exists; and no file cites a path outside the
//! repository.

use crate::common;

use common::{repo_root, sim_listing};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn missing_from(text: &str, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !text.contains(&format!("`{n}`")))
        .cloned()
        .collect()
}

#[test]
fn the_readmes_name_every_built_in_scenario() {
    let scenarios = sim_listing("scenarios");
    for doc in ["README.md", "nvml-sim/README.md"] {
        let missing = missing_from(&read(doc), &scenarios);
        assert!(
            missing.is_empty(),
            "{doc} does not name the built-in scenarios {missing:?} (nvml-sim scenarios lists them)"
        );
    }
}

#[test]
fn the_simulator_readme_names_every_built_in_board() {
    let boards = sim_listing("boards");
    assert!(boards.len() >= 10, "{boards:?}");
    let missing = missing_from(&read("nvml-sim/README.md"), &boards);
    assert!(
        missing.is_empty(),
        "nvml-sim/README.md does not name the built-in boards {missing:?} (nvml-sim boards lists them)"
    );
}

/// The repository's tracked files, by `git ls-files`; outside a git
/// checkout (a source tarball), every file under the root but build and
/// tool folders.
fn repository_files() -> Vec<std::path::PathBuf> {
    let root = repo_root();
    if let Ok(out) = std::process::Command::new("git")
        .arg("ls-files")
        .current_dir(&root)
        .output()
    {
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| root.join(l))
                .collect();
        }
    }
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if [
                ".git",
                "target",
                ".venv",
                "node_modules",
                ".tools",
                ".tscheck",
            ]
            .iter()
            .any(|n| name == *n)
            {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Where a `../` path leads: `Some(inside)` (the path from the root) if it
/// stays in the repository, `None` if it climbs out.
fn resolve(from: &std::path::Path, path: &str) -> Option<std::path::PathBuf> {
    let mut at: Vec<String> = from
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for part in path.split('/') {
        match part {
            ".." => {
                at.pop()?;
            }
            "" | "." => {}
            p => at.push(p.to_string()),
        }
    }
    Some(at.iter().collect())
}

/// Paths a file cites that no user's clone has: a `../` path that climbs
/// out of the repository from the file's folder, or one that names
/// nothing from there and climbs out from the root (notes written from the
/// root's point of view: `../shared/corpus/...`), or a folder of the
/// machine the project is developed on (`/work/`).
fn outside_citations(
    root: &std::path::Path,
    relative: &std::path::Path,
    text: &str,
) -> Vec<String> {
    let folder = relative.parent().unwrap_or(std::path::Path::new(""));
    // In code, only comments cite; a string is relative to whatever the
    // code joins it to (`CARGO_MANIFEST_DIR`, a URL).
    let code = relative
        .extension()
        .is_some_and(|e| ["rs", "py", "sh"].iter().any(|c| e == *c));
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if code && !["//", "#", "*"].iter().any(|c| trimmed.starts_with(c)) {
            continue;
        }
        if line.contains("/work/") {
            found.push(format!("{}:{}: /work/...", relative.display(), n + 1));
        }
        // The developers' notes and scratch corpus, by name, however
        // they are reached.
        for notes in ["shared/research/", "shared/corpus", "corpus-new"] {
            if line.contains(notes) {
                found.push(format!("{}:{}: {notes}", relative.display(), n + 1));
            }
        }
        let bytes = line.as_bytes();
        let mut at = 0;
        while let Some(i) = line[at..].find("../").map(|i| i + at) {
            // A path that starts here, not the middle of one
            // (`<exe dir>/../lib` is inside an image, relative to a folder
            // the text names).
            let starts = i == 0
                || !(matches!(bytes[i - 1], b'.' | b'/' | b'>' | b'_')
                    || bytes[i - 1].is_ascii_alphanumeric());
            let end = line[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "._-/".contains(c)))
                .map_or(line.len(), |e| e + i);
            let cited = &line[i..end];
            let outside = match resolve(folder, cited) {
                None => true,
                Some(p) => {
                    !root.join(p).exists() && resolve(std::path::Path::new(""), cited).is_none()
                }
            };
            if starts && outside {
                found.push(format!("{}:{}: {cited}", relative.display(), n + 1));
            }
            at = end.max(i + 3);
        }
    }
    found
}

/// No tracked file cites a path outside the repository (the developers'
/// shared notes, another work tree, this machine's folders): a user's
/// clone has none of them. What the project relies on is copied in with
/// its public source (`tests/corpus/CATALOGUE.md`).
#[test]
fn no_file_cites_a_path_outside_the_repository() {
    let root = repo_root();
    let mut found = Vec::new();
    for path in repository_files() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // binary
        };
        let relative = path.strip_prefix(&root).unwrap();
        if relative == std::path::Path::new(file!()) {
            continue; // this check's own examples
        }
        found.extend(outside_citations(&root, relative, &text));
    }
    assert!(
        found.is_empty(),
        "paths outside the repository cited:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_outside_citation_is_found_and_an_inside_one_is_not() {
    let root = repo_root();
    let file = std::path::Path::new("nvml-sim/boards/x.toml");
    let found = |text: &str| outside_citations(&root, file, text);
    assert_eq!(
        found("# ../notes/telegraf/a.xml\n# ../../tests/corpus/CATALOGUE.md\n"),
        vec!["nvml-sim/boards/x.toml:1: ../notes/telegraf/a.xml"]
    );
    assert_eq!(
        found("see ../../../notes.md and /work/wt/x"),
        vec![
            "nvml-sim/boards/x.toml:1: /work/...",
            "nvml-sim/boards/x.toml:1: ../../../notes.md"
        ]
    );
    assert!(found("<exe dir>/../lib/nvml-exporter/ and ../scenarios/faults.toml").is_empty());
    assert_eq!(
        found("// as shared/research/blackwell.md says"),
        vec!["nvml-sim/boards/x.toml:1: shared/research/"]
    );
}

/// Repository paths a Markdown doc names (`src/...`, `nvml-sim/...`,
/// `tests/...`...) that exist neither from the root nor from the doc's
/// folder: a file moved or folded without its docs following
/// (`nvml-sim/src/model.rs` became a folder, `tests/e2e_docs.rs` a module).
/// Placeholders (`NAME`, `<group>`, `*`) are not paths.
fn missing_paths(root: &std::path::Path, relative: &std::path::Path, text: &str) -> Vec<String> {
    const TOP: [&str; 10] = [
        "src/",
        "nvml-sim/",
        "tests/",
        "docs/",
        "scripts/",
        "deploy/",
        "alerts/",
        "dashboards/",
        "benches/",
        "proto/",
    ];
    let folder = relative.parent().unwrap_or(std::path::Path::new(""));
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        for top in TOP {
            let mut at = 0;
            while let Some(i) = line[at..].find(top).map(|i| i + at) {
                let end = line[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "._-/".contains(c)))
                    .map_or(line.len(), |e| e + i);
                at = end.max(i + top.len());
                let starts = i == 0
                    || !(bytes[i - 1].is_ascii_alphanumeric()
                        || b"./:~@-_".contains(&bytes[i - 1]));
                let placeholder = ["NAME", "KEY", "foo", "TIME", "OUTDIR"]
                    .iter()
                    .any(|p| line[i..end].contains(p))
                    || matches!(bytes.get(end), Some(b'*' | b'<' | b'{'));
                let path = line[i..end].trim_end_matches('.');
                if starts
                    && !placeholder
                    && !root.join(path).exists()
                    && !root.join(folder).join(path).exists()
                {
                    found.push(format!("{}:{}: {path}", relative.display(), n + 1));
                }
            }
        }
    }
    found
}

/// Every repository path the Markdown docs name exists. The corpus
/// catalogue is left out: its paths are where each capture lives in its
/// source repository.
#[test]
fn every_path_the_docs_name_exists() {
    let root = repo_root();
    let mut found = Vec::new();
    for path in repository_files() {
        let relative = path.strip_prefix(&root).unwrap().to_path_buf();
        if relative.extension().is_none_or(|e| e != "md")
            || relative == std::path::Path::new("tests/corpus/CATALOGUE.md")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        found.extend(missing_paths(&root, &relative, &text));
    }
    assert!(
        found.is_empty(),
        "docs name repository paths that do not exist:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_missing_path_is_found_and_a_placeholder_is_not() {
    let root = repo_root();
    let doc = std::path::Path::new("docs/x.md");
    assert_eq!(
        missing_paths(
            &root,
            doc,
            "(`nvml-sim/src/model.rs`) and `src/app.rs`, `src/nvml/sampler/<name>.rs`, tests/sampler_*.rs"
        ),
        vec!["docs/x.md:1: nvml-sim/src/model.rs"]
    );
}
