"""Hostile-client modes of scripts/load (issue 13): what a wrong-password
flood and clients that stop reading cost the scrapes and the probes, on a
release build against the simulated fleet, loopback only. Standard library
only. Bounded in time and count; figures as Markdown and JSON.

auth-flood: basic auth with bcrypt cost 10 (the toolkit's example cost).
  `prom` logs in once (its success is remembered), then 200 wrk connections
  loop GET /metrics with a wrong password for prom. Meanwhile: a cached login
  of prom every 0.25 s, a first (uncached) login of another user every 2 s,
  and a wrong password from the flooding host every 0.5 s. Three times:
  measured from another address (127.0.0.2, as Prometheus would be), from
  the flooding address itself, and from another address with each flooding
  client paced to about 10 requests a second (a loop of curl, not wrk).

stalled-readers: clients that ask for /metrics and never read.
  1. The trickle: with --collect.interval 100ms, 500 connections opened one
     every 110 ms, each with a 2 KiB receive buffer, each pipelining 40 plain
     GET /metrics; /-/healthy and /metrics probed every 0.5 s; RSS sampled.
  2. The burst: 600 such connections at once, more than --web.max-connections
     (512); probes every 0.25 s.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import harness as h

# bcrypt cost 10 of "scrape-me" and of "fresh-login".
PROM_HASH = "$2b$10$Q8KiT/Av62no43Be3Kokpeeeaa8axfW9BTBhjtsA2/jhv49ystsRW"
FRESH_HASH = "$2b$10$7XB5wDpv5o5kwaRTH3ilMeXAKKd9PcJ/R3PamfNJfhqRjUrbDPs1q"
FRESH_USERS = 40

# The pod memory limit docs/operations.md recommends.
POD_LIMIT = 64 * 1048576


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def timed_get(port: int, source: str, headers: dict, path: str = "/metrics", timeout: float = 30):
    """(status or error name, seconds) of one GET from `source`."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        r.read()
        status = r.status
    except OSError as e:
        status = type(e).__name__
    finally:
        conn.close()
    return status, time.perf_counter() - t0


