"""Every real host of tests/corpus/, replayed: each `nvidia-smi -q -x` or
`-q` capture is imported by `nvml-sim import`, served by the real exporter
(`--simulate CAPTURE`), and compared value by value with what the capture
printed, as docs/nvidia-smi.md says each value is carried (the table drives
the comparison). Then one real Prometheus scrapes every replayed host at
once with the shipped alert rules, and the alerts that hold on each host
must be exactly those its capture warrants (and none on a healthy host).

The captures are read here with Python's own XML parser and a reader of the
text format of our own, independent of the importer under test.
"""

from __future__ import annotations

import math
import re
import subprocess
import tomllib
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from promstack import ROOT, Exporter, Prometheus, require_binary

CORPUS = ROOT / "tests" / "corpus"
DOC = ROOT / "docs" / "nvidia-smi.md"
NVML_SIM = ROOT / "target" / "debug" / "nvml-sim"
# What the corpus holds that is not an `nvidia-smi -q` capture.
NOT_CAPTURES = {"nvidia_gpu_exporter/query.txt"}
EXTRA_FLAGS = ["--collector.ecc.by-location", "--collector.process_memory",
               "--collector.mig.memory-free", "--collect.interval", "5s"]


def capture_files() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS
                  and p.parent.name != "LICENSES" and p.parent.name != "topo"
                  and str(p.relative_to(CORPUS)) not in NOT_CAPTURES)


# ---- the crosswalk ---------------------------------------------------------


@dataclass
class Row:
    text: list[tuple[str, ...]]
    xml: list[str]
    key: str
    metric: str | None
    conv: str
    line: int


