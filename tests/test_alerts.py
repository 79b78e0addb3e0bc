"""The alert rules: lint and unit-test them with the real promtool, and hold
every rule to the conventions on-call engineers depend on (severity, the
annotations naming node, GPU, UUID and value, a runbook section that exists,
an XID table that matches the expressions)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ALERTS_DIR = ROOT / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("*.rules.yml"))
UNIT_TESTS = sorted((ROOT / "tests" / "alerts").glob("*.test.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_PREFIX = "https://github.com/nvml-exporter/nvml-exporter/blob/main/docs/runbooks.md#"
SEVERITIES = {"critical", "warning", "info"}
# Alerts about the exporter process or NVML as a whole: they concern a node,
# not one GPU, so their annotations cannot name a GPU index or UUID.
NODE_LEVEL_ALERTS = {"NvmlExporterDown", "NvmlExporterNvmlDown", "NvidiaGpuMissing",
                     "NvmlExporterWorkloadAttributionStalled", "NvmlExporterXidEventsStalled"}
# Alerts about a whole NVL72 rack (issue 49): no one node or GPU.
RACK_LEVEL_ALERTS = {"NvidiaGpuRackFault"}
XID_RULES = {
    "NvidiaGpuXidCritical",
    "NvidiaGpuXidWarning",
    "NvidiaGpuXidApplicationError",
    "NvidiaGpuXidStoppedProcessing",
}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: run scripts/install-test-deps (Debian package prometheus)"
    return path


def all_rules():
    rules = []
    for f in RULE_FILES:
        doc = yaml.safe_load(f.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                rules.append(rule)
    return rules


def alert_rules():
    return [r for r in all_rules() if "alert" in r]


def github_slug(heading: str) -> str:
    """The anchor GitHub generates for a Markdown heading."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def runbook_anchors():
    return {
        github_slug(m.group(1))
        for m in re.finditer(r"^#{1,6} (.+)$", RUNBOOKS.read_text(), re.MULTILINE)
    }


def test_rule_files_exist():
    assert RULE_FILES, "no alerts/*.rules.yml"
    assert UNIT_TESTS, "no tests/alerts/*.test.yml"


