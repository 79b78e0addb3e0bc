"""Workload attribution end to end (`--workloads`).

The real exporter runs on a simulated node (tests/fixtures/workloads/
node.toml) whose GPU processes carry pids that have entries in a fixture
procfs (tests/fixtures/workloads/proc): Slurm jobs on cgroup v1 and v2,
Docker under both cgroup drivers, Podman rootful and rootless, containerd
under Kubernetes, a systemd service and a login session in MIG instances,
and entries that have vanished, cannot be read or hold garbage. Processes
start and stop through the simulator's control socket. Then real
processes started here are attributed through their real /proc entries,
and a real Prometheus evaluates the documented `sum by (slurm_job)`.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

import queries
from promstack import EXPORTER, Exporter, Process, Prometheus, free_port, wait_until
from promstack import scrape_families as scrape
from promstack import sim_control as sim

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "workloads"
DASHBOARD = HERE.parent / "dashboards" / "workloads.json"
INTERVAL = "300ms"
MIB = 1 << 20
SHARES = ("nvidia_gpu_workload_share_ratio", "nvidia_gpu_mig_workload_share_ratio")
DEVICE_LABELS = ("gpu", "uuid", "gpu_instance", "compute_instance")



def holdings(metrics: dict) -> dict[tuple, dict[frozenset, float]]:
    """Share samples by device (gpu, gpu_instance), each workload as the
    frozen set of its non-device labels."""
    out: dict[tuple, dict[frozenset, float]] = defaultdict(dict)
    for name in SHARES:
        for s in metrics.get(name, []):
            device = (s.labels["gpu"], s.labels.get("gpu_instance"))
            workload = frozenset((k, v) for k, v in s.labels.items() if k not in DEVICE_LABELS)
            out[device][workload] = s.value
    return out


def memory(metrics: dict) -> dict[tuple, float]:
    return {
        (s.labels["gpu"], s.labels.get("gpu_instance"),
         frozenset((k, v) for k, v in s.labels.items() if k not in DEVICE_LABELS)): s.value
        for s in metrics.get("nvidia_gpu_workload_memory_used_bytes", [])
    }


def w(**labels) -> frozenset:
    return frozenset(labels.items())


def pids_listed(metrics: dict) -> set[str]:
    return {s.labels["pid"] for s in metrics.get("nvidia_gpu_process_memory_used_bytes", [])}


SLURM_101 = w(kind="slurm", slurm_job="101", slurm_step="0", uid="1001", user="alice")
SLURM_102 = w(kind="slurm", slurm_job="102", slurm_step="batch", uid="1002", user="bob")
SLURM_103 = w(kind="slurm", slurm_job="103", slurm_step="0", uid="1001", user="alice")
EXPECTED = {
    ("0", None): {SLURM_101: 0.5, SLURM_102: 0.5},
    ("1", None): {
        w(kind="docker", container_id="a1b2c3d4e5f6", uid="0", user="root"): 1 / 3,
        w(kind="docker", container_id="b2c3d4e5f607", uid="0", user="root"): 1 / 3,
        w(kind="podman", container_id="c3d4e5f60718", uid="0", user="root"): 1 / 3,
    },
    ("2", None): {
        w(kind="podman", container_id="d4e5f6071829", uid="1000", user="carol"): 0.25,
        # uid 65535 is in no passwd entry: no user label.
        w(kind="kubernetes", container_id="e5f60718293a",
          pod_uid="7c0ffee1-2345-4678-9abc-def012345678", uid="65535"): 0.25,
        # 41011 has exited (no entry at all); 41014's cgroup cannot be read.
        w(kind="unknown"): 0.25,
        w(kind="unknown", uid="1002", user="bob"): 0.25,
    },
    # MIG: GPU instance ids follow the placement, 1 and 2.
    ("3", "1"): {w(kind="systemd", systemd_unit="triton-inference.service", uid="998", user="triton"): 1.0},
    ("3", "2"): {
        w(kind="user", uid="1001", user="alice"): 0.5,
        # 41010's cgroup file is garbage.
        w(kind="unknown", uid="1001", user="alice"): 0.5,
    },
    # Idle, but the dcgm-exporter style mapping file lists two jobs.
    ("4", None): {w(kind="slurm", slurm_job="201"): 0.5, w(kind="slurm", slurm_job="202"): 0.5},
}


@pytest.fixture
def node(tmp_path):
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, str(FIXTURES / "node.toml"), interval=INTERVAL, extra=[
        "--workloads",
        "--path.procfs", str(FIXTURES / "proc"),
        "--path.rootfs", str(FIXTURES),
        "--workloads.slurm-mapping-dir", str(FIXTURES / "slurm-map"),
        "--workloads.refresh-interval", "1s",
        "--collector.process_memory",
    ], env={"NVML_SIM_CONTROL": str(control)}, name="exporter")
    try:
        exporter.wait_ready()
        yield exporter, control
    finally:
        exporter.stop()


def test_every_layout_is_attributed_on_its_device(node):
    exporter, _ = node
    metrics = wait_until(lambda: (m := scrape(exporter)) and holdings(m) == EXPECTED and m,
                         15, "every fixture process attributed")
    for device, shares in holdings(metrics).items():
        assert sum(shares.values()) == pytest.approx(1.0), device
    for name in (*SHARES, "nvidia_gpu_workload_memory_used_bytes"):
        for s in metrics[name]:
            assert not {"job", "instance"} & set(s.labels), f"{name} must leave job/instance to Prometheus"
    mem = memory(metrics)
    assert mem[("0", None, SLURM_101)] == (20000 + 4000) * MIB, "a job's two tasks add up"
    assert mem[("0", None, SLURM_102)] == 30000 * MIB
    assert mem[("3", "1", w(kind="systemd", systemd_unit="triton-inference.service",
                           uid="998", user="triton"))] == 10000 * MIB
    # Mapping-file jobs have no processes, hence no memory series.
    assert not [k for k in mem if k[0] == "4"]
    errors = {(s.labels["source"], s.labels["reason"])
              for s in metrics["nvml_exporter_workload_read_errors"]}
    assert {("procfs", "gone"), ("procfs", "io"), ("procfs", "malformed")} <= errors
    assert metrics["nvml_exporter_workloads_dropped"][0].value == 0
    assert len(metrics["nvidia_gpu_up"]) == 5 and all(s.value == 1 for s in metrics["nvidia_gpu_up"])


def test_workloads_come_and_go_with_their_processes(node):
    exporter, control = node
    wait_until(lambda: holdings(scrape(exporter)) == EXPECTED, 15, "every fixture process attributed")

    sim(control, '{ action = "process-stop", pid = 41002 }')
    sim(control, '{ action = "process-stop", pid = 41009 }')

    def ended():
        m = scrape(exporter)
        h = holdings(m)
        # In the very exposition where NVML stops listing a pid, its
        # workload is gone: never one refresh behind.
        if "41002" not in pids_listed(m):
            assert SLURM_102 not in h[("0", None)], h[("0", None)]
        if "41009" not in pids_listed(m):
            assert w(kind="user", uid="1001", user="alice") not in h[("3", "2")]
        return not {"41002", "41009"} & pids_listed(m) and h

    h = wait_until(ended, 15, "the stopped processes to leave NVML's list")
    assert h[("0", None)] == {SLURM_101: 1.0}
    assert h[("3", "2")] == {w(kind="unknown", uid="1001", user="alice"): 1.0}

    sim(control, '{ action = "process-start", gpu = 0, pid = 41012, name = "srun", memory_mib = 1000 }')
    h = wait_until(lambda: (h := holdings(scrape(exporter))) and SLURM_103 in h[("0", None)] and h,
                   15, "job 103 to be attributed")
    assert h[("0", None)] == {SLURM_101: 0.5, SLURM_103: 0.5}


def test_a_low_limit_drops_holdings_and_says_so(tmp_path):
    exporter = Exporter(tmp_path, str(FIXTURES / "node.toml"), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(FIXTURES / "proc"), "--path.rootfs", str(FIXTURES),
        "--workloads.limit", "4",
    ], name="exporter")
    try:
        exporter.wait_ready()
        # 12 holdings from processes (no mapping dir here), 4 kept.
        m = wait_until(lambda: (m := scrape(exporter))
                       and m.get("nvml_exporter_workloads_dropped", [None])[0] is not None
                       and m["nvml_exporter_workloads_dropped"][0].value == 8 and m,
                       15, "8 holdings dropped")
        assert sum(len(v) for v in holdings(m).values()) == 4
        assert "more workload holdings than --workloads.limit" in exporter.log()
    finally:
        exporter.stop()


def test_entries_the_exporter_may_not_read_are_unknown_and_counted(tmp_path):
    """Permission denied (hidepid=, an LSM): the exporter runs unprivileged
    (as nobody when this test runs as root, who may read anything) against
    a copy of the fixtures where one container's cgroup file is mode 000."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if os.geteuid() == 0 and subprocess.run(
            [*as_nobody, "test", "-x", str(EXPORTER), "-a", "-r",
             str(EXPORTER.parent / "libnvml_sim.so")]).returncode != 0:
        pytest.skip("nobody cannot run this checkout's exporter (a private directory above it)")
    # pytest's tmp dirs are private to root: the copy goes where nobody reaches.
    scratch = Path(tempfile.mkdtemp(prefix="nvml-exporter-workloads-"))
    copy = scratch / "fixtures"
    shutil.copytree(FIXTURES, copy)
    os.chmod(scratch, 0o755)
    for path in copy.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(copy / "proc" / "41003" / "cgroup", 0)
    port = free_port()
    argv = [str(EXPORTER), "--simulate", str(copy / "node.toml"), "--web.listen-address",
            f"127.0.0.1:{port}", "--collect.interval", INTERVAL, "--workloads",
            "--path.procfs", str(copy / "proc"), "--path.rootfs", str(copy)]
    if os.geteuid() == 0:
        argv = [*as_nobody, *argv]
    exporter = Process("exporter", argv, tmp_path)
    exporter.address = f"127.0.0.1:{port}"
    try:
        def attributed():
            exporter.assert_running()
            try:
                m = scrape(exporter)
            except OSError:
                return None
            return holdings(m).get(("1", None)) and m

        m = wait_until(attributed, 30, "GPU 1 attributed")
        gpu1 = holdings(m)[("1", None)]
        assert gpu1 == {
            w(kind="unknown", uid="0", user="root"): 1 / 3,
            w(kind="docker", container_id="b2c3d4e5f607", uid="0", user="root"): 1 / 3,
            w(kind="podman", container_id="c3d4e5f60718", uid="0", user="root"): 1 / 3,
        }
        errors = {(s.labels["source"], s.labels["reason"])
                  for s in m["nvml_exporter_workload_read_errors"]}
        assert ("procfs", "permission_denied") in errors
        assert all(s.value == 1 for s in m["nvidia_gpu_up"]), "the poll goes on"
    finally:
        exporter.stop()
        shutil.rmtree(scratch)


