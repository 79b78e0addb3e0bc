#!/usr/bin/env python3
"""Generates the Grafana dashboards in this directory from one description.

The JSON files are what users import; this script is how we keep three
dashboards consistent (variables, datasource references, units, links)
without hand-editing thousands of lines. Run it after changing a panel:

    python3 dashboards/build.py

tests/test_dashboards.py fails when the committed JSON differs from what
this script generates, and runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["nvidia", "gpu", "nvml-exporter"]

# Label matchers every per-GPU query carries. `cluster` is optional (the
# chart's `cluster` value or an external label): with "All" (.*) it also
# matches series that have no cluster label at all.
SEL = 'cluster=~"$cluster", job=~"$job", instance=~"$instance", gpu=~"$gpu"'
# For node-level series (no gpu label).
NODE = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------


class Layout:
    """Places panels left to right on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict] = []

    def add(self, panel: dict, w: int, h: int) -> dict:
        if self.x + w > 24:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        panel["id"] = self.next_id
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)
        return panel

    def row(self, title: str) -> None:
        if self.x:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x = 0
        self.y += 1
        self.row_h = 0


def target(expr: str, legend: str = "__auto", ref: str = "A", instant: bool = False,
           table: bool = False) -> dict:
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    if table:
        t["format"] = "table"
    return t


def targets(*specs) -> list[dict]:
    """specs: (expr, legend) pairs, refIds assigned A, B, C..."""
    out = []
    for i, spec in enumerate(specs):
        expr, legend = spec[0], spec[1]
        opts = spec[2] if len(spec) > 2 else {}
        out.append(target(expr, legend, ref=chr(ord("A") + i), **opts))
    return out


def thresholds(*steps) -> dict:
    """steps: (value or None, color)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


GREEN = thresholds((None, "green"))


def base(kind: str, title: str, description: str, unit: str, tgts: list[dict],
         defaults: dict | None = None, options: dict | None = None,
         overrides: list | None = None, links: list | None = None,
         transformations: list | None = None) -> dict:
    d = {"unit": unit, "thresholds": GREEN, "color": {"mode": "palette-classic"}}
    d.update(defaults or {})
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": d, "overrides": overrides or []},
        "options": options or {},
        "targets": tgts,
    }
    if links:
        p["links"] = links
    if transformations:
        p["transformations"] = transformations
    return p


def timeseries(title, description, unit, tgts, minv=None, maxv=None, stack=False,
               draw="line", overrides=None, fill=10):
    custom = {
        "drawStyle": draw,
        "lineWidth": 1,
        "fillOpacity": fill,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "axisPlacement": "auto",
        "lineInterpolation": "linear",
    }
    defaults = {"custom": custom}
    if minv is not None:
        defaults["min"] = minv
    if maxv is not None:
        defaults["max"] = maxv
    return base("timeseries", title, description, unit, tgts, defaults, {
        "legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                   "calcs": ["lastNotNull", "max"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }, overrides)


def stat(title, description, unit, tgts, thresh=GREEN, mappings=None, color_mode="value",
         text_mode="auto", decimals=None):
    defaults = {"thresholds": thresh, "color": {"mode": "thresholds"}}
    if mappings:
        defaults["mappings"] = mappings
    if decimals is not None:
        defaults["decimals"] = decimals
    return base("stat", title, description, unit, tgts, defaults, {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": color_mode,
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": text_mode,
    })


def bargauge(title, description, unit, tgts, thresh=GREEN, minv=None, maxv=None):
    defaults = {"thresholds": thresh, "color": {"mode": "thresholds"}}
    if minv is not None:
        defaults["min"] = minv
    if maxv is not None:
        defaults["max"] = maxv
    return base("bargauge", title, description, unit, tgts, defaults, {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
        "valueMode": "color",
    })


def state_timeline(title, description, unit, tgts, mappings, thresh):
    return base("state-timeline", title, description, unit, tgts,
                {"mappings": mappings, "thresholds": thresh, "color": {"mode": "thresholds"},
                 "custom": {"fillOpacity": 80, "lineWidth": 0}},
                {"showValue": "never", "mergeValues": True, "rowHeight": 0.9,
                 "alignValue": "left",
                 "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                 "tooltip": {"mode": "single", "sort": "none"}})


def table(title, description, unit, tgts, transformations=None, overrides=None, links=None):
    return base("table", title, description, unit, tgts,
                {"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}},
                {"showHeader": True, "cellHeight": "sm",
                 "footer": {"show": False, "reducer": ["sum"], "fields": ""}},
                overrides, links, transformations)


def text(title, description, content):
    return {
        "type": "text",
        "title": title,
        "description": description,
        "options": {"mode": "markdown", "content": content,
                    "code": {"language": "plaintext", "showLineNumbers": False,
                             "showMiniMap": False}},
    }


def value_map(pairs) -> list[dict]:
    """pairs: (value, text, color)."""
    return [{"type": "value", "options": {str(v): {"text": t, "color": c, "index": i}
                                           for i, (v, t, c) in enumerate(pairs)}}]


UP_MAP = value_map([(0, "DOWN", "red"), (1, "UP", "green")])
ACTIVE_MAP = value_map([(0, "inactive", "transparent"), (1, "active", "red")])
YES_NO_MAP = value_map([(0, "no", "green"), (1, "YES", "red")])


def override(name: str, props: dict) -> dict:
    return {"matcher": {"id": "byName", "options": name},
            "properties": [{"id": k, "value": v} for k, v in props.items()]}


# --------------------------------------------------------------------------
# Variables and dashboard shell
# --------------------------------------------------------------------------


def query_var(name, label, query, multi=True, include_all=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "sort": 3,
        "multi": multi,
        "includeAll": include_all,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }


def variables() -> list[dict]:
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "regex": "",
            "options": [],
            "refresh": 1,
            "hide": 0,
            "skipUrlSync": False,
        },
        query_var("cluster", "Cluster", "label_values(nvml_exporter_build_info, cluster)"),
        query_var("job", "Job", 'label_values(nvml_exporter_build_info{cluster=~"$cluster"}, job)'),
        query_var("instance", "Node", 'label_values(nvml_exporter_build_info{job=~"$job"}, instance)'),
        query_var("gpu", "GPU", 'label_values(nvidia_gpu_info{job=~"$job", instance=~"$instance"}, gpu)'),
    ]


def dashboard(uid: str, title: str, description: str, layout: Layout,
              extra_variables: tuple = ()) -> dict:
    return {
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }]},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [{
            "type": "dashboards",
            "title": "nvml-exporter dashboards",
            "tags": ["nvml-exporter"],
            "asDropdown": False,
            "includeVars": True,
            "keepTime": True,
            "targetBlank": False,
            "icon": "external link",
            "tooltip": "",
            "url": "",
        }],
        "panels": layout.panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": TAGS,
        "templating": {"list": variables() + list(extra_variables)},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# --------------------------------------------------------------------------
# Fleet overview
# --------------------------------------------------------------------------


# Recorded per node and model by alerts/nvidia-gpu-fleet.rules.yml: the
# fleet panels read these, one series per node, instead of every GPU's.
def rec(name: str, extra: str = "") -> str:
    """A recorded fleet series with the dashboard's node selection."""
    sel = NODE + (", " + extra if extra else "")
    return f"instance_name:{name}{{{sel}}}"


UP_COUNT = rec("nvidia_gpu_up:count")
UP_SUM = rec("nvidia_gpu_up:sum")
UTIL_SUM = rec("nvidia_gpu_utilization_ratio:sum", 'engine="gpu"')
UTIL_COUNT = rec("nvidia_gpu_utilization_ratio:count", 'engine="gpu"')
MEM_USED = rec("nvidia_gpu_memory_used_bytes:sum")
MEM_TOTAL = rec("nvidia_gpu_memory_total_bytes:sum")
POWER = rec("nvidia_gpu_power_usage_watts:sum")
POWER_LIMIT = rec("nvidia_gpu_power_limit_watts:sum", 'limit="enforced"')
ENERGY_RATE = rec("nvidia_gpu_energy_joules:rate5m")
MIG_ENABLED = rec("nvidia_gpu_mig_enabled:sum", 'state="current"')
RULES_NOTE = (" From the recording rules (alerts/nvidia-gpu-fleet.rules.yml), per node: the GPU "
              "variable does not apply.")


