"""What a release ships, built for real from this tree and used as a fleet
would use it (issue 37).

- scripts/package: .deb and .rpm for amd64 and arm64 from the release
  binaries (x86_64 native, aarch64 through scripts/cross). Each .deb is
  installed into a Debian 12 root file system of its own architecture and
  the installed exporter is started the way its systemd unit starts it and
  scraped (scripts/package-check): amd64 natively, arm64 under qemu-user.
  The .rpm files are read back with rpm -qp. The maintainer scripts (the
  same text the packages hold) run with a stand-in systemctl: an upgrade
  restarts a running service, a removal stops it (fast: builds nothing).
- scripts/image-multiarch: the amd64 and arm64 images and one OCI index,
  pushed to a registry this test starts (Debian's docker-registry), read back
  with skopeo; the arm64 image's own exporter, as pulled, runs under qemu.

The binaries are built with the `release-test` cargo profile (Cargo.toml):
the release profile without fat LTO in one codegen unit, at opt-level 1
(issue 52: fat LTO was most of this file's time). Nothing here checks what
fat LTO changes (size, speed); what is checked (the packages' files,
scripts and dependencies, the installed binary's architecture, --version
and /metrics) is the same for both profiles, which differ in no semantics
(no debug assertions, no overflow checks, stripped, the same panic
strategy). NVML_EXPORTER_RELEASE_PROFILE=release runs the same tests on the
shipped profile. Slow on a fresh machine (two builds, two debootstraps;
BENCHMARKS.md, "Release artifacts", gives measured times); later runs reuse
the targets and the root file systems. Needs root, like the image test; it
does not skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from local_registry import registry  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parent.parent
VERSION = re.search(r'^version = "(.*)"', (REPO / "Cargo.toml").read_text(), re.M)[1]
# The cargo profile the packages and images are built from (see above).
PROFILE = os.environ.get("NVML_EXPORTER_RELEASE_PROFILE", "release-test")
ARCHES = {"amd64": ("x86_64", "x86_64-unknown-linux-gnu"), "arm64": ("aarch64", "aarch64-unknown-linux-gnu")}


def run(*cmd: str, timeout: int = 60 * 60, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd}: {r.returncode}\n{(r.stdout + r.stderr)[-6000:]}"
    return r


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("the release artifacts need root (scripts/cross, debootstrap, buildah)")
    out = tmp_path_factory.mktemp("packages")
    # Builds both architectures' binaries first (the image test below reuses
    # them). NVML_EXPORTER_RELEASE_PREBUILT=1 packages the binaries as they
    # are, for iterating on the packaging alone (a commit changes the
    # revision compiled in, and so relinks them).
    prebuilt = ["--no-build"] if os.environ.get("NVML_EXPORTER_RELEASE_PREBUILT") == "1" else []
    run(str(REPO / "scripts/package"), "--out", str(out), "--profile", PROFILE, *prebuilt)
    return out


def test_packages_exist_for_both_architectures_with_checksums(packages):
    names = sorted(p.name for p in packages.iterdir())
    assert names == sorted([
        f"nvml-exporter_{VERSION}-1_amd64.deb", f"nvml-exporter_{VERSION}-1_arm64.deb",
        f"nvml-exporter-{VERSION}-1.x86_64.rpm", f"nvml-exporter-{VERSION}-1.aarch64.rpm",
        "SHA256SUMS"])
    subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=packages, check=True,
                   capture_output=True)


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_deb_installs_and_serves_metrics(packages, arch):
    deb = packages / f"nvml-exporter_{VERSION}-1_{arch}.deb"
    fields = run("dpkg-deb", "--field", str(deb)).stdout
    assert f"Architecture: {arch}" in fields
    assert re.search(r"^Depends: libc6 \(>= 2\.\d+\), libgcc-s1, passwd$", fields, re.M), fields
    assert "/etc/default/nvml-exporter" in run("dpkg-deb", "--info", str(deb), "conffiles").stdout
    # The install scripts are those test_maintainer_scripts runs.
    for name in ("postinst", "prerm", "postrm"):
        assert run("dpkg-deb", "--info", str(deb), name).stdout == maintainer_scripts()[f"deb-{name}"], name
    out = run(str(REPO / "scripts/package-check"), str(deb), "dgx-h100").stdout
    # The installed binary is this architecture's and says so in --version.
    assert f"target:     {ARCHES[arch][1]}" in out, out
    m = re.search(rf"package-check: {arch} served (\d+) GPUs, (\d+) families", out)
    assert m, out
    assert int(m[1]) == 8, out  # dgx-h100
    assert int(m[2]) >= 30, out


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_rpm_holds_the_service_config_and_user(packages, arch):
    rpm_arch = ARCHES[arch][0]
    rpm = str(packages / f"nvml-exporter-{VERSION}-1.{rpm_arch}.rpm")
    assert run("rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}", rpm).stdout == \
        f"nvml-exporter {VERSION} 1 {rpm_arch}"
    files = run("rpm", "-qp", "--list", rpm).stdout.split()
    for f in ["/usr/bin/nvml-exporter", "/usr/bin/nvml-sim", "/usr/lib/nvml-exporter/libnvml_sim.so",
              "/usr/lib/systemd/system/nvml-exporter.service", "/etc/default/nvml-exporter"]:
        assert f in files, files
    assert run("rpm", "-qp", "--configfiles", rpm).stdout.split() == ["/etc/default/nvml-exporter"]
    scripts = run("rpm", "-qp", "--scripts", rpm).stdout
    pre = scripts.split("preinstall scriptlet")[1].split("scriptlet")[0]
    assert "useradd --system" in pre and "groupadd --system nvml-exporter" in pre, scripts
    # The scriptlets are those test_maintainer_scripts runs (rpm -qp
    # --scripts prints each body after its header line).
    for name, header in (("pre", "preinstall"), ("post", "postinstall"), ("preun", "preuninstall"),
                         ("postun", "postuninstall")):
        body = scripts.split(f"{header} scriptlet (using /bin/sh):\n")[1]
        assert body.startswith(maintainer_scripts()[f"rpm-{name}"].rstrip("\n")), (name, scripts)
    # The unit and the config in the package are deploy/systemd's, byte for
    # byte (--dump: path size mtime sha256 ...).
    dump = {line.split()[0]: line.split()[3] for line in run("rpm", "-qp", "--dump", rpm).stdout.splitlines()}
    for path, src in [("/usr/lib/systemd/system/nvml-exporter.service", "nvml-exporter.service"),
                      ("/etc/default/nvml-exporter", "nvml-exporter.env")]:
        assert dump[path] == hashlib.sha256((REPO / "deploy/systemd" / src).read_bytes()).hexdigest(), path


def maintainer_scripts() -> dict[str, str]:
    """The deb's and the rpm's install scripts, as scripts/package writes them."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        run(str(REPO / "scripts/package"), "--maintainer-scripts", d)
        return {p.name: p.read_text() for p in Path(d).iterdir()}