CID = "f0e1d2c3b4a5968778695a4b3c2d1e0f" * 2


def test_a_user_cannot_pass_for_a_slurm_job_or_a_pod(tmp_path):
    """Carol (uid 1000) names cgroups in the subtree systemd delegates to her
    after another user's Slurm job and a pod: chargeback must see carol. Her
    rootless container stays a container; the real Slurm job beside them is
    still a Slurm job."""
    user = "/user.slice/user-1000.slice/user@1000.service"
    entries = {
        51001: (f"{user}/app.slice/slurm/uid_1001/job_101/step_0", 1000),
        51002: (f"{user}/system.slice/slurmstepd.scope/job_102/step_batch", 1000),
        51003: (f"{user}/kubepods.slice/kubepods-pod7c0ffee1_2345_4678_9abc_def012345678.slice/x.scope",
                1000),
        51004: (f"{user}/user.slice/libpod-{CID}.scope/container/kubepods/pod1/x", 1000),
        51005: ("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", 1001),
    }
    proc = tmp_path / "proc"
    for pid, (path, uid) in entries.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::{path}\n")
        (proc / str(pid) / "status").write_text(f"Name:\tp{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    shutil.copytree(FIXTURES / "etc", tmp_path / "etc")
    scenario = tmp_path / "node.toml"
    scenario.write_text('name = "delegated"\n[[gpu]]\nmodel = "h100-sxm5-80gb"\nload = 50\nprocesses = [\n'
                        + ",\n".join(f'  {{ pid = {pid}, name = "p", memory_mib = 100 }}' for pid in entries)
                        + "\n]\n")
    exporter = Exporter(tmp_path, str(scenario), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(proc), "--path.rootfs", str(tmp_path),
    ], name="exporter")
    try:
        exporter.wait_ready()
        h = wait_until(lambda: (h := holdings(scrape(exporter)).get(("0", None), {}))
                       and len(h) == 3 and h, 15, "GPU 0 attributed")
        carol = w(kind="user", uid="1000", user="carol")
        assert h == {
            carol: 1 / 3,
            w(kind="podman", container_id=CID[:12], uid="1000", user="carol"): 1 / 3,
            w(kind="slurm", slurm_job="4242", slurm_step="0", uid="1001", user="alice"): 1 / 3,
        }, h
    finally:
        exporter.stop()


