"""What NVIDIA's GPU DRA driver leaves on a node, for the DRA tests: the
transient CDI spec of each prepared claim and the driver's MIG minors table.

Both follow the real formats:

- The CDI spec is what kubernetes-sigs/dra-driver-nvidia-gpu writes in
  cmd/gpu-kubelet-plugin/cdi.go (CreateClaimSpecFile, at commit 95932046):
  file `k8s.gpu.nvidia.com-claim_<claim uid>.yaml` under /var/run/cdi (the
  CDI library's GenerateTransientSpecName), kind `k8s.gpu.nvidia.com/claim`,
  one device `<claim uid>-<canonical name>` per allocated device, whose
  container edits hold the GPU's node `/dev/nvidia<minor>` (and its DRM
  nodes), and for a MIG device the parent's node plus the GPU and compute
  instance capability nodes `/dev/nvidia-caps/nvidia-cap<minor>` with type,
  major and minor (GetDevNodesForMigDevice); the spec's common edits hold
  the control nodes, NVIDIA_VISIBLE_DEVICES=void and the driver's hooks.
- /proc/driver/nvidia-caps/mig-minors is a real host's
  (tests/fixtures/dra/mig-minors, an H200 on R580): `config 1`, `monitor 2`,
  then for each GPU minor 15 GPU instances of 9 minors each (the instance's
  access node, then 8 compute instances), as NVIDIA's MIG user guide
  ("Device Nodes") describes it; the cap minors below follow that layout,
  checked against the file.
"""

from __future__ import annotations

from pathlib import Path

CLAIM_KIND = "k8s.gpu.nvidia.com/claim"
# The nvidia-caps character device's major is dynamic (/proc/devices): the
# real H200 host's (tests/fixtures/dra/README.md).
CAPS_MAJOR = 241
REAL_MIG_MINORS = Path(__file__).resolve().parents[1] / "fixtures" / "dra" / "mig-minors"


def gi_cap_minor(gpu_minor: int, gpu_instance: int) -> int:
    return 3 + gpu_minor * 135 + gpu_instance * 9


def ci_cap_minor(gpu_minor: int, gpu_instance: int, compute_instance: int) -> int:
    return gi_cap_minor(gpu_minor, gpu_instance) + 1 + compute_instance


def write_mig_minors(procfs: Path) -> Path:
    """The real host's table under `procfs`, after checking that the cap
    minors this module computes are the ones it lists."""
    text = REAL_MIG_MINORS.read_text()
    for g, gi, ci in ((0, 0, 0), (7, 1, 0), (7, 2, 0), (31, 14, 7)):
        assert f"gpu{g}/gi{gi}/access {gi_cap_minor(g, gi)}\n" in text
        assert f"gpu{g}/gi{gi}/ci{ci}/access {ci_cap_minor(g, gi, ci)}\n" in text
    path = procfs / "driver" / "nvidia-caps" / "mig-minors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def gpu_device(minor: int) -> tuple[str, list[str]]:
    """The canonical name and device nodes of a whole GPU."""
    nodes = [
        f"    - path: /dev/nvidia{minor}",
        f"    - path: /dev/dri/card{minor + 1}",
        f"    - path: /dev/dri/renderD{128 + minor}",
    ]
    return f"gpu-{minor}", nodes


def mig_device(gpu_minor: int, profile: str, profile_id: int, placement: int,
               gpu_instance: int, compute_instance: int) -> tuple[str, list[str]]:
    """The canonical name (`gpu-<minor>-mig-<profile>-<profile id>-<placement>`)
    and device nodes of a MIG device."""
    name = f"gpu-{gpu_minor}-mig-{profile.replace('.', '')}-{profile_id}-{placement}"
    nodes = [f"    - path: /dev/nvidia{gpu_minor}"]
    for cap in (gi_cap_minor(gpu_minor, gpu_instance),
                ci_cap_minor(gpu_minor, gpu_instance, compute_instance)):
        nodes += [
            f"    - path: /dev/nvidia-caps/nvidia-cap{cap}",
            "      type: c",
            f"      major: {CAPS_MAJOR}",
            f"      minor: {cap}",
            "      fileMode: 288",
        ]
    return name, nodes


def write_claim_spec(rootfs: Path, claim_uid: str, devices: list[tuple[str, list[str]]]) -> list[str]:
    """Writes the claim's spec; returns its fully qualified CDI device names,
    as the kubelet reports them."""
    cdi = rootfs / "var" / "run" / "cdi"
    cdi.mkdir(parents=True, exist_ok=True)
    body = [
        "---",
        "cdiVersion: 0.5.0",
        "containerEdits:",
        "  deviceNodes:",
        "  - path: /dev/nvidia-modeset",
        "  - path: /dev/nvidia-uvm",
        "  - path: /dev/nvidia-uvm-tools",
        "  - path: /dev/nvidiactl",
        "  env:",
        "  - NVIDIA_VISIBLE_DEVICES=void",
        "  hooks:",
        "  - args:",
        "    - nvidia-cdi-hook",
        "    - update-ldcache",
        "    - --folder",
        "    - /usr/lib/x86_64-linux-gnu",
        "    hookName: createContainer",
        "    path: /usr/bin/nvidia-cdi-hook",
        "devices:",
    ]
    names = []
    for canonical, nodes in devices:
        name = f"{claim_uid}-{canonical}"
        names.append(f"{CLAIM_KIND}={name}")
        body += [
            "- containerEdits:",
            "    deviceNodes:",
            *nodes,
            f"  name: {name}",
        ]
    body.append(f"kind: {CLAIM_KIND}")
    (cdi / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml").write_text("\n".join(body) + "\n")
    return names


def remove_claim_spec(rootfs: Path, claim_uid: str):
    """What the driver does when it unprepares the claim."""
    (rootfs / "var" / "run" / "cdi" / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml").unlink()
