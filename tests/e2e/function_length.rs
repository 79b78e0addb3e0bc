//! No function of either crate, the exporter or the simulated driver, is
//! longer than 300 lines (CONTRIBUTING.md, the project's style): in
//! nvml-sim a longer one is where readings used to be taught by hand in
//! three places. Lines are counted from the
//! `fn` to the brace that closes its body, read from the source with
//! comments, strings and character literals blanked out. No sampler or
//! simulator FFI file is longer than 700 lines.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 300;

/// `src` with comments, string and character literals replaced by spaces
/// (line breaks kept), so braces in them do not count.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            rest.iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n)
        } else if rest.starts_with(b"/*") {
            find(rest, b"*/").map_or(b.len(), |n| i + n + 2)
        } else if let Some(open) = raw_string_open(rest).filter(|_| !ident_before) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(
                    b'#',
                    open - 2 - usize::from(rest[0] == b'b'),
                ))
                .collect();
            find(&rest[open..], &close).map_or(b.len(), |n| i + open + n + close.len())
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + j + 1
        } else if rest[0] == b'\'' && rest.get(1) == Some(&b'\\') {
            rest[2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |n| i + n + 3)
        } else if rest[0] == b'\'' && rest.get(2) == Some(&b'\'') {
            i + 3
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        blank(&mut out, &b[i..end]);
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The length of a raw string's opening (`r"`, `r#"`, `br##"`...), if one
/// starts here.
fn raw_string_open(s: &[u8]) -> Option<usize> {
    let r = usize::from(s.first() == Some(&b'b'));
    if s.get(r) != Some(&b'r') {
        return None;
    }
    let hashes = s[r + 1..].iter().take_while(|&&c| c == b'#').count();
    (s.get(r + 1 + hashes) == Some(&b'"')).then_some(r + 2 + hashes)
}

/// Every function with a body in `code`: its name, first line and length.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(n) = code[at..].find("fn ") {
        let start = at + n;
        at = start + 3;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let name: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` outside parentheses before any `;`.
        let mut depth = 0i32;
        let mut open = None;
        for (k, &c) in b.iter().enumerate().skip(at) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth <= 0 => break,
                b'{' if depth <= 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut level = 0;
        let Some(close) = b[open..].iter().position(|&c| {
            level += match c {
                b'{' => 1,
                b'}' => -1,
                _ => 0,
            };
            level == 0
        }) else {
            continue;
        };
        let line = |pos: usize| code[..pos].matches('\n').count() + 1;
        let first = line(start);
        out.push((name, first, line(open + close) - first + 1));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_counter_sees_through_strings_comments_and_characters() {
    let code = code_only(
        "fn a() {\n    let s = \"}}}\";\n    // }\n    let c = '}';\n    let r = r#\"}\"#;\n}\nfn b() -> u8 { b'{' }\n",
    );
    assert_eq!(
        functions(&code),
        vec![("a".to_string(), 1, 6), ("b".to_string(), 7, 1)]
    );
}

/// Functions over [`MAX_LINES`] in the Rust files of `dirs` (and
/// `build.rs`) under `root`, named from `prefix`; how many functions were read.
fn long_functions(root: &Path, prefix: &str, dirs: &[&str]) -> (Vec<String>, usize) {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    files.push(root.join("build.rs"));
    let mut long = Vec::new();
    let mut seen = 0;
    for path in &files {
        let code = code_only(&std::fs::read_to_string(path).unwrap());
        for (name, line, lines) in functions(&code) {
            seen += 1;
            if lines > MAX_LINES {
                let rel = path.strip_prefix(root).unwrap().display();
                long.push(format!("{prefix}{rel}:{line} {name}: {lines} lines"));
            }
        }
    }
    (long, seen)
}

#[test]
fn no_simulator_function_is_over_300_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("nvml-sim");
    let (long, seen) = long_functions(&root, "nvml-sim/", &["src", "tests", "examples"]);
    assert!(seen > 500, "found only {seen} functions");
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split them by what they do): {long:#?}"
    );
}

#[test]
fn no_exporter_function_is_over_300_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (long, seen) = long_functions(root, "", &["src", "tests", "benches"]);
    assert!(seen > 1000, "found only {seen} functions");
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split them by what they do): {long:#?}"
    );
}

/// The ratchet under the ceiling (clippy.toml's `too-many-lines-threshold`,
/// which clippy holds in scripts/test): a function of more lines of code
/// than this says why it is one piece.
const RATCHET: usize = 150;

/// Functions of either crate over [`RATCHET`] lines of code (blank and
/// comment lines not counted, as clippy counts) without
/// `#[allow(clippy::too_many_lines, reason = "...")]` above them, and such
/// allows without a reason.
fn unexplained_long_functions() -> (Vec<String>, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "nvml-sim/src", "nvml-sim/tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    let mut seen = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let rel = path.strip_prefix(root).unwrap().display();
        let code = code_only(&text);
        let code_lines: Vec<&str> = code.lines().collect();
        let text_lines: Vec<&str> = text.lines().collect();
        for (name, line, lines) in functions(&code) {
            seen += 1;
            let body = &code_lines[line - 1..(line - 1 + lines).min(code_lines.len())];
            let counted = body.iter().filter(|l| !l.trim().is_empty()).count();
            if counted <= RATCHET {
                continue;
            }
            // The attributes and doc comments right above the `fn`.
            let above: Vec<&str> = text_lines[..line - 1]
                .iter()
                .rev()
                .take_while(|l| {
                    let t = l.trim_start();
                    t.starts_with("#[")
                        || t.starts_with("//")
                        || t.starts_with(')')
                        || t.starts_with("clippy::")
                        || t.starts_with("reason")
                        || t.starts_with("pub") && !t.contains("fn ")
                })
                .copied()
                .collect();
            let above = above.join(" ");
            if !(above.contains("clippy::too_many_lines") && above.contains("reason = \"")) {
                found.push(format!("{rel}:{line} {name}: {counted} lines of code"));
            }
        }
        for (i, l) in code_lines.iter().enumerate() {
            if l.contains("allow(clippy::too_many_lines)") {
                found.push(format!("{rel}:{}: an allow without a reason", i + 1));
            }
        }
    }
    (found, seen)
}

#[test]
fn every_function_over_150_lines_of_code_says_why() {
    let (found, seen) = unexplained_long_functions();
    assert!(seen > 1500, "found only {seen} functions");
    assert!(
        found.is_empty(),
        "functions over {RATCHET} lines of code without #[allow(clippy::too_many_lines, \
         reason = ...)]: split them, or say why they are one piece: {found:#?}"
    );
}

/// The most lines a sampler file (`src/nvml/sampler/`) or a simulator FFI
/// file (`nvml-sim/src/ffi/`) holds, tests included: one NVML group per
/// file is read in one sitting; a longer one is split by what it does (as
/// `sampler/workload_usage/` is: reading apart from accounting).
const MAX_FILE_LINES: usize = 700;

#[test]
fn no_sampler_or_simulator_ffi_file_is_over_700_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src/nvml/sampler", "nvml-sim/src/ffi"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 30, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).unwrap().lines().count();
            let rel = path.strip_prefix(root).unwrap().display();
            (lines > MAX_FILE_LINES).then(|| format!("{rel}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them into modules by what they do): {long:#?}"
    );
}