def test_promtool_check_rules():
    out = subprocess.run(
        [promtool(), "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_unit_tests():
    out = subprocess.run(
        [promtool(), "test", "rules", *map(str, UNIT_TESTS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_names_unique():
    names = [r["alert"] for r in alert_rules()]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_rule_has_severity_and_annotations(rule):
    labels = rule.get("labels", {})
    annotations = rule.get("annotations", {})
    assert labels.get("severity") in SEVERITIES, rule["alert"]
    for key in ("summary", "description", "runbook_url"):
        assert annotations.get(key), f"{rule['alert']} lacks {key}"
    text = annotations["summary"] + annotations["description"]
    assert "$value" in text, f"{rule['alert']} does not give the value"
    if rule["alert"] in RACK_LEVEL_ALERTS:
        # One page for many nodes: the rack, and each node and tray by query.
        assert "$labels.chassis_serial" in text, f"{rule['alert']} does not name the rack"
        assert ".Labels.instance" in text and ".Labels.tray" in text, rule["alert"]
        return
    assert "$labels.instance" in text, f"{rule['alert']} does not name the node"
    assert "$value" in text, f"{rule['alert']} does not give the value"
    if rule["alert"] not in NODE_LEVEL_ALERTS:
        assert "$labels.gpu " in text or "$labels.gpu}" in text, f"{rule['alert']} lacks the GPU index"
        assert "$labels.uuid" in text, f"{rule['alert']} lacks the GPU UUID"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_runbook_url_points_at_existing_section(rule):
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_PREFIX), url
    anchor = url[len(RUNBOOK_PREFIX):]
    assert anchor in runbook_anchors(), f"docs/runbooks.md has no heading for #{anchor}"
    assert anchor == github_slug(rule["alert"]), "each alert's runbook section is titled by its name"


def test_every_runbook_section_has_meaning_and_action():
    text = RUNBOOKS.read_text()
    for rule in alert_rules():
        m = re.search(rf"^## {rule['alert']}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
        assert m, f"no section for {rule['alert']}"
        body = m.group(1)
        assert "**Meaning.**" in body, rule["alert"]
        assert "**What to do.**" in body, rule["alert"]


def test_runbooks_cite_nvidia_documentation():
    text = RUNBOOKS.read_text()
    for url in (
        "https://docs.nvidia.com/deploy/xid-errors/",
        "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/",
        "https://docs.nvidia.com/deploy/dynamic-page-retirement/",
    ):
        assert url in text, url


def _unit_test_evals():
    for f in UNIT_TESTS:
        doc = yaml.safe_load(f.read_text())
        for case in doc["tests"]:
            for ev in case.get("alert_rule_test", []):
                yield ev


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_every_alert_is_unit_tested_firing_and_quiet(rule):
    name = rule["alert"]
    evals = [e for e in _unit_test_evals() if e["alertname"] == name]
    firing = [e for e in evals if e.get("exp_alerts")]
    quiet = [e for e in evals if not e.get("exp_alerts")]
    assert firing, f"no unit test where {name} fires"
    assert quiet, f"no unit test where {name} stays quiet"
    checked = [a for e in firing for a in e["exp_alerts"] if a.get("exp_annotations")]
    assert checked, f"no unit test of {name} checks its annotations"
    assert all(
        a.get("exp_labels", {}).get("severity") == rule["labels"]["severity"]
        for e in firing
        for a in e["exp_alerts"]
    ), f"unit tests of {name} must check the severity label"


def _xid_regex(rule) -> set[str]:
    regexes = re.findall(r'xid=~"([^"]+)"', rule["expr"])
    assert regexes and len(set(regexes)) == 1, rule["alert"]
    return set(regexes[0].split("|"))


# What each resolution bucket of NVIDIA's XID catalog may become here
# (docs/runbooks.md, "XID severity table"; the same policy as
# Bucket::severities in src/xid_catalog.rs, which renders the table): a
# bucket that says the GPU needs nothing never pages, one that says reset
# never goes to chat only.
BUCKET_SEVERITIES = {
    "RESET_GPU": {"critical", "warning"},
    # The catalog's workflow for 48 starts with a reset, 74's drains on
    # most of its registers (and on the bare code), and RESTART_BM (79)
    # asks for more: a node reboot.
    "WORKFLOW_XID_48": {"critical"},
    "WORKFLOW_NVLINK_ERR": {"critical"},
    # Decided per event from the kernel-log line (docs/runbooks.md, "NVLink5
    # XIDs 144-150"): the verdict pages the fatal ones, no rule by code.
    "WORKFLOW_NVLINK5_ERR": {"none"},
    "RESTART_BM": {"critical"},
    "RESTART_APP": {"info", "warning"},
    "CONTACT_SUPPORT": {"warning"},
    "RESTART_VM": {"warning"},
    "CHECK_MECHANICALS": {"warning"},
    "UPDATE_SWFW": {"warning"},
    "CHECK_UVM": {"warning"},
    "IGNORE": {"none"},
    "WORKFLOW_XID_45": {"none"},
    "XID_154": {"none"},
}

# Where the rules depart from the catalog's bucket on purpose (the table
# marks them "departed" and says why): 63, on MIG GPUs the only sign of a
# remap; 157, an RMA candidate.
DEPARTURES = {"63": "warning", "157": "warning"}
# The codes the catalog gives no bucket for: the table names ours.
# 173-176: the driver's nverror.h, past the catalog page (issue 36); 185:
# NVIDIA's R620 GPU Operational Events notes (issue 46).
OURS = {str(c) for c in range(162, 177)} | {"185"}
# The buckets NVIDIA's catalog owners "intentionally resolve to
# CONTACT_SUPPORT. A human decides" (NVIDIA/NVSentinel
# health-monitors/syslog-health-monitor/pkg/common/xid_catalog_consistency_test.go,
# manualTriageBuckets; issue #1888): never `none` in the verdict, one answer.
MANUAL_TRIAGE = {"CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM"}


def _xid_table() -> dict[str, dict[str, str]]:
    """The runbook's XID table, one row per code: catalog action (and
    whether it departs or is ours), alert, severity."""
    text = RUNBOOKS.read_text()
    section = text.split("## XID severity table", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].isdigit():
            assert cells[0] not in rows, f"XID {cells[0]} has two rows"
            action = cells[2]
            origin = "catalog"
            if action.endswith(", departed"):
                action, origin = action.removesuffix(", departed"), "departed"
            elif action.startswith("none, ours "):
                action, origin = action.removeprefix("none, ours "), "ours"
            rows[cells[0]] = {"bucket": action, "origin": origin, "alert": cells[3],
                              "severity": cells[4], "verdict": cells[5], "action": cells[6]}
    return rows


def test_xid_table_matches_the_rules():
    rules = {r["alert"]: r for r in alert_rules()}
    table = _xid_table()
    assert set(table) == {str(c) for c in range(1, 177)} | {"185"}, \
        "every code of NVIDIA's catalog and the driver's nverror.h, 1 to 176, and R620's 185"
    seen: dict[str, str] = {}
    for name in XID_RULES:
        for code in _xid_regex(rules[name]):
            assert code not in seen, f"XID {code} in both {seen.get(code)} and {name}"
            seen[code] = name
            assert code in table, f"XID {code} ({name}) missing from the runbook table"
            row = table[code]
            assert row["alert"] == name, f"XID {code}: table says {row['alert']}, rules say {name}"
            assert row["severity"] == rules[name]["labels"]["severity"], f"XID {code} severity"
    silent = {code for code, row in table.items() if row["alert"] == "none"}
    assert all(table[c]["severity"] == "none" for c in silent)
    assert set(table) == set(seen) | silent, f"table rows without a rule: {set(table) - set(seen) - silent}"
    unlisted = rules["NvidiaGpuXidUnlisted"]
    excluded = set(re.findall(r'xid!~"([^"]+)"', unlisted["expr"])[0].split("|"))
    assert excluded == set(seen) | silent, "NvidiaGpuXidUnlisted must exclude exactly the table's codes"


def test_xid_severity_follows_the_catalog_bucket():
    table = _xid_table()
    for code, row in table.items():
        assert row["bucket"] in BUCKET_SEVERITIES, f"XID {code}: unknown catalog action {row['bucket']!r}"
        if row["origin"] == "departed":
            assert DEPARTURES.get(code) == row["severity"], f"XID {code}: departure changed"
            assert "departing from the catalog" in row["action"], f"XID {code}: say why"
            continue
        assert code not in DEPARTURES, f"XID {code} no longer marked as a departure"
        assert row["severity"] in BUCKET_SEVERITIES[row["bucket"]], \
            f"XID {code}: {row['bucket']} cannot be {row['severity']}"
    ours = {code for code, row in table.items() if row["origin"] == "ours"}
    assert ours == OURS, "only 162-176 and 185 lack a bucket in NVIDIA's catalog"
    for code in ours:
        assert "the catalog gives no bucket; ours" in table[code]["action"], f"XID {code}: say why"


def test_manual_triage_buckets_answer_as_one_in_the_verdict():
    """Issue 46: every code of a manual-triage bucket, NVIDIA's or ours,
    is drained until a person decides, and its row says so."""
    table = _xid_table()
    triage = {code for code, row in table.items() if row["bucket"] in MANUAL_TRIAGE}
    assert {"54", "78", "142", "159", "176", "185"} <= triage
    for code in triage:
        assert table[code]["verdict"].startswith("`check_hardware`"), f"XID {code}: {table[code]['verdict']}"
        assert table[code]["action"].startswith("drained until a person decides"), f"XID {code}"
    for code, row in table.items():
        assert row["verdict"].startswith("`"), f"XID {code}: no verdict"


def test_xid_codes_named_by_the_issue_land_where_the_catalog_says():
    """Issue 16: 43 and 154 must not page or ticket, 8 must not page, 95 and
    the RESET_GPU codes that fell into the catch-all must page."""
    table = _xid_table()
    for code in ("43", "45", "154"):
        assert table[code]["severity"] == "none", f"XID {code} is IGNORE in the catalog"
    for code in ("8", "13", "31", "94"):
        assert table[code]["severity"] != "critical", f"XID {code} must not page"
    for code in ("46", "48", "74", "79", "95", "109", "110", "119", "120", "136", "140", "143",
                 "155", "158"):
        assert table[code]["severity"] == "critical", f"XID {code} must page"
    # Issue 28: the NVLink5 codes are decoded per event (44 of NVIDIA's 94
    # decode rows are IGNORE): the verdict pages the fatal ones, no rule
    # pages the code; power smoothing's wear has its own alert.
    for code in ("144", "145", "146", "147", "148", "149", "150", "162", "163", "164", "165"):
        assert table[code]["severity"] == "none", f"XID {code} must not page by code"
    for code in ("63", "64", "92"):
        assert code in table, f"XID {code} is not classified"
    # Issue 21: the codes past 158 that fell into the catch-all.
    for code in ("167", "169", "171", "172"):
        assert table[code]["severity"] == "critical", f"XID {code} must page"
    for code in ("157", "159", "168"):
        assert table[code]["severity"] == "warning", f"XID {code} is a ticket"


def test_repeating_xid_rules_keep_firing():
    rules = {r["alert"]: r for r in alert_rules()}
    for name in ("NvidiaGpuXidCritical", "NvidiaGpuXidWarning", "NvidiaGpuXidStoppedProcessing"):
        assert rules[name].get("keep_firing_for"), f"{name} needs keep_firing_for"


# Labels a join may match on (issue 16): the node, the GPU's UUID, the
# families' own labels, and `job` for joins about the scrape target itself.
# Never the GPU index (NVML renumbers after a GPU vanishes) nor target labels
# a deployment adds (a rollout changes `pod`).
IDENTITY_LABELS = {"job", "instance", "uuid", "cluster", "xid", "gpu_instance", "compute_instance",
                   "error", "scope", "link", "state", "node"}


def test_joins_match_on_identity_labels_only():
    for rule in all_rules():
        expr = rule["expr"]
        for labels in re.findall(r"\bon\s*\(([^)]*)\)", expr):
            names = {n.strip() for n in labels.split(",") if n.strip()}
            assert names, f"{rule.get('alert') or rule.get('record')}: empty on()"
            extra = names - IDENTITY_LABELS
            assert not extra, f"{rule.get('alert') or rule.get('record')} joins on {sorted(extra)}"


def test_new_series_branches_match_on_identity():
    """`x unless x offset 10m` matches on every label: a new pod label makes
    the series new. Each such branch must say `on (...)`."""
    for rule in alert_rules():
        for m in re.finditer(r"\bunless\b(.*?)\n\s*\S+\{[^}]*\}\s*offset\b", rule["expr"], re.DOTALL):
            assert re.match(r"\s*on\s*\(", m.group(1)), f"{rule['alert']}: new-series branch without on()"


def test_severities_follow_nvidia_guidance():
    """Issue 16: a contained uncorrectable error needs no reset on Ampere and
    newer (warning); uncontained (XID 95) and a driver-requested recovery
    action page; NVML down waits out a driver upgrade and only tickets."""
    rules = {r["alert"]: r for r in alert_rules()}
    assert rules["NvidiaGpuEccUncorrectedError"]["labels"]["severity"] == "warning"
    assert rules["NvidiaGpuRecoveryActionRequired"]["labels"]["severity"] == "critical"
    assert "95" in _xid_regex(rules["NvidiaGpuXidCritical"])
    assert "94" in _xid_regex(rules["NvidiaGpuXidWarning"])
    nvml_down = rules["NvmlExporterNvmlDown"]
    assert nvml_down["labels"]["severity"] == "warning"
    minutes = int(re.fullmatch(r"(\d+)m", nvml_down["for"]).group(1))
    assert minutes >= 15, "a driver upgrade takes longer than that"
    assert "nvml_exporter_nvml_up" in rules["NvidiaGpuLost"]["expr"], \
        "NvidiaGpuLost must not fire while NVML itself is away"


def test_runbook_states_the_mig_remap_blind_spot():
    text = RUNBOOKS.read_text()
    for alert in ("NvidiaGpuRemappedRowsPending", "NvidiaGpuRowRemapFailed"):
        body = re.search(rf"^## {alert}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL).group(1)
        assert "Blind spot: MIG" in body and "nvmlDeviceGetRemappedRows" in text, alert


def test_alertmanager_example_keeps_clusters_apart():
    cfg = yaml.safe_load((ALERTS_DIR / "alertmanager.example.yml").read_text())
    assert "cluster" in cfg["route"]["group_by"]
    for rule in cfg["inhibit_rules"]:
        assert "cluster" in rule["equal"], rule


# Alerts that end in an RMA: they carry what the RMA form asks for.
RMA_ALERTS = ("NvidiaGpuRowRemapFailed", "NvidiaGpuSramErrorThresholdExceeded",
              "NvidiaGpuRemapperBanksExhausted")


def test_rma_alerts_carry_the_gpu_identity():
    rules = {r["alert"]: r for r in alert_rules()}
    for name in RMA_ALERTS:
        expr = rules[name]["expr"]
        m = re.search(r"group_left\s*\(([^)]*)\)[^()]*(?:\([^)]*\)\s*)?\(?nvidia_gpu_info", expr)
        assert m, f"{name} does not join nvidia_gpu_info"
        assert {"serial", "pci_bus_id", "name"} <= {x.strip() for x in m.group(1).split(",")}, name
        assert "$labels.serial" in rules[name]["annotations"]["description"], name


def test_runbook_reset_procedure_is_for_ampere_and_kubernetes():
    """Issue 16: a monitoring client (nvml-exporter itself) blocks a reset;
    the Volta-era "the baseboard resets together" is gone; a Kubernetes
    recipe evicts the exporter, resets, restores."""
    text = RUNBOOKS.read_text()
    reset = text.split("- **Reset**", 1)[1].split("- **RMA**", 1)[0]
    assert "Ampere and newer" in reset
    assert "nvml-exporter" in reset and "systemctl stop nvml-exporter" in reset
    assert "resets together" not in text and "reset together;" not in text
    recipe = reset.split("```sh", 1)[1].split("```", 1)[0]
    for step in ("kubectl cordon", "paused-for-reset", "--gpu-reset", "=true", "kubectl uncordon"):
        assert step in recipe, step
    assert recipe.index("paused-for-reset") < recipe.index("--gpu-reset") < recipe.index("uncordon")


def test_first_error_branch_is_needed(tmp_path):
    """Prove the unit tests can fail: with the ECC rule reduced to a plain
    increase(), the test of a counter that appears non-zero must fail."""
    rules_text = (ALERTS_DIR / "nvidia-gpu.rules.yml").read_text()
    doc = yaml.safe_load(rules_text)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "NvidiaGpuEccUncorrectedError":
                rule["expr"] = rule["expr"].split("\nor\n")[0]
                assert "offset" not in rule["expr"]
    (tmp_path / "alerts").mkdir()
    (tmp_path / "alerts" / "nvidia-gpu.rules.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "tests" / "alerts").mkdir(parents=True)
    test_file = tmp_path / "tests" / "alerts" / "memory-errors.test.yml"
    shutil.copy(ROOT / "tests" / "alerts" / "memory-errors.test.yml", test_file)
    out = subprocess.run(
        [promtool(), "test", "rules", str(test_file)], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "appears non-zero" in out.stdout + out.stderr


def test_alertmanager_example_routes_by_severity():
    cfg_path = ALERTS_DIR / "alertmanager.example.yml"
    amtool = shutil.which("amtool")
    assert amtool, "amtool not found: run scripts/install-test-deps (prometheus-alertmanager)"
    out = subprocess.run([amtool, "check-config", str(cfg_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    for severity, receiver in (("critical", "pager"), ("warning", "ticket"), ("info", "chat")):
        out = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={cfg_path}", f"severity={severity}",
             "alertname=NvidiaGpuLost"],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.strip() == receiver, (severity, out.stdout)


def test_the_verdict_reads_the_same_xid_catalog_as_the_rules():
    """Issue 23: the XID buckets come from one table shared by the rules,
    the runbooks and the exporter's verdict: src/verdict/ maps the buckets
    of src/xid_catalog.rs (the catalog the rules and the runbook table are
    rendered from), every bucket the runbook's table names, and keeps no
    table of its own."""
    source = "".join(p.read_text() for p in sorted((ROOT / "src" / "verdict").glob("*.rs")))
    assert "xid_catalog::lookup" in source
    mapped = set(re.findall(r"Bucket::(\w+)", source))
    catalog = (ROOT / "src" / "xid_catalog.rs").read_text()
    variants = set(re.findall(r"Bucket::(\w+) => \"[A-Z0-9_]+\"", catalog))
    assert variants and variants <= mapped, f"buckets without a verdict action: {variants - mapped}"
    table_buckets = {row["bucket"].split(",")[0].split()[-1] for row in _xid_table().values()}
    names = set(re.findall(r'Bucket::\w+ => "([A-Z0-9_]+)"', catalog))
    assert table_buckets <= names, table_buckets - names


def test_the_verdict_alert_fires_at_once_and_inhibits_only_what_it_covers():
    rules = {r["alert"]: r for r in alert_rules()}
    verdict = rules["NvidiaGpuActionRequired"]
    assert "for" not in verdict, "it must fire no later than the XID alerts it inhibits"
    assert "restart_app" not in verdict["expr"], "an application fault never pages"
    cfg = yaml.safe_load((ALERTS_DIR / "alertmanager.example.yml").read_text())
    (inhibit,) = [r for r in cfg["inhibit_rules"]
                  if r["source_matchers"] == ['alertname="NvidiaGpuActionRequired"']]
    (matcher,) = inhibit["target_matchers"]
    targets = set(re.fullmatch(r'alertname=~"([^"]+)"', matcher).group(1).split("|"))
    assert targets <= set(rules), targets - set(rules)
    # The alerts that ask for a reset or more are covered; the ones about
    # applications, temperatures and the exporter itself are not.
    assert {"NvidiaGpuXidCritical", "NvidiaGpuRemappedRowsPending", "NvidiaGpuRowRemapFailed",
            "NvidiaGpuRecoveryActionRequired", "NvidiaGpuLost", "NvidiaGpuHung"} <= targets
    assert not targets & {"NvidiaGpuXidApplicationError", "NvidiaGpuXidStoppedProcessing",
                          "NvidiaGpuHwThermalSlowdown", "NvmlExporterDown", "NvidiaGpuActionRequired"}
    assert "uuid" in inhibit["equal"] and "instance" in inhibit["equal"]


def test_the_rack_alert_inhibits_only_the_pages_of_its_rack():
    """Issue 49: a rack-wide fault pages once; the per-GPU pages it covers
    carry the rack's chassis_serial (joined from nvidia_gpu_platform_info),
    so the inhibition cannot reach a GPU outside a rack or of another rack."""
    rules = {r["alert"]: r for r in alert_rules()}
    rack = rules["NvidiaGpuRackFault"]
    assert "for" not in rack, "it must reach Alertmanager with the verdict pages it inhibits"
    assert 'nvidia_gpu_platform_info{chassis_serial!=""}' in rack["expr"], \
        "GPUs without a chassis serial would be counted as one rack"
    cfg = yaml.safe_load((ALERTS_DIR / "alertmanager.example.yml").read_text())
    assert "chassis_serial" in cfg["route"]["group_by"]
    (inhibit,) = [r for r in cfg["inhibit_rules"]
                  if r["source_matchers"] == ['alertname="NvidiaGpuRackFault"']]
    (matcher,) = inhibit["target_matchers"]
    targets = set(re.fullmatch(r'alertname=~"([^"]+)"', matcher).group(1).split("|"))
    assert targets == {"NvidiaGpuActionRequired", "NvidiaGpuFabricUnhealthy", "NvidiaGpuFabricNotReady"}
    assert set(inhibit["equal"]) == {"cluster", "chassis_serial"}
    for name in targets:
        expr = rules[name]["expr"]
        assert re.search(r"group_left \(chassis_serial\)\s*nvidia_gpu_platform_info", expr), name
        # GPUs without a rack page as before, through the `or` branch.
        assert "or on (instance, uuid)" in expr, name
