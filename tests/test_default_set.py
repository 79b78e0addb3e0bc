"""Every series of the default set is read by something we ship.

A series costs Prometheus memory on every GPU of a fleet, so it is on by
default only if a shipped alert or recording rule (alerts/*.rules.yml), a
dashboard panel or variable (dashboards/*.json), or a documented diagnostic
(a ```promql block in docs/ or the README) selects it. This test scrapes the
real binary with default flags on the simulated fleets, collects every
series selector of those sources (metric name and label matchers, Grafana's
variables as "All"), and fails on each default series no selector matches.
The series budget itself is tests/e2e/budget.rs.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import queries
import yaml
from prometheus_client.parser import text_string_to_metric_families
from promstack import Exporter, http_get, sim_listing

ROOT = Path(__file__).resolve().parent.parent

SELECTOR = re.compile(r"\b((?:nvidia_gpu|nvml_exporter|process|promhttp)_[a-z0-9_]+)\b(\{[^}]*\})?")
PROMQL_BLOCK = re.compile(r"```promql\n(.*?)```", re.DOTALL)
# Every built-in scenario (the simulator's list), a Volta board (page
# retirement, which newer GPUs replace by row remapping) and a GB200 tray
# with a fabric health condition holding (its series exist only then).
SCENARIOS = [*sim_listing("scenarios"),
             str(ROOT / "tests" / "dashboards" / "volta-incidents.toml"),
             str(ROOT / "tests" / "dashboards" / "gb200-tray.toml")]


def shipped_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every query we ship."""
    out = []
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                out.append((f"{path.name}: {rule.get('alert') or rule.get('record')}", rule["expr"]))
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        for title, ref, expr, _ in queries.panel_queries(path):
            out.append((f"{path.name}: {title} / {ref}", expr))
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append((f"{path.name}: variable {var['name']}", var["query"]["query"]))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in PROMQL_BLOCK.findall(path.read_text()):
            out.append((path.name, block))
    return out


def selectors() -> dict[str, list[list[tuple[str, str, str]]]]:
    """metric name -> the matcher lists of every selector that names it."""
    found: dict[str, list] = {}
    for _, expr in shipped_queries():
        for name, body in SELECTOR.findall(queries.substitute(expr)):
            found.setdefault(name, []).append(queries.matchers(body or None))
    return found


def matches(labels: dict[str, str], matcher_list) -> bool:
    for label, op, value in matcher_list:
        have = labels.get(label, "")
        hit = re.fullmatch(value, have) is not None if "~" in op else have == value
        if hit != (op in ("=", "=~")):
            return False
    return True


def default_series(scenario: str, workdir: Path) -> list[tuple[str, dict[str, str]]]:
    exporter = Exporter(workdir, scenario, interval="200ms", name=Path(scenario).stem)
    try:
        exporter.wait_ready()
        # GPM needs two polls, the Volta incidents a few seconds: scrape until
        # the series count has not grown for a second.
        last, stable_since, deadline = -1, time.monotonic(), time.monotonic() + 30
        while time.monotonic() < deadline:
            status, body = http_get(f"http://{exporter.address}/metrics")
            assert status == 200
            n = body.count(b"\n")
            if n > last:
                last, stable_since, text = n, time.monotonic(), body.decode()
            elif time.monotonic() - stable_since > 1.5:
                break
            time.sleep(0.2)
    finally:
        exporter.stop()
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels)))
    return out


def test_selector_reading():
    """The matcher semantics the coverage check relies on."""
    assert queries.matchers('{job=~".*", gpu="3", reason!~"gpu_idle|x"}') == [
        ("job", "=~", ".*"), ("gpu", "=", "3"), ("reason", "!~", "gpu_idle|x")]
    labels = {"gpu": "3", "reason": "hw_thermal"}
    assert matches(labels, [("gpu", "=", "3"), ("reason", "!~", "gpu_idle|x")])
    assert not matches(labels, [("reason", "=~", "hw_")])  # anchored, as in PromQL
    assert matches(labels, [("state", "!=", "up")])  # an absent label is ""
    found = selectors()
    assert ("limit", "=", "enforced") in found["nvidia_gpu_power_limit_watts"][0] or any(
        ("limit", "=", "enforced") in m for m in found["nvidia_gpu_power_limit_watts"])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: Path(s).stem)
def test_every_default_series_is_read_by_a_shipped_query(scenario, tmp_path):
    found = selectors()
    unread: dict[str, list[dict]] = {}
    series = default_series(scenario, tmp_path)
    assert len(series) > 50, f"{scenario}: only {len(series)} series"
    for name, labels in series:
        if not any(matches(labels, m) for m in found.get(name, [])):
            unread.setdefault(name, []).append(labels)
    report = "\n".join(f"  {name}: {len(ls)} series, e.g. {ls[0]}" for name, ls in unread.items())
    assert not unread, (
        f"{scenario}: default series no shipped alert, recording rule, dashboard or documented "
        f"diagnostic reads (read them, or move them behind a --collector.<family>.<detail> "
        f"switch):\n{report}")