def test_an_entry_that_never_answers_holds_up_nothing_else(tmp_path):
    """One pid's cgroup file is a FIFO: opening it blocks, as a read does
    while the kernel holds cgroup_mutex or a FUSE/NFS mount hangs. That
    read is abandoned at its deadline and counted as a timeout, logged
    once, and every other process is still attributed, new ones included;
    the last-refresh timestamp keeps moving."""
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy)
    stuck = copy / "proc" / "41003" / "cgroup"
    stuck.unlink()
    os.mkfifo(stuck)
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, str(copy / "node.toml"), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(copy / "proc"), "--path.rootfs", str(copy),
        "--workloads.refresh-interval", "1s",
    ], env={"NVML_SIM_CONTROL": str(control)}, name="exporter")
    try:
        exporter.wait_ready()
        expected = {**EXPECTED}
        expected.pop(("4", None))  # no mapping dir here
        expected[("1", None)] = {
            w(kind="unknown", uid="0", user="root"): 1 / 3,
            w(kind="docker", container_id="b2c3d4e5f607", uid="0", user="root"): 1 / 3,
            w(kind="podman", container_id="c3d4e5f60718", uid="0", user="root"): 1 / 3,
        }
        m = wait_until(lambda: (m := scrape(exporter)) and holdings(m) == expected and m,
                       30, "every other process attributed around the stuck one")
        timeouts = {s.labels["source"]: s.value for s in m["nvml_exporter_workload_read_errors"]
                    if s.labels["reason"] == "timeout"}
        assert timeouts.get("procfs", 0) >= 1, m["nvml_exporter_workload_read_errors"]

        # A process that starts now is attributed while the read stays stuck.
        sim(control, '{ action = "process-start", gpu = 0, pid = 41012, name = "srun", memory_mib = 1000 }')
        wait_until(lambda: SLURM_103 in holdings(scrape(exporter)).get(("0", None), {}),
                   15, "a new process attributed while an old read is stuck")

        def refreshed_at() -> float:
            return scrape(exporter)["nvml_exporter_workloads_last_refresh_timestamp_seconds"][0].value

        first = refreshed_at()
        # Two more passes (1 s apart) each meet the stuck path again.
        wait_until(lambda: refreshed_at() >= first + 2, 15, "two more attribution passes")
        log = exporter.log()
        assert log.count("did not finish within its deadline") == 1, log
        assert str(stuck) in log, log
        later = {s.labels["source"]: s.value for s in
                 scrape(exporter)["nvml_exporter_workload_read_errors"]
                 if s.labels["reason"] == "timeout"}
        assert later["procfs"] > timeouts["procfs"], "each pass counts the path it skips"
    finally:
        exporter.stop()


