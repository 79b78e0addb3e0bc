"""Measured use per workload, end to end (issue 22's acceptance).

The real exporter runs with `--workloads` on a simulated node
(tests/fixtures/workload_usage/node.toml) whose processes declare their SM
use, with a fixture procfs and host root (passwd, Slurm device cgroups,
the kubelet's container log links, a Slurm mapping directory):

- Slurm jobs 501 and 502 time-slice GPU 0 at 60 % and 20 % SM;
- job 503 holds GPU 1 through its cgroup v1 device allowlist and runs
  nothing; job 505 holds GPU 5 through a mapping file;
- pods ml/trainer-a and research/trainer-b time-slice GPU 2 at 60 % and
  20 %; pod idle-ns/notebook-c holds GPU 3 (pod-resources, a fake kubelet)
  and runs nothing;
- job 504 runs in a 3g.40gb MIG instance of GPU 4 at 40 %.

What is checked: SM-time counters in a 3:1 ratio, energies that with the
unattributed (idle) part add up to each GPU's energy, the held-idle series
and the shipped alert's expression naming the idle holders, on every
simulated driver branch (R535/R545 answer only the older per-process
call), and docs/metrics.md's queries and the recording rules in a real
Prometheus.

The simulated driver samples as a real one does (nvml-sim/README.md): one
pid per 200 ms sample, the one running at that instant. So two jobs that
time-slice a GPU are told apart a sample at a time: over N samples each
job's count is off by up to one, and the checks allow one sample (or, for
ratios over the test's few seconds, the share of one in the window).
"""

from __future__ import annotations

import re
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from fake_kubelet import FakeKubelet, Pod
from promstack import Exporter, Prometheus, pick, wait_until
from promstack import scrape_samples as scrape
from promstack import sim_control as sim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIX = HERE / "fixtures" / "workload_usage"
INTERVAL = "300ms"
DRIVERS = ["535.104.05", "545.29.06", "550.127.05", "560.35.03", "570.133.20", "580.95.05"]

SM = "nvidia_gpu_workload_sm_seconds_total"
ENERGY = "nvidia_gpu_workload_energy_joules_total"
UNATTRIBUTED = "nvidia_gpu_unattributed_energy_joules_total"
HELD = "nvidia_gpu_workload_held_seconds_total"
IDLE = "nvidia_gpu_workload_held_idle_seconds"
# One 200 ms sample of the driver's ring (nvml-sim/src/fleet/usage.rs).
SAMPLE = 0.2


def one(samples: list, name: str, **labels) -> float:
    found = pick(samples, name, **labels)
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0].value


def total(samples: list, name: str, **labels) -> float:
    return sum(s.value for s in pick(samples, name, **labels))


def start(tmp_path: Path, *, kubelet: Path | None = None, env: dict | None = None,
          name: str = "exporter") -> Exporter:
    extra = [
        "--workloads", "--path.procfs", str(FIX / "proc"), "--path.rootfs", str(FIX),
        "--workloads.slurm-mapping-dir", str(FIX / "slurm-map"),
        "--workloads.refresh-interval", "1s",
    ]
    if kubelet:
        extra += ["--kubernetes.pod-resources-socket", str(kubelet),
                  "--kubernetes.refresh-interval", INTERVAL]
    exporter = Exporter(tmp_path, str(FIX / "node.toml"), interval=INTERVAL, extra=extra,
                        env=env, name=name)
    exporter.wait_ready()
    return exporter


def jobs_ready(samples: list) -> bool:
    """Both jobs of GPU 0 measured, and the idle holders of GPUs 1 and 5."""
    return (all(one_or_zero(samples, SM, gpu="0", slurm_job=j) > 0 for j in ("501", "502"))
            and bool(pick(samples, IDLE, gpu="1", slurm_job="503"))
            and bool(pick(samples, IDLE, gpu="5", slurm_job="505")))


def one_or_zero(samples: list, name: str, **labels) -> float:
    found = pick(samples, name, **labels)
    return found[0].value if len(found) == 1 else 0.0


def calls(control: Path) -> dict[str, int]:
    reply = sim(control, '{ action = "calls" }')
    return tomllib.loads("c = " + reply.removeprefix("ok "))["c"]