def fleet_overview() -> dict:
    L = Layout()
    L.row("Fleet")
    L.add(stat("GPUs", "GPUs known to the exporters in scope (including lost or hung ones)."
               + RULES_NOTE, "short", targets((f"sum({UP_COUNT})", "GPUs"))), 3, 4)
    L.add(stat("Healthy GPUs", "GPUs whose last sample completed (nvidia_gpu_up = 1)."
               + RULES_NOTE, "short", targets((f"sum({UP_SUM})", "healthy"))), 3, 4)
    L.add(stat("Unhealthy GPUs", "GPUs that are lost, hung or failing (nvidia_gpu_up = 0)."
               + RULES_NOTE, "short",
               targets((f"(sum({UP_COUNT}) - sum({UP_SUM})) or vector(0)", "unhealthy")),
               thresholds((None, "green"), (1, "red"))), 3, 4)
    L.add(stat("Nodes", "Exporter targets up / in scope.", "short", targets(
        (f"sum(up{{{NODE}}} and on (job, instance) nvml_exporter_build_info)", "up"))), 3, 4)
    L.add(stat("Firing GPU alerts",
               "Alerts of the nvml-exporter rules that are firing now, critical and warning.",
               "short", targets(
                   ('count(ALERTS{alertstate="firing", severity="critical", '
                    'alertname=~"NvidiaGpu.*|NvmlExporter.*", job=~"$job", instance=~"$instance"}) or vector(0)',
                    "critical"),
                   ('count(ALERTS{alertstate="firing", severity="warning", '
                    'alertname=~"NvidiaGpu.*|NvmlExporter.*", job=~"$job", instance=~"$instance"}) or vector(0)',
                    "warning")),
               thresholds((None, "green"), (1, "orange"))), 3, 4)
    L.add(stat("GPU utilization", "Mean GPU engine utilization over the GPUs that report it "
               "(not MIG-enabled GPUs: NVML has no whole-GPU utilization there)." + RULES_NOTE,
               "percentunit", targets((f"sum({UTIL_SUM}) / sum({UTIL_COUNT})", "utilization")),
               decimals=1), 3, 4)
    L.add(stat("Memory used", "Frame buffer memory used over total, whole fleet in scope."
               + RULES_NOTE, "percentunit",
               targets((f"sum({MEM_USED}) / sum({MEM_TOTAL})", "used")),
               thresholds((None, "green"), (0.9, "orange")), decimals=1), 3, 4)
    L.add(stat("Power draw", "Sum of the GPUs' power draw now." + RULES_NOTE, "watt",
               targets((f"sum({POWER})", "power"))), 3, 4)

    L.row("What to do now")
    L.add(bargauge("GPUs by action", "GPUs in scope by their verdict "
                   "(nvidia_gpu_recommended_action): none, restart_app, reset_gpu, reboot, "
                   "check_hardware, rma. The worst action of every signal wins; the table beside "
                   "says which signal decided it (docs/operations.md, \"What to do with a GPU now\").",
                   "short",
                   targets((f'count by (action) (nvidia_gpu_recommended_action{{{SEL}, gpu_instance=""}})',
                            "{{action}}", {"instant": True})),
                   thresholds((None, "green"), (1, "orange")), minv=0), 8, 8)
    L.add(table(
        "GPUs that need an action",
        "Every GPU (and MIG instance) whose verdict is not none: the action, and the signal that "
        "decided it (reason). reset_gpu and worse page as NvidiaGpuActionRequired. Click a GPU to "
        "open its detail dashboard.",
        "short",
        [target(f'nvidia_gpu_recommended_action{{{SEL}, action!="none"}}', ref="A", instant=True,
                table=True)],
        transformations=[
            {"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True,
                                  "cluster": True},
                "indexByName": {"instance": 0, "gpu": 1, "uuid": 2, "gpu_instance": 3,
                                "compute_instance": 4, "action": 5, "reason": 6}}},
        ],
        overrides=[override("gpu", {"links": DETAIL_LINK_TABLE})]), 16, 8)

    rack_row(L)

    L.row("Health per node and GPU")
    health_q = [
        (f"max by (instance, gpu, uuid) (nvidia_gpu_up{{{SEL}}})", "up"),
        (f'max by (instance, gpu, uuid) (nvidia_gpu_ecc_errors_total{{{SEL}, error="uncorrected", '
         f'scope="volatile"}})', "uncorrected ECC"),
        (f"max by (instance, gpu, uuid) (nvidia_gpu_remapped_rows_pending{{{SEL}}})",
         "remap pending"),
        (f"sum by (instance, gpu, uuid) (nvidia_gpu_xid_errors_total{{{SEL}}}) or "
         f"max by (instance, gpu, uuid) (nvidia_gpu_up{{{SEL}}}) * 0", "XIDs"),
        (f'count by (instance, gpu, uuid) (nvidia_gpu_clock_throttle_active{{{SEL}, '
         f'reason!~"gpu_idle|applications_clocks|display_clocks"}} == 1) or '
         f"max by (instance, gpu, uuid) (nvidia_gpu_up{{{SEL}}}) * 0", "throttling"),
        (f'max by (instance, gpu, uuid) (nvidia_gpu_temperature_celsius{{{SEL}, sensor="gpu"}})',
         "temperature"),
        (f'max by (instance, gpu, uuid) (nvidia_gpu_temperature_threshold_celsius{{{SEL}, '
         f'threshold="slowdown"}}) - on (instance, gpu, uuid) max by (instance, gpu, uuid) '
         f'(nvidia_gpu_temperature_celsius{{{SEL}, sensor="gpu"}})', "to slowdown"),
    ]
    tq = [target(e, l, ref=chr(65 + i), instant=True, table=True) for i, (e, l) in enumerate(health_q)]
    renames = {f"Value #{chr(65 + i)}": l for i, (_, l) in enumerate(health_q)}
    L.add(table(
        "GPU health",
        "One row per GPU: up, uncorrected volatile ECC errors since the last reset, row remap "
        "pending (reset needed), XIDs since the exporter started, active throttle reasons other "
        "than idle/application clocks, GPU temperature and the margin to the slowdown threshold. "
        "Click a GPU to open its detail dashboard.",
        "short", tq,
        transformations=[
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True},
                                           "renameByName": renames,
                                           "indexByName": {"instance": 0, "gpu": 1, "uuid": 2}}},
        ],
        overrides=[
            override("up", {"mappings": UP_MAP, "custom.cellOptions": {"type": "color-background"},
                            "unit": "none"}),
            override("uncorrected ECC", {"thresholds": thresholds((None, "green"), (1, "red")),
                                         "custom.cellOptions": {"type": "color-background"}}),
            override("remap pending", {"mappings": YES_NO_MAP, "unit": "none",
                                       "custom.cellOptions": {"type": "color-background"}}),
            override("XIDs", {"thresholds": thresholds((None, "green"), (1, "orange")),
                              "custom.cellOptions": {"type": "color-background"}}),
            override("throttling", {"thresholds": thresholds((None, "green"), (1, "orange")),
                                    "custom.cellOptions": {"type": "color-background"}}),
            override("temperature", {"unit": "celsius"}),
            override("to slowdown", {"unit": "celsius",
                                     "thresholds": thresholds((None, "red"), (5, "orange"), (10, "green")),
                                     "custom.cellOptions": {"type": "color-background"}}),
            override("gpu", {"links": DETAIL_LINK_TABLE}),
        ]), 24, 10)

    L.row("Fleet over time")
    L.add(timeseries("GPU utilization per node",
                     "Mean GPU engine utilization of each node's GPUs." + RULES_NOTE,
                     "percentunit",
                     targets((f"sum by (instance) ({UTIL_SUM}) / sum by (instance) ({UTIL_COUNT})",
                              "{{instance}}")), 0, 1), 12, 8)
    L.add(timeseries("Memory used per node", "Frame buffer memory used, summed per node."
                     + RULES_NOTE, "bytes",
                     targets((f"sum by (instance) ({MEM_USED})", "{{instance}} used"),
                             (f"sum by (instance) ({MEM_TOTAL})", "{{instance}} total")), 0),
          12, 8)
    L.add(timeseries("Power per node", "Power draw summed per node, and the sum of enforced "
                     "limits." + RULES_NOTE, "watt",
                     targets((f"sum by (instance) ({POWER})", "{{instance}}"),
                             (f"sum by (instance) ({POWER_LIMIT})", "{{instance}} limit")), 0),
          12, 8)
    L.add(timeseries("Energy per node",
                     "Energy used per node in each interval: the nodes' energy counters' rate "
                     "(over 5 minutes) times the interval." + RULES_NOTE, "joule",
                     targets((f"sum by (instance) ({ENERGY_RATE}) * $__interval_ms / 1000",
                              "{{instance}}")), 0, draw="bars", fill=80), 12, 8)
    L.add(stat("Energy in range", "Energy the GPUs in scope used over the dashboard's time "
               "range." + RULES_NOTE, "joule",
               targets((f"sum(avg_over_time({ENERGY_RATE}[$__range])) * $__range_s", "energy"))),
          6, 6)
    L.add(stat("Mean power in range", "Mean power draw of the GPUs in scope over the time range."
               + RULES_NOTE, "watt",
               targets((f"sum(avg_over_time({POWER}[$__range]))", "power"))), 6, 6)
    L.add(stat("Throttled GPUs", "GPUs with a thermal, power-brake or hardware slowdown reason "
               "active now." + RULES_NOTE, "short",
               targets((f'sum({rec("nvidia_gpu_slowdown_active:sum")}) or vector(0)',
                        "throttled")),
               thresholds((None, "green"), (1, "orange"))), 6, 6)
    L.add(stat("GPUs with pending remaps", "GPUs that need a reset to apply a row remap or page "
               "retirement.", "short",
               targets((f"count((nvidia_gpu_remapped_rows_pending{{{SEL}}} == 1) or "
                        f"(nvidia_gpu_retired_pages_pending{{{SEL}}} == 1)) or vector(0)", "pending")),
               thresholds((None, "green"), (1, "orange"))), 6, 6)

    L.row("By GPU model")
    L.add(bargauge("GPUs per model", "GPUs in scope by model (nvidia_gpu_info's name), and how "
                   "many of them are healthy." + RULES_NOTE, "short",
                   targets((f"sum by (name) ({UP_COUNT})", "{{name}}", {"instant": True}),
                           (f"sum by (name) ({UP_SUM})", "{{name}} healthy", {"instant": True})),
                   minv=0), 6, 8)
    L.add(timeseries("GPU utilization per model", "Mean GPU engine utilization by model."
                     + RULES_NOTE, "percentunit",
                     targets((f"sum by (name) ({UTIL_SUM}) / sum by (name) ({UTIL_COUNT})",
                              "{{name}}")), 0, 1), 6, 8)
    L.add(timeseries("Memory used per model", "Frame buffer memory used over total, by model."
                     + RULES_NOTE, "percentunit",
                     targets((f"sum by (name) ({MEM_USED}) / sum by (name) ({MEM_TOTAL})",
                              "{{name}}")), 0, 1), 6, 8)
    L.add(timeseries("Power per model", "Power draw summed by model." + RULES_NOTE, "watt",
                     targets((f"sum by (name) ({POWER})", "{{name}}")), 0, stack=True), 6, 8)

    L.row("Top GPUs")
    L.add(bargauge("Hottest GPUs", "The ten hottest GPUs now (GPU sensor).", "celsius",
                   targets((f'topk(10, nvidia_gpu_temperature_celsius{{{SEL}, sensor="gpu"}})',
                            "{{instance}} GPU {{gpu}}", {"instant": True})),
                   thresholds((None, "green"), (75, "orange"), (85, "red")), 0, 100), 8, 10)
    L.add(bargauge("Most ECC errors", "GPUs with the most ECC errors over their lifetime "
                   "(aggregate counters, corrected and uncorrected).", "short",
                   targets((f'topk(10, sum by (instance, gpu) (nvidia_gpu_ecc_errors_total{{{SEL}, '
                            f'scope="aggregate"}}))', "{{instance}} GPU {{gpu}}",
                            {"instant": True})),
                   thresholds((None, "green"), (1, "orange"), (100, "red")), 0), 8, 10)
    L.add(bargauge("Most XIDs", "GPUs with the most XID events since their exporter started.",
                   "short",
                   targets((f"topk(10, sum by (instance, gpu) (nvidia_gpu_xid_errors_total{{{SEL}}}))",
                            "{{instance}} GPU {{gpu}}", {"instant": True})),
                   thresholds((None, "green"), (1, "orange"), (10, "red")), 0), 8, 10)
    return dashboard("nvml-fleet-overview", "NVIDIA GPU fleet overview",
                     "How many GPUs, how many healthy, and which need attention. "
                     "From nvml-exporter.", L,
                     (query_var("chassis_serial", "Rack",
                                'label_values(nvidia_gpu_platform_info{job=~"$job"}, chassis_serial)'),))