def cgroup2_root() -> Path | None:
    """A cgroup2 mount we may create groups in (root only)."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2" and os.access(fields[1], os.W_OK):
            return Path(fields[1])
    return None


@pytest.fixture
def sleepers():
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def real_node(tmp_path) -> tuple[Exporter, Path]:
    scenario = tmp_path / "real.toml"
    scenario.write_text('name = "real"\n[[gpu]]\nmodel = "h100-sxm5-80gb"\nload = 10\n')
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, str(scenario), interval=INTERVAL, extra=[
        "--workloads", "--workloads.refresh-interval", "1s", "--collector.process_memory",
    ], env={"NVML_SIM_CONTROL": str(control)}, name="exporter")
    exporter.wait_ready()
    return exporter, control


def test_real_processes_are_attributed_through_their_real_proc_entries(tmp_path, sleepers):
    """Default --path.procfs=/proc and --path.rootfs=/: the processes this
    test started, with their own cgroups, uid and the host's passwd."""
    exporter, control = real_node(tmp_path)
    try:
        for i, p in enumerate(sleepers):
            sim(control, f'{{ action = "process-start", gpu = 0, pid = {p.pid}, '
                         f'name = "sleep", memory_mib = {100 * (i + 1)} }}')
        me = {("uid", str(os.getuid())), ("user", pwd.getpwuid(os.getuid()).pw_name)}

        def attributed():
            h = holdings(scrape(exporter)).get(("0", None), {})
            return h and all(me <= set(wl) for wl in h) and h

        h = wait_until(attributed, 15, "the sleepers attributed with this test's uid and user")
        assert sum(h.values()) == pytest.approx(1.0)
        assert all(dict(wl)["kind"] != "unknown" for wl in h), h
        # Both sleepers share this test's cgroup: one workload, both memories.
        assert len(h) == 1
        (workload,) = h
        assert memory(scrape(exporter))[("0", None, workload)] == 300 * MIB

        sleepers[0].kill()
        sleepers[0].wait()
        sim(control, f'{{ action = "process-stop", pid = {sleepers[0].pid} }}')
        wait_until(lambda: memory(scrape(exporter)).get(("0", None, workload)) == 200 * MIB,
                   15, "the killed sleeper's memory to leave its workload")
    finally:
        exporter.stop()


