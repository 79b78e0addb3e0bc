"""A fake kubelet: the pod-resources v1 `List` call served over real gRPC
on a unix socket, with pods the test changes while the exporter runs.

The protobuf code is generated at test time from the project's own
proto/podresources_v1.proto with grpcio-tools, so the Rust client (whose
messages are declared by hand) is checked against an independent protobuf
implementation on the wire.
"""

from __future__ import annotations

import importlib
import sys
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "podresources_v1.proto"


def load_protos(out_dir: Path):
    """Compiles the proto into out_dir and imports the generated modules."""
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}", str(PROTO),
    ])
    assert rc == 0, f"protoc failed on {PROTO}"
    sys.path.insert(0, str(out_dir))
    try:
        pb2 = importlib.import_module("podresources_v1_pb2")
        pb2_grpc = importlib.import_module("podresources_v1_pb2_grpc")
    finally:
        sys.path.remove(str(out_dir))
    return pb2, pb2_grpc


@dataclass
class ClaimDevice:
    """A device of a ResourceClaim, as the kubelet reports it: driver, pool
    and device name (kubelet 1.31+; empty as a 1.27-1.30 kubelet sends
    them) and the CDI devices the driver prepared."""
    device: str
    cdi_devices: list[str]
    driver: str = "gpu.nvidia.com"
    pool: str = "node-1"


@dataclass
class Claim:
    namespace: str
    name: str
    devices: list[ClaimDevice]


@dataclass
class Pod:
    """One container of a pod and what it holds: device-plugin devices of
    one resource, and ResourceClaims. Several entries of one pod are its
    containers, answered as one PodResources as the kubelet does."""
    namespace: str
    name: str
    container: str
    resource: str = ""
    device_ids: list[str] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)


class FakeKubelet:
    """Serves whatever `pods` holds at the moment of each call."""

    def __init__(self, socket_path: Path, work_dir: Path):
        self.socket_path = socket_path
        self.pb2, pb2_grpc = load_protos(work_dir)
        self._lock = threading.Lock()
        self._pods: list[Pod] = []
        self.calls = 0
        kubelet = self

        class Lister(pb2_grpc.PodResourcesListerServicer):
            def List(self, request, context):  # noqa: N802 (gRPC method name)
                return kubelet._response()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), self._server)
        assert self._server.add_insecure_port(f"unix:{socket_path}"), "cannot bind the socket"

    def set_pods(self, pods: list[Pod]):
        with self._lock:
            self._pods = list(pods)

    def _response(self):
        pb2 = self.pb2
        with self._lock:
            self.calls += 1
            pods = list(self._pods)
        by_pod: dict[tuple[str, str], list] = {}
        for p in pods:
            devices = ([pb2.ContainerDevices(resource_name=p.resource, device_ids=p.device_ids)]
                       if p.resource else [])
            claims = [
                pb2.DynamicResource(claim_name=c.name, claim_namespace=c.namespace, claim_resources=[
                    pb2.ClaimResource(
                        cdi_devices=[pb2.CDIDevice(name=n) for n in d.cdi_devices],
                        driver_name=d.driver, pool_name=d.pool, device_name=d.device)
                    for d in c.devices
                ])
                for c in p.claims
            ]
            by_pod.setdefault((p.namespace, p.name), []).append(
                pb2.ContainerResources(name=p.container, devices=devices, dynamic_resources=claims))
        return pb2.ListPodResourcesResponse(pod_resources=[
            pb2.PodResources(name=name, namespace=namespace, containers=containers)
            for (namespace, name), containers in by_pod.items()
        ])

    def start(self):
        self._server.start()

    def stop(self):
        self._server.stop(grace=None).wait()
        self.socket_path.unlink(missing_ok=True)