def split_cells(line: str) -> list[str]:
    cells, cur, i = [], "", 0
    body = line.strip().strip("|")
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if body[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    cells.append(cur.strip())
    return cells


def crosswalk() -> list[Row]:
    rows = []
    lines = DOC.read_text().splitlines()
    start = lines.index("## The crosswalk")
    for n, line in enumerate(lines[start:], start + 1):
        if not line.startswith("| ") or line.startswith("| `nvidia-smi"):
            continue
        cells = split_cells(line)
        assert len(cells) == 5, f"docs/nvidia-smi.md:{n}: {len(cells)} cells"
        text, xml, key, metric, conv = cells
        code = re.match(r"`([^`]+)`", conv)
        rows.append(Row(
            text=[] if text == "-" else [tuple(p.strip() for p in t.split(" / "))
                                         for t in text.split("<br>")],
            xml=[] if xml == "-" else [x.strip() for x in xml.split("<br>")],
            key=key,
            metric=None if metric == "-" else metric.strip("`"),
            conv=code.group(1) if code else "none",
            line=n,
        ))
    return rows


# ---- reading a capture ------------------------------------------------------


@dataclass
class Node:
    name: str
    value: str | None
    children: list["Node"] = field(default_factory=list)

    def find(self, path: tuple[str, ...] | list[str]) -> list["Node"]:
        if not path:
            return [self]
        head, rest = path[0], path[1:]
        if head == "**":
            out = []
            for c in self.children:
                out += [c] + c.find(("**",))
            return out
        return [n for c in self.children if head in ("*", c.name) for n in c.find(rest)]

    def leaves(self, prefix=()):
        for c in self.children:
            p = prefix + (c.name,)
            if c.value is not None:
                yield p
            yield from c.leaves(p)


def xml_node(e: ET.Element) -> Node:
    kids = [xml_node(c) for c in e]
    text = (e.text or "").strip()
    return Node(e.tag, text if not kids else (text or None), kids)


def read_xml(data: str) -> tuple[Node, list[Node]]:
    root = xml_node(ET.fromstring(data[data.index("<nvidia_smi_log"):]))
    # Leaves carry values; a section's own text (`None` of an empty list) too.
    return root, [g for g in root.children if g.name == "gpu"]


def read_text(data: str) -> tuple[Node, list[Node]]:
    lines = data.splitlines()
    start = next(i for i, l in enumerate(lines) if "NVSMI LOG" in l and l.lstrip().startswith("="))
    root = Node("", None)
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in lines[start + 1:]:
        if raw.startswith("####") or ("NVSMI LOG" in raw and raw.lstrip().startswith("=")):
            break
        if not raw.strip():
            continue
        raw = raw.replace("\t", "    ")
        indent = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if " : " in body:
            label, value = body.split(" : ", 1)
        elif body.endswith(":"):
            label, value = body[:-1], ""
        else:
            label, value = body, None
        label, value = label.strip(), None if value is None else value.strip()
        while stack[-1][0] >= indent:
            stack.pop()
        node = Node(label, value)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    gpus = [c for c in root.children if c.name.startswith("GPU ") and c.value is None]
    for g in gpus:
        g.name = "GPU"
    return root, gpus


NA = re.compile(r"^(N/A|\[.*\]|Not Supported|Not Available|Not available.*|Unknown( Error)?|"
                r"Insufficient Permissions|Requested functionality has been deprecated|Not Found|)$")


def is_na(v: str) -> bool:
    return bool(NA.match(v.strip()))


def num(v: str) -> float:
    head = v.split()[0].rstrip("x%")
    return float(int(head, 16)) if head.startswith("0x") else float(head)


@dataclass
class Capture:
    path: Path
    xml: bool
    root: Node
    gpus: list[Node]

    @property
    def driver(self) -> str | None:
        n = self.top(("Driver Version",), "driver_version")
        return n.split()[0] if n else None

    def driver_major(self) -> float:
        d = self.driver
        try:
            parts = d.split(".")
            return float(parts[0]) + (float(parts[1]) / 1000 if len(parts) > 1 else 0)
        except (AttributeError, ValueError, IndexError):
            return 0.0

    def top(self, text: tuple[str, ...], xml: str) -> str | None:
        found = self.root.find(xml.split("/") if self.xml else text)
        return found[0].value if found else None

    def paths(self, row: Row) -> list:
        return [x.lstrip("/").split("/") for x in row.xml] if self.xml else row.text

    def top_level(self, row: Row) -> bool:
        return bool(row.xml and row.xml[0].startswith("/")) or bool(row.text and row.text[0][0].startswith("/"))

    def values(self, node: Node, row: Row) -> list[tuple[list[Node], bool]]:
        """Per path alternative: the nodes found."""
        out = []
        for p in self.paths(row):
            if not self.xml and p and p[0].startswith("/"):
                p = (p[0][1:],) + tuple(p[1:])
            out.append(node.find(p))
        return out


def load(path: Path) -> Capture:
    data = path.read_text(encoding="utf-8")
    if "<nvidia_smi_log" in data:
        root, gpus = read_xml(data)
        return Capture(path, True, root, gpus)
    root, gpus = read_text(data)
    return Capture(path, False, root, gpus)


# ---- the exporter's side ----------------------------------------------------


@dataclass
class Series:
    labels: dict
    value: float


def parse_metrics(text: str) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(Series(dict(s.labels), s.value))
    return out


SELECTOR = re.compile(r"^(?P<name>[a-z0-9_:]+)(\{(?P<sel>[^}]*)\})?(\[(?P<label>[a-z_]+)\])?$")


def select(metrics, selector: str, gpu: int | None, fill: dict) -> tuple[list[Series], str | None]:
    m = SELECTOR.match(selector)
    assert m, f"bad metric selector `{selector}`"
    want_eq, want_re = {}, {}
    for item in filter(None, (x.strip() for x in (m.group("sel") or "").split(","))):
        if "=~" in item:
            k, v = item.split("=~")
            want_re[k] = v.strip('"')
        elif "=" in item:
            k, v = item.split("=")
            want_eq[k] = v.strip('"')
        else:
            want_eq[item] = str(fill[item])
    if gpu is not None:
        want_eq["gpu"] = str(gpu)
    name = m.group("name")
    candidates = metrics.get(name, []) + metrics.get(name + "_total", [])
    if name.endswith("_total"):
        candidates = metrics.get(name, [])
    found = [s for s in candidates
             if all(s.labels.get(k) == v for k, v in want_eq.items())
             and all(re.fullmatch(v, s.labels.get(k, "")) for k, v in want_re.items())]
    return found, m.group("label")


FLAG = {"enabled": 1, "yes": 1, "active": 1, "true": 1, "disabled": 0, "no": 0,
        "not active": 0, "false": 0}


class Mismatch(AssertionError):
    pass


@dataclass
class Host:
    capture: Capture
    name: str
    metrics: dict = field(default_factory=dict)
    scenario: dict = field(default_factory=dict)
    compared: int = 0
    problems: list[str] = field(default_factory=list)
    seen: dict = field(default_factory=dict)
    text: str = ""

    def fail(self, gpu, row: Row, message: str):
        self.problems.append(f"{self.name} GPU {gpu} (docs/nvidia-smi.md:{row.line}): {message}")


def snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_")


def expect_absent(host: Host, gpu: int, row: Row, fill: dict, why: str):
    found, _ = select(host.metrics, row.metric, gpu_label(row, gpu), fill)
    host.compared += 1
    if found:
        host.fail(gpu, row, f"{why}: expected no `{row.metric}`, got {[s.value for s in found]}")


def gpu_label(row: Row, gpu: int) -> int | None:
    return None if row.metric.startswith("nvidia_gpu_driver_info") else gpu


def compare(host: Host, gpu: int, row: Row, raw: str, fill: dict | None = None):
    """One value of the capture against the series the row names."""
    fill = fill or {}
    cap = host.capture
    conv = row.conv
    if is_na(raw) and conv not in ("section",):
        if "[" in row.metric:
            # A label NVML cannot give is left out of the series.
            found, label = select(host.metrics, row.metric, gpu_label(row, gpu), fill)
            host.compared += 1
            if any(label in s.labels for s in found):
                host.fail(gpu, row, f"the capture prints `{raw}`, yet `{row.metric}` is `{found[0].labels[label]}`")
            return
        expect_absent(host, gpu, row, fill, f"the capture prints `{raw}`")
        return
    found, label = select(host.metrics, row.metric, gpu_label(row, gpu), fill)
    major = cap.driver_major()
    if conv == "recovery" and major < 570:
        return expect_absent(host, gpu, row, fill, f"R{int(major)} has no field 230")
    if conv in ("us-branch",) and major < 575:
        return expect_absent(host, gpu, row, fill, f"R{int(major)} has no such duration field")
    if conv == "flag-branch" and major < 550:
        return expect_absent(host, gpu, row, fill, f"R{int(major)} lacks nvmlDeviceGetSramEccErrorStatus")
    host.compared += 1
    if label:
        if not found:
            return host.fail(gpu, row, f"no `{row.metric}` series to read `{label}` from (capture `{raw}`)")
        got = found[0].labels.get(label)
        want = raw.split()[0] if conv == "word" else raw.strip()
        if conv == "text-ci":
            ok = (got or "").lower() == want.lower()
        elif conv == "arch":
            ok = got == want.replace("Ada Lovelace", "Ada")
        elif conv == "bus":
            dom, rest = want.split(":", 1)
            ok = (got or "").lower() == f"{int(dom, 16):08x}:{rest}".lower()
        elif conv == "fabric-status":
            ok = got == ("success" if want == "Success" else "failure")
        elif conv in ("text", "word"):
            ok = got == want
        elif conv == "process-mig":
            ok = got == str(int(num(want)))
        else:
            raise AssertionError(f"docs/nvidia-smi.md:{row.line}: conversion `{conv}` on a label")
        if not ok:
            host.fail(gpu, row, f"`{row.metric}` is `{got}`, the capture prints `{raw}`")
        return
    if conv == "health" and raw.strip() in ("Full", "False", "None"):
        # A condition that does not hold has no series.
        if found:
            host.fail(gpu, row, f"`{row.metric}` = {found[0].value}, the capture prints `{raw}`")
        return
    if conv in ("present", "ci"):
        if not found:
            host.fail(gpu, row, f"no `{row.metric}` with {fill}")
        return
    if not found:
        return host.fail(gpu, row, f"no `{row.metric}` series; the capture prints `{raw}`")
    got = found[0].value
    v = raw.strip()
    if conv == "mib":
        want, tol = num(v) * 1048576, 0
    elif conv == "free":
        want, tol = num(v) * 1048576, 1048576
    elif conv == "percent":
        want, tol = round(num(v)) / 100, 1e-9
    elif conv in ("celsius", "number", "count", "margin", "margin-threshold"):
        want, tol = num(v), 0
    elif conv in ("watts", "watts-first", "watts-module"):
        want, tol = num(v), 0.006
    elif conv == "mhz":
        want, tol = num(v) * 1e6, 0
    elif conv in ("us", "us-branch"):
        # A counter: the captured time, plus what the replay has added
        # since its start where the reason is still active.
        want = num(v) / 1e6
        if not (want - 1e-6 <= got <= want + 600):
            host.fail(gpu, row, f"`{row.metric}` = {got}, the capture prints `{raw}` (at least {want})")
        return
    elif conv == "pstate":
        want, tol = float(v.lstrip("P")), 0
    elif conv in ("flag", "flag-branch"):
        want, tol = FLAG[v.lower()], 0
    elif conv == "lanes":
        want, tol = num(v), 0
    elif conv == "recovery":
        want, tol = {"None": 0, "Reset": 1, "GPU Reset": 1, "Reboot": 2, "Node Reboot": 2,
                     "Drain P2P": 3, "Drain and Reset": 4}[v], 0
    elif conv == "fabric-state":
        want, tol = {"Not Started": 1, "In Progress": 2, "Completed": 3}[v], 0
    elif conv == "health-summary":
        want, tol = {"Healthy": 1, "Unhealthy": 2, "Limited Capacity": 3}[v], 0
    elif conv == "health":
        want, tol = 1, 0
    elif conv == "mode":
        on = [s for s in found if s.value == 1]
        if [s.labels.get("mode") for s in on] != [snake(v)]:
            host.fail(gpu, row, f"compute mode series {[(s.labels.get('mode'), s.value) for s in found]}, capture `{v}`")
        return
    else:
        raise AssertionError(f"docs/nvidia-smi.md:{row.line}: unknown conversion `{conv}`")
    if not math.isclose(got, want, abs_tol=tol, rel_tol=0):
        host.fail(gpu, row, f"`{row.metric}` = {got}, the capture prints `{raw}` (want {want})")


def first(found_per_alt: list[list[Node]], numeric=False) -> Node | None:
    """The first alternative the capture prints (with a number, for
    `watts-first`); else the first it prints at all."""
    present = [n[0] for n in found_per_alt if n]
    if numeric:
        for n in present:
            if n.value is not None and not is_na(n.value):
                return n
    return present[0] if present else None


def check_gpu(host: Host, gpu: int, node: Node, rows: list[Row]):
    cap = host.capture
    sums: dict[tuple[str, int], list] = {}
    for row in rows:
        if row.metric is None or row.conv in ("none", "gpus") or cap.top_level(row):
            continue
        alts = cap.values(node, row)
        # Per MIG device.
        if any("mig_device" in "/".join(p) or "MIG Device" in p for p in cap.paths(row)):
            devices = node.find(["mig_devices", "mig_device"] if cap.xml else ["MIG Device"])
            for d in devices:
                gi_node = d.find(["gpu_instance_id"] if cap.xml else ["GPU Instance ID"])
                ci_node = d.find(["compute_instance_id"] if cap.xml else ["Compute Instance ID"])
                if not gi_node:
                    continue
                fill = {"gpu_instance": int(num(gi_node[0].value))}
                sub = Row(text=[p[1:] for p in row.text], xml=["/".join(x.split("/")[2:]) for x in row.xml],
                          key=row.key, metric=row.metric, conv=row.conv, line=row.line)
                hit = first(cap.values(d, sub))
                if hit is None or hit.value is None:
                    continue
                if row.conv == "ci":
                    metric = row.metric.split("[")[0].replace("{gpu_instance}", "{gpu_instance,compute_instance}")
                    fill["compute_instance"] = int(num(ci_node[0].value))
                    compare(host, gpu, Row(row.text, row.xml, row.key, metric, "ci", row.line), "0", fill)
                else:
                    compare(host, gpu, row, hit.value, fill)
            continue
        # Per process.
        if any(p and p[0] in ("processes", "Processes") and len(p) > 1 for p in cap.paths(row)):
            procs = process_list(cap, node)
            if row.conv == "process-count":
                for kind, marks in (("compute", ("C", "C+G", "M+C")), ("graphics", ("G", "C+G"))):
                    n = sum(1 for p in procs if p.get("type") in marks)
                    if any("type" in p for p in procs):
                        compare(host, gpu, Row(row.text, row.xml, row.key,
                                               f'nvidia_gpu_processes{{type="{kind}"}}', "count", row.line), str(n))
                continue
            leaf = row.xml[0].split("/")[-1]
            for p in procs:
                if "pid" not in p or leaf not in p:
                    continue
                fill = {"pid": int(num(p["pid"]))}
                if row.conv == "present" and is_na(p.get("used_memory", "")):
                    continue
                if row.conv == "process-mig" and is_na(p[leaf]):
                    continue
                compare(host, gpu, row, p[leaf], fill)
            continue
        if row.conv == "section":
            hit = first(alts)
            if hit is None or hit.children or hit.value is None:
                continue
            if row.metric == "nvidia_gpu_processes" and hit.value in ("", "None"):
                # No process: each type counts 0.
                for kind in ("compute", "graphics"):
                    compare(host, gpu, Row(row.text, row.xml, row.key,
                                           f'nvidia_gpu_processes{{type="{kind}"}}', "count", row.line), "0")
            elif is_na(hit.value):
                host.compared += 1
                found, _ = select(host.metrics, row.metric, gpu, {})
                if found:
                    host.fail(gpu, row, f"the section reads `{hit.value}`, yet `{row.metric}` has {len(found)} series")
            continue
        hit = first(alts, numeric=row.conv == "watts-first")
        if hit is None or hit.value is None or (hit.children and is_na(hit.value)):
            continue
        if row.conv == "sum":
            sums.setdefault((row.metric, row.line), []).append(hit.value)
            continue
        if row.conv in ("text", "bus") and any(k in row.metric for k in ("[uuid]", "[serial]", "[pci_bus_id]")):
            # Public captures mask identifiers to one value on every GPU:
            # the import makes the later ones unique (and says so).
            if hit.value in host.seen.setdefault(row.line, set()):
                continue
            host.seen[row.line].add(hit.value)
        if row.conv in ("margin", "margin-threshold") and not margin_exported(host, gpu, node, row.conv == "margin"):
            expect_absent(host, gpu, row, {}, "an absolute slowdown threshold is reported, or the driver predates R570")
            continue
        if row.conv == "watts-module" and not module_reported(cap, node):
            continue
        if row.conv == "cluster":
            uuid = first(cap.values(node, Row([("Fabric", "ClusterUUID")], ["fabric/clusterUuid"], "", None, "", 0)))
            zero = uuid is None or is_na(uuid.value) or set(uuid.value.replace("-", "")) == {"0"}
            found, label = select(host.metrics, row.metric, gpu, {})
            host.compared += 1
            if zero and found:
                host.fail(gpu, row, "a single-node fabric has no `nvidia_gpu_fabric_info`")
            elif not zero and (not found or found[0].labels.get(label) != hit.value.strip()):
                host.fail(gpu, row, f"`{row.metric}` {[s.labels for s in found]}, capture `{hit.value}`")
            continue
        compare(host, gpu, row, hit.value)
    by_metric: dict[str, list[str]] = {}
    for (metric, _), values in sums.items():
        by_metric.setdefault(metric, []).extend(values)
    for metric, values in by_metric.items():
        row = next(r for r in rows if r.metric == metric and r.conv == "sum")
        numbers = [v for v in values if not is_na(v)]
        if not numbers:
            compare(host, gpu, row, "N/A")
            continue
        total = sum(num(v) for v in numbers)
        compare(host, gpu, Row(row.text, row.xml, row.key, metric, "count", row.line), str(int(total)))


def module_reported(cap: Capture, node: Node) -> bool:
    hit = first(node.find(p) for p in (["module_power_readings", "average_power_draw"],
                                        ["Module Power Readings", "Average Power Draw"]))
    return hit is not None and not is_na(hit.value or "")


def margin_exported(host: Host, gpu: int, node: Node, current: bool) -> bool:
    """T.Limit margins are exported where no absolute slowdown threshold
    is; the current margin needs nvmlDeviceGetMarginTemperature (R570+).
    nvidia-smi prints T.Limit thresholds in place of the degrees NVML still
    answers (a real H200 at 580.159.04: tests/device/), so a replay serves
    the degrees of its built-in board where it has them (H100, H200:
    docs/nvidia-smi.md, "What a capture cannot say")."""
    cap = host.capture
    slow = first([node.find(["temperature", "gpu_temp_slow_threshold"] if cap.xml
                            else ["Temperature", "GPU Slowdown Temp"])])
    absolute = slow is not None and not is_na(slow.value or "")
    served, _ = select(host.metrics, 'nvidia_gpu_temperature_threshold_celsius{threshold="slowdown"}', gpu, {})
    return not absolute and not served and (not current or cap.driver_major() >= 570)


def process_list(cap: Capture, node: Node) -> list[dict]:
    if cap.xml:
        return [{c.name: c.value or "" for c in p.children}
                for p in node.find(["processes", "process_info"])]
    names = {"Process ID": "pid", "Type": "type", "Name": "process_name",
             "Used GPU Memory": "used_memory", "GPU instance ID": "gpu_instance_id",
             "Compute instance ID": "compute_instance_id"}
    out, cur = [], None
    for sec in node.find(["Processes"]):
        items = []
        for c in sec.children:
            items.append(c)
            items.extend(c.children)
        for c in items:
            key = names.get(c.name)
            if key is None:
                continue
            if cur is None or key == "gpu_instance_id" or (key == "pid" and "pid" in cur):
                cur = {}
                out.append(cur)
            cur[key] = c.value or ""
    return out


# ---- what the capture warrants ---------------------------------------------


def warranted(cap: Capture, gpu: int, node: Node) -> set[str]:
    """The alerts whose condition holds on this GPU, read from the capture."""
    def val(xml: str, text: str) -> str | None:
        hit = first([node.find(xml.split("/") if cap.xml else text.split(" / "))])
        return None if hit is None or hit.value is None or is_na(hit.value) else hit.value

    def yes(xml, text):
        v = val(xml, text)
        return v is not None and FLAG.get(v.lower()) == 1

    out = set()
    major = cap.driver_major()
    retired = yes("retired_pages/pending_retirement", "Retired Pages / Pending Page Retirement") or \
        yes("retired_pages/pending_blacklist", "Retired Pages / Pending Page Blacklist")
    remap = yes("remapped_rows/remapped_row_pending", "Remapped Rows / Pending")
    if retired:
        out.add("NvidiaGpuRetiredPagesPending")
    if remap:
        out.add("NvidiaGpuRemappedRowsPending")
    action = val("gpu_recovery_action", "GPU Recovery Action")
    if (action not in (None, "None")) or ((retired or remap) and major < 570):
        out.add("NvidiaGpuRecoveryActionRequired")
    if yes("remapped_rows/remapped_row_failure", "Remapped Rows / Remapping Failure Occurred"):
        out.add("NvidiaGpuRowRemapFailed")
    none = val("remapped_rows/row_remapper_histogram/row_remapper_histogram_none",
               "Remapped Rows / Bank Remap Availability Histogram / None")
    if none is not None and num(none) > 0:
        out.add("NvidiaGpuRemapperBanksExhausted")
    if major >= 550 and yes("ecc_errors/aggregate/sram_threshold_exceeded",
                            "ECC Errors / Aggregate / SRAM Threshold Exceeded"):
        out.add("NvidiaGpuSramErrorThresholdExceeded")
    if yes("ecc_mode/current_ecc", "ECC Mode / Current"):
        unc = 0.0
        for xml, text in (("ecc_errors/volatile/double_bit/total", "ECC Errors / Volatile / Double Bit / Total"),
                          ("ecc_errors/volatile/dram_uncorrectable", "ECC Errors / Volatile / DRAM Uncorrectable"),
                          ("ecc_errors/volatile/sram_uncorrectable", "ECC Errors / Volatile / SRAM Uncorrectable"),
                          ("ecc_errors/volatile/sram_uncorrectable_parity", "ECC Errors / Volatile / SRAM Uncorrectable Parity"),
                          ("ecc_errors/volatile/sram_uncorrectable_secded", "ECC Errors / Volatile / SRAM Uncorrectable SEC-DED")):
            v = val(xml, text)
            unc += num(v) if v else 0
        if unc > 0:
            out.add("NvidiaGpuEccUncorrectedError")
    state = val("fabric/state", "Fabric / State")
    if state is not None and (state != "Completed" or val("fabric/status", "Fabric / Status") not in ("Success", None)):
        out.add("NvidiaGpuFabricNotReady")
    if state is not None:
        summary = val("fabric/health/summary", "Fabric / Health / Summary")
        issues = [val(x, t) for x, t in (
            ("fabric/health/bandwidth", "Fabric / Health / Bandwidth"),
            ("fabric/health/route_recovery_in_progress", "Fabric / Health / Route Recovery in progress"),
            ("fabric/health/route_unhealthy", "Fabric / Health / Route Unhealthy"),
            ("fabric/health/access_timeout_recovery", "Fabric / Health / Access Timeout Recovery"),
            ("fabric/health/incorrect_configuration", "Fabric / Health / Incorrect Configuration"))]
        if (summary not in (None, "Healthy")) or any(i not in (None, "Full", "False", "None") for i in issues):
            out.add("NvidiaGpuFabricUnhealthy")
    for reason, alert in (("hw_thermal_slowdown", "NvidiaGpuHwThermalSlowdown"),
                          ("hw_power_brake_slowdown", "NvidiaGpuPowerBrake")):
        label = {"hw_thermal_slowdown": "HW Thermal Slowdown", "hw_power_brake_slowdown": "HW Power Brake Slowdown"}[reason]
        if yes(f"clocks_event_reasons/clocks_event_reason_{reason}", f"Clocks Event Reasons / HW Slowdown / {label}") or \
                yes(f"clocks_throttle_reasons/clocks_throttle_reason_{reason}", f"Clocks Throttle Reasons / HW Slowdown / {label}"):
            out.add(alert)
    cur = val("pci/pci_gpu_link_info/link_widths/current_link_width", "PCI / GPU Link Info / Link Width / Current")
    top = val("pci/pci_gpu_link_info/link_widths/max_link_width", "PCI / GPU Link Info / Link Width / Max")
    # NvidiaGpuPcieLinkDegraded needs the GPU to have run wider before: one
    # capture has no history, so a link below its maximum (a x8 slot, a x1
    # riser: 11 hosts here) warrants nothing.
    temp = val("temperature/gpu_temp", "Temperature / GPU Current Temp")
    slow = val("temperature/gpu_temp_slow_threshold", "Temperature / GPU Slowdown Temp")
    if temp and slow and num(temp) >= num(slow) - 5:
        out.add("NvidiaGpuTemperatureNearSlowdown")
    margin = val("temperature/gpu_temp_tlimit", "Temperature / GPU T.Limit Temp") or \
        val("temperature/gpu_temp_tlimit", "Temperature / GPU Current T.Limit Temp")
    slow_margin = val("temperature/gpu_temp_slow_tlimit_threshold", "Temperature / GPU Slowdown T.Limit Temp")
    if not slow and major >= 570 and margin and slow_margin and num(margin) <= num(slow_margin) + 5:
        out.add("NvidiaGpuTemperatureNearSlowdown")
    util = val("utilization/gpu_util", "Utilization / GPU") or val("utilization/gpu_util", "Utilization / Gpu")
    sm = val("clocks/sm_clock", "Clocks / SM")
    power = None
    for x, t in (("gpu_power_readings/average_power_draw", "GPU Power Readings / Average Power Draw"),
                 ("gpu_power_readings/instant_power_draw", "GPU Power Readings / Instantaneous Power Draw"),
                 ("gpu_power_readings/power_draw", "GPU Power Readings / Power Draw"),
                 ("power_readings/power_draw", "Power Readings / Power Draw")):
        power = power or val(x, t)
    # The exporter's verdict (nvidia_gpu_recommended_action, issue 23):
    # a reset, a reboot, a hardware check or an RMA.
    fabric_failed = state == "Completed" and val("fabric/status", "Fabric / Status") not in ("Success", None)
    if (remap or retired or yes("remapped_rows/remapped_row_failure", "Remapped Rows / Remapping Failure Occurred")
            or (none is not None and num(none) > 0)
            or "NvidiaGpuSramErrorThresholdExceeded" in out
            or (major >= 570 and action not in (None, "None"))
            or (major >= 580 and val("fabric/health/summary", "Fabric / Health / Summary") == "Unhealthy")
            or fabric_failed):
        out.add("NvidiaGpuActionRequired")
    if util and round(num(util)) >= 99 and sm and power:
        # A replay holds its readings still: what the alert looks for.
        out.add("NvidiaGpuPinnedAtFullUtilization")
    return out


# ---- the test -----------------------------------------------------------------


def test_every_capture_row_is_in_the_crosswalk():
    """Completeness: every value any capture prints has a row."""
    rows = crosswalk()
    xml_patterns = [x.lstrip("/").split("/") for r in rows for x in r.xml]
    text_patterns = [(p[0].lstrip("/"),) + tuple(p[1:]) for r in rows for p in r.text if p]

    def matches(path, pattern):
        if "**" in pattern:
            i = pattern.index("**")
            return len(path) > i and all(a in ("*", b) for a, b in zip(pattern[:i], path))
        return len(path) == len(pattern) and all(a in ("*", b) for a, b in zip(pattern, path))

    missing = set()
    for f in capture_files():
        cap = load(f)
        for g in cap.gpus:
            for leaf in g.leaves():
                pats = xml_patterns if cap.xml else text_patterns
                if not any(matches(list(leaf), p) for p in pats):
                    missing.add(("xml " if cap.xml else "text ") + " / ".join(leaf))
        for c in cap.root.children:
            if c.name in ("gpu", "GPU"):
                continue
            pats = xml_patterns if cap.xml else text_patterns
            if c.value is not None and not any(matches([c.name], p) for p in pats):
                missing.add(("xml /" if cap.xml else "text /") + c.name)
    assert not missing, "values the captures print with no row in docs/nvidia-smi.md:\n" + "\n".join(sorted(missing))


def test_a_non_capture_is_refused_with_its_line():
    for rel in NOT_CAPTURES:
        out = subprocess.run([str(NVML_SIM), "import", str(CORPUS / rel)], capture_output=True, text=True)
        assert out.returncode == 1, out
        assert f"{rel.split('/')[-1]}:1: neither" in out.stderr, out.stderr


@pytest.fixture(scope="module")
def replayed(target_dir, tmp_path_factory):
    """Every capture imported and served by its own exporter, scraped."""
    workdir = tmp_path_factory.mktemp("corpus")
    hosts, exporters = [], []
    try:
        for f in capture_files():
            name = str(f.relative_to(CORPUS))
            out = subprocess.run([str(NVML_SIM), "import", str(f)], capture_output=True, text=True)
            assert out.returncode == 0, f"{name}: nvml-sim import failed:\n{out.stderr}"
            host = Host(load(f), name, scenario=tomllib.loads(out.stdout))
            assert len(host.scenario["gpu"]) == len(host.capture.gpus), name
            hosts.append(host)
            exporters.append(Exporter(workdir, str(f), interval="5s", extra=EXTRA_FLAGS[:3],
                                      name=f"exporter-{len(exporters)}"))
        for host, e in zip(hosts, exporters):
            e.wait_ready(60)
            with urllib.request.urlopen(f"http://{e.address}/metrics", timeout=10) as r:
                host.text = r.read().decode()
            host.metrics = parse_metrics(host.text)
        yield hosts, exporters, workdir
    finally:
        for e in exporters:
            e.stop()


def test_every_capture_replays_value_by_value(replayed):
    hosts, _, workdir = replayed
    rows = crosswalk()
    promtool = require_binary("promtool")
    total, problems = 0, []
    for host in hosts:
        cap = host.capture
        up = host.metrics.get("nvidia_gpu_up", [])
        assert len(up) == len(cap.gpus) and all(s.value == 1 for s in up), f"{host.name}: {[(s.labels, s.value) for s in up]}"
        for row in rows:
            if row.metric and cap.top_level(row) and row.conv != "gpus":
                hit = first(cap.values(cap.root, row))
                if hit is not None and hit.value is not None:
                    compare(host, 0, row, hit.value)
        for i, g in enumerate(cap.gpus):
            check_gpu(host, i, g, rows)
            check_scenario_keys(host, i, g, rows, problems)
        lint = subprocess.run([promtool, "check", "metrics"], input=host.text, capture_output=True, text=True)
        if lint.returncode != 0:
            problems.append(f"{host.name}: promtool check metrics: {lint.stdout}{lint.stderr}")
        total += host.compared
        problems += host.problems
    print(f"\ncorpus: {len(hosts)} captures, {sum(len(h.capture.gpus) for h in hosts)} GPUs, "
          f"{total} values compared with the exporter's /metrics, {len(problems)} disagree")
    assert not problems, "\n".join(problems[:200])
    assert total > 5000


def check_scenario_keys(host: Host, gpu: int, node: Node, rows: list[Row], problems: list[str]):
    """The importer wrote the scenario key each row names, for every value
    the capture prints (N/A included where the key takes one)."""
    table = host.scenario["gpu"][gpu]
    board = host.scenario.get("board", {}).get(table["model"], {})
    cap = host.capture
    for row in rows:
        if row.key in ("-", "") or cap.top_level(row) or row.metric is None:
            continue
        hit = first(cap.values(node, row))
        if hit is None or hit.value is None or is_na(hit.value) or row.conv in ("section", "present", "ci"):
            continue
        scope, *path = row.key.split(".")
        doc = table if scope == "gpu" else board
        for p in path:
            doc = doc.get(p) if isinstance(doc, dict) else None
        if row.key == "gpu.mig" and FLAG.get(hit.value.strip().lower()) == 0:
            # MIG off: no instance list (a list, even empty, is MIG on).
            if doc is not None:
                problems.append(f"{host.name} GPU {gpu} (docs/nvidia-smi.md:{row.line}): MIG is off, "
                                f"yet the import wrote `gpu.mig`")
            continue
        if doc is None and not (row.key == "board.mig.profile" and "base" in board):
            problems.append(f"{host.name} GPU {gpu} (docs/nvidia-smi.md:{row.line}): the import wrote no `{row.key}` "
                            f"for `{hit.value}`")


def test_alerts_fire_what_each_capture_warrants(replayed):
    hosts, exporters, workdir = replayed
    prom = Prometheus(workdir, {"corpus": [e.address for e in exporters]},
                      rule_files=sorted((ROOT / "alerts").glob("*.rules.yml")), interval="1s")
    try:
        prom.wait_ready()
        prom.wait_targets_up(len(exporters), timeout=90)
        by_instance = {e.address: h for e, h in zip(exporters, hosts)}

        def active():
            got = {}
            for a in prom.query("ALERTS"):
                m = a["metric"]
                got.setdefault(m["instance"], set()).add((m["alertname"], m.get("gpu")))
            return got

        want = {}
        for address, host in by_instance.items():
            w = set()
            for i, g in enumerate(host.capture.gpus):
                w |= {(a, str(i)) for a in warranted(host.capture, i, g)}
            want[address] = w
        # Once every target has been scraped three more times (rate() and
        # increase() need two samples) and every rule group evaluated twice
        # after that, every condition that holds is an active alert.
        prom.wait_scrapes(list(by_instance), 3, timeout=120)
        prom.wait_evaluations(2)
        got = active()
        problems = []
        for address, host in by_instance.items():
            have = got.get(address, set())
            if have != want[address]:
                problems.append(f"{host.name}: alerts {sorted(have)}, the capture warrants {sorted(want[address])}")
        fired = sum(len(w) for w in want.values())
        healthy = sum(1 for w in want.values() if not w)
        print(f"\ncorpus alerts: {fired} warranted alerts on {len(want) - healthy} hosts, "
              f"none on {healthy} healthy hosts; {len(problems)} hosts disagree")
        assert not problems, "\n".join(problems)
        assert fired > 0 and healthy > 0
    finally:
        prom.stop()