@pytest.mark.parametrize("driver", DRIVERS)
def test_two_jobs_share_a_gpu_and_an_idle_job_is_named_on_every_branch(tmp_path, driver):
    control = tmp_path / "sim.sock"
    exporter = start(tmp_path, env={"NVML_SIM_DRIVER": driver, "NVML_SIM_CONTROL": str(control)})
    try:
        before = wait_until(lambda: (m := scrape(exporter)) and jobs_ready(m) and m, 20,
                            "jobs 501 and 502 measured, 503 and 505 idle")
        time.sleep(3)
        after = scrape(exporter)

        def grown(name, **labels):
            return total(after, name, **labels) - total(before, name, **labels)

        a, b = grown(SM, gpu="0", slurm_job="501"), grown(SM, gpu="0", slurm_job="502")
        # Each holds half of GPU 0: the time between the two scrapes.
        t = 2 * grown(HELD, gpu="0", slurm_job="501")
        # Together they used 80 % of it, to a sample; 60 % and 20 % each,
        # to a sample of the GPU's 80 % (one pid per sample).
        assert a + b == pytest.approx(0.8 * t, abs=0.8 * SAMPLE), (a, b, t)
        assert a == pytest.approx(0.6 * t, abs=2 * 0.8 * SAMPLE), (a, t)
        assert b == pytest.approx(0.2 * t, abs=2 * 0.8 * SAMPLE), (b, t)
        assert a > 1.2, "60 % of about 3 s"
        # The jobs' labels: cgroup v1 and v2 layouts, uid and passwd name.
        assert pick(after, SM, slurm_job="501", slurm_step="0", uid="1001", user="alice")
        assert pick(after, SM, slurm_job="502", slurm_step="0", uid="1002", user="bob")
        # Energy: the jobs' parts by SM time, and with the idle part they
        # add up to the GPU's energy, to the joule's billionth.
        ea, eb = grown(ENERGY, gpu="0", slurm_job="501"), grown(ENERGY, gpu="0", slurm_job="502")
        # Energy follows the SM time, sample by sample.
        assert ea / (ea + eb) == pytest.approx(0.75, abs=2 * SAMPLE / t), (ea, eb)
        idle = grown(UNATTRIBUTED, gpu="0", reason="idle")
        gpu = grown("nvidia_gpu_energy_joules_total", gpu="0")
        assert ea + eb + idle == pytest.approx(gpu, rel=1e-9)
        assert idle / gpu == pytest.approx(0.2, abs=0.02), "80 % of the SM time is used"
        # The engines NVML measures per process beside the SM.
        assert grown("nvidia_gpu_workload_engine_seconds_total", slurm_job="501",
                     engine="memory") > 0
        assert grown("nvidia_gpu_workload_engine_seconds_total", slurm_job="502",
                     engine="decoder") > 0
        # Job 503 holds GPU 1 (its device cgroup allows /dev/nvidia1) and
        # runs nothing: held idle, its energy all the GPU's idle share.
        idle_503 = pick(after, IDLE, gpu="1", kind="slurm", slurm_job="503", uid="1003",
                        user="carol")
        assert idle_503 and idle_503[0].value > pick(before, IDLE, slurm_job="503")[0].value
        assert grown(HELD, gpu="1", slurm_job="503") > 2.5
        assert grown(SM, gpu="1", slurm_job="503") == 0
        assert grown(UNATTRIBUTED, gpu="1", reason="idle") == pytest.approx(
            grown("nvidia_gpu_energy_joules_total", gpu="1"), rel=1e-9)
        assert pick(after, IDLE, gpu="5", slurm_job="505"), "the mapping file's job"
        assert not pick(after, IDLE, slurm_job="501") and not pick(after, IDLE, slurm_job="502")
        # The call each branch has.
        made = calls(control)
        if driver.split(".")[0] in ("535", "545"):
            assert "nvmlDeviceGetProcessesUtilizationInfo" not in made
            assert made["nvmlDeviceGetProcessUtilization"] > 5
        else:
            assert made["nvmlDeviceGetProcessesUtilizationInfo"] > 5
            assert "nvmlDeviceGetProcessUtilization" not in made
    finally:
        exporter.stop()


