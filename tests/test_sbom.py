"""scripts/sbom: the CycloneDX SBOM a release attaches lists every package of
Cargo.lock, each once, with the checksum the lock file pins, and a
dependency graph whose every reference is a listed package."""
import json
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sbom(*args: str) -> dict:
    out = subprocess.run([str(ROOT / "scripts/sbom"), *args], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_sbom_lists_every_crate_of_cargo_lock_once_with_its_checksum():
    bom = sbom("--target", "aarch64-unknown-linux-gnu")
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())["package"]
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    subject = bom["metadata"]["component"]
    assert subject["name"] == "nvml-exporter"
    assert {"name": "cargo:target", "value": "aarch64-unknown-linux-gnu"} in subject["properties"]
    listed = [subject, *bom["components"]]
    refs = [c["bom-ref"] for c in listed]
    assert len(refs) == len(set(refs)), "bom-refs must be unique"
    assert sorted((c["name"], c["version"]) for c in listed) == \
        sorted((p["name"], p["version"]) for p in lock)
    by_ref = {c["bom-ref"]: c for c in listed}
    for p in lock:
        c = by_ref[f"pkg:cargo/{p['name']}@{p['version']}"]
        if "checksum" in p:
            assert c["hashes"] == [{"alg": "SHA-256", "content": p["checksum"]}], p["name"]
        else:
            assert p.get("source") is None, f"{p['name']}: a registry crate without a checksum"
    for dep in bom["dependencies"]:
        assert dep["ref"] in by_ref
        assert all(d in by_ref for d in dep["dependsOn"]), dep["ref"]
    # Licenses come through (cargo deny holds them to deny.toml).
    assert by_ref["pkg:cargo/serde@" + next(p["version"] for p in lock if p["name"] == "serde")]["licenses"]
