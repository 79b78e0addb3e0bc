"""Driver personalities: nvml-sim presents R535 to R610 as those libraries
are, and any other real driver version with its own version strings and
the nearest modelled behaviour, to clients that know nothing of the
simulator (ctypes `dlsym`, pynvml, nvitop). Expected values come from the branches' nvml.h (NVIDIA/go-nvml
gen/nvml/nvml.h history) and field reports, as cited in nvml-sim/README.md,
written out here rather than read back from the simulator's table.
"""

import json
import subprocess
import sys

import pytest

from test_clients import client_env, run_python

SYMBOLS = [
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetSramEccErrorStatus",
    "nvmlDeviceGetProcessesUtilizationInfo",
    "nvmlDeviceGetPlatformInfo",
]

# driver -> (NVML version, CUDA driver version, exported SYMBOLS)
EXPECTED = {
    "535.104.05": ("12.535.104.05", 12020, [False, True, False, False, True, False, False, False]),
    "545.29.06": ("12.545.29.06", 12030, [False, True, False, False, True, False, False, False]),
    "550.127.05": ("12.550.127.05", 12040, [True, True, False, False, True, True, True, False]),
    "560.35.03": ("12.560.35.03", 12060, [True, True, True, False, True, True, True, False]),
    "570.133.20": ("12.570.133.20", 12080, [True, True, True, True, True, True, True, True]),
    "580.95.05": ("13.580.95.05", 13000, [True, True, True, True, True, True, True, True]),
    # Branches without a row of their own: their own strings and CUDA, the
    # nearest modelled behaviour (R535's below it, 580.82's above).
    "352.99": ("7.352.99", 7050, [False, True, False, False, True, False, False, False]),
    "418.43": ("10.418.43", 10010, [False, True, False, False, True, False, False, False]),
    "536.40": ("12.536.40", 12020, [False, True, False, False, True, False, False, False]),
    "555.58.02": ("12.555.58.02", 12050, [True, True, True, False, True, True, True, False]),
    "590.48.01": ("13.590.48.01", 13010, [True, True, True, True, True, True, True, True]),
    "610.57.04": ("13.610.57.04", 13030, [True, True, True, True, True, True, True, True]),
}

PROBE = r"""
import ctypes, json, pynvml as p
lib = ctypes.CDLL("libnvidia-ml.so.1")
present = [hasattr(lib, n) for n in %r]
p.nvmlInit()
print(json.dumps({"present": present, "driver": p.nvmlSystemGetDriverVersion(),
    "nvml": p.nvmlSystemGetNVMLVersion(), "cuda": p.nvmlSystemGetCudaDriverVersion()}))
""" % (SYMBOLS,)


@pytest.mark.parametrize("driver", sorted(EXPECTED))
def test_symbols_and_versions_follow_the_branch(libdir, driver):
    got = run_python(libdir, "dgx-h100", PROBE, NVML_SIM_DRIVER=driver)
    nvml, cuda, present = EXPECTED[driver]
    assert got["driver"] == driver
    assert got["nvml"] == nvml
    assert got["cuda"] == cuda
    assert dict(zip(SYMBOLS, got["present"])) == dict(zip(SYMBOLS, present))


def test_default_personality_is_r560(libdir):
    got = run_python(libdir, "dgx-h100", PROBE)
    assert got["driver"] == "560.35.03"
    assert got["present"] == EXPECTED["560.35.03"][2]


def scenario_with_processes(tmp_path, driver, n=20):
    procs = ",\n".join(
        f'  {{ pid = {5000 + i}, name = "worker {i}", memory_mib = {100 + i} }}' for i in range(n)
    )
    driver_line = f'driver = "{driver}"\n' if driver else ""
    path = tmp_path / "mps.toml"
    path.write_text(
        f'name = "mps"\n{driver_line}\n[[gpu]]\nmodel = "h100-sxm5-80gb"\nload = 50\n'
        f"processes = [\n{procs}\n]\n"
    )
    return path


RAW_V3 = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
n = ctypes.c_uint(0)
rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)
buf = (ctypes.c_ubyte * (n.value * 32 + 64))()
guard = bytes(buf)
rc2 = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), buf)
raw = bytes(buf)
written = max(i for i in range(len(raw)) if raw[i] != 0) + 1
print(json.dumps({"rc": rc, "rc2": rc2, "count": n.value, "written": written,
                  "pids32": [int.from_bytes(raw[i*32:i*32+4], "little") for i in range(n.value)],
                  "pids24": [int.from_bytes(raw[i*24:i*24+4], "little") for i in range(n.value)]}))
