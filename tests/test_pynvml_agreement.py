"""The exporter and an independent NVML client agree.

The real nvml-exporter binary runs on a simulated fleet; nvidia-ml-py
(pynvml) loads the same simulated driver as `libnvidia-ml.so.1`, unchanged,
in its own process, on the same scenario. Static values must be equal:
identity strings, memory total, power limits, ECC mode and counters,
temperature thresholds, MIG devices. Where pynvml gets NOT_SUPPORTED, the
exporter must have no series at all (absent, never 0).
"""

import json
import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from promstack import SIM_VARS, Exporter, http_get, sim_listing


def clean_env():
    env = dict(os.environ)
    for k in SIM_VARS:
        env.pop(k, None)
    return env


PYNVML_READ = r"""
import json, pynvml as p
p.nvmlInit()
def maybe(f, *a):
    try:
        return f(*a)
    except p.NVMLError_NotSupported:
        return None
def s(v):
    return v.decode() if isinstance(v, bytes) else v
out = {"driver_version": s(p.nvmlSystemGetDriverVersion()), "gpus": []}
for i in range(p.nvmlDeviceGetCount()):
    h = p.nvmlDeviceGetHandleByIndex(i)
    g = {
        "index": str(i),
        "name": s(p.nvmlDeviceGetName(h)),
        "uuid": s(p.nvmlDeviceGetUUID(h)),
        "pci_bus_id": s(p.nvmlDeviceGetPciInfo(h).busId),
        "serial": maybe(lambda: s(p.nvmlDeviceGetSerial(h))),
        "vbios_version": s(p.nvmlDeviceGetVbiosVersion(h)),
        "compute_capability": "%d.%d" % p.nvmlDeviceGetCudaComputeCapability(h),
        "memory_total": p.nvmlDeviceGetMemoryInfo(h).total,
        "power_limit": {
            "enforced": p.nvmlDeviceGetEnforcedPowerLimit(h),
            "management": p.nvmlDeviceGetPowerManagementLimit(h),
            "default": p.nvmlDeviceGetPowerManagementDefaultLimit(h),
            "min": p.nvmlDeviceGetPowerManagementLimitConstraints(h)[0],
            "max": p.nvmlDeviceGetPowerManagementLimitConstraints(h)[1],
        },
        "thresholds": {
            "shutdown": maybe(p.nvmlDeviceGetTemperatureThreshold, h, p.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            "slowdown": maybe(p.nvmlDeviceGetTemperatureThreshold, h, p.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            "memory_max": maybe(p.nvmlDeviceGetTemperatureThreshold, h, p.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
            "gpu_max": maybe(p.nvmlDeviceGetTemperatureThreshold, h, p.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        },
        "ecc_mode": maybe(p.nvmlDeviceGetEccMode, h),
        "ecc": None,
        "mig_mode": maybe(p.nvmlDeviceGetMigMode, h),
        "mig": [],
    }
    if g["ecc_mode"] is not None:
        g["ecc"] = {}
        for err, err_name in ((p.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"),
                              (p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected")):
            for scope, scope_name in ((p.NVML_VOLATILE_ECC, "volatile"),
                                      (p.NVML_AGGREGATE_ECC, "aggregate")):
                g["ecc"][err_name + "/" + scope_name] = p.nvmlDeviceGetTotalEccErrors(h, err, scope)
    if g["mig_mode"] and g["mig_mode"][0]:
        for m in range(p.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = p.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
            except p.NVMLError_NotFound:
                continue
            g["mig"].append([
                str(p.nvmlDeviceGetGpuInstanceId(mh)),
                str(p.nvmlDeviceGetComputeInstanceId(mh)),
                s(p.nvmlDeviceGetUUID(mh)),
            ])
    out["gpus"].append(g)
print(json.dumps(out))
"""


