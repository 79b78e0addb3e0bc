"""scripts/device-check on the simulated driver, as a GPU host would run it.

The lead runs `scripts/device-check` on a real GPU (tests/device/ keeps what
it found); here it runs with `--simulate` on the debug build, so the script
is known to work before a GPU is at hand, and what it measures on the
simulator holds the exporter to the real driver's sampling (nvml-sim models
the H200's ring, tests/device/h200-580.159.04):

- every step is ok, or skipped for the reason it states (no nvidia-smi on
  the simulator, not root);
- the exporter on the replay of the simulator's own capture serves the same
  values as on the simulator itself, series by series (GPM activity, a
  rate between two samples, is what a capture cannot hold);
- the sampling experiment's bursty loads (1 s busy / 6 s idle, 0.5 s / 3 s)
  and two time-sliced processes are billed within 10 % of their busy time
  at the default interval, the two processes about evenly;
- the simulated ring is the H200's: 71 samples, 200 ms apart;
- the capture writes a latency profile with each field id timed alone, and
  the exporter's driver time per poll is measured and modelled from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "device" / "h200-580.159.04" / "summary.json"

# Why a step may be skipped on the simulator, by step.
SKIPS = {
    "nvidia-smi": "the simulator has no nvidia-smi",
    "nvml-sim import": "no nvidia-smi capture",
    "replay of nvidia-smi -q -x": "no nvidia-smi-q.xml",
    "capture unprivileged": "not root",
    "exporter unprivileged": "not root",
}
# What a capture cannot hold: GPM activity is a rate between two samples.
NOT_CAPTURED = {"nvidia_gpu_activity_ratio", "nvidia_gpu_mig_activity_ratio"}
LOADS = ["burst-1s-6s", "burst-0.5s-3s", "two-processes"]


@pytest.fixture(scope="module")
def report(target_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("device-check")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_SIM_")}
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device-check"), "--simulate", "--bursts", "2",
         "--bin", str(target_dir), str(out)],
        capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "report.md").read_text().startswith("# device-check")
    summary["_out"] = str(out)
    return summary


@pytest.fixture(scope="module")
def profile_rows(report) -> dict[str, tuple[int, float]]:
    """nvml-latency.tsv: function or field row to (calls, median us)."""
    rows = {}
    for line in (Path(report["_out"]) / "nvml-latency.tsv").read_text().splitlines()[1:]:
        name, calls, _mn, med, _p90, _mx = line.split("\t")
        rows[name] = (int(calls), float(med))
    return rows


def test_every_step_is_ok_or_skipped_for_its_reason(report):
    for name, step in report["steps"].items():
        if step["status"] == "skipped":
            assert name in SKIPS and SKIPS[name] in step["why"], (name, step)
        else:
            assert step["status"] == "ok", (name, step)
    for name in ["host", "capture", "exporter on the driver", "replay of the capture",
                 "driver time per poll", "sampling experiment"]:
        assert report["steps"][name]["status"] == "ok", name


def test_the_replay_of_the_simulators_own_capture_is_equal_value_by_value(report):
    d = report["diff_capture"]
    assert d["differs"] == [], d["differs"][:10]
    assert d["only_replay"] == [], d["only_replay"][:10]
    assert {s.split("{")[0] for s in d["only_real"]} <= NOT_CAPTURED, d["only_real"][:10]
    assert d["series_replay"] > 500, "a whole simulated DGX H100 compared"


@pytest.mark.parametrize("load", LOADS)
def test_each_load_is_billed_within_10_percent_of_its_busy_time(report, load):
    row = next(r for r in report["experiment"] if r["name"] == load)
    truth = row["busy_seconds_measured"]
    billed = row["exporter_total_sm_seconds"]
    assert truth > 0.9
    assert billed == pytest.approx(truth, rel=0.10), row
    assert billed == pytest.approx(row["device_samples_busy_seconds"], rel=0.10), row
    if load == "two-processes":
        # Time-sliced at 100 % each: about half each, a few samples apart.
        parts = list(row["exporter_workload_sm_seconds"].values())
        assert len(parts) == 2, row
        for part in parts:
            assert part == pytest.approx(billed / 2, rel=0.15), row


def test_mps_is_a_real_hosts_experiment(report):
    row = next(r for r in report["experiment"] if r["name"] == "mps")
    assert "MPS" in row["skipped"]


def test_the_simulated_ring_is_the_h200s(report):
    real = json.loads(H200.read_text())["utilization_ring"]
    ring = report["utilization_ring"]
    assert ring["samples_max"] == real["samples_max"] == 71
    assert ring["period_ms_median"] == real["period_ms_median"] == 200.0


def test_the_capture_writes_a_profile_and_the_poll_is_priced_by_it(report):
    facts = report["driver_time"]
    # On the simulator a poll costs microseconds; measured all the same.
    assert facts["after_ms"] is not None and facts["after_ms"] > 0
    model = facts["model"]
    assert model["polls"] >= 5 and model["gpus"] == 8, model
    # The profile is the simulator's own timings (no latency simulated),
    # microseconds a call: a poll of dozens of calls costs well under 50 ms
    # and more than nothing, and the field batches are among its costs.
    assert 0 < model["ms_per_gpu_per_poll"] < 50, model
    assert "nvmlDeviceGetFieldValues" in model["top_ms"], model


def test_the_exporter_says_where_its_poll_goes_by_family(report):
    # --collector.driver_time on the driver: the exporter's own account, the
    # after side of the next real host's before/after comparison.
    fam = report["driver_time"]["after_by_family"]
    assert fam["polls"] >= 5 and fam["gpus"] == 8, fam
    by = fam["by_family"]
    # The scalar field batch is one call per GPU per poll, the NVLink
    # totals riding in it; the per-link NVLink batch is made about once per
    # 12 polls on these NVLink boards (docs/metrics.md, "Freshness"), not
    # every poll.
    assert by["field_values"]["calls"] == pytest.approx(1.0, abs=0.25), by
    assert by.get("nvlink", {"calls": 0.0})["calls"] <= 0.5, by
    assert fam["ms_per_gpu_per_poll"] > 0
    assert sum(v["ms"] for v in by.values()) == pytest.approx(fam["ms_per_gpu_per_poll"])


def test_the_profile_has_a_row_per_field_id_timed_alone(profile_rows):
    assert "field:base" in profile_rows and "field:default" in profile_rows
    # Every ECC total and the energy counter, timed alone on GPU 0.
    for fid in (3, 4, 5, 6, 83, 197, 198):
        assert f"field:{fid}" in profile_rows, fid
        assert profile_rows[f"field:{fid}"][0] == 5  # five times each


def device_check_module():
    """The script as a module (it has no .py name), to call its parser."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("device_check", str(ROOT / "scripts" / "device-check"))
    spec = importlib.util.spec_from_loader("device_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, scenario, outdir", [
    # BENCHMARKS.md's form: --simulate's optional SCENARIO must not swallow OUTDIR.
    (["--simulate", "out"], "dgx-h100", "out"),
    (["out", "--simulate"], "dgx-h100", "out"),
    (["--simulate", "hgx-b200", "out"], "hgx-b200", "out"),
    (["--bursts", "2", "--simulate", "out"], "dgx-h100", "out"),
    (["out"], None, "out"),
])
def test_simulate_and_outdir_parse_in_either_order(argv, scenario, outdir):
    args = device_check_module().parse_args(argv)
    assert (args.simulate, args.outdir) == (scenario, Path(outdir))


@pytest.mark.parametrize("argv", [["--simulate"], ["--simulate", "dgx-h100"], []])
def test_a_missing_outdir_is_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit) as e:
        device_check_module().parse_args(argv)
    assert e.value.code == 2
    assert "OUTDIR" in capsys.readouterr().err


def test_the_documented_command_line_reaches_its_steps(tmp_path):
    """`scripts/device-check --simulate OUTDIR` as BENCHMARKS.md writes it:
    the directory is made and the script goes on to look for its binaries
    (here an empty --bin, so it stops there, in a moment)."""
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device-check"), "--bin", str(tmp_path), "--simulate",
         str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "is missing: build with" in run.stderr, run.stderr
    assert out.is_dir()
