"""End to end: the exporter on the simulated `faults` fleet, a real
Prometheus evaluating alerts/*.rules.yml, a real Alertmanager routing with
alerts/alertmanager.example.yml, and a webhook receiver standing in for the
pager and the ticket queue.

The faults timeline (nvml-sim, divided by NVML_SIM_TIME_SCALE): from the
start GPU 5 has a remapped row pending and GPU 6 is in hardware thermal
slowdown; t=5 GPU 1 gets an uncorrected ECC error and XID 48; t=10 GPU 2
emits XID 79 and falls off the bus; t=15 GPU 3 hangs for 60 s; t=20 GPU 4
emits XID 43, which must raise nothing (IGNORE in NVIDIA's catalog); GPU 7
stays healthy.

GPUs 1, 2, 3 and 5 need a reset or more: the verdict's NvidiaGpuActionRequired
pages once for each, and the per-cause alerts it covers (XID, lost, hung,
pending remap, recovery action) fire in Prometheus but stay inhibited in
Alertmanager (issue 23).

What the test changes for speed, and nothing else: the rules' `for:`
durations (expressions untouched), Alertmanager's group timers, the webhook
URLs, the simulator's time scale and the scrape/evaluation interval."""

import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from promstack import (Alertmanager, Exporter, Prometheus, Stack, WebhookReceiver, free_port, sim_cli,
                       sim_control, wait_until)

ROOT = Path(__file__).resolve().parent.parent
TIME_SCALE = 4  # the 60 s hang of GPU 3 lasts 15 s
JOB = "nvml-exporter"
FOR = "2s"


def shortened_rules(workdir: Path) -> list[Path]:
    out = []
    for src in sorted((ROOT / "alerts").glob("*.rules.yml")):
        text = src.read_text()
        # Rewrite only the `for:` lines, so the expressions are the shipped ones
        # byte for byte.
        shortened = re.sub(r"(?m)^(\s+for:) .*$", rf"\1 {FOR}", text)
        assert [line for line in shortened.splitlines() if "for:" not in line] == \
            [line for line in text.splitlines() if "for:" not in line]
        dst = workdir / src.name
        dst.write_text(shortened)
        out.append(dst)
    return out


def alertmanager_config(receiver_url: str) -> dict:
    cfg = yaml.safe_load((ROOT / "alerts" / "alertmanager.example.yml").read_text())
    routes = [cfg["route"], *cfg["route"]["routes"]]
    for r in routes:
        r["group_wait"] = "1s"
        r["group_interval"] = "1s"
    for receiver in cfg["receivers"]:
        for hook in receiver["webhook_configs"]:
            path = hook["url"].split("/", 3)[3]
            hook["url"] = f"{receiver_url}/{path}"
    return cfg


def start_stack(stack: Stack, workdir: Path, scenario: str, env: dict, name: str | None = None):
    """The exporter on `scenario`, Alertmanager with the shipped routing
    pointed at the stack's receiver, and Prometheus with the shipped rules
    (shortened `for:`), all ready: returns (exporter, alertmanager, prometheus)."""
    exporter = stack.add(Exporter(workdir, scenario, interval="500ms", name=name, env=env))
    am = stack.add(Alertmanager(workdir, alertmanager_config(stack.receiver.url)))
    am.wait_ready()
    exporter.wait_ready()
    prom = stack.add(Prometheus(workdir, {JOB: [exporter.address]}, shortened_rules(workdir),
                                alertmanager=am.address))
    prom.wait_ready()
    prom.wait_targets_up(1)
    return exporter, am, prom


def find(alerts, **labels):
    return [(path, a) for path, a in alerts
            if all(a["labels"].get(k) == v for k, v in labels.items())]


# The same timeline on the default R560 node, and on the node most fleets
# run: the R535 long-term branch, from a container without MIG privileges.
# There the whole-device XIDs still page, the recovery action is inferred
# from the pending remap (R535 has no such field), and the exporter says
# what it cannot see: XIDs of single MIG instances on GPUs 0 and 1.
NODES = {
    "r560": ("", []),
    "r535-unprivileged": ('driver = "535.104.05"\nprivileged = false\n',
                          [("warning", "NvidiaGpuMigEventsInvisible", "0", {}),
                           ("warning", "NvidiaGpuMigEventsInvisible", "1", {})]),
}


