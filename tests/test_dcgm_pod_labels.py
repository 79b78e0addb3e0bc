"""Pod labels as dcgm-exporter prints them (issue 38, item 5).

Under --compat.dcgm a copied pod label keeps its key's case
(`costCenter`, not `costcenter`) and the allowlist takes dcgm-exporter's
regular expressions under its own flag spelling
(`--kubernetes-pod-label-allowlist-regex`, matched anywhere in the key), so
that `sum by (costCenter)` and a copied Helm `podLabelAllowlistRegex` keep
working. Without --compat.dcgm the same flags give this exporter's lower
snake case names. The real exporter runs against the fake kubelet's /pods
(tests/kubelet/fake_https.py) and pod-resources socket."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fake_https import FakeKubernetes, PodMeta
from fake_kubelet import FakeKubelet, Pod
from promstack import EXPORTER, Exporter, wait_until
from promstack import scrape_samples as scrape

LABELS = {"team": "ml", "costCenter": "cc-42", "app.kubernetes.io/Name": "trainer",
          "secret-ish": "not copied"}


@pytest.mark.parametrize("compat", [True, False])
def test_pod_labels_keep_their_case_under_compat_and_regexes_select_them(tmp_path, compat):
    held = run(tmp_path, compat, [])
    for s in held:
        assert "secret_ish" not in s.labels and "secret-ish" not in s.labels, s
        assert "pod_uid" not in s.labels, "no pod_uid unless asked for"
    if compat:
        [util] = [s for s in held if s.name == "DCGM_FI_DEV_GPU_UTIL"]
        assert util.labels["costCenter"] == "cc-42"
        assert util.labels["app_kubernetes_io_Name"] == "trainer"
        assert util.labels["team"] == "ml"
        assert all("costcenter" not in s.labels for s in held)
    else:
        assert not [s for s in held if s.name.startswith("DCGM_")]
        for s in held:
            assert s.labels["costcenter"] == "cc-42" and "costCenter" not in s.labels, s
            assert s.labels["app_kubernetes_io_name"] == "trainer", s


@pytest.mark.parametrize("source", ["kubelet", "api-server"])
def test_pod_uid_on_request_under_dcgm_exporter_s_flag(tmp_path, source):
    """dcgm-exporter's --kubernetes-enable-pod-uid: the pod's metadata.uid
    as pod_uid on its DCGM series and its share, never twice on a series."""
    held = run(tmp_path, True, ["--kubernetes-enable-pod-uid", "--kubernetes.pod-labels.source", source,
                                "--kubernetes.node-name", "node-1", "--kubernetes.api-server", "URL"])
    [util] = [s for s in held if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert util.labels["pod_uid"] == "uid-trainer-0"
    [share] = [s for s in held if s.name == "nvidia_gpu_pod_share_ratio"]
    assert share.labels["pod_uid"] == "uid-trainer-0"


def test_pod_uid_needs_compat(tmp_path):
    done = subprocess.run([str(EXPORTER), "--simulate", "dgx-h100", "--kubernetes", "--kubernetes-enable-pod-uid",
                           "--kubernetes.kubelet-url", "https://127.0.0.1:1"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "--kubernetes.pod-uid" in done.stderr and "--compat.dcgm" in done.stderr, done.stderr


def run(tmp_path, compat: bool, more: list[str]) -> list:
    """The trainer pod's series once its labels are on them."""
    fake = FakeKubernetes(tmp_path)
    fake.pods.append(PodMeta("ml", "trainer-0", LABELS))
    fake.start()
    kubelet = FakeKubelet(tmp_path / "kubelet.sock", tmp_path)
    (tmp_path / "host").mkdir()
    extra = [
        "--kubernetes.pod-resources-socket", str(tmp_path / "kubelet.sock"),
        "--kubernetes.refresh-interval", "300ms",
        "--path.rootfs", str(tmp_path / "host"),
        "--kubernetes.pod-labels", "team",
        "--kubernetes-pod-label-allowlist-regex", "^cost",
        "--kubernetes-pod-label-allowlist-regex", r"app\.kubernetes\.io/.*",
        "--kubernetes.kubelet-url", fake.url,
        "--kubernetes.ca-file", str(fake.ca), "--kubernetes.token-file", str(fake.token_file),
    ] + [fake.url if m == "URL" else m for m in more]
    if compat:
        extra.append("--compat.dcgm")
    exporter = Exporter(tmp_path, "dgx-h100", interval="300ms", name="exporter", extra=extra)
    try:
        exporter.wait_ready()
        first = scrape(exporter)
        mig = {s.labels["gpu"] for s in first if s.name == "nvidia_gpu_mig_info"}
        uuid = next(s.labels["uuid"] for s in first
                    if s.name == "nvidia_gpu_info" and s.labels["gpu"] not in mig)
        kubelet.set_pods([Pod("ml", "trainer-0", "main", "nvidia.com/gpu", [uuid])])
        kubelet.start()
        family = "DCGM_FI_DEV_GPU_UTIL" if compat else "nvidia_gpu_pod_share_ratio"
        with_team = lambda: [s for s in scrape(exporter)  # noqa: E731
                             if s.labels.get("pod") == "trainer-0" and "team" in s.labels]
        held = wait_until(lambda: (h := with_team()) and any(s.name == family for s in h) and h,
                          30, "the pod's labels on its series")
        return held
    finally:
        exporter.stop()
        kubelet.stop()
        fake.stop()


