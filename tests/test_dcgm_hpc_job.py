"""`hpc_job` on the DCGM series, from dcgm-exporter's HPC job mapping
directory (issue 38, item 5).

dcgm-exporter's --hpc-job-mapping-dir (DCGM_HPC_JOB_MAPPING_DIR) names a
directory a Slurm prolog writes: a file per GPU named by its index, from
4.5.3-4.8.2 a file per MIG GPU instance named `<gpu>.<gpu instance>`, one
job per line. Every series of a device a file names is copied once per job
with the job in `hpc_job` (NVIDIA/dcgm-exporter
`internal/pkg/transformation/hpc.go` at d5e5f51, and #602 for the MIG
names). Here the same directory is `--workloads.slurm-mapping-dir`
(dcgm-exporter's spelling accepted). The real exporter runs on a simulated
node with a MIG GPU (tests/fixtures/workloads/node.toml), the directory
changes while it runs, and Slurm's jobs reach the series within a refresh.
"""

from __future__ import annotations

from pathlib import Path

from promstack import Exporter, wait_until
from promstack import scrape_samples as scrape

NODE = Path(__file__).resolve().parent / "fixtures" / "workloads" / "node.toml"
FIELD = "DCGM_FI_DEV_GPU_TEMP"


def jobs_by_device(samples: list) -> dict[tuple, set]:
    """The hpc_job values of FIELD's series by (gpu, GPU_I_ID); a series
    without the label is None."""
    out: dict[tuple, set] = {}
    for s in samples:
        if s.name == FIELD:
            key = (s.labels["gpu"], s.labels.get("GPU_I_ID"))
            out.setdefault(key, set()).add(s.labels.get("hpc_job"))
    return out


def start(tmp_path: Path, mapping: Path, compat: str, flag: str) -> Exporter:
    # Empty host directories: the simulated pids are no processes of this
    # machine, so workload attribution finds nothing (counted), and the
    # mapping directory is the only source of jobs.
    (tmp_path / "proc").mkdir()
    (tmp_path / "host").mkdir()
    exporter = Exporter(tmp_path, str(NODE), interval="300ms", name="exporter", extra=[
        f"--compat.dcgm={compat}",
        flag, str(mapping),
        "--workloads.refresh-interval", "300ms",
        "--path.procfs", str(tmp_path / "proc"),
        "--path.rootfs", str(tmp_path / "host"),
    ])
    exporter.wait_ready()
    return exporter


def test_jobs_of_the_mapping_directory_label_each_device_s_series(tmp_path):
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("101\n102\n")
    (mapping / "3.1").write_text("job-a\n")  # MIG GPU 3, GPU instance 1
    (mapping / "3").write_text("999\n")  # a MIG GPU's own file: no instance's
    (mapping / "README").write_text("not a device\n")
    exporter = start(tmp_path, mapping, "4.8", "--hpc-job-mapping-dir")
    try:
        expected = {
            ("0", None): {"101", "102"},  # one series per job, none without
            ("1", None): {None},
            ("2", None): {None},
            ("3", "1"): {"job-a"},
            ("3", "2"): {None},
            ("4", None): {None},
        }
        samples = wait_until(lambda: (s := scrape(exporter)) and jobs_by_device(s) == expected and s,
                             20, f"hpc_job on {FIELD} as the directory maps it")
        # Every DCGM family of a mapped device is copied, and only those.
        for s in samples:
            on_gpu0 = s.labels.get("gpu") == "0"
            if s.name.startswith("DCGM_FI_") and on_gpu0:
                assert s.labels.get("hpc_job") in {"101", "102"}, s
            elif not s.name.startswith("DCGM_FI_"):
                assert "hpc_job" not in s.labels, s
        util = [s for s in samples if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.labels["gpu"] == "0"]
        assert len(util) == 2 and util[0].value == util[1].value
        # The prolog of the next job and the epilog of the last: the series
        # follow the directory within a refresh.
        (mapping / "0").unlink()
        (mapping / "1").write_text("103\n")
        expected[("0", None)] = {None}
        expected[("1", None)] = {"103"}
        wait_until(lambda: jobs_by_device(scrape(exporter)) == expected, 20,
                   "the series follow the directory")
        # A directory that goes away leaves the series unlabelled, no failure.
        for f in mapping.iterdir():
            f.unlink()
        mapping.rmdir()
        expected[("1", None)] = {None}
        expected[("3", "1")] = {None}
        wait_until(lambda: jobs_by_device(scrape(exporter)) == expected, 20,
                   "no labels without the directory")
        exporter.assert_running()
    finally:
        exporter.stop()


def test_before_4_5_3_a_mig_gpu_s_file_labels_every_instance(tmp_path):
    """dcgm-exporter before #602 matched a MIG instance's series by its GPU
    index alone: under --compat.dcgm=3.4 the GPU's file labels each of its
    instances, and `<gpu>.<gpu instance>` files name nothing."""
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "3").write_text("999\n")
    (mapping / "3.1").write_text("job-a\n")
    exporter = start(tmp_path, mapping, "3.4", "--workloads.slurm-mapping-dir")
    try:
        want = {("3", "1"): {"999"}, ("3", "2"): {"999"}}
        wait_until(lambda: {k: v for k, v in jobs_by_device(scrape(exporter)).items()
                            if k[0] == "3"} == want, 20, "GPU 3's job on both instances")
    finally:
        exporter.stop()


def test_no_dcgm_series_no_hpc_job(tmp_path):
    """Without --compat.dcgm the directory feeds the workload families only."""
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "4").write_text("201\n")
    (tmp_path / "proc").mkdir()
    exporter = Exporter(tmp_path, str(NODE), interval="300ms", name="exporter", extra=[
        "--workloads.slurm-mapping-dir", str(mapping),
        "--workloads.refresh-interval", "300ms",
        "--path.procfs", str(tmp_path / "proc"),
    ])
    try:
        exporter.wait_ready()
        samples = wait_until(lambda: (s := scrape(exporter)) and any(
            x.labels.get("slurm_job") == "201" for x in s) and s, 20, "job 201 attributed")
        assert not [s for s in samples if "hpc_job" in s.labels]
    finally:
        exporter.stop()
