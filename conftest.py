"""Fixtures shared by both Python test directories, tests/ (the exporter)
and nvml-sim/tests/ (the simulator): the built binaries and the simulated
driver presented as `libnvidia-ml.so.1`, the name every NVML client loads.

Exporter-side helpers (the process harness, Prometheus, Alertmanager) are
in tests/conftest.py and tests/alerts/promstack.py.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"


@pytest.fixture(scope="session")
def target_dir() -> Path:
    """target/debug, with the exporter, the simulator library, its CLI and
    examples built. A no-op when `cargo build --workspace --all-targets`
    ran first (scripts/test); otherwise the binaries under test are made
    current."""
    subprocess.run(
        ["cargo", "build", "-q", "--workspace", "--lib", "--bins", "--examples"],
        cwd=ROOT,
        check=True,
    )
    return TARGET


@pytest.fixture(scope="session")
def libdir(target_dir, tmp_path_factory) -> Path:
    """A directory holding `libnvidia-ml.so.1 -> libnvml_sim.so`, for
    LD_LIBRARY_PATH."""
    d = tmp_path_factory.mktemp("nvml-lib")
    (d / "libnvidia-ml.so.1").symlink_to(target_dir / "libnvml_sim.so")
    return d
