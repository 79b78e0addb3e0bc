"""Offline validation of everything under deploy/ and the Dockerfile.

The Helm chart is rendered and linted by Helm's own Go code (helm-python-sdk);
the core kinds are checked by kubernetes-validate --strict against a pinned
Kubernetes version; ServiceMonitor and PrometheusRule by the prometheus-operator
CRD schemas and types (npm, tests/deploy/validate-monitoring.mjs); the unit by
systemd-analyze verify; the Dockerfile by hadolint. Every validator also gets a
broken input once, so a validator that accepts anything fails the suite.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "kubernetes" / "nvml-exporter"
UNIT = REPO / "deploy" / "systemd" / "nvml-exporter.service"
NO_KERNEL_LOG_DROP_IN = REPO / "deploy" / "systemd" / "no-kernel-log.conf"
ENV_FILE = REPO / "deploy" / "systemd" / "nvml-exporter.env"
# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the
# newest the validator knows; both must accept every core object.
KUBERNETES_VERSIONS = ("1.25.0", "1.37.0")
CORE_KINDS = {"DaemonSet", "Service", "ServiceAccount", "ConfigMap"}
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule"}
# Rendered only when pod attribution reads pod labels or ResourceSlices.
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding"}


def venv_tool(name: str) -> str:
    """A tool installed by tests/requirements.txt, next to this Python."""
    for candidate in (Path(sys.executable).parent / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail(f"{name} is not installed: run scripts/install-test-deps (tests/requirements.txt)")


def helm():
    try:
        import helm_python
    except ImportError:
        pytest.fail("helm-python-sdk is not installed: run scripts/install-test-deps")
    return helm_python


def render(values: dict | None = None, namespace: str = "monitoring") -> list[dict]:
    """The chart's manifests as objects, rendered by Helm's template engine."""
    with helm().Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name="nvml-exporter", namespace=namespace, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if not path.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


def by_kind(objects: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for obj in objects:
        assert obj["kind"] not in out, f"two {obj['kind']} objects rendered"
        out[obj["kind"]] = obj
    return out


def kubernetes_validate(objects: list[dict], version: str, tmp_path: Path) -> subprocess.CompletedProcess:
    files = []
    for i, obj in enumerate(objects):
        f = tmp_path / f"{i:02d}-{obj['kind']}-{version}.yaml"
        f.write_text(yaml.safe_dump(obj, sort_keys=False))
        files.append(str(f))
    return subprocess.run(
        [venv_tool("kubernetes-validate"), "--strict", "-k", version, *files],
        capture_output=True,
        text=True,
        timeout=120,
    )


def validate_monitoring(objects: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: scripts/install-test-deps needs it for tests/package.json")
    if not (REPO / "tests" / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir():
        pytest.fail("tests/node_modules lacks @kubernetes-models/prometheus-operator: run scripts/install-test-deps")
    f = tmp_path / "monitoring.json"
    f.write_text(json.dumps(objects))
    return subprocess.run(
        [node, str(REPO / "tests" / "deploy" / "validate-monitoring.mjs"), str(f)],
        capture_output=True,
        text=True,
        timeout=180,
    )


# Value sets that exercise every branch of the templates.
VALUE_SETS = {
    "defaults": None,
    # Without the kernel log (on by default since issue 36), whose
    # privileges test_kernel_log_mounts_the_device_read_only_and_adds_only_syslog checks.
    "pod-attribution": {"podAttribution": {"enabled": True}, "kernelLog": {"enabled": False}},
    "dra": {"podAttribution": {"enabled": True, "dra": {"enabled": True, "resourceSlices": True},
                               "podLabels": ["team", "app.kubernetes.io/*"]}},
    "dra-labels-from-api-server": {"podAttribution": {"enabled": True, "podLabels": ["team"],
                                                      "podLabelsSource": "api-server"},
                                   "workloads": {"enabled": True}},
    "mig-monitor": {"migMonitor": {"enabled": True}, "kernelLog": {"enabled": False}},
    # Issue 36: the kernel log is read by default; this is the locked-down
    # opt-out.
    "no-kernel-log": {"kernelLog": {"enabled": False}},
    "kernel-log": {"kernelLog": {"enabled": True}},
    "kernel-log-unprivileged": {"kernelLog": {"enabled": True, "privileged": False},
                                "migMonitor": {"enabled": True}},
    "workloads": {"workloads": {"enabled": True, "slurmMappingDir": "/run/dcgm-job-map"},
                  "kernelLog": {"enabled": False}},
    # What replaces a dcgm-exporter deployment (docs/migrating-from-dcgm-exporter.md).
    "dcgm-compat": {
        "podAttribution": {"enabled": True},
        "dcgmCompat": {"generation": "4.9", "only": True, "exportedPodLabels": True,
                       "counters": "# dcgm-exporter's -f file\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
                                   "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Graphics engine activity.\n"
                                   "DCGM_FI_DRIVER_VERSION, label, Driver version\n"},
        "selection": "version: 1\nintervals:\n  ecc: 60s\ndcgm:\n  counters_file: counters.csv\n",
    },
    "everything-on": {
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "simulate": "dgx-h100",
        "extraArgs": ["--no-collector.nvlink"],
        "extraEnv": [{"name": "NVML_EXPORTER_COLLECT_STUCK_DEADLINE", "value": "20s"}],
        "webConfig": {"secretName": "nvml-exporter-web", "scheme": "https"},
        "imagePullSecrets": [{"name": "registry"}],
        "podAnnotations": {"example.com/team": "gpu"},
        "serviceMonitor": {
            "labels": {"release": "kube-prometheus-stack"},
            "tlsConfig": {"ca": {"secret": {"name": "nvml-exporter-ca", "key": "ca.crt"}}, "serverName": "nvml-exporter"},
            "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_host_ip"], "targetLabel": "host_ip"}],
            "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}],
        },
        "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"annotations": {"grafana_folder": "GPUs"}, "namespace": "grafana"},
    },
}


def test_helm_lint_is_clean():
    report = helm().lint(str(CHART), strict=True, kube_version="v1.30.0")
    assert report["errors"] == [], report
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == [], serious


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_objects_pass_kubernetes_validate_strict(values, version, tmp_path):
    objects = [o for o in render(values) if o["kind"] in CORE_KINDS | RBAC_KINDS]
    assert CORE_KINDS <= {o["kind"] for o in objects}
    result = kubernetes_validate(objects, version, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_validate_rejects_an_unknown_field(tmp_path):
    daemonset = by_kind(render())["DaemonSet"]
    broken = copy.deepcopy(daemonset)
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    result = kubernetes_validate([broken], KUBERNETES_VERSIONS[-1], tmp_path)
    assert result.returncode != 0, "kubernetes-validate --strict accepted a misspelt field"


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_monitoring_objects_pass_prometheus_operator_schemas(values, tmp_path):
    objects = [o for o in render(values) if o["kind"] in MONITORING_KINDS]
    assert {o["kind"] for o in objects} == MONITORING_KINDS
    result = validate_monitoring(objects, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_monitoring_validator_rejects_bad_objects(tmp_path):
    objects = by_kind(render())
    misspelt = copy.deepcopy(objects["ServiceMonitor"])
    misspelt["spec"]["endpoints"][0]["intervall"] = "15s"
    bad_duration = copy.deepcopy(objects["PrometheusRule"])
    bad_duration["spec"]["groups"] = [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0", "for": "5 minutes"}]}]
    result = validate_monitoring([misspelt, bad_duration], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "intervall" in result.stdout
    assert "for must match pattern" in result.stdout


def test_daemonset_runs_locked_down_on_gpu_nodes():
    # Without the kernel log (on by default since issue 36, which needs
    # root: test_kernel_log_mounts_the_device_read_only_and_adds_only_syslog).
    ds = by_kind(render(VALUE_SETS["no-kernel-log"]))["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # Issue 16: every taint, NoExecute remediation taints included.
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert re.fullmatch(r"\d+%", ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]), \
        "maxUnavailable must be a percentage: one node at a time is days on a large fleet"
    assert "runtimeClassName" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    # One host path, the state directory (issue 28: kept across rollouts),
    # read-write for the exporter alone; given to its user by an init
    # container holding CHOWN and nothing else.
    assert [v for v in pod["volumes"] if "hostPath" in v] == [
        {"name": "state", "hostPath": {"path": "/var/lib/nvml-exporter", "type": "DirectoryOrCreate"}}]
    (init,) = pod["initContainers"]
    assert init["command"] == ["chown", "-R", "-h", "65532:65532", "/var/lib/nvml-exporter"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert init["volumeMounts"] == [{"name": "state", "mountPath": "/var/lib/nvml-exporter"}]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    assert container["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9445, "protocol": "TCP"}]
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVML_EXPORTER_WEB_LISTEN_ADDRESS"] == ":9445"
    assert env["NVML_EXPORTER_STATE_PATH"] == "/var/lib/nvml-exporter/state.json"
    assert env["NVML_EXPORTER_COLLECTOR_XID_KMSG"] == "false", "off as asked: the exporter's default is on"
    assert {"name": "state", "mountPath": "/var/lib/nvml-exporter"} in container["volumeMounts"]
    assert "args" not in container


def test_state_is_kept_on_the_node_or_nowhere():
    # A root pod owns the directory already: no init container.
    pod = by_kind(render(VALUE_SETS["kernel-log"]))["DaemonSet"]["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert {"name": "state", "hostPath": {"path": "/var/lib/nvml-exporter", "type": "DirectoryOrCreate"}} \
        in pod["volumes"]
    # Off: no host path, and the exporter told to keep nothing.
    # (The kernel log, on by default since issue 36, is a host path of its
    # own: switched off here.)
    pod = by_kind(render({"state": {"enabled": False}, "kernelLog": {"enabled": False}}))["DaemonSet"]["spec"][
        "template"]["spec"]
    assert "initContainers" not in pod
    assert all("hostPath" not in v for v in pod["volumes"])
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["NVML_EXPORTER_STATE_PATH"] == ""


def test_options_reach_the_pod():
    objects = by_kind(render(VALUE_SETS["everything-on"]))
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia"
    assert container["args"] == ["--simulate=dgx-h100", "--no-collector.nvlink"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVML_EXPORTER_WEB_CONFIG_FILE"] == "/etc/nvml-exporter/web-config.yml"
    assert env["NVML_EXPORTER_COLLECT_STUCK_DEADLINE"] == "20s"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "web-config", "secret": {"secretName": "nvml-exporter-web"}} in pod["volumes"]
    assert objects["ServiceMonitor"]["spec"]["endpoints"][0]["scheme"] == "https"
    assert objects["ServiceMonitor"]["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == "nvml-exporter"
    assert objects["ServiceMonitor"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert objects["ConfigMap"]["metadata"]["namespace"] == "grafana"


def test_pod_attribution_mounts_only_the_kubelet_socket_read_only():
    pod = by_kind(render(VALUE_SETS["pod-attribution"]))["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVML_EXPORTER_KUBERNETES_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}} \
        in pod["volumes"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    # Root for the socket, and nothing else: no capability, no escalation.
    assert pod["securityContext"]["runAsUser"] == 0
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True


def test_dra_mounts_the_cdi_specs_read_only_and_renders_only_the_rbac_it_needs():
    objects = render(VALUE_SETS["dra"])
    kinds = by_kind(objects)
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    # The CDI specs under --path.rootfs, read-only; created empty where a
    # node has none, so the pod starts on every GPU node.
    assert env["NVML_EXPORTER_PATH_ROOTFS"] == "/host"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for name, path in (("cdi-0", "/var/run/cdi"), ("cdi-1", "/etc/cdi")):
        assert mounts[name] == {"name": name, "mountPath": f"/host{path}", "readOnly": True}
        assert volumes[name] == {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
    # Pod labels from this node's kubelet, ResourceSlices from the API server.
    assert env["NVML_EXPORTER_KUBERNETES_POD_LABELS"] == "team,app.kubernetes.io/*"
    assert env["NVML_EXPORTER_KUBERNETES_POD_LABELS_SOURCE"] == "kubelet"
    assert env["NVML_EXPORTER_KUBERNETES_KUBELET_URL"] == "https://$(NODE_IP):10250"
    assert env["NODE_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["NVML_EXPORTER_KUBERNETES_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVML_EXPORTER_KUBERNETES_RESOURCE_SLICES"] == "true"
    names = [e["name"] for e in container["env"]]
    assert names.index("NODE_IP") < names.index("NVML_EXPORTER_KUBERNETES_KUBELET_URL"), \
        "$(NODE_IP) expands only after its definition"
    assert pod["automountServiceAccountToken"] is True
    # Read-only, and only what is read.
    assert kinds["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes/pods"], "verbs": ["get"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
    ]
    binding = kinds["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == kinds["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": kinds["ServiceAccount"]["metadata"]["name"],
                                    "namespace": "monitoring"}]
    # Pod labels from the API server: the pods list instead, no kubelet URL.
    other = by_kind(render(VALUE_SETS["dra-labels-from-api-server"]))
    assert other["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    env = {e["name"]: e for e in other["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NVML_EXPORTER_KUBERNETES_POD_LABELS_SOURCE"]["value"] == "api-server"
    assert "NVML_EXPORTER_KUBERNETES_KUBELET_URL" not in env
    # Pod attribution alone reads neither: no token, no RBAC, no CDI mounts.
    plain = render(VALUE_SETS["pod-attribution"])
    assert not {o["kind"] for o in plain} & RBAC_KINDS
    pod = by_kind(plain)["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not any(v["name"].startswith("cdi-") for v in pod["volumes"])
    assert not {o["kind"] for o in render()} & RBAC_KINDS
    with pytest.raises(Exception, match="kubelet or api-server"):
        render({"podAttribution": {"enabled": True, "podLabels": ["team"], "podLabelsSource": "apiserver"}})


def test_workloads_add_host_pids_and_read_only_host_files_only_when_on():
    pod = by_kind(render(VALUE_SETS["workloads"]))["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVML_EXPORTER_WORKLOADS"] == "true"
    assert env["NVML_EXPORTER_PATH_ROOTFS"] == "/host"
    assert env["NVML_EXPORTER_WORKLOADS_SLURM_MAPPING_DIR"] == "/host/slurm-mapping"
    assert pod["hostPID"] is True
    assert {"name": "host-passwd", "hostPath": {"path": "/etc/passwd", "type": "File"}} in pod["volumes"]
    assert {"name": "slurm-mapping", "hostPath": {"path": "/run/dcgm-job-map", "type": "Directory"}} \
        in pod["volumes"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host-passwd"] == {"name": "host-passwd", "mountPath": "/host/etc/passwd", "readOnly": True}
    # Pods' names for their processes' measured use: the log links' names.
    assert {"name": "container-logs", "hostPath": {"path": "/var/log/containers", "type": "Directory"}} \
        in pod["volumes"]
    assert mounts["container-logs"] == {"name": "container-logs",
                                        "mountPath": "/host/var/log/containers", "readOnly": True}
    assert mounts["slurm-mapping"]["readOnly"] is True
    # Still no root, no capability, no escalation: /proc/<pid>/cgroup and
    # status are world-readable.
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    # Off (the default): none of it.
    default = by_kind(render())["DaemonSet"]["spec"]["template"]["spec"]
    assert "hostPID" not in default
    assert not any(e["name"].startswith("NVML_EXPORTER_WORKLOADS") for e in default["containers"][0]["env"])


def test_mig_monitor_asks_for_the_capability_device_and_nothing_more():
    pod = by_kind(render(VALUE_SETS["mig-monitor"]))["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert "NVIDIA_MIG_CONFIG_DEVICES" not in env
    # Still a non-root user that cannot escalate: SYS_ADMIN is in the
    # bounding set only, for the container toolkit's check.
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert [v["name"] for v in pod.get("volumes", []) if "hostPath" in v] == ["state"]
    # Off by default.
    default = by_kind(render())["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in default["env"]}


def test_kernel_log_mounts_the_device_read_only_and_adds_only_syslog():
    """Issue 23: --collector.xid.kmsg on /dev/kmsg, as root (CAP_SYSLOG is
    effective for UID 0 only), SYSLOG the one added capability; privileged
    by default because the device cgroup admits /dev/kmsg to privileged
    containers only, not where the runtime admits it otherwise."""
    for values, privileged in ((VALUE_SETS["kernel-log"], True), (VALUE_SETS["kernel-log-unprivileged"], False)):
        pod = by_kind(render(values))["DaemonSet"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NVML_EXPORTER_COLLECTOR_XID_KMSG"] == "true"
        assert env["NVML_EXPORTER_PATH_KMSG"] == "/dev/kmsg"
        assert {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in pod["volumes"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["kmsg"] == {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True}
        assert pod["securityContext"]["runAsUser"] == 0
        sc = container["securityContext"]
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert "SYSLOG" in sc["capabilities"]["add"]
        assert set(sc["capabilities"]["add"]) <= {"SYSLOG", "SYS_ADMIN"}
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["privileged"] is privileged
        # Kubernetes refuses privileged with allowPrivilegeEscalation false.
        assert sc.get("allowPrivilegeEscalation") is (None if privileged else False)
        assert not pod.get("hostPID") and not pod.get("hostNetwork")
    # Issue 36: on by default, privileged.
    default = by_kind(render())["DaemonSet"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in default["containers"][0]["env"]}
    assert env["NVML_EXPORTER_COLLECTOR_XID_KMSG"] == "true"
    assert default["containers"][0]["securityContext"]["privileged"] is True


# Pod Security Standards, the levels Pod Security admission enforces, as
# published at https://kubernetes.io/docs/concepts/security/pod-security-standards/
# (each control by the name the page gives it). A pod passes a level when it
# breaks none of its controls; restricted includes every baseline control.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
BASELINE_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def pod_security_violations(template: dict) -> dict[str, set[str]]:
    """The controls of each level a pod template breaks."""
    meta, pod = template.get("metadata", {}), template["spec"]
    containers = pod.get("containers", []) + pod.get("initContainers", []) + pod.get("ephemeralContainers", [])
    psc = pod.get("securityContext", {})
    scs = [c.get("securityContext", {}) for c in containers]
    baseline, restricted = set(), set()
    if any(x.get("windowsOptions", {}).get("hostProcess") for x in [psc, *scs]):
        baseline.add("HostProcess")
    if any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        baseline.add("Host Namespaces")
    if any(sc.get("privileged") for sc in scs):
        baseline.add("Privileged Containers")
    if any(set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES for sc in scs):
        baseline.add("Capabilities")
    if any("hostPath" in v for v in pod.get("volumes", [])):
        baseline.add("HostPath Volumes")
    if any(port.get("hostPort") for c in containers for port in c.get("ports", [])):
        baseline.add("Host Ports")
    apparmor = [x.get("appArmorProfile", {}).get("type") for x in [psc, *scs]]
    annotations = [v for k, v in meta.get("annotations", {}).items()
                   if k.startswith("container.apparmor.security.beta.kubernetes.io/")]
    if any(t not in (None, "RuntimeDefault", "Localhost") for t in apparmor) or \
            any(v != "runtime/default" and not v.startswith("localhost/") for v in annotations):
        baseline.add("AppArmor")
    for x in [psc, *scs]:
        se = x.get("seLinuxOptions", {})
        if se.get("type", "") not in BASELINE_SELINUX_TYPES or se.get("user") or se.get("role"):
            baseline.add("SELinux")
    if any(sc.get("procMount", "Default") != "Default" for sc in scs):
        baseline.add("/proc Mount Type")
    if any(x.get("seccompProfile", {}).get("type") == "Unconfined" for x in [psc, *scs]):
        baseline.add("Seccomp")
    if any(s["name"] not in SAFE_SYSCTLS for s in psc.get("sysctls", [])):
        baseline.add("Sysctls")

    if any(set(v) - {"name"} - RESTRICTED_VOLUMES for v in pod.get("volumes", [])):
        restricted.add("Volume Types")
    if any(sc.get("allowPrivilegeEscalation") is not False for sc in scs):
        restricted.add("Privilege Escalation")
    if any(sc.get("runAsNonRoot") is False for sc in scs) or \
            not (psc.get("runAsNonRoot") is True or all(sc.get("runAsNonRoot") is True for sc in scs)):
        restricted.add("Running as Non-root")
    if any(x.get("runAsUser") == 0 for x in [psc, *scs]):
        restricted.add("Running as Non-root user")
    seccomp_ok = ("RuntimeDefault", "Localhost")
    if any(sc.get("seccompProfile", {}).get("type", "RuntimeDefault") not in seccomp_ok for sc in scs) or not (
            psc.get("seccompProfile", {}).get("type") in seccomp_ok
            or all(sc.get("seccompProfile", {}).get("type") in seccomp_ok for sc in scs)):
        restricted.add("Seccomp")
    if any("ALL" not in sc.get("capabilities", {}).get("drop", [])
           or set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"} for sc in scs):
        restricted.add("Capabilities")
    return {"baseline": baseline, "restricted": baseline | restricted}


def pod_security_level(template: dict) -> tuple[str, set[str]]:
    """The strictest level the pod passes, and the controls of the next
    stricter level that keep it from that one (empty for restricted)."""
    broken = pod_security_violations(template)
    if broken["baseline"]:
        return "privileged", broken["baseline"]
    if broken["restricted"]:
        return "baseline", broken["restricted"]
    return "restricted", set()


def _restricted_pod() -> dict:
    return {"metadata": {}, "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "tmp", "emptyDir": {}}]}}


# One change of a restricted pod per control, and the level it falls to:
# the checker above must tell each one, or it proves nothing about the chart.
POD_SECURITY_CASES = [
    (lambda p: p["spec"].update(hostPID=True), "privileged", "Host Namespaces"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True), "privileged",
     "Privileged Containers"),
    (lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["SYSLOG"]),
     "privileged", "Capabilities"),
    (lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "privileged",
     "HostPath Volumes"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 1, "hostPort": 1}]), "privileged",
     "Host Ports"),
    (lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}), "privileged",
     "Seccomp"),
    (lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"type": "spc_t"}), "privileged", "SELinux"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(procMount="Unmasked"), "privileged",
     "/proc Mount Type"),
    (lambda p: p["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
     "privileged", "Sysctls"),
    (lambda p: p["metadata"].update(annotations={"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
     "privileged", "AppArmor"),
    (lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}), "baseline",
     "Volume Types"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"), "baseline",
     "Privilege Escalation"),
    (lambda p: p["spec"]["securityContext"].update(runAsNonRoot=False), "baseline", "Running as Non-root"),
    (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "baseline", "Running as Non-root user"),
    (lambda p: p["spec"]["securityContext"].pop("seccompProfile"), "baseline", "Seccomp"),
    (lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["CHOWN"]), "baseline",
     "Capabilities"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(capabilities={}), "baseline", "Capabilities"),
]


@pytest.mark.parametrize("change,level,control", POD_SECURITY_CASES,
                         ids=[f"{c[1]}-{c[2]}" for c in POD_SECURITY_CASES])
def test_the_pod_security_checks_tell_each_control(change, level, control):
    assert pod_security_level(_restricted_pod()) == ("restricted", set())
    pod = _restricted_pod()
    change(pod)
    assert pod_security_level(pod) == (level, {control})


def pod_security_table() -> list[tuple[dict, str, set[str], str]]:
    """deploy/README.md's "Pod Security" table: (values, level, controls
    that keep it from the next level, the row's settings as written)."""
    text = (REPO / "deploy" / "README.md").read_text()
    section = text.split("#### Pod Security\n", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("setting", "---") or set(cells[0]) <= {"-"}:
            continue
        values: dict = {}
        for setting in re.findall(r"`([^`=]+)=([^`]+)`", cells[0]):
            node = values
            *parents, leaf = setting[0].split(".")
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = yaml.safe_load(setting[1])
        level = re.fullmatch(r"`(\w+)`", cells[1])[1]
        controls = set() if cells[2] == "none" else {c.strip() for c in cells[2].split(",")}
        rows.append((values, level, controls, cells[0]))
    return rows


def test_each_setting_passes_the_pod_security_level_its_docs_name():
    """Issue 51, D2: the default pod was privileged and root while README
    and deploy/README.md said non-root with no capabilities, and no document
    named the Pod Security level (a namespace enforcing baseline rejects
    every pod while helm install succeeds). deploy/README.md's table names
    the level of the default and of each switch, and the controls that keep
    it from the next level; the rendered chart must agree, and NOTES.txt
    must say the same level."""
    rows = pod_security_table()
    assert {r[3] for r in rows} >= {"defaults", "`kernelLog.privileged=false`", "`kernelLog.enabled=false`",
                                    "`kernelLog.enabled=false` `state.enabled=false`"}, rows
    for values, level, controls, setting in rows:
        objects = render(values or None)
        template = by_kind(objects)["DaemonSet"]["spec"]["template"]
        assert pod_security_level(template) == (level, controls), setting
        with helm().Chart.load(CHART) as chart:
            notes = chart.render(values=values or None, name="nvml-exporter", namespace="monitoring",
                                 is_install=True)["nvml-exporter/templates/NOTES.txt"]
        assert f"Pod Security level `{level}`" in notes, (setting, notes)


def test_the_docs_say_what_the_default_pod_is():
    """Every place that describes the chart's pod (README, the "What it
    creates" table, the test summary, NOTES.txt) names the default's Pod
    Security level, says privileged and root where the default is, and no
    longer promises the non-root, capability-free pod of other settings
    for the default."""
    pod = by_kind(render())["DaemonSet"]["spec"]["template"]
    level, _ = pod_security_level(pod)
    privileged = pod["spec"]["containers"][0]["securityContext"].get("privileged") is True
    root = pod["spec"]["securityContext"].get("runAsUser") == 0
    readme = (REPO / "README.md").read_text()
    deploy = (REPO / "deploy" / "README.md").read_text()
    with helm().Chart.load(CHART) as chart:
        notes = chart.render(values=None, name="nvml-exporter", namespace="monitoring",
                             is_install=True)["nvml-exporter/templates/NOTES.txt"]
    places = {
        "README.md, Kubernetes": readme.split("**Kubernetes.**", 1)[1].split("\n\n", 1)[0],
        "deploy/README.md, What it creates": next(line for line in deploy.splitlines()
                                                 if line.startswith("| DaemonSet |")),
        "deploy/README.md, the test summary": deploy.split("- The Service selects the DaemonSet's pods", 1)[1]
                                              .split("\n- ", 1)[0],
        "NOTES.txt": notes,
    }
    for place, text in places.items():
        text = " ".join(text.split())
        assert f"Pod Security level `{level}`" in text, place
        assert ("privileged" in text.replace("`privileged`", "")) is privileged, place
        assert bool(re.search(r"(?<!non-)\broot\b(?! file system)", text)) is root, place
        for promise in ("non-root, read-only, no capabilities", "non-root (65532), read-only root file system",
                        "the pod is non-root, read-only, capability-free"):
            assert promise not in text, (place, promise)


def test_disabled_parts_are_not_rendered():
    kinds = {o["kind"] for o in render({"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                                        "dashboards": {"enabled": False}, "serviceAccount": {"create": False}})}
    assert kinds == {"DaemonSet", "Service"}


def test_service_and_servicemonitor_select_the_daemonset_pods():
    objects = by_kind(render())
    pod_labels = objects["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    service = objects["Service"]
    for key, value in service["spec"]["selector"].items():
        assert pod_labels.get(key) == value
    for key, value in objects["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items():
        assert service["metadata"]["labels"].get(key) == value
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert objects["ServiceMonitor"]["spec"]["endpoints"][0]["port"] in port_names
    assert objects["ServiceMonitor"]["spec"]["namespaceSelector"]["matchNames"] == ["monitoring"]


def test_targets_are_named_after_their_node():
    endpoint = by_kind(render())["ServiceMonitor"]["spec"]["endpoints"][0]
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"] if "targetLabel" in r}
    assert targets["instance"] == ["__meta_kubernetes_pod_node_name"]
    assert targets["node"] == ["__meta_kubernetes_pod_node_name"]


def test_driver_upgrade_eviction_label_keeps_the_pod_only_while_true():
    """Issue 16: the exporter holds /dev/nvidia* open; naming an
    operator-managed nvidia.com/gpu.deploy.* label lets the driver manager
    evict it (it sets the label to paused-for-driver-upgrade)."""
    label = "nvidia.com/gpu.deploy.device-plugin"
    pod = by_kind(render({"driverUpgrade": {"evictionLabel": label}}))["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", label: "true"}
    readme = (REPO / "deploy" / "README.md").read_text()
    assert "paused-for-driver-upgrade" in readme and "driverUpgrade.evictionLabel" in readme


def test_cluster_label_reaches_every_series():
    endpoint = by_kind(render({"cluster": "eu-1"}))["ServiceMonitor"]["spec"]["endpoints"][0]
    assert {"targetLabel": "cluster", "replacement": "eu-1", "action": "replace"} in endpoint["relabelings"]
    default = by_kind(render())["ServiceMonitor"]["spec"]["endpoints"][0]
    assert all(r.get("targetLabel") != "cluster" for r in default["relabelings"])


def _rendered_rules(values: dict) -> dict[str, dict]:
    groups = by_kind(render(values))["PrometheusRule"]["spec"]["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_per_rule_values_reach_the_prometheusrule():
    shipped = {r["alert"]: r for g in alert_rule_groups() for r in g["rules"] if "alert" in r}
    values = {"prometheusRule": {
        "runbookBaseUrl": "https://wiki.example.com/gpu-runbooks/",
        "additionalLabels": {"team": "gpu-platform"},
        "rules": {
            "NvidiaGpuPinnedAtFullUtilization": {"enabled": False},
            "NvidiaGpuEccCorrectedErrorBurst": {
                "severity": "info", "for": "15m",
                "expr": 'increase(nvidia_gpu_ecc_errors_total{error="corrected",scope="volatile"}[1h]) > 500'},
            "NvidiaGpuXidWarning": {"keepFiringFor": "1h"},
        },
    }}
    rules = _rendered_rules(values)
    assert "NvidiaGpuPinnedAtFullUtilization" not in rules
    assert set(rules) == set(shipped) - {"NvidiaGpuPinnedAtFullUtilization"}
    burst = rules["NvidiaGpuEccCorrectedErrorBurst"]
    assert burst["labels"] == {"severity": "info", "team": "gpu-platform"}
    assert burst["for"] == "15m" and burst["expr"].endswith("> 500")
    assert rules["NvidiaGpuXidWarning"]["keep_firing_for"] == "1h"
    lost = rules["NvidiaGpuLost"]
    assert lost["annotations"]["runbook_url"] == "https://wiki.example.com/gpu-runbooks#nvidiagpulost"
    assert lost["labels"]["severity"] == shipped["NvidiaGpuLost"]["labels"]["severity"]
    assert lost["expr"] == shipped["NvidiaGpuLost"]["expr"]


def test_an_override_for_an_unknown_alert_is_refused():
    with pytest.raises(Exception, match="NvidiaGpuTypo"):
        render({"prometheusRule": {"rules": {"NvidiaGpuTypo": {"severity": "info"}}}})


def test_servicemonitor_drops_the_exporter_pods_own_labels():
    """Issue 16: the operator's `pod` target label changes with every
    rollout; kept, it makes every series of the node new. And the
    operator's `pod`, `container` and `namespace` would push the pod
    attribution and workload series' own labels aside (exported_namespace),
    breaking `sum by (namespace)` in the shipped rules and dashboards."""
    endpoint = by_kind(render())["ServiceMonitor"]["spec"]["endpoints"][0]
    drops = [r for r in endpoint["relabelings"] if r.get("action") == "labeldrop"]
    assert drops, "no labeldrop relabeling"
    dropped = {name for r in drops for name in ("pod", "container", "namespace") if re.fullmatch(r["regex"], name)}
    assert dropped == {"pod", "container", "namespace"}, dropped


def alert_rule_groups() -> list[dict]:
    groups = []
    for path in sorted((REPO / "alerts").glob("*.yml")) + sorted((REPO / "alerts").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and "groups" in doc:
            groups.extend(doc["groups"])
    return groups


def test_prometheusrule_carries_exactly_the_rules_of_alerts():
    rule = by_kind(render())["PrometheusRule"]
    assert rule["spec"]["groups"] == alert_rule_groups(), (
        "the PrometheusRule differs from alerts/*.yml: run deploy/generate"
    )


def test_dashboard_configmap_carries_exactly_the_dashboards():
    configmap = by_kind(render())["ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    expected = {p.name: p.read_text() for p in sorted((REPO / "dashboards").glob("*.json"))}
    data = configmap.get("data") or {}
    assert sorted(data) == sorted(expected), "dashboards/ and the ConfigMap differ: run deploy/generate"
    for name, text in expected.items():
        assert json.loads(data[name]) == json.loads(text), f"{name} differs: run deploy/generate"


def test_generated_chart_files_are_up_to_date():
    result = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "generate"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


# --- Dockerfile -------------------------------------------------------------


def test_dockerfile_passes_hadolint():
    result = subprocess.run(
        [venv_tool("hadolint"), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\nUSER root\n")
    result = subprocess.run([venv_tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3008" in result.stdout, result.stdout


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_follows_the_image_contract():
    instructions = dockerfile_instructions()
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert froms[0] == "${BUILDER_IMAGE} AS build" and froms[-1] == "${RUNTIME_IMAGE}", froms
    global_args = [rest.split("=")[0] for word, rest in instructions[: instructions.index(("FROM", froms[0]))] if word == "ARG"]
    assert global_args == ["BUILDER_IMAGE", "RUNTIME_IMAGE"]
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    # The release profile unless PROFILE is given (the image test builds
    # release-test, Cargo.toml): what `docker build .` ships is release's.
    assert 'cargo build --profile "${PROFILE}" --workspace --locked' in runs
    assert ("ARG", "PROFILE=release") in instructions
    assert "/out/usr/lib/nvml-exporter/libnvml_sim.so" in runs
    assert "/out/usr/bin/nvml-exporter" in runs
    final = instructions[instructions.index(("FROM", froms[-1])) :]
    assert not [rest for word, rest in final if word == "RUN"], "the runtime base may have no shell"
    (user,) = [rest for word, rest in final if word == "USER"]
    assert re.fullmatch(r"[1-9][0-9]*:[0-9]+", user), user
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert ("EXPOSE", "9445") in final
    assert ("ENTRYPOINT", '["/usr/bin/nvml-exporter"]') in final
    labels = " ".join(rest for word, rest in final if word == "LABEL")
    for key in ("title", "description", "version", "revision", "created", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels, key


# --- systemd ------------------------------------------------------------------


def exporter_binary() -> Path:
    binary = REPO / "target" / "debug" / "nvml-exporter"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: cargo build --workspace first (scripts/test does)")
    return binary


def systemd_verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: apt-get install systemd (scripts/install-test-deps)")
    # verify checks that ExecStart is executable: point it at the binary the
    # build produced, everything else stays as shipped.
    unit = tmp_path / "nvml-exporter.service"
    unit.write_text(unit_text.replace("/usr/bin/nvml-exporter", str(exporter_binary())))
    return subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def test_systemd_unit_verifies_without_warnings(tmp_path):
    result = systemd_verify(UNIT.read_text(), tmp_path)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def verify_with_drop_in(drop_in: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The unit with a drop-in beside it, where systemd-analyze verify reads it."""
    d = tmp_path / "nvml-exporter.service.d"
    d.mkdir()
    (d / "no-kernel-log.conf").write_text(drop_in)
    return systemd_verify(UNIT.read_text(), tmp_path)


def test_the_unit_reads_the_kernel_log_and_the_drop_in_takes_it_back(tmp_path):
    """Issue 23, then issue 36: the unit grants what --collector.xid.kmsg
    (on by default) needs, CAP_SYSLOG and /dev/kmsg read-only and nothing
    else; the opt-out drop-in switches reading off and holds nothing."""
    s = unit_settings()
    assert s["ProtectKernelLogs"] == ["no"]
    assert "/dev/kmsg r" in s["DeviceAllow"]
    assert s["CapabilityBoundingSet"] == ["CAP_SYSLOG"] and s["AmbientCapabilities"] == ["CAP_SYSLOG"]
    text = NO_KERNEL_LOG_DROP_IN.read_text()
    result = verify_with_drop_in(text, tmp_path)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    assert "ProtectKernelLogz" in verify_with_drop_in(text + "ProtectKernelLogz=no\n", bad).stderr, \
        "verify reads the drop-in"
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    assert settings == {
        "Environment": ["NVML_EXPORTER_COLLECTOR_XID_KMSG=false"],
        "ProtectKernelLogs": ["yes"],
        "CapabilityBoundingSet": [""],
        "AmbientCapabilities": [""],
    }
    help_text = subprocess.run([str(exporter_binary()), "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    assert "NVML_EXPORTER_COLLECTOR_XID_KMSG" in help_text and "NVML_EXPORTER_PATH_KMSG" in help_text
    assert "enabled, except with --simulate" in help_text


def test_systemd_verify_catches_mistakes(tmp_path):
    broken = UNIT.read_text().replace("ProtectHome=yes", "ProtectHome=yes\nProtectHomes=yes\nRestrictAddressFamilies=AF_BOGUS")
    result = systemd_verify(broken, tmp_path)
    assert "ProtectHomes" in result.stderr and "AF_BOGUS" in result.stderr, result.stderr


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_unit_is_hardened():
    s = unit_settings()
    assert s["ExecStart"] == ["/usr/bin/nvml-exporter $NVML_EXPORTER_ARGS"]
    assert s["EnvironmentFile"] == ["-/etc/default/nvml-exporter"]
    for key, value in {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "DevicePolicy": "closed",
        "CapabilityBoundingSet": "CAP_SYSLOG",
        "RestrictNamespaces": "yes",
        "SystemCallArchitectures": "native",
    }.items():
        assert s.get(key) == [value], f"{key}={s.get(key)}"
    devices = [d.split()[0] for d in s["DeviceAllow"]]
    assert devices and all(d.startswith("char-nvidia") or d == "/dev/kmsg" for d in devices), devices
    # Issue 28: the state kept across restarts lives where the exporter's
    # default --state.path points, the unit's own state directory.
    assert s["StateDirectory"] == ["nvml-exporter"] and s["StateDirectoryMode"] == ["0700"]
    assert set(s["RestrictAddressFamilies"][0].split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}



def test_systemd_env_file_sets_only_variables_the_exporter_reads():
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", ENV_FILE.read_text(), re.M))
    assert "NVML_EXPORTER_ARGS" in names
    names.discard("NVML_EXPORTER_ARGS")
    help_text = subprocess.run(
        [str(exporter_binary()), "--help"], capture_output=True, text=True, timeout=30, env={**os.environ, "NO_COLOR": "1"}
    ).stdout
    known = set(re.findall(r"env:\s+(NVML_EXPORTER_[A-Z0-9_]+)", help_text))
    assert known, f"nvml-exporter --help lists no environment variables:\n{help_text}"
    assert names <= known, f"not read by the exporter: {sorted(names - known)}"


def test_exporter_starts_with_the_systemd_env_file(tmp_path):
    """What the unit does: the env file's variables, then $NVML_EXPORTER_ARGS
    split into words, here on the simulator and a loopback port."""
    import socket
    import time
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_")}
    for line in ENV_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env["NVML_EXPORTER_WEB_LISTEN_ADDRESS"] = f"127.0.0.1:{port}"
    env["NVML_EXPORTER_SIMULATE"] = "dgx-h100"
    log = tmp_path / "exporter.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(exporter_binary()), *env["NVML_EXPORTER_ARGS"].split()], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the exporter exited with the env file:\n{log.read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"not ready within 60s:\n{log.read_text()}"
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        assert "nvml_exporter_nvml_up 1" in body.splitlines()
        # The env file asks for logfmt at info: the log must be logfmt lines.
        first = log.read_text().splitlines()[0]
        assert first.startswith("ts=") and " level=info " in first, first
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def sizing_rows() -> list[tuple[str, list[str], int, int]]:
    """deploy/README.md's "Resource sizing" rows at the default interval:
    (scenario, extra flags, series, body bytes)."""
    text = (REPO / "deploy" / "README.md").read_text().split("## Resource sizing", 1)[1]
    rows = []
    for m in re.finditer(r"^\| `([\w-]+)`(?::[^|]*|, (`--[\w.]+`))? \| ([\d,]+) \| (\d+) KB \|", text, re.M):
        flags = [m[2].strip("`")] if m[2] else []
        rows.append((m[1], flags, int(m[3].replace(",", "")), int(m[4]) * 1000))
    return rows


@pytest.mark.parametrize("scenario,flags,series,size", sizing_rows())
def test_the_sizing_table_counts_what_the_exporter_serves(scenario, flags, series, size, tmp_path):
    """Issue 51, D13: the table said 1,967 series in 235 KB for dgx-h100 and
    5,187 in 648 KB for `large` long after the default set shrank to at most
    100 series per GPU. Each row's series and body, against the exporter on
    that simulated fleet once every GPU has been sampled twice."""
    import socket
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_")}
    log = tmp_path / "exporter.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(exporter_binary()), "--simulate", scenario, "--web.listen-address",
                                 f"127.0.0.1:{port}", "--collect.interval=1s", *flags], env=env,
                                stdout=out, stderr=subprocess.STDOUT)

    def scrape() -> str:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            return r.read().decode()

    def sampled(body: str) -> dict[str, str]:
        return {line.split(" ")[0]: line.split(" ")[1] for line in body.splitlines()
                if line.startswith("nvml_exporter_last_sample_timestamp_seconds{")}

    try:
        deadline = time.monotonic() + 120
        first: dict[str, str] = {}
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no second sample of every GPU:\n{log.read_text()}"
            try:
                now = sampled(scrape())
            except OSError:
                now = {}
            if now and not first:
                first = now
            elif first and now.keys() == first.keys() and all(now[k] != first[k] for k in now):
                break
            time.sleep(0.2)
        body = scrape()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    served = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    assert abs(served - series) <= series // 100, (scenario, flags, served, "series; the table says", series)
    assert abs(len(body.encode()) - size) <= size // 20, (scenario, flags, len(body.encode()), "bytes", size)


def test_dcgm_compat_values_replace_a_dcgm_exporter_deployment(tmp_path):
    """The chart's DCGM values render what the exporter reads, and the
    exporter started as the pod would be (its environment, the ConfigMap's
    files) serves dcgm-exporter's series from dcgm-exporter's counters."""
    import time
    import urllib.request

    objects = render(VALUE_SETS["dcgm-compat"])
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVML_EXPORTER_COMPAT_DCGM"]["value"] == "4.9"
    assert env["NVML_EXPORTER_COMPAT_DCGM_ONLY"]["value"] == "true"
    assert env["NVML_EXPORTER_COMPAT_DCGM_HOSTNAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVML_EXPORTER_CONFIG_FILE"]["value"] == "/etc/nvml-exporter-selection/selection.yml"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "selection")
    assert "subPath" not in mount, "a subPath mount never sees an edited ConfigMap"
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-selection")]
    assert set(cm["data"]) == {"selection.yml", "counters.csv"}
    sm = next(o for o in objects if o["kind"] == "ServiceMonitor")
    relabel = sm["spec"]["endpoints"][0]["metricRelabelings"]
    assert {r["targetLabel"] for r in relabel} == {"exported_pod", "exported_namespace", "exported_container"}

    # The pod, on the simulator: its variables, the ConfigMap's files.
    files = tmp_path / "selection"
    files.mkdir()
    for name, text in cm["data"].items():
        (files / name).write_text(text)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_")}
    for name, e in env.items():
        if "value" in e:
            run_env[name] = e["value"].replace("/etc/nvml-exporter-selection", str(files))
    run_env["NVML_EXPORTER_COMPAT_DCGM_HOSTNAME"] = "gpu-node-1"
    del run_env["NVML_EXPORTER_KUBERNETES_POD_RESOURCES_SOCKET"]
    with socket_port() as port:
        run_env["NVML_EXPORTER_WEB_LISTEN_ADDRESS"] = f"127.0.0.1:{port}"
    run_env["NVML_EXPORTER_SIMULATE"] = "hgx-b200"
    log = tmp_path / "exporter.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(exporter_binary())], env=run_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        body = ""
        while "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" not in body:
            assert proc.poll() is None, f"the exporter exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no DCGM series within 60s:\n{body}\n{log.read_text()}"
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                pass
        names = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")}
        dcgm = {n for n in names if n.startswith("DCGM_")}
        # The counters' fields under the names they are written with (the
        # name decides the unit, whatever the generation), and nothing else;
        # no nvidia_* family (dcgmCompat.only).
        assert dcgm == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}, dcgm
        assert 'DCGM_FI_DRIVER_VERSION="' in body
        assert not any(n.startswith("nvidia_") for n in names)
        assert 'hostname="gpu-node-1"' in body
        assert "nvml_exporter_config_last_reload_successful 1" in body.splitlines()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


class socket_port:
    """A free loopback port."""

    def __enter__(self):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc):
        return False


def test_host_driver_mounts_the_library_directories_read_only_under_the_host_root():
    # Grace nodes whose runtime does not inject libnvidia-ml (NVIDIA/dcgm-exporter#621):
    # the host's /usr/lib (holding aarch64-linux-gnu) and the GPU operator's
    # driver root, where src/nvml/library.rs looks under --path.rootfs.
    pod = by_kind(render({"hostDriver": {"enabled": True}}))["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVML_EXPORTER_PATH_ROOTFS"] == "/host"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for i, path in enumerate(["/usr/lib", "/run/nvidia"]):
        name = f"host-driver-{i}"
        assert volumes[name] == {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
        assert mounts[name] == {"name": name, "mountPath": f"/host{path}", "readOnly": True}
    # Off by default: the container toolkit injects the library.
    default = by_kind(render())["DaemonSet"]["spec"]["template"]["spec"]
    assert not any(v["name"].startswith("host-driver-") for v in default["volumes"])


def test_nvsentinel_mounts_the_platform_connectors_socket_directory(tmp_path):
    """nvsentinel.enabled: the socket NVSentinel creates under the host's
    /var/run/nvsentinel, the node's name as the events' nodeName, dryRun
    as STORE_ONLY (docs/operations.md, "NVIDIA NVSentinel"); off, none of it."""
    objects = render({"nvsentinel": {"enabled": True, "dryRun": True}})
    pod = by_kind(objects)["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NVML_EXPORTER_NVSENTINEL_SOCKET"] == "/var/run/nvsentinel/nvsentinel.sock"
    assert env["NVML_EXPORTER_NVSENTINEL_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVML_EXPORTER_NVSENTINEL_DRY_RUN"] == "true"
    assert {"name": "nvsentinel", "hostPath": {"path": "/var/run/nvsentinel", "type": "DirectoryOrCreate"}} \
        in pod["volumes"]
    assert {"name": "nvsentinel", "mountPath": "/var/run/nvsentinel"} in container["volumeMounts"]
    core = [o for o in objects if o["kind"] in CORE_KINDS | RBAC_KINDS]
    result = kubernetes_validate(core, KUBERNETES_VERSIONS[-1], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    default = by_kind(render())["DaemonSet"]["spec"]["template"]["spec"]
    assert not any(e["name"].startswith("NVML_EXPORTER_NVSENTINEL") for e in default["containers"][0]["env"])
    assert not any(v["name"] == "nvsentinel" for v in default["volumes"])