def test_dra_attributes_on_a_claimed_device_s_dcgm_series(tmp_path):
    """dcgm-exporter's --kubernetes-enable-dra: the claim's name, namespace,
    driver, pool and device on the series of the device it gave, and on a
    MIG device its profile and MIG UUID; none on our own pod share."""
    import dra_node
    from fake_kubelet import Claim, ClaimDevice

    rootfs, procfs = tmp_path / "host", tmp_path / "proc"
    rootfs.mkdir()
    procfs.mkdir()
    dra_node.write_mig_minors(procfs)
    kubelet = FakeKubelet(tmp_path / "kubelet.sock", tmp_path)
    kubelet.start()
    node = Path(__file__).resolve().parent / "fixtures" / "dra" / "node.toml"
    exporter = Exporter(tmp_path, str(node), interval="300ms", name="exporter", extra=[
        "--kubernetes.pod-resources-socket", str(tmp_path / "kubelet.sock"),
        "--kubernetes.refresh-interval", "300ms", "--path.procfs", str(procfs),
        "--path.rootfs", str(rootfs), "--compat.dcgm", "--kubernetes-enable-dra"])
    try:
        exporter.wait_ready()
        first = scrape(exporter)
        mig = {s.labels["gpu_instance"]: s.labels for s in first
               if s.name == "nvidia_gpu_mig_info" and s.labels["gpu"] == "3"}
        uid = "0c1d2e3f-4a5b-4c6d-8e7f-00000000000"
        whole = Claim("ml", "trainer-gpu", [ClaimDevice(
            "gpu-4", dra_node.write_claim_spec(rootfs, uid + "1", [dra_node.gpu_device(4)]))])
        mig_dev = dra_node.mig_device(7, "3g.40gb", 9, 0, gpu_instance=1, compute_instance=0)
        part = Claim("infer", "mig-gpu", [ClaimDevice(
            mig_dev[0], dra_node.write_claim_spec(rootfs, uid + "2", [mig_dev]))])
        kubelet.set_pods([Pod("ml", "trainer-0", "main", claims=[whole]),
                          Pod("infer", "server-0", "triton", claims=[part])])
        util = lambda pod: [s for s in scrape(exporter)  # noqa: E731
                            if s.name == "DCGM_FI_DEV_FB_USED" and s.labels.get("pod") == pod]
        [trainer] = wait_until(lambda: util("trainer-0"), 30, "the claimed GPU's series")
        assert {k: v for k, v in trainer.labels.items() if k.startswith("dra_")} == {
            "dra_claim_name": "trainer-gpu", "dra_claim_namespace": "ml",
            "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": "node-1", "dra_device_name": "gpu-4"}
        [server] = wait_until(lambda: util("server-0"), 30, "the claimed MIG device's series")
        assert server.labels["GPU_I_ID"] == "1"
        assert server.labels["dra_claim_name"] == "mig-gpu"
        assert server.labels["dra_device_name"] == mig_dev[0]
        assert server.labels["dra_mig_profile"] == mig["1"]["profile"]
        assert server.labels["dra_mig_device_uuid"] == mig["1"]["mig_uuid"]
        own = [s for s in scrape(exporter) if s.name.startswith("nvidia_gpu_") and "pod" in s.labels]
        assert own and not [s for s in own if any(k.startswith("dra_") for k in s.labels)]
    finally:
        exporter.stop()
        kubelet.stop()
