//! dcgm-exporter's names (`--compat.dcgm`) on the real binary: the DCGM
//! series on dgx-h100, dgx-a100 (MIG, no GPM) and hgx-b200 are valid text
//! and OpenMetrics, lint clean in promtool but for the lint rules DCGM's
//! own names break (its documented exception), carry what the table says
//! each scenario has and nothing it has not; off, not one is served;
//! `--compat.dcgm.only` serves them instead of this exporter's. The name
//! map in docs/migrating-from-dcgm-exporter.md is the table's
//! (`UPDATE_GOLDEN=1` rewrites it, as `scripts/regenerate` does).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use common::{promtool_check, run_to_exit, samples, Exporter};
use nvml_exporter::compat::fields::{FieldKind, Source, FIELDS};
use nvml_exporter::compat::{default_fields, Generation, Selected};

/// The lint rules promtool applies that DCGM's own names cannot pass:
/// counters not ending in `_total` (`DCGM_FI_DEV_PCIE_REPLAY_COUNTER`),
/// a counter named for its type, and the camelCase `modelName` label.
fn dcgm_lint(line: &str) -> bool {
    let Some((name, problem)) = line.split_once(' ') else {
        return false;
    };
    name.starts_with("DCGM_")
        && [
            "counter metrics should have \"_total\" suffix",
            "metric name should not include type 'counter'",
            "label names should be written in 'snake_case' not 'camelCase'",
        ]
        .contains(&problem)
}

/// promtool's findings that are not DCGM's own names' exception.
fn promtool_problems(text: &str) -> Vec<String> {
    match promtool_check(text) {
        Ok(()) => Vec::new(),
        Err(out) => out
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty() && !dcgm_lint(l))
            .map(str::to_string)
            .collect(),
    }
}

/// The DCGM metric names of a scrape, with their series count.
fn dcgm_names(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in samples(text).iter().filter(|s| s.name.starts_with("DCGM_")) {
        *out.entry(s.name.clone()).or_default() += 1;
    }
    out
}

/// A scrape once every GPU has had two polls (GPM and the rates).
fn scrape(e: &Exporter, rate: &str) -> String {
    e.wait_ready();
    e.scrape_until(&format!("{rate} (two polls)"), |t| {
        t.contains(&format!("{rate}{{"))
    })
}

fn names(fields: &[Selected]) -> BTreeSet<String> {
    fields.iter().map(|s| s.name.to_string()).collect()
}

#[test]
fn dgx_h100_serves_every_default_field_it_has_as_valid_exposition() {
    let e = Exporter::simulate("dgx-h100", &["--compat.dcgm"]);
    let text = scrape(&e, "DCGM_FI_PROF_PCIE_TX_BYTES");
    let problems = promtool_problems(&text);
    assert!(problems.is_empty(), "promtool: {problems:#?}");
    let served = dcgm_names(&text);
    let mut want = names(&default_fields(Generation::V4_8));
    // Labels are not series; an XID only once one happened.
    want.retain(|n| n != "DCGM_FI_DRIVER_VERSION" && n != "DCGM_FI_DEV_XID_ERRORS");
    let got: BTreeSet<String> = served.keys().cloned().collect();
    assert_eq!(got, want, "default DCGM fields on dgx-h100");
    // GPUs 0 and 1 are in MIG mode with 10 GPU instances: one series per
    // instance, and no utilization there (NVML has none on MIG).
    assert_eq!(served["DCGM_FI_DEV_SM_CLOCK"], 6 + 10);
    assert_eq!(served["DCGM_FI_DEV_GPU_UTIL"], 6);
    assert!(text.contains("DCGM_FI_DRIVER_VERSION=\""), "driver label");
    let om = e.scrape_openmetrics();
    let parsed = common::openmetrics_parse(&om).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        parsed
            .iter()
            .any(|(n, t)| n == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" && t == "unknown"),
        "a DCGM counter is `unknown` in OpenMetrics: {parsed:?}"
    );
}

#[test]
fn dgx_a100_has_no_profiling_fields_and_mig_instances_have_their_memory() {
    let e = Exporter::simulate("dgx-a100", &["--compat.dcgm"]);
    let text = scrape(&e, "DCGM_FI_PROF_PCIE_TX_BYTES");
    assert!(promtool_problems(&text).is_empty());
    let served = dcgm_names(&text);
    // A100 has no GPM: DCGM's profiling module alone measures these.
    for absent in [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ] {
        assert!(!served.contains_key(absent), "{absent} on A100");
    }
    let fb: Vec<_> = samples(&text)
        .into_iter()
        .filter(|s| s.name == "DCGM_FI_DEV_FB_USED" && s.label("GPU_I_ID").is_some())
        .collect();
    assert!(!fb.is_empty());
    for s in &fb {
        assert!(
            s.label("GPU_I_PROFILE").is_some_and(|p| p.contains("g.")),
            "{s:?}"
        );
        assert_eq!(
            s.label("device"),
            Some(format!("nvidia{}", s.label("gpu").unwrap()).as_str())
        );
    }
}

#[test]
fn hgx_b200_under_4_9_names_serves_base_units() {
    let e = Exporter::simulate("hgx-b200", &["--compat.dcgm=4.9"]);
    let text = scrape(&e, "DCGM_FI_PROF_PCIE_TX_BYTES");
    assert!(promtool_problems(&text).is_empty());
    let served = dcgm_names(&text);
    for name in [
        "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        "DCGM_FI_DEV_FB_USED_BYTES",
        "DCGM_FI_DEV_FB_CAPACITY_BYTES",
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
    ] {
        assert!(served.contains_key(name), "{name} missing: {served:?}");
    }
    assert!(!served.contains_key("DCGM_FI_DEV_SM_CLOCK"));
    for s in samples(&text)
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_UTIL_RATIO")
    {
        let v: f64 = s.value.parse().unwrap();
        assert!((0.0..=1.0).contains(&v), "{s:?}");
    }
    assert!(text.contains("DCGM_FI_SYSTEM_DRIVER_VERSION=\""));
}

#[test]
fn off_serves_no_dcgm_name_and_only_serves_them_instead() {
    let e = Exporter::ready("dgx-h100", &[]);
    assert!(
        !e.scrape().contains("DCGM_"),
        "compat output off by default"
    );
    drop(e);
    let e = Exporter::ready(
        "dgx-h100",
        &[
            "--compat.dcgm",
            "--compat.dcgm.only",
            "--compat.dcgm.hostname=gpu-node-7",
        ],
    );
    let text = e.scrape();
    let names: BTreeSet<String> = samples(&text).into_iter().map(|s| s.name).collect();
    assert!(names.iter().all(|n| !n.starts_with("nvidia_")), "{names:?}");
    assert!(
        names.contains("nvml_exporter_nvml_up") && names.contains("process_resident_memory_bytes")
    );
    assert!(text.contains("DCGM_FI_DEV_GPU_TEMP{") && text.contains(",hostname=\"gpu-node-7\","));
    let (status, out) = run_to_exit(&["--simulate", "--compat.dcgm.only"], &[]);
    assert!(
        !status.success() && out.contains("needs --compat.dcgm"),
        "{out}"
    );
    let (status, out) = run_to_exit(&["--simulate", "--compat.dcgm=4.7"], &[]);
    assert!(
        !status.success() && out.contains("4.8.2, 4.8, 4.9"),
        "{out}"
    );
}

fn doc_path() -> PathBuf {
    common::repo_root().join("docs/migrating-from-dcgm-exporter.md")
}

const BEGIN: &str = "<!-- name map: generated from src/compat/fields.rs (UPDATE_GOLDEN=1 cargo test --test e2e compat::) -->\n";
const END: &str = "<!-- end of name map -->\n";

