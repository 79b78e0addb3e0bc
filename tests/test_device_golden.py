"""A golden from real hardware: what our exporter served on a real GPU host
(`tests/device/*/metrics-driver.prom`, written by `scripts/device-check`)
against what it serves on the replays of that same host: the `nvml-sim
capture` of its driver (`capture.toml`) and its `nvidia-smi -q -x` and `-q`
captures (`tests/corpus/device-check/`). The same device series, with the
same value wherever the reading does not move, compared by device-check's
own `compare()`.

The one allowance is precision a file did not keep: nvidia-smi prints
memory in whole MiB, and the 580.159.04 capture was written before `nvml-sim
capture` kept bytes, while NVML answers bytes (the H200's reserve is
615.0625 MiB, its BAR1 use at idle 1.625 MiB, unchanged over time:
`tests/device/h200-580.159.04/memory-idle.json`). Those families are compared
to the MiB where the file says whole MiB, and exactly where it keeps bytes.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re
import time
import urllib.request

import pytest

from promstack import ROOT, Exporter

DEVICE = ROOT / "tests" / "device"
CORPUS = ROOT / "tests" / "corpus" / "device-check"

loader = importlib.machinery.SourceFileLoader("device_check", str(ROOT / "scripts" / "device-check"))
spec = importlib.util.spec_from_loader("device_check", loader)
device_check = importlib.util.module_from_spec(spec)
loader.exec_module(device_check)

# What a file in whole MiB cannot say to the byte.
MIB_ROUNDED = {"nvidia_gpu_memory_reserved_bytes", "nvidia_gpu_bar1_memory_used_bytes"}


def hosts() -> list:
    return sorted(d for d in DEVICE.iterdir() if (d / "metrics-driver.prom").exists())


def replays(host) -> list:
    driver = host.name.split("-", 1)[1]
    out = [host / "capture.toml"]
    out += sorted(CORPUS.glob(f"*{driver}.*"))
    return [p for p in out if p.exists()]


def device_families(series: dict) -> set:
    """The families `compare()` compares: the device's, not the exporter's
    own or the per-workload ones (the driver run had --workloads)."""
    return {device_check.family(k[0]) for k in series
            if k[0].startswith(("nvidia_gpu_", "nvidia_nvswitch_"))
            and "workload" not in k[0] and "unattributed" not in k[0]}


def scrape_like(workdir, source, real: dict) -> dict:
    """The replay's series once it serves every family the real host
    served (GPM activity needs two polls), or after 30 s."""
    e = Exporter(workdir, str(source), interval="1s", extra=device_check.DETAIL,
                 name=f"exporter-{source.name}")
    try:
        e.wait_ready()
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(f"http://{e.address}/metrics", timeout=10) as r:
                got = device_check.parse_metrics(r.read().decode())
            if device_families(real) <= device_families(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.5)
    finally:
        e.stop()


def whole_mib(source) -> bool:
    """Whether the file writes memory in whole MiB (nvidia-smi always
    does; a capture does unless NVML's bytes are not whole MiB)."""
    if source.suffix != ".toml":
        return True
    m = re.search(r"^reserved_mib = (\S+)$", source.read_text(), re.M)
    return m is None or "." not in m.group(1)


@pytest.mark.parametrize("host", hosts(), ids=lambda h: h.name)
def test_the_replays_of_a_real_host_serve_what_its_driver_served(target_dir, tmp_path, host):
    real = device_check.parse_metrics((host / "metrics-driver.prom").read_text())
    sources = replays(host)
    assert sources, f"no replay of {host.name}"
    for source in sources:
        got = scrape_like(tmp_path, source, real)
        d = device_check.compare(real, got)
        assert d["only_real"] == [], f"{source.name}: the driver served, the replay did not"
        assert d["only_replay"] == [], f"{source.name}: the replay served what the driver did not"
        rounded = whole_mib(source)
        for line in d["differs"]:
            name = line.split("{")[0]
            key = next(k for k in real if device_check.show(k) == line.split(" real=")[0])
            assert rounded and name in MIB_ROUNDED, f"{source.name}: {line}"
            assert abs(real[key] - got[key]) <= 1 << 20, f"{source.name}: {line}, more than a MiB"


def test_a_capture_that_keeps_bytes_replays_the_memory_exactly(target_dir, tmp_path):
    """The reserve and BAR1 use as NVML answers them on this board and
    driver (memory-idle.json, a second H200 at 580.159.04), written as
    `nvml-sim capture` now writes them: the replay serves the driver's
    bytes."""
    host = DEVICE / "h200-580.159.04"
    sample = json.loads((host / "memory-idle.json").read_text())["samples"][0]
    reserved, bar1_used = sample[3], sample[8]
    text = (host / "capture.toml").read_text()
    text = re.sub(r"^reserved_mib = \d+$", f"reserved_mib = {reserved / 2**20}", text, flags=re.M)
    text = re.sub(r"^bar1_used_mib = \d+$", f"bar1_used_mib = {bar1_used / 2**20}", text, flags=re.M)
    assert "reserved_mib = 615.0625" in text and "bar1_used_mib = 1.625" in text
    source = tmp_path / "capture.toml"
    source.write_text(text)
    real = device_check.parse_metrics((host / "metrics-driver.prom").read_text())
    got = scrape_like(tmp_path, source, real)
    d = device_check.compare(real, got)
    assert (d["only_real"], d["only_replay"], d["differs"]) == ([], [], [])
