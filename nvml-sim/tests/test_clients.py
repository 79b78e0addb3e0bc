"""Independent NVML clients on the simulated driver.

pynvml (nvidia-ml-py), gpustat and nvitop load the built libnvml_sim.so as
`libnvidia-ml.so.1` from LD_LIBRARY_PATH, unchanged, and must show the
simulated fleet; pynvml and nvml-wrapper must read the same values. Each
client runs in its own process, since the fleet is per process.
"""

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
LIB = TARGET / "libnvml_sim.so"
CLI = TARGET / "nvml-sim"
DUMP = TARGET / "examples" / "dump"


def client_env(libdir, scenario, **extra):
    env = dict(os.environ)
    for k in ("NVML_SIM_CONTROL", "NVML_SIM_TIME_SCALE", "NVML_SIM_CALL_LOG", "NVML_SIM_DRIVER"):
        env.pop(k, None)
    env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
    env["NVML_SIM_SCENARIO"] = scenario
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(libdir, scenario, code, **extra):
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=client_env(libdir, scenario, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


PYNVML_DUMP = r"""
import json, pynvml as p
p.nvmlInit()
def maybe(f, *a):
    try:
        return f(*a)
    except p.NVMLError_NotSupported:
        return None
out = {"driver_version": p.nvmlSystemGetDriverVersion(), "count": p.nvmlDeviceGetCount(), "gpu": []}
for i in range(out["count"]):
    h = p.nvmlDeviceGetHandleByIndex(i)
    m = p.nvmlDeviceGetMemoryInfo(h, version=p.nvmlMemory_v2)
    g = {
        "index": i,
        "name": p.nvmlDeviceGetName(h),
        "uuid": p.nvmlDeviceGetUUID(h),
        "bus_id": p.nvmlDeviceGetPciInfo(h).busId,
        "memory_total": m.total,
        "memory_used": m.used,
        "memory_free": m.free,
        "power_limit": p.nvmlDeviceGetPowerManagementLimit(h),
        "power_default_limit": p.nvmlDeviceGetPowerManagementDefaultLimit(h),
        "enforced_power_limit": p.nvmlDeviceGetEnforcedPowerLimit(h),
    }
    g["power_min_limit"], g["power_max_limit"] = p.nvmlDeviceGetPowerManagementLimitConstraints(h)
    serial = maybe(p.nvmlDeviceGetSerial, h)
    if serial is not None:
        g["serial"] = serial
    ecc = maybe(p.nvmlDeviceGetEccMode, h)
    if ecc is not None:
        g["ecc_enabled"] = bool(ecc[0])
        for e, en in ((0, "corrected"), (1, "uncorrected")):
            for c, cn in ((0, "volatile"), (1, "aggregate")):
                g[f"ecc_{en}_{cn}"] = p.nvmlDeviceGetTotalEccErrors(h, e, c)
    mig = maybe(p.nvmlDeviceGetMigMode, h)
    if mig is not None:
        g["mig_current"] = mig[0]
        g["mig"] = []
        for j in range(p.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = p.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except p.NVMLError_NotFound:
                continue
            g["mig"].append({"name": p.nvmlDeviceGetName(mh), "uuid": p.nvmlDeviceGetUUID(mh),
                             "memory_total": p.nvmlDeviceGetMemoryInfo(mh).total})
    out["gpu"].append(g)
p.nvmlShutdown()
print(json.dumps(out))
"""


@pytest.mark.parametrize("scenario", ["dgx-h100", "dgx-a100", "workstation", "large"])
def test_pynvml_and_nvml_wrapper_read_the_same_values(libdir, scenario):
    ours = run_python(libdir, scenario, PYNVML_DUMP)
    wrapper = subprocess.run(
        [str(DUMP), str(LIB)],
        env=client_env(libdir, scenario),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    theirs = tomllib.loads(wrapper.stdout)
    assert ours == theirs
    assert ours["count"] == {"dgx-h100": 8, "dgx-a100": 8, "workstation": 1, "large": 16}[scenario]


def test_pynvml_sees_the_dgx_h100_fleet(libdir):
    code = r"""
import json, pynvml as p
p.nvmlInit()
out = {}
h0 = p.nvmlDeviceGetHandleByIndex(0)
out["mig0"] = [p.nvmlDeviceGetName(p.nvmlDeviceGetMigDeviceHandleByIndex(h0, j)) for j in range(7)]
try:
    p.nvmlDeviceGetUtilizationRates(h0)
    out["util0"] = "ok"
except p.NVMLError_NotSupported:
    out["util0"] = "not supported"
procs = p.nvmlDeviceGetComputeRunningProcesses(h0)
out["procs0"] = [(x.pid, x.gpuInstanceId, x.computeInstanceId) for x in procs]
h2 = p.nvmlDeviceGetHandleByIndex(2)
out["util2"] = p.nvmlDeviceGetUtilizationRates(h2).gpu
out["pstate7"] = p.nvmlDeviceGetPerformanceState(p.nvmlDeviceGetHandleByIndex(7))
out["energy_grows"] = p.nvmlDeviceGetTotalEnergyConsumption(h2) < (time := __import__("time").sleep(0.2) or p.nvmlDeviceGetTotalEnergyConsumption(h2))
out["arch"] = p.nvmlDeviceGetArchitecture(h2)
out["nvlink"] = p.nvmlDeviceGetNvLinkState(h2, 0)
p.nvmlShutdown()
print(json.dumps(out))
"""
    got = run_python(libdir, "dgx-h100", code)
    assert got["mig0"] == ["NVIDIA H100 80GB HBM3 MIG 1g.10gb"] * 7
    assert got["util0"] == "not supported"
    assert got["procs0"] == [[41001, 7, 0], [41002, 8, 0], [41003, 12, 0]]
    assert 50 <= got["util2"] <= 100
    assert got["pstate7"] == 8
    assert got["energy_grows"] is True
    assert got["arch"] == 9  # NVML_DEVICE_ARCH_HOPPER
    assert got["nvlink"] == 1


def test_pynvml_workstation_lacks_datacenter_features(libdir):
    code = r"""
import json, pynvml as p
p.nvmlInit()
h = p.nvmlDeviceGetHandleByIndex(0)
out = {}
for name, f in [("ecc", lambda: p.nvmlDeviceGetEccMode(h)), ("mig", lambda: p.nvmlDeviceGetMigMode(h)),
                ("nvlink", lambda: p.nvmlDeviceGetNvLinkState(h, 0)),
                ("memtemp", lambda: p.nvmlDeviceGetFieldValues(h, [p.NVML_FI_DEV_MEMORY_TEMP])[0].nvmlReturn)]:
    try:
        out[name] = f()
    except p.NVMLError_NotSupported:
        out[name] = "not supported"
out["display"] = p.nvmlDeviceGetDisplayActive(h)
out["fan"] = p.nvmlDeviceGetFanSpeed(h)
out["graphics"] = [x.pid for x in p.nvmlDeviceGetGraphicsRunningProcesses(h)]
p.nvmlShutdown()
print(json.dumps(out))
"""
    got = run_python(libdir, "workstation", code)
    assert got["ecc"] == got["mig"] == got["nvlink"] == "not supported"
    assert got["memtemp"] == 3  # NVML_ERROR_NOT_SUPPORTED in the entry
    assert got["display"] == 1
    assert 0 < got["fan"] <= 100
    assert got["graphics"] == [2301, 2755]


def test_gpustat_shows_the_fleet(libdir):
    out = subprocess.run(
        [sys.executable, "-m", "gpustat", "--json"],
        env=client_env(libdir, "dgx-h100"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    stat = json.loads(out.stdout)
    assert stat["driver_version"] == "560.35.03"
    gpus = stat["gpus"]
    assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    # MIG-enabled GPUs have no utilization; the others do.
    assert gpus[0]["utilization.gpu"] is None
    assert gpus[2]["utilization.gpu"] > 50
    assert gpus[7]["utilization.gpu"] == 0
    assert gpus[2]["memory.used"] > 60000
    assert gpus[2]["enforced.power.limit"] == 700
    assert gpus[7]["power.draw"] < gpus[2]["power.draw"]


def test_nvitop_one_shot_shows_gpus_and_mig_devices(libdir):
    out = subprocess.run(
        [sys.executable, "-m", "nvitop", "--once"],
        env=client_env(libdir, "dgx-h100"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Driver Version: 560.35.03" in text
    assert text.count("H100 80GB HBM3") == 8
    assert text.count("1g.10gb") == 8  # seven on GPU 0, one on GPU 1
    assert "3g.40gb" in text and "2g.20gb" in text
    assert "Traceback" not in out.stderr


def test_nvitop_api_reads_devices(libdir):
    code = r"""
import json
from nvitop import Device
devs = Device.all()
out = {"count": len(devs), "names": [d.name() for d in devs],
       "mig0": [m.name() for m in devs[0].mig_devices()],
       "temp7": devs[7].temperature(), "mem2": devs[2].memory_used()}
print(json.dumps(out))
"""
    got = run_python(libdir, "dgx-a100", code)
    assert got["count"] == 8
    assert got["names"] == ["NVIDIA A100-SXM4-80GB"] * 8
    assert got["mig0"] == ["NVIDIA A100-SXM4-80GB MIG 2g.20gb"] * 3 + ["NVIDIA A100-SXM4-80GB MIG 1g.10gb"]
    assert 20 < got["temp7"] < 60
    assert got["mem2"] > 60000 * 1024 * 1024


def test_bad_scenario_is_reported_on_stderr(libdir, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n\n[[gpu]]\nmodel = "h200-sxm"\n')
    code = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
print(json.dumps({"rc": lib.nvmlInit_v2()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=client_env(libdir, str(bad)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rc"] == 999  # NVML_ERROR_UNKNOWN
    assert f"{bad}:4: unknown GPU model `h200-sxm`" in out.stderr


def test_cli_injects_an_xid_that_pynvml_receives(libdir, tmp_path):
    sock = tmp_path / "control.sock"
    code = r"""
import json, sys, pynvml as p
p.nvmlInit()
h = p.nvmlDeviceGetHandleByIndex(4)
s = p.nvmlEventSetCreate()
p.nvmlDeviceRegisterEvents(h, p.nvmlEventTypeXidCriticalError, s)
print("ready", flush=True)
d = p.nvmlEventSetWait_v2(s, 20000)
print(json.dumps({"xid": d.eventData, "gi": d.gpuInstanceId, "type": d.eventType}), flush=True)
p.nvmlEventSetFree(s)
p.nvmlShutdown()
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=client_env(libdir, "dgx-h100", NVML_SIM_CONTROL=sock),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        cli = subprocess.run(
            [str(CLI), "--socket", str(sock), "xid", "--gpu", "4", "--code", "43"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0, cli.stderr
        got = json.loads(proc.stdout.readline())
        assert got == {"xid": 43, "gi": 0xFFFFFFFF, "type": 8}
        # The raw protocol, as documented: one TOML inline table per line.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(sock))
            c.sendall(b'{ action = "status" }\n')
            reply = c.makefile().readline()
        assert reply.startswith("ok {"), reply
        assert 'scenario = "dgx-h100"' in reply
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr.read()


def test_1g_20gb_is_the_rev2_single_slice_profile(libdir):
    """`NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2` is the memory-doubled single
    slice (`1g.20gb` on 80 GB parts, 4 instances); REV1 is `1g.10gb+me`,
    which the simulated boards do not offer."""
    code = r"""
import json, pynvml as p
p.nvmlInit()
h = p.nvmlDeviceGetHandleByIndex(0)
def info(profile):
    try:
        i = p.nvmlDeviceGetGpuInstanceProfileInfo(h, profile)
        return [i.id, i.sliceCount, i.instanceCount, i.memorySizeMB]
    except p.NVMLError as e:
        return e.value
print(json.dumps({"rev1": info(p.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1),
                  "rev2": info(p.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)}))
"""
    for scenario in ("dgx-h100", "dgx-a100"):
        got = run_python(libdir, scenario, code)
        assert got["rev1"] == 3, (scenario, got)  # NOT_SUPPORTED
        assert got["rev2"][:3] == [15, 1, 4], scenario
        assert 19000 < got["rev2"][3] < 21000, scenario


PINNED = r"""
import json, pynvml as p
p.nvmlInit()
def na(f, *a):
    try:
        return f(*a)
    except p.NVMLError_NotSupported:
        return "N/A"
h = p.nvmlDeviceGetHandleByIndex(0)
migs = []
for i in range(p.nvmlDeviceGetMaxMigDeviceCount(h)):
    try:
        m = p.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
    except p.NVMLError_NotFound:
        break
    migs.append([p.nvmlDeviceGetName(m), p.nvmlDeviceGetGpuInstanceId(m), p.nvmlDeviceGetComputeInstanceId(m)])
print(json.dumps({
    "driver": p.nvmlSystemGetDriverVersion(),
    "cuda": p.nvmlSystemGetCudaDriverVersion(),
    "name": p.nvmlDeviceGetName(h),
    "vbios": p.nvmlDeviceGetVbiosVersion(h),
    "bus": p.nvmlDeviceGetPciInfo(h).busId,
    "uuids": [p.nvmlDeviceGetUUID(p.nvmlDeviceGetHandleByIndex(i)) for i in range(3)],
    "minor": na(p.nvmlDeviceGetMinorNumber, h),
    "compute_mode": p.nvmlDeviceGetComputeMode(h),
    "ecc": p.nvmlDeviceGetEccMode(h),
    "temp": p.nvmlDeviceGetTemperature(h, p.NVML_TEMPERATURE_GPU),
    "power": p.nvmlDeviceGetPowerUsage(h),
    "limit": p.nvmlDeviceGetEnforcedPowerLimit(h),
    "pstate": p.nvmlDeviceGetPerformanceState(h),
    "replays": p.nvmlDeviceGetPcieReplayCounter(h),
    "width": p.nvmlDeviceGetCurrPcieLinkWidth(h),
    "migs": migs,
}))
"""


def test_pynvml_reads_a_pinned_host_as_written(libdir):
    """An independent client reads the scenario that uses every per-GPU
    key (identity, settings, pinned readings, counters, MIG placed by id
    with two compute instances) as the file says."""
    path = Path(__file__).parent / "scenario_corpus" / "pinned-host.toml"
    got = run_python(libdir, str(path), PINNED)
    assert (got["driver"], got["cuda"]) == ("610.57.04", 13030)
    assert got["name"] == "NVIDIA H100 NVL"
    assert got["vbios"] == "96.00.A5.00.01"
    assert got["bus"] == "00000000:00:09.0"
    # count = 2 with one masked UUID: the second GPU got its own.
    assert got["uuids"][0] == "GPU-00000000-0000-0000-0000-000000000000"
    assert len(set(got["uuids"])) == 3
    assert got["minor"] == "N/A"
    assert got["compute_mode"] == 3  # exclusive process
    assert got["ecc"] == [1, 0]
    assert (got["temp"], got["power"], got["limit"], got["pstate"]) == (41, 69850, 350000, 8)
    assert (got["replays"], got["width"]) == (9, 8)
    assert got["migs"] == [
        ["NVIDIA H100 NVL MIG 1c.3g.40gb", 2, 0],
        ["NVIDIA H100 NVL MIG 2c.3g.40gb", 2, 1],
        ["NVIDIA H100 NVL MIG 2g.20gb", 3, 0],
        ["NVIDIA H100 NVL MIG 1g.10gb", 9, 0],
    ]