def test_use_changed_at_run_time_and_ended_processes_still_count(tmp_path):
    control = tmp_path / "sim.sock"
    exporter = start(tmp_path, env={"NVML_SIM_CONTROL": str(control)})
    try:
        wait_until(lambda: jobs_ready(scrape(exporter)), 20, "jobs measured")
        sim(control, '{ action = "process-use", pid = 51002, sm_percent = 60 }')
        time.sleep(1)
        before = scrape(exporter)
        time.sleep(2)
        after = scrape(exporter)
        a = one(after, SM, slurm_job="501") - one(before, SM, slurm_job="501")
        b = one(after, SM, slurm_job="502") - one(before, SM, slurm_job="502")
        # Both at 60 % now: the GPU is full, the samples alternate.
        assert a == pytest.approx(b, abs=2 * SAMPLE), (a, b)
        assert a + b > 1.5, "a full GPU for about 2 s"
        # Job 502's process ends: its last samples still reach its counter,
        # which stays exported after its holding is gone.
        sim(control, '{ action = "process-stop", pid = 51002 }')
        stopped = one(scrape(exporter), SM, slurm_job="502")
        time.sleep(2)
        final = scrape(exporter)
        assert one(final, SM, slurm_job="502") >= stopped
        assert not pick(final, "nvidia_gpu_workload_share_ratio", slurm_job="502")
        # Restarting the exporter restarts the counters: a reset.
        exporter.stop()
        exporter = start(tmp_path, name="restarted")
        fresh = wait_until(lambda: (m := scrape(exporter)) and pick(m, SM, slurm_job="501") and m,
                           20, "measured again")
        assert one(fresh, SM, slurm_job="501") < one(final, SM, slurm_job="501")
    finally:
        exporter.stop()


def test_mig_instances_are_measured_by_their_gpm_activity(tmp_path):
    exporter = start(tmp_path)
    try:
        wait_until(lambda: one_or_zero(scrape(exporter), SM, gpu="4", slurm_job="504") > 0, 20,
                   "job 504 measured")
        before = scrape(exporter)
        time.sleep(3)
        after = scrape(exporter)
        labels = dict(gpu="4", gpu_instance="1", compute_instance="0", slurm_job="504",
                      user="dave")
        sm = one(after, SM, **labels) - one(before, SM, **labels)
        held = one(after, HELD, **labels) - one(before, HELD, **labels)
        # 40 % of a 3g.40gb, 3 of the H100's 7 compute slices.
        assert sm / held == pytest.approx(0.4, rel=0.05)
        assert held / 3 == pytest.approx(3 / 7, rel=0.15)
        e = one(after, ENERGY, **labels) - one(before, ENERGY, **labels)
        idle = total(after, UNATTRIBUTED, gpu="4") - total(before, UNATTRIBUTED, gpu="4")
        gpu = one(after, "nvidia_gpu_energy_joules_total", gpu="4") - one(
            before, "nvidia_gpu_energy_joules_total", gpu="4")
        assert e + idle == pytest.approx(gpu, rel=1e-9)
        assert e / gpu == pytest.approx(0.4 * 3 / 7, rel=0.05)
        assert not pick(after, "nvidia_gpu_workload_engine_seconds_total", gpu="4"), \
            "NVML measures no engines per process on MIG"
    finally:
        exporter.stop()