@pytest.mark.parametrize("node", sorted(NODES))
def test_faults_reach_the_receiver_with_the_right_labels(tmp_path, node):
    settings, node_alerts = NODES[node]
    scenario = "faults"
    if settings:
        path = tmp_path / "node.toml"
        path.write_text(f'name = "faults"\nbase = "faults"\n{settings}')
        scenario = str(path)
    with Stack(WebhookReceiver()) as stack:
        receiver = stack.receiver
        exporter, am, prom = start_stack(stack, tmp_path, scenario, name="exporter",
                                         env={"NVML_SIM_TIME_SCALE": str(TIME_SCALE)})
        uuids = {r["metric"]["gpu"]: r["metric"]["uuid"] for r in prom.query("nvidia_gpu_info")}
        assert len(uuids) == 8, uuids

        expected = [
            ("warning", "NvidiaGpuEccUncorrectedError", "1", {"error": "uncorrected",
                                                               "scope": "volatile"}),
            ("critical", "NvidiaGpuActionRequired", "1", {"action": "reset_gpu"}),
            ("critical", "NvidiaGpuActionRequired", "2", {"action": "reboot"}),
            ("critical", "NvidiaGpuActionRequired", "3", {"action": "reset_gpu"}),
            ("critical", "NvidiaGpuActionRequired", "5", {"action": "reset_gpu"}),
            ("warning", "NvidiaGpuHwThermalSlowdown", "6", {"reason": "hw_thermal"}),
            *node_alerts,
        ]
        # Firing in Prometheus, and inhibited by the verdict's page of the
        # same GPU: the driver's recovery action on GPU 5 is inferred from
        # the pending remap (no R560 or R535 driver reports it).
        inhibited = [
            ("NvidiaGpuXidCritical", "1"),
            ("NvidiaGpuLost", "2"),
            ("NvidiaGpuXidCritical", "2"),
            ("NvidiaGpuHung", "3"),
            ("NvidiaGpuRemappedRowsPending", "5"),
            ("NvidiaGpuRecoveryActionRequired", "5"),
        ]

        def all_arrived():
            am.assert_running()
            prom.assert_running()
            exporter.assert_running()
            got = receiver.alerts()
            return all(any(a["status"] == "firing" for _, a in find(got, alertname=name, gpu=gpu))
                       for _, name, gpu, _ in expected)

        wait_until(all_arrived, 90, "every expected alert at the receiver", interval=0.5)

        def suppressed_in_alertmanager():
            state = {(a["labels"]["alertname"], a["labels"].get("gpu")): a["status"]
                     for a in am.alerts()}
            return all(key in state and state[key]["state"] == "suppressed" and state[key]["inhibitedBy"]
                       for key in inhibited)

        wait_until(suppressed_in_alertmanager, 60,
                   "the per-cause alerts in Alertmanager, inhibited by the verdict", interval=0.5)
        firing = {(r["metric"]["alertname"], r["metric"].get("gpu"))
                  for r in prom.query('ALERTS{alertstate="firing"}')}
        assert set(inhibited) <= firing, f"not firing in Prometheus: {set(inhibited) - firing}"

        got = receiver.alerts()
        for severity, name, gpu, extra in expected:
            hits = [(p, a) for p, a in find(got, alertname=name, gpu=gpu) if a["status"] == "firing"]
            assert hits, f"{name} for GPU {gpu} never arrived"
            path, alert = hits[0]
            assert path == f"/{severity}", f"{name} routed to {path}, not /{severity}"
            labels = alert["labels"]
            assert labels["severity"] == severity
            assert labels["job"] == JOB
            assert labels["instance"] == exporter.address
            assert labels["uuid"] == uuids[gpu], (name, labels)
            for k, v in extra.items():
                assert labels[k] == v, (name, k, labels)
            ann = alert["annotations"]
            assert f"GPU {gpu}" in ann["summary"] + ann["description"]
            assert uuids[gpu] in ann["description"]
            assert exporter.address in ann["description"]
            assert ann["runbook_url"].endswith("#" + name.lower())

        # GPU 3 answers again after the (scaled) 60 s hang: its verdict
        # clears, the page resolves and the receiver hears so.
        def hang_resolved():
            exporter.assert_running()
            return any(a["status"] == "resolved"
                       for _, a in find(receiver.alerts(), alertname="NvidiaGpuActionRequired", gpu="3"))

        wait_until(hang_resolved, 60 / TIME_SCALE + 45, "the verdict page of GPU 3 to resolve",
                   interval=0.5)
        up3 = prom.query('nvidia_gpu_up{gpu="3"}')
        assert up3 and up3[0]["value"][1] == "1", "GPU 3 should be up again"
        verdict3 = prom.query('nvidia_gpu_recommended_action{gpu="3"}')
        assert [v["metric"]["action"] for v in verdict3] == ["none"], verdict3

        # Nothing beyond the faults: the other alerts that fire are direct
        # consequences of the timeline (GPU 6 in thermal slowdown is also
        # hot), and GPU 0's MIG reconfiguration is not a fault. None of the
        # inhibited alerts ever reached the receiver.
        consequences = {("NvidiaGpuTemperatureNearSlowdown", "6")}
        allowed = {(name, gpu) for _, name, gpu, _ in expected} | consequences
        received = {(a["labels"]["alertname"], a["labels"].get("gpu")) for _, a in receiver.alerts()}
        assert received <= allowed, f"unexpected alerts: {sorted(received - allowed)}"

        # The healthy GPU raised nothing, at any point; nor did GPU 4, whose
        # XID 43 is IGNORE in NVIDIA's catalog (the GPU stays healthy), though
        # Prometheus saw the event.
        xid43 = prom.query('nvidia_gpu_xid_errors_total{gpu="4",xid="43"}')
        assert xid43 and float(xid43[0]["value"][1]) >= 1, "the XID 43 of GPU 4 never reached Prometheus"
        for quiet in ("7", "4"):
            raised = find(receiver.alerts(), gpu=quiet)
            assert not raised, f"GPU {quiet} raised {[a['labels']['alertname'] for _, a in raised]}"
            firing = prom.query(f'ALERTS{{gpu="{quiet}"}}')
            assert not firing, firing



