"""Kubernetes pod attribution end to end.

The real exporter runs on the simulated dgx-h100 fleet with `--kubernetes`
against a fake kubelet speaking the real pod-resources v1 gRPC API on a unix
socket. Pods come and go; GPUs are held whole, time-sliced between two pods,
and as MIG devices. A real Prometheus then answers the `sum by (namespace)`
query the docs give.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import queries
from fake_kubelet import FakeKubelet, Pod
from promstack import Exporter, Prometheus, http_get, wait_until
from promstack import scrape_families as scrape

HERE = Path(__file__).resolve().parent

REFRESH = "300ms"
METRICS_DOC = HERE.parent / "docs" / "metrics.md"
DASHBOARD = HERE.parent / "dashboards" / "kubernetes.json"


def samples(metrics: dict, name: str) -> list:
    return metrics.get(name, [])


def value(metrics: dict, name: str) -> float | None:
    found = samples(metrics, name)
    return found[0].value if found else None


@pytest.fixture
def fleet(tmp_path):
    socket_path = tmp_path / "kubelet.sock"
    # With --workloads too, as the Kubernetes dashboard's measured panels
    # need: no simulated pid has an entry in the empty procfs, so every
    # process is an `unknown` workload, and each pod's allocation a holding
    # of its own (tests/test_workload_usage.py has pods with processes).
    procfs = tmp_path / "proc"
    procfs.mkdir()
    exporter = Exporter(tmp_path, "dgx-h100", interval="300ms", extra=[
        "--kubernetes.pod-resources-socket", str(socket_path),
        "--kubernetes.refresh-interval", REFRESH,
        "--workloads", "--path.procfs", str(procfs),
    ])
    kubelet = FakeKubelet(socket_path, tmp_path)
    try:
        exporter.wait_ready()
        yield exporter, kubelet
    finally:
        kubelet.stop()
        exporter.stop()


def identities(metrics: dict):
    gpus = {s.labels["gpu"]: s.labels["uuid"] for s in samples(metrics, "nvidia_gpu_info")}
    migs = [s.labels for s in samples(metrics, "nvidia_gpu_mig_info") if "mig_uuid" in s.labels]
    return gpus, migs


def test_unreachable_kubelet_is_a_metric_not_a_failure(fleet):
    exporter, _ = fleet  # the fake kubelet is not started
    metrics = wait_until(
        lambda: (m := scrape(exporter)) and value(m, "nvml_exporter_kubernetes_refresh_errors") and m,
        15, "a failed kubelet refresh to be counted")
    assert value(metrics, "nvml_exporter_kubernetes_up") == 0
    assert len(samples(metrics, "nvidia_gpu_up")) == 8, "GPU metrics must keep flowing"
    assert not samples(metrics, "nvidia_gpu_pod_share_ratio")
    assert "pod attribution unavailable" in exporter.log()


def test_pods_whole_shared_and_mig_come_and_go(fleet):
    exporter, kubelet = fleet
    gpus, migs = identities(scrape(exporter))
    mig = next(m for m in migs if m["gpu"] == "0")
    trainer = Pod("ml", "trainer-0", "main", "nvidia.com/gpu", [gpus["2"]])
    shared = [
        Pod("ml", "notebook-a", "jupyter", "nvidia.com/gpu", [f"{gpus['3']}::0"]),
        Pod("research", "notebook-b", "jupyter", "nvidia.com/gpu", [f"{gpus['3']}::1"]),
    ]
    inference = Pod("infer", "server-0", "triton", f"nvidia.com/mig-{mig['profile']}", [mig["mig_uuid"]])
    not_a_gpu = Pod("net", "router", "main", "example.com/nic", [gpus["4"]])
    kubelet.set_pods([trainer, *shared, inference, not_a_gpu])
    kubelet.start()

    metrics = wait_until(
        lambda: (m := scrape(exporter)) and len(samples(m, "nvidia_gpu_pod_share_ratio")) == 3 and m,
        15, "three whole-GPU holders")
    assert value(metrics, "nvml_exporter_kubernetes_up") == 1
    whole = {(s.labels["gpu"], s.labels["namespace"], s.labels["pod"], s.labels["container"]): s.value
             for s in samples(metrics, "nvidia_gpu_pod_share_ratio")}
    assert whole == {
        ("2", "ml", "trainer-0", "main"): 1.0,
        ("3", "ml", "notebook-a", "jupyter"): 0.5,
        ("3", "research", "notebook-b", "jupyter"): 0.5,
    }
    assert all(s.labels["uuid"] == gpus[s.labels["gpu"]]
               for s in samples(metrics, "nvidia_gpu_pod_share_ratio"))
    [held] = samples(metrics, "nvidia_gpu_mig_pod_share_ratio")
    assert held.value == 1.0
    assert {k: held.labels[k] for k in ("gpu", "gpu_instance", "compute_instance", "namespace", "pod")} == {
        "gpu": "0", "gpu_instance": mig["gpu_instance"], "compute_instance": mig["compute_instance"],
        "namespace": "infer", "pod": "server-0",
    }

    # Every family documented as needing --kubernetes is emitted, with its
    # documented type, and no undocumented one (a failure counter once a
    # failure happened: none here).
    documented = {}
    for line in METRICS_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if (len(cells) > 4 and "Only with --kubernetes" in cells[4]
                and "appears with its first failure" not in cells[4]):
            documented[cells[1].strip("`")] = cells[2]
    status, body = http_get(f"http://{exporter.address}/metrics")
    emitted = {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if "pod_share" in name or (name.startswith("nvml_exporter_kubernetes")
                                       and "read_errors" not in name):
                emitted[name] = kind
    assert emitted == documented

    # The trainer ends: its attribution is gone within a refresh or two.
    kubelet.set_pods([*shared, inference])
    metrics = wait_until(
        lambda: (m := scrape(exporter)) and len(samples(m, "nvidia_gpu_pod_share_ratio")) == 2 and m,
        10, "the ended pod's attribution to disappear")
    assert {s.labels["pod"] for s in samples(metrics, "nvidia_gpu_pod_share_ratio")} == {
        "notebook-a", "notebook-b"}

    # The kubelet goes away: a metric says so, attribution is withdrawn once
    # stale, and the GPU metrics keep flowing.
    kubelet.stop()
    metrics = wait_until(
        lambda: (m := scrape(exporter)) and value(m, "nvml_exporter_kubernetes_up") == 0
        and not samples(m, "nvidia_gpu_pod_share_ratio") and m,
        15, "the lost kubelet to be reported and stale attribution withdrawn")
    assert len(samples(metrics, "nvidia_gpu_up")) == 8


def test_sum_by_namespace_and_the_kubernetes_dashboard_in_prometheus(fleet, tmp_path):
    exporter, kubelet = fleet
    gpus, migs = identities(scrape(exporter))
    mig = next(m for m in migs if m["gpu"] == "1")
    kubelet.set_pods([
        Pod("ml", "trainer-0", "main", "nvidia.com/gpu", [gpus["2"]]),
        Pod("ml", "notebook-a", "jupyter", "nvidia.com/gpu", [f"{gpus['3']}::0"]),
        Pod("research", "notebook-b", "jupyter", "nvidia.com/gpu", [f"{gpus['3']}::1"]),
        Pod("infer", "server-0", "triton", f"nvidia.com/mig-{mig['profile']}", [mig["mig_uuid"]]),
    ])
    kubelet.start()
    wait_until(lambda: len(samples(scrape(exporter), "nvidia_gpu_pod_share_ratio")) == 3, 15,
               "attribution")
    # With the shipped rules: the dashboard reads the per-namespace recorded
    # series.
    rule_files = sorted((HERE.parent / "alerts").glob("*.rules.yml"))
    prometheus = Prometheus(tmp_path, {"nvml": [exporter.address]}, rule_files=rule_files)
    try:
        prometheus.wait_ready()
        prometheus.wait_targets_up(1)
        query = ("sum by (namespace) (nvidia_gpu_memory_total_bytes"
                 " * on (gpu, uuid) group_right nvidia_gpu_pod_share_ratio)")
        result = wait_until(lambda: len(prometheus.query(query)) == 2 and prometheus.query(query), 20,
                            "the documented namespace query to answer")
        by_namespace = {r["metric"]["namespace"]: float(r["value"][1]) for r in result}
        total = {s.labels["gpu"]: s.value for s in samples(scrape(exporter), "nvidia_gpu_memory_total_bytes")}
        # ml holds GPU 2 alone and half of GPU 3; research the other half.
        assert by_namespace["ml"] == pytest.approx(total["2"] + total["3"] / 2)
        assert by_namespace["research"] == pytest.approx(total["3"] / 2)

        # The recorded split agrees: half of GPU 3's power to each holder.
        power = {s.labels["gpu"]: s.value for s in samples(scrape(exporter),
                                                            "nvidia_gpu_power_usage_watts")}
        recorded = wait_until(
            lambda: (r := prometheus.query(
                'instance_namespace:nvidia_gpu_power_usage_watts:sum{namespace="research"}'))
            and r, 20, "the per-namespace recording rules")
        assert float(recorded[0]["value"][1]) == pytest.approx(power["3"] / 2, rel=0.2)

        # Every panel of the Kubernetes dashboard answers, with Grafana's
        # variables as "All" and a range that holds a few scrapes.
        empty = queries.panels_without_data(prometheus.query, DASHBOARD, job="nvml", rate_interval="4s",
                                             interval_s=1, range_s=10)
        assert not empty, "Kubernetes dashboard panels without data:\n" + "\n".join(empty)
    finally:
        prometheus.stop()


def test_gke_device_ids_attribute_gpus_and_mig_instances(fleet):
    """GKE's device plugin names devices by node (`nvidia<minor>`), MIG GPU
    instances `nvidia<minor>/gi<id>`, shared ones with `/vgpu<n>`: as
    dcgm-exporter parses them, so GKE pods are attributed."""
    exporter, kubelet = fleet
    _, migs = identities(scrape(exporter))
    mig = next(m for m in migs if m["gpu"] == "0")
    kubelet.set_pods([
        Pod("ml", "trainer-0", "main", "nvidia.com/gpu", ["nvidia2"]),
        Pod("ml", "notebook-a", "jupyter", "nvidia.com/gpu", ["nvidia3/vgpu0"]),
        Pod("infer", "server-0", "triton", "nvidia.com/gpu", [f"nvidia0/gi{mig['gpu_instance']}"]),
    ])
    kubelet.start()
    metrics = wait_until(
        lambda: (m := scrape(exporter)) and len(samples(m, "nvidia_gpu_pod_share_ratio")) == 2
        and samples(m, "nvidia_gpu_mig_pod_share_ratio") and m,
        15, "the GKE-named devices attributed")
    whole = {(s.labels["gpu"], s.labels["pod"]) for s in samples(metrics, "nvidia_gpu_pod_share_ratio")}
    assert whole == {("2", "trainer-0"), ("3", "notebook-a")}
    held = samples(metrics, "nvidia_gpu_mig_pod_share_ratio")
    assert {(s.labels["gpu"], s.labels["gpu_instance"], s.labels["pod"]) for s in held} >= {
        ("0", mig["gpu_instance"], "server-0")}
