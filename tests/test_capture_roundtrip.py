"""`nvml-sim capture` proven on the simulator itself: it walks the simulated
driver (`target/debug/libnvml_sim.so`, through the same NVML calls the
exporter makes) running a built-in scenario, and the scenario it writes,
replayed, serves the same /metrics as the scenario.

Exactly the same? A built-in scenario's readings follow a load wave and its
energy, byte and throttle-time counters integrate time, so between the
capture and a scrape they move: those families are compared only for
presence. The capture pins every one of them, so the second step is exact:
capturing the replay again gives a scenario that serves, series for series
and value for value, the same nvidia_gpu_* families as the first replay.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from promstack import ROOT, Exporter

NVML_SIM = ROOT / "target" / "debug" / "nvml-sim"
LIBRARY = ROOT / "target" / "debug" / "libnvml_sim.so"
# Families a running scenario moves with time (the load wave, and counters
# that integrate it).
MOVING = {
    "nvidia_gpu_utilization_ratio", "nvidia_gpu_activity_ratio", "nvidia_gpu_mig_activity_ratio",
    "nvidia_gpu_power_usage_watts", "nvidia_gpu_memory_power_usage_watts",
    "nvidia_gpu_module_power_usage_watts", "nvidia_gpu_temperature_celsius",
    "nvidia_gpu_temperature_margin_celsius", "nvidia_gpu_clock_hertz", "nvidia_gpu_performance_state",
    "nvidia_gpu_fan_speed_ratio", "nvidia_gpu_energy_joules_total", "nvidia_gpu_pcie_bytes_total",
    "nvidia_gpu_nvlink_bytes_total", "nvidia_gpu_clock_throttle_seconds_total",
    "nvidia_gpu_clock_throttle_active",
}
FLAGS = ["--collector.process_memory", "--collector.ecc.by-location", "--collector.mig.memory-free"]


def capture(scenario: str, out) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_SIM_")}
    env["NVML_SIM_SCENARIO"] = scenario
    res = subprocess.run([str(NVML_SIM), "capture", "--library", str(LIBRARY), "--name", "captured"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    out.write_text(res.stdout)
    check = subprocess.run([str(NVML_SIM), "check", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    return res.stdout


def series(workdir, scenario: str) -> dict[tuple, float]:
    e = Exporter(workdir, scenario, interval="1s", extra=FLAGS, name=f"exporter-{len(list(workdir.iterdir()))}")
    try:
        e.wait_ready()
        with urllib.request.urlopen(f"http://{e.address}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        e.stop()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("nvidia_gpu_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def family(key) -> str:
    name = key[0]
    return name[:-len("_total")] + "_total" if name.endswith("_total") else name


@pytest.mark.parametrize("scenario", ["dgx-h100", "dgx-a100", "workstation"])
def test_a_capture_of_the_simulator_replays_it(target_dir, tmp_path, scenario):
    first = tmp_path / "first.toml"
    second = tmp_path / "second.toml"
    capture(scenario, first)
    live = series(tmp_path, scenario)
    replay = series(tmp_path, str(first))
    # The same series, and the same values where time does not move them.
    assert set(live) == set(replay), (
        f"only live: {sorted(set(live) - set(replay))[:10]}\nonly replay: {sorted(set(replay) - set(live))[:10]}")
    differ = [(k, live[k], replay[k]) for k in live
              if family(k) not in MOVING and live[k] != replay[k]]
    assert not differ, differ[:20]
    # A capture of the replay is the replay: exact, moving families included.
    capture(str(first), second)
    again = series(tmp_path, str(second))
    assert set(again) == set(replay)
    differ = [(k, replay[k], again[k]) for k in replay if replay[k] != again[k]]
    assert not differ, differ[:20]
    fixed = sum(1 for k in live if family(k) not in MOVING)
    print(f"\n{scenario}: {len(live)} series; {fixed} equal to the live scenario's, "
          f"all {len(again)} equal between a replay and the capture of it")
