"""The recipes of docs/operations.md ("What to do with a GPU now") run for
real: deploy/verdict/nvml-gpu-verdict against the real exporter on the
simulated driver, with stand-ins for kubectl and scontrol on PATH that keep
a node's taints, conditions, state and drain reason the way the real tools
would. A GSP timeout on one GPU taints and drains the node; an application
fault on another does not; the driver reload that resets the GPUs untaints
and resumes it; a drain someone else set stays; an exporter that cannot be
read changes nothing."""

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
import json, sys
state_path, argv = sys.argv[1], sys.argv[2:]
state = json.load(open(state_path))
state["calls"].append(["kubectl", *argv])
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
json.dump(state, open(state_path, "w"))
'''

# scontrol show node / update NodeName=... State=DRAIN|RESUME Reason=...,
# keeping one State (a base state plus flags) and one Reason per node as
# slurmctld does: a DRAIN replaces the reason, a RESUME lifts DRAIN and DOWN
# and clears it, whoever set them.
FAKE_SCONTROL = r'''
import json, sys
state_path, argv = sys.argv[1], sys.argv[2:]
state = json.load(open(state_path))
state["calls"].append(["scontrol", *argv])
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
json.dump(state, open(state_path, "w"))
'''


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
        def run(self, url: str, *args: str) -> subprocess.CompletedProcess:
            env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
            # Debian's /bin/sh is dash: the script is POSIX sh, not bash.
            return subprocess.run([shutil.which("dash") or "sh", str(SCRIPT), "--url", url,
                                   "--node", NODE, *args], capture_output=True, text=True, env=env,
                                  timeout=60)

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
        assert n["annotations"] == {"nvml-exporter/gpu-action-taint": "reset_gpu"}, "the taint is marked ours"
        (cond,) = n["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("GPUActionRequired", "True", "reset_gpu")
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
    for command in ("check", "kubernetes", "slurm"):
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


def test_the_node_problem_detector_config_runs_the_check():
    cfg = json.loads((ROOT / "deploy" / "verdict" / "node-problem-detector.json").read_text())
    assert cfg["plugin"] == "custom"
    (condition,) = cfg["conditions"]
    (rule,) = cfg["rules"]
    assert rule["condition"] == condition["type"] == "GPUActionRequired"
    assert rule["type"] == "permanent"
    assert Path(rule["path"]).name == SCRIPT.name and rule["args"] == ["check"]


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
