"""Shared setup for the Python end-to-end tests of the exporter.

They drive the real binaries built by `cargo build --workspace`: the
exporter in target/debug and the simulated driver libnvml_sim.so. The
harness for those processes (and for Prometheus, Alertmanager and a webhook
receiver) is tests/alerts/promstack.py, the fake kubelet
tests/kubelet/fake_kubelet.py, the dashboards' queries
dashboards/queries.py; their directories are put on the import path here,
so test modules import them by name. The fixtures they share with
nvml-sim's tests (`target_dir`, `libdir`) are in the repository's root
conftest.py.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for helpers in (HERE / "alerts", HERE / "kubelet", HERE.parent / "dashboards"):
    if str(helpers) not in sys.path:
        sys.path.insert(0, str(helpers))