/// The name map as the migration guide prints it.
fn name_map() -> String {
    let mut out = String::from(
        "| id | name before 4.9 | unit | name in 4.9 | unit | type | default before 4.9 | default in 4.9 | here |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let yes = |b: bool| if b { "yes" } else { "" };
    for f in FIELDS {
        let current = if f.current == f.legacy {
            "same".to_string()
        } else {
            format!("`{}`", f.current)
        };
        let here = match f.source {
            Source::None(why) => format!("absent: {why}"),
            _ => match f.family {
                Some(family) => format!("{} (`{}`)", f.help.trim_end_matches('.'), family.name()),
                None => f.help.trim_end_matches('.').to_string(),
            },
        };
        out += &format!(
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {} |\n",
            f.id,
            f.legacy,
            f.legacy_unit.as_str(),
            current,
            f.current_unit.as_str(),
            match f.kind {
                FieldKind::Label => "label",
                k => k.as_str(),
            },
            yes(f.default_legacy),
            yes(f.default_current),
            here
        );
    }
    out
}

#[test]
fn the_migration_guide_prints_the_name_map() {
    let path = doc_path();
    let doc = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("the guide has the name map marker");
    let (_, tail) = rest.split_once(END).expect("the name map ends");
    let want = format!("{head}{BEGIN}{}{END}{tail}", name_map());
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert!(
        doc == want,
        "docs/migrating-from-dcgm-exporter.md's name map differs from src/compat/fields.rs; \
         run scripts/regenerate"
    );
}

#[test]
fn a_counters_csv_line_that_cannot_be_mapped_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("dcp-metrics-included.csv");
    std::fs::write(
        &csv,
        "# DCGM FIELD, Prometheus metric type, help message\nDCGM_FI_DEV_GPU_UTIL, gauge, x\nDCGM_FI_DEV_GPU_UTILISATION, gauge, y\n",
    )
    .unwrap();
    let (status, out) = run_to_exit(
        &[
            "--simulate",
            "--compat.dcgm",
            &format!("--config.file={}", csv.display()),
            &format!("--web.listen-address=127.0.0.1:{}", common::free_port()),
        ],
        &[],
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("line 3") && out.contains("DCGM_FI_DEV_GPU_UTILISATION"),
        "{out}"
    );
}

#[test]
fn a_counters_csv_selects_what_is_served_and_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_FI_DEV_LOW_UTIL_VIOLATION, counter, y\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "workstation",
        &["--compat.dcgm", &format!("--config.file={}", csv.display())],
    );
    let text = e.scrape();
    assert_eq!(
        dcgm_names(&text).keys().collect::<Vec<_>>(),
        ["DCGM_FI_DEV_GPU_TEMP"]
    );
    // The field that is never served here is said so, with its line.
    assert!(
        e.log().contains("line 2: DCGM_FI_DEV_LOW_UTIL_VIOLATION"),
        "{}",
        e.log()
    );
    let tmp = dir.path().join("counters.tmp");
    std::fs::write(&tmp, "DCGM_FI_DEV_POWER_USAGE, gauge, x\n").unwrap();
    std::fs::rename(&tmp, &csv).unwrap();
    let text = e.scrape_until("the new counters", |t| {
        t.contains("DCGM_FI_DEV_POWER_USAGE{")
    });
    assert!(!text.contains("DCGM_FI_DEV_GPU_TEMP{"));
    assert!(text.contains("nvml_exporter_config_reloads_total{result=\"success\"} 1"));
}

/// The counters files of every dcgm-exporter release and the ConfigMaps
/// users posted, as kept in tests/compat with their sources.
fn real_counters_files() -> Vec<PathBuf> {
    let root = common::repo_root().join("tests/compat");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("dcgm-exporter-counters"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort();
    // 22 distinct files across dcgm-exporter's 45 tags and main (SOURCES.md).
    assert_eq!(files.len(), 22, "{files:?}");
    for f in [
        "configmaps/issue-539_dcp-metrics.csv",
        "configmaps/go-dcgm-pr-91_dcp-metrics.csv",
        // A ConfigMap key mounted as a file: no .csv extension.
        "configmaps/issue-317/metrics",
    ] {
        files.push(root.join(f));
    }
    files
}

#[test]
fn every_counters_file_of_every_dcgm_exporter_release_and_real_configmaps_start() {
    for file in real_counters_files() {
        let (status, out) = run_to_exit(
            &[
                "--simulate",
                "dgx-h100",
                "--compat.dcgm",
                "--config.check",
                file.to_str().unwrap(),
            ],
            &[],
        );
        assert!(status.success(), "{}: {out}", file.display());
        // Every field line is served, or named with why it is not: none
        // is dropped without a word.
        let text = std::fs::read_to_string(&file).unwrap();
        let served = out
            .lines()
            .find_map(|l| l.strip_prefix("DCGM fields served ("))
            .unwrap_or_else(|| panic!("{}: {out}", file.display()));
        let served: BTreeSet<&str> = served.split_once("): ").unwrap().1.split(", ").collect();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let name = l.split(',').next().unwrap().trim();
            assert!(
                served.contains(name) || out.contains(&format!("note: line {}: {name} ", i + 1)),
                "{}: line {}: {name} neither served nor named: {out}",
                file.display(),
                i + 1
            );
        }
    }
}