def documented_queries() -> list[str]:
    """The PromQL block of docs/metrics.md's measured-use section, verbatim."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    section = text.split("\n## Measured use per workload\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```promql", 1)[1].split("```", 1)[0]
    return [q for q in block.strip().split("\n\n")]


def held_idle_expr() -> str:
    rules = yaml.safe_load((ROOT / "alerts" / "nvidia-gpu.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "NvidiaGpuHeldIdle":
                return rule["expr"]
    raise AssertionError("no NvidiaGpuHeldIdle rule")


def three_to_one(a: float, b: float) -> None:
    """Two workloads that time-slice a GPU at 60 % and 20 %: 3:1, to the
    share of about two 200 ms samples in the few seconds Prometheus saw."""
    assert a / (a + b) == pytest.approx(0.75, abs=0.04), (a, b)


def values(result: list, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


def test_jobs_and_pods_in_prometheus_with_the_documented_queries_and_rules(tmp_path):
    kubelet_socket = tmp_path / "kubelet.sock"
    kubelet = FakeKubelet(kubelet_socket, tmp_path)
    exporter = start(tmp_path, kubelet=kubelet_socket)
    prometheus = None
    try:
        uuid = {s.labels["gpu"]: s.labels["uuid"] for s in pick(scrape(exporter), "nvidia_gpu_info")}
        kubelet.set_pods([
            Pod("ml", "trainer-a", "main", "nvidia.com/gpu", [f"{uuid['2']}::0"]),
            Pod("research", "trainer-b", "main", "nvidia.com/gpu", [f"{uuid['2']}::1"]),
            Pod("idle-ns", "notebook-c", "jupyter", "nvidia.com/gpu", [uuid["3"]]),
        ])
        kubelet.start()

        def everything_measured():
            m = scrape(exporter)
            pods = {s.labels.get("namespace") for s in pick(m, SM, gpu="2")}
            return (jobs_ready(m) and pods == {"ml", "research"}
                    and pick(m, IDLE, namespace="idle-ns", pod="notebook-c")
                    and len({s.labels["gpu"] for s in pick(m, UNATTRIBUTED)}) == 6 and m)

        m = wait_until(everything_measured, 30, "jobs, pods and idle holders measured")
        # A pod's processes carry its names (the kubelet's log links) and its
        # allocation is the same holding: one per pod on GPU 2.
        trainer_a = pick(m, SM, gpu="2", namespace="ml")
        assert len(trainer_a) == 1 and trainer_a[0].labels["pod"] == "trainer-a"
        assert trainer_a[0].labels["container"] == "main"
        assert trainer_a[0].labels["pod_uid"] == "11111111-aaaa-4bbb-8ccc-000000000001"
        assert len(pick(m, "nvidia_gpu_workload_share_ratio", gpu="2")) == 2
        # Every series exists before Prometheus' first scrape, so that its
        # increase() windows are the same for all of them.
        rule_files = sorted((ROOT / "alerts").glob("*.rules.yml"))
        prometheus = Prometheus(tmp_path, {"nvml": [exporter.address]}, rule_files=rule_files)
        prometheus.wait_ready()
        prometheus.wait_targets_up(1)
        # Eight scrapes, each a sample of every counter for increase().
        prometheus.wait_scrapes([exporter.address], 8)

        sm_by_job, energy_by_namespace, held_energy_by_job, energy_by_gpu, waste_by_job, idle_top = (
            prometheus.query(q) for q in documented_queries())
        jobs = values(sm_by_job, "slurm_job")
        three_to_one(jobs["501"], jobs["502"])
        assert jobs["504"] / jobs["501"] == pytest.approx(0.4 * 3 / 7 / 0.6, rel=0.1), "MIG"
        assert jobs["503"] == 0 and jobs["505"] == 0
        namespaces = values(energy_by_namespace, "namespace")
        three_to_one(namespaces["ml"], namespaces["research"])
        assert namespaces["idle-ns"] == 0
        gpu_energy = values(prometheus.query("increase(nvidia_gpu_energy_joules_total[1h])"), "uuid")
        # The holder's bill: 503 and 505 hold GPUs 1 and 5 alone and pay all
        # of their energy, idle as they are; 501 and 502 half of GPU 0 each.
        held = values(held_energy_by_job, "slurm_job")
        assert held["503"] * 3.6e6 == pytest.approx(gpu_energy[uuid["1"]], rel=0.02)
        assert held["505"] * 3.6e6 == pytest.approx(gpu_energy[uuid["5"]], rel=0.02)
        assert held["501"] == pytest.approx(held["502"], rel=0.02)
        assert (held["501"] + held["502"]) * 3.6e6 == pytest.approx(gpu_energy[uuid["0"]], rel=0.02)
        added = values(energy_by_gpu, "uuid")
        assert set(added) == set(gpu_energy)
        for u, joules in gpu_energy.items():
            assert added[u] == pytest.approx(joules, rel=0.01), u
        waste = values(waste_by_job, "slurm_job")
        assert waste["501"] == 0, "uses 60 % of a GPU it holds half of"
        assert waste["502"] > 0 and waste["503"] > 0 and waste["505"] > 0
        idle_holders = {(r["metric"].get("slurm_job"), r["metric"].get("pod")) for r in idle_top}
        assert idle_holders == {("503", None), ("505", None), (None, "notebook-c")}

        # The shipped alert's expression, its one-hour threshold lowered to
        # the seconds this test runs, names the same holders.
        expr = held_idle_expr()
        assert re.search(r">= 3600\b", expr)
        named = prometheus.query(re.sub(r">= 3600\b", ">= 2", expr))
        assert {(r["metric"].get("slurm_job"), r["metric"].get("namespace"),
                 r["metric"].get("user")) for r in named} == {
            ("503", None, "carol"), ("505", None, None), (None, "idle-ns", None)}

        # The recording rules that replace the 1/N splits.
        def recorded(name, label):
            return wait_until(lambda: (r := prometheus.query(name)) and values(r, label), 20,
                              f"{name} recorded")

        # A 5-minute rate over seconds of data is extrapolated only as far
        # as the data: the ratios hold, the levels do not yet.
        busy_jobs = recorded("instance_slurm_job:nvidia_gpu_workload_sm_seconds:rate5m", "slurm_job")
        three_to_one(busy_jobs["501"], busy_jobs["502"])
        held_jobs = recorded("instance_slurm_job:nvidia_gpu_workload_held_seconds:rate5m", "slurm_job")
        assert held_jobs["503"] / held_jobs["501"] == pytest.approx(2.0, rel=0.05), \
            "a whole GPU held idle, half of a shared one"
        energy_ns = recorded("instance_namespace:nvidia_gpu_workload_energy_joules:rate5m",
                             "namespace")
        three_to_one(energy_ns["ml"], energy_ns["research"])
        held_ns = recorded("instance_namespace:nvidia_gpu_workload_held_seconds:rate5m", "namespace")
        assert held_ns["idle-ns"] / held_ns["ml"] == pytest.approx(2.0, rel=0.05)
        busy_users = recorded("instance_user:nvidia_gpu_workload_sm_seconds:rate5m", "user")
        three_to_one(busy_users["alice"], busy_users["bob"])
        assert busy_users["carol"] == 0
    finally:
        if prometheus:
            prometheus.stop()
        kubelet.stop()
        exporter.stop()


def proc_entry(root: Path, pid: int, cgroup: str, uid: int = 0):
    """A process's entries under a fixture procfs: cgroup and status."""
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    (d / "status").write_text(f"Name:\tload\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def cpu_time(root: Path, pid: int, ticks: int):
    """A process's CPU time in its stat entry (utime, field 14), replaced
    whole so that a reader never sees half of it."""
    d = root / "proc" / str(pid)
    stat = f"{pid} (load) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {ticks} 0 0 0 20 0 1 0 100\n"
    (d / "stat.new").write_text(stat)
    (d / "stat.new").replace(d / "stat")


def start_on(tmp_path: Path, gpus: str, *flags: str, prepare=None) -> tuple[Exporter, Path, Path]:
    """The exporter with --workloads on a scenario of its own (`gpus`, the
    [[gpu]] tables) and a procfs the test writes (`prepare(root)` before
    the start); its control socket."""
    root = tmp_path / "host"
    (root / "proc").mkdir(parents=True)
    (root / "etc").mkdir()
    if prepare:
        prepare(root)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    scenario = tmp_path / "node.toml"
    scenario.write_text(f'name = "workload-test"\n{gpus}')
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, str(scenario), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(root / "proc"), "--path.rootfs", str(root),
        "--workloads.refresh-interval", "1s", *flags,
    ], env={"NVML_SIM_CONTROL": str(control)}, name="exporter")
    exporter.wait_ready()
    return exporter, root, control