def pynvml_view(libdir, scenario, driver=None):
    env = clean_env()
    if driver:
        env["NVML_SIM_DRIVER"] = driver
    env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
    env["NVML_SIM_SCENARIO"] = scenario
    out = subprocess.run(
        [sys.executable, "-c", PYNVML_READ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def series(samples, name, gpu, **labels):
    return [
        s
        for s in samples
        if s.name == name
        and s.labels.get("gpu") == gpu
        and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(samples, name, gpu, **labels):
    found = series(samples, name, gpu, **labels)
    assert len(found) == 1, f"{name} gpu={gpu} {labels}: {len(found)} series"
    return found[0].value


# Every fleet on the default driver, and the dgx-h100 fleet on every other
# driver behaviour nvml-sim models (`nvml-sim drivers`, nvml-sim/README.md).
DEFAULT_DRIVER = "560.35.03"
CASES = [(s, None) for s in ("dgx-h100", "dgx-a100", "workstation")] + [
    ("dgx-h100", d) for d in sim_listing("drivers") if d != DEFAULT_DRIVER
]


@pytest.mark.parametrize("scenario,driver", CASES)
def test_exporter_agrees_with_pynvml(libdir, scenario, driver, tmp_path):
    nv = pynvml_view(libdir, scenario, driver)
    if driver:
        assert nv["driver_version"] == driver
    exporter = Exporter(tmp_path, scenario, interval="200ms",
                        env={"NVML_SIM_DRIVER": driver} if driver else None)
    try:
        exporter.wait_ready()
        status, body = http_get(f"http://{exporter.address}/metrics")
        assert status == 200
    finally:
        exporter.stop()
    samples = [s for fam in text_string_to_metric_families(body.decode()) for s in fam.samples]

    driver = [s for s in samples if s.name == "nvidia_gpu_driver_info"]
    assert driver[0].labels["driver_version"] == nv["driver_version"]
    infos = {s.labels["gpu"]: s.labels for s in samples if s.name == "nvidia_gpu_info"}
    assert sorted(infos, key=int) == [g["index"] for g in nv["gpus"]]

    for g in nv["gpus"]:
        i = g["index"]
        info = infos[i]
        for key in ("name", "uuid", "pci_bus_id", "serial", "vbios_version", "compute_capability"):
            assert info.get(key) == g[key], f"gpu {i} {key}"

        assert value(samples, "nvidia_gpu_memory_total_bytes", i) == g["memory_total"]

        for limit, milliwatts in g["power_limit"].items():
            got = value(samples, "nvidia_gpu_power_limit_watts", i, limit=limit)
            assert got == pytest.approx(milliwatts / 1000), f"gpu {i} {limit} power limit"

        for threshold, celsius in g["thresholds"].items():
            found = series(samples, "nvidia_gpu_temperature_threshold_celsius", i, threshold=threshold)
            if celsius is None:
                assert not found, f"gpu {i} {threshold}: absent in NVML, present in exporter"
            else:
                assert [s.value for s in found] == [celsius], f"gpu {i} {threshold}"

        ecc_enabled = series(samples, "nvidia_gpu_ecc_enabled", i)
        ecc_counts = series(samples, "nvidia_gpu_ecc_errors_total", i)
        if g["ecc_mode"] is None:
            assert not ecc_enabled and not ecc_counts, f"gpu {i}: ECC not supported, yet exported"
        else:
            current, pending = g["ecc_mode"]
            assert value(samples, "nvidia_gpu_ecc_enabled", i, state="current") == current
            assert value(samples, "nvidia_gpu_ecc_enabled", i, state="pending") == pending
            for key, count in g["ecc"].items():
                err, scope = key.split("/")
                got = value(samples, "nvidia_gpu_ecc_errors_total", i, error=err, scope=scope)
                assert got == count, f"gpu {i} ecc {key}"

        mig_enabled = series(samples, "nvidia_gpu_mig_enabled", i)
        if g["mig_mode"] is None:
            assert not mig_enabled, f"gpu {i}: MIG not supported, yet exported"
        else:
            current, pending = g["mig_mode"]
            assert value(samples, "nvidia_gpu_mig_enabled", i, state="current") == current
            assert value(samples, "nvidia_gpu_mig_enabled", i, state="pending") == pending
        exported_mig = sorted(
            [s.labels["gpu_instance"], s.labels["compute_instance"], s.labels["mig_uuid"]]
            for s in series(samples, "nvidia_gpu_mig_info", i)
        )
        assert exported_mig == sorted(g["mig"]), f"gpu {i} MIG devices"
