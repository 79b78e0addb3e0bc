"""The Grafana dashboards: generated from dashboards/build.py, importable as
they are (datasource variable, job/instance/gpu variables, units and
descriptions on every panel, links between them), and type-checked against
Grafana's own schema types (@grafana/schema) with the TypeScript compiler.

tests/test_dashboards_live.py runs every panel query against a real
Prometheus scraping the real exporter."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DASH_DIR = ROOT / "dashboards"
NAMES = ["fleet-overview.json", "gpu-detail.json", "mig.json", "kubernetes.json",
         "workloads.json"]
TESTS_DIR = ROOT / "tests"
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
NO_QUERY_TYPES = {"row", "text"}


def load(name):
    return json.loads((DASH_DIR / name).read_text())


def panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def query_panels(dash):
    return [p for p in panels(dash) if p["type"] not in NO_QUERY_TYPES]


def test_generated_json_is_up_to_date():
    out = subprocess.run([sys.executable, str(DASH_DIR / "build.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name", NAMES)
def test_dashboard_shell(name):
    d = load(name)
    assert d["schemaVersion"] >= 39
    assert d["uid"] and d["title"]
    assert d.get("id") is None, "an exported id breaks import into another Grafana"
    assert "nvml-exporter" in d["tags"]
    assert d["description"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    # Issue 16: an optional cluster label, "All" matching series without it.
    cluster = variables["cluster"]
    assert cluster["includeAll"] and cluster["allValue"] == ".*"
    assert [v["name"] for v in d["templating"]["list"]][:3] == ["datasource", "cluster", "job"]
    for var in ("cluster", "job", "instance", "gpu"):
        v = variables[var]
        assert v["type"] == "query", var
        assert v["datasource"] == DS_REF, var
        assert v["query"]["query"].startswith("label_values("), var
    # Links to the other dashboards: by shared tag, keeping variables and time.
    link = next(link for link in d["links"] if link["type"] == "dashboards")
    assert link["tags"] == ["nvml-exporter"]
    assert link["includeVars"] and link["keepTime"]


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_has_unit_description_datasource_and_queries(name):
    d = load(name)
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p.get("description"), f"{name}: panel {p['title']!r} has no description"
        if p["type"] in NO_QUERY_TYPES:
            continue
        title = p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), f"{name}: {title!r} has no unit"
        assert p["datasource"] == DS_REF, f"{name}: {title!r} datasource is not $datasource"
        assert p["targets"], f"{name}: {title!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{name}: {title!r} repeats a refId"
        for t in p["targets"]:
            assert t["datasource"] == DS_REF, f"{name}: {title!r} query datasource"
            assert t["expr"].strip(), f"{name}: {title!r} empty query"
            assert "$job" in t["expr"], f"{name}: {title!r} ignores the job variable"
            assert "$instance" in t["expr"], f"{name}: {title!r} ignores the instance variable"


def _grid_cells(p):
    g = p["gridPos"]
    return {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}


@pytest.mark.parametrize("name", NAMES)
def test_panels_fit_the_grid_without_overlap(name):
    taken = set()
    for p in load(name)["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        cells = _grid_cells(p)
        assert not taken & cells, f"{p['title']!r} overlaps another panel"
        taken |= cells


# What unit a panel must have when all its queries read metrics of one base
# unit, by the metric name's suffix, per Prometheus naming conventions.
SUFFIX_UNITS = [
    (r"_celsius$", None, {"celsius"}),
    (r"_watts$", None, {"watt"}),
    (r"_joules_total$", "increase", {"joule"}),
    (r"_joules_total$", "rate", {"watt"}),
    # A bit error rate (1e-12 and below) reads in scientific notation, not
    # as a percentage that rounds to 0%.
    (r"_bit_error_ratio$", None, {"sci"}),
    (r"_ratio$", None, {"percentunit"}),
    (r"_hertz$", None, {"hertz"}),
    (r"_bytes$", None, {"bytes"}),
    (r"_bytes_total$", "rate", {"Bps"}),
    (r"_seconds$", None, {"s"}),
    (r"_seconds_total$", "rate", {"percentunit"}),
]
METRIC = re.compile(r"\b((?:nvidia_gpu|nvml_exporter)_[a-z0-9_]+)")
# A recorded rate of a counter, `level:<counter without _total>:rate5m`.
RECORDED_RATE = re.compile(r"\b[a-z_]+:((?:nvidia_gpu|nvml_exporter)_[a-z0-9_]+):rate5m\b")


def _expected_units(p):
    exprs = [RECORDED_RATE.sub(r"rate(\1_total)", t["expr"]) for t in p["targets"]]
    if any(re.match(r"\s*(count|topk\(\d+,\s*count)", e) for e in exprs):
        return None
    metrics = {m for e in exprs for m in METRIC.findall(e)}
    # A pod share is a dimensionless weight: a series joined onto it keeps
    # its own unit (the Kubernetes dashboard's panels).
    weights = {m for m in metrics if m.endswith("pod_share_ratio")}
    if metrics - weights:
        metrics -= weights
    elif all(e.lstrip().startswith("sum") for e in exprs):
        return None  # shares summed count GPUs held: no base unit
    # A rate times a duration (the range, a bar's interval) is an increase.
    fn = "increase" if all(re.search(r"\* \$__(range_s|interval_ms / 1000)", e)
                           for e in exprs) else "rate" if all(
        "rate(" in e for e in exprs) else (
        "increase" if all("increase(" in e for e in exprs) else None)
    for suffix, need_fn, units in SUFFIX_UNITS:
        if metrics and all(re.search(suffix, m) for m in metrics) and need_fn == fn:
            if suffix in ("_bytes$", "_watts$") and all(" / " in e for e in exprs):
                return {"percentunit"}
            return units
    return None


@pytest.mark.parametrize("name", NAMES)
def test_units_follow_metric_base_units(name):
    checked = 0
    for p in query_panels(load(name)):
        expected = _expected_units(p)
        if expected is None:
            continue
        checked += 1
        unit = p["fieldConfig"]["defaults"]["unit"]
        assert unit in expected, f"{name}: {p['title']!r} has unit {unit}, expected {expected}"
    assert checked >= 5, "the unit check matched too few panels to mean anything"


def test_units_cover_the_issue_list():
    units = {p["fieldConfig"]["defaults"]["unit"] for n in NAMES for p in query_panels(load(n))}
    for unit in ("percentunit", "bytes", "celsius", "watt", "joule", "hertz"):
        assert unit in units, unit


def _titles(name):
    return {p["title"] for p in panels(load(name))}


def test_panels_the_issue_asks_for():
    fleet = _titles("fleet-overview.json")
    for t in ("GPUs", "Healthy GPUs", "GPU health", "GPU utilization per node", "Memory used per node",
              "Power per node", "Energy per node", "Hottest GPUs", "Most ECC errors", "Most XIDs"):
        assert t in fleet, t
    detail = load("gpu-detail.json")
    by_title = {p["title"]: p for p in panels(detail)}
    assert by_title["Throttle reasons"]["type"] == "state-timeline"
    exprs = " ".join(t["expr"] for p in query_panels(detail) for t in p["targets"])
    for family in ("nvidia_gpu_utilization_ratio", "nvidia_gpu_activity_ratio",
                   "nvidia_gpu_memory_used_bytes", "nvidia_gpu_bar1_memory_used_bytes",
                   "nvidia_gpu_temperature_threshold_celsius", "nvidia_gpu_power_limit_watts",
                   "nvidia_gpu_clock_hertz", "nvidia_gpu_performance_state",
                   "nvidia_gpu_clock_throttle_active", "nvidia_gpu_pcie_bytes_total",
                   "nvidia_gpu_nvlink_bytes_total", "nvidia_gpu_ecc_errors_total",
                   "nvidia_gpu_retired_pages", "nvidia_gpu_remapped_rows",
                   "nvidia_gpu_xid_errors_total", "nvidia_gpu_processes"):
        assert family in exprs, family
    assert any("xid" in t["expr"] and "by (instance, gpu, xid)" in t["expr"]
               for t in by_title["XIDs by code"]["targets"])
    assert any("location" in t["expr"] for t in by_title["ECC errors by location"]["targets"])
    mig = load("mig.json")
    notes = [p for p in panels(mig) if p["type"] == "text"]
    assert any("A100" in p["options"]["content"] for p in notes), "MIG dashboard lacks the A100 note"
    mig_exprs = " ".join(t["expr"] for p in query_panels(mig) for t in p["targets"])
    for family in ("nvidia_gpu_mig_info", "nvidia_gpu_mig_memory_used_bytes",
                   "nvidia_gpu_mig_activity_ratio"):
        assert family in mig_exprs, family
    # Issue 11: who holds each GPU off Kubernetes, Slurm jobs and users and containers.
    workloads = {p["title"]: p for p in panels(load("workloads.json"))}
    assert workloads["GPUs by workload"]["type"] == "table"
    for title in ("MIG devices by workload", "GPU memory by Slurm job", "GPU memory by user",
                  "GPU memory by container", "GPU power by Slurm job"):
        assert title in workloads, title


def test_gpu_detail_names_the_mig_remap_blind_spot():
    """Issue 16: NVML does not report remapped rows on MIG-enabled GPUs; the
    GPU-detail dashboard must show which GPUs are blind, not an empty panel
    that reads as 'no remaps'."""
    detail = load("gpu-detail.json")
    blind = [p for p in query_panels(detail)
             if any("nvidia_gpu_mig_enabled" in t["expr"] and "nvidia_gpu_remapped_rows" in t["expr"]
                    for t in p["targets"])]
    assert blind, "no panel lists MIG-enabled GPUs without remap state"
    assert "MIG" in blind[0]["title"] and "remap" in blind[0]["title"].lower()
    assert "not supported on MIG-enabled GPUs" in blind[0]["description"]


def test_fleet_table_links_to_gpu_detail():
    detail_uid = load("gpu-detail.json")["uid"]
    raw = (DASH_DIR / "fleet-overview.json").read_text()
    assert f"/d/{detail_uid}/" in raw


# --------------------------------------------------------------------------
# Grafana's schema types, checked by the TypeScript compiler
# --------------------------------------------------------------------------

TS_PRELUDE = """import type { Dashboard } from '@grafana/schema';
// JSON cannot spell a TypeScript enum member, only its string value: accept
// the value wherever the schema declares an enum; everything else is checked
// as declared, excess properties included.
type Loosen<T> = T extends string ? (string extends T ? string : `${T}`)
  : T extends number ? T
  : T extends boolean ? T
  : T extends ReadonlyArray<infer U> ? Array<Loosen<U>>
  : T extends object ? { [K in keyof T]: Loosen<T[K]> }
  : T;