def test_ended_workloads_give_their_slots_to_a_new_job(tmp_path):
    """Probe 4's D2: short containers churn through a node with
    --workloads.limit 4; a long job that starts while their counters are
    still kept (5 minutes) gets its SM, energy and held counters at once,
    none of its energy goes to over_limit, and nothing is dropped."""
    exporter, root, control = start_on(tmp_path, '[[gpu]]\nmodel = "h100-sxm5-80gb"\n',
                                       "--workloads.limit", "4")
    try:
        for i in range(6):
            pid, cid = 70001 + i, f"{0xabc000 + i:012x}"
            proc_entry(root, pid, f"/system.slice/docker-{cid}{'0' * 52}.scope")
            sim(control, f'{{ action = "process-start", gpu = 0, name = "ci", memory_mib = 100, '
                         f'pid = {pid}, sm_percent = 10 }}')
            wait_until(lambda: one_or_zero(scrape(exporter), SM, container_id=cid) > 0, 20,
                       f"container {cid} measured")
            sim(control, f'{{ action = "process-stop", pid = {pid} }}')
        m = scrape(exporter)
        assert len(pick(m, SM, kind="docker")) == 4, "the ended ones' counters kept, to the limit"
        proc_entry(root, 88888, "/system.slice/slurmstepd.scope/job_9999/step_0/user/task_0")
        sim(control, '{ action = "process-start", gpu = 0, name = "train", memory_mib = 5000, '
                     'pid = 88888, sm_percent = 80 }')
        before = wait_until(lambda: (m := scrape(exporter)) and one_or_zero(
            m, SM, slurm_job="9999") > 0 and m, 10, "the long job measured")
        time.sleep(2)
        after = scrape(exporter)
        for name in (SM, ENERGY, HELD, "nvidia_gpu_workload_held_energy_joules_total"):
            assert one(after, name, slurm_job="9999") > one(before, name, slurm_job="9999"), name
        assert total(after, UNATTRIBUTED, reason="over_limit") == total(
            before, UNATTRIBUTED, reason="over_limit")
        assert one(after, "nvml_exporter_workloads_dropped") == 0
        assert len(pick(after, SM)) <= 4
    finally:
        exporter.stop()