def test_a_real_process_in_a_real_slurm_cgroup(tmp_path, sleepers):
    """A real process moved into a Slurm-style cgroup v2 group is that job."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("needs root and a writable cgroup2 mount to create a cgroup")
    # A Slurm root at the top of the hierarchy, as slurmd makes it (named
    # apart from a real one): deeper, a Slurm-like name is not believed.
    job = root / f"slurm_nvml-exporter-test-{os.getpid()}" / "job_9001"
    step = job / "step_0"
    step.mkdir(parents=True)
    exporter = None
    try:
        (step / "cgroup.procs").write_text(str(sleepers[1].pid))
        exporter, control = real_node(tmp_path)
        for p in sleepers:
            sim(control, f'{{ action = "process-start", gpu = 0, pid = {p.pid}, name = "sleep", memory_mib = 64 }}')
        user = pwd.getpwuid(os.getuid()).pw_name
        slurm = w(kind="slurm", slurm_job="9001", slurm_step="0", uid=str(os.getuid()), user=user)
        h = wait_until(lambda: (h := holdings(scrape(exporter)).get(("0", None), {}))
                       and len(h) == 2 and h, 15, "two workloads on GPU 0")
        assert h[slurm] == 0.5
        assert sum(h.values()) == pytest.approx(1.0)
    finally:
        if exporter:
            exporter.stop()
        sleepers[1].kill()
        sleepers[1].wait()
        for d in (step, job, job.parent):
            d.rmdir()


def documented_queries() -> list[str]:
    """The PromQL examples of docs/metrics.md's workload section."""
    text = (HERE.parent / "docs" / "metrics.md").read_text()
    section = text.split("## Workload attribution", 1)[1]
    block = section.split("```promql", 1)[1].split("```", 1)[0]
    return [" ".join(line.strip() for line in q.splitlines() if not line.strip().startswith("#"))
            for q in block.strip().split("\n\n")]