"""


def _tsc(tmp_path, dashboards: dict[str, str]):
    node_modules = TESTS_DIR / "node_modules"
    tsc = node_modules / ".bin" / "tsc"
    assert shutil.which("node"), "node not found"
    assert tsc.exists() and (node_modules / "@grafana" / "schema").exists(), \
        "run scripts/install-test-deps (npm install in tests/)"
    # The checked file must sit where module resolution finds tests/node_modules.
    check_dir = TESTS_DIR / ".tscheck"
    check_dir.mkdir(exist_ok=True)
    src = check_dir / f"dashboards-{tmp_path.name}.ts"
    body = "\n".join(f"export const d{i} = ({text}) satisfies Loosen<Dashboard>;"
                     for i, text in enumerate(dashboards.values()))
    src.write_text(TS_PRELUDE + body + "\n")
    cfg = tmp_path / "tsconfig.json"
    cfg.write_text(json.dumps({
        "compilerOptions": {"strict": True, "noEmit": True, "module": "esnext",
                            "moduleResolution": "bundler", "target": "es2020",
                            "skipLibCheck": True, "types": []},
        "files": [str(src)],
    }))
    try:
        return subprocess.run([str(tsc), "-p", str(cfg)], capture_output=True, text=True,
                              cwd=TESTS_DIR)
    finally:
        src.unlink()


def test_dashboards_satisfy_grafana_schema_types(tmp_path):
    out = _tsc(tmp_path, {n: (DASH_DIR / n).read_text() for n in NAMES})
    assert out.returncode == 0, out.stdout + out.stderr


def test_schema_check_rejects_a_broken_dashboard(tmp_path):
    wrong_type = load("mig.json")
    wrong_type["panels"][1]["gridPos"]["w"] = "wide"
    unknown_key = load("mig.json")
    unknown_key["refreshInterval"] = "30s"
    out = _tsc(tmp_path, {"wrong_type": json.dumps(wrong_type, indent=1),
                          "unknown_key": json.dumps(unknown_key, indent=1)})
    assert out.returncode != 0
    assert "Type 'string' is not assignable to type 'number'" in out.stdout, out.stdout
    assert "'\"refreshInterval\"' does not exist" in out.stdout, out.stdout