def test_maintainer_scripts_restart_on_upgrade_and_stop_on_removal(tmp_path):
    """Issue 51, D11: an upgrade left the old, deleted binary serving until
    someone restarted the service. Each script runs as dpkg and rpm call it
    (their arguments: dpkg's configure with the old version, rpm's count of
    versions left), with systemd's directory pointed at a tmp one and a
    systemctl stand-in that records its calls. Cheap: builds nothing; the
    slow tests above check that the packages hold these very scripts."""
    systemd = tmp_path / "run-systemd-system"
    systemd.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$*" >>"{calls}"\n')
    (bin_dir / "getent").write_text("#!/bin/sh\nexit 0\n")  # the user exists: nothing added here
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    scripts = maintainer_scripts()

    def called(script: str, *args: str) -> list[str]:
        calls.write_text("")
        path = tmp_path / script
        path.write_text(scripts[script].replace("/run/systemd/system", str(systemd)))
        r = subprocess.run(["sh", "-e", str(path), *args], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
        assert r.returncode == 0, (script, args, r.stderr)
        return calls.read_text().splitlines()

    reload, restart = "daemon-reload", "try-restart nvml-exporter.service"
    stop = ["stop nvml-exporter.service", "disable nvml-exporter.service"]
    # dpkg: a first install is `configure` with no old version; an upgrade
    # is the old prerm `upgrade`, then the new postinst `configure OLD`.
    assert called("deb-postinst", "configure") == [reload], "a first install starts nothing"
    assert called("deb-postinst", "configure", "") == [reload]
    assert called("deb-prerm", "upgrade", "0.1.1-1") == []
    assert called("deb-postinst", "configure", "0.0.9-1") == [reload, restart]
    assert called("deb-prerm", "remove") == stop
    assert called("deb-postrm", "remove") == [reload]
    # rpm: $1 is the number of versions installed once the step is done.
    assert called("rpm-post", "1") == [reload]
    assert called("rpm-post", "2") == [reload]
    assert called("rpm-preun", "1") == [], "an upgrade does not stop it"
    assert called("rpm-postun", "1") == [reload, restart]
    assert called("rpm-preun", "0") == stop
    assert called("rpm-postun", "0") == [reload]
    # Without systemd (a container, a chroot) they call nothing.
    systemd.rmdir()
    assert called("deb-postinst", "configure", "0.0.9-1") == []
    assert called("rpm-postun", "1") == []


def extract_image(oci_dir: Path, dest: Path) -> dict:
    """Unpacks the one image of an OCI layout into dest; returns its config."""
    index = json.loads((oci_dir / "index.json").read_text())
    blob = lambda d: oci_dir / "blobs" / d.replace(":", "/")  # noqa: E731
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as t:
            t.extractall(dest, filter="fully_trusted")
    return json.loads(blob(manifest["config"]["digest"]).read_text())


def test_multiarch_image_pushed_read_back_and_runs_on_arm64(packages, registry, tmp_path):
    ref = f"{registry}/nvml-exporter:{VERSION}"
    out = run(str(REPO / "scripts/image-multiarch"), "--no-build", "--profile", PROFILE,
              "--tag", "localhost/nvml-exporter:release-test",
              "--push", f"docker://{ref}", "--insecure", "--out", str(tmp_path / "sboms")).stdout
    assert f"pushed docker://{ref}" in out, out
    index = json.loads(run("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}").stdout)
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
    platforms = sorted((m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"])
    assert platforms == [("linux", "amd64"), ("linux", "arm64")], index
    lock_packages = len(re.findall(r"^\[\[package\]\]", (REPO / "Cargo.lock").read_text(), re.M))
    for arch, (_, triple) in ARCHES.items():
        oci = tmp_path / f"oci-{arch}"
        run("skopeo", "copy", "--quiet", "--src-tls-verify=false", "--override-arch", arch,
            f"docker://{ref}", f"oci:{oci}:x")
        root = tmp_path / f"root-{arch}"
        config = extract_image(oci, root)
        assert config["architecture"] == arch
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == ["/usr/bin/nvml-exporter"]
        assert "NVIDIA_DRIVER_CAPABILITIES=utility" in config["config"]["Env"]
        # The image's own binary, on the image's own libc: for arm64 under
        # qemu-user through binfmt_misc (scripts/cross registers it).
        version = run("chroot", str(root), "/usr/bin/nvml-exporter", "--version").stdout
        assert f"target:     {triple}" in version, version
        assert f"{VERSION} (revision " in version, version
        # Its SBOM inside the image and beside it: every crate of Cargo.lock.
        bom = json.loads((root / "usr/share/doc/nvml-exporter/sbom.cdx.json").read_text())
        assert {"name": "cargo:target", "value": triple} in bom["metadata"]["component"]["properties"]
        assert 1 + len(bom["components"]) == lock_packages
        assert json.loads((tmp_path / "sboms" / f"sbom-{arch}.cdx.json").read_text())["metadata"] == bom["metadata"]

