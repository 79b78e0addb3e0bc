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
use nvml_exporter::compat::fields::{Field, FieldKind, Source, Variant, FIELDS};
use nvml_exporter::compat::{default_fields, Generation};

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

fn names(fields: &[(&'static Field, Variant)]) -> BTreeSet<String> {
    fields.iter().map(|(f, v)| f.name(*v).to_string()).collect()
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
        "DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, y\n",
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
        e.log().contains("line 2: DCGM_FI_DEV_VGPU_LICENSE_STATUS"),
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
