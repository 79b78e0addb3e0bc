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

# kubectl as the script uses it: get the node's taint value, taint, untaint,
# patch the status conditions (merged by type, as a strategic merge does).
FAKE_KUBECTL = r'''
import json, sys
state_path, argv = sys.argv[1], sys.argv[2:]
state = json.load(open(state_path))
state["calls"].append(["kubectl", *argv])
node = state["node"]
if argv[:2] == ["get", "node"]:
    assert argv[2] == node["name"], argv
    key = argv[4].split('@.key=="')[1].split('"')[0]
    print(" ".join(t["value"] for t in node["taints"] if t["key"] == key), end="")
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
elif argv[:2] == ["patch", "node"]:
    assert "--subresource=status" in argv and "--type=strategic" in argv, argv
    patch = json.loads(argv[argv.index("-p") + 1])
    for c in patch["status"]["conditions"]:
        node["conditions"] = [x for x in node["conditions"] if x["type"] != c["type"]] + [c]
else:
    sys.exit(f"unexpected kubectl {argv}")
json.dump(state, open(state_path, "w"))
'''

# scontrol show node / update NodeName=... State=DRAIN|RESUME Reason=...
FAKE_SCONTROL = r'''
import json, sys
state_path, argv = sys.argv[1], sys.argv[2:]
state = json.load(open(state_path))
state["calls"].append(["scontrol", *argv])
node = state["slurm"]
if argv[:2] == ["show", "node"]:
    reason = f" Reason={node['reason']} [root@2026-11-24T01:00:00]" if node["reason"] else ""
    print(f"NodeName={argv[2]} Arch=x86_64 CoresPerSocket=48\n   State={node['state']} ThreadsPerCore=2\n  {reason}")
elif argv[0] == "update":
    args = dict(a.split("=", 1) for a in argv[1:])
    if args["State"] == "DRAIN":
        node["state"], node["reason"] = "IDLE+DRAIN", args["Reason"]
    elif args["State"] == "RESUME":
        node["state"], node["reason"] = "IDLE", ""
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