# The GPUs of the NVL72 racks in scope: those with a chassis serial
# (nvidia_gpu_platform_info), narrowed by the Rack variable. "All" (.*)
# would also match GPUs outside a rack, hence the second matcher.
RACK = f'{SEL}, chassis_serial=~"$chassis_serial", chassis_serial!=""'
VERDICT_MAP = value_map([(0, "none", "green"), (1, "restart_app", "yellow"), (2, "reset_gpu", "orange"),
                         (3, "reboot", "orange"), (4, "check_hardware", "red"), (5, "rma", "red")])
FABRIC_MAP = value_map([(1, "healthy", "green"), (2, "unhealthy", "red"),
                        (3, "limited capacity", "orange")])


def rack_row(L: Layout) -> None:
    """Issue 49: an NVL72 rack is one failure domain (NvidiaGpuRackFault).
    One row per GPU of the rack with its place (slot, tray, host, module),
    its verdict and its fabric health: a fault on every tray is the rack's
    fabric, a fault on one tray is that tray's."""
    L.row("Rack (NVL72)")
    platform = f"nvidia_gpu_platform_info{{{RACK}}}"
    need = 'action=~"reset_gpu|reboot|check_hardware|rma"'
    L.add(bargauge(
        "GPUs per rack that need action",
        "Per NVL72 rack (chassis serial, nvidia_gpu_platform_info): its GPUs in scope, and those "
        "whose verdict is reset_gpu or worse. GPUs on two or more nodes of one rack page once as "
        "NvidiaGpuRackFault (docs/runbooks.md). Empty without GB200/GB300 NVL72 trays (R570+).",
        "short",
        targets((f"count by (chassis_serial) ({platform})", "{{chassis_serial}} GPUs",
                 {"instant": True}),
                (f"count by (chassis_serial) ({platform} and on (instance, uuid) "
                 f"nvidia_gpu_recommended_action{{{SEL}, {need}}}) or "
                 f"count by (chassis_serial) ({platform}) * 0", "{{chassis_serial}} need action",
                 {"instant": True})),
        thresholds((None, "green"), (1, "orange")), minv=0), 8, 8)
    rack_q = [
        (platform, None),
        (f'max by (instance, gpu, uuid) (nvidia_gpu_recommended_action{{{SEL}, gpu_instance=""}}) '
         f"and on (instance, uuid) {platform}", "verdict"),
        (f"max by (instance, gpu, uuid) (nvidia_gpu_fabric_health{{{SEL}}}) "
         f"and on (instance, uuid) {platform}", "fabric health"),
        (f"count by (instance, gpu, uuid) (nvidia_gpu_fabric_health_issue{{{SEL}}} == 1 "
         f"and on (instance, uuid) {platform}) or "
         f"max by (instance, gpu, uuid) ({platform}) * 0", "fabric issues"),
    ]
    tq = [target(e, ref=chr(65 + i), instant=True, table=True) for i, (e, _) in enumerate(rack_q)]
    renames = {f"Value #{chr(65 + i)}": l for i, (_, l) in enumerate(rack_q) if l}
    L.add(table(
        "GPUs of the rack",
        "One row per GPU of the NVL72 racks in scope (pick one with the Rack variable): its node, "
        "chassis slot (switch trays counted), compute tray, host and module, its verdict "
        "(nvidia_gpu_recommended_action) and NVLink fabric health (summary, R580+; and the number "
        "of health-mask conditions that hold). Click a GPU to open its detail dashboard.",
        "short", tq,
        transformations=[
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value #A": True, "__name__": True, "job": True,
                                  "cluster": True},
                "renameByName": renames,
                "indexByName": {"chassis_serial": 0, "slot": 1, "tray": 2, "host_id": 3,
                                "module_id": 4, "instance": 5, "gpu": 6, "uuid": 7}}},
        ],
        overrides=[
            override("verdict", {"mappings": VERDICT_MAP, "unit": "none",
                                 "custom.cellOptions": {"type": "color-background"}}),
            override("fabric health", {"mappings": FABRIC_MAP, "unit": "none",
                                       "custom.cellOptions": {"type": "color-background"}}),
            override("fabric issues", {"thresholds": thresholds((None, "green"), (1, "red")),
                                       "custom.cellOptions": {"type": "color-background"}}),
            override("gpu", {"links": DETAIL_LINK_TABLE}),
        ]), 16, 8)


DETAIL_LINK_TABLE = [{
    "title": "GPU detail",
    "url": "/d/nvml-gpu-detail/nvidia-gpu-detail?${datasource:queryparam}&${job:queryparam}"
           "&var-instance=${__data.fields.instance}&var-gpu=${__data.fields.gpu}&${__url_time_range}",
}]


# --------------------------------------------------------------------------
# GPU detail
# --------------------------------------------------------------------------

G = "{{instance}} GPU {{gpu}}"


