"""Every query of every dashboard, run through a real Prometheus scraping the
real exporter on the simulated driver.

The fleet is the one the dashboards are for: a dgx-h100 node with the
default set (MIG on two GPUs, GPM), a dgx-a100 node (MIG without GPM) with
every opt-in family and detail switch on, a workstation (fans, display),
three Volta GPUs with incidents (retired pages, XIDs, a lost GPU and a hung
one: the error panels need them) and a GB200 NVL72 tray with NVLink per
link (module power, T.Limit margins, power smoothing, NVLink5 bit error
rates) and a GPU whose fabric bandwidth is degraded. Prometheus loads the shipped rule files,
recording rules included: the fleet panels read recorded series. With the
dashboard variables set to "All", each query must parse and return at least
one series. With the variables narrowed to the dgx-h100 node alone, only the
panels listed in EMPTY_ON_DGX_H100 may come back empty, each for a reason a
real H100 with the default set has too: every other panel works on the
defaults."""

import json
import re
import time
from pathlib import Path

import pytest

import queries
from promstack import Exporter, Prometheus, PromQLError

ROOT = Path(__file__).resolve().parent.parent

DASH_DIR = ROOT / "dashboards"
RULE_FILES = sorted((ROOT / "alerts").glob("*.rules.yml"))
OPT_IN = ["--collector.process_memory", "--collector.nvlink.per-link", "--collector.ecc.by-location",
          "--collector.gpm.all-metrics", "--collector.mig.memory-free", "--collector.topology"]
NAMES = ["fleet-overview.json", "gpu-detail.json", "mig.json"]
JOB = "nvml-exporter"
SCRAPE = "1s"

# Panels whose data a dgx-h100 node alone does not have, and why.
EMPTY_ON_DGX_H100 = {
    "Fan speed": "SXM GPUs are passively cooled: NVML has no fan",
    "Retired pages": "Hopper remaps rows; page retirement is Volta and older",
    "MIG GPUs without activity": "H100 has GPM, so every MIG GPU reports activity",
    "Most XIDs": "a healthy node has no XIDs",
    "GPUs that need an action": "a healthy node needs nothing",
    "XIDs by code": "a healthy node has no XIDs",
    "Last XID per code": "a healthy node has no XIDs",
    "NVML errors": "nothing fails on a healthy node",
    "Stuck driver calls": "no driver call is stuck on a healthy node",
    "Process memory": "opt-in: --collector.process_memory",
    "NVLink errors per link": "opt-in: --collector.nvlink.per-link",
    "NVLink link state": "opt-in: --collector.nvlink.per-link",
    "ECC errors by location": "opt-in: --collector.ecc.by-location",
    "GPU topology (nvidia-smi topo -m)": "opt-in: --collector.topology",
    "GPU CPU and NUMA affinity": "opt-in: --collector.topology",
    "Module and memory power": "an H100 has no module power scope (Grace superchips only)",
    "T.Limit margin": "the H100 board reports its thresholds in degrees",
    "Power smoothing lifetime": "Blackwell only",
    "NVLink fabric health": "a single-node HGX H100 reports no fabric health (real ones print N/A)",
    "NVLink bit error rate per link": "NVLink5 (Blackwell) only, and opt-in: --collector.nvlink.per-link",
    "GPUs per rack that need action": "an HGX H100 sits in no NVL72 rack: no platform info",
    "GPUs of the rack": "an HGX H100 sits in no NVL72 rack: no platform info",
}

# Served only with --workloads, which this fleet runs without:
# tests/test_workload_usage.py runs NvidiaGpuHeldIdle's expression on the
# real exporter with it.
SERVED_WITH_WORKLOADS = {"nvidia_gpu_workload_held_idle_seconds",
                         "nvml_exporter_workloads_last_refresh_timestamp_seconds"}


def substitute(expr: str, instance: str, gpu: str) -> str:
    """What Grafana sends for these variables: All is '.*' (the variables'
    allValue), the interval macros become durations."""
    return queries.substitute(expr, job=JOB, instance=instance, gpu=gpu, rate_interval="4s",
                              interval_s=1, range_s=30)


def grafana_regex_value(value: str) -> str:
    """How Grafana writes one selected value into a Prometheus =~ matcher:
    regex-escaped, backslashes doubled for the PromQL string literal."""
    return re.escape(value).replace("\\", "\\\\")


def dashboard_queries():
    for name in NAMES:
        dash = json.loads((DASH_DIR / name).read_text())
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                yield name, panel["title"], t["refId"], t["expr"]


