"""The recipes of docs/operations.md ("What to do with a GPU now") run for
real: deploy/verdict/nvml-gpu-verdict against the real exporter on the
simulated driver, with stand-ins for kubectl and scontrol on PATH that keep
a node's taints, conditions, state and drain reason the way the real tools
would. A GSP timeout on one GPU taints and drains the node; an application
fault on another does not; the driver reload that resets the GPUs untaints
and resumes it; a drain someone else set stays; an exporter that cannot be
read changes nothing. The stand-ins apply one call at a time, as the API
server and slurmctld do, and fail any chosen call: each failure is finished
by the next run, ten overlapping runs leave what one leaves, and neither an
edited reason nor a hand-made mark passes for the script's own (issue 51)."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from promstack import Exporter, http_get, sim_control, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "deploy" / "verdict" / "nvml-gpu-verdict"
NODE = "gpu-node-17"

# kubectl as the script uses it: get the node's taint value or an
# annotation (jsonpath; a missing key prints nothing, as kubectl's jsonpath
# does), taint, untaint, annotate, patch the status conditions (merged by
# type, as a strategic merge does). The node also keeps a cordon
# (spec.unschedulable) that only a person sets here.
FAKE_KUBECTL = r'''
import fcntl, json, os, sys
state_path, argv = sys.argv[1], sys.argv[2:]
lock = open(state_path + ".lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
state = json.load(open(state_path))
state["calls"].append(["kubectl", *argv])
FAIL_PREAMBLE
node = state["node"]
node.setdefault("annotations", {})
if argv[:2] == ["get", "node"]:
    assert argv[2] == node["name"], argv
    path = argv[4].removeprefix("jsonpath=")
    if path.startswith("{.spec.taints[?(@.key=="):
        key = path.split('@.key=="')[1].split('"')[0]
        assert path.endswith(")].value}"), path
        print(" ".join(t["value"] for t in node["taints"] if t["key"] == key), end="")
    elif path.startswith("{.metadata.annotations."):
        print(node["annotations"].get(path[len("{.metadata.annotations."):-1], ""), end="")
    else:
        sys.exit(f"unexpected jsonpath {path}")
elif argv[:2] == ["taint", "node"]:
    spec = argv[3]
    if spec.endswith("-"):
        before = len(node["taints"])
        node["taints"] = [t for t in node["taints"] if t["key"] != spec[:-1]]
        if len(node["taints"]) == before:
            sys.exit("error: taint not found")
    else:
        key, rest = spec.split("=", 1)
        value, effect = rest.split(":")
        if any(t["key"] == key for t in node["taints"]) and "--overwrite" not in argv:
            sys.exit("error: taint exists")
        node["taints"] = [t for t in node["taints"] if t["key"] != key] + [
            {"key": key, "value": value, "effect": effect}]
elif argv[:2] == ["annotate", "node"]:
    spec = argv[3]
    if spec.endswith("-"):
        node["annotations"].pop(spec[:-1], None)
    else:
        key, value = spec.split("=", 1)
        if key in node["annotations"] and "--overwrite" not in argv:
            sys.exit("error: annotation exists")
        node["annotations"][key] = value
elif argv[:2] == ["patch", "node"]:
    assert "--subresource=status" in argv and "--type=strategic" in argv, argv
    patch = json.loads(argv[argv.index("-p") + 1])
    for c in patch["status"]["conditions"]:
        node["conditions"] = [x for x in node["conditions"] if x["type"] != c["type"]] + [c]
else:
    sys.exit(f"unexpected kubectl {argv}")
with open(state_path + ".tmp", "w") as f:
    json.dump(state, f)
os.replace(state_path + ".tmp", state_path)
'''

# scontrol show node / update NodeName=... State=DRAIN|RESUME Reason=...,
# keeping one State (a base state plus flags) and one Reason per node as
# slurmctld does: a DRAIN replaces the reason, a RESUME lifts DRAIN and DOWN
# and clears it, whoever set them.
FAKE_SCONTROL = r'''
import fcntl, json, os, sys
state_path, argv = sys.argv[1], sys.argv[2:]
lock = open(state_path + ".lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
state = json.load(open(state_path))
state["calls"].append(["scontrol", *argv])
FAIL_PREAMBLE
node = state["slurm"]
if argv[:2] == ["show", "node"]:
    reason = f"   Reason={node['reason']} [root@2026-11-24T01:00:00]\n" if node["reason"] else ""
    print(f"NodeName={argv[2]} Arch=x86_64 CoresPerSocket=48\n   State={node['state']} ThreadsPerCore=2\n"
          f"{reason}   Comment=(null)")
elif argv[0] == "update":
    args = dict(a.split("=", 1) for a in argv[1:])
    parts = node["state"].split("+")
    if args["State"] == "DRAIN":
        assert args.get("Reason"), "slurm refuses a drain without a reason"
        if "DRAIN" not in parts:
            parts.append("DRAIN")
        node["state"], node["reason"] = "+".join(parts), args["Reason"]
    elif args["State"] == "RESUME":
        base = "IDLE" if parts[0] == "DOWN" else parts[0]
        node["state"] = "+".join([base] + [p for p in parts[1:] if p not in ("DRAIN", "DOWN")])
        node["reason"] = ""
    else:
        sys.exit(f"unexpected State {args['State']}")
else:
    sys.exit(f"unexpected scontrol {argv}")
with open(state_path + ".tmp", "w") as f:
    json.dump(state, f)
os.replace(state_path + ".tmp", state_path)
'''


# Each stand-in call is atomic under a lock, as the API server and slurmctld
# apply one request at a time. A failure on request: state["fail"] maps a
# verb (taint, annotate, patch, update, get, show) to N, and the N-th call of
# it from then on fails, changing nothing, as a timed-out API call does ("*":
# the N-th call of any verb).
FAIL_PREAMBLE = r'''
verb = argv[0]
countdown = state.setdefault("fail", {})
for key in (verb, "*"):
    if key not in countdown:
        continue
    countdown[key] -= 1
    if countdown[key] <= 0:
        del countdown[key]
        with open(state_path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(state_path + ".tmp", state_path)
        sys.exit(f"error: the server was unable to return a response in the time allotted ({verb})")
'''
FAKE_KUBECTL = FAKE_KUBECTL.replace("FAIL_PREAMBLE", FAIL_PREAMBLE)
FAKE_SCONTROL = FAKE_SCONTROL.replace("FAIL_PREAMBLE", FAIL_PREAMBLE)


@pytest.fixture
def node(tmp_path):
    """A tmp bin dir with the stand-ins, and the state they keep."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"calls": [], "node": {"name": NODE, "taints": [], "conditions": []},
                                 "slurm": {"state": "IDLE", "reason": ""}}))
    for name, code in (("kubectl", FAKE_KUBECTL), ("scontrol", FAKE_SCONTROL)):
        impl = bin_dir / f"{name}.py"
        impl.write_text(code)
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{impl}" "{state}" "$@"\n')
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)

    class Node:
        state_dir = tmp_path / "verdict-state"

        def argv(self, url: str, *args: str) -> list[str]:
            # Debian's /bin/sh is dash: the script is POSIX sh, not bash.
            return [shutil.which("dash") or "sh", str(SCRIPT), "--url", url, "--node", NODE,
                    "--state-dir", str(self.state_dir), *args]

        def env(self) -> dict:
            return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

        def run(self, url: str, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(self.argv(url, *args), capture_output=True, text=True,
                                  env=self.env(), timeout=120)

        def start(self, url: str, *args: str) -> subprocess.Popen:
            """A run in the background, to overlap with others."""
            return subprocess.Popen(self.argv(url, *args), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=self.env())

        def fail(self, verb: str, nth: int = 1):
            """The nth call of verb from now on fails (an API timeout)."""
            s = self.state()
            s.setdefault("fail", {})[verb] = nth
            state.write_text(json.dumps(s))

        def token(self) -> str:
            return (self.state_dir / "token").read_text().strip()

        def state(self) -> dict:
            return json.loads(state.read_text())

        def set_slurm(self, st: str, reason: str):
            s = self.state()
            s["slurm"] = {"state": st, "reason": reason}
            state.write_text(json.dumps(s))

        def set_node(self, **fields):
            """What a person does to the Kubernetes node: cordon, taints."""
            s = self.state()
            s["node"].update(fields)
            state.write_text(json.dumps(s))

        def updates_since(self, mark: int) -> list:
            """The calls that changed something, after the mark-th call."""
            return [c for c in self.state()["calls"][mark:]
                    if c[1] in ("update", "taint", "annotate")]

    return Node()


def verdict_of(exporter, gpu: str) -> str | None:
    _, body = http_get(f"http://{exporter.address}/metrics")
    for line in body.decode().splitlines():
        if line.startswith("nvidia_gpu_recommended_action{") and f'gpu="{gpu}"' in line \
                and "gpu_instance" not in line:
            return line.split('action="')[1].split('"')[0]
    return None


def test_the_verdict_taints_and_drains_the_node_and_lifts_it_after_the_reset(tmp_path, node):
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, "dgx-h100", interval="200ms",
                        env={"NVML_SIM_CONTROL": str(control)})
    try:
        exporter.wait_ready()
        url = f"http://{exporter.address}/metrics"

        # Healthy: nothing to do, nothing done.
        healthy = node.run(url, "check")
        assert (healthy.returncode, healthy.stdout.strip()) == (0, "no GPU needs reset_gpu or more")
        assert node.run(url, "slurm").returncode == 0
        assert [c for c in node.state()["calls"] if c[1] == "update"] == []

        # A GSP timeout on GPU 3, an application fault on GPU 4.
        sim_control(control, '{ action = "xid", gpu = 3, code = 119 }')
        sim_control(control, '{ action = "xid", gpu = 4, code = 13 }')
        wait_until(lambda: verdict_of(exporter, "3") == "reset_gpu"
                   and verdict_of(exporter, "4") == "restart_app", 30, "the verdicts")

        check = node.run(url, "check")
        assert check.returncode == 1, check
        assert check.stdout.strip() == "GPU 3 reset_gpu (xid_reset_gpu)", "GPU 4's application fault drains nothing"

        k8s = node.run(url, "kubernetes")
        assert k8s.returncode == 0, k8s.stderr
        n = node.state()["node"]
        assert n["taints"] == [{"key": "nvml-exporter/gpu-action", "value": "reset_gpu", "effect": "NoSchedule"}]
        assert n["annotations"] == {"nvml-exporter/gpu-action-taint": f"reset_gpu/{node.token()}"}, \
            "the taint is marked ours, with this node's token"
        assert len(node.token()) == 16
        (cond,) = n["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("GPUActionRequired", "True", "GPUResetRequired")
        assert cond["message"] == "GPU 3 reset_gpu (xid_reset_gpu)"
        # Run again (a timer does): no second taint call.
        calls = len(node.state()["calls"])
        node.run(url, "kubernetes")
        assert not [c for c in node.state()["calls"][calls:] if c[1] == "taint"]

        slurm = node.run(url, "slurm")
        assert slurm.returncode == 0, slurm.stderr
        assert node.state()["slurm"] == {"state": "IDLE+DRAIN",
                                         "reason": "nvml-exporter: GPU 3 reset_gpu (xid_reset_gpu)"}

        # The driver reload resets every GPU: the verdict clears, and with
        # it the taint, the condition and the drain.
        sim_control(control, '{ action = "driver-unload" }')
        wait_until(lambda: b"nvml_exporter_nvml_up 0" in http_get(url)[1], 30, "NVML to go away")
        sim_control(control, '{ action = "driver-load" }')
        wait_until(lambda: verdict_of(exporter, "3") == "none", 60, "GPU 3's verdict to clear")
        assert node.run(url, "check").returncode == 0
        assert node.run(url, "kubernetes").returncode == 0
        n = node.state()["node"]
        assert n["taints"] == []
        assert n["annotations"] == {}
        assert [(c["type"], c["status"]) for c in n["conditions"]] == [("GPUActionRequired", "False")]
        assert node.run(url, "slurm").returncode == 0
        assert node.state()["slurm"] == {"state": "IDLE", "reason": ""}

        # A drain for another reason is not ours to lift.
        node.set_slurm("IDLE+DRAIN", "bad DIMM, ticket 4242")
        node.run(url, "slurm")
        assert node.state()["slurm"]["reason"] == "bad DIMM, ticket 4242"

        # A threshold of reboot: a reset is below it.
        sim_control(control, '{ action = "xid", gpu = 5, code = 119 }')
        wait_until(lambda: verdict_of(exporter, "5") == "reset_gpu", 30, "GPU 5's verdict")
        assert node.run(url, "--min-action", "reboot", "check").returncode == 0
        assert node.run(url, "check").returncode == 1
    finally:
        exporter.stop()


def test_an_exporter_that_cannot_be_read_changes_nothing(node):
    node.set_slurm("IDLE+DRAIN", "nvml-exporter: GPU 3 reset_gpu (xid_reset_gpu)")
    url = "http://127.0.0.1:9/metrics"
    for command in ("check", "kubernetes", "device-taints", "slurm"):
        out = node.run(url, command)
        assert out.returncode == 2, (command, out)
        assert "nothing changed" in out.stderr
    assert node.state()["calls"] == [], "no tool was called"
    assert node.state()["slurm"]["state"] == "IDLE+DRAIN", "never undrained on missing data"


def test_usage_errors_name_the_problem(node):
    out = node.run("http://127.0.0.1:9/metrics", "--min-action", "explode", "check")
    assert out.returncode == 64 and "unknown action explode" in out.stderr
    out = node.run("http://127.0.0.1:9/metrics", "--effect", "Sometimes", "check")
    assert out.returncode == 64 and "usage:" in out.stderr


# The node condition's reason for each action (issue 47, item 3), as the
# `kubernetes` mode writes it and node-problem-detector's per-action
# conditions are named.
REASONS = {"restart_app": "GPUAppRestartRequired", "reset_gpu": "GPUResetRequired",
           "reboot": "GPURebootRequired", "check_hardware": "GPUServiceRequired",
           "rma": "GPUReplacementRequired"}


def test_the_node_problem_detector_config_runs_the_check():
    """One rule per condition: node-problem-detector's custom plugin
    monitor gives a rule one fixed reason, and rules sharing a condition
    overwrite each other's status (custom_plugin_monitor.go, generateStatus:
    an OK result turns a True condition False whichever rule set it), so the
    action is told by a condition per action, GPUActionRequired kept for
    the threshold."""
    cfg = json.loads((ROOT / "deploy" / "verdict" / "node-problem-detector.json").read_text())
    assert cfg["plugin"] == "custom"
    defaults = {c["type"]: c for c in cfg["conditions"]}
    rules = {r["condition"]: r for r in cfg["rules"]}
    assert len(rules) == len(cfg["rules"]), "no two rules share a condition"
    assert set(rules) == set(defaults) == {"GPUActionRequired", *REASONS.values()}
    for rule in cfg["rules"]:
        assert rule["type"] == "permanent" and Path(rule["path"]).name == SCRIPT.name
        assert defaults[rule["condition"]]["reason"] != rule["reason"]
    assert rules["GPUActionRequired"]["args"] == ["check"]
    for action, reason in REASONS.items():
        assert (rules[reason]["reason"], rules[reason]["args"]) == (reason, ["--only", action, "check"])


def test_a_gpu_lost_before_the_exporter_started_drains_the_node_by_its_address(tmp_path, node):
    """Issue 28, item 3: a GPU lost before the exporter started has no index
    NVML can name nor UUID; its XID 79 in the kernel log gives its address,
    and the verdict keyed by it drains the node for the reboot it needs."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(f"4,1,{int((uptime - 60) * 1e6)},-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', "
                    "name=<unknown>, GPU has fallen off the bus.\n")
    scenario = tmp_path / "lost.toml"
    scenario.write_text('name = "lost"\nbase = "dgx-h100"\n'
                        '[[timeline]]\nat = 0\naction = "lose"\ngpu = 2\n')
    exporter = Exporter(tmp_path, str(scenario), interval="200ms", name="exporter-lost",
                        extra=["--collector.xid.kmsg", f"--path.kmsg={kmsg}"])
    try:
        exporter.wait_ready()
        url = f"http://{exporter.address}/metrics"
        wait_until(lambda: b'pci_bus_id="00000000:3A:00.0"' in http_get(url)[1], 30,
                   "the lost GPU's verdict by address")
        check = node.run(url, "check")
        assert check.returncode == 1, check
        assert "GPU PCI:00000000:3A:00.0 reboot (xid_restart_bm)" in check.stdout, check.stdout
        assert node.run(url, "slurm").returncode == 0
        assert node.state()["slurm"]["state"] == "IDLE+DRAIN"
    finally:
        exporter.stop()


def test_what_a_person_did_to_the_node_stays_done(tmp_path, node):
    """Issue 41, item 1: a node drained, cordoned or tainted by someone else
    keeps that through a GPU fault and the reset that clears it. Before,
    the Slurm mode replaced the administrator's reason with its own and
    then, seeing its own prefix, resumed a node under maintenance; the
    Kubernetes mode removed a taint of its key that a person had set."""
    control = tmp_path / "sim.sock"
    exporter = Exporter(tmp_path, "dgx-h100", interval="200ms",
                        env={"NVML_SIM_CONTROL": str(control)})
    key = "nvml-exporter/gpu-action"
    theirs = [{"key": "example.com/maintenance", "value": "psu", "effect": "NoSchedule"},
              {"key": key, "value": "rma", "effect": "NoSchedule"}]
    try:
        exporter.wait_ready()
        url = f"http://{exporter.address}/metrics"
        node.set_slurm("IDLE+DRAIN", "maintenance: PSU swap")
        node.set_node(unschedulable=True, taints=theirs)

        # A GPU fault: the node is already out, for the person's reasons.
        sim_control(control, '{ action = "xid", gpu = 3, code = 119 }')
        wait_until(lambda: verdict_of(exporter, "3") == "reset_gpu", 30, "GPU 3's verdict")
        mark = len(node.state()["calls"])
        slurm = node.run(url, "slurm")
        assert slurm.returncode == 0, slurm.stderr
        assert "for another reason (maintenance: PSU swap): left as it is" in slurm.stdout, slurm.stdout
        k8s = node.run(url, "kubernetes")
        assert k8s.returncode == 0, k8s.stderr
        assert "set by someone else" in k8s.stdout, k8s.stdout
        assert node.updates_since(mark) == [], "nothing of theirs rewritten"
        assert node.state()["slurm"] == {"state": "IDLE+DRAIN", "reason": "maintenance: PSU swap"}
        n = node.state()["node"]
        assert (n["unschedulable"], n["taints"]) == (True, theirs)
        assert [(c["type"], c["status"]) for c in n["conditions"]] == [("GPUActionRequired", "True")]

        # A node down for another reason is left as well.
        node.set_slurm("DOWN", "Not responding")
        node.run(url, "slurm")
        assert node.state()["slurm"] == {"state": "DOWN", "reason": "Not responding"}

        # The person ends their work (resume, untaint their gpu-action
        # taint, the cordon and the other taint stay): now the drain and
        # the taint are the script's own.
        node.set_slurm("IDLE", "")
        node.set_node(taints=theirs[:1])
        node.run(url, "slurm")
        node.run(url, "kubernetes")
        assert node.state()["slurm"] == {"state": "IDLE+DRAIN",
                                         "reason": "nvml-exporter: GPU 3 reset_gpu (xid_reset_gpu)"}
        n = node.state()["node"]
        assert n["taints"] == theirs[:1] + [{"key": key, "value": "reset_gpu", "effect": "NoSchedule"}]
        assert n["unschedulable"] is True

        # A person drains the node again on top of ours: the drain is theirs.
        node.set_slurm("IDLE+DRAIN", "maintenance: PSU swap")

        # The reset clears the verdict: only the script's own taint goes;
        # the person's drain, cordon and taint stay.
        sim_control(control, '{ action = "driver-unload" }')
        wait_until(lambda: b"nvml_exporter_nvml_up 0" in http_get(url)[1], 30, "NVML to go away")
        sim_control(control, '{ action = "driver-load" }')
        wait_until(lambda: verdict_of(exporter, "3") == "none", 60, "GPU 3's verdict to clear")
        mark = len(node.state()["calls"])
        assert node.run(url, "slurm").returncode == 0
        assert node.run(url, "kubernetes").returncode == 0
        assert node.state()["slurm"] == {"state": "IDLE+DRAIN", "reason": "maintenance: PSU swap"}
        assert not [c for c in node.updates_since(mark) if c[0] == "scontrol"], "never resumed"
        n = node.state()["node"]
        assert (n["unschedulable"], n["taints"], n["annotations"]) == (True, theirs[:1], {})
    finally:
        exporter.stop()


def test_min_action_none_is_refused(node):
    """Issue 51, D6: `--min-action none` (or NVML_VERDICT_MIN_ACTION=none)
    took every healthy GPU for one that needs work and drained or tainted
    the node; it is refused like a misspelt action, before anything is read
    or changed."""
    url = "http://127.0.0.1:9/metrics"
    for command in ("check", "kubernetes", "device-taints", "slurm"):
        out = node.run(url, "--min-action", "none", command)
        assert out.returncode == 64, (command, out)
        assert "--min-action none would act on every healthy GPU" in out.stderr, out.stderr
    out = subprocess.run(node.argv(url, "slurm"), capture_output=True, text=True, timeout=60,
                         env={**node.env(), "NVML_VERDICT_MIN_ACTION": "none"})
    assert out.returncode == 64 and "restart_app, reset_gpu, reboot, check_hardware, or rma" in out.stderr
    assert node.state()["calls"] == []
    usage = node.run(url, "--help")
    assert usage.returncode == 64 and "none" not in usage.stderr.split("--min-action", 2)[2].split("\n")[0]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """Three real exporters on the simulated driver, one per verdict the
    recipes see: every GPU healthy; GPU 3 at reset_gpu (a GSP timeout, XID
    119); GPU 3 at reboot (fallen off the bus, XID 79)."""
    work = tmp_path_factory.mktemp("verdicts")
    exporters, urls = [], {}
    try:
        for name, xid, action in (("none", None, None), ("reset_gpu", 119, "reset_gpu"),
                                  ("reboot", 79, "reboot")):
            control = work / f"{name}.sock"
            exporter = Exporter(work, "dgx-h100", name=f"exporter-{name}",
                                env={"NVML_SIM_CONTROL": str(control)})
            exporters.append(exporter)
            exporter.wait_ready()
            if xid is not None:
                sim_control(control, f'{{ action = "xid", gpu = 3, code = {xid} }}')
                wait_until(lambda e=exporter, a=action: verdict_of(e, "3") == a, 30, f"GPU 3 at {action}")
            urls[name] = f"http://{exporter.address}/metrics"
        yield urls
    finally:
        for exporter in exporters:
            exporter.stop()


OURS = "nvml-exporter: GPU 3 reset_gpu (xid_reset_gpu)"


def test_an_edited_slurm_reason_is_the_persons(node, verdicts):
    """Issue 51, D5: an administrator's note added to the script's drain
    reason (still starting "nvml-exporter:") was set back by the next run and
    the node resumed after recovery. Ownership is now the exact reason the
    script wrote and recorded."""
    assert node.run(verdicts["reset_gpu"], "slurm").returncode == 0
    assert node.state()["slurm"] == {"state": "IDLE+DRAIN", "reason": OURS}
    edited = f"{OURS} -- RMA ticket 4711, do not resume"
    node.set_slurm("IDLE+DRAIN", edited)
    mark = len(node.state()["calls"])
    for verdict in ("reset_gpu", "reboot", "none", "none"):
        out = node.run(verdicts[verdict], "slurm")
        assert out.returncode == 0, out.stderr
        assert node.state()["slurm"] == {"state": "IDLE+DRAIN", "reason": edited}, verdict
    assert node.updates_since(mark) == [], "never rewritten, never resumed"
    assert "for another reason" in node.run(verdicts["reset_gpu"], "slurm").stdout

    # The person resumes the node; a new fault drains it as the script's own
    # again, and the same text typed back after the record was dropped is
    # not taken for the script's.
    node.set_slurm("IDLE", "")
    node.run(verdicts["none"], "slurm")
    node.set_slurm("IDLE+DRAIN", OURS)
    node.run(verdicts["none"], "slurm")
    assert node.state()["slurm"] == {"state": "IDLE+DRAIN", "reason": OURS}, "a person's drain, same text"
    node.set_slurm("IDLE", "")
    node.run(verdicts["reset_gpu"], "slurm")
    node.run(verdicts["none"], "slurm")
    assert node.state()["slurm"] == {"state": "IDLE", "reason": ""}


def settled(node) -> dict:
    """What a run leaves on the node, without the call log and heartbeats."""
    s = node.state()
    conditions = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in s["node"]["conditions"]]
    return {"taints": s["node"]["taints"], "annotations": s["node"].get("annotations", {}),
            "conditions": conditions, "slurm": s["slurm"]}


@pytest.mark.parametrize("mode", ["kubernetes", "slurm"])
def test_every_failed_call_is_finished_by_the_next_run(node, verdicts, mode):
    """Issue 51, D4: one failed `kubectl taint` while the verdict rose from
    reset_gpu to rma parted the taint from its mark for good: the taint was
    "set by someone else" from then on and stayed after recovery. Here each
    call of a fault, an escalation and a recovery fails in turn (an API
    timeout); the run fails, and the next run with the same verdict leaves
    exactly what a run without the failure leaves."""
    steps = ("reset_gpu", "reboot", "none")
    clean = []
    for verdict in steps:
        assert node.run(verdicts[verdict], mode).returncode == 0
        clean.append(settled(node))
    calls = len(node.state()["calls"])
    assert clean[-1]["taints"] == [] and clean[-1]["slurm"] == {"state": "IDLE", "reason": ""}

    for nth in range(1, calls + 1):
        node.fail("*", nth)
        failed = 0
        for verdict, expected in zip(steps, clean):
            out = node.run(verdicts[verdict], mode)
            if out.returncode != 0:
                failed += 1
                assert "unable to return a response" in out.stderr, out.stderr
                out = node.run(verdicts[verdict], mode)
                assert out.returncode == 0, (nth, verdict, out.stderr)
            assert settled(node) == expected, (nth, verdict)
            assert "someone else" not in out.stdout, (nth, verdict, out.stdout)
        assert failed == 1, f"call {nth} failed once"


def test_overlapping_runs_leave_what_one_run_leaves(node, verdicts):
    """Issue 51, D4: runs that overlap (a timer, a manual run, a rollout)
    left the script's taint without its mark in 5 of 10 rounds, never to be
    lifted. Ten runs started together leave what one leaves; runs of a
    fault and of the recovery started together, then one more run after
    recovery, leave the node clean."""
    for mode in ("kubernetes", "slurm"):
        assert node.run(verdicts["reset_gpu"], mode).returncode == 0
    one = settled(node)
    node.set_node(taints=[], annotations={}, conditions=[])
    node.set_slurm("IDLE", "")
    (node.state_dir / "slurm-reason").unlink(missing_ok=True)

    runs = [node.start(verdicts["reset_gpu"], mode) for mode in ("kubernetes", "slurm") * 5]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    assert settled(node) == one
    assert sum(1 for c in node.state()["calls"] if c[1] == "taint") == 2, "one taint, as one run"

    for round_ in range(3):
        runs = [node.start(verdicts[v], mode) for v in ("reboot", "none", "reset_gpu", "none")
                for mode in ("kubernetes", "slurm")]
        for run in runs:
            _, err = run.communicate(timeout=300)
            assert run.returncode == 0, err
        for mode in ("kubernetes", "slurm"):
            out = node.run(verdicts["none"], mode)
            assert out.returncode == 0 and "someone else" not in out.stdout, out
        after = settled(node)
        assert (after["taints"], after["annotations"], after["slurm"]) == \
            ([], {}, {"state": "IDLE", "reason": ""}), round_


def test_a_forged_mark_is_not_the_scripts(node, verdicts):
    """A taint whose mark carries another token (copied from another node,
    or written by hand) or names another value is a person's."""
    node.run(verdicts["none"], "kubernetes")  # makes this node's token
    key, mark = "nvml-exporter/gpu-action", "nvml-exporter/gpu-action-taint"
    for taint, annotation in (("reset_gpu", "reset_gpu/0123456789abcdef"), ("reset_gpu", "reset_gpu"),
                              ("rma", f"reset_gpu/{node.token()}")):
        theirs = [{"key": key, "value": taint, "effect": "NoSchedule"}]
        node.set_node(taints=theirs, annotations={mark: annotation})
        for verdict in ("reboot", "none"):
            out = node.run(verdicts[verdict], "kubernetes")
            assert out.returncode == 0 and "set by someone else" in out.stdout, out
            assert node.state()["node"]["taints"] == theirs, (annotation, verdict)


NVSENTINEL_POLICIES = ROOT / "deploy" / "verdict" / "nvsentinel-kubernetes-object-monitor.yaml"
# NVIDIA/NVSentinel, health-monitors/kubernetes-object-monitor/pkg/config/types.go:
# the fields of a Policy and of its parts, and the names of the
# RecommendedAction enum of data-models/protobufs/health_event.proto.
NVSENTINEL_POLICY_FIELDS = {"name": str, "enabled": bool, "resource": dict, "predicate": dict,
                            "nodeAssociation": dict, "healthEvent": dict}
NVSENTINEL_PART_FIELDS = {
    "resource": {"group": str, "version": str, "kind": str},
    "predicate": {"expression": str},
    "nodeAssociation": {"expression": str},
    "healthEvent": {"componentClass": str, "isFatal": bool, "message": str, "recommendedAction": str,
                    "errorCode": list, "processingStrategy": str},
}
NVSENTINEL_ACTIONS = {"NONE", "COMPONENT_RESET", "CONTACT_SUPPORT", "RUN_FIELDDIAG", "RESTART_VM", "RESTART_BM",
                      "REPLACE_VM", "RUN_DCGMEUD", "RESTART_APP", "UNKNOWN"}
# Ours to NVSentinel's: the mapping docs/operations.md documents.
NVSENTINEL_MAPPING = {"restart_app": ("RESTART_APP", False), "reset_gpu": ("COMPONENT_RESET", True),
                      "reboot": ("RESTART_BM", True), "check_hardware": ("RUN_FIELDDIAG", True),
                      "rma": ("CONTACT_SUPPORT", True)}


def nvsentinel_policies() -> list[dict]:
    import yaml

    policies = yaml.safe_load(NVSENTINEL_POLICIES.read_text())["kubernetes-object-monitor"]["policies"]
    for policy in policies:
        assert set(policy) <= set(NVSENTINEL_POLICY_FIELDS), policy["name"]
        for key, kind in NVSENTINEL_POLICY_FIELDS.items():
            assert key == "nodeAssociation" or isinstance(policy[key], kind), (policy["name"], key)
        for part, fields in NVSENTINEL_PART_FIELDS.items():
            if part in policy:
                assert set(policy[part]) <= set(fields), (policy["name"], part)
                for key, value in policy[part].items():
                    assert isinstance(value, fields[key]), (policy["name"], part, key)
        assert policy["healthEvent"]["recommendedAction"] in NVSENTINEL_ACTIONS
    return policies


def matching_policies(policies: list[dict], node: dict) -> list[str]:
    """The policies whose CEL predicate matches the Node, as NVSentinel's
    monitor evaluates them (`resource` is the watched object)."""
    try:
        import cel
    except ImportError:
        pytest.fail("common-expression-language is not installed: run scripts/install-test-deps")

    return [p["name"] for p in policies if p["enabled"]
            and cel.evaluate(p["predicate"]["expression"], {"resource": node}) is True]


def test_the_nvsentinel_policies_are_of_its_format_and_map_each_action():
    policies = nvsentinel_policies()
    assert len({p["name"] for p in policies}) == len(policies) == len(REASONS)
    for action, reason in REASONS.items():
        (policy,) = [p for p in policies if p["healthEvent"]["errorCode"] == [reason]]
        assert policy["resource"] == {"group": "", "version": "v1", "kind": "Node"}
        assert "nodeAssociation" not in policy, "a Node's event is the node's own"
        event = policy["healthEvent"]
        assert event["componentClass"] == "GPU"
        assert (event["recommendedAction"], event["isFatal"]) == NVSENTINEL_MAPPING[action], action
        assert f"({action})" in event["message"]


def test_each_remediator_sees_the_action_in_the_condition_reason(node, verdicts):
    """Issue 47, item 3: node-problem-detector's per-action conditions and
    the `kubernetes` mode's reason name the node's worst action, and the
    shipped NVSentinel policies, evaluated in CEL on the Node those
    conditions make, match exactly the policy of that action (none when
    nothing is needed)."""
    cfg = json.loads((ROOT / "deploy" / "verdict" / "node-problem-detector.json").read_text())
    policies = nvsentinel_policies()
    by_reason = {p["healthEvent"]["errorCode"][0]: p["name"] for p in policies}
    for verdict in ("reset_gpu", "reboot", "none"):
        # node-problem-detector: each rule's run, its exit status read as
        # NPD reads it (0 OK: condition False, 1 NonOK: True with the rule's reason).
        npd = []
        for rule in cfg["rules"]:
            out = node.run(verdicts[verdict], *rule["args"])
            assert out.returncode in (0, 1), out
            npd.append({"type": rule["condition"], "status": "True" if out.returncode else "False",
                        "reason": rule["reason"] if out.returncode else "No" + rule["reason"]})
            if out.returncode:
                assert out.stdout.strip() == f"GPU 3 {verdict} (xid_{'reset_gpu' if verdict == 'reset_gpu' else 'restart_bm'})"
        true = {c["type"] for c in npd if c["status"] == "True"}
        expected = {"GPUActionRequired", REASONS[verdict]} if verdict != "none" else set()
        assert true == expected, verdict

        # The kubernetes mode.
        assert node.run(verdicts[verdict], "kubernetes").returncode == 0
        (cond,) = node.state()["node"]["conditions"]
        assert cond["reason"] == REASONS.get(verdict, "NoGPUActionRequired"), cond

        for conditions in (npd, [cond]):
            match = matching_policies(policies, {"metadata": {"name": NODE}, "status": {"conditions": conditions}})
            assert match == ([by_reason[REASONS[verdict]]] if verdict != "none" else []), (verdict, conditions)

    out = node.run(verdicts["reset_gpu"], "--only", "reboot", "check")
    assert (out.returncode, out.stdout.strip()) == (0, "no GPU's worst action is reboot")
    out = node.run(verdicts["reset_gpu"], "--only", "restart_app", "check")
    assert (out.returncode, out.stdout.strip()) == (0, "no GPU's worst action is restart_app (the worst is reset_gpu)")
    assert node.run(verdicts["reset_gpu"], "--only", "reboot", "slurm").returncode == 64, "--only is check's"
    assert node.run(verdicts["reset_gpu"], "--only", "explode", "check").returncode == 64
