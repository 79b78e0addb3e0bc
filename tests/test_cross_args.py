"""scripts/cross's own arguments, checked before it needs root or a chroot.

`--tests-of PACKAGE` names a workspace package whose test targets the
aarch64 run selects by name (scripts/test uses it for nvml-sim). A package
that is not in the workspace is refused at once, naming it, with exit
status 2, rather than after minutes of building or with an empty
selection that would run nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cross(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "scripts" / "cross"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_an_unknown_package_is_refused_by_name():
    r = cross("--tests-of", "nvml-simm")
    assert r.returncode == 2, r
    assert "--tests-of nvml-simm: no such package in the workspace" in r.stderr, r.stderr
    assert "Compiling" not in r.stderr + r.stdout


def test_a_missing_package_name_is_an_error():
    r = cross("--tests-of")
    assert r.returncode != 0, r
    assert "--tests-of needs a package" in r.stderr, r.stderr


def test_help_names_the_option():
    r = cross("--help")
    assert r.returncode == 0, r
    assert "--tests-of PACKAGE" in r.stdout
    assert "never" in r.stdout and "by package" in r.stdout