#[test]
fn the_field_name_table_is_what_its_upstream_sources_say() {
    let script = common::repo_root().join("src/compat/names/generate.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value of the one series of `name` on GPU `gpu`.
fn value_of(text: &str, name: &str, gpu: &str) -> f64 {
    let s = samples(text);
    let mut found = s
        .iter()
        .filter(|s| s.name == name && s.label("gpu") == Some(gpu));
    let v = found
        .next()
        .unwrap_or_else(|| panic!("no {name} on gpu {gpu}"));
    assert!(found.next().is_none(), "{name} twice on gpu {gpu}");
    v.value.parse().unwrap()
}

#[test]
fn a_configmap_of_any_dcgm_names_is_served_as_written_with_its_types_and_units() {
    let dir = tempfile::tempdir().unwrap();
    // Mounted from a ConfigMap's `metrics` key: no extension.
    let csv = dir.path().join("metrics");
    std::fs::write(
        &csv,
        "# Format\n\
         DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n\
         DCGM_FI_DEV_FB_USED_BYTES, gauge, Framebuffer memory used (in bytes).\n\
         dcgm_sm_clock, gauge, 1.x name of the SM clock.\n\
         DCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\n\
         DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock in hertz.\n\
         DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n\
         DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, DCGM 4.6's name of field 203.\n\
         DCGM_FI_PROF_PCIE_TX_BYTES, counter, PCIe bytes sent.\n\
         DCGM_FI_DEV_PCIE_TX_THROUGHPUT, counter, PCIe TX (in KB).\n\
         DCGM_FI_DEV_CPU_UTIL_RATIO, gauge, a Grace CPU field.\n\
         DCGM_FI_PROF_NVDEC0_ACTIVE, gauge, Ratio of cycles NVDEC 0 is active.\n\
         DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "workstation",
        &[
            "--compat.dcgm=4.8",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = scrape(&e, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT");
    // The line's type and help, as dcgm-exporter serves them.
    assert!(
        text.contains("# TYPE DCGM_FI_PROF_PCIE_TX_BYTES counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# HELP DCGM_FI_PROF_PCIE_TX_BYTES PCIe bytes sent.\n"),
        "{text}"
    );
    // Two names of one field side by side, each in its own unit.
    let mib = value_of(&text, "DCGM_FI_DEV_FB_USED", "0");
    let bytes = value_of(&text, "DCGM_FI_DEV_FB_USED_BYTES", "0");
    assert!(
        mib > 0.0 && (bytes / 1_048_576.0).floor() == mib,
        "{mib} MiB, {bytes} bytes"
    );
    let mhz = value_of(&text, "DCGM_FI_DEV_SM_CLOCK", "0");
    assert_eq!(value_of(&text, "dcgm_sm_clock", "0"), mhz);
    assert_eq!(
        value_of(&text, "DCGM_FI_DEV_SM_CLOCK_HERTZ", "0"),
        mhz * 1e6
    );
    // DCGM 4.6 renamed field 203 without changing it: percent, as the old name.
    let util = value_of(&text, "DCGM_FI_DEV_GPU_UTIL", "0");
    assert!(util > 1.0, "{util}");
    assert_eq!(value_of(&text, "DCGM_FI_DEV_GPU_UTIL_RATIO", "0"), util);
    let kib = value_of(&text, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "0");
    let b = value_of(&text, "DCGM_FI_PROF_PCIE_TX_BYTES", "0");
    assert_eq!(kib, (b / 1024.0).trunc(), "{kib} KiB/s, {b} B/s");
    // The vGPU licence of a bare-metal GPU: DCGM's 0.
    assert_eq!(value_of(&text, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "0"), 0.0);
    // The field with no source here: logged with why, counted, not fatal.
    assert!(!text.contains("DCGM_FI_DEV_CPU_UTIL_RATIO{"));
    assert!(
        text.contains("nvml_exporter_config_dcgm_fields_not_served 1\n"),
        "{text}"
    );
    let log = e.log();
    let said = "line 11: DCGM_FI_DEV_CPU_UTIL_RATIO (DCGM field";
    assert!(log.contains(said), "{said}: {log}");
}

#[test]
fn dcgm_exporter_s_own_version_strings_pick_that_release_s_labels() {
    for (version, host, pci) in [
        // GPU Operator v26.3.0/1 and v26.3.2/3 ship these two: Hostname.
        ("4.5.1-4.8.0", "Hostname", true),
        ("4.5.3-4.8.2", "Hostname", true),
        // 4.8.3 renamed it (NVIDIA/dcgm-exporter#655).
        ("4.8.4", "hostname", true),
        // An image tag of a 3.4 release: no pci_bus_id yet.
        ("3.3.5-3.4.1-ubuntu22.04", "Hostname", false),
    ] {
        let e = Exporter::ready(
            "workstation",
            &[
                &format!("--compat.dcgm={version}"),
                "--compat.dcgm.only",
                "--compat.dcgm.hostname=node-7",
            ],
        );
        let text = e.scrape();
        let s = samples(&text);
        let temp = s
            .iter()
            .find(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
            .unwrap_or_else(|| panic!("{version}: {text}"));
        assert_eq!(temp.label(host), Some("node-7"), "{version}: {temp:?}");
        let other = if host == "Hostname" {
            "hostname"
        } else {
            "Hostname"
        };
        assert_eq!(temp.label(other), None, "{version}: {temp:?}");
        assert_eq!(
            temp.label("pci_bus_id").is_some(),
            pci,
            "{version}: {temp:?}"
        );
    }
    let (status, out) = run_to_exit(&["--simulate", "--compat.dcgm=1.1.0"], &[]);
    assert!(!status.success());
    assert!(
        out.contains("1.1.0") && out.contains("4.5.1-4.8.0"),
        "{out}"
    );
}

/// dcgm-exporter 4.10.0 renamed the PCIe and NVLink profiling rates
/// `..._BYTES_PER_SECOND` (its release notes), the PCIe pair in the
/// default set; everything else is 4.9's. A release after it is served as
/// 4.10, and the log says so once.
#[test]
fn dcgm_exporter_4_10_serves_the_renamed_rates_and_a_newer_release_is_served_as_4_10() {
    for version in ["4.10", "4.10.0", "4.11.2"] {
        let e = Exporter::simulate(
            "hgx-b200",
            &[&format!("--compat.dcgm={version}"), "--compat.dcgm.only"],
        );
        let text = scrape(&e, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND");
        assert!(promtool_problems(&text).is_empty());
        let served = dcgm_names(&text);
        for name in [
            "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
            "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
            "DCGM_FI_DEV_SM_CLOCK_HERTZ",
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
        ] {
            assert!(
                served.contains_key(name),
                "{version}: {name} missing: {served:?}"
            );
        }
        for old in [
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",
        ] {
            assert!(!served.contains_key(old), "{version}: {old} served");
        }
        assert!(text.contains("DCGM_FI_SYSTEM_DRIVER_VERSION=\""));
        let newer = "names a dcgm-exporter release newer than any known here";
        // The line comes before the start line, so the start line says
        // whether it will ever come.
        assert!(e.wait_log("nvml-exporter started", std::time::Duration::from_secs(60)));
        let log = e.log();
        assert_eq!(
            log.matches(newer).count(),
            usize::from(version == "4.11.2"),
            "{version}: {log}"
        );
    }
    // A 4.10 user's file: the NVLink rates by their new names, beside the
    // old name of the PCIe rate (custom collectors keep the old names).
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND, gauge, NVLink sent.\n\
         DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND, gauge, NVLink received.\n\
         DCGM_FI_PROF_PCIE_TX_BYTES, gauge, PCIe sent.\n\
         DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, PCIe sent.\n",
    )
    .unwrap();
    let e = Exporter::simulate(
        "dgx-h100",
        &[
            "--compat.dcgm=4.10.0",
            "--compat.dcgm.only",
            "--config.file",
            csv.to_str().unwrap(),
        ],
    );
    let text = scrape(&e, "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND");
    // GPU 2 of dgx-h100 is not in MIG mode: one series each.
    let old = value_of(&text, "DCGM_FI_PROF_PCIE_TX_BYTES", "2");
    assert!(old > 0.0);
    assert_eq!(
        value_of(&text, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "2"),
        old
    );
    assert!(value_of(&text, "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", "2") > 0.0);
}

#[test]
fn a_mig_instance_s_xid_carries_only_that_instance_s_series() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sim.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &["--compat.dcgm", "--compat.dcgm.only"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    common::sim_control(
        &socket,
        &[
            "xid",
            "--gpu",
            "1",
            "--code",
            "31",
            "--gpu-instance",
            "5",
            "--compute-instance",
            "0",
        ],
    );
    let text = e.scrape_until("the MIG XID", |t| t.contains("DCGM_FI_DEV_XID_ERRORS{"));
    let s = samples(&text);
    let instances = s
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_FB_USED" && s.label("gpu") == Some("1"))
        .count();
    assert!(
        instances > 1,
        "GPU 1 is a MIG GPU with several instances: {text}"
    );
    let xids: Vec<_> = s
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_XID_ERRORS")
        .collect();
    assert_eq!(xids.len(), 1, "{xids:#?}");
    assert_eq!(xids[0].label("GPU_I_ID"), Some("5"));
    assert_eq!(xids[0].label("err_code"), Some("31"));
}

/// dcgm-exporter 4.8.3's opt-in `DCGM_EXP_XID_ERRORS_TOTAL{xid}`
/// (`internal/pkg/collector/xid_total_collector.go`): a counter per
/// entity and code, from the first XID of that code on; none before, on
/// a healthy GPU; the entity's labels and the `xid` label.
#[test]
fn a_counters_file_asking_for_the_xid_total_gets_one_counter_per_code() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sim.sock");
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_EXP_XID_ERRORS_TOTAL, counter, XIDs by code.\n",
    )
    .unwrap();
    let e = Exporter::simulate_env(
        "dgx-h100",
        &[
            "--compat.dcgm=4.10",
            "--compat.dcgm.only",
            "--config.file",
            csv.to_str().unwrap(),
        ],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    let text = e.scrape_until("the temperature", |t| t.contains("DCGM_FI_DEV_GPU_TEMP{"));
    assert!(
        !text.contains("DCGM_EXP_XID_ERRORS_TOTAL{"),
        "no XID yet: {text}"
    );
    for code in ["48", "48", "79"] {
        common::sim_control(&socket, &["xid", "--gpu", "2", "--code", code]);
    }
    let text = e.scrape_until("three XIDs", |t| {
        t.contains("xid=\"79\"} 1") && t.contains("xid=\"48\"} 2")
    });
    assert!(promtool_problems(&text).is_empty());
    assert!(
        text.contains("# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n"),
        "{text}"
    );
    let s = samples(&text);
    let totals: Vec<_> = s
        .iter()
        .filter(|s| s.name == "DCGM_EXP_XID_ERRORS_TOTAL")
        .collect();
    assert_eq!(totals.len(), 2, "{totals:#?}");
    for t in &totals {
        assert_eq!(t.label("gpu"), Some("2"));
        assert!(
            t.label("UUID").is_some() && t.label("hostname").is_some(),
            "{t:?}"
        );
    }
    assert!(!e.log().contains("DCGM_EXP_XID_ERRORS_TOTAL is not served"));
}

/// dcgm-exporter 4.8.3's opt-in `DCGM_EXP_CLOCK_EVENTS_TOTAL{clock_event}`
/// (`clock_events_total_collector.go`): a reason counts each time it turns
/// on between two readings, the first reading only primes, and a reason
/// that never turned on has no series.
#[test]
fn the_clock_events_total_counts_each_reason_turning_on() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sim.sock");
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, x\nDCGM_EXP_CLOCK_EVENTS_TOTAL, counter, Clock events.\n",
    )
    .unwrap();
    let e = Exporter::simulate_env(
        "dgx-h100",
        &[
            "--compat.dcgm",
            "--compat.dcgm.only",
            "--config.file",
            csv.to_str().unwrap(),
        ],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    let mask = |t: &str| -> u64 {
        samples(t)
            .iter()
            .find(|s| s.name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" && s.label("gpu") == Some("2"))
            .map_or(0, |s| s.value.parse::<f64>().unwrap() as u64)
    };
    let total = |t: &str| -> Option<f64> {
        samples(t)
            .iter()
            .find(|s| {
                s.name == "DCGM_EXP_CLOCK_EVENTS_TOTAL"
                    && s.label("gpu") == Some("2")
                    && s.label("clock_event") == Some("hw_slowdown")
            })
            .map(|s| s.value.parse().unwrap())
    };
    let text = e.scrape_until("the reasons of GPU 2", |t| {
        t.contains("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{")
    });
    assert_eq!(mask(&text) & 0x8, 0);
    assert_eq!(total(&text), None, "nothing turned on yet: {text}");
    for round in 1..=2 {
        common::sim_control(
            &socket,
            &["throttle", "--gpu", "2", "--reasons", "hw-slowdown"],
        );
        let text = e.scrape_until("hw slowdown on", |t| mask(t) & 0x8 != 0);
        // The render that first sees the bit counts it.
        assert_eq!(total(&text), Some(f64::from(round)), "{text}");
        common::sim_control(&socket, &["throttle", "--gpu", "2", "--reasons", ""]);
        let text = e.scrape_until("hw slowdown off", |t| mask(t) & 0x8 == 0);
        assert_eq!(total(&text), Some(f64::from(round)), "off counts nothing");
    }
    let text = e.scrape();
    assert!(promtool_problems(&text).is_empty());
    assert!(text.contains("# TYPE DCGM_EXP_CLOCK_EVENTS_TOTAL counter\n"));
    assert!(!e
        .log()
        .contains("DCGM_EXP_CLOCK_EVENTS_TOTAL is not served"));
}

/// What DCGM prints where NVML has no value, on a fleet mixing an HBM
/// board (H100) with GDDR boards (L4, L40S: no memory temperature, no
/// NVLink), by generation. Expected from the cited behaviour
/// (docs/migrating-from-dcgm-exporter.md, "What DCGM prints where NVML has
/// no value"): up to 3.4, `DCGM_FI_DEV_MEMORY_TEMP` 0 on a board without
/// the sensor (#460) and `DCGM_FI_DEV_XID_ERRORS` 0 with `err_code="0"`,
/// `err_msg="No Error"` before the first XID (#700, #646,
/// `xid_errors.go`); later generations print neither; every generation
/// prints `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` 0 without NVLink.
#[test]
fn dcgm_s_own_zeros_by_generation_on_a_fleet_mixing_hbm_and_gddr() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[gpu]]\nmodel = \"h100-sxm5-80gb\"\n[[gpu]]\nmodel = \"l4\"\n[[gpu]]\nmodel = \"l40s\"\n",
    )
    .unwrap();
    for (generation, old) in [
        ("3.4", true),
        ("4.8.2", false),
        ("4.8", false),
        ("4.9", false),
        ("4.10", false),
    ] {
        let e = Exporter::ready(
            fleet.to_str().unwrap(),
            &[&format!("--compat.dcgm={generation}"), "--compat.dcgm.only"],
        );
        let text = e.scrape();
        let (temp, xid, nvlink) = if generation == "4.9" || generation == "4.10" {
            (
                "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
                "DCGM_FI_DEV_XID_ERROR",
                "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
            )
        } else {
            (
                "DCGM_FI_DEV_MEMORY_TEMP",
                "DCGM_FI_DEV_XID_ERRORS",
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            )
        };
        let s = samples(&text);
        let find = |name: &str, gpu: &str| {
            s.iter()
                .find(|x| x.name == name && x.label("gpu") == Some(gpu))
                .map(|x| {
                    (
                        x.value.parse::<f64>().unwrap(),
                        x.label("err_code").map(str::to_owned),
                        x.label("err_msg").map(str::to_owned),
                    )
                })
        };
        // The H100 reads its HBM temperature: served as read, every generation.
        assert!(
            find(temp, "0").is_some_and(|(v, ..)| v > 0.0),
            "{generation}: {text}"
        );
        for gddr in ["1", "2"] {
            let want = old.then_some((0.0, None, None));
            assert_eq!(find(temp, gddr), want, "{generation} gpu {gddr}: {temp}");
            assert_eq!(
                find(nvlink, gddr),
                Some((0.0, None, None)),
                "{generation} gpu {gddr}: {nvlink}"
            );
        }
        for gpu in ["0", "1", "2"] {
            let want = old.then(|| (0.0, Some("0".to_owned()), Some("No Error".to_owned())));
            assert_eq!(find(xid, gpu), want, "{generation} gpu {gpu}: {xid}");
        }
    }
}

/// A user's counters file with `label` rows: each field's value becomes a
/// label named exactly as the file names the field, on every series of the
/// device (dcgm-exporter `gpu_collector.go`, `labels[counter.FieldName]`),
/// with DCGM's value (the CUDA driver version as NVML's integer, the minor
/// number as its integer); a label row for a field not answered here
/// (`DCGM_FI_PROCESS_NAME`, DCGM's own process) is named in the log, not
/// fatal.
#[test]
fn label_rows_of_a_user_s_counters_file_label_the_device_s_series() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature.\n\
         DCGM_FI_DEV_NAME, label, Device name.\n\
         DCGM_FI_DRIVER_VERSION, label, Driver version.\n\
         DCGM_FI_DEV_MINOR_NUMBER, label, Minor number.\n\
         DCGM_FI_CUDA_DRIVER_VERSION, label, CUDA driver version.\n\
         DCGM_FI_DEV_GPU_UUID, label, UUID.\n\
         DCGM_FI_PROCESS_NAME, label, Process name.\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "workstation",
        &[
            "--compat.dcgm=4.8",
            "--compat.dcgm.only",
            "--config.file",
            csv.to_str().unwrap(),
        ],
    );
    let text = e.scrape();
    assert!(promtool_problems(&text).is_empty());
    let s = samples(&text);
    let temp = s
        .iter()
        .find(|x| x.name == "DCGM_FI_DEV_GPU_TEMP")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(temp.label("DCGM_FI_DEV_NAME"), temp.label("modelName"));
    assert!(temp.label("modelName").is_some());
    assert_eq!(temp.label("DCGM_FI_DEV_GPU_UUID"), temp.label("UUID"));
    assert!(temp
        .label("DCGM_FI_DRIVER_VERSION")
        .is_some_and(|v| v.contains('.')));
    let minor = temp
        .label("DCGM_FI_DEV_MINOR_NUMBER")
        .expect("minor number");
    assert!(minor.parse::<u32>().is_ok(), "{minor}");
    let cuda: u64 = temp
        .label("DCGM_FI_CUDA_DRIVER_VERSION")
        .expect("CUDA driver version")
        .parse()
        .unwrap();
    assert!(cuda >= 11000 && cuda.is_multiple_of(10), "{cuda}");
    assert_eq!(temp.label("DCGM_FI_PROCESS_NAME"), None);
    assert!(
        !text.contains("DCGM_FI_DEV_NAME{"),
        "a label row is no series"
    );
    let log = e.log();
    assert!(
        log.contains("DCGM_FI_PROCESS_NAME (DCGM field 3) is not served here"),
        "{log}"
    );
}