def test_prometheus_splits_a_shared_gpu_by_slurm_job(node, tmp_path):
    """The queries docs/metrics.md gives, in a real Prometheus: each shared
    GPU's memory split between its jobs, adding up to the GPU's."""
    exporter, _ = node
    wait_until(lambda: holdings(scrape(exporter)) == EXPECTED, 15, "every fixture process attributed")
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    prom = Prometheus(prom_dir, {"nvml": [exporter.address]})
    try:
        prom.wait_ready()
        by_job_query, by_container_query, measured_query = documented_queries()
        assert "sum by (slurm_job)" in by_job_query

        def answered():
            got = prom.query(by_job_query)
            return len(got) == 4 and {r["metric"]["slurm_job"]: float(r["value"][1]) for r in got}

        by_job = wait_until(answered, 30, "Prometheus to answer the split")
        gpu_memory = {r["metric"]["gpu"]: float(r["value"][1])
                      for r in prom.query("nvidia_gpu_memory_used_bytes")}
        assert set(by_job) == {"101", "102", "201", "202"}
        # GPU 0 split between jobs 101 and 102, GPU 4 between 201 and 202.
        assert by_job["101"] == pytest.approx(by_job["102"])
        assert by_job["101"] + by_job["102"] == pytest.approx(gpu_memory["0"], rel=0.05)
        assert by_job["201"] + by_job["202"] == pytest.approx(gpu_memory["4"], rel=0.05)
        containers = {r["metric"].get("container_id") for r in prom.query(by_container_query)}
        assert {"a1b2c3d4e5f6", "b2c3d4e5f607", "c3d4e5f60718"} <= containers
        measured = {r["metric"]["slurm_job"]: float(r["value"][1]) for r in prom.query(measured_query)}
        assert measured == {"101": 24000 * MIB, "102": 30000 * MIB}

        # Every panel of the "GPUs by workload" dashboard has data from the
        # fixture node (rate() in the errors panel needs two scrapes).
        empty = queries.panels_without_data(prom.query, DASHBOARD, job="nvml", rate_interval="4s",
                                             interval_s=1, range_s=10)
        assert not empty, "workload dashboard panels without data:\n" + "\n".join(empty)
        table = prom.query(queries.substitute(
            next(e for t, _, e, _ in queries.panel_queries(DASHBOARD) if t == "GPUs by workload"),
            job="nvml"))
        assert {r["metric"].get("container_id") for r in table} >= {
            "a1b2c3d4e5f6", "b2c3d4e5f607", "c3d4e5f60718"}, "the Docker host's three containers"
    finally:
        prom.stop()