def gpu_detail() -> dict:
    L = Layout()
    L.row("Identity and state")
    L.add(table("GPU identity", "Name, architecture, PCI bus id, serial, VBIOS and board part "
                "number of each GPU (nvidia_gpu_info).", "none",
                [target(f"nvidia_gpu_info{{{SEL}}}", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                    "indexByName": {"instance": 0, "gpu": 1, "name": 2, "uuid": 3}}}]), 16, 6)
    L.add(table("Driver", "Driver, NVML and CUDA driver versions per node.", "none",
                [target(f"nvidia_gpu_driver_info{{{NODE}}}", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True}}}]),
          8, 6)
    L.add(state_timeline("GPU up", "1 while the GPU samples fine; 0 when it is lost, hung or "
                         "failing.", "none", targets((f"nvidia_gpu_up{{{SEL}}}", G)), UP_MAP,
                         thresholds((None, "red"), (1, "green"))), 12, 6)
    L.add(stat("Performance state", "Current P-state: P0 is maximum performance, higher numbers "
               "are deeper idle states.", "prefix:P",
               targets((f"nvidia_gpu_performance_state{{{SEL}}}", "GPU {{gpu}}")), decimals=0),
          6, 6)
    L.add(table("Modes", "Persistence mode, display active, ECC mode (current and pending: "
                "what applies after the next reboot) and compute mode. 1 = enabled.", "none",
                targets((f"nvidia_gpu_persistence_mode_enabled{{{SEL}}}", "persistence",
                         {"instant": True, "table": True}),
                        (f"nvidia_gpu_display_active{{{SEL}}}", "display",
                         {"instant": True, "table": True}),
                        (f'nvidia_gpu_ecc_enabled{{{SEL}, state="current"}}', "ECC",
                         {"instant": True, "table": True}),
                        (f'nvidia_gpu_ecc_enabled{{{SEL}, state="pending"}}', "ECC pending",
                         {"instant": True, "table": True}),
                        (f'nvidia_gpu_compute_mode{{{SEL}}} == 1', "compute mode",
                         {"instant": True, "table": True})),
                transformations=[{"id": "merge", "options": {}}, {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True,
                                      "state": True},
                    "renameByName": {"Value #A": "persistence", "Value #B": "display",
                                     "Value #C": "ECC", "Value #D": "ECC after reboot",
                                     "Value #E": "compute mode active"}}}]), 6, 6)

    L.row("Utilization")
    L.add(timeseries("Engine utilization", "Utilization by engine (gpu, memory, encoder, "
                     "decoder, jpeg, ofa) as NVML reports it over its sample period. Absent on "
                     "MIG-enabled GPUs.", "percentunit",
                     targets((f"nvidia_gpu_utilization_ratio{{{SEL}}}", G + " {{engine}}")), 0, 1),
          12, 8)
    L.add(timeseries("GPM activity", "GPU Performance Monitoring metrics (Hopper and newer): "
                     "graphics engine, SM, tensor and DRAM activity; SM occupancy, FP and "
                     "integer pipes and media engines with --collector.gpm.all-metrics.",
                     "percentunit",
                     targets((f"nvidia_gpu_activity_ratio{{{SEL}}}", G + " {{metric}}")), 0, 1),
          12, 8)

    L.row("Memory")
    L.add(timeseries("Frame buffer memory", "Used, free, reserved (by the driver) and total "
                     "memory.",
                     "bytes", targets((f"nvidia_gpu_memory_used_bytes{{{SEL}}}", G + " used"),
                                      (f"nvidia_gpu_memory_free_bytes{{{SEL}}}", G + " free"),
                                      (f"nvidia_gpu_memory_reserved_bytes{{{SEL}}}", G + " reserved"),
                                      (f"nvidia_gpu_memory_total_bytes{{{SEL}}}", G + " total")), 0),
          12, 8)
    L.add(timeseries("BAR1 memory", "BAR1 (CPU-mapped) memory used and total.", "bytes",
                     targets((f"nvidia_gpu_bar1_memory_used_bytes{{{SEL}}}", G + " used"),
                             (f"nvidia_gpu_bar1_memory_total_bytes{{{SEL}}}", G + " total")), 0),
          12, 8)

    L.row("Temperature and power")
    L.add(timeseries("Temperatures and thresholds", "GPU and memory temperature with the "
                     "thresholds of each GPU: slowdown, shutdown, and the maximum operating "
                     "temperatures of the GPU and its memory.", "celsius",
                     targets((f"nvidia_gpu_temperature_celsius{{{SEL}}}", G + " {{sensor}}"),
                             (f'nvidia_gpu_temperature_threshold_celsius{{{SEL}}}',
                              G + " {{threshold}} threshold")),
                     overrides=[{"matcher": {"id": "byRegexp", "options": ".*threshold"},
                                 "properties": [{"id": "custom.lineStyle",
                                                 "value": {"fill": "dash", "dash": [10, 10]}},
                                                {"id": "custom.fillOpacity", "value": 0}]}]),
          12, 8)
    L.add(timeseries("Power and limits", "Power draw with the enforced limit, the limit "
                     "the administrator set (management), the default and the allowed range "
                     "(min, max).", "watt",
                     targets((f"nvidia_gpu_power_usage_watts{{{SEL}}}", G),
                             (f'nvidia_gpu_power_limit_watts{{{SEL}}}',
                              G + " {{limit}} limit")), 0,
                     overrides=[{"matcher": {"id": "byRegexp", "options": ".*limit"},
                                 "properties": [{"id": "custom.lineStyle",
                                                 "value": {"fill": "dash", "dash": [10, 10]}},
                                                {"id": "custom.fillOpacity", "value": 0}]}]),
          12, 8)
    L.add(timeseries("Fan speed", "Fan speed as a fraction of maximum (absent on passively "
                     "cooled data centre GPUs).", "percentunit",
                     targets((f"nvidia_gpu_fan_speed_ratio{{{SEL}}}", G + " fan {{fan}}")), 0, 1),
          8, 8)
    L.add(timeseries("Energy", "Energy used per interval, from the energy counter.", "joule",
                     targets((f"increase(nvidia_gpu_energy_joules_total{{{SEL}}}[$__rate_interval])", G)),
                     0, draw="bars", fill=80), 8, 8)
    L.add(stat("Energy in range", "Energy used over the dashboard's time range.", "joule",
               targets((f"increase(nvidia_gpu_energy_joules_total{{{SEL}}}[$__range])", "GPU {{gpu}}"))),
          8, 8)
    L.add(timeseries("Module and memory power", "Where NVML reports power scopes beside the GPU's: "
                     "the draw of the module the GPU belongs to (Grace superchips GH200, GB200, "
                     "GB300: CPU, GPUs and memory) with the module's limits, and the draw of the "
                     "GPU's memory (part of the GPU's own draw). Each scope is its own family, so "
                     "no sum adds one to another. Absent on boards without these scopes.", "watt",
                     targets((f"nvidia_gpu_module_power_usage_watts{{{SEL}}}", G + " module"),
                             (f'nvidia_gpu_module_power_limit_watts{{{SEL}}}',
                              G + " module {{limit}} limit"),
                             (f"nvidia_gpu_memory_power_usage_watts{{{SEL}}}", G + " memory")), 0,
                     overrides=[{"matcher": {"id": "byRegexp", "options": ".*limit"},
                                 "properties": [{"id": "custom.lineStyle",
                                                 "value": {"fill": "dash", "dash": [10, 10]}},
                                                {"id": "custom.fillOpacity", "value": 0}]}]),
          12, 8)
    L.add(timeseries("T.Limit margin", "Where NVML reports thresholds only as margins to the "
                     "GPU's T.Limit (Hopper and Blackwell on recent drivers): how far the GPU is "
                     "below T.Limit, with the margins at which it slows down and shuts down "
                     "(NvidiaGpuTemperatureNearSlowdown fires within 5 degrees of slowdown).",
                     "celsius",
                     targets((f"nvidia_gpu_temperature_margin_celsius{{{SEL}}}", G),
                             (f'nvidia_gpu_temperature_margin_threshold_celsius{{{SEL}}}',
                              G + " {{threshold}} threshold"))), 6, 8)
    L.add(bargauge("Power smoothing lifetime", "Lifetime left of each GPU's power smoothing "
                   "circuitry (Blackwell). Below 10%: NvidiaGpuPowerSmoothingLifetimeLow; at 0 "
                   "the driver disables power smoothing (XID 165).", "percentunit",
                   targets((f"nvidia_gpu_power_smoothing_lifetime_remaining_ratio{{{SEL}}}", "GPU {{gpu}}",
                            {"instant": True})),
                   thresholds((None, "red"), (0.1, "orange"), (0.3, "green")), 0, 1), 6, 8)

    L.row("Clocks and throttling")
    L.add(timeseries("Clocks", "Current clocks with each clock's maximum.", "hertz",
                     targets((f"nvidia_gpu_clock_hertz{{{SEL}}}", G + " {{clock}}"),
                             (f'nvidia_gpu_clock_max_hertz{{{SEL}}}',
                              G + " {{clock}} max")), 0), 12, 8)
    L.add(timeseries("Throttled time", "Fraction of time each throttle reason held the clocks "
                     "down, where NVML reports violation time. Drivers before R575 give no "
                     "separate sw_thermal and hw_thermal time: their series is thermal, time "
                     "held down by any thermal slowdown, software or hardware.", "percentunit",
                     targets((f"rate(nvidia_gpu_clock_throttle_seconds_total{{{SEL}}}[$__rate_interval])",
                              G + " {{reason}}")), 0, 1), 12, 8)
    L.add(state_timeline("Throttle reasons", "Which clock event (throttle) reasons are active, "
                         "per GPU. gpu_idle is normal on an idle GPU; hw_thermal, hw_power_brake "
                         "and hw_slowdown need attention.", "none",
                         targets((f"nvidia_gpu_clock_throttle_active{{{SEL}}}", "GPU {{gpu}} {{reason}}")),
                         ACTIVE_MAP, thresholds((None, "transparent"), (1, "red"))), 24, 10)

    L.row("PCIe and NVLink")
    L.add(timeseries("PCIe traffic", "PCIe bytes per second, transmitted and received.",
                     "Bps", targets((f"rate(nvidia_gpu_pcie_bytes_total{{{SEL}}}[$__rate_interval])",
                                     G + " {{direction}}")), 0), 8, 8)
    L.add(table("PCIe link", "Current and maximum PCIe link generation and width. A current "
                "link below its maximum under load points at a bad slot or riser.", "none",
                targets((f"nvidia_gpu_pcie_link_generation{{{SEL}}}", "generation",
                         {"instant": True, "table": True}),
                        (f"nvidia_gpu_pcie_link_width{{{SEL}}}", "width",
                         {"instant": True, "table": True})),
                transformations=[{"id": "merge", "options": {}}, {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "job": True, "__name__": True},
                    "renameByName": {"Value #A": "generation", "Value #B": "width"}}}]), 8, 8)
    L.add(timeseries("PCIe replay errors", "PCIe replays per interval: link-level retransmissions "
                     "after errors. Steady replays point at a marginal link.", "short",
                     targets((f"increase(nvidia_gpu_pcie_replay_errors_total{{{SEL}}}[$__rate_interval])", G)),
                     0), 8, 8)
    L.add(timeseries("NVLink traffic", "NVLink bytes per second by direction, summed over the "
                     "GPU's links.", "Bps",
                     targets((f"rate(nvidia_gpu_nvlink_bytes_total{{{SEL}}}[$__rate_interval])",
                              G + " {{direction}}")), 0), 8, 8)
    L.add(timeseries("NVLink links", "How many of each GPU's NVLink links are up and down. A "
                     "link down on a GPU that should have all up cuts its peer bandwidth.",
                     "short", targets((f"nvidia_gpu_nvlink_links{{{SEL}}}", G + " {{state}}")), 0),
          8, 8)
    L.add(timeseries("NVLink errors", "NVLink errors per interval, summed over the GPU's links: "
                     "CRC, replay and recovery up to Hopper; on Blackwell (NVLink5) link recovery "
                     "(recovery, recovery_failed), effective errors left after FEC and raw symbol "
                     "errors. Which link: the per-link panels below.",
                     "short",
                     targets((f"increase(nvidia_gpu_nvlink_errors_total{{{SEL}}}[$__rate_interval])",
                              G + " {{error}}")), 0), 8, 8)
    L.add(timeseries("NVLink errors per link", "NVLink errors of all kinds per interval, by link. "
                     "Opt-in: needs --collector.nvlink.per-link on the node (120 series per "
                     "H100), for finding the link behind the per-GPU sums.", "short",
                     targets((f"sum by (instance, gpu, link) (increase("
                              f"nvidia_gpu_nvlink_link_errors_total{{{SEL}}}[$__rate_interval]))",
                              G + " link {{link}}")), 0), 12, 8)
    L.add(state_timeline("NVLink link state", "State of each NVLink link. Opt-in: needs "
                         "--collector.nvlink.per-link on the node.", "none",
                         targets((f"nvidia_gpu_nvlink_link_up{{{SEL}}}", "GPU {{gpu}} link {{link}}")),
                         UP_MAP, thresholds((None, "red"), (1, "green"))), 12, 8)
    L.add(state_timeline("NVLink fabric health", "NVML's fabric health of each GPU of an NVL72 "
                         "rack (GB200, GB300): the summary (R580 drivers: 1 healthy, 2 unhealthy, "
                         "3 limited capacity) and each health condition the driver reports (1 while "
                         "it holds). NvidiaGpuFabricUnhealthy pages on either. Absent on single-node "
                         "NVSwitch systems, which report neither.", "none",
                         targets((f"nvidia_gpu_fabric_health{{{SEL}}}", "GPU {{gpu}} summary"),
                                 (f"nvidia_gpu_fabric_health_issue{{{SEL}}}", "GPU {{gpu}} {{issue}}")),
                         value_map([(0, "no", "transparent"), (1, "healthy / yes", "green"),
                                    (2, "unhealthy", "red"), (3, "limited capacity", "orange")]),
                         thresholds((None, "transparent"), (1, "red"))), 12, 8)
    L.add(timeseries("NVLink bit error rate per link", "NVLink5 (Blackwell) bit error rate of each "
                     "link: effective (after FEC) and symbol (raw). A clean link reports its floor, "
                     "1.5e-254. Opt-in: needs --collector.nvlink.per-link on the node.", "sci",
                     targets((f"nvidia_gpu_nvlink_link_bit_error_ratio{{{SEL}}}",
                              G + " link {{link}} {{kind}}"))), 12, 8)
    L.add(table("GPU topology (nvidia-smi topo -m)", "How each GPU (row) reaches each other GPU "
                "(column), as nvidia-smi topo -m prints it: NV<n> over n NVLink links, else the PCIe "
                "level (PIX, PXB, PHB, NODE, SYS); the CPUs and NUMA nodes near each GPU below. One "
                "node at a time: pick it in the instance variable. Opt-in: needs "
                "--collector.topology on the node.", "none",
                targets((f"nvidia_gpu_topology_link_info{{{SEL}}}", "link",
                         {"instant": True, "table": True})),
                transformations=[{"id": "groupingToMatrix", "options": {
                    "rowField": "gpu", "columnField": "peer_gpu", "valueField": "link",
                    "emptyValue": "empty"}}]), 12, 8)
    L.add(table("GPU CPU and NUMA affinity", "The CPUs (CPU Affinity) and NUMA nodes (NUMA "
                "Affinity) near each GPU, as nvidia-smi topo -m prints them: pin a job's CPU "
                "threads and NICs there. Opt-in: needs --collector.topology on the node.", "none",
                targets((f"nvidia_gpu_cpu_affinity_info{{{SEL}}}", "affinity",
                         {"instant": True, "table": True})),
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True,
                                      "Value": True},
                    "renameByName": {"cpus": "CPU affinity", "numa_nodes": "NUMA affinity"}}}]),
          12, 8)

    L.row("Memory errors and XIDs")
    L.add(timeseries("ECC errors", "ECC error counters over all memory locations: volatile "
                     "(since the last driver load or reset) and aggregate (lifetime).", "short",
                     targets((f'nvidia_gpu_ecc_errors_total{{{SEL}}}',
                              G + " {{scope}} {{error}}")), 0), 12, 10)
    L.add(bargauge("ECC errors by location", "Aggregate (lifetime) ECC errors by memory location "
                   "and type. Uncorrected errors in DRAM lead to row remaps. Opt-in: needs "
                   "--collector.ecc.by-location on the node.", "short",
                   targets((f'nvidia_gpu_ecc_location_errors_total{{{SEL}, scope="aggregate"}}',
                            "GPU {{gpu}} {{location}} {{error}}", {"instant": True})),
                   thresholds((None, "green"), (1, "orange")), 0), 12, 10)
    L.add(stat("Remapped rows", "Rows remapped to spares, by cause (Ampere and newer).", "short",
               targets((f"nvidia_gpu_remapped_rows{{{SEL}}}", "GPU {{gpu}} {{cause}}")),
               thresholds((None, "green"), (1, "orange"))), 6, 6)
    L.add(stat("Remap pending / failed", "Row remap pending (reset needed) and remap failure "
               "(RMA).", "none",
               targets((f"nvidia_gpu_remapped_rows_pending{{{SEL}}}", "GPU {{gpu}} pending"),
                       (f"nvidia_gpu_remapped_rows_failed{{{SEL}}}", "GPU {{gpu}} failed")),
               thresholds((None, "green"), (1, "red")), YES_NO_MAP, color_mode="background"), 6, 6)
    L.add(stat("Retired pages", "Pages retired by cause, and whether a retirement is pending "
               "(Volta and older; newer GPUs remap rows).", "short",
               targets((f"nvidia_gpu_retired_pages{{{SEL}}}", "GPU {{gpu}} {{cause}}"),
                       (f"nvidia_gpu_retired_pages_pending{{{SEL}}}", "GPU {{gpu}} pending")),
               thresholds((None, "green"), (1, "orange"))), 6, 6)
    L.add(stat("Recovery action", "Recovery action the driver asks for: 0 none, 1 GPU reset, "
               "2 node reboot, 3 drain peer-to-peer, 4 drain and reset, 5 recover the IMEX domain, "
               "6 PCIe bus reset, 7 system reboot.", "none",
               targets((f"nvidia_gpu_recovery_action{{{SEL}}}", "GPU {{gpu}}")),
               thresholds((None, "green"), (1, "red")),
               value_map([(0, "none", "green"), (1, "GPU reset", "red"), (2, "node reboot", "red"),
                          (3, "drain P2P", "orange"), (4, "drain and reset", "red"),
                          (5, "recover IMEX domain", "red"), (6, "PCIe bus reset", "red"),
                          (7, "system reboot", "red")])), 6, 6)
    # NVML answers NOT_SUPPORTED to nvmlDeviceGetRemappedRows on a GPU in MIG
    # mode: the remap panels above stay empty and the remap alerts cannot
    # fire there. Say which GPUs are blind rather than let "no data" read
    # as "no remaps" (issue 16).
    L.add(stat("Row remap blind spot: MIG-enabled GPUs",
               "GPUs in MIG mode whose row remapper state NVML does not report "
               "(nvmlDeviceGetRemappedRows is not supported on MIG-enabled GPUs): remapped rows, "
               "pending and failed remaps stay empty here and NvidiaGpuRemappedRowsPending / "
               "NvidiaGpuRowRemapFailed cannot fire for them. Watch XID 63/64 and the ECC counters "
               "instead, or check with nvidia-smi -q -d ROW_REMAPPER after disabling MIG.", "none",
               targets((f'(nvidia_gpu_mig_enabled{{{SEL}, state="current"}} == 1) unless on (instance, uuid) '
                        f"nvidia_gpu_remapped_rows_pending{{{SEL}}}", "GPU {{gpu}}: remaps not reported")),
               thresholds((None, "orange")), value_map([(1, "MIG on: remaps unknown", "orange")]),
               color_mode="background"), 8, 6)
    L.add(bargauge("Row remapper banks", "Memory banks by spare rows left for row remapping "
                   "(nvmlDeviceGetRowRemapperHistogram). Banks at none cannot remap again: an RMA "
                   "candidate (NvidiaGpuRemapperBanksExhausted). Not reported on MIG-enabled GPUs.",
                   "short",
                   targets((f"nvidia_gpu_remapper_banks{{{SEL}}}", "GPU {{gpu}} {{spare_rows}}",
                            {"instant": True})),
                   thresholds((None, "green"), (1, "orange")), 0), 6, 6)
    L.add(stat("SRAM RMA threshold", "1 = the GPU's uncorrectable SRAM errors crossed NVIDIA's "
               "RMA threshold (NvidiaGpuSramErrorThresholdExceeded).", "none",
               targets((f"nvidia_gpu_sram_uncorrectable_threshold_exceeded{{{SEL}}}", "GPU {{gpu}}")),
               thresholds((None, "green"), (1, "red")), YES_NO_MAP, color_mode="background"), 5, 6)
    L.add(stat("NVLink fabric", "NVLink fabric registration on NVSwitch systems: 1 not started, "
               "2 in progress, 3 completed; status failure = registration failed "
               "(NvidiaGpuFabricNotReady). Absent on GPUs without a fabric.", "none",
               targets((f"nvidia_gpu_fabric_state{{{SEL}}}", "GPU {{gpu}} {{status}}")),
               thresholds((None, "red"), (3, "green")),
               value_map([(1, "not started", "red"), (2, "in progress", "orange"),
                          (3, "completed", "green")])), 5, 6)
    L.add(timeseries("XIDs by code", "XID events counted since the exporter started, per code. "
                     "See docs/runbooks.md for the severity of each code.", "short",
                     targets((f"sum by (instance, gpu, xid) (nvidia_gpu_xid_errors_total{{{SEL}}})",
                              G + " XID {{xid}}")), 0, draw="line", fill=0), 12, 8)
    L.add(table("Last XID per code", "When each XID code last occurred, and how often.",
                "dateTimeAsIso",
                targets((f"max by (instance, gpu, xid) (nvidia_gpu_xid_last_timestamp_seconds{{{SEL}}}) * 1000",
                         "last", {"instant": True, "table": True}),
                        (f"sum by (instance, gpu, xid) (nvidia_gpu_xid_errors_total{{{SEL}}})",
                         "count", {"instant": True, "table": True})),
                transformations=[{"id": "merge", "options": {}}, {"id": "organize", "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": {"Value #A": "last seen", "Value #B": "count"}}}],
                overrides=[override("count", {"unit": "short"})]), 12, 8)

    L.row("Processes and exporter")
    L.add(timeseries("Processes", "Compute and graphics processes on each GPU.", "short",
                     targets((f"nvidia_gpu_processes{{{SEL}}}", G + " {{type}}")), 0), 8, 8)
    L.add(table("Process memory", "GPU memory per process (opt-in collector "
                "--collector.process_memory).", "bytes",
                [target(f"nvidia_gpu_process_memory_used_bytes{{{SEL}}}", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "job": True, "__name__": True}}}]), 8, 8)
    L.add(timeseries("Sample duration", "How long the exporter's last complete sample of each "
                     "GPU took.", "s",
                     targets((f"nvml_exporter_sample_duration_seconds{{{SEL}}}", G)), 0), 8, 8)
    L.add(timeseries("Stuck driver calls", "How long a driver call has been blocked on a GPU, "
                     "present only while one is stuck past --collect.stuck-deadline (the "
                     "NvidiaGpuHung alert).", "s",
                     targets((f"nvml_exporter_stuck_call_seconds{{{SEL}}}", G + " {{family}}")), 0),
          8, 8)
    L.add(timeseries("NVML errors", "NVML call failures per interval by family and error "
                     "(not-supported is not an error).", "short",
                     targets((f"increase(nvml_exporter_nvml_errors_total{{{SEL}}}[$__rate_interval])",
                              G + " {{family}} {{error}}")), 0), 8, 8)
    L.add(timeseries("Sample age", "Seconds since the last complete sample of each GPU.", "s",
                     targets((f"time() - nvml_exporter_last_sample_timestamp_seconds{{{SEL}}}", G)), 0),
          8, 8)
    return dashboard("nvml-gpu-detail", "NVIDIA GPU detail",
                     "Every metric family of nvml-exporter for the selected node and GPUs.", L)


