"""dcgm-exporter's dashboard and real DCGM queries, unchanged, answered by a
real Prometheus scraping `nvml-exporter --compat.dcgm`.

Three fleets, one at a time, each with a fake kubelet holding GPUs for pods
(a whole GPU, a GPU time-sliced between two pods, a MIG device):

- dgx-h100 with dcgm-exporter's default counters (the flag alone);
- dgx-a100 (MIG, no GPM) with the counters CSV the OpenShift console's GPU
  plugin ships for dcgm-exporter;
- hgx-b200 with our extended counters CSV.

Prometheus scrapes each exporter twice: as a plain job, and as OpenShift's
monitoring stack does (target labels of the exporter's own pod, no
honorLabels), where the exporter's `pod` label arrives as `exported_pod`.
Every panel and variable of dcgm-exporter's dashboard (grafana.com 12239)
and every query of tests/compat/queries.yml must answer with data, in
DCGM's units, except those listed per fleet below with the reason a real
dcgm-exporter on that fleet would give none either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import queries
from fake_kubelet import FakeKubelet, Pod
from promstack import Exporter, Prometheus, wait_until
from promstack import scrape_families as scrape

HERE = Path(__file__).resolve().parent
DATA = HERE / "compat"
DASHBOARD = DATA / "dcgm-exporter-dashboard.json"
QUERIES = yaml.safe_load((DATA / "queries.yml").read_text())

NO_GPM = "no GPM before Hopper: DCGM's profiling module alone measures graphics, tensor and DRAM activity"
NOT_DEFAULT = "not one of dcgm-exporter's default counters: list it in a counters CSV"

FLEETS = {
    "dgx-h100": {
        "csv": None,
        "empty": {
            "openshift console power limit of a GPU": NOT_DEFAULT,
            "openshift console max SM clock of a GPU": NOT_DEFAULT,
            "openshift console max memory clock of a GPU": NOT_DEFAULT,
            "alert GPUHighMemoryUsage": NOT_DEFAULT + " (DCGM_FI_DEV_FB_TOTAL)",
        },
    },
    "dgx-a100": {
        "csv": DATA / "console-plugin-nvidia-gpu-dcgm-metrics.csv",
        "empty": {
            "opencost GPU usage per container": NO_GPM,
            "openshift console GPUs in use": NO_GPM,
            "openshift console GPUs": NO_GPM,
            "openshift console GPU list": NO_GPM,
            "openshift console GPU utilization": NO_GPM,
            "Tensor Core Utilization": NO_GPM,
            "alert GPUHighMemoryUsage": "the console plugin's counters do not list DCGM_FI_DEV_FB_TOTAL",
        },
    },
    "hgx-b200": {
        "csv": DATA / "extended-counters.csv",
        "empty": {},
    },
}


def pods_for(metrics: dict) -> list[Pod]:
    """A whole GPU for a trainer, a GPU time-sliced between two notebooks,
    and a MIG device for an inference server, from the fleet's own ids."""
    mig_gpus = {s.labels["gpu"] for s in metrics.get("nvidia_gpu_mig_info", [])}
    whole = sorted((s.labels["gpu"], s.labels["uuid"]) for s in metrics["nvidia_gpu_info"]
                   if s.labels["gpu"] not in mig_gpus)
    mig = next(s.labels for s in metrics.get("nvidia_gpu_mig_info", []) if "mig_uuid" in s.labels)
    (_, trainer_gpu), (_, shared_gpu) = whole[0], whole[1]
    return [
        Pod("ml", "trainer-0", "main", "nvidia.com/gpu", [trainer_gpu]),
        Pod("ml", "notebook-a", "jupyter", "nvidia.com/gpu", [f"{shared_gpu}::0"]),
        Pod("research", "notebook-b", "jupyter", "nvidia.com/gpu", [f"{shared_gpu}::1"]),
        Pod("infer", "server-0", "triton", f"nvidia.com/mig-{mig['profile']}", [mig["mig_uuid"]]),
    ]


@pytest.fixture(scope="module", params=list(FLEETS))
def fleet(request, tmp_path_factory):
    scenario = request.param
    spec = FLEETS[scenario]
    work = tmp_path_factory.mktemp(f"dcgm-{scenario}")
    socket_path = work / "kubelet.sock"
    extra = ["--compat.dcgm", "--compat.dcgm.hostname", f"{scenario}-node",
             "--kubernetes.pod-resources-socket", str(socket_path),
             "--kubernetes.refresh-interval", "300ms"]
    if spec["csv"]:
        extra += ["--config.file", str(spec["csv"])]
    exporter = Exporter(work, scenario, interval="1s", extra=extra)
    kubelet = FakeKubelet(socket_path, work)
    prom = None
    try:
        exporter.wait_ready()
        kubelet.set_pods(pods_for(scrape(exporter)))
        kubelet.start()
        # OpenShift's ServiceMonitor gives each target its pod's labels and
        # keeps the exporter's as exported_*. That job keeps only the series
        # of pods, so that a sum over a GPU counts it once.
        prom = Prometheus(work, {"dcgm-exporter": [exporter.address], "openshift": [exporter.address]},
                          interval="1s", target_labels={"openshift": {
                              "namespace": "nvidia-gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p",
                              "container": "nvidia-dcgm-exporter"}},
                          job_options={"openshift": {"metric_relabel_configs": [
                              {"source_labels": ["exported_pod"], "regex": ".+", "action": "keep"}]}})
        prom.wait_ready()
        prom.wait_targets_up(2)
        # Pod labels, GPM and the rates need a refresh and two polls.
        wait_until(lambda: prom.query('DCGM_FI_DEV_GPU_UTIL{pod="trainer-0"}')
                   and prom.query("DCGM_FI_PROF_PCIE_TX_BYTES"), 30, "pods and rates in Prometheus")
        yield scenario, spec, exporter, prom
    finally:
        if prom:
            prom.stop()
        kubelet.stop()
        exporter.stop()