"""


def test_r535_writes_32_byte_v3_process_entries(libdir, tmp_path):
    got = run_python(libdir, str(scenario_with_processes(tmp_path, "535.104.05")), RAW_V3)
    assert (got["rc"], got["rc2"], got["count"]) == (7, 0, 20)
    assert got["pids32"] == list(range(5000, 5020))
    # 20 entries of 32 bytes: past the 480 bytes a 24-byte reader allocates.
    assert got["written"] > 20 * 24


@pytest.mark.parametrize("driver", ["550.127.05", None])
def test_r550_and_later_write_24_byte_entries(libdir, tmp_path, driver):
    got = run_python(libdir, str(scenario_with_processes(tmp_path, driver)), RAW_V3)
    assert got["pids24"] == list(range(5000, 5020))
    assert got["written"] <= 20 * 24


def test_nvitop_reads_all_20_processes_on_r535(libdir, tmp_path):
    """nvitop picks the 32-byte struct from the exported symbol set
    (ConfComputeMemSizeInfo without RunningProcessDetailList): it reads
    the R535 personality as it reads a real R535 driver."""
    code = r"""
import json
from nvitop import Device
d = Device(0)
print(json.dumps(sorted((p.pid, p.gpu_memory()) for p in d.processes().values())))
"""
    got = run_python(libdir, str(scenario_with_processes(tmp_path, "535.104.05")), code)
    assert got == [[5000 + i, (100 + i) << 20] for i in range(20)]


FIELDS = r"""
import json, pynvml as p
p.nvmlInit()
h = p.nvmlDeviceGetHandleByIndex(6)
ids = [197, 198, 226, 230, 251, 252, 253, 269, 270, 271]
vals = p.nvmlDeviceGetFieldValues(h, ids)
print(json.dumps({str(i): v.nvmlReturn for i, v in zip(ids, vals)}))
"""

# driver -> field ids answered (SUCCESS) on a thermally throttled H100
# (faults scenario GPU 6); from R570 the GPU reset status (226) answers
# NVML_ERROR_DEPRECATED (26), as a real 570.148.08 prints it; every other
# id of FIELDS is NOT_SUPPORTED (3).
FIELD_IDS = {
    "535.183.01": set(),
    "550.127.05": set(),
    "560.35.03": {197, 198, 226},
    "570.133.20": {197, 198, 230},
    "580.65.06": {197, 198, 230, 251, 252, 253},
    "580.95.05": {197, 198, 230, 269, 270, 271},
    "555.58.02": {197, 198},
    "575.57.08": {197, 198, 230, 251, 252, 253},
    "525.125.06": set(),
    "590.48.01": {197, 198, 230, 269, 270, 271},
    "595.58.03": {197, 198, 230, 269, 270, 271},
    "610.57.04": {197, 198, 230, 269, 270, 271},
}


@pytest.mark.parametrize("driver", sorted(FIELD_IDS))
def test_field_ids_exist_only_where_the_branch_defines_them(libdir, driver):
    got = run_python(libdir, "faults", FIELDS, NVML_SIM_DRIVER=driver)
    ok = {int(i) for i, rc in got.items() if rc == 0}
    assert ok == FIELD_IDS[driver]
    deprecated = {226} if int(driver[:3]) >= 570 else set()
    assert {int(i) for i, rc in got.items() if rc == 26} == deprecated
    assert all(rc == 3 for i, rc in got.items() if int(i) not in ok | deprecated)


DEPRECATED_CALLS = r"""
import json, pynvml as p
p.nvmlInit()
h = p.nvmlDeviceGetHandleByIndex(0)
calls = {
    "display_mode": lambda: p.nvmlDeviceGetDisplayMode(h),
    "applications_clock": lambda: p.nvmlDeviceGetApplicationsClock(h, p.NVML_CLOCK_GRAPHICS),
    "default_applications_clock": lambda: p.nvmlDeviceGetDefaultApplicationsClock(h, p.NVML_CLOCK_GRAPHICS),
    "power_management_mode": lambda: p.nvmlDeviceGetPowerManagementMode(h),
    "power_state": lambda: p.nvmlDeviceGetPowerState(h),
    "temperature": lambda: p.nvmlDeviceGetTemperature(h, p.NVML_TEMPERATURE_GPU),
}
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = 0
    except p.NVMLError as e:
        out[name] = e.value
print(json.dumps(out))
"""

# driver -> calls that answer NVML_ERROR_DEPRECATED (26), as nvidia-smi on
# real captures of the branch prints "Requested functionality has been
# deprecated" for them (nvml-sim/README.md cites each); the rest succeed.
DEPRECATED = {
    "570.133.20": set(),
    "580.65.06": set(),
    "580.105.08": {"display_mode"},
    "590.48.01": {"display_mode", "applications_clock", "default_applications_clock",
                  "power_management_mode", "power_state"},
    "595.91.07": {"display_mode", "applications_clock", "default_applications_clock",
                  "power_management_mode", "power_state"},
    "610.57.04": {"display_mode", "applications_clock", "default_applications_clock",
                  "power_management_mode", "power_state"},
}


@pytest.mark.parametrize("driver", sorted(DEPRECATED))
def test_deprecated_calls_answer_deprecated_as_real_captures_show(libdir, driver):
    got = run_python(libdir, "dgx-h100", DEPRECATED_CALLS, NVML_SIM_DRIVER=driver)
    assert {name for name, rc in got.items() if rc == 26} == DEPRECATED[driver], got
    assert all(rc == 0 for name, rc in got.items() if name not in DEPRECATED[driver]), got


def test_scenario_driver_key_and_env_override(libdir, tmp_path):
    path = scenario_with_processes(tmp_path, "535.104.05", n=1)
    assert run_python(libdir, str(path), PROBE)["driver"] == "535.104.05"
    got = run_python(libdir, str(path), PROBE, NVML_SIM_DRIVER="570.133.20")
    assert got["driver"] == "570.133.20"
    assert got["present"] == EXPECTED["570.133.20"][2]


@pytest.mark.parametrize(
    "setting,message",
    [
        ({"NVML_SIM_DRIVER": "R470"}, "NVML_SIM_DRIVER: driver `R470`: R470 is not a modelled branch"),
        ({"NVML_SIM_DRIVER": "banana"}, "is not a driver version like 535.183.01"),
        ({"NVML_SIM_DRIVER": "535.183.01.7"}, "is not a driver version like 535.183.01"),
    ],
)
def test_bad_driver_fails_init_with_a_message(libdir, setting, message):
    code = r"""
