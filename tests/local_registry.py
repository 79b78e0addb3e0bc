"""A real OCI registry for tests: Debian's docker-registry (distribution
2.8), on a loopback port, storing into the test's temporary directory.
scripts/install-test-deps installs it. Used as a pytest fixture:
`from local_registry import registry`."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry (distribution 2.8) on a loopback port."""
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is missing: scripts/install-test-deps installs it (apt)")
    port = free_port()
    cfg = tmp_path / "registry.yml"
    cfg.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {tmp_path / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n")
    log = open(tmp_path / "registry.log", "w")
    proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "registry.log").read_text()
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
