"""Shared harness for scripts/bench, scripts/load and scripts/soak.

Starts exporters on the simulated driver, reads a process's resources from
/proc, drives wrk, and talks to the simulator's control socket. Standard
library only, so the scripts run on a fresh machine before any venv exists.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WRK_SCRIPT = REPO / "benches" / "wrk-report.lua"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run(cmd, check=True, **kw)


# ---- installing and building ---------------------------------------------------


def ensure_apt(packages: list[str]) -> None:
    """Installs Debian packages that are missing (the scripts run as root on CI)."""
    missing = []
    for p in packages:
        q = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
        )
        if "install ok installed" not in q.stdout:
            missing.append(p)
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            env=env,
            stdout=subprocess.DEVNULL,
        )


def build_release() -> Path:
    """Builds the exporter and the simulated driver in release mode."""
    run(["cargo", "build", "--release", "--workspace", "--bins", "--lib"], cwd=REPO)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release"
    for f in ("nvml-exporter", "libnvml_sim.so"):
        if not (target / f).is_file():
            raise SystemExit(f"build did not produce {target / f}")
    return target


def binaries(bin_dir: Path | None, no_build: bool) -> Path:
    """Where nvml-exporter and libnvml_sim.so are: DIR as given, the release
    build as it is (`no_build`), or a fresh release build."""
    if bin_dir:
        return bin_dir.resolve()
    if no_build:
        return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release"
    return build_release()


# ---- processes and /proc ---------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole process (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: fields start after the last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_bytes(pid: int) -> int:
    return status_kib(pid, "VmRSS") * 1024


def hwm_bytes(pid: int) -> int:
    return status_kib(pid, "VmHWM") * 1024


def memory_detail(pid: int) -> dict:
    """RSS split: anonymous vs file-backed (status), and from smaps_rollup
    PSS (shared pages divided among their users) and USS (private pages:
    what the process alone costs)."""
    out = {"rss_anon": status_kib(pid, "RssAnon") * 1024, "rss_file": status_kib(pid, "RssFile") * 1024}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        kv = {}
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                kv[parts[0][:-1]] = int(parts[1]) * 1024
    out["pss"] = kv.get("Pss")
    out["uss"] = kv.get("Private_Clean", 0) + kv.get("Private_Dirty", 0)
    return out


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Resources:
    t: float
    rss: int
    threads: int
    fds: int
    cpu: float

    @staticmethod
    def of(pid: int) -> "Resources":
        return Resources(
            time.monotonic(), rss_bytes(pid), thread_count(pid), fd_count(pid), cpu_seconds(pid)
        )


def mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


# ---- HTTP --------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes
    seconds: float


def get(port: int, path: str = "/metrics", headers: dict | None = None, timeout: float = 10) -> Response:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, body, time.perf_counter() - t0)
    finally:
        conn.close()


def wait_http(port: int, path: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Waits until `path` answers 200 (readiness), or fails naming why."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited with {proc.returncode} before {path} answered 200")
        try:
            r = get(port, path, timeout=2)
            if r.status == 200:
                return
            last = f"HTTP {r.status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise SystemExit(f"{path} on port {port} not ready after {timeout}s: {last}")


GAUGE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', re.M)


def samples(text: str, name: str) -> list[tuple[str, float]]:
    """(labels, value) of every sample of metric `name` in text format."""
    out = []
    for m in GAUGE_RE.finditer(text):
        if m.group(1) == name:
            out.append((m.group(2) or "", float(m.group(3))))
    return out


# ---- exporters under test ----------------------------------------------------------


@dataclass
class Target:
    """A running exporter on the simulated driver."""

    name: str
    proc: subprocess.Popen
    port: int
    control: Path
    workdir: Path
    metrics_path: str = "/metrics"
    extra: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_ours(
    target_dir: Path,
    scenario: str,
    interval: str = "1s",
    args: list[str] | None = None,
    env: dict | None = None,
    ready_timeout: float = 60,
) -> Target:
    work = Path(tempfile.mkdtemp(prefix="nvml-exporter-bench-"))
    port = free_port()
    control = work / "sim.sock"
    e = dict(os.environ)
    e.update(
        NVML_SIM_LIBRARY=str(target_dir / "libnvml_sim.so"),
        NVML_SIM_CONTROL=str(control),
    )
    e.update(env or {})
    cmd = [
        str(target_dir / "nvml-exporter"),
        "--simulate",
        scenario,
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--collect.interval",
        interval,
        "--log.level",
        "warn",
        *(args or []),
    ]
    log("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=e, stdout=open(work / "stdout.log", "wb"), stderr=open(work / "stderr.log", "wb"))
    t = Target("nvml-exporter", proc, port, control, work)
    try:
        wait_http(port, "/-/ready", proc, ready_timeout)
    except SystemExit:
        err = (work / "stderr.log").read_text(errors="replace")[-2000:]
        t.stop()
        raise SystemExit(f"nvml-exporter did not become ready:\n{err}")
    return t


NVITOP_WRAPPER = r"""
# Runs nvitop-exporter unchanged, timing each round of its collection loop
# (the same loop as PrometheusExporter.collect, plus two clock reads) so the
# benchmark can report its poll duration and count its polls.
import sys, time
from nvitop_exporter import exporter, cli

