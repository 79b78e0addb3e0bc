"""Each dcgm-exporter generation's counters file, served by
`nvml-exporter --compat.dcgm=<generation>` on a fleet mixing an HBM board
(H100) with GDDR boards (L4, L40S: no memory temperature sensor, no
NVLink), scraped by a real Prometheus, queried as dashboards and alert
rules query dcgm-exporter.

The expected series per board and generation come from what dcgm-exporter
prints there (docs/migrating-from-dcgm-exporter.md, "What DCGM prints where
NVML has no value", each row with its DCGM / dcgm-exporter source), not
from this exporter's output:

- 3.4 (its own default file, tag 3.3.5-3.4.0): `DCGM_FI_DEV_XID_ERRORS` 0
  with `err_msg="No Error"` on every GPU before an XID (NVIDIA/dcgm-exporter
  #700, #646), `DCGM_FI_DEV_MEMORY_TEMP` 0 on a board without the sensor
  (#460), `Hostname`, no `pci_bus_id`;
- 4.8 (the default file of 4.4.2-4.7.1 to 4.5.3-4.8.2): no XID series
  before an XID, no memory temperature on GDDR, `hostname`;
- 4.9 (its default set; its own file could not be read): the same under
  DCGM 4.7's names;
- 4.10 (a user's file: 4.10's renamed rates, the XID counter and `label`
  rows): the rates under their new names, the label rows as labels.

Every generation: `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` (4.9 on:
`..._NVLINK_THROUGHPUT_BYTES_PER_SECOND`) 0 on a GPU without NVLink."""

from __future__ import annotations

from pathlib import Path

import pytest

from promstack import Exporter, Prometheus, wait_until

HERE = Path(__file__).resolve().parent
COUNTERS = HERE / "compat" / "dcgm-exporter-counters"
FLEET = '[[gpu]]\nmodel = "h100-sxm5-80gb"\n[[gpu]]\nmodel = "l4"\n[[gpu]]\nmodel = "l40s"\n'
HBM = "NVIDIA H100 80GB HBM3"
GDDR = ["NVIDIA L4", "NVIDIA L40S"]

USER_4_10 = """\
# A 4.10 user's file: 4.10's names, the XID counter, label rows.
DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, GPU temperature (in C).
DCGM_FI_DEV_MEMORY_TEMP_CELSIUS, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization.
DCGM_FI_DEV_XID_ERROR, gauge, Value of the last XID error encountered.
DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, PCIe bytes sent per second.
DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND, gauge, PCIe bytes received per second.
DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND, gauge, NVLink bytes sent per second.
DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND, counter, NVLink throughput.
DCGM_EXP_XID_ERRORS_TOTAL, counter, XIDs by code.
DCGM_FI_DEV_NAME, label, Device name.
DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver version.
DCGM_FI_CUDA_DRIVER_VERSION, label, CUDA driver version.
DCGM_FI_DEV_MINOR_NUMBER, label, Minor number.
"""

