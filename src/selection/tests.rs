use std::time::Duration;

use super::*;
use crate::metric::BuildInfo;

fn base(compat: Option<Generation>) -> Base {
    Base {
        families: FamilySet::defaults(),
        interval: Duration::from_secs(5),
        compat,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn load_text(text: &str, compat: Option<Generation>) -> Result<Selection, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    load(&write(dir.path(), "selection.yml", text), &base(compat))
}

fn error(text: &str, compat: Option<Generation>) -> ConfigError {
    load_text(text, compat).unwrap_err()
}

/// How many DCGM fields the selection in force serves.
fn dcgm_fields(rt: &Runtime) -> usize {
    rt.render_context()
        .load()
        .compat
        .as_ref()
        .unwrap()
        .fields
        .len()
}

/// `text` is refused at `line` with a message that says `says`.
fn refused(text: &str, compat: Option<Generation>, line: Option<usize>, says: &str) {
    let e = error(text, compat);
    assert_eq!(e.line, line, "{text:?}: {e}");
    assert!(e.message.contains(says), "{text:?}: {e}");
}

const FULL: &str = "\
# What one GPU team collects
version: 1
families:
  deny: [fan, mode]
metrics:
  deny:
    - nvidia_gpu_clock_max_hertz
    - DCGM_FI_DEV_MEM_COPY_UTIL
labels:
  drop: [pci_bus_id, modelName]
intervals:
  ecc: 60s
  retirement: 1m
  utilization: 1s
dcgm:
  fields: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_DEV_BOARD_LIMIT_VIOLATION, DCGM_FI_DRIVER_VERSION]
";

#[test]
fn a_whole_file_selects_families_intervals_metrics_labels_and_fields() {
    let s = load_text(FULL, Some(Generation::V4_8)).unwrap();
    assert!(!s.families.contains(Family::Fan) && !s.families.contains(Family::Mode));
    assert!(s.families.contains(Family::Ecc));
    assert_eq!(
        s.intervals,
        [
            (Family::Ecc, Duration::from_secs(60)),
            (Family::Retirement, Duration::from_secs(60)),
            (Family::Utilization, Duration::from_secs(1)),
        ]
    );
    assert_eq!(s.tick(Duration::from_secs(5)), Duration::from_secs(1));
    let f = s.filter.as_ref().unwrap();
    assert!(!f.keeps("nvidia_gpu_clock_max_hertz") && f.keeps("nvidia_gpu_clock_hertz"));
    assert_eq!(
        f.drop_labels.as_deref().unwrap(),
        ["pci_bus_id", "modelName"]
    );
    // The fields, less what the metric lists deny and what has no source
    // (said in a warning); the label field kept.
    let names: Vec<_> = s
        .compat_fields(Generation::V4_8)
        .iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_DRIVER_VERSION"
        ]
    );
    assert!(
        s.warnings[0].contains("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"),
        "{:?}",
        s.warnings
    );
    // The GR engine field needs GPM sampled, whatever the families say.
    let sampled = s.sampled(Some(&s.compat_fields(Generation::V4_8)));
    assert!(sampled.contains(Family::Gpm));
}

#[test]
fn families_allow_is_the_whole_set() {
    let s = load_text("version: 1\nfamilies:\n  allow: [power, ecc, xid]\n", None).unwrap();
    let on: Vec<_> = s.families.iter().map(Family::name).collect();
    assert_eq!(on, ["power", "ecc", "xid"]);
    assert!(load_text("version: 1\n", None).unwrap().families == FamilySet::defaults());
}