def start_with_auth(target: Path, scenario: str, config: Path, ready_auth: str) -> h.Target:
    """Like harness.start_ours, but readiness is asked with credentials."""
    work = Path(tempfile.mkdtemp(prefix="nvml-exporter-hostile-"))
    port = h.free_port()
    env = dict(os.environ, NVML_SIM_LIBRARY=str(target / "libnvml_sim.so"))
    cmd = [str(target / "nvml-exporter"), "--simulate", scenario, "--web.listen-address", f"127.0.0.1:{port}",
           "--collect.interval", "1s", "--web.config.file", str(config), "--log.level", "warn"]
    h.log("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=env, stdout=open(work / "stdout.log", "wb"), stderr=open(work / "stderr.log", "wb"))
    t = h.Target("nvml-exporter", proc, port, work / "sim.sock", work)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if timed_get(port, "127.0.0.1", {"Authorization": ready_auth}, "/-/ready", 5)[0] == 200:
                return t
        except OSError:
            pass
        time.sleep(0.2)
    err = (work / "stderr.log").read_text(errors="replace")[-2000:]
    t.stop()
    raise SystemExit(f"nvml-exporter did not become ready:\n{err}")


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarize(samples: list[tuple]) -> dict:
    ok = [s for st, s in samples if st == 200]
    statuses: dict[str, int] = {}
    for st, _ in samples:
        statuses[str(st)] = statuses.get(str(st), 0) + 1
    all_s = [s for _, s in samples]
    return {"n": len(samples), "statuses": statuses, "p50_s": pct(all_s, 50), "p99_s": pct(all_s, 99),
            "max_s": max(all_s) if all_s else None, "ok_p50_s": pct(ok, 50), "ok_max_s": max(ok) if ok else None}


class sample_until(threading.Thread):
    """Calls `probe` every `every` seconds until `t_end` (monotonic), in the
    background; `samples` holds what each call returned (None skipped)."""

    def __init__(self, t_end: float, every: float, probe):
        super().__init__(daemon=True)
        self.t_end, self.every, self.probe = t_end, every, probe
        self.samples: list = []
        self.start()

    def run(self):
        while time.monotonic() < self.t_end:
            t0 = time.monotonic()
            r = self.probe()
            if r is not None:
                self.samples.append(r)
            time.sleep(max(0.0, t0 + self.every - time.monotonic()))


def auth_flood(args, target: Path) -> tuple[dict, list[str]]:
    problems: list[str] = []
    h.ensure_apt(["wrk"])
    work = Path(tempfile.mkdtemp(prefix="nvml-exporter-auth-"))
    users = "".join(f"  fresh{i}: '{FRESH_HASH}'\n" for i in range(FRESH_USERS))
    config = work / "web.yml"
    config.write_text(f"basic_auth_users:\n  prom: '{PROM_HASH}'\n{users}")
    good = basic("prom", "scrape-me")
    out: dict = {"clients": args.auth_clients, "seconds": args.auth_seconds, "cost": 10}
    fresh_next = iter(range(FRESH_USERS))
    fresh_lock = threading.Lock()
    gz = {"Accept-Encoding": "gzip"}
    hwm = 0
    t = start_with_auth(target, args.scenario, config, good)
    try:
        # Unloaded reference: a first login, then cached ones.
        out["quiet_fresh"] = summarize([timed_get(t.port, "127.0.0.2", gz | {"Authorization": basic(f"fresh{next(fresh_next)}", "fresh-login")}) for _ in range(3)])
        out["quiet_cached"] = summarize([timed_get(t.port, "127.0.0.2", gz | {"Authorization": good}) for _ in range(20)])
        out["quiet_wrong"] = summarize([timed_get(t.port, "127.0.0.1", gz | {"Authorization": basic("prom", "nope")}) for _ in range(3)])
    finally:
        t.stop()
    wrong_pw = {"Authorization": basic("prom", "wrong"), **gz}
    # The control floods as fast, without credentials: 401 at once, no
    # bcrypt. What it costs a cached login is the cost of the request rate
    # alone. Each variant gets a fresh exporter, so no backlog of one
    # flood is measured in the next.
    for variant, source, pace, flood_headers in (
            ("other_host", "127.0.0.2", None, wrong_pw), ("same_host", "127.0.0.1", None, wrong_pw),
            ("other_host_paced", "127.0.0.2", 100, wrong_pw), ("control_no_credentials", "127.0.0.2", None, gz)):
        t = start_with_auth(target, args.scenario, config, good)  # prom's login is now remembered
        try:
            result: dict = {}
            wrk_thread = threading.Thread(target=lambda: result.update(h.wrk(
                t.port, args.auth_clients, args.auth_seconds, headers=flood_headers, timeout=30, pace_ms=pace)))
            before = h.Resources.of(t.pid)
            wrk_thread.start()
            time.sleep(2)  # let the flood fill the queue
            t_end = time.monotonic() + args.auth_seconds - 4

            def fresh_login():
                with fresh_lock:
                    user = next(fresh_next, None)
                if user is None:
                    return None
                return timed_get(t.port, source, gz | {"Authorization": basic(f"fresh{user}", "fresh-login")})

            # Each kind of client on its own thread, so a slow answer to one
            # does not delay the others' samples.
            cached = sample_until(t_end, 0.25, lambda: timed_get(t.port, source, gz | {"Authorization": good}))
            fresh = sample_until(t_end, 2, fresh_login)
            wrong = sample_until(t_end, 0.5, lambda: timed_get(
                t.port, "127.0.0.1", gz | {"Authorization": basic("prom", "guess")}))
            for th in (cached, fresh, wrong):
                th.join()
            wrk_thread.join()
            after = h.Resources.of(t.pid)
            hwm = max(hwm, h.hwm_bytes(t.pid))
        finally:
            t.stop()
        v = {"source": source, "cached": summarize(cached.samples), "fresh": summarize(fresh.samples),
             "wrong_from_flooder": summarize(wrong.samples), "wrk": result,
             "cpu_s": after.cpu - before.cpu, "rss_after": after.rss}
        out[variant] = v
        c = v["cached"]
        if c["statuses"] != {"200": c["n"]}:
            problems.append(f"{variant}: cached logins during the flood: {c['statuses']}")
        if variant.startswith("other_host") and v["fresh"]["statuses"].get("200", 0) != v["fresh"]["n"]:
            problems.append(f"{variant}: fresh logins during the flood: {v['fresh']['statuses']}")
    out["hwm"] = hwm
    return out, problems


def report_auth(o: dict, a) -> None:
    f = h.fmt_seconds
    print(f"## Wrong-password flood: {o['clients']} wrk connections for {o['seconds']:g} s, bcrypt cost {o['cost']}\n")
    print(f"Quiet: first login {f(o['quiet_fresh']['p50_s'])} (median of {o['quiet_fresh']['n']}), cached login "
          f"{f(o['quiet_cached']['p50_s'])} median, {f(o['quiet_cached']['max_s'])} max; wrong password "
          f"{f(o['quiet_wrong']['p50_s'])}.\n")
    print("| measured from | cached login: answers | p50 | p99 | max | first login: answers | p50 | max "
          "| wrong password from the flooding host: answers | p50 | p99 | flood requests (non-2xx) |")
    print("|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|")
    for key, name in (("other_host", "another address (127.0.0.2)"), ("same_host", "the flooding address"),
                      ("other_host_paced", "another address; flood paced to ~10 requests/s per client"),
                      ("control_no_credentials", "another address; control: the flood sends no credentials")):
        v = o[key]
        c, fr, w, r = v["cached"], v["fresh"], v["wrong_from_flooder"], v["wrk"]
        print(f"| {name} | {c['statuses']} | {f(c['p50_s'])} | {f(c['p99_s'])} | {f(c['max_s'])} | {fr['statuses']} | "
              f"{f(fr['p50_s'])} | {f(fr['max_s'])} | {w['statuses']} | {f(w['p50_s'])} | {f(w['p99_s'])} | "
              f"{r.get('requests', 0):,} ({r.get('errors_status', 0):,}) |")
    print(f"\nPeak RSS {h.mib(o['hwm'])}.")


def stalled_socket(port: int, requests: int, rcvbuf: int = 2048) -> socket.socket | None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * requests)
    except OSError:
        s.close()
        return None
    return s