# --------------------------------------------------------------------------
# MIG
# --------------------------------------------------------------------------

A100_NOTE = """**Per-instance activity is unavailable on A100.** NVML exposes per-MIG-instance
activity only through GPM (GPU Performance Monitoring), which exists on Hopper (H100, H200)
and newer. On A100, NVML does not report utilization for MIG-enabled GPUs or MIG devices at
all, so the activity panels below stay empty for A100 GPUs: the exporter leaves
`nvidia_gpu_mig_activity_ratio` absent rather than reporting a misleading 0. Per-instance
memory is available on every MIG-capable GPU. DCGM profiling metrics are the only source of
per-instance activity on A100.

The table *MIG GPUs without activity* lists the GPUs this affects."""


def mig() -> dict:
    L = Layout()
    L.add(text("About MIG activity", "Why some GPUs have no per-instance activity.", A100_NOTE),
          12, 7)
    L.add(stat("MIG-enabled GPUs", "GPUs with MIG mode currently enabled." + RULES_NOTE, "short",
               targets((f"sum({MIG_ENABLED})", "current"))), 4, 7)
    L.add(stat("GPU instances", "MIG GPU instances in scope." + RULES_NOTE, "short",
               targets((f'sum({rec("nvidia_gpu_mig_instances:count")})', "instances"))), 4, 7)
    L.add(stat("MIG mode change pending", "GPUs whose MIG mode changes at the next reset "
               "(pending differs from current).", "short",
               targets((f'count(nvidia_gpu_mig_enabled{{{SEL}, state="pending"}} != ignoring(state) '
                        f'nvidia_gpu_mig_enabled{{{SEL}, state="current"}}) or vector(0)', "pending")),
               thresholds((None, "green"), (1, "orange"))), 4, 7)

    L.row("Layout")
    L.add(table("MIG layout", "Each GPU's GPU instances and compute instances with their "
                "profile and MIG device UUID.", "none",
                [target(f"nvidia_gpu_mig_info{{{SEL}}}", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                    "indexByName": {"instance": 0, "gpu": 1, "gpu_instance": 2,
                                    "compute_instance": 3, "profile": 4, "mig_uuid": 5}}}],
                overrides=[override("gpu", {"links": DETAIL_LINK_TABLE})]), 16, 9)
    L.add(bargauge("Instances per GPU", "Number of GPU instances on each MIG-enabled GPU.",
                   "short",
                   targets((f"count by (instance, gpu) (count by (instance, gpu, gpu_instance) "
                            f"(nvidia_gpu_mig_info{{{SEL}}}))", G, {"instant": True})),
                   minv=0, maxv=7), 8, 9)

    L.row("Memory per instance")
    L.add(timeseries("Memory used per instance", "Memory used in each GPU instance.", "bytes",
                     targets((f"nvidia_gpu_mig_memory_used_bytes{{{SEL}}}", G + " GI {{gpu_instance}}")),
                     0), 12, 8)
    L.add(bargauge("Memory used per instance (ratio)", "Memory used over the instance's "
                   "memory slice.", "percentunit",
                   targets((f"nvidia_gpu_mig_memory_used_bytes{{{SEL}}} / "
                            f"nvidia_gpu_mig_memory_total_bytes{{{SEL}}}",
                            G + " GI {{gpu_instance}}", {"instant": True})),
                   thresholds((None, "green"), (0.8, "orange"), (0.95, "red")), 0, 1), 12, 8)

    L.row("Activity per instance (GPM, Hopper and newer)")
    for metric, title in (("graphics", "Graphics engine activity"), ("sm", "SM activity"),
                          ("tensor", "Tensor activity"), ("dram", "DRAM activity")):
        L.add(timeseries(f"{title} per instance",
                         f"GPM {metric} activity of each GPU instance, as a fraction of the "
                         f"instance's capacity. Absent on A100 (no GPM).", "percentunit",
                         targets((f'nvidia_gpu_mig_activity_ratio{{{SEL}, metric="{metric}"}}',
                                  G + " GI {{gpu_instance}}")), 0, 1), 6, 8)
    L.add(table("MIG GPUs without activity", "MIG-enabled GPUs that report per-instance memory "
                "but no per-instance activity: GPUs without GPM, such as A100.", "short",
                [target(f"count by (instance, gpu) (nvidia_gpu_mig_memory_total_bytes{{{SEL}}}) "
                        f"unless on (instance, gpu) count by (instance, gpu) "
                        f"(nvidia_gpu_mig_activity_ratio{{{SEL}}})", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": {"Value": "GPU instances without activity"}}}]), 24, 6)
    return dashboard("nvml-mig", "NVIDIA GPU MIG",
                     "MIG layout, per-instance memory and activity. From nvml-exporter.", L)


# --------------------------------------------------------------------------
# Kubernetes: GPUs by namespace and pod (nvml-exporter --kubernetes)
# --------------------------------------------------------------------------

POD_SEL = SEL + ', namespace=~"$namespace"'
# Joins a per-GPU series onto the pods that hold the GPU, weighted by each
# holder's share, so a GPU time-sliced between N pods is split N ways.
WHOLE = "* on (job, instance, gpu, uuid) group_right nvidia_gpu_pod_share_ratio{{{sel}}}"
PER_MIG = ("* on (job, instance, gpu, uuid, gpu_instance) group_right "
           "nvidia_gpu_mig_pod_share_ratio{{{sel}}}")
K8S_NOTE = """Needs `nvml-exporter --kubernetes` (Helm: `podAttribution.enabled=true`): the exporter
asks the kubelet which container holds each GPU and MIG device, through the device plugin or a
DRA claim (Helm `podAttribution.dra.enabled=true`), and publishes `nvidia_gpu_pod_share_ratio`
(whole GPUs) and `nvidia_gpu_mig_pod_share_ratio` (MIG devices), 1 for a device held alone, 1/N
when N containers share it. Every panel here multiplies a GPU series by that share, so a
time-sliced or shared GPU is split between its holders, never counted twice."""


NS_RULES_NOTE = (" From the recording rules (alerts/nvidia-gpu-fleet.rules.yml), per node and "
                 "namespace: the GPU variable does not apply.")


def ns_rec(name: str, extra: str = "") -> str:
    """A series recorded per node and namespace, with the dashboard's selection."""
    sel = NODE + ', namespace=~"$namespace"' + (", " + extra if extra else "")
    return f"instance_namespace:{name}{{{sel}}}"


def kubernetes() -> dict:
    L = Layout()
    L.add(text("About this dashboard", "Where pod attribution comes from.", K8S_NOTE), 8, 6)
    L.add(stat("GPUs held by pods", "Whole GPUs that at least one container in scope holds.",
               "short", targets((f"count(count by (instance, gpu) "
                                 f"(nvidia_gpu_pod_share_ratio{{{POD_SEL}}}))", "GPUs"))), 4, 6)
    L.add(stat("Pods holding GPUs", "Pods in scope holding a whole GPU or a MIG device.", "short",
               targets((f"count(count by (namespace, pod) (nvidia_gpu_pod_share_ratio{{{POD_SEL}}} "
                        f"or nvidia_gpu_mig_pod_share_ratio{{{POD_SEL}}}))", "pods"))), 4, 6)
    L.add(stat("Kubelet reachable", "Exporters whose last call to the kubelet's pod-resources "
               "API failed show red.", "short",
               targets((f"min(nvml_exporter_kubernetes_up{{{NODE}}})", "up")),
               thresholds((None, "red"), (1, "green")),
               mappings=value_map([(0, "unreachable", "red"), (1, "reachable", "green")])), 4, 6)
    L.add(stat("DRA devices unresolved", "Devices of NVIDIA GPU DRA claims that the node's CDI "
               "specs (and, if enabled, its ResourceSlices) did not resolve to a GPU: pods holding "
               "them are on no GPU here. Above 0: the CDI directories are not mounted "
               "(podAttribution.dra.enabled) or the exporter's log says why.", "short",
               targets((f'sum(nvml_exporter_kubernetes_claimed_devices{{{NODE}, state="unresolved"}})',
                        "unresolved")),
               thresholds((None, "green"), (1, "orange"))), 4, 6)

    L.row("By namespace")
    L.add(timeseries("Power by namespace", "GPU power drawn on behalf of each namespace."
                     + NS_RULES_NOTE, "watt",
                     targets((f"sum by (namespace) ({ns_rec('nvidia_gpu_power_usage_watts:sum')})",
                              "{{namespace}}")), 0, stack=True), 12, 8)
    L.add(timeseries("GPU memory used by namespace", "Frame buffer in use on the GPUs each "
                     "namespace holds, whole GPUs and MIG instances together." + NS_RULES_NOTE,
                     "bytes",
                     targets((f"sum by (namespace) ({ns_rec('nvidia_gpu_memory_used_bytes:sum')})",
                              "{{namespace}} (whole GPUs)", {}),
                             (f"sum by (namespace) "
                              f"({ns_rec('nvidia_gpu_mig_memory_used_bytes:sum')})",
                              "{{namespace}} (MIG)", {})),
                     0, stack=True), 12, 8)
    L.add(timeseries("GPUs held and busy by namespace", "GPU-equivalents each namespace's pods "
                     "hold (a time-sliced GPU counted by share, a MIG device by its slices) and "
                     "keep busy, as measured per process (SM time; MIG: the instance's GPM "
                     "graphics activity). Needs --workloads as well." + NS_RULES_NOTE, "percentunit",
                     targets(("sum by (namespace) ("
                              + ns_rec("nvidia_gpu_workload_held_seconds:rate5m") + ")",
                              "{{namespace}} held"),
                             ("sum by (namespace) ("
                              + ns_rec("nvidia_gpu_workload_sm_seconds:rate5m") + ")",
                              "{{namespace}} busy")), 0), 12, 8)
    L.add(bargauge("GPUs held by namespace", "Whole GPUs (time-sliced ones counted by share) "
                   "and MIG instances each namespace holds now." + NS_RULES_NOTE, "short",
                   targets((f"sum by (namespace) ({ns_rec('nvidia_gpu_pod_share_ratio:sum')})",
                            "{{namespace}} GPUs", {"instant": True}),
                           (f"sum by (namespace) ({ns_rec('nvidia_gpu_mig_pod_share_ratio:sum')})",
                            "{{namespace}} MIG instances", {"instant": True})), minv=0), 6, 8)
    L.add(bargauge("Energy by namespace", "Energy of each namespace's pods over the dashboard's "
                   "time range: their part of each GPU's energy by measured SM time (what no "
                   "workload used stays on the GPU as idle), its 5-minute rate averaged over "
                   "the range, times the range. Needs --workloads as well." + NS_RULES_NOTE,
                   "joule",
                   targets((f"sum by (namespace) (avg_over_time("
                            f"{ns_rec('nvidia_gpu_workload_energy_joules:rate5m')}[$__range])) "
                            f"* $__range_s", "{{namespace}}", {"instant": True})), minv=0), 6, 8)

    L.row("Pods")
    L.add(table("Pods on whole GPUs", "Each container holding a whole GPU, with its share (1 when "
                "held alone).", "percentunit",
                [target(f"nvidia_gpu_pod_share_ratio{{{POD_SEL}}}", "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True},
                    "indexByName": {"namespace": 0, "pod": 1, "container": 2, "instance": 3,
                                    "gpu": 4, "uuid": 5, "Value": 6},
                    "renameByName": {"Value": "share"}}}],
                overrides=[override("gpu", {"links": DETAIL_LINK_TABLE})]), 12, 9)
    L.add(table("Pods on MIG devices", "Each container holding a MIG device: the GPU, GPU "
                "instance and compute instance it runs on, and its share of the instance.", "percentunit",
                [target(f"nvidia_gpu_mig_pod_share_ratio{{{POD_SEL}}}", "", instant=True,
                        table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True},
                    "indexByName": {"namespace": 0, "pod": 1, "container": 2, "instance": 3,
                                    "gpu": 4, "gpu_instance": 5, "compute_instance": 6,
                                    "Value": 7},
                    "renameByName": {"Value": "share"}}}]), 12, 9)
    L.add(table("Pods holding GPUs idle", "Pods that hold a GPU or MIG device (by the device plugin "
                "or a DRA claim) and have used less than --workloads.idle-threshold of it, and for "
                "how long: what NvidiaGpuHeldIdle tickets after an hour. Needs --workloads as well.",
                "s",
                [target(f'nvidia_gpu_workload_held_idle_seconds{{{POD_SEL}, kind="kubernetes"}}', "",
                        instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True, "kind": True},
                    "indexByName": {"namespace": 0, "pod": 1, "container": 2, "instance": 3,
                                    "gpu": 4, "gpu_instance": 5, "Value": 6},
                    "renameByName": {"Value": "idle for"}}}],
                overrides=[override("gpu", {"links": DETAIL_LINK_TABLE})]), 24, 8)
    namespace = query_var("namespace", "Namespace",
                          'label_values(nvidia_gpu_pod_share_ratio{job=~"$job", '
                          'instance=~"$instance"}, namespace)')
    return dashboard("nvml-kubernetes", "NVIDIA GPUs by Kubernetes namespace",
                     "GPU power, memory, utilization and energy by namespace and pod, from "
                     "nvml-exporter's pod attribution.", L, (namespace,))


