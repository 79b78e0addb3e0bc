"""NVIDIA NVSentinel health events (`--nvsentinel.socket`, docs/operations.md
"NVIDIA NVSentinel"): the real exporter on the simulated driver sends each
change of a GPU's verdict to a stand-in platform connector that serves
NVSentinel's own proto (proto/nvsentinel/health_event.proto, compiled here
with grpcio-tools) over real gRPC on a unix socket.

One exporter run covers the path: every GPU's state once at start, a GSP
timeout's fatal event with the mapped action, the events raised while the
connector hangs (accepts, never answers) delivered in order once it is
back, with /metrics answering throughout, and the healthy event after the
driver reload that resets the GPU. A second, short run checks the dry-run
switch. Every wait is on a received message or a counter."""

from __future__ import annotations

import importlib
import importlib.resources
import re
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_tools import protoc

from promstack import Exporter, http_get, sim_control, wait_until

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto" / "nvsentinel" / "health_event.proto"
NODE = "gpu-node-7"


def load_protos(out_dir: Path):
    """Compiles NVSentinel's proto (and the well-known types it imports,
    shipped with grpcio-tools) into out_dir and imports the modules."""
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{PROTO.parent}", f"-I{well_known}",
        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", str(PROTO),
    ])
    assert rc == 0, f"protoc failed on {PROTO}"
    sys.path.insert(0, str(out_dir))
    try:
        return (importlib.import_module("health_event_pb2"),
                importlib.import_module("health_event_pb2_grpc"))
    finally:
        sys.path.remove(str(out_dir))


class Connector:
    """NVSentinel's platform connector as far as a health monitor sees it:
    HealthEventOccurredV1 on a unix socket, every event kept in arrival
    order. `hang()` makes it accept calls and never answer them."""

    def __init__(self, socket_path: Path, pb2, pb2_grpc):
        from google.protobuf import empty_pb2
        self.socket_path = socket_path
        self.pb2 = pb2
        self.events: list = []
        self.hung_calls = 0
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._hanging = False
        connector = self

        class PlatformConnector(pb2_grpc.PlatformConnectorServicer):
            def HealthEventOccurredV1(self, request, context):  # noqa: N802 (gRPC name)
                if connector._hanging:
                    with connector._lock:
                        connector.hung_calls += 1
                    connector._release.wait(60)
                    context.abort(grpc.StatusCode.UNAVAILABLE, "stopped")
                assert request.version == 1
                with connector._lock:
                    connector.events.extend(request.events)
                return empty_pb2.Empty()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb2_grpc.add_PlatformConnectorServicer_to_server(PlatformConnector(), self._server)
        assert self._server.add_insecure_port(f"unix:{socket_path}"), "cannot bind the socket"
        self._server.start()

    def hang(self):
        self._hanging = True

    def stop(self):
        self._release.set()
        self._server.stop(0).wait()

    def received(self) -> list:
        with self._lock:
            return list(self.events)

    def wait_for(self, what: str, match, timeout: float = 30):
        """The first received event `match` accepts."""
        def found():
            return next((e for e in self.received() if match(e)), None)
        return wait_until(found, timeout, what)


@pytest.fixture(scope="module")
def protos(tmp_path_factory):
    return load_protos(tmp_path_factory.mktemp("nvsentinel-proto"))


def scrape(exporter) -> str:
    status, body = http_get(f"http://{exporter.address}/metrics")
    assert status == 200
    return body.decode()


def counter(exporter, result: str) -> float:
    m = re.search(r'^nvml_exporter_nvsentinel_events_total\{result="%s"\} (\S+)$' % result,
                  scrape(exporter), re.M)
    return float(m.group(1)) if m else -1


def identity(exporter, gpu: str) -> tuple[str, str]:
    """The GPU's UUID and NVML bus id, as /metrics gives them."""
    body = scrape(exporter)
    info = next(l for l in body.splitlines()
                if l.startswith("nvidia_gpu_info{") and f'gpu="{gpu}"' in l)
    return re.search(r'uuid="([^"]+)"', info).group(1), re.search(r'pci_bus_id="([^"]+)"', info).group(1)


def entities(event) -> dict[str, str]:
    return {e.entityType: e.entityValue for e in event.entitiesImpacted}


def of(uuid: str):
    return lambda e: entities(e).get("GPU_UUID") == uuid


