use super::*;
use crate::import;
use std::collections::HashSet;
use std::sync::Arc;

#[test]
fn builtins_parse() {
    for (name, _) in BUILTINS {
        let s = load(name).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.gpus.is_empty(), "{name}");
    }
    assert_eq!(load("dgx-h100").unwrap().gpus.len(), 8);
    assert_eq!(load("large").unwrap().gpus.len(), 16);
    assert_eq!(load("faults").unwrap().timeline.len(), 9);
}

#[test]
fn a_kept_parse_serves_until_its_file_changes() {
    let dir = std::env::temp_dir().join(format!("nvml-sim-kept-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host.toml");
    let key = file.to_str().unwrap();
    std::fs::write(&file, "[[gpu]]\nmodel = \"rtx-4090\"\n").unwrap();
    let checked = load_kept(key).unwrap();
    // The nvmlInit after a host's check builds from the same parse...
    let built = take_kept(key).unwrap();
    assert!(std::sync::Arc::ptr_eq(&checked, &built));
    // ...and hands it over: the next one parses again.
    assert!(!std::sync::Arc::ptr_eq(&built, &take_kept(key).unwrap()));
    // A file rewritten after the check is read anew.
    load_kept(key).unwrap();
    std::fs::write(
        &file,
        "[[gpu]]\nmodel = \"rtx-4090\"\n[[gpu]]\nmodel = \"rtx-4090\"\n",
    )
    .unwrap();
    assert_eq!(take_kept(key).unwrap().gpus.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_are_read_bounded() {
    let dir = std::env::temp_dir().join(format!("nvml-sim-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A valid scenario padded with comments past the limit: refused
    // before parsing, by size.
    let big = dir.join("big.toml");
    let mut text = String::from("[[gpu]]\nmodel = \"rtx-4090\"\n");
    while text.len() as u64 <= MAX_FILE_BYTES {
        text.push_str("# padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, &text).unwrap();
    let e = load(big.to_str().unwrap()).unwrap_err();
    assert!(e.message.contains("larger than"), "{e}");
    assert!(e.to_string().contains("big.toml"), "{e}");
    // The same scenario under the limit loads.
    let small = dir.join("small.toml");
    std::fs::write(&small, &text[..4096]).unwrap();
    assert_eq!(load(small.to_str().unwrap()).unwrap().gpus.len(), 1);
    // A device that never ends, refused unread.
    let e = load("/dev/zero").unwrap_err();
    assert!(
        e.message
            .contains("not a regular file (a character device)"),
        "{e}"
    );
    let bin = dir.join("bin.toml");
    std::fs::write(&bin, b"name = \"\xff\"\n").unwrap();
    assert!(load(bin.to_str().unwrap())
        .unwrap_err()
        .message
        .contains("UTF-8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_name_line_and_problem() {
    let text = "name = \"x\"\n\n[[gpu]]\nmodel = \"h900\"\n";
    let e = parse(text, "x.toml", "x").unwrap_err();
    assert_eq!(e.line, Some(4));
    assert!(
        e.to_string()
            .starts_with("x.toml:4: unknown GPU model `h900`"),
        "{e}"
    );
    let e = parse(
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [\"4g.40gb\", \"4g.40gb\"]\n",
        "y.toml",
        "y",
    )
    .unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("does not fit"), "{e}");
    let e = parse("[[gpu]]\nmodel = 3\n", "z.toml", "z").unwrap_err();
    assert_eq!(e.line, Some(2), "{e}");
    let e = parse(
        "[[gpu]]\nmodel = \"rtx-4090\"\n[[timeline]]\nat = 1\naction = \"lose\"\ngpu = 3\n",
        "t.toml",
        "t",
    )
    .unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("GPU 3"), "{e}");
}

/// (scenario text, line, what the message says): every key of the
/// format is checked, and an unknown one is refused where it is.
const REFUSED: &[(&str, usize, &str)] = &[
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\ntemperature = 41\n",
        4,
        "unknown field `temperature`",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.counters]\npcie_replays = 1\necc = { volatile = { corrected = { dram = 1, hbm = 2 } } }\n",
        5,
        "unknown field `hbm`",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"1g.10gb\", laod = 3 }]\n",
        3,
        "unknown field `laod`",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.board]\nmemory = { total = 3 }\n",
        4,
        "unknown field `total`",
    ),
    (
        "[board.mine]\nbase = \"h100-sxm5-80gb\"\nfans = 2\n[[gpu]]\nmodel = \"mine\"\n",
        3,
        "unknown field `fans`",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\ntemperature_c = \"hot\"\n",
        4,
        "(or \"N/A\")",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[gpu.readings]\nutilization = { gpu = 140 }\n",
        3,
        "utilization.gpu = 140 is outside 0..=100",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"1g.10gb\", gpu_instance_id = 5 }]\n",
        3,
        "no placement of `1g.10gb`",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"2g.20gb\", placement = 0 }, { profile = \"1g.10gb\", placement = 1 }]\n",
        3,
        "overlaps",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nmig = [{ profile = \"3g.40gb\", compute_instances = [{ id = 0, slices = 2 }, { id = 1, slices = 2 }] }]\n",
        3,
        "compute instances take 4 slices of its 3",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\npower_limit_w = 900\n",
        3,
        "power_limit_w 900 is outside",
    ),
    (
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\npci_bus_id = \"18:00.0\"\n",
        3,
        "is not DOMAIN:BUS:DEVICE.FUNCTION",
    ),
    (
        "[[gpu]]\nmodel = \"rtx-4090\"\n[gpu.counters]\nremapped_rows = { correctable = 1 }\n",
        1,
        "does not remap rows",
    ),
    (
        "[[gpu]]\n[gpu.board]\nname = \"x\"\nbrand = \"nvidia\"\narchitecture = \"blackwell\"\n",
        2,
        "has no `memory.total_mib`",
    ),
    (
        "[board.a]\nbase = \"b\"\n[board.b]\nbase = \"a\"\n[[gpu]]\nmodel = \"a\"\n",
        1,
        "(a loop?)",
    ),
    (
        "[board.h100-sxm5-80gb]\nname = \"x\"\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n",
        1,
        "would hide the built-in board",
    ),
];

#[test]
fn new_keys_are_checked_with_their_line() {
    for (text, line, message) in REFUSED {
        let e = parse(text, "k.toml", "k").expect_err(text);
        assert_eq!(e.line, Some(*line), "{e}\n{text}");
        assert!(e.message.contains(message), "{e}\n{text}");
    }
}

#[test]
fn inline_boards_and_not_supported_values() {
    let text = r#"
[board.blackwell-4slice]
name = "NVIDIA B200"
brand = "nvidia"
architecture = "blackwell"
memory = { total_mib = 183359, reserved_mib = 1000 }
power = { default_limit_w = 1000, module = { default_limit_w = 2700 } }
clocks = { max_graphics_mhz = 1965, max_memory_mhz = 3996 }
pcie = { generation = 5, width = 16 }
nvlink = { links = 18, version = 5 }
engines = { decoders = 7, jpegs = 7, ofas = 1 }
ecc = { supported = true, row_remapping = true, remapper_banks = 3072 }
thermal = { shutdown_c = "N/A", gpu_max_c = 87 }

[board.blackwell-4slice.mig]
compute_slices = 4
memory_slices = 4

[[board.blackwell-4slice.mig.profile]]
name = "1g.45gb"
profile = "1_SLICE"
id = 19
slices = 1
memory_slices = 1
instances = 4
placements = [0, 1, 2, 3]
gpu_instance_ids = [3, 4, 5, 6]
memory_mib = 45000
sm_count = 37
copy_engines = 2
decoders = 1
encoders = 1
jpegs = 1
ofas = 0

[[gpu]]
model = "blackwell-4slice"
count = 2
mig = ["1g.45gb", { profile = "1g.45gb", gpu_instance_id = 6 }]
processes = [{ name = "x", memory_mib = 10, gpu_instance = 6 }]

[[gpu]]
model = "h100-sxm5-80gb"
serial = "N/A"
[gpu.board]
name = "NVIDIA H100 NVL"
thermal = { memory_max_c = "N/A" }
"#;
    let s = parse(text, "b.toml", "b").unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let b = &s.gpus[0].model;
    assert_eq!(
        b.arch,
        nvml_wrapper_sys::bindings::NVML_DEVICE_ARCH_BLACKWELL
    );
    assert_eq!(b.cuda_cc, (10, 0), "from the architecture");
    assert_eq!(b.thermal.shutdown_c, None);
    assert_eq!(
        b.power.module.unwrap().limits.unwrap().default_mw,
        2_700_000
    );
    assert!(Arc::ptr_eq(b, &s.gpus[1].model), "one board, shared");
    let mig = s.gpus[0].mig.as_ref().unwrap();
    assert_eq!((mig[0].start, mig[1].start), (0, 3));
    assert_eq!(s.gpus[0].processes[0].mig_instance, Some(1));
    let nvl = &s.gpus[2];
    assert_eq!(nvl.model.name, "NVIDIA H100 NVL");
    assert_eq!(nvl.model.thermal.memory_max_c, None);
    assert_eq!(nvl.model.memory.total_mib, 81559, "the rest from its model");
    assert_eq!(nvl.identity.serial, None);
    // Derived identifiers are unique without warnings.
    let uuids: HashSet<&str> = s.gpus.iter().map(|g| g.identity.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 3);
}

#[test]
fn identifiers_given_twice_are_made_unique_and_reported() {
    let text = "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\ncount = 2\nuuid = \"GPU-1\"\nserial = \"1\"\npci_bus_id = \"0000:18:00.0\"\n";
    let s = parse(text, "d.toml", "d").unwrap();
    assert_eq!(s.gpus[0].identity.uuid, "GPU-1");
    assert_ne!(s.gpus[1].identity.uuid, "GPU-1");
    assert_ne!(s.gpus[1].identity.serial.as_deref(), Some("1"));
    assert_ne!(s.gpus[1].identity.pci, s.gpus[0].identity.pci);
    let w: Vec<String> = s.warnings.iter().map(ScenarioError::as_warning).collect();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w[0].starts_with("d.toml:1: warning: GPU 1: uuid GPU-1 repeats"),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("pci_bus_id 00000000:18:00.0 repeats")),
        "{w:?}"
    );
}

/// Every TOML example of README.md reads: the scenarios as they are,
/// the board-key reference as a board of a scenario.
#[test]
fn the_readme_examples_are_valid() {
    let readme = include_str!("../../README.md");
    let mut checked = 0;
    for block in readme.split("```toml\n").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        let text = if block.contains("[[gpu]]") {
            block.to_string()
        } else {
            let board: toml::Table =
                toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
            let mut boards = toml::Table::new();
            boards.insert("example".into(), toml::Value::Table(board));
            let mut doc = toml::Table::new();
            doc.insert("board".into(), toml::Value::Table(boards));
            let mut gpu = toml::Table::new();
            gpu.insert("model".into(), toml::Value::String("example".into()));
            doc.insert(
                "gpu".into(),
                toml::Value::Array(vec![toml::Value::Table(gpu)]),
            );
            toml::to_string(&doc).unwrap()
        };
        let s = parse(&text, "README.md", "readme").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(!s.gpus.is_empty());
        checked += 1;
    }
    assert!(checked >= 4, "{checked} examples");
}

/// The importer hands its scenario over typed: what the loader builds
/// from it is what it builds from the text `nvml-sim import` prints,
/// for every corpus capture, and the warnings name the same capture
/// lines.
#[test]
fn an_imported_capture_builds_as_the_scenario_it_prints() {
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/corpus"
    ))];
    let mut checked = 0;
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            if import::detect(&text).is_none() {
                continue;
            }
            let mut typed = from_capture(&text, "h.xml", "h").unwrap();
            let written = import::import(&text, "h").unwrap();
            let mut parsed = parse(&written.scenario, "h.toml", "h").unwrap();
            // Where a table is in the text: the typed file has no text.
            for g in typed.gpus.iter_mut().chain(&mut parsed.gpus) {
                g.identity_given.offset = None;
            }
            let p = p.display();
            assert_eq!(
                format!("{:?}", typed.gpus),
                format!("{:?}", parsed.gpus),
                "{p}"
            );
            assert_eq!(
                format!(
                    "{:?}",
                    (
                        &typed.name,
                        &typed.timeline,
                        &typed.driver,
                        typed.privileged
                    )
                ),
                format!(
                    "{:?}",
                    (
                        &parsed.name,
                        &parsed.timeline,
                        &parsed.driver,
                        parsed.privileged
                    )
                ),
                "{p}"
            );
            assert_eq!(
                format!(
                    "{:?}",
                    (
                        &typed.denied,
                        typed.host_pid_namespace,
                        typed.gpm_absent_engines_unsupported
                    )
                ),
                format!(
                    "{:?}",
                    (
                        &parsed.denied,
                        parsed.host_pid_namespace,
                        parsed.gpm_absent_engines_unsupported
                    )
                ),
                "{p}"
            );
            assert_eq!(typed.call_errors, parsed.call_errors, "{p}");
            assert_eq!(typed.absent_functions, parsed.absent_functions, "{p}");
            // The identity warnings at the <gpu> whose table they are
            // in, then the notes.
            let identity: Vec<_> = typed
                .warnings
                .iter()
                .filter(|w| w.message.starts_with("<gpu>: "))
                .map(|w| w.line.unwrap())
                .collect();
            let tables: Vec<usize> = parsed
                .warnings
                .iter()
                .map(|w| {
                    let before = written.scenario.lines().take(w.line.unwrap());
                    // The capture's header: the notes, a blank line.
                    before.filter(|l| l.starts_with("[[gpu]]")).count() - 1
                })
                .collect();
            let lines: Vec<usize> = tables.iter().map(|&t| written.gpu_lines[t]).collect();
            assert_eq!(identity, lines, "{p}");
            assert_eq!(
                typed.warnings.len(),
                parsed.warnings.len() + written.notes.len(),
                "{p}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 88, "{checked} captures");
}

/// `gpm_absent_engines` is typed when the file is read: an unknown
/// value is refused with the words and the line it had when it was
/// checked afterwards.
#[test]
fn an_unknown_gpm_absent_engines_names_its_line() {
    let text = "name = \"g\"\nbase = \"dgx-h100\"\n\ngpm_absent_engines = \"sometimes\"\n";
    let e = parse(text, "g.toml", "g").unwrap_err();
    assert_eq!(e.line, Some(4), "{e}");
    assert_eq!(
        e.message,
        "gpm_absent_engines = \"sometimes\": expected \"zero\" or \"not_supported\""
    );
    for (v, unsupported) in [("zero", false), ("not_supported", true)] {
        let s = parse(&text.replace("sometimes", v), "g.toml", "g").unwrap();
        assert_eq!(s.gpm_absent_engines_unsupported, unsupported);
    }
    assert!(
        !parse("base = \"dgx-h100\"\n", "g.toml", "g")
            .unwrap()
            .gpm_absent_engines_unsupported
    );
}

/// A board's `architecture` is an `Architecture` from the moment the
/// file is read: an unknown one is refused with the known names, at
/// its line.
#[test]
fn an_unknown_architecture_names_its_line() {
    let text = "[board.mine]\nbase = \"h100-sxm5-80gb\"\narchitecture = \"hoper\"\n\n[[gpu]]\nmodel = \"mine\"\n";
    let e = parse(text, "a.toml", "a").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(
        e.message
            .starts_with("unknown architecture `hoper` (known: kepler, maxwell, pascal"),
        "{e}"
    );
    let s = parse(&text.replace("hoper", "blackwell"), "a.toml", "a").unwrap();
    assert_eq!(
        s.gpus[0].model.arch,
        nvml_wrapper_sys::bindings::NVML_DEVICE_ARCH_BLACKWELL
    );
}