# --------------------------------------------------------------------------
# GPUs by workload: Slurm jobs, containers, services, users
# (nvml-exporter --workloads)
# --------------------------------------------------------------------------

WL_SHARE = f"nvidia_gpu_workload_share_ratio{{{SEL}}}"
WL_MIG_SHARE = f"nvidia_gpu_mig_workload_share_ratio{{{SEL}}}"
WL_MEM = "nvidia_gpu_workload_memory_used_bytes{{{sel}}}"
WL_SM = "nvidia_gpu_workload_sm_seconds_total{{{sel}}}"
WL_HELD = "nvidia_gpu_workload_held_seconds_total{{{sel}}}"
WL_ENERGY = "nvidia_gpu_workload_energy_joules_total{{{sel}}}"
CONTAINERS = 'kind=~"docker|podman|containerd|kubernetes"'
SLURM_SEL = SEL + ', kind="slurm"'
WL_NOTE = """Needs `nvml-exporter --workloads` (docs/operations.md: host PIDs and the host's procfs):
for every process NVML lists, the exporter reads its cgroup and uid and publishes which workload
(Slurm job, Docker/Podman/containerd container, Kubernetes pod, systemd service, login session)
holds each GPU and MIG device: `nvidia_gpu_workload_share_ratio` (1 alone, 1/N when N share the
device) and `nvidia_gpu_workload_memory_used_bytes`. Use, energy and waste are measured per
process (`nvidia_gpu_workload_sm_seconds_total`, `..._energy_joules_total`,
`..._held_seconds_total`, `..._held_idle_seconds`; docs/metrics.md, "Measured use per
workload"), never split 1/N."""
WL_TABLE_ORDER = ["kind", "slurm_job", "slurm_step", "user", "uid", "namespace", "pod",
                  "container", "container_id", "container_name", "pod_uid", "systemd_unit",
                  "cgroup", "instance", "gpu"]