class FakeEngine:
    """A Docker-compatible API on a unix socket that knows two containers
    and records every request line."""

    NAMES = {"a1b2c3d4e5f6": "/triton", "c3d4e5f60718": "ollama"}

    def __init__(self, path: Path, names: dict | None = None, ids: dict | None = None):
        """`names` by short id (default NAMES); `ids` the Id to answer with
        for a short id, where it should not be the one asked about."""
        import http.server
        import socketserver
        import threading

        engine = self
        self.requests: list[str] = []
        self.names = self.NAMES if names is None else names
        self.ids = ids or {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                engine.requests.append(f"{self.command} {self.path} {self.request_version}")
                parts = self.path.split("/")
                name = self.path.endswith("/json") and len(parts) == 4 and engine.names.get(parts[2])
                answer_id = engine.ids.get(parts[2], parts[2] + "0" * 52)
                body = json.dumps({"Id": answer_id, "Name": name} if name
                                  else {"message": "No such container"}).encode()
                self.send_response(200 if name else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self):
                request, _ = super().get_request()
                return request, ("engine", 0)

        self.server = Server(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def engine_exporter(tmp_path, engine_socket):
    """An exporter attributing the fixture node's processes, and asking the
    container engine on `engine_socket` for container names."""
    return Exporter(tmp_path, str(FIXTURES / "node.toml"), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(FIXTURES / "proc"), "--path.rootfs", str(FIXTURES),
        "--workloads.refresh-interval", "300ms",
        "--workloads.container-engine-socket", str(engine_socket),
    ], name="exporter")


def container_names(m) -> dict:
    """Container id to container name (None when unnamed) of the workloads
    holding GPU 1."""
    gpu1 = holdings(m).get(("1", None), {})
    return {dict(wl)["container_id"]: dict(wl).get("container_name") for wl in gpu1}


def test_container_names_only_from_the_named_engine_socket(tmp_path):
    engine_socket = tmp_path / "docker.sock"
    engine = FakeEngine(engine_socket)
    exporter = engine_exporter(tmp_path, engine_socket)
    try:
        exporter.wait_ready()

        def named():
            names = container_names(scrape(exporter))
            return names.get("a1b2c3d4e5f6") == "triton" and names

        names = wait_until(named, 15, "Docker and Podman containers named")
        assert names == {"a1b2c3d4e5f6": "triton", "b2c3d4e5f607": None, "c3d4e5f60718": "ollama"}
        # Several refreshes later: each container was asked about once
        # (an unknown one too), and only by inspection.
        def refreshed_at() -> float:
            return scrape(exporter)["nvml_exporter_workloads_last_refresh_timestamp_seconds"][0].value

        first = refreshed_at()
        wait_until(lambda: refreshed_at() >= first + 1, 15, "three more refreshes")
        assert sorted(engine.requests) == sorted(
            f"GET /containers/{cid}/json HTTP/1.0"
            for cid in ("a1b2c3d4e5f6", "b2c3d4e5f607", "c3d4e5f60718", "d4e5f6071829"))
    finally:
        exporter.stop()
        engine.stop()

    # Without the flag nothing is asked and no name appears.
    plain = Exporter(tmp_path, str(FIXTURES / "node.toml"), interval=INTERVAL, extra=[
        "--workloads", "--path.procfs", str(FIXTURES / "proc"), "--path.rootfs", str(FIXTURES),
    ], name="plain")
    try:
        plain.wait_ready()
        m = wait_until(lambda: (m := scrape(plain)) and holdings(m).get(("1", None)) and m,
                       15, "containers attributed")
        for name in SHARES:
            assert all("container_name" not in s.labels for s in m.get(name, []))
    finally:
        plain.stop()


def test_container_engine_answers_are_checked(tmp_path):
    """An engine (or whatever listens on its socket) that answers with
    control characters, a name of 100,000 characters, or about another
    container: the name is cleaned and cut, the wrong answer refused."""
    engine_socket = tmp_path / "docker.sock"
    engine = FakeEngine(engine_socket, names={
        "a1b2c3d4e5f6": "/tri\nton\u0000\u001b[31m",
        "b2c3d4e5f607": "x" * 100_000,
        "c3d4e5f60718": "/someone-else",
    }, ids={"c3d4e5f60718": "ffff" * 16})
    exporter = engine_exporter(tmp_path, engine_socket)
    try:
        exporter.wait_ready()

        def named():
            m = scrape(exporter)
            names = container_names(m)
            return names.get("a1b2c3d4e5f6") and names.get("b2c3d4e5f607") and (names, m)

        names, m = wait_until(named, 15, "containers named")
        assert names["a1b2c3d4e5f6"] == "triton[31m"
        assert names["b2c3d4e5f607"] == "x" * 128
        assert names["c3d4e5f60718"] is None, "an answer about another container is refused"
        errors = {(s.labels["source"], s.labels["reason"])
                  for s in m["nvml_exporter_workload_read_errors"]}
        assert ("container_engine", "malformed") in errors
    finally:
        exporter.stop()
        engine.stop()
