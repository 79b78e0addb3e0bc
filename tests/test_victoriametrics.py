"""Beyond one Prometheus: the shipped dashboards and rules on VictoriaMetrics.

The setup docs/operations.md describes for a scale-out store: Prometheus
scrapes the fleet and remote-writes every sample into VictoriaMetrics (the
Debian package `victoria-metrics`); vmalert (same package) evaluates the
shipped alert and recording rules against VictoriaMetrics and writes the
recorded series and alert states back into it. Grafana would then query
VictoriaMetrics' Prometheus-compatible API, so every panel query of every
dashboard must answer there, in MetricsQL, and every rule must evaluate
without error.

The fleet is the live dashboard test's (a dgx-h100 node with the default
set, a dgx-a100 with every opt-in, a workstation, Volta GPUs with
incidents) plus a dgx-h100 with pod attribution against a fake kubelet, for
the Kubernetes dashboard, and the workload fixture node (Slurm jobs and
containers from a fixture procfs, tests/test_workloads.py) for the workload
dashboard.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

import queries
from fake_kubelet import FakeKubelet, Pod
from promstack import (Alertmanager, Exporter, Process, Prometheus, free_port,
                       http_get, require_binary, wait_until)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = HERE / "fixtures" / "workloads"

JOB = "nvml-exporter"
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULE_FILES = sorted((ROOT / "alerts").glob("*.rules.yml"))
OPT_IN = ["--collector.process_memory", "--collector.nvlink.per-link", "--collector.ecc.by-location",
          "--collector.gpm.all-metrics", "--collector.mig.memory-free", "--collector.topology"]


class PromAPI:
    """The Prometheus-compatible query API of a server at `url`."""

    url: str

    def api(self, path: str, **params):
        status, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                timeout=20)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise AssertionError(f"{path} {params}: {status} {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]


class VictoriaMetrics(Process, PromAPI):
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__("victoria-metrics", [
            require_binary("victoria-metrics"), f"-storageDataPath={workdir / 'vm-data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1d",
            # Samples are queryable as soon as they arrive (the default hides
            # the last 30 s, which a fleet of 1 s scrapes does not need).
            "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=WARN",
        ], workdir)

    def wait_ready(self):
        wait_until(lambda: self.assert_running() or http_get(f"{self.url}/health")[0] == 200,
                   30, "victoria-metrics /health")


def vmalert_rule_files(workdir: Path) -> list[Path]:
    """The shipped rule files as docs/operations.md says to load them into
    a vmalert that predates `keep_firing_for` (Debian 12's 1.79 rejects the
    field): the same files with those lines deleted. For speed only, the
    inventory group's own `interval: 2m` goes too, so that it runs at the
    test's 1 s (vmalert staggers a group's first run over its interval)."""
    out = []
    for src in RULE_FILES:
        text = src.read_text()
        stripped = re.sub(r"(?m)^\s+(keep_firing_for|interval): .*\n", "", text)
        kept = [line for line in text.splitlines()
                if "keep_firing_for:" not in line and not re.match(r"\s+interval: ", line)]
        assert kept == stripped.splitlines()
        dst = workdir / f"vmalert-{src.name}"
        dst.write_text(stripped)
        out.append(dst)
    return out


class VmAlert(Process, PromAPI):
    def __init__(self, workdir: Path, datasource: str, alertmanager: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__("vmalert", [
            require_binary("vmalert"), *[f"-rule={p}" for p in vmalert_rule_files(workdir)],
            f"-datasource.url={datasource}", f"-remoteWrite.url={datasource}",
            "-remoteWrite.flushInterval=1s", "-evaluationInterval=1s",
            f"-httpListenAddr=127.0.0.1:{self.port}", f"-notifier.url=http://{alertmanager}",
            "-disableAlertgroupLabel", "-loggerLevel=WARN",
        ], workdir)

    def wait_ready(self):
        wait_until(lambda: self.assert_running() or http_get(f"{self.url}/health")[0] == 200,
                   30, "vmalert /health")

    def rules(self) -> list[dict]:
        status, body = http_get(f"{self.url}/api/v1/rules")
        assert status == 200, body
        return [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]

    def alerts(self) -> list[dict]:
        status, body = http_get(f"{self.url}/api/v1/alerts")
        assert status == 200, body
        return json.loads(body)["data"]["alerts"]


def substitute(expr: str) -> str:
    return queries.substitute(expr, job=JOB, rate_interval="4s", interval_s=1, range_s=30)


def dashboard_queries():
    for path in DASHBOARDS:
        for title, ref, expr, _ in queries.panel_queries(path):
            yield path.name, title, ref, expr


def unanswered(store: PromAPI) -> list[str]:
    out = []
    for name, title, ref, expr in dashboard_queries():
        q = substitute(expr)
        try:
            if not store.query(q):
                out.append(f"{name} / {title} / {ref}: no data\n    {q}")
        except AssertionError as e:
            out.append(f"{name} / {title} / {ref}: {e}\n    {q}")
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("victoriametrics")
    socket_path = work / "kubelet.sock"
    empty_procfs = work / "proc"
    empty_procfs.mkdir()
    exporters = [
        # The newest driver branch: every field-backed family is there.
        Exporter(work, "dgx-h100", name="h100", env={"NVML_SIM_DRIVER": "580.95.05"}),
        Exporter(work, "dgx-a100", extra=OPT_IN, name="a100"),
        Exporter(work, "workstation", name="workstation"),
        Exporter(work, str(HERE / "dashboards" / "volta-incidents.toml"), name="volta"),
        # Module power, T.Limit margins, power smoothing, fabric health and
        # NVLink5 bit error rates: a Grace-Blackwell tray has them all.
        Exporter(work, str(HERE / "dashboards" / "gb200-tray.toml"),
                 extra=["--collector.nvlink.per-link"], name="gb200"),
        # With --workloads too, for the Kubernetes dashboard's measured
        # panels (held, busy and energy by namespace): an empty procfs makes
        # every simulated process an `unknown` workload and each pod's
        # allocation a holding of its own, as in test_pod_attribution.py.
        Exporter(work, "dgx-h100", name="k8s", interval="1s", extra=[
            "--kubernetes.pod-resources-socket", str(socket_path),
            "--kubernetes.refresh-interval", "300ms",
            "--workloads", "--path.procfs", str(empty_procfs)]),
        Exporter(work, str(WORKLOADS / "node.toml"), name="workloads", extra=[
            "--workloads", "--path.procfs", str(WORKLOADS / "proc"),
            "--path.rootfs", str(WORKLOADS),
            "--workloads.slurm-mapping-dir", str(WORKLOADS / "slurm-map")]),
    ]
    kubelet = FakeKubelet(socket_path, work)
    started = []
    try:
        for e in exporters:
            started.append(e)
            e.wait_ready()
        k8s = next(e for e in exporters if e.name == "k8s")
        status, body = http_get(f"http://{k8s.address}/metrics")
        text = body.decode()
        uuids = dict(re.findall(r'nvidia_gpu_info\{gpu="(\d+)",uuid="([^"]+)"', text))
        mig = re.search(r'nvidia_gpu_mig_info\{gpu="1",[^}]*profile="([^"]+)",mig_uuid="([^"]+)"',
                        text)
        kubelet.set_pods([
            Pod("ml", "trainer-0", "main", "nvidia.com/gpu", [uuids["2"]]),
            Pod("ml", "notebook-a", "jupyter", "nvidia.com/gpu", [f"{uuids['3']}::0"]),
            Pod("research", "notebook-b", "jupyter", "nvidia.com/gpu", [f"{uuids['3']}::1"]),
            Pod("infer", "server-0", "triton", f"nvidia.com/mig-{mig.group(1)}", [mig.group(2)]),
        ])
        kubelet.start()
        vm = VictoriaMetrics(work)
        started.append(vm)
        vm.wait_ready()
        # Prometheus only scrapes and forwards, as in front of a scale-out
        # store; vmalert evaluates the rules.
        prom = Prometheus(work, {JOB: [e.address for e in exporters]},
                          remote_write=f"{vm.url}/api/v1/write")
        started.append(prom)
        prom.wait_ready()
        prom.wait_targets_up(len(exporters))
        # vmalert wants somewhere to send alerts: a real Alertmanager.
        am = Alertmanager(work, {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]})
        started.append(am)
        am.wait_ready()
        vmalert = VmAlert(work, vm.url, am.address)
        started.append(vmalert)
        vmalert.wait_ready()
        # rate() wants two samples, the XIDs come a few seconds in, recorded
        # series take an evaluation and a write: wait until the store has
        # something for every query, or give up and let the tests say which.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and unanswered(vm):
            time.sleep(2)
        yield {"vm": vm, "prom": prom, "vmalert": vmalert, "exporters": exporters, "am": am}
    finally:
        for p in reversed(started):
            p.stop()
        kubelet.stop()


def test_the_fleet_arrives_by_remote_write(stack):
    vm, prom = stack["vm"], stack["prom"]
    gpus = prom.query("count(nvidia_gpu_info)")
    assert gpus, "Prometheus has no GPUs"
    got = vm.query("count(nvidia_gpu_info)")
    assert got and float(got[0]["value"][1]) == float(gpus[0]["value"][1]) == 8 + 8 + 1 + 3 + 4 + 8 + 5
    # Every exporter's targets keep job and instance, which the dashboards
    # and rules join on.
    instances = {r["metric"]["instance"] for r in vm.query(f'nvml_exporter_build_info{{job="{JOB}"}}')}
    assert instances == {e.address for e in stack["exporters"]}


def test_every_dashboard_query_answers_in_victoriametrics(stack):
    assert len(list(dashboard_queries())) > 80
    missing = unanswered(stack["vm"])
    assert not missing, "dashboard queries VictoriaMetrics does not answer:\n" + "\n".join(missing)


def test_dashboard_variables_answer_in_victoriametrics(stack):
    vm = stack["vm"]
    for path in DASHBOARDS:
        for var in json.loads(path.read_text())["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"]["query"])
            assert m, var
            values = vm.api(f"label/{m.group(2)}/values", **{"match[]": substitute(m.group(1))})
            if var["name"] == "cluster":
                continue  # optional; this fleet has none, and All matches it
            assert values, f"{path.name}: variable {var['name']} has no values"


def test_vmalert_evaluates_every_shipped_rule(stack):
    vmalert, vm = stack["vmalert"], stack["vm"]
    shipped = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            shipped += [r.get("alert") or r.get("record") for r in group["rules"]]

    def evaluated():
        rules = vmalert.rules()
        return len(rules) == len(shipped) and all(r.get("lastEvaluation", "").startswith("2")
                                                  and not r["lastEvaluation"].startswith("0001")
                                                  for r in rules) and rules
    rules = wait_until(evaluated, 30, "vmalert to evaluate every rule")
    assert sorted(r["name"] for r in rules) == sorted(shipped)
    errors = [f"{r['name']}: {r['lastError']}" for r in rules if r.get("lastError")]
    assert not errors, "rules vmalert cannot evaluate:\n" + "\n".join(errors)
    # The recorded series land in VictoriaMetrics, where the dashboards read them.
    for record in ("instance_name:nvidia_gpu_up:count", "instance_namespace:nvidia_gpu_power_usage_watts:sum"):
        assert vm.query(record), f"{record} not in VictoriaMetrics"
    # And alerts fire on the Volta incidents: an uncorrected ECC error and
    # XID 48 on GPU 0, both without a `for` delay.
    firing = wait_until(
        lambda: {a["name"] for a in vmalert.alerts() if a["state"] == "firing"}
        >= {"NvidiaGpuEccUncorrectedError", "NvidiaGpuXidCritical"}
        and vmalert.alerts(), 30, "the ECC and XID alerts to fire in vmalert")
    xid = next(a for a in firing if a["name"] == "NvidiaGpuXidCritical")
    assert xid["labels"]["xid"] == "48" and xid["labels"]["severity"] == "critical"
    assert "GPU 0" in xid["annotations"]["summary"], xid["annotations"]
    # ... and reach Alertmanager, annotations rendered.
    delivered = wait_until(
        lambda: json.loads(http_get(f"http://{stack['am'].address}/api/v2/alerts")[1]), 30,
        "vmalert to deliver alerts to Alertmanager")
    names = {a["labels"]["alertname"] for a in delivered}
    assert {"NvidiaGpuEccUncorrectedError", "NvidiaGpuXidCritical"} <= names, names