def workloads() -> dict:
    L = Layout()
    L.add(text("About this dashboard", "Where workload attribution comes from.", WL_NOTE), 12, 6)
    L.add(stat("GPUs held by workloads", "Whole GPUs in scope that at least one workload holds.",
               "short", targets((f"count(count by (instance, gpu) ({WL_SHARE}))", "GPUs"))), 4, 6)
    L.add(stat("Slurm jobs on GPUs", "Distinct Slurm jobs holding a GPU or MIG device in scope.",
               "short", targets((f'count(count by (slurm_job) ({WL_SHARE[:-1]}, kind="slurm"}} '
                                 f'or {WL_MIG_SHARE[:-1]}, kind="slurm"}}))', "jobs"))), 4, 6)
    L.add(stat("Attribution read errors", "Reads of /proc, passwd, Slurm mapping files or the "
               "container engine that failed over the last 5 minutes: a process that exits "
               "between NVML's list and the read counts as gone, nothing to fix; steady "
               "permission_denied means the exporter cannot see host processes.", "short",
               targets((f"sum(increase(nvml_exporter_workload_read_errors_total{{{NODE}}}[5m])) "
                        f"or vector(0)", "errors")),
               thresholds((None, "green"), (1, "orange"))), 4, 6)

    L.row("GPUs by workload")
    L.add(table("GPUs by workload", "Each workload holding a whole GPU now, with its share of "
                "the GPU (1 when held alone, 1/N when N workloads share it).", "percentunit",
                [target(WL_SHARE, "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True, "uuid": True},
                    "indexByName": {**{k: i for i, k in enumerate(WL_TABLE_ORDER)},
                                    "Value": len(WL_TABLE_ORDER)},
                    "renameByName": {"Value": "share"}}}],
                overrides=[override("gpu", {"links": DETAIL_LINK_TABLE})]), 24, 9)
    L.add(table("MIG devices by workload", "Each workload holding a MIG device: the GPU, GPU "
                "instance and compute instance it runs on, and its share of the instance.",
                "percentunit", [target(WL_MIG_SHARE, "", instant=True, table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True, "uuid": True},
                    "indexByName": {**{k: i for i, k in enumerate(WL_TABLE_ORDER)},
                                    "gpu_instance": len(WL_TABLE_ORDER),
                                    "compute_instance": len(WL_TABLE_ORDER) + 1,
                                    "Value": len(WL_TABLE_ORDER) + 2},
                    "renameByName": {"Value": "share"}}}]), 24, 7)

    L.row("Slurm jobs and users")
    L.add(timeseries("GPU memory by Slurm job", "Frame buffer used by each job's processes, "
                     "whole GPUs and MIG devices together.", "bytes",
                     targets((f'sum by (slurm_job, user) ({WL_MEM.format(sel=SLURM_SEL)})',
                              "job {{slurm_job}} ({{user}})")), 0, stack=True), 12, 8)
    L.add(timeseries("GPU power by Slurm job", "What each job draws: the rate of its part of "
                     "its GPUs' energy, apportioned by measured SM time (a shared GPU by what "
                     "each job used of it; what no job used stays on the GPU as idle).",
                     "watt",
                     targets((f"sum by (slurm_job, user) (rate({WL_ENERGY.format(sel=SLURM_SEL)}"
                              f"[$__rate_interval]))", "job {{slurm_job}} ({{user}})")),
                     0, stack=True), 12, 8)
    L.add(timeseries("GPU memory by user", "Frame buffer used by each user's processes (host "
                     "passwd names; a uid without an entry shows as its number).", "bytes",
                     targets((f"sum by (user, uid) ({WL_MEM.format(sel=SEL)})",
                              "{{user}} ({{uid}})")), 0, stack=True), 12, 8)
    L.add(timeseries("SM use by Slurm job", "Busy GPU-equivalents per job, measured per "
                     "process (one GPU whose SMs the job keeps busy all the time shows as 100%; "
                     "on MIG its instance's GPM graphics activity times the instance's part of the "
                     "GPU).", "percentunit",
                     targets((f"sum by (slurm_job, user) (rate({WL_SM.format(sel=SLURM_SEL)}"
                              f"[$__rate_interval]))", "job {{slurm_job}} ({{user}})")), 0), 12, 8)

    L.row("Containers")
    L.add(timeseries("GPU memory by container", "Frame buffer used by each container's "
                     "processes (Docker, Podman, containerd, Kubernetes); names only with "
                     "--workloads.container-engine-socket.", "bytes",
                     targets((f"sum by (kind, container_id, container_name) "
                              f"({WL_MEM.format(sel=SEL + ', ' + CONTAINERS)})",
                              "{{kind}} {{container_name}} {{container_id}}")), 0, stack=True),
          12, 8)
    L.add(timeseries("GPU power by container", "What each container draws: the rate of its "
                     "part of its GPUs' energy, by measured SM time.", "watt",
                     targets((f"sum by (kind, container_id, container_name) "
                              f"(rate({WL_ENERGY.format(sel=SEL + ', ' + CONTAINERS)}"
                              f"[$__rate_interval]))",
                              "{{kind}} {{container_name}} {{container_id}}")), 0, stack=True),
          12, 8)
    L.add(timeseries("Memory, encoder and decoder use by workload", "Busy time of each "
                     "workload's processes on the memory controller, the video encoders and "
                     "decoders, from NVML's per-process utilization (not on MIG).",
                     "percentunit",
                     targets((f"sum by (kind, slurm_job, namespace, pod, container_id, "
                              f"systemd_unit, user, engine) (rate(nvidia_gpu_workload_engine_"
                              f"seconds_total{{{SEL}}}[$__rate_interval])) > 0",
                              "{{engine}} {{kind}} {{slurm_job}}{{namespace}}/{{pod}}"
                              "{{container_id}}{{systemd_unit}} {{user}}")), 0), 12, 8)

    L.row("Waste: GPUs held but idle")
    L.add(table("Held idle now", "Workloads holding a GPU or MIG device they have not used "
                "(measured SM use below --workloads.idle-threshold since they went idle, or no "
                "process where use is not measured), and for how long. Held means: running a "
                "process there, allocated by pod-resources (--kubernetes), allowed by a Slurm "
                "job's device cgroup, or named by a Slurm mapping file. NvidiaGpuHeldIdle "
                "tickets those past an hour.", "s",
                [target(f"nvidia_gpu_workload_held_idle_seconds{{{SEL}}}", "", instant=True,
                        table=True)],
                transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True, "uuid": True},
                    "indexByName": {**{k: i for i, k in enumerate(WL_TABLE_ORDER)},
                                    "Value": len(WL_TABLE_ORDER)},
                    "renameByName": {"Value": "idle for"}}}]), 12, 8)
    L.add(bargauge("Wasted GPU-hours by workload", "GPU-hours each workload held minus those it "
                   "kept busy over the dashboard's time range (held: a device N workloads "
                   "share counts 1/N each, a MIG device its slices' part of the GPU), the 20 "
                   "largest.", "h",
                   targets((f"topk(20, sum by (kind, slurm_job, namespace, pod, container_id, "
                            f"systemd_unit, user) (clamp_min(increase({WL_HELD.format(sel=SEL)}"
                            f"[$__range]) - increase({WL_SM.format(sel=SEL)}[$__range]), 0))) "
                            f"/ 3600", "{{kind}} {{slurm_job}}{{namespace}}/{{pod}}"
                            "{{container_id}}{{systemd_unit}} {{user}}", {"instant": True})),
                   minv=0), 12, 8)
    L.add(timeseries("GPUs held and busy", "GPU-equivalents held by the workloads in scope and "
                     "the part they keep busy (SM time), one whole GPU shown as 100%; the gap "
                     "is the waste.", "percentunit",
                     targets((f"sum(rate({WL_HELD.format(sel=SEL)}[$__rate_interval]))", "held"),
                             (f"sum(rate({WL_SM.format(sel=SEL)}[$__rate_interval]))", "busy")),
                     0), 12, 8)
    L.add(bargauge("Energy by workload", "Each workload's part of its GPUs' energy over the "
                   "dashboard's time range, by measured SM time, and the energy no workload "
                   "used (idle GPUs, idle time of shared ones), which with the workloads' adds "
                   "up to the GPUs'.", "joule",
                   targets((f"topk(20, sum by (kind, slurm_job, namespace, pod, container_id, "
                            f"systemd_unit, user) (increase({WL_ENERGY.format(sel=SEL)}"
                            f"[$__range])))", "{{kind}} {{slurm_job}}{{namespace}}/{{pod}}"
                            "{{container_id}}{{systemd_unit}} {{user}}", {"instant": True}),
                           (f"sum by (reason) (increase(nvidia_gpu_unattributed_energy_joules_"
                            f"total{{{SEL}}}[$__range]))", "no workload: {{reason}}",
                            {"instant": True})), minv=0), 12, 8)
    return dashboard("nvml-workloads", "NVIDIA GPUs by workload",
                     "Which Slurm jobs, users, containers and services hold each GPU and MIG "
                     "device, what they use of it (SM time, memory, energy) and what they hold "
                     "idle, from nvml-exporter's workload attribution.", L)


DASHBOARDS = {
    "fleet-overview.json": fleet_overview,
    "gpu-detail.json": gpu_detail,
    "mig.json": mig,
    "kubernetes.json": kubernetes,
    "workloads.json": workloads,
}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text_out = render(build)
        if check:
            if not path.exists() or path.read_text() != text_out:
                stale.append(name)
        else:
            path.write_text(text_out)
    if stale:
        print("out of date, run dashboards/build.py: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