#[test]
fn each_mistake_is_an_error_naming_its_line() {
    let e = error(
        "version: 1\nfamilies:\n  deny:\n    - fan\n    - fna\n",
        None,
    );
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.to_string().contains("\"fna\" is not a family"), "{e}");
    assert!(e.to_string().starts_with("config file "), "{e}");

    refused(
        "version: 1\nmetrics:\n  allow: [nvidia_gpu_up, nvidia_gpu_upp]\n",
        None,
        Some(3),
        "nvidia_gpu_upp",
    );

    refused(
        "version: 1\nintervals:\n  ecc: 60\n",
        None,
        Some(3),
        "intervals.ecc",
    );

    refused(
        "version: 1\nintervals:\n  utilization: 1s\n  processes: 60s\n",
        None,
        Some(4),
        "every poll",
    );

    let e = error(
        "version: 1\nfamilies:\n  deny: [fan]\nintervals:\n  fan: 10s\n",
        None,
    );
    assert!(e.message.contains("not switched on"), "{e}");

    // With measured use per workload, energy is split poll by poll.
    let mut with_usage = base(None);
    with_usage.families.set(Family::WorkloadUsage, true);
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "s.yml",
        "version: 1\nintervals:\n  power: 30s\n",
    );
    let e = load(&path, &with_usage).unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("workload_usage"), "{e}");
    assert!(load(&path, &base(None)).is_ok());

    refused(
        "version: 1\nlabels:\n  drop: [gpu]\n",
        None,
        Some(3),
        "identifies series",
    );

    // Unknown keys are refused by the parser, which names the line.
    let e = error("version: 1\nfamilys:\n  deny: [fan]\n", None);
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.message.contains("familys"), "{e}");

    assert!(error("families:\n  deny: [fan]\n", None)
        .message
        .contains("`version: 1` is missing"));
    refused("version: 2\n", None, Some(1), "version 2");
    assert!(error("", None).message.contains("empty"));
    assert!(error("version: 1\nfamilies: [a, b]\n", None).line.is_some());
}

#[test]
fn dcgm_names_need_the_compat_output() {
    let e = error(
        "version: 1\nmetrics:\n  deny: [DCGM_FI_DEV_GPU_UTIL]\n",
        None,
    );
    assert!(e.message.contains("--compat.dcgm"), "{e}");
    refused(
        "version: 1\ndcgm:\n  fields: [DCGM_FI_DEV_GPU_UTIL]\n",
        None,
        Some(2),
        "--compat.dcgm",
    );
    refused(
        "version: 1\ndcgm:\n  fields: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_GPU_UTILS]\n",
        Some(Generation::V4_9),
        Some(3),
        "DCGM_FI_DEV_GPU_UTILS",
    );
}

#[test]
fn a_counters_csv_is_a_selection_and_its_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        dir.path(),
        "dcp-metrics-included.csv",
        "# Format\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\nDCGM_FI_DEV_FB_USED, gauge, FB used.\n",
    );
    let s = load(&csv, &base(Some(Generation::V4_8))).unwrap();
    assert_eq!(s.dcgm_fields.as_ref().unwrap().len(), 2);
    assert_eq!(s.families, FamilySet::defaults());
    assert!(load(&csv, &base(None))
        .unwrap_err()
        .message
        .contains("--compat.dcgm"));

    // Named from a YAML file, relative to it; its errors name both.
    let yml = write(
        dir.path(),
        "selection.yml",
        "version: 1\ndcgm:\n  counters_file: counters.csv\n",
    );
    write(
        dir.path(),
        "counters.csv",
        "DCGM_FI_DEV_SM_CLOCK, gauge, x\nDCGM_FI_DEV_SM_CLOCKS, gauge, y\n",
    );
    let e = load(&yml, &base(Some(Generation::V4_8))).unwrap_err();
    assert!(
        e.to_string()
            .contains("counters.csv: line 2: \"DCGM_FI_DEV_SM_CLOCKS\""),
        "{e}"
    );
    write(
        dir.path(),
        "counters.csv",
        "DCGM_FI_DEV_SM_CLOCK, gauge, x\n",
    );
    let s = load(&yml, &base(Some(Generation::V4_8))).unwrap();
    assert_eq!(s.referenced, [dir.path().join("counters.csv")]);
    std::fs::remove_file(dir.path().join("counters.csv")).unwrap();
    assert!(load(&yml, &base(Some(Generation::V4_8)))
        .unwrap_err()
        .message
        .contains("cannot read"));
}

fn settings(path: &Path) -> RuntimeSettings {
    RuntimeSettings {
        path: Some(path.to_path_buf()),
        base: base(Some(Generation::V4_8)),
        compat_only: false,
        hostname: None,
        workloads: false,
        build: BuildInfo::current(),
        poll_interval: Duration::from_secs(3600),
    }
}

