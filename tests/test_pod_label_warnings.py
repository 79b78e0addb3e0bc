"""Pod-label warnings stay bounded in volume (issue 41; probe 5, D1).

Before, past 1,024 remembered problems the "logged once" set was cleared,
so above 1,024 dropped pod labels every warning repeated at every refresh
(400 pods gave about 2.6 GB of log a day) and
nvml_exporter_kubernetes_read_errors_total{source="pod_labels",
reason="dropped"} rose by the same number each time. And a key named
outright (`team`) lost its place to `app.kubernetes.io/*` matches, which
sort first. The real exporter runs against the fake kubelet's /pods
(tests/kubelet/fake_https.py) and pod-resources socket."""

from __future__ import annotations

import time
from pathlib import Path

from fake_https import FakeKubernetes, PodMeta
from fake_kubelet import FakeKubelet
from promstack import Exporter, pick, wait_until
from promstack import scrape_samples as scrape

HERE = Path(__file__).resolve().parent
NODE = HERE / "fixtures" / "dra" / "node.toml"
ERRORS = "nvml_exporter_kubernetes_read_errors_total"
LINE = "a pod label the allowlist matches is left out"
PODS = 150
# 17 pattern matches and `team`: 10 kept, 8 dropped per pod, 1,200 in all.
PATTERN_LABELS = 17


def dropped(samples: list) -> float | None:
    found = pick(samples, ERRORS, source="pod_labels", reason="dropped")
    return found[0].value if found else None


def test_dropped_labels_are_logged_and_counted_once_across_refreshes(tmp_path):
    fake = FakeKubernetes(tmp_path)
    for i in range(PODS):
        labels = {f"app.kubernetes.io/k{j:02}": "v" for j in range(PATTERN_LABELS)}
        labels["team"] = "ml"
        fake.pods.append(PodMeta("ml", f"pod-{i}", labels))
    fake.start()
    kubelet = FakeKubelet(tmp_path / "kubelet.sock", tmp_path)
    kubelet.start()
    (tmp_path / "host").mkdir()
    exporter = Exporter(tmp_path, str(NODE), interval="300ms", name="exporter", extra=[
        "--kubernetes.pod-resources-socket", str(tmp_path / "kubelet.sock"),
        "--kubernetes.refresh-interval", "300ms",
        "--path.rootfs", str(tmp_path / "host"),
        "--kubernetes.pod-labels", "team,app.kubernetes.io/*",
        "--kubernetes.kubelet-url", fake.url,
        "--kubernetes.ca-file", str(fake.ca), "--kubernetes.token-file", str(fake.token_file),
    ])
    try:
        exporter.wait_ready()
        total = PODS * (PATTERN_LABELS + 1 - 10)
        assert total > 1024
        wait_until(lambda: dropped(scrape(exporter)) == total, 30, "every dropped label counted")
        reads = fake.paths().count("/pods")
        lines = exporter.log_path.read_text(errors="replace").count(LINE)
        # Five more refreshes of /pods.
        wait_until(lambda: fake.paths().count("/pods") >= reads + 5, 30, "five more refreshes")
        time.sleep(0.5)
        assert dropped(scrape(exporter)) == total, "counted once per pod and label, not per refresh"
        log = exporter.log_path.read_text(errors="replace")
        assert log.count(LINE) == lines == total, "each logged once"
        assert "label=team" not in log, "the key named outright is never the one left out"
    finally:
        exporter.stop()
        kubelet.stop()
        fake.stop()