def test_an_idle_mps_client_is_not_billed_like_a_busy_one(tmp_path):
    """The H200's MPS run (tests/device/h200-580.159.04): one client busy,
    one holding the GPU idle; the driver names only the MPS server. The
    server is no workload; the busy client, whose process uses CPU time,
    gets the server's SM time as an estimate (estimate="mps"), the idle
    one none, and is held idle."""
    import threading

    def clients(root: Path):
        for pid, job in ((61001, 601), (61002, 602)):
            proc_entry(root, pid, f"/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0")
            cpu_time(root, pid, 5)

    exporter, root, control = start_on(tmp_path, """
[[gpu]]
model = "h200-sxm5-141gb"
mps = true
processes = [
  { pid = 61001, name = "python train.py", memory_mib = 714, sm_percent = 90 },
  { pid = 61002, name = "python idle.py", memory_mib = 714, sm_percent = 0 },
]
""", prepare=clients)
    stop = threading.Event()

    def cpu():
        # The busy client spins on its kernels: a CPU's worth of ticks.
        ticks = 0
        while not stop.is_set():
            cpu_time(root, 61001, ticks)
            ticks += 10
            time.sleep(0.1)

    spinner = threading.Thread(target=cpu, daemon=True)
    spinner.start()
    try:
        before = wait_until(lambda: (m := scrape(exporter)) and one_or_zero(
            m, SM, slurm_job="601", estimate="mps") > 0 and pick(m, IDLE, slurm_job="602") and m,
            20, "the clients measured, the idle one held idle")
        time.sleep(3)
        after = scrape(exporter)
        t = 2 * (one(after, HELD, slurm_job="601") - one(before, HELD, slurm_job="601"))
        busy = one(after, SM, slurm_job="601", estimate="mps") - one(
            before, SM, slurm_job="601", estimate="mps")
        idle = one(after, SM, slurm_job="602", estimate="mps") - one(
            before, SM, slurm_job="602", estimate="mps")
        assert busy == pytest.approx(0.9 * t, abs=2 * SAMPLE), (busy, t)
        assert idle == 0, "an idle client is billed nothing"
        # Estimates only: NVML measured no client on its own.
        assert not [s for s in pick(after, SM, gpu="0") if "estimate" not in s.labels]
        assert pick(after, IDLE, slurm_job="602") and not pick(after, IDLE, slurm_job="601")
        # The server holds nothing, bills nothing, is never held idle.
        workloads = {s.labels.get("slurm_job") for s in pick(after, "nvidia_gpu_workload_share_ratio")}
        assert workloads == {"601", "602"}
        assert not pick(after, IDLE, kind="unknown") and not pick(after, HELD, kind="unknown")
        assert one(after, "nvidia_gpu_workload_share_ratio", slurm_job="601") == 0.5
    finally:
        stop.set()
        exporter.stop()