def variable_queries():
    for name in NAMES:
        dash = json.loads((DASH_DIR / name).read_text())
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                yield name, v["name"], v["query"]["query"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("dashboards-live")
    exporters = [
        # The newest driver branch: every field-backed family is there.
        Exporter(work, "dgx-h100", name="h100", env={"NVML_SIM_DRIVER": "580.95.05"}),
        Exporter(work, "dgx-a100", extra=OPT_IN, name="a100"),
        Exporter(work, "workstation", name="workstation"),
        Exporter(work, str(ROOT / "tests" / "dashboards" / "volta-incidents.toml"), name="volta"),
        Exporter(work, str(ROOT / "tests" / "dashboards" / "gb200-tray.toml"),
                 extra=["--collector.nvlink.per-link"], name="gb200"),
    ]
    prom = None
    try:
        for e in exporters:
            e.wait_ready()
        prom = Prometheus(work, {JOB: [e.address for e in exporters]}, interval=SCRAPE,
                          rule_files=RULE_FILES)
        prom.wait_ready()
        prom.wait_targets_up(len(exporters))
        # The scenarios' incidents happen a few seconds after start and rate()
        # wants two samples: give every query a chance to have data (the
        # tests below then say which have none).
        # The per-node view waits too: on a loaded machine the dgx-h100
        # target can be a scrape or two behind the others, and the fleet
        # view alone does not show it.
        h100 = grafana_regex_value(exporters[0].address)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                {t for t, _ in run_all(prom, ".*", ".*")[1]}
                or {t for t, _ in run_all(prom, h100, ".*")[1]} - set(EMPTY_ON_DGX_H100)):
            time.sleep(1)
        yield {"prom": prom, "exporters": {e.name: e for e in exporters}}
    finally:
        if prom:
            prom.stop()
        for e in exporters:
            e.stop()


def run_all(prom, instance: str, gpu: str):
    """Runs every dashboard query; returns (rejected, empty) descriptions."""
    empty, broken = [], []
    for name, title, ref, expr in dashboard_queries():
        query = substitute(expr, instance, gpu)
        try:
            result = prom.query(query)
        except PromQLError as e:
            broken.append(f"{name} / {title} / {ref}: {e}\n    {query}")
            continue
        if not result:
            empty.append((title, f"{name} / {title} / {ref}:\n    {query}"))
    return broken, empty


def test_every_panel_query_returns_data_on_the_fleet(fleet):
    prom = fleet["prom"]
    assert len(list(dashboard_queries())) > 60, "too few queries: did the dashboards change shape?"
    broken, empty = run_all(prom, ".*", ".*")
    assert not broken, "queries Prometheus rejects:\n" + "\n".join(broken)
    assert not empty, "queries with no data on the simulated fleet:\n" + "\n".join(e for _, e in empty)


def test_panels_on_one_dgx_h100_node(fleet):
    prom = fleet["prom"]
    node = grafana_regex_value(fleet["exporters"]["h100"].address)
    broken, empty = run_all(prom, node, ".*")
    assert not broken, broken
    empty_titles = {title for title, _ in empty}
    unexpected = empty_titles - set(EMPTY_ON_DGX_H100)
    assert not unexpected, f"panels empty on a dgx-h100 node: {sorted(unexpected)}"
    # The allow-list must not hide panels that work: keep it honest.
    stale = set(EMPTY_ON_DGX_H100) - empty_titles
    assert not stale, f"EMPTY_ON_DGX_H100 lists panels that have data: {sorted(stale)}"


def test_single_gpu_selection(fleet):
    """A multi-value selection of two GPUs, as Grafana formats it."""
    prom = fleet["prom"]
    node = grafana_regex_value(fleet["exporters"]["h100"].address)
    expr = 'nvidia_gpu_power_usage_watts{job=~"$job", instance=~"$instance", gpu=~"$gpu"}'
    result = prom.query(substitute(expr, node, "(2|3)"))
    assert sorted(r["metric"]["gpu"] for r in result) == ["2", "3"]


def test_variable_queries_return_values(fleet):
    prom = fleet["prom"]
    for name, var, query in variable_queries():
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert m, f"{name}: variable {var} is not label_values(selector, label)"
        selector = substitute(m.group(1), ".*", ".*")
        values = prom.api(f"label/{m.group(2)}/values", **{"match[]": selector})
        if var == "cluster":
            # Optional: this single-cluster fleet has none, and "All" (.*)
            # still matches every series (the panel queries above prove it).
            assert values == [], values
            continue
        assert values, f"{name}: variable {var} has no values"
    gpus = prom.api("label/gpu/values", **{"match[]": "nvidia_gpu_info"})
    assert {str(i) for i in range(8)} <= set(gpus)