def test_verdict_changes_reach_nvsentinel_in_order_while_metrics_answer(tmp_path, protos):
    pb2, pb2_grpc = protos
    sock = tmp_path / "nvsentinel.sock"
    control = tmp_path / "sim.sock"
    connector = Connector(sock, pb2, pb2_grpc)
    exporter = Exporter(tmp_path, "dgx-h100", interval="200ms",
                        extra=["--nvsentinel.socket", str(sock), "--nvsentinel.timeout", "1s",
                               "--nvsentinel.node-name", NODE],
                        env={"NVML_SIM_CONTROL": str(control)})
    try:
        exporter.wait_ready()
        gpu3, pci3 = identity(exporter, "3")
        gpu4, _ = identity(exporter, "4")
        gpu5, _ = identity(exporter, "5")

        # Start: each GPU's state once, healthy.
        wait_until(lambda: len(connector.received()) >= 8, 30, "each GPU's state at start")
        start = connector.received()
        assert len({entities(e)["GPU_UUID"] for e in start}) == 8
        assert all(e.isHealthy and not e.isFatal for e in start)
        assert all(e.recommendedAction == pb2.NONE for e in start)

        # A GSP timeout (XID 119) on GPU 3: reset_gpu, fatal, COMPONENT_RESET.
        sim_control(control, '{ action = "xid", gpu = 3, code = 119 }')
        fault = connector.wait_for("GPU 3's fault", lambda e: of(gpu3)(e) and not e.isHealthy)
        assert fault.isFatal
        assert fault.recommendedAction == pb2.COMPONENT_RESET
        assert fault.checkName == "xid_reset_gpu"
        assert list(fault.errorCode) == ["119"]
        assert fault.componentClass == "GPU" and fault.agent == "nvml-exporter"
        assert fault.nodeName == NODE
        assert fault.version == 1
        assert fault.processingStrategy == pb2.EXECUTE_REMEDIATION
        domain, rest = pci3.lower().split(":", 1)
        assert entities(fault) == {"PCI": f"{domain[-4:]}:{rest}", "GPU_UUID": gpu3}
        assert fault.generatedTimestamp.seconds > 0

        # The connector hangs: it accepts calls and never answers. What is
        # raised meanwhile waits; /metrics answers and counts the failures.
        connector.hang()
        sim_control(control, '{ action = "xid", gpu = 4, code = 13 }')
        wait_until(lambda: connector.hung_calls >= 1, 30, "a call to the hung connector")
        sim_control(control, '{ action = "xid", gpu = 5, code = 119 }')
        wait_until(lambda: counter(exporter, "failed") >= 1, 30, "a failed call counted")
        body = scrape(exporter)
        assert re.search(r'nvidia_gpu_recommended_action\{[^}]*gpu="5"[^}]*action="reset_gpu"', body), \
            "the poll went on while the connector hung"
        connector.stop()
        queued_from = len(connector.received())

        # Back: the events raised while it hung arrive, in order.
        connector = Connector(sock, pb2, pb2_grpc)
        connector.wait_for("GPU 5's fault", lambda e: of(gpu5)(e) and not e.isHealthy)
        after = [e for e in connector.received() if not e.isHealthy]
        assert [entities(e)["GPU_UUID"] for e in after[:2]] == [gpu4, gpu5], \
            "GPU 4's event, raised first, arrives first"
        app = after[0]
        assert app.recommendedAction == pb2.RESTART_APP and not app.isFatal
        assert list(app.errorCode) == ["13"]
        assert queued_from >= 9

        # The driver reload resets every GPU: GPU 3 is healthy again, its
        # fault cleared under its own name.
        sim_control(control, '{ action = "driver-unload" }')
        wait_until(lambda: b"nvml_exporter_nvml_up 0" in http_get(f"http://{exporter.address}/metrics")[1],
                   30, "NVML to go away")
        sim_control(control, '{ action = "driver-load" }')
        healed = connector.wait_for("GPU 3's recovery", lambda e: of(gpu3)(e) and e.isHealthy, 60)
        assert healed.checkName == "xid_reset_gpu"
        assert not healed.isFatal and healed.recommendedAction == pb2.NONE
        assert counter(exporter, "dropped") == 0
        delivered = len(connector.received()) + queued_from
        wait_until(lambda: counter(exporter, "sent") >= delivered, 30, "the delivered events counted")
    finally:
        exporter.stop()
        connector.stop()


def test_dry_run_sends_store_only(tmp_path, protos):
    pb2, pb2_grpc = protos
    sock = tmp_path / "nvsentinel.sock"
    connector = Connector(sock, pb2, pb2_grpc)
    exporter = Exporter(tmp_path, "dgx-a100", interval="200ms",
                        extra=["--nvsentinel.socket", str(sock), "--nvsentinel.dry-run"])
    try:
        exporter.wait_ready()
        wait_until(lambda: len(connector.received()) >= 8, 30, "each GPU's state at start")
        assert {e.processingStrategy for e in connector.received()} == {pb2.STORE_ONLY}
        wait_until(lambda: counter(exporter, "sent") >= 8, 30, "the sent events counted")
    finally:
        exporter.stop()
        connector.stop()