/// Rewrites a file so that a follower sees it changed (a new inode).
fn rewrite(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_reload_swaps_the_selection_whole_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "selection.yml",
        "version: 1\nintervals:\n  ecc: 60s\n",
    );
    let rt = Runtime::new_unwatched(settings(&path)).unwrap();
    assert_eq!(rt.schedule().load().every(Family::Ecc), 12);
    assert!(!rt.check_now().unwrap(), "nothing changed");

    rewrite(
        &path,
        "version: 1\nfamilies:\n  deny: [fan]\nintervals:\n  ecc: 30s\n",
    );
    assert!(rt.check_now().unwrap());
    assert_eq!(rt.schedule().load().every(Family::Ecc), 6);
    assert!(!rt.render_context().load().families.contains(Family::Fan));
    let st = rt.status().unwrap();
    assert!(st.last_reload_successful);
    assert_eq!((st.reloads, st.failures), (1, 0));

    // Garbage: refused, counted once, and the last good selection stays;
    // unchanged, it is not parsed again at the next check (only once in
    // RETRY_FAILED_EVERY checks).
    rewrite(&path, "version: 1\nintervals: {ecc: soon}\n\u{0}\n");
    assert!(rt.check_now().is_err());
    assert!(!rt.check_now().unwrap(), "not loaded again");
    assert_eq!(rt.schedule().load().every(Family::Ecc), 6);
    let st = rt.status().unwrap();
    assert!(!st.last_reload_successful);
    assert_eq!(st.failures, 1);
    // SIGHUP counts again: someone asked.
    assert!(rt.reload_now().is_err());
    assert_eq!(rt.status().unwrap().failures, 2);

    rewrite(&path, "version: 1\n");
    assert!(rt.check_now().unwrap());
    assert!(rt.status().unwrap().last_reload_successful);
    assert!(!rt.schedule().load().skips());
}

#[test]
fn what_needs_a_restart_is_refused_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "selection.yml", "version: 1\n");
    let rt = Runtime::new_unwatched(settings(&path)).unwrap();
    rewrite(&path, "version: 1\nintervals:\n  utilization: 1s\n");
    let e = rt.check_now().unwrap_err();
    assert!(e.message.contains("needs a restart"), "{e}");
    // Without the DCGM output, which reads XIDs for its XID field.
    let plain = Runtime::new_unwatched(RuntimeSettings {
        base: base(None),
        ..settings(&path)
    })
    .unwrap();
    rewrite(&path, "version: 1\nfamilies:\n  deny: [xid]\n");
    let e = plain.check_now().unwrap_err();
    assert!(e.message.contains("xid family off needs a restart"), "{e}");
    // A counters CSV named by the file is followed too.
    write(dir.path(), "c.csv", "DCGM_FI_DEV_SM_CLOCK, gauge, x\n");
    rewrite(&path, "version: 1\ndcgm:\n  counters_file: c.csv\n");
    assert!(rt.check_now().unwrap());
    assert_eq!(dcgm_fields(&rt), 1);
    rewrite(
        &dir.path().join("c.csv"),
        "DCGM_FI_DEV_SM_CLOCK, gauge, x\nDCGM_FI_DEV_GPU_UTIL, gauge, y\n",
    );
    assert!(rt.check_now().unwrap());
    assert_eq!(dcgm_fields(&rt), 2);
}

#[test]
fn without_a_file_the_flags_decide_and_no_status_is_served() {
    let rt = Runtime::new_unwatched(RuntimeSettings {
        path: None,
        ..settings(Path::new("unused"))
    })
    .unwrap();
    assert!(rt.status().is_none());
    assert!(rt.render_context().load().filter.is_none());
    assert_eq!(rt.tick(), Duration::from_secs(5));
    // The DCGM defaults of the generation.
    assert_eq!(
        dcgm_fields(&rt),
        compat::default_fields(Generation::V4_8).len()
    );
}

/// Probe 5, D14: a selection file saved with a UTF-8 byte-order mark was
/// refused as "more than one document", and a counters CSV with one as
/// naming no DCGM field.
#[test]
fn a_byte_order_mark_is_read_past() {
    let s = load_text(&format!("\u{feff}{FULL}"), Some(Generation::V4_8)).unwrap();
    assert!(!s.families.contains(Family::Fan));
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        dir.path(),
        "counters.csv",
        "\u{feff}DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n",
    );
    let s = load(&csv, &base(Some(Generation::V4_8))).unwrap();
    assert_eq!(s.dcgm_fields.unwrap().len(), 1);
}
