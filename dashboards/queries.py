"""The dashboards' queries as Prometheus receives them, for tests and benchmarks.

- `panel_queries(path)`: every panel query of a dashboard JSON file.
- `substitute(expr, ...)`: what Grafana sends for the template variables
  (All is ".*", the dashboards' allValue) and interval macros.
- `recorded_rules(paths)` and `expand(expr, rules)`: the same query without
  recording rules, each recorded series replaced by the expression that
  records it, with the selector's label matchers pushed down to the series
  that carry those labels. scripts/fleet times both forms;
  tests/test_dashboards_live.py checks that both answer with the same series.

Standard library only (plus PyYAML for the rule files), so scripts can use
it without the test environment.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# Labels of a recorded series that are not on every input series: the
# matcher goes to the inputs that carry the label. Every other label (job,
# instance, cluster) is on every input series.
LABEL_CARRIERS = {
    "name": ("nvidia_gpu_info",),
    "namespace": ("nvidia_gpu_pod_share_ratio", "nvidia_gpu_mig_pod_share_ratio"),
    "engine": ("nvidia_gpu_utilization_ratio",),
    "limit": ("nvidia_gpu_power_limit_watts",),
    "state": ("nvidia_gpu_mig_enabled", "nvidia_gpu_ecc_enabled", "nvidia_gpu_nvlink_links"),
}

RECORDED = re.compile(r"\b([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)(\{[^}]*\})?(\[[0-9a-z]+\])?")
SELECTOR = re.compile(r"\b((?:nvidia_gpu|nvml_exporter)_[a-z0-9_]+)\b(\{[^}]*\})?(?!\s*\()")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def panel_queries(path: Path):
    """(panel title, refId, expr, instant) for every query of a dashboard."""
    dash = json.loads(Path(path).read_text())
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            yield panel["title"], t["refId"], t["expr"], bool(t.get("instant"))


def panels_without_data(query, dashboard: Path, timeout: float = 20, **subst) -> list[str]:
    """Panels of `dashboard` whose expression (Grafana's variables
    substituted with `subst`) `query` answers with nothing, asked again
    until every one answers or `timeout` seconds pass: a store fills a few
    scrapes in, not at once."""
    import time

    def empty() -> list[str]:
        out = []
        for title, ref, expr, _ in panel_queries(dashboard):
            expr = substitute(expr, **subst)
            if not query(expr):
                out.append(f"{title} / {ref}: {expr}")
        return out

    deadline = time.monotonic() + timeout
    missing = empty()
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = empty()
    return missing


def substitute(expr: str, *, cluster: str = ".*", job: str = ".*", instance: str = ".*", gpu: str = ".*",
               namespace: str = ".*", chassis_serial: str = ".*", rate_interval: str = "1m",
               interval_s: int = 15,
               range_s: int = 3600) -> str:
    """What Grafana sends: variables as given (".*" for All), the interval
    macros as durations and numbers. Longer macro names go first: $__range
    is a prefix of $__range_s."""
    for macro, value in (
        ("$__rate_interval", rate_interval),
        ("$__interval_ms", str(interval_s * 1000)),
        ("$__interval", f"{interval_s}s"),
        ("$__range_ms", str(range_s * 1000)),
        ("$__range_s", str(range_s)),
        ("$__range", f"{range_s}s"),
        ("$cluster", cluster),
        ("$job", job),
        ("$instance", instance),
        ("$gpu", gpu),
        ("$namespace", namespace),
        ("$chassis_serial", chassis_serial),
    ):
        expr = expr.replace(macro, value)
    return expr


def recorded_rules(paths) -> dict[str, str]:
    """record name -> expression, from Prometheus rule files."""
    import yaml

    rules: dict[str, str] = {}
    for path in paths:
        for group in yaml.safe_load(Path(path).read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    rules[rule["record"]] = rule["expr"].strip()
    return rules


def matchers(selector_body: str | None) -> list[tuple[str, str, str]]:
    """The label matchers of a selector's `{...}`, as (label, op, value)."""
    if not selector_body:
        return []
    body = selector_body.strip()[1:-1]
    found = []
    pos = 0
    while pos < len(body):
        m = MATCHER.match(body, pos)
        if not m:
            raise ValueError(f"cannot read the matchers {selector_body!r}")
        found.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
        if pos < len(body) and body[pos] == ",":
            pos += 1
    return found


def _push(expr: str, extra: list[tuple[str, str, str]]) -> str:
    """Adds `extra` matchers to the selectors in expr that carry each label."""

    def add(m: re.Match) -> str:
        metric, body = m.group(1), m.group(2)
        own = matchers(body)
        for label, op, value in extra:
            carriers = LABEL_CARRIERS.get(label)
            if (carriers is None or metric in carriers) and (label, op, value) not in own:
                own.append((label, op, value))
        if not own:
            return metric
        return metric + "{" + ", ".join(f'{k}{op}"{v}"' for k, op, v in own) + "}"

    return SELECTOR.sub(add, expr)


def expand(expr: str, rules: dict[str, str], step: str = "1m") -> str:
    """expr with every recorded series replaced by its recording expression.
    A range over a recorded series becomes a subquery at `step`, the rules'
    evaluation interval: the same points the rule would have recorded."""

    def replace(m: re.Match) -> str:
        name, body, window = m.group(1), m.group(2), m.group(3)
        if name not in rules:
            raise KeyError(f"{name} is not recorded by the rule files given")
        # Matchers that select everything change nothing: leave them out.
        extra = [x for x in matchers(body) if not (x[1] == "=~" and x[2] == ".*")]
        out = "(" + _push(rules[name], extra) + ")"
        if window:
            out += window[:-1] + ":" + step + "]"
        return out

    return RECORDED.sub(replace, expr)


def uses_recorded(expr: str) -> bool:
    return bool(RECORDED.search(expr))