def test_every_metric_the_alert_rules_use_is_exported(fleet):
    """The rules are unit-tested on synthetic series; this ties their metric
    names and label values to what the real exporter serves."""
    import yaml

    prom = fleet["prom"]
    missing, checked = [], 0
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            # The recording rules: test_recorded_panels_answer_like_their_raw_form
            # (and tests/test_pod_attribution.py for the namespace ones).
            for rule in (r for r in group["rules"] if "alert" in r):
                # (?<!:): not the recorded series (instance:nvidia_gpu_...:count).
                for selector in re.findall(r"(?<![:\w])((?:nvidia_gpu|nvml_exporter)_\w+)(\{[^}]*\})?",
                                           rule["expr"]):
                    metric, matchers = selector
                    # Keep equality matchers on fixed label values (they name
                    # label values the exporter must spell the same way).
                    fixed = ",".join(m for m in re.findall(r'\w+="[^"]*"', matchers))
                    query = f"count({metric}{{{fixed}}})"
                    checked += 1
                    if not prom.query(query):
                        missing.append((metric, f"{rule['alert']}: {metric}{{{fixed}}}"))
    assert checked > 30, checked
    unexpected = [m for metric, m in missing if metric not in SERVED_WITH_WORKLOADS]
    assert not unexpected, "rules select series the exporter never serves:\n" + "\n".join(unexpected)
    stale = SERVED_WITH_WORKLOADS - {metric for metric, _ in missing}
    assert not stale, f"SERVED_WITH_WORKLOADS lists metrics served without --workloads: {sorted(stale)}"


def test_recorded_panels_answer_like_their_raw_form(fleet):
    """Each panel query that reads a recorded series, with the series
    replaced by the expression that records it (what scripts/fleet times
    as "without recording rules"), answers with the same series: the
    rules are what the panels mean."""
    prom = fleet["prom"]
    rules = queries.recorded_rules(RULE_FILES)
    checked = 0
    for name, title, ref, expr in dashboard_queries():
        if not queries.uses_recorded(expr):
            continue
        query = substitute(expr, ".*", ".*")
        raw = queries.expand(query, rules, step="1s")
        assert not queries.uses_recorded(raw), raw
        def answers():
            recorded = {json.dumps(r["metric"], sort_keys=True) for r in prom.query(query)}
            expanded = {json.dumps(r["metric"], sort_keys=True) for r in prom.query(raw)}
            return recorded, expanded

        # A recording rule writes on its evaluation, so a node whose rate
        # has just got its second sample appears in the raw form up to one
        # evaluation (1 s here) before its recorded series: allow a few.
        deadline = time.monotonic() + 10
        recorded, expanded = answers()
        while recorded != expanded and time.monotonic() < deadline:
            time.sleep(0.5)
            recorded, expanded = answers()
        assert recorded, f"{name} / {title} / {ref}: no data\n    {query}"
        assert recorded == expanded, f"{name} / {title} / {ref}:\n    {query}\n    {raw}"
        checked += 1
    assert checked >= 15, checked


def test_the_rack_view_shows_the_nvl72_tray(fleet):
    """Issue 49: the fleet dashboard's rack row, narrowed to the GB200 tray's
    rack by the Rack variable, lists its four GPUs with their tray and
    module, each with a verdict and a fabric health; another rack, none."""
    prom = fleet["prom"]
    dash = json.loads((DASH_DIR / "fleet-overview.json").read_text())
    (panel,) = [p for p in dash["panels"] if p["title"] == "GPUs of the rack"]
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}

    def run(ref, rack):
        return prom.query(queries.substitute(exprs[ref], job=JOB, chassis_serial=rack))

    places = run("A", "1820000000001")
    assert sorted((r["metric"]["tray"], r["metric"]["module_id"]) for r in places) == \
        [("4", "1"), ("4", "2"), ("4", "3"), ("4", "4")], places
    uuids = {r["metric"]["uuid"] for r in places}
    for ref in ("B", "C", "D"):
        assert {r["metric"]["uuid"] for r in run(ref, "1820000000001")} == uuids, ref
    # The gb200-tray's GPU 3 has degraded bandwidth from the start.
    issues = {r["metric"]["gpu"]: r["value"][1] for r in run("D", "1820000000001")}
    assert issues == {"0": "0", "1": "0", "2": "0", "3": "1"}, issues
    assert not run("A", "1820000000002")