def test_an_nvlink_link_going_down_pages(tmp_path):
    """Issue 16: a link that goes down on a running HGX node pages, through
    the real exporter, Prometheus and Alertmanager; its peers stay quiet."""
    control = tmp_path / "sim.sock"
    with Stack(WebhookReceiver()) as stack:
        receiver = stack.receiver
        exporter, _, prom = start_stack(stack, tmp_path, "dgx-h100",
                                        env={"NVML_SIM_CONTROL": str(control)})
        # Let Prometheus see every link up first, as on a healthy node.
        wait_until(lambda: len(prom.query('nvidia_gpu_nvlink_links{state="up"} == 18')) == 8, 30,
                   "18 links up on every GPU")
        sim_control(control, '{ action = "nvlink-state", gpu = 3, link = 5, up = false }')

        def paged():
            exporter.assert_running()
            return any(path == "/critical" and a["status"] == "firing"
                       for path, a in find(receiver.alerts(), alertname="NvidiaGpuNvlinkDown", gpu="3"))

        wait_until(paged, 60, "NvidiaGpuNvlinkDown for GPU 3 at the pager", interval=0.5)
        (path, alert), = [(p, a) for p, a in find(receiver.alerts(), alertname="NvidiaGpuNvlinkDown")
                          if a["status"] == "firing"]
        assert alert["labels"]["severity"] == "critical"
        assert alert["labels"]["instance"] == exporter.address
        assert "1 NVLink link(s) down" in alert["annotations"]["description"]
        others = {(a["labels"]["alertname"], a["labels"].get("gpu")) for _, a in receiver.alerts()}
        assert others == {("NvidiaGpuNvlinkDown", "3")}, f"unexpected alerts: {sorted(others)}"