/// Issue 49: DCGM's platform fields 572-577 as label rows of a counters
/// file, on the NVL72 tray: each GPU's rack (chassis serial), slot, tray,
/// host and module, as nvmlDeviceGetPlatformInfo gives them (the
/// gb200-nvl72 scenario: chassis 1820000000001, slot 14, tray 4, host 1,
/// modules 2, 1, 4, 3 in GPU order). The InfiniBand GUID and the peer type
/// are not kept here: named in the log, not labels. On an H100, where the
/// driver has no platform info, none of the labels is there.
#[test]
fn platform_label_rows_name_each_gpu_s_rack_tray_and_module() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature.\n\
         DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID, label, IB GUID.\n\
         DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER, label, Chassis serial.\n\
         DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER, label, Slot.\n\
         DCGM_FI_DEV_PLATFORM_TRAY_INDEX, label, Tray.\n\
         DCGM_FI_DEV_PLATFORM_HOST_ID, label, Host.\n\
         DCGM_FI_DEV_PLATFORM_PEER_TYPE, label, Peer type.\n\
         DCGM_FI_DEV_PLATFORM_MODULE_ID, label, Module.\n",
    )
    .unwrap();
    let args = [
        "--compat.dcgm=4.8",
        "--compat.dcgm.only",
        "--config.file",
        csv.to_str().unwrap(),
    ];
    let platform = [
        "DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER",
        "DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER",
        "DCGM_FI_DEV_PLATFORM_TRAY_INDEX",
        "DCGM_FI_DEV_PLATFORM_HOST_ID",
        "DCGM_FI_DEV_PLATFORM_MODULE_ID",
    ];
    let e = Exporter::ready("gb200-nvl72", &args);
    let text = e.scrape();
    assert!(promtool_problems(&text).is_empty());
    let s = samples(&text);
    for (gpu, module) in [("0", "2"), ("1", "1"), ("2", "4"), ("3", "3")] {
        let temp = s
            .iter()
            .find(|x| x.name == "DCGM_FI_DEV_GPU_TEMP" && x.label("gpu") == Some(gpu))
            .unwrap_or_else(|| panic!("gpu {gpu}: {text}"));
        let got: Vec<Option<&str>> = platform.iter().map(|l| temp.label(l)).collect();
        assert_eq!(
            got,
            [
                Some("1820000000001"),
                Some("14"),
                Some("4"),
                Some("1"),
                Some(module)
            ],
            "gpu {gpu}: {temp:?}"
        );
        assert_eq!(temp.label("DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID"), None);
        assert_eq!(temp.label("DCGM_FI_DEV_PLATFORM_PEER_TYPE"), None);
    }
    assert!(
        !text.contains("DCGM_FI_DEV_PLATFORM_TRAY_INDEX{"),
        "a label row is no series"
    );
    let log = e.log();
    for absent in [
        "PLATFORM_INFINIBAND_GUID (DCGM field 571)",
        "PLATFORM_PEER_TYPE (DCGM field 576)",
    ] {
        assert!(
            log.contains(&format!("DCGM_FI_DEV_{absent} is not served here")),
            "{log}"
        );
    }

    let hopper = Exporter::ready("dgx-h100", &args);
    let text = hopper.scrape();
    let s = samples(&text);
    let temps: Vec<_> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_GPU_TEMP")
        .collect();
    let gpus: std::collections::BTreeSet<_> = temps.iter().filter_map(|t| t.label("gpu")).collect();
    assert_eq!(gpus.len(), 8, "{text}");
    for t in temps {
        for l in platform {
            assert_eq!(t.label(l), None, "an H100 has no platform info: {t:?}");
        }
    }
}