class Prober:
    """Probes /-/healthy and /metrics, and samples RSS and fds, in the
    background until stopped."""

    def __init__(self, port: int, pid: int, every: float):
        self.port, self.pid, self.every = port, pid, every
        self.healthy: list[tuple] = []
        self.metrics: list[tuple] = []
        self.rss_peak = 0
        self.fds_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.healthy.append(timed_get(self.port, "127.0.0.1", {}, "/-/healthy", 5))
            self.metrics.append(timed_get(self.port, "127.0.0.1", {"Accept-Encoding": "gzip"}, "/metrics", 5))
            r = h.Resources.of(self.pid)
            self.rss_peak = max(self.rss_peak, r.rss)
            self.fds_peak = max(self.fds_peak, r.fds)
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def stalled_readers(args, target: Path) -> tuple[dict, list[str]]:
    problems: list[str] = []
    out: dict = {}
    # 1. The trickle.
    t = h.start_ours(target, args.scenario, "100ms")
    try:
        time.sleep(2)
        size = len(h.get(t.port, headers={"Accept-Encoding": "identity"}).body)
        before = h.Resources.of(t.pid)
        socks = []
        with Prober(t.port, t.pid, 0.5) as p:
            t0 = time.monotonic()
            for i in range(args.stalled_trickle):
                s = stalled_socket(t.port, 40)
                if s:
                    socks.append(s)
                time.sleep(max(0.0, t0 + (i + 1) * 0.11 - time.monotonic()))
            opened_s = time.monotonic() - t0
            during = h.Resources.of(t.pid)
            time.sleep(15)  # past the write timeout of the last ones
            settled = h.Resources.of(t.pid)
        for s in socks:
            s.close()
        time.sleep(2)
        after = h.Resources.of(t.pid)
        out["trickle"] = {
            "connections": len(socks), "open_seconds": opened_s, "bytes_plain": size,
            "before": vars(before), "during": vars(during), "settled": vars(settled), "after": vars(after),
            "rss_peak_sampled": p.rss_peak, "fds_peak": p.fds_peak, "hwm": h.hwm_bytes(t.pid),
            "healthy": summarize(p.healthy), "metrics": summarize(p.metrics),
        }
    finally:
        t.stop()
    tr = out["trickle"]
    if tr["healthy"]["statuses"] != {"200": tr["healthy"]["n"]}:
        problems.append(f"trickle: /-/healthy answered {tr['healthy']['statuses']}")
    if tr["hwm"] > POD_LIMIT:
        problems.append(f"trickle: peak RSS {h.mib(tr['hwm'])} above the 64 MiB pod limit")

    # 2. The burst, over the connection cap.
    t = h.start_ours(target, args.scenario, "1s")
    try:
        time.sleep(2)
        before = h.Resources.of(t.pid)
        with Prober(t.port, t.pid, 0.25) as p:
            time.sleep(1)
            socks = [s for s in (stalled_socket(t.port, 40) for _ in range(args.stalled_burst)) if s]
            time.sleep(25)
        during_healthy, during_metrics = summarize(p.healthy), summarize(p.metrics)
        settled = h.Resources.of(t.pid)
        for s in socks:
            s.close()
        time.sleep(2)
        out["burst"] = {
            "connections": len(socks), "before": vars(before), "settled": vars(settled),
            "after": vars(h.Resources.of(t.pid)), "fds_peak": p.fds_peak, "hwm": h.hwm_bytes(t.pid),
            "healthy": during_healthy, "metrics": during_metrics,
            "metrics_timeline": [st for st, _ in p.metrics],
        }
    finally:
        t.stop()
    b = out["burst"]
    if b["healthy"]["statuses"] != {"200": b["healthy"]["n"]}:
        problems.append(f"burst: /-/healthy answered {b['healthy']['statuses']}")
    if b["hwm"] > POD_LIMIT:
        problems.append(f"burst: peak RSS {h.mib(b['hwm'])} above the 64 MiB pod limit")
    return out, problems