# generation -> (counters file or None for the default set, names used).
GENERATIONS = {
    "3.4": (COUNTERS / "3.3.5-3.4.0_default-counters.csv",
            ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")),
    "4.8": (COUNTERS / "4.4.2-4.7.1_default-counters.csv",
            ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")),
    "4.9": (None, ("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
                   "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND")),
    "4.10": ("user", ("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
                      "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND")),
}


def job(generation: str) -> str:
    return "dcgm-" + generation.replace(".", "-")


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    work = tmp_path_factory.mktemp("dcgm-generations")
    fleet = work / "fleet.toml"
    fleet.write_text(FLEET)
    user = work / "counters-4.10.csv"
    user.write_text(USER_4_10)
    exporters = {}
    prometheus = None
    try:
        for generation, (csv, _) in GENERATIONS.items():
            extra = [f"--compat.dcgm={generation}", "--compat.dcgm.only",
                     "--compat.dcgm.hostname", "mixed-node"]
            if csv:
                extra += ["--config.file", str(user if csv == "user" else csv)]
            exporters[generation] = Exporter(work, str(fleet), interval="1s", extra=extra,
                                             name=f"exporter-{job(generation)}")
        for e in exporters.values():
            e.wait_ready()
        prometheus = Prometheus(work, {job(g): [e.address] for g, e in exporters.items()}, interval="1s")
        prometheus.wait_ready()
        prometheus.wait_targets_up(len(exporters))
        # Each job's temperatures of all three GPUs, and the 4.10 rates
        # (two polls), are in the store.
        for g in GENERATIONS:
            name = "DCGM_FI_DEV_GPU_TEMP_CELSIUS" if g in ("4.9", "4.10") else "DCGM_FI_DEV_GPU_TEMP"
            wait_until(lambda: len(prometheus.query(f'{name}{{job="{job(g)}"}}')) == 3, 30,
                       f"{g}: three GPUs in Prometheus")
        wait_until(lambda: len(prometheus.query('DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND{job="dcgm-4-10"}')) == 3,
                   30, "the 4.10 rates")
        yield prometheus
    finally:
        if prometheus:
            prometheus.stop()
        for e in exporters.values():
            e.stop()


def by_model(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["modelName"]: float(r["value"][1]) for r in result}


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_dcgm_s_zeros_and_blanks_by_board(prom, generation):
    xid, memory_temp, nvlink = GENERATIONS[generation][1]
    old = generation == "3.4"
    j = job(generation)
    temps = by_model(prom.query(f'{memory_temp}{{job="{j}"}}'))
    assert temps.get(HBM, 0) > 0, temps
    for model in GDDR:
        assert temps.get(model) == (0.0 if old else None), (generation, model, temps)
    links = by_model(prom.query(f'{nvlink}{{job="{j}"}}'))
    for model in GDDR:
        assert links.get(model) == 0.0, (generation, model, links)
    xids = prom.query(f'{xid}{{job="{j}"}}')
    if old:
        assert sorted(r["metric"]["modelName"] for r in xids) == sorted([HBM, *GDDR]), xids
        assert all(r["value"][1] == "0" and r["metric"]["err_msg"] == "No Error"
                   and r["metric"]["err_code"] == "0" for r in xids), xids
    else:
        assert xids == [], xids
    # The queries a user reported answering nothing: dcgm-exporter 3.4
    # answers them with 0, later releases with nothing.
    for expr in (f'avg({xid}{{job="{j}"}})', f'max(changes({xid}{{job="{j}"}}[1h]))'):
        answer = prom.query(expr)
        if old:
            assert [float(r["value"][1]) for r in answer] == [0.0], (expr, answer)
        else:
            assert answer == [], (expr, answer)


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_host_and_bus_labels_are_the_generation_s(prom, generation):
    name = "DCGM_FI_DEV_GPU_TEMP_CELSIUS" if generation in ("4.9", "4.10") else "DCGM_FI_DEV_GPU_TEMP"
    series = prom.query(f'{name}{{job="{job(generation)}"}}')
    host = "Hostname" if generation == "3.4" else "hostname"
    assert len(series) == 3
    for s in series:
        assert s["metric"].get(host) == "mixed-node", s
        assert ("pci_bus_id" in s["metric"]) == (generation != "3.4"), s


def test_a_4_10_user_file_with_label_rows_and_renamed_rates(prom):
    j = job("4.10")
    temps = prom.query(f'DCGM_FI_DEV_GPU_TEMP_CELSIUS{{job="{j}"}}')
    for s in temps:
        m = s["metric"]
        # label rows: named as the file names the field, DCGM's values.
        assert m["DCGM_FI_DEV_NAME"] == m["modelName"], m
        assert m["DCGM_FI_SYSTEM_DRIVER_VERSION"].count(".") >= 1, m
        cuda = int(m["DCGM_FI_CUDA_DRIVER_VERSION"])
        assert cuda >= 11000 and cuda % 10 == 0, m
        assert m["DCGM_FI_DEV_MINOR_NUMBER"].isdigit(), m
    # A dashboard grouping by a label row.
    groups = prom.query(f'count by (DCGM_FI_DEV_NAME) (DCGM_FI_DEV_GPU_TEMP_CELSIUS{{job="{j}"}})')
    assert sorted(g["metric"]["DCGM_FI_DEV_NAME"] for g in groups) == sorted([HBM, *GDDR])
    # 4.10's names of the rates, one per GPU; the NVLink rate only where
    # there is NVLink (DCGM's profiling field has no value without it).
    pcie = by_model(prom.query(f'DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND{{job="{j}"}}'))
    assert sorted(pcie) == sorted([HBM, *GDDR]) and all(v >= 0 for v in pcie.values()), pcie
    assert prom.query(f'DCGM_FI_PROF_PCIE_TX_BYTES{{job="{j}"}}') == []
    nvlink = by_model(prom.query(f'DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND{{job="{j}"}}'))
    assert set(nvlink) <= {HBM}, nvlink
    # The XID counter: no series on a healthy fleet (none before a code's
    # first XID), so an increase() alert is quiet.
    assert prom.query(f'DCGM_EXP_XID_ERRORS_TOTAL{{job="{j}"}}') == []
    assert prom.query(f'sum(increase(DCGM_EXP_XID_ERRORS_TOTAL{{job="{j}"}}[5m])) > 0') == []