import ctypes, json
print(json.dumps({"rc": ctypes.CDLL("libnvidia-ml.so.1").nvmlInit_v2()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=client_env(libdir, "dgx-h100", **setting),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rc"] == 999
    assert message in out.stderr


def test_bad_driver_key_names_the_line(libdir, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ndriver = "390.x"\n\n[[gpu]]\nmodel = "h100-sxm5-80gb"\n')
    code = r"""
import ctypes, json
print(json.dumps({"rc": ctypes.CDLL("libnvidia-ml.so.1").nvmlInit_v2()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=client_env(libdir, str(bad)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(out.stdout)["rc"] == 999
    assert f"{bad}:2: driver `390.x` is not a driver version" in out.stderr


ACCESS = r"""
import json, pynvml as p
p.nvmlInit()
out = {"count": p.nvmlDeviceGetCount()}
def code(f, *a):
    try:
        f(*a)
        return 0
    except p.NVMLError as e:
        return e.value
out["handle3"] = code(p.nvmlDeviceGetHandleByIndex, 3)
h0 = p.nvmlDeviceGetHandleByIndex(0)  # MIG mode, seven 1g.10gb
out["parent_memory"] = code(p.nvmlDeviceGetMemoryInfo, h0)
out["parent_procs"] = code(p.nvmlDeviceGetComputeRunningProcesses, h0)
mig = p.nvmlDeviceGetMigDeviceHandleByIndex(h0, 0)
out["mig_memory"] = code(p.nvmlDeviceGetMemoryInfo, mig)
out["gpu2_memory"] = code(p.nvmlDeviceGetMemoryInfo, p.nvmlDeviceGetHandleByIndex(2))
print(json.dumps(out))
"""


def test_denied_and_unprivileged_callers(libdir, tmp_path):
    path = tmp_path / "restricted.toml"
    path.write_text('name = "restricted"\nbase = "dgx-h100"\ndenied = [3]\nprivileged = false\n')
    got = run_python(libdir, str(path), ACCESS)
    assert got == {"count": 8, "handle3": 4, "parent_memory": 4, "parent_procs": 4,
                   "mig_memory": 0, "gpu2_memory": 0}
    # A privileged caller gets the aggregates.
    got = run_python(libdir, "dgx-h100", ACCESS)
    assert (got["handle3"], got["parent_memory"], got["parent_procs"]) == (0, 0, 0)


EVENTS = r"""
import json, time, pynvml as p
p.nvmlInit()
s = p.nvmlEventSetCreate()
for i in (0, 2, 4):
    p.nvmlDeviceRegisterEvents(p.nvmlDeviceGetHandleByIndex(i), p.nvmlEventTypeXidCriticalError, s)
got = []
deadline = time.time() + 20
while time.time() < deadline and len(got) < 4:
    try:
        e = p.nvmlEventSetWait_v2(s, 500)
        got.append(["xid", e.eventData, e.gpuInstanceId])
    except p.NVMLError as err:
        if err.value == p.NVML_ERROR_TIMEOUT:
            continue
        got.append(["error", err.value, None])
print(json.dumps(got))
"""


@pytest.mark.parametrize("privileged", [True, False])
def test_event_waits_follow_privilege_and_lost_gpus(libdir, tmp_path, privileged):
    path = tmp_path / "events.toml"
    path.write_text(
        f'name = "events"\nbase = "dgx-h100"\nprivileged = {str(privileged).lower()}\n\n'
        '[[timeline]]\nat = 20\naction = "xid"\ngpu = 0\ncode = 31\ngpu_instance = 7\n\n'
        '[[timeline]]\nat = 21\naction = "xid"\ngpu = 4\ncode = 43\n\n'
        '[[timeline]]\nat = 22\naction = "lose"\ngpu = 2\n'
    )
    got = run_python(libdir, str(path), EVENTS, NVML_SIM_TIME_SCALE=10)
    first = [["xid", 31, 7]] if privileged else []
    # After GPU 2 fell off the bus, every wait says so (15: GPU_IS_LOST).
    assert got[: len(first) + 3] == first + [["xid", 43, 0xFFFFFFFF], ["error", 15, None], ["error", 15, None]]