def report_stalled(o: dict, a) -> None:
    f = h.fmt_seconds
    tr, b = o["trickle"], o["burst"]
    print(f"## Clients that stop reading ({tr['bytes_plain']:,} bytes per plain answer)\n")
    print("| flood | connections | /-/healthy answers | /metrics answers | RSS before | peak RSS | RSS 15 s later | "
          "fds before / peak / 15 s later |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    print(f"| trickle: one every 110 ms, --collect.interval 100ms | {tr['connections']} | {tr['healthy']['statuses']} | "
          f"{tr['metrics']['statuses']} | {h.mib(tr['before']['rss'])} | {h.mib(tr['hwm'])} | {h.mib(tr['settled']['rss'])} | "
          f"{tr['before']['fds']} / {tr['fds_peak']} / {tr['settled']['fds']} |")
    print(f"| burst: all at once, over --web.max-connections | {b['connections']} | {b['healthy']['statuses']} | "
          f"{b['metrics']['statuses']} | {h.mib(b['before']['rss'])} | {h.mib(b['hwm'])} | {h.mib(b['settled']['rss'])} | "
          f"{b['before']['fds']} / {b['fds_peak']} / {b['settled']['fds']} |")
    print(f"\n/-/healthy latency during the burst: p50 {f(b['healthy']['p50_s'])}, max {f(b['healthy']['max_s'])}. "
          f"/metrics during the burst, in order: {b['metrics_timeline']}")