/// Every field of dcgm-exporter's default set has a series on every board
/// the simulator has, except where DCGM prints nothing either (its blank
/// for NVML's `NOT_SUPPORTED`: no memory temperature sensor on GDDR
/// boards, no row remapping on Volta and GeForce) and the profiling fields
/// where there is no GPM (before Hopper). Expected per board from its
/// hardware, not from this output.
#[test]
fn every_default_field_dcgm_answers_is_served_on_every_board() {
    // (board, remaps rows, has GPM); a memory temperature sensor is HBM's.
    let boards = [
        ("a100-sxm4-40gb", true, false),
        ("a100-sxm4-80gb", true, false),
        ("b200", true, true),
        ("b300", true, true),
        ("h100-sxm5-80gb", true, true),
        ("h200-nvl-141gb", true, true),
        ("h200-sxm5-141gb", true, true),
        ("l4", true, false),
        ("l40s", true, false),
        ("rtx-4090", false, false),
        ("rtx-pro-6000-blackwell-server", true, true),
        ("v100-sxm2-32gb", false, false),
    ];
    let hbm = |b: &str| {
        !matches!(
            b,
            "l4" | "l40s" | "rtx-4090" | "rtx-pro-6000-blackwell-server"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    let text: String = boards
        .iter()
        .map(|(b, ..)| format!("[[gpu]]\nmodel = \"{b}\"\n"))
        .collect();
    std::fs::write(&fleet, text).unwrap();
    let e = Exporter::simulate(
        fleet.to_str().unwrap(),
        &["--compat.dcgm=4.8", "--compat.dcgm.only"],
    );
    // The rates and GPM need two polls of each GPU: wait for every one.
    let gpms = boards.iter().filter(|(.., gpm)| *gpm).count();
    e.wait_ready();
    let text = e.scrape_until("two polls of every GPU", |t| {
        let n = |name: &str| {
            t.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count()
        };
        n("DCGM_FI_PROF_PCIE_TX_BYTES") == boards.len()
            && n("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") == boards.len()
            && n("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == gpms
    });
    let s = samples(&text);
    for (i, (board, remaps, gpm)) in boards.iter().enumerate() {
        let gpu = i.to_string();
        for f in default_fields(Generation::V4_8) {
            if f.kind == FieldKind::Label {
                continue;
            }
            let expected = match f.name {
                "DCGM_FI_DEV_MEMORY_TEMP" => hbm(board),
                // No XID yet: blank in DCGM, skipped from 4.8.2 on.
                "DCGM_FI_DEV_XID_ERRORS" => false,
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
                | "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
                | "DCGM_FI_DEV_ROW_REMAP_FAILURE" => *remaps,
                n if n.starts_with("DCGM_FI_PROF_") && !n.contains("PCIE") => *gpm,
                _ => true,
            };
            let served = s
                .iter()
                .any(|x| x.name == f.name && x.label("gpu") == Some(gpu.as_str()));
            assert_eq!(served, expected, "{board}: {}", f.name);
        }
    }
}

#[test]
fn a_mig_instance_s_reserved_and_used_percent_are_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_FB_FREE, gauge, x\nDCGM_FI_DEV_FB_USED, gauge, x\n\
         DCGM_FI_DEV_FB_RESERVED, gauge, x\nDCGM_FI_DEV_FB_USED_PERCENT, gauge, x\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "hgx-h200",
        &[
            "--compat.dcgm=4.8.2",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = e.scrape();
    let s = samples(&text);
    let of = |name: &str, gi: Option<&str>| -> f64 {
        s.iter()
            .find(|x| x.name == name && x.label("gpu") == Some("0") && x.label("GPU_I_ID") == gi)
            .unwrap_or_else(|| panic!("{name} {gi:?}: {text}"))
            .value
            .parse()
            .unwrap()
    };
    let instances: BTreeSet<&str> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_FB_RESERVED" && x.label("gpu") == Some("0"))
        .filter_map(|x| x.label("GPU_I_ID"))
        .collect();
    assert!(instances.len() > 1, "{text}");
    // The whole GPU reserves 614 MiB (GPU 1, not in MIG mode, shows it):
    // an instance's series carries what its own handle says, not that.
    let whole = s
        .iter()
        .find(|x| x.name == "DCGM_FI_DEV_FB_RESERVED" && x.label("GPU_I_ID").is_none())
        .unwrap();
    assert_eq!(whole.value, "614");
    for gi in instances {
        let reserved = of("DCGM_FI_DEV_FB_RESERVED", Some(gi));
        assert!(reserved < 614.0, "GI {gi}: {reserved}");
        let used = of("DCGM_FI_DEV_FB_USED", Some(gi));
        let free = of("DCGM_FI_DEV_FB_FREE", Some(gi));
        let pct = of("DCGM_FI_DEV_FB_USED_PERCENT", Some(gi));
        // Used over the instance's usable memory (whole MiB above: 2 MiB slack).
        let want = used / (used + free);
        assert!(
            (pct - want).abs() < 2.0 / (used + free),
            "GI {gi}: {pct} vs {want}"
        );
    }
}

#[test]
fn per_link_nvlink_fields_add_up_to_the_gpu_s() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    let mut text = String::from(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, x\nDCGM_FI_PROF_NVLINK_TX_BYTES, gauge, x\n",
    );
    for l in 0..18 {
        text += &format!("DCGM_FI_DEV_NVLINK_BANDWIDTH_L{l}, counter, x\n");
        text += &format!("DCGM_FI_PROF_NVLINK_L{l}_TX_BYTES, gauge, x\n");
    }
    std::fs::write(&csv, text).unwrap();
    let e = Exporter::simulate(
        "dgx-h100",
        &[
            "--compat.dcgm",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = scrape(&e, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0");
    let s = samples(&text);
    // A GPU not in MIG mode: one series per field.
    let gpu = s
        .iter()
        .find(|x| x.name == "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" && x.label("GPU_I_ID").is_none())
        .and_then(|x| x.label("gpu"))
        .expect("a whole GPU");
    let on_gpu0 = |prefix: &str, suffix: &str| -> (usize, f64) {
        let v: Vec<f64> = s
            .iter()
            .filter(|x| {
                x.name.starts_with(prefix)
                    && x.name.ends_with(suffix)
                    && x.label("gpu") == Some(gpu)
            })
            .map(|x| x.value.parse().unwrap())
            .collect();
        (v.len(), v.iter().sum())
    };
    let (links, per_link) = on_gpu0("DCGM_FI_DEV_NVLINK_BANDWIDTH_L", "");
    assert_eq!(links, 18, "H100's 18 links: {text}");
    let total = value_of(&text, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu);
    assert!(total > 0.0);
    // Each value is whole (DCGM truncates): the links' sum is within one
    // per link of the total's.
    assert!((total - per_link).abs() <= 18.0, "{total} vs {per_link}");
    let (n, tx) = on_gpu0("DCGM_FI_PROF_NVLINK_L", "_TX_BYTES");
    assert_eq!(n, 18);
    let all = value_of(&text, "DCGM_FI_PROF_NVLINK_TX_BYTES", gpu);
    assert!((all - tx).abs() <= all * 1e-9 + 1.0, "{all} vs {tx}");
}

/// Issue 38: fields users' counters files ask for that NVML answers are
/// served, not logged as missing: the applications clocks (also under
/// go-dcgm's base-unit name), the instantaneous draw and the GPU count,
/// each reading switched on only because the file asks for it.
#[test]
fn application_clocks_instant_power_and_the_gpu_count_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_APP_SM_CLOCK, gauge, SM application clock.\n\
         DCGM_FI_DEV_APP_MEM_CLOCK, gauge, Memory application clock.\n\
         DCGM_FI_DEV_SM_APP_CLOCK_HERTZ, gauge, go-dcgm base-unit name.\n\
         DCGM_FI_DEV_MAX_SM_CLOCK, gauge, Max SM clock.\n\
         DCGM_FI_DEV_POWER_USAGE_INSTANT, gauge, Instant power.\n\
         DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX, gauge, Max power limit.\n\
         DCGM_FI_DEV_COUNT, gauge, GPUs.\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "dgx-h100",
        &["--compat.dcgm", &format!("--config.file={}", csv.display())],
    );
    let text = e.scrape();
    assert!(
        !text.contains("nvml_exporter_config_dcgm_fields_not_served 1"),
        "{text}"
    );
    let s = samples(&text);
    let count: Vec<(&str, &str)> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_COUNT")
        .map(|x| (x.label("gpu").unwrap(), x.value.as_str()))
        .collect();
    // On every GPU's series, and every MIG instance's (dcgm-exporter serves
    // a field of no entity on each entity it watches), the node's 8: 6
    // whole GPUs and the 7 + 3 instances of GPUs 0 and 1.
    assert_eq!(count.len(), 16, "{text}");
    assert!(count.iter().all(|(_, v)| *v == "8"), "{count:?}");
    let gpus: BTreeSet<&str> = count.iter().map(|(g, _)| *g).collect();
    assert_eq!(gpus.len(), 8);
    for gpu in ["2", "7"] {
        let app = value_of(&text, "DCGM_FI_DEV_APP_SM_CLOCK", gpu);
        let max = value_of(&text, "DCGM_FI_DEV_MAX_SM_CLOCK", gpu);
        // An applications clock is a settable SM target: MHz, at most the max.
        assert!(app > 100.0 && app <= max, "{app} MHz vs max {max}");
        assert_eq!(
            value_of(&text, "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ", gpu),
            app * 1e6
        );
        assert!(value_of(&text, "DCGM_FI_DEV_APP_MEM_CLOCK", gpu) > 100.0);
        let watts = value_of(&text, "DCGM_FI_DEV_POWER_USAGE_INSTANT", gpu);
        let limit = value_of(&text, "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", gpu);
        assert!(
            watts > 10.0 && watts <= limit * 1.1,
            "{watts} W, limit {limit}"
        );
    }
    // The readings behind them are this exporter's opt-in families,
    // sampled because the file asks; their own series stay off.
    for own in [
        "nvidia_gpu_clock_applications_hertz",
        "nvidia_gpu_power_instant_watts",
    ] {
        assert!(!text.contains(own), "{own}");
    }
}

/// Issue 38: `GPU_I_PROFILE` as DCGM spells it, `<slices>g.<GiB rounded
/// up>gb` from the instance's memory, not NVML's marketing name: on an
/// H200 (3g.71gb of 71424 MiB, 2g.35gb of 33280 MiB, 1g.18gb of 16384 MiB,
/// as `nvidia-smi mig -lgip` prints them) dcgm-exporter labels 3g.70gb,
/// 2g.33gb and 1g.16gb, and queries copied from it select those.
#[test]
fn gpu_i_profile_is_dcgm_s_name_of_the_instance() {
    let e = Exporter::ready("hgx-h200", &["--compat.dcgm=4.8.2", "--compat.dcgm.only"]);
    let text = e.scrape();
    let s = samples(&text);
    let profiles: BTreeMap<&str, &str> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_FB_USED" && x.label("gpu") == Some("0"))
        .filter_map(|x| Some((x.label("GPU_I_ID")?, x.label("GPU_I_PROFILE")?)))
        .collect();
    let want: BTreeMap<&str, &str> = [
        ("2", "3g.70gb"),
        ("3", "2g.33gb"),
        ("9", "1g.16gb"),
        ("10", "1g.16gb"),
    ]
    .into_iter()
    .collect();
    assert_eq!(profiles, want, "{text}");
}

/// Issue 38: a MIG instance's BAR1 is its own, read from its handle as
/// DCGM reads it, not the whole GPU's repeated on every instance: the
/// instances' totals add up to at most the GPU's.
#[test]
fn a_mig_instance_s_bar1_is_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_BAR1_TOTAL, gauge, x\nDCGM_FI_DEV_BAR1_USED, gauge, x\n\
         DCGM_FI_DEV_BAR1_FREE, gauge, x\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "hgx-h200",
        &[
            "--compat.dcgm=4.8.2",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = e.scrape();
    let s = samples(&text);
    let of = |name: &str, gpu: &str, gi: Option<&str>| -> Option<f64> {
        s.iter()
            .find(|x| x.name == name && x.label("gpu") == Some(gpu) && x.label("GPU_I_ID") == gi)
            .map(|x| x.value.parse().unwrap())
    };
    // GPU 1 of the scenario is not in MIG mode: the board's BAR1.
    let whole = of("DCGM_FI_DEV_BAR1_TOTAL", "1", None).expect("GPU 1's BAR1");
    let instances: Vec<&str> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_BAR1_TOTAL" && x.label("gpu") == Some("0"))
        .filter_map(|x| x.label("GPU_I_ID"))
        .collect();
    assert_eq!(instances.len(), 4, "{text}");
    let mut sum = 0.0;
    for gi in instances {
        let total = of("DCGM_FI_DEV_BAR1_TOTAL", "0", Some(gi)).unwrap();
        let used = of("DCGM_FI_DEV_BAR1_USED", "0", Some(gi)).unwrap();
        let free = of("DCGM_FI_DEV_BAR1_FREE", "0", Some(gi)).unwrap();
        assert!(total > 0.0 && total < whole, "GI {gi}: {total} of {whole}");
        assert_eq!(used + free, total, "GI {gi}");
        sum += total;
    }
    assert!(sum <= whole, "{sum} over {whole}");
}

/// Issue 38: the tensor pipe by instruction kind (DCGM's IMMA, HMMA and
/// DFMA fields) comes from GPM as the whole pipe does, per GPU and per MIG
/// instance; none can be busier than the pipe.
#[test]
fn tensor_sub_pipes_come_from_gpm() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, x\n\
         DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE, gauge, x\n\
         DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE, gauge, x\n\
         DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE, gauge, x\n",
    )
    .unwrap();
    let e = Exporter::simulate(
        "dgx-h100",
        &[
            "--compat.dcgm",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = scrape(&e, "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE");
    assert!(!text.contains("dcgm_fields_not_served 1"), "{text}");
    let s = samples(&text);
    let key = |x: &common::Sample| {
        (
            x.label("gpu").map(str::to_string),
            x.label("GPU_I_ID").map(str::to_string),
        )
    };
    let tensor: BTreeMap<_, f64> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
        .map(|x| (key(x), x.value.parse().unwrap()))
        .collect();
    for kind in ["IMMA", "HMMA", "DFMA"] {
        let name = format!("DCGM_FI_PROF_PIPE_TENSOR_{kind}_ACTIVE");
        let got: Vec<_> = s.iter().filter(|x| x.name == name).collect();
        // Every entity the whole pipe is served for, MIG instances included.
        assert_eq!(got.len(), tensor.len(), "{name}: {text}");
        for x in got {
            let v: f64 = x.value.parse().unwrap();
            let all = tensor[&key(x)];
            assert!(
                (0.0..=all + 1e-9).contains(&v),
                "{name} {v} over the pipe's {all}"
            );
        }
    }
}

/// Issue 38: `DCGM_FI_DEV_VGPU_LICENSE_STATUS`, in dcgm-exporter's default
/// set, as DCGM answers it: 0 on every bare-metal GPU and MIG instance,
/// where NVML's nvmlDeviceGetGridLicensableFeatures says grid licensing is
/// unsupported. The call is made because the DCGM field asks for it, and
/// only then: this exporter's own output makes no such call, and its own
/// series (`nvidia_gpu_vgpu_licensed`, a vGPU guest's licence) stays off.
#[test]
fn the_vgpu_licence_is_dcgm_s_0_on_bare_metal_and_read_only_when_asked() {
    let e = Exporter::ready("dgx-h100", &["--compat.dcgm", "--collector.driver_time"]);
    let text = e.scrape_until("the licence of every GPU", |t| {
        t.matches("DCGM_FI_DEV_VGPU_LICENSE_STATUS{").count() == 16
    });
    let s = samples(&text);
    let licence: Vec<_> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_DEV_VGPU_LICENSE_STATUS")
        .collect();
    // 6 whole GPUs and the 7 + 3 MIG instances of GPUs 0 and 1 (DCGM
    // answers a GPU instance's device field from its GPU).
    assert_eq!(licence.len(), 16, "{text}");
    assert!(licence.iter().all(|x| x.value == "0"), "{licence:?}");
    let gpus: BTreeSet<&str> = licence.iter().filter_map(|x| x.label("gpu")).collect();
    assert_eq!(gpus.len(), 8);
    assert!(text.contains("family=\"mode.vgpu-license\""), "{text}");
    assert!(!text.contains("nvidia_gpu_vgpu_licensed"), "{text}");

    let own = Exporter::ready("dgx-h100", &["--collector.driver_time"]);
    let text = own.scrape_until("driver time", |t| {
        t.contains("nvml_exporter_driver_calls_total{")
    });
    assert!(!text.contains("vgpu"), "{text}");

    // A vGPU guest holding its licence: 1, DCGM's and this exporter's own.
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("vgpu.toml");
    std::fs::write(
        &scenario,
        "name = \"vgpu\"\n[[gpu]]\nmodel = \"h100-sxm5-80gb\"\nvirtualization_mode = \"vgpu\"\n",
    )
    .unwrap();
    let guest = Exporter::ready(
        scenario.to_str().unwrap(),
        &["--compat.dcgm", "--collector.mode.vgpu-license"],
    );
    let text = guest.scrape_until("the guest's licence", |t| {
        t.contains("nvidia_gpu_vgpu_licensed{")
    });
    assert_eq!(value_of(&text, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "0"), 1.0);
    assert_eq!(value_of(&text, "nvidia_gpu_vgpu_licensed", "0"), 1.0);
}

/// Issue 38: dcgm-exporter reads its HPC job mapping directory from
/// `DCGM_HPC_JOB_MAPPING_DIR` as well as `--hpc-job-mapping-dir`
/// (NVIDIA/dcgm-exporter `pkg/cmd/app.go`), and GPU Operator sets that
/// variable: a pod spec or unit file moved over keeps `hpc_job` on the DCGM
/// series. The flag wins over the variable.
#[test]
fn dcgm_s_job_mapping_variable_labels_the_dcgm_series() {
    let dir = tempfile::tempdir().unwrap();
    let (map, other, proc) = (
        dir.path().join("map"),
        dir.path().join("other"),
        dir.path().join("proc"),
    );
    for d in [&map, &other, &proc] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(map.join("2"), "4242\n").unwrap();
    std::fs::write(other.join("3"), "77\n").unwrap();
    // Empty host directories: the simulated pids are no processes here, so
    // the mapping directory is the only source of jobs.
    let args = [
        "--compat.dcgm",
        "--workloads.refresh-interval=300ms",
        &format!("--path.procfs={}", proc.display()),
        &format!("--path.rootfs={}", proc.display()),
    ];
    let env = [("DCGM_HPC_JOB_MAPPING_DIR", map.to_str().unwrap())];
    let jobs = |text: &str| -> BTreeSet<(String, String)> {
        samples(text)
            .iter()
            .filter(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
            .filter_map(|s| Some((s.label("gpu")?.to_string(), s.label("hpc_job")?.to_string())))
            .collect()
    };
    let e = Exporter::simulate_env("dgx-h100", &args, &env);
    e.wait_ready();
    let text = e.scrape_until("hpc_job from DCGM_HPC_JOB_MAPPING_DIR", |t| {
        !jobs(t).is_empty()
    });
    assert_eq!(
        jobs(&text),
        BTreeSet::from([("2".to_string(), "4242".to_string())]),
        "{text}"
    );
    // This exporter's own families never carry it.
    assert!(samples(&text)
        .iter()
        .all(|s| s.name.starts_with("DCGM_") || s.label("hpc_job").is_none()));
    drop(e);

    let flag = format!("--hpc-job-mapping-dir={}", other.display());
    let mut with_flag = args.to_vec();
    with_flag.push(&flag);
    let e = Exporter::simulate_env("dgx-h100", &with_flag, &env);
    e.wait_ready();
    let text = e.scrape_until("hpc_job from the flag's directory", |t| !jobs(t).is_empty());
    assert_eq!(
        jobs(&text),
        BTreeSet::from([("3".to_string(), "77".to_string())]),
        "{text}"
    );
}

/// Issue 38: the per-engine GPM fields (DCGM 1017-1034: NVDEC 0-7, NVJPG
/// 0-7, OFA 0-1) are each engine's own GPM activity, a 0-1 ratio, served
/// when a counters file asks for them (the default set does not grow):
/// an H100's 7 decoders, 7 JPEG engines and 1 OFA, a 1g MIG instance's one
/// decoder and JPEG engine, and no series for an engine the GPU or instance
/// lacks. In nvml-sim each decoder runs at a tenth of the graphics
/// activity, each JPEG engine at a twentieth, the OFA at a fiftieth.
#[test]
fn per_engine_gpm_fields_are_each_engine_s_own() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("engines.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, graphics\n\
         DCGM_FI_PROF_NVDEC0_ACTIVE, gauge, NVDEC 0\n\
         DCGM_FI_PROF_NVDEC6_ACTIVE, gauge, NVDEC 6\n\
         DCGM_FI_PROF_NVDEC7_ACTIVE, gauge, NVDEC 7\n\
         DCGM_FI_PROF_NVDEC_UTIL_1_RATIO, gauge, DCGM 4.6's name of NVDEC 1\n\
         DCGM_FI_PROF_NVJPG0_ACTIVE, gauge, NVJPG 0\n\
         DCGM_FI_PROF_NVJPG1_ACTIVE, gauge, NVJPG 1\n\
         DCGM_FI_PROF_NVOFA0_ACTIVE, gauge, OFA 0\n\
         DCGM_FI_PROF_NVOFA1_ACTIVE, gauge, OFA 1\n",
    )
    .unwrap();
    let e = Exporter::ready(
        "dgx-h100",
        &[
            "--compat.dcgm",
            "--compat.dcgm.only",
            &format!("--config.file={}", csv.display()),
        ],
    );
    let text = e.scrape_until("every GPU's GPM over two polls", |t| {
        samples(t)
            .iter()
            .filter(|s| s.name == "DCGM_FI_PROF_NVDEC0_ACTIVE")
            .count()
            == 16
    });
    assert!(
        text.contains("nvml_exporter_config_dcgm_fields_not_served 0\n"),
        "{text}"
    );
    let s = samples(&text);
    let of = |name: &str, gpu: &str, gi: Option<&str>| -> Option<f64> {
        s.iter()
            .find(|x| x.name == name && x.label("gpu") == Some(gpu) && x.label("GPU_I_ID") == gi)
            .map(|x| x.value.parse().unwrap())
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-6;
    // A whole H100 (GPU 2): 7 decoders, 7 JPEG engines, 1 OFA.
    let gr = of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "2", None).unwrap();
    assert!(gr > 0.05, "{gr}");
    for name in [
        "DCGM_FI_PROF_NVDEC0_ACTIVE",
        "DCGM_FI_PROF_NVDEC6_ACTIVE",
        "DCGM_FI_PROF_NVDEC_UTIL_1_RATIO",
    ] {
        let v = of(name, "2", None).unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(near(v, gr * 0.1), "{name} {v} vs graphics {gr}");
    }
    let jpg = of("DCGM_FI_PROF_NVJPG1_ACTIVE", "2", None).unwrap();
    assert!(near(jpg, gr * 0.05), "{jpg} vs {gr}");
    let ofa = of("DCGM_FI_PROF_NVOFA0_ACTIVE", "2", None).unwrap();
    assert!(near(ofa, gr * 0.02), "{ofa} vs {gr}");
    for absent in ["DCGM_FI_PROF_NVDEC7_ACTIVE", "DCGM_FI_PROF_NVOFA1_ACTIVE"] {
        assert_eq!(of(absent, "2", None), None, "{absent}: {text}");
    }
    // A MIG GPU instance's own engines: every instance of GPU 0 has its
    // decoder 0, and a 1g instance no second decoder and no OFA.
    let gi: Vec<&str> = s
        .iter()
        .filter(|x| x.name == "DCGM_FI_PROF_NVDEC0_ACTIVE" && x.label("gpu") == Some("0"))
        .filter_map(|x| x.label("GPU_I_ID"))
        .collect();
    assert_eq!(gi.len(), 7, "{text}");
    for id in gi {
        let gr = of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0", Some(id)).unwrap();
        let dec = of("DCGM_FI_PROF_NVDEC0_ACTIVE", "0", Some(id)).unwrap();
        assert!(near(dec, gr * 0.1), "GPU_I_ID {id}: {dec} vs {gr}");
        assert_eq!(of("DCGM_FI_PROF_NVDEC_UTIL_1_RATIO", "0", Some(id)), None);
        assert_eq!(of("DCGM_FI_PROF_NVOFA0_ACTIVE", "0", Some(id)), None);
    }
    // The reading is GPM's full metric set, switched on for these fields;
    // this exporter's own families stay off.
    assert!(!text.contains("nvidia_gpu_activity_ratio"), "{text}");
}

/// `major.minor` of a version text (`4.10.0`, `4.10`).
fn major_minor(v: &str) -> (u32, u32) {
    let mut parts = v
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("{v}")));
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

/// The README's comparison names the dcgm-exporter release it describes;
/// a table older than the newest generation the migration guide (and
/// `--compat.dcgm`) knows describes a peer that has moved on, and its
/// "work unchanged" sentence promises too little or too much.
#[test]
fn the_readme_comparison_is_of_the_newest_dcgm_exporter_the_docs_know() {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let section = &readme[readme.find("## How it compares").expect("the section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let header = section
        .lines()
        .find(|l| l.starts_with("| | nvml-exporter |"))
        .expect("the table's header");
    let named = header
        .split('|')
        .map(str::trim)
        .find_map(|c| c.strip_prefix("dcgm-exporter "))
        .unwrap_or_else(|| panic!("the header names no dcgm-exporter release: {header}"));
    let guide = std::fs::read_to_string(doc_path()).unwrap();
    let newest_doc = guide
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|g| g.split('.').all(|p| p.parse::<u32>().is_ok()) && g.contains('.'))
        .map(major_minor)
        .max()
        .expect("the guide's generation table");
    let newest_code = major_minor(Generation::NEWEST.as_str());
    assert_eq!(
        newest_doc, newest_code,
        "the guide's generations and --compat.dcgm's"
    );
    assert!(
        major_minor(named) >= newest_doc,
        "README compares dcgm-exporter {named}, older than {newest_doc:?} in docs/migrating-from-dcgm-exporter.md"
    );
    let promise = format!("3.4 to {}.{}", newest_doc.0, newest_doc.1);
    assert!(
        section.contains(&promise),
        "the sentence under the table should say {promise}"
    );
}
