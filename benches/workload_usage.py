#!/usr/bin/env python3
"""What measured per-workload use (the `workload_usage` family) costs, as a
whole process: the release exporter with `--workloads` and the family on,
against `--workloads --no-collector.workload_usage`, at a 1 s interval.

Two fleets: `large` (16 H100 in MIG mode, 112 MIG devices with a process
each: GPM activity per instance, no per-process calls) and a DGX H100 node
with 200 processes (GPUs 0 and 1 in MIG mode as in `dgx-h100`, 25
processes per GPU in 40 Slurm jobs: the per-process utilization and MPS
calls on six whole GPUs). Every pid has a procfs entry (Slurm cgroup v1 and
v2 layouts), so attribution succeeds as on a real node.

CPU = utime + stime of the exporter from /proc/PID/stat over the steady
window, scraped every 15 s with gzip as Prometheus does; runs alternate
between the two modes. Results: BENCHMARKS.md, "Measured use per workload".

    benches/workload_usage.py [--duration 60] [--runs 3] [--bin-dir target/release]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent


def write_procfs(root: Path, pids: list[int]) -> None:
    """One Slurm task per pid, five per job, v1 and v2 layouts alternating."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    users = "".join(f"user{u}:x:{u}:{u}::/home/user{u}:/bin/sh\n" for u in range(2000, 2100))
    (root / "etc" / "passwd").write_text(users)
    for i, pid in enumerate(pids):
        job, uid = 9000 + i // 5, 2000 + (i // 5) % 100
        d = root / "proc" / str(pid)
        d.mkdir(parents=True)
        if job % 2:
            cgroup = (f"12:memory:/slurm/uid_{uid}/job_{job}/step_0/task_{i % 5}\n"
                      f"1:name=systemd:/system.slice/slurmd.service\n0::/\n")
        else:
            cgroup = f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_{i % 5}\n"
        (d / "cgroup").write_text(cgroup)
        (d / "status").write_text(f"Name:\tpython3\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def dgx_200(path: Path) -> list[int]:
    """A DGX H100 node with 200 processes, dgx-h100's MIG layout."""
    pids = list(range(70000, 70200))
    it = iter(pids)
    gpus = []
    mig0 = ["1g.10gb"] * 7
    mig1 = ["3g.40gb", "2g.20gb", "1g.10gb"]
    for g, load in enumerate([None, None, 85, 85, 60, 40, 70, 20]):
        procs = []
        for k in range(25):
            inst = {0: k % 7, 1: k % 3}.get(g)
            extra = f", mig_instance = {inst}" if inst is not None else ""
            procs.append(f'  {{ pid = {next(it)}, name = "python3 train.py", '
                         f'memory_mib = {300 + k * 10}{extra} }}')
        head = 'model = "h100-sxm5-80gb"\n'
        if g == 0:
            head += "mig = [" + ", ".join(f'{{ profile = "{p}", load = {20 + 10 * i} }}'
                                         for i, p in enumerate(mig0)) + "]\n"
        elif g == 1:
            head += "mig = [" + ", ".join(f'{{ profile = "{p}", load = {30 + 20 * i} }}'
                                         for i, p in enumerate(mig1)) + "]\n"
        else:
            head += f"load = {load}\n"
        gpus.append("[[gpu]]\n" + head + "processes = [\n" + ",\n".join(procs) + "\n]\n")
    path.write_text('name = "dgx-h100-200"\n\n' + "\n".join(gpus))
    return pids


def large() -> tuple[str, list[int]]:
    text = (ROOT / "nvml-sim" / "scenarios" / "large.toml").read_text()
    return "large", [int(p) for p in re.findall(r"pid = (\d+)", text)]


def measure(bin_dir: Path, scenario: str, root: Path, usage: bool, duration: float) -> dict:
    args = ["--workloads", "--path.procfs", str(root / "proc"), "--path.rootfs", str(root)]
    if not usage:
        args.append("--no-collector.workload_usage")
    t = harness.start_ours(bin_dir, scenario, "1s", args)
    try:
        time.sleep(5)
        series = len(harness.get(t.port).body.splitlines())
        c0, w0 = harness.cpu_seconds(t.pid), time.monotonic()
        deadline = w0 + duration
        while time.monotonic() < deadline:
            harness.get(t.port, headers={"Accept-Encoding": "gzip"})
            time.sleep(min(15, max(0, deadline - time.monotonic())))
        c1, w1 = harness.cpu_seconds(t.pid), time.monotonic()
        return {"cpu_ms_per_s": (c1 - c0) / (w1 - w0) * 1000,
                "rss_mib": harness.rss_bytes(t.pid) / 2**20, "lines": series}
    finally:
        t.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin-dir", type=Path)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    bin_dir = harness.binaries(a.bin_dir, a.no_build)
    work = Path(tempfile.mkdtemp(prefix="nvml-exporter-usage-bench-"))
    fleets = []
    name, pids = large()
    write_procfs(work / name, pids)
    fleets.append((name, name, work / name))
    scenario = work / "dgx-h100-200.toml"
    pids = dgx_200(scenario)
    write_procfs(work / "dgx-h100-200", pids)
    fleets.append(("dgx-h100, 200 processes", str(scenario), work / "dgx-h100-200"))
    results = {}
    for label, scenario_arg, root in fleets:
        for run in range(a.runs):
            for usage in (False, True):
                r = measure(bin_dir, scenario_arg, root, usage, a.duration)
                harness.log(f"{label} usage={usage} run {run + 1}: {r}")
                results.setdefault(label, {}).setdefault(usage, []).append(r)
    out = ROOT / "target" / "bench" / "workload_usage.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({k: {str(u): v for u, v in d.items()} for k, d in results.items()},
                              indent=2))
    print("| fleet | `--workloads`, no measured use (ms CPU per s) | with measured use | "
          "difference of means | exposition lines |")
    print("|---|---|---|---|---|")
    for label, d in results.items():
        off = [r["cpu_ms_per_s"] for r in d[False]]
        on = [r["cpu_ms_per_s"] for r in d[True]]
        fmt = lambda xs: ", ".join(f"{x:.1f}" for x in xs)  # noqa: E731
        print(f"| {label} | {fmt(off)} | {fmt(on)} | "
              f"{statistics.mean(on) - statistics.mean(off):+.2f} | "
              f"{d[False][0]['lines']} → {d[True][0]['lines']} |")
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