def a_whole_gpu_uuid(prom: Prometheus) -> str:
    series = prom.query('DCGM_FI_DEV_POWER_USAGE{job="dcgm-exporter",GPU_I_ID=""}')
    return sorted(s["metric"]["UUID"] for s in series)[0]


def answer(prom: Prometheus, expr: str, timeout: float = 20) -> list[dict]:
    """The query's answer, asked again for a while when empty: a store
    fills a few scrapes in."""
    try:
        return wait_until(lambda: prom.query(expr), timeout, expr, interval=0.5)
    except AssertionError:
        return []


def test_every_query_answers_in_dcgm_units(fleet):
    scenario, spec, _, prom = fleet
    uuid = a_whole_gpu_uuid(prom)
    problems = []
    for q in QUERIES:
        expr = q["expr"].replace("$uuid", uuid)
        expect_empty = q["name"] in spec["empty"]
        result = answer(prom, expr, timeout=3 if expect_empty else 20)
        values = [float(r["value"][1]) for r in result]
        if "min" in q:
            ok = bool(values) and values[0] >= q["min"]
        else:
            ok = bool(values)
        if expect_empty:
            if ok:
                problems.append(f"{q['name']}: answers, though listed empty ({spec['empty'][q['name']]})")
            continue
        if not ok:
            problems.append(f"{q['name']}: no data for {expr} ({q['source']})")
            continue
        lo, hi = q.get("range", (float("-inf"), float("inf")))
        if not all(lo <= v <= hi for v in values):
            problems.append(f"{q['name']}: {values} outside {lo}..{hi} ({q['source']})")
        for label in q.get("labels", []):
            if not all(r["metric"].get(label) for r in result):
                problems.append(f"{q['name']}: a series lacks {label}")
    assert not problems, f"{scenario}:\n" + "\n".join(problems)


def test_dcgm_exporter_s_dashboard_answers(fleet):
    scenario, spec, _, prom = fleet
    dash = json.loads(DASHBOARD.read_text())
    problems = []
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        # label_values(METRIC, LABEL): Grafana asks the label values API.
        metric, label = v["query"].removeprefix("label_values(").removesuffix(")").split(", ")
        values = prom.api(f"label/{label}/values", **{"match[]": metric})
        if not values:
            problems.append(f"variable {v['name']}: no values for {v['query']}")
    for title, _, expr, _ in queries.panel_queries(DASHBOARD):
        expr = queries.substitute(expr, instance=".*", gpu=".*")
        result = answer(prom, expr, timeout=3 if title in spec["empty"] else 20)
        if title in spec["empty"]:
            if result:
                problems.append(f"{title}: answers, though listed empty ({spec['empty'][title]})")
        elif not result:
            problems.append(f"{title}: no data for {expr}")
        elif title == "GPU SM Clocks":
            # The panel multiplies DCGM's MHz by 1e6 to show hertz.
            hz = [float(r["value"][1]) for r in result]
            assert all(1e8 <= v <= 4e9 for v in hz), hz
    assert not problems, f"{scenario}:\n" + "\n".join(problems)


def test_pod_labels_are_dcgm_exporter_s_and_a_shared_gpu_has_none(fleet):
    scenario, _, _, prom = fleet
    util = answer(prom, 'DCGM_FI_DEV_FB_USED{job="dcgm-exporter"}')
    by_pod = {(s["metric"].get("namespace"), s["metric"].get("pod"), s["metric"].get("container"))
              for s in util if "pod" in s["metric"]}
    # The trainer's whole GPU and the inference server's MIG instance: one
    # holder each. The time-sliced GPU's two notebooks share it: its series
    # carries neither (dcgm-exporter would name one of them).
    assert by_pod == {("ml", "trainer-0", "main"), ("infer", "server-0", "triton")}, by_pod
    [server] = [s for s in util if s["metric"].get("pod") == "server-0"]
    assert server["metric"]["GPU_I_ID"] and server["metric"]["GPU_I_PROFILE"]
    # As OpenShift scrapes it: the exporter's labels as exported_*.
    renamed = answer(prom, 'DCGM_FI_DEV_FB_USED{job="openshift",exported_pod="trainer-0"}')
    assert renamed and renamed[0]["metric"]["pod"] == "nvidia-dcgm-exporter-x7k2p"
    # The host label dcgm-exporter sets.
    assert all(s["metric"]["hostname"] == f"{scenario}-node" for s in util)
