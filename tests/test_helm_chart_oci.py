"""The Helm chart, packaged by Helm's own code (scripts/helm-chart, through
helm-python-sdk) and pushed as an OCI artifact to a real registry the test
starts, reads back as Helm's media types and pulls back byte for byte."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from local_registry import registry  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parent.parent


def run(*cmd: str) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{cmd}: {r.returncode}\n{(r.stdout + r.stderr)[-4000:]}"
    return r


def test_helm_chart_pushed_as_oci_artifact_and_pulled_back(registry, tmp_path):
    from helm_python import chart as helm_chart, registry as helm_registry

    out = run(sys.executable, str(REPO / "scripts/helm-chart"), "--out", str(tmp_path / "chart"),
              "--push", f"oci://{registry}/charts", "--plain-http").stdout
    chart_yaml = (REPO / "deploy/kubernetes/nvml-exporter/Chart.yaml").read_text()
    chart_version = re.search(r"^version: (\S+)", chart_yaml, re.M)[1]
    archive = tmp_path / "chart" / f"nvml-exporter-{chart_version}.tgz"
    assert f"pushed oci://{registry}/charts/nvml-exporter" in out, out
    # The archive is Helm's layout: everything under the chart's name.
    with tarfile.open(archive) as t:
        names = t.getnames()
    assert "nvml-exporter/Chart.yaml" in names and "nvml-exporter/templates/daemonset.yaml" in names, names
    assert all(n.startswith("nvml-exporter/") for n in names), names
    manifest = json.loads(run("skopeo", "inspect", "--raw", "--tls-verify=false",
                              f"docker://{registry}/charts/nvml-exporter:{chart_version}").stdout)
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json", manifest
    assert [l["mediaType"] for l in manifest["layers"]] == \
        ["application/vnd.cncf.helm.chart.content.v1.tar+gzip"], manifest
    assert manifest["layers"][0]["digest"] == "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    # Helm's own client pulls it back, and it loads as the chart it was.
    (tmp_path / "pulled").mkdir()
    helm_registry.pull(f"oci://{registry}/charts/nvml-exporter", version=chart_version,
                       destination=tmp_path / "pulled", plain_http=True)
    pulled = (tmp_path / "pulled" / archive.name).read_bytes()
    assert pulled == archive.read_bytes()
    with helm_chart.Chart.load_archive(pulled) as c:
        assert (c.name, c.version) == ("nvml-exporter", chart_version)