# Issue 21's "done when", on the two Blackwell fleets: an NVLink5 error and a
# fabric health fault, injected through the nvml-sim fault CLI, page through
# the shipped rules. On B200 and GB200 nvml.h calls the DL counters (161-163)
# unsupported: NvidiaGpuNvlinkErrors fires on the NVLink5 link recovery
# counter (fields 213-215), and NvidiaGpuFabricUnhealthy on the v3 health
# summary. On the GB200 tray the power smoothing circuitry wears out too.
BLACKWELL = {
    # scenario: (GPUs, GPU with the NVLink error, GPU with the fabric fault, extra faults and alerts)
    "hgx-b200": (8, "3", "5", [], []),
    "gb200-nvl72": (4, "2", "1",
                    [("power-smoothing", "--gpu", "3", "--lifetime-percent", "5")],
                    [("warning", "NvidiaGpuPowerSmoothingLifetimeLow", "3", {})]),
}


@pytest.mark.parametrize("scenario", sorted(BLACKWELL))
def test_nvlink5_errors_and_fabric_health_page_on_blackwell(tmp_path, scenario):
    gpus, nvlink_gpu, fabric_gpu, faults, more = BLACKWELL[scenario]
    control = tmp_path / "sim.sock"
    with Stack(WebhookReceiver()) as stack:
        receiver = stack.receiver
        exporter, _, prom = start_stack(stack, tmp_path, scenario,
                                        env={"NVML_SIM_CONTROL": str(control)})
        # Before the faults, Prometheus holds the counters and the healthy
        # summary of every GPU (increase() needs a sample from before), and
        # nothing fires.
        wait_until(lambda: len(prom.query('nvidia_gpu_nvlink_errors_total{error="recovery"}')) >= gpus - 1
                   and len(prom.query('nvidia_gpu_fabric_health{summary="healthy"}')) == gpus,
                   30, "NVLink5 recovery counters and healthy fabric summaries")
        assert not prom.query('nvidia_gpu_nvlink_errors_total{error=~"replay|crc_flit|crc_data"}'), \
            "Blackwell has no DL counters"
        assert not receiver.alerts()

        sim_cli(control, "nvlink-errors", "--gpu", nvlink_gpu, "--link", "7", "--counter", "recovery",
                "--count", "1")
        sim_cli(control, "fabric-health", "--gpu", fabric_gpu, "--summary", "unhealthy")
        for fault in faults:
            sim_cli(control, *fault)

        expected = [
            ("warning", "NvidiaGpuNvlinkErrors", nvlink_gpu, {"error": "recovery"}),
            ("critical", "NvidiaGpuFabricUnhealthy", fabric_gpu, {"issue": "summary_unhealthy"}),
            *more,
        ]

        def all_arrived():
            exporter.assert_running()
            got = receiver.alerts()
            return all(any(a["status"] == "firing" for _, a in find(got, alertname=name, gpu=gpu))
                       for _, name, gpu, _ in expected)

        wait_until(all_arrived, 60, "the Blackwell alerts at the receiver", interval=0.5)
        uuids = {r["metric"]["gpu"]: r["metric"]["uuid"] for r in prom.query("nvidia_gpu_info")}
        for severity, name, gpu, extra in expected:
            (path, alert), *_ = [(p, a) for p, a in find(receiver.alerts(), alertname=name, gpu=gpu)
                                 if a["status"] == "firing"]
            assert path == f"/{severity}", f"{name} routed to {path}"
            assert alert["labels"]["uuid"] == uuids[gpu]
            for k, v in extra.items():
                assert alert["labels"][k] == v, (name, alert["labels"])
            assert alert["annotations"]["runbook_url"].endswith("#" + name.lower())
        if scenario == "gb200-nvl72":
            # The partition of the GPU rides along in the page (fabric info).
            (_, fabric), *_ = find(receiver.alerts(), alertname="NvidiaGpuFabricUnhealthy")
            assert "clique 2 of cluster 5a1c0de4-" in fabric["annotations"]["description"]
        # Nothing else, but the verdict's page for the GPU whose fabric is
        # unhealthy (issue 23: a hardware check), a direct consequence.
        received = {(a["labels"]["alertname"], a["labels"].get("gpu")) for _, a in receiver.alerts()}
        wanted = {(name, gpu) for _, name, gpu, _ in expected}
        consequences = {("NvidiaGpuActionRequired", fabric_gpu)}
        assert wanted <= received <= wanted | consequences, sorted(received)


