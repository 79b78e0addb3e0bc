"""Real processes on loopback for the live dashboard and alerting tests: the
exporter on the simulated driver, Prometheus, Alertmanager and a webhook
receiver. Every server binds 127.0.0.1 on a free port and is stopped by the
test that started it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXPORTER = ROOT / "target" / "debug" / "nvml-exporter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape_families(exporter) -> dict[str, list]:
    """The exporter's /metrics, parsed: family name -> its samples."""
    from prometheus_client.parser import text_string_to_metric_families
    status, body = http_get(f"http://{exporter.address}/metrics")
    assert status == 200, (status, body[:200])
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def scrape_samples(exporter) -> list:
    """The exporter's /metrics, parsed: every sample, in order."""
    return [s for samples in scrape_families(exporter).values() for s in samples]


def pick(samples: list, name: str, **labels) -> list:
    """The samples of `name` whose labels include `labels`."""
    return [s for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last_err = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ValueError) as e:  # not listening yet, partial body
            last_err = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_err})")


def sim_listing(command: str) -> list[str]:
    """The first column of an offline `nvml-sim` listing (`drivers`,
    `scenarios`): the simulator's own data, so a branch or scenario added
    there is tested without touching a test. Needs `cargo build --workspace`."""
    cli = ROOT / "target" / "debug" / "nvml-sim"
    assert cli.exists(), f"{cli} is missing: run `cargo build --workspace`"
    out = subprocess.run([str(cli), command], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def sim_cli(socket_path: Path, *args: str) -> str:
    """The `nvml-sim` fault CLI against a running simulated driver (nvml-sim
    README, "The nvml-sim CLI"): its reply, which must be ok."""
    cli = ROOT / "target" / "debug" / "nvml-sim"
    assert cli.exists(), f"{cli} is missing: run `cargo build --workspace`"
    out = subprocess.run([str(cli), "--socket", str(socket_path), *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"nvml-sim {' '.join(args)}: {out.stderr}"
    return out.stdout.strip()


def require_binary(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run scripts/install-test-deps"
    return path


# Simulator settings a developer's shell may carry; a test passes its own.
SIM_VARS = ("NVML_SIM_CONTROL", "NVML_SIM_TIME_SCALE", "NVML_SIM_CALL_LOG", "NVML_SIM_SCENARIO",
            "NVML_SIM_DRIVER")


class Process:
    """A child process whose output goes to a log file we can show on failure."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict | None = None):
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        inherited = {k: v for k, v in os.environ.items() if k not in SIM_VARS}
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**inherited, **(env or {})}, cwd=workdir)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def assert_running(self):
        assert self.proc.poll() is None, f"{self.name} exited {self.proc.returncode}:\n{self.log()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Exporter(Process):
    def __init__(self, workdir: Path, scenario: str, interval: str = "1s",
                 extra: list[str] | None = None, env: dict | None = None, name: str | None = None,
                 port: int | None = None):
        """`port`: the port of an exporter this one replaces (a restart)."""
        assert EXPORTER.exists(), f"{EXPORTER} missing: cargo build --workspace"
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        super().__init__(name or f"exporter-{scenario}", [
            str(EXPORTER), "--simulate", scenario, "--web.listen-address", self.address,
            "--collect.interval", interval, *(extra or []),
        ], workdir, env)

    def wait_ready(self, timeout: float = 30):
        def ready():
            self.assert_running()
            return http_get(f"http://{self.address}/-/ready")[0] == 200
        wait_until(ready, timeout, f"{self.name} /-/ready")


class Prometheus(Process):
    def __init__(self, workdir: Path, scrape_targets: dict[str, list[str]],
                 rule_files: list[Path] | None = None, alertmanager: str | None = None,
                 interval: str = "1s", remote_write: str | None = None,
                 target_labels: dict[str, dict[str, str]] | None = None,
                 job_options: dict[str, dict] | None = None, resend_delay: str | None = None):
        """`target_labels`: labels a job's targets carry (as Kubernetes
        service discovery gives a target its pod's), by job; `job_options`:
        further settings of a job's scrape config (metric_relabel_configs);
        `resend_delay`: how soon a firing alert is sent to Alertmanager
        again (Prometheus resends an alert whose annotations changed only
        then: 1 m by default)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.interval = interval
        labels = target_labels or {}
        options = job_options or {}
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "scrape_configs": [{"job_name": job, "static_configs": [
                {"targets": targets, **({"labels": labels[job]} if job in labels else {})}],
                **options.get(job, {})}
                               for job, targets in scrape_targets.items()],
        }
        if rule_files:
            config["rule_files"] = [str(p) for p in rule_files]
        if alertmanager:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
        if remote_write:
            # Sent within a second, so that tests need not wait for batches.
            config["remote_write"] = [{"url": remote_write,
                                       "queue_config": {"batch_send_deadline": "1s"}}]
        cfg = workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        data = workdir / "prometheus-data"
        data.mkdir()
        super().__init__("prometheus", [
            require_binary("prometheus"), f"--config.file={cfg}",
            f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
            *([f"--rules.alert.resend-delay={resend_delay}"] if resend_delay else []),
        ], workdir)

    def wait_ready(self, timeout: float = 30):
        def ready():
            self.assert_running()
            return http_get(f"{self.url}/-/ready")[0] == 200
        wait_until(ready, timeout, "prometheus /-/ready")

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url, timeout=10)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise PromQLError(f"{status} {doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float, step: str) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def wait_targets_up(self, count: int, timeout: float = 30):
        def all_up():
            self.assert_running()
            return len(self.query("up == 1")) >= count
        wait_until(all_up, timeout, f"{count} scrape targets up")


    def scrapes(self) -> dict[str, int]:
        """How many times Prometheus has scraped each target, by instance
        (up's samples in the last hour; a test is shorter), answered or not."""
        return {r["metric"]["instance"]: int(r["value"][1])
                for r in self.query("count_over_time(up[1h])")}

    def wait_scrapes(self, instances: list[str], count: int, timeout: float = 60):
        """Waits until each of `instances` has been scraped `count` more
        times than now: the event a test that needs samples in Prometheus
        waits on (under load a guessed sleep holds fewer scrapes)."""
        start = self.scrapes()

        def done():
            self.assert_running()
            now = self.scrapes()
            return all(now.get(i, 0) >= start.get(i, 0) + count for i in instances)
        wait_until(done, timeout, f"{count} more scrapes of {instances}")

    def rule_evaluations(self) -> dict[str, str]:
        """The last evaluation time of each rule group evaluated at the
        global interval, by file and name. A group with a longer interval
        of its own (the 2-minute inventory counts) is left out: a test
        cannot wait for it."""
        every = _seconds(self.interval)
        return {f"{g['file']}:{g['name']}": g["lastEvaluation"] for g in self.api("rules")["groups"]
                if g["interval"] <= every}

    def wait_evaluations(self, count: int = 2, timeout: float = 60):
        """Waits until every rule group (of the global interval) has been
        evaluated at least `count` more times than now (its last
        evaluation time seen to change `count` times; a missed change only
        makes this wait longer): what a test that asserts an alert is, or
        is not, active waits on."""
        last = self.rule_evaluations()
        assert last, "no rule groups loaded"
        seen = dict.fromkeys(last, 0)

        def done():
            self.assert_running()
            for group, at in self.rule_evaluations().items():
                if at != last.get(group):
                    last[group] = at
                    seen[group] = seen.get(group, 0) + 1
            return min(seen.values()) >= count
        try:
            wait_until(done, timeout, f"{count} more evaluations of every rule group", interval=0.1)
        except AssertionError as e:
            behind = {g: (n, last[g]) for g, n in seen.items() if n < count}
            raise AssertionError(f"{e}; behind: {behind}") from None


def _seconds(duration: str) -> float:
    """A Prometheus duration of one unit ("500ms", "1s", "2m") in seconds."""
    for unit, scale in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if duration.endswith(unit) and duration[: -len(unit)].isdigit():
            return int(duration[: -len(unit)]) * scale
    raise ValueError(f"not a one-unit duration: {duration}")


class PromQLError(Exception):
    pass


class Alertmanager(Process):
    def __init__(self, workdir: Path, config: dict):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        cfg = workdir / "alertmanager.yml"
        cfg.write_text(yaml.safe_dump(config))
        data = workdir / "alertmanager-data"
        data.mkdir()
        super().__init__("alertmanager", [
            require_binary("prometheus-alertmanager"), f"--config.file={cfg}",
            f"--web.listen-address={self.address}", "--cluster.listen-address=",
            f"--storage.path={data}", "--log.level=warn",
        ], workdir)

    def wait_ready(self, timeout: float = 30):
        def ready():
            self.assert_running()
            return http_get(f"http://{self.address}/-/ready")[0] == 200
        wait_until(ready, timeout, "alertmanager /-/ready")

    def alerts(self) -> list[dict]:
        """Every alert Alertmanager holds, silenced and inhibited included,
        with its `status` (state, inhibitedBy)."""
        status, body = http_get(f"http://{self.address}/api/v2/alerts")
        assert status == 200, body
        return json.loads(body)


class WebhookReceiver:
    """Collects Alertmanager webhook notifications, keyed by request path."""

    def __init__(self):
        self.notifications: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with receiver._lock:
                    receiver.notifications.append((self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self) -> list[tuple[str, dict]]:
        """Every alert of every notification so far, with the path it came to."""
        with self._lock:
            return [(path, alert) for path, n in self.notifications for alert in n["alerts"]]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def sim_control(socket_path: Path, request: str) -> str:
    """One request on the simulated driver's control socket (nvml-sim
    README, "Control protocol"); the reply must be ok and is returned."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(socket_path))
        s.sendall(request.encode() + b"\n")
        reply = s.makefile().readline().strip()
    assert reply.startswith("ok"), f"{request}: {reply}"
    return reply


class Stack:
    """The processes of one alerting test and its webhook receiver. On a
    failed assertion their logs and what reached the receiver are printed
    (pytest shows them with the failure); at the end every process stops,
    the last started first."""

    def __init__(self, receiver: "WebhookReceiver"):
        self.receiver = receiver
        self.processes: list[Process] = []

    def add(self, process):
        self.processes.append(process)
        return process

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, AssertionError):
            for p in self.processes:
                print(f"----- {p.name} log -----\n{p.log()}")
            for path, alert in self.receiver.alerts():
                print(path, alert["status"], alert["labels"])
        for p in reversed(self.processes):
            p.stop()
        self.receiver.stop()
        return False