log_path = sys.argv.pop(1)

def collect(self):
    with open(log_path, "a", buffering=1) as log:
        while True:
            start = time.monotonic()
            next_update_time = start + self.interval
            self.update_host()
            for device in self.devices:
                self.update_device(device)
            log.write(f"{time.time():.6f} {time.monotonic() - start:.6f}\n")
            time.sleep(max(0.0, next_update_time - time.monotonic()))

exporter.PrometheusExporter.collect = collect
sys.exit(cli.main())
"""


def start_nvitop(
    venv: Path, target_dir: Path, scenario: str, interval: float = 1.0, ready_timeout: float = 120
) -> Target:
    """nvitop-exporter on the same simulated fleet: the simulator presented
    as libnvidia-ml.so.1 through LD_LIBRARY_PATH."""
    work = Path(tempfile.mkdtemp(prefix="nvitop-exporter-bench-"))
    libdir = work / "lib"
    libdir.mkdir()
    (libdir / "libnvidia-ml.so.1").symlink_to(target_dir / "libnvml_sim.so")
    (work / "wrapper.py").write_text(NVITOP_WRAPPER)
    port = free_port()
    control = work / "sim.sock"
    e = dict(os.environ)
    e.update(
        LD_LIBRARY_PATH=f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
        NVML_SIM_SCENARIO=scenario,
        NVML_SIM_CONTROL=str(control),
        PYTHONUNBUFFERED="1",
    )
    polls = work / "polls.log"
    cmd = [
        str(venv / "bin" / "python"),
        str(work / "wrapper.py"),
        str(polls),
        "--bind-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--interval",
        str(interval),
    ]
    log("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=e, stdout=open(work / "stdout.log", "wb"), stderr=open(work / "stderr.log", "wb"))
    t = Target("nvitop-exporter", proc, port, control, work, extra={"polls": polls})
    try:
        wait_http(port, "/metrics", proc, ready_timeout)
        # Ready once its collection loop has finished a first round.
        deadline = time.monotonic() + ready_timeout
        while not (polls.exists() and polls.read_text().strip()):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("nvitop-exporter never finished a collection round")
            time.sleep(0.1)
    except SystemExit as e:
        err = (work / "stderr.log").read_text(errors="replace")[-2000:]
        t.stop()
        raise SystemExit(f"nvitop-exporter failed: {e}\n{err}")
    return t


def nvitop_polls(t: Target) -> list[tuple[float, float]]:
    """(wall time at end, duration) of each finished collection round."""
    out = []
    for line in t.extra["polls"].read_text().split("\n"):
        if line.strip():
            a, b = line.split()
            out.append((float(a), float(b)))
    return out


# ---- simulator control socket ------------------------------------------------------


def sim_request(control: Path, line: str, timeout: float = 10) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(control))
        s.sendall(line.encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    reply = buf.decode().strip()
    if not reply.startswith("ok"):
        raise RuntimeError(f"simulator refused {line!r}: {reply}")
    return reply[2:].strip()


def sim_calls(control: Path) -> dict[str, int]:
    reply = sim_request(control, '{ action = "calls" }')
    return {k: int(v) for k, v in re.findall(r"([A-Za-z0-9_]+)\s*=\s*(\d+)", reply)}


def sim_driver_time(control: Path) -> dict[str, float]:
    """Simulated driver time per function, microseconds (NVML_SIM_LATENCY)."""
    reply = sim_request(control, '{ action = "driver-time" }')
    return {k: float(v) for k, v in re.findall(r"([A-Za-z0-9_]+)\s*=\s*([0-9.]+)", reply)}


def sim_reset_calls(control: Path) -> None:
    sim_request(control, '{ action = "reset-calls" }')


# ---- wrk --------------------------------------------------------------------------


def wrk(
    port: int,
    connections: int,
    duration: float,
    threads: int | None = None,
    headers: dict | None = None,
    path: str = "/metrics",
    timeout: float = 5,
    pace_ms: float | None = None,
) -> dict:
    """Runs wrk and returns its figures (latencies in seconds). With
    `pace_ms`, each connection waits about that long between requests."""
    threads = threads or min(connections, 2)
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        f"--timeout={max(1, round(timeout))}s",
        "-s",
        str(WRK_SCRIPT),
    ]
    for k, v in (headers or {}).items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(f"http://127.0.0.1:{port}{path}")
    env = dict(os.environ)
    if pace_ms:
        env["WRK_PACE_MS"] = str(int(pace_ms))
    log(("WRK_PACE_MS=%d " % pace_ms if pace_ms else "") + "$ " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    for line in out.splitlines():
        if line.startswith("WRK_JSON "):
            r = json.loads(line[len("WRK_JSON "):])
            for k in list(r):
                if k.endswith("_us"):
                    r[k[:-3] + "_s"] = r.pop(k) / 1e6
            r["errors"] = sum(r[k] for k in r if k.startswith("errors_"))
            return r
    raise RuntimeError(f"wrk printed no result:\n{out}")


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