def _kmsg_record(seq: int, ago: float, message: str) -> str:
    """A /dev/kmsg record (kernel facility, warning) logged `ago` seconds ago."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return f"4,{seq},{int(max(uptime - ago, 0) * 1e6)},-;{message}\n"


def test_an_exporter_restart_on_a_wrapped_kernel_log_pages_no_old_xid(tmp_path):
    """Issue 28, item 2, in a real Prometheus: XIDs read from the kernel log
    are counted once and never page again when the exporter restarts, with
    its state file (the counter does not drop though the ring lost the
    oldest records) or without one (the counter drops, the rules see an old
    event, not a new one); a new event still pages."""
    line = "NVRM: Xid (PCI:0000:5d:00): 74, pid=1, name=x, NVLink: fatal error detected on link 3"
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    ago = min(1800.0, uptime - 5)  # long before: older than the rules' 10 minutes
    assert ago > 660, "the host must be up for 11 minutes"
    records = [_kmsg_record(seq, ago - seq, line) for seq in range(1, 5)]
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("".join(records))
    state = tmp_path / "state.json"
    extra = ["--collector.xid.kmsg", f"--path.kmsg={kmsg}", f"--state.path={state}"]
    port = free_port()
    xid74 = 'nvidia_gpu_xid_errors_total{gpu="3",xid="74"}'
    with Stack(WebhookReceiver()) as stack:
        first = stack.add(Exporter(tmp_path, "dgx-h100", interval="500ms", extra=extra,
                                   name="exporter-1", port=port))
        first.wait_ready()
        prom = stack.add(Prometheus(tmp_path, {JOB: [first.address]}, shortened_rules(tmp_path)))
        prom.wait_ready()
        wait_until(lambda: [r["value"][1] for r in prom.query(xid74)] == ["4"], 30,
                   "the four old XIDs in Prometheus")

        def restart(name: str, flags: list[str]) -> Exporter:
            for p in stack.processes:
                if isinstance(p, Exporter):
                    p.stop()
            # Down for a few scrapes, as in a rollout: three that failed.
            prom.wait_scrapes([first.address], 3)
            assert prom.query(f'up{{instance="{first.address}"}} == 0'), "the target down"
            e = stack.add(Exporter(tmp_path, "dgx-h100", interval="500ms", extra=flags, name=name,
                                   port=port))
            e.wait_ready()
            return e

        # The ring wraps while the exporter is down: the two oldest go.
        kmsg.write_text("".join(records[2:]))
        restart("exporter-2", extra)
        wait_until(lambda: [r["value"][1] for r in prom.query(xid74)] == ["4"], 30,
                   "the counter back in Prometheus")
        # Never lower, across the restart: over every scrape of the new one.
        prom.wait_scrapes([first.address], 5)
        lowest = prom.query(f"min_over_time({xid74}[1m])")
        assert [r["value"][1] for r in lowest] == ["4"], lowest
        # Again without a state file: the counter drops to what the ring
        # still holds; increase() takes that for a reset, the rules for
        # nothing new.
        restart("exporter-3", extra[:2])
        wait_until(lambda: [r["value"][1] for r in prom.query(xid74)] == ["2"], 30,
                   "the counter of the wrapped ring")
        # The rules have seen the dropped counter: scrapes, then evaluations.
        prom.wait_scrapes([first.address], 5)
        prom.wait_evaluations(2)
        fired = prom.query('max_over_time(ALERTS{alertname=~"NvidiaGpuXid.*"}[5m])')
        assert not fired, f"an old XID paged again: {fired}"

        # A new event pages: the rules are live.
        with kmsg.open("a") as f:
            f.write(_kmsg_record(10, 0, line))
        wait_until(lambda: prom.query('ALERTS{alertname="NvidiaGpuXidCritical",gpu="3",xid="74"}'),
                   30, "a new XID 74 to fire")


def _tray_scenario(workdir: Path, name: str, chassis: str, slot: int, tray: int) -> str:
    """The built-in gb200-nvl72 tray (nvml-sim/scenarios), placed in another
    slot, tray or rack: only its platform line changes."""
    text = (ROOT / "nvml-sim" / "scenarios" / "gb200-nvl72.toml").read_text()
    line = 'platform = { chassis_serial = "1820000000001", slot = 14, tray = 4, host_id = 1 }'
    assert text.count(line) == 4, "the gb200-nvl72 scenario's platform lines changed"
    text = text.replace(line, f'platform = {{ chassis_serial = "{chassis}", slot = {slot}, '
                              f'tray = {tray}, host_id = 1 }}')
    text = text.replace('name = "gb200-nvl72"', f'name = "{name}"')
    path = workdir / f"{name}.toml"
    path.write_text(text)
    return str(path)


def test_a_fault_on_two_trays_of_a_rack_pages_once_and_one_gpu_pages_per_gpu(tmp_path):
    """Issue 49: three NVL72 compute trays, two in rack R1 (trays 4 and 5)
    and one in rack R2, each its own exporter and simulated driver. The
    fabric health of three GPUs on both trays of R1 and of one GPU of R2
    turns unhealthy at once: R1 pages once (NvidiaGpuRackFault, its GPUs
    counted and trays named) with its per-GPU pages inhibited, while R2's
    one GPU pages per GPU as before.

    Alertmanager holds every alert first (a group wait of an hour) and
    gets the shortened timers by a reload once it has them all: in
    production the 30 s group wait covers the seconds between the rule
    groups' evaluations (and FabricUnhealthy's 5 minutes `for`), which the
    shortened 2 s `for` and 1 s group wait here would not."""
    r1, r2 = "1820000000001", "1820000000002"
    trays = {  # name: (rack, slot, tray, GPUs made unhealthy)
        "r1-tray4": (r1, 14, 4, ["0", "1"]),
        "r1-tray5": (r1, 15, 5, ["2"]),
        "r2-tray4": (r2, 14, 4, ["1"]),
    }
    with Stack(WebhookReceiver()) as stack:
        receiver = stack.receiver
        exporters, sockets = {}, {}
        for name, (rack, slot, tray, _) in trays.items():
            sockets[name] = tmp_path / f"{name}.sock"
            exporters[name] = stack.add(Exporter(
                tmp_path, _tray_scenario(tmp_path, name, rack, slot, tray), interval="500ms",
                name=name, env={"NVML_SIM_CONTROL": str(sockets[name])}))
        holding = alertmanager_config(receiver.url)
        for r in [holding["route"], *holding["route"]["routes"]]:
            r["group_wait"] = "1h"
        am = stack.add(Alertmanager(tmp_path, holding))
        am.wait_ready()
        for e in exporters.values():
            e.wait_ready()
        # The rack's alert fires once two trays have a fault, before the
        # third GPU's may be set on a loaded machine; its count is then
        # stale in Alertmanager until Prometheus sends it again.
        prom = stack.add(Prometheus(tmp_path, {JOB: [e.address for e in exporters.values()]},
                                    shortened_rules(tmp_path), alertmanager=am.address,
                                    resend_delay="1s"))
        prom.wait_ready()
        prom.wait_targets_up(len(trays))
        wait_until(lambda: len(prom.query('nvidia_gpu_fabric_health{summary="healthy"}')) == 12
                   and len(prom.query(f'nvidia_gpu_platform_info{{chassis_serial="{r1}"}}')) == 8,
                   30, "12 healthy GPUs, 8 of them in rack R1")
        assert not prom.query("ALERTS")

        for name, (*_, gpus) in trays.items():
            for gpu in gpus:
                sim_cli(sockets[name], "fabric-health", "--gpu", gpu, "--summary", "unhealthy")
        addr = {name: e.address for name, e in exporters.items()}
        faulted = {(addr[name], gpu) for name, (*_, gpus) in trays.items() for gpu in gpus}
        r2_gpu = (addr["r2-tray4"], "1")
        rack_gpus = faulted - {r2_gpu}
        per_gpu = ("NvidiaGpuActionRequired", "NvidiaGpuFabricUnhealthy")

        def held():
            am.assert_running()
            prom.assert_running()
            state = {(a["labels"]["alertname"], a["labels"].get("instance"), a["labels"].get("gpu")):
                     a["status"] for a in am.alerts()}
            summaries = [a["annotations"]["summary"] for a in am.alerts()
                         if a["labels"]["alertname"] == "NvidiaGpuRackFault"]
            return (summaries == [f"Rack {r1}: 3 GPUs on several trays need action"]
                    and all((n, *g) in state for n in per_gpu for g in faulted))

        wait_until(held, 60, "the rack's alert counting 3 GPUs and every GPU's alerts in Alertmanager",
                   interval=0.5)
        assert not receiver.alerts(), "nothing goes out within the group wait"
        (rack,) = [a for a in am.alerts() if a["labels"]["alertname"] == "NvidiaGpuRackFault"]
        assert rack["labels"]["chassis_serial"] == r1, rack
        # The reload starts a new dispatcher and a new inhibitor, each
        # reading the held alerts on its own: a group wait of a few seconds
        # lets the inhibitor hold the rack's alert before the first flush
        # (with the 1 s one, a loaded machine flushed R1's pages first).
        releasing = alertmanager_config(receiver.url)
        for r in [releasing["route"], *releasing["route"]["routes"]]:
            r["group_wait"] = "5s"
        (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(releasing))
        req = urllib.request.Request(f"http://{am.address}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200

        def arrived():
            am.assert_running()
            got = {(a["labels"]["alertname"], a["labels"].get("instance"), a["labels"].get("gpu"))
                   for _, a in receiver.alerts() if a["status"] == "firing"}
            return {("NvidiaGpuRackFault", None, None), ("NvidiaGpuActionRequired", *r2_gpu),
                    ("NvidiaGpuFabricUnhealthy", *r2_gpu)} <= got

        wait_until(arrived, 60, "the rack's page and R2's per-GPU pages at the receiver", interval=0.5)

        def inhibited():
            state = {(a["labels"]["alertname"], a["labels"].get("instance"), a["labels"].get("gpu")):
                     a["status"] for a in am.alerts()}
            return all(state.get((n, *g), {}).get("state") == "suppressed"
                       and state[(n, *g)]["inhibitedBy"]
                       for n in per_gpu for g in rack_gpus)

        wait_until(inhibited, 30, "R1's per-GPU alerts held back under the rack's", interval=0.5)

        # One page for R1, with the rack, the count and both trays; R2's GPU
        # pages on its own, with its rack; nothing of R1's GPUs went out.
        notes = receiver.alerts()
        racks = [(p, a) for p, a in notes if a["labels"]["alertname"] == "NvidiaGpuRackFault"]
        assert len(racks) == 1, racks
        path, alert = racks[0]
        assert path == "/critical" and alert["status"] == "firing"
        assert alert["labels"]["chassis_serial"] == r1
        assert alert["annotations"]["summary"] == f"Rack {r1}: 3 GPUs on several trays need action"
        desc = alert["annotations"]["description"]
        assert f"{addr['r1-tray4']} (tray 4, 2 GPUs)" in desc, desc
        assert f"{addr['r1-tray5']} (tray 5, 1 GPUs)" in desc, desc
        assert addr["r2-tray4"] not in desc, desc
        sent = {(a["labels"]["alertname"], a["labels"].get("instance"), a["labels"].get("gpu"),
                 a["labels"].get("chassis_serial")) for _, a in notes}
        assert sent == {("NvidiaGpuRackFault", None, None, r1),
                        ("NvidiaGpuActionRequired", *r2_gpu, r2),
                        ("NvidiaGpuFabricUnhealthy", *r2_gpu, r2)}, sorted(sent, key=str)
