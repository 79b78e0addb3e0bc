"""A fake kubelet HTTPS API and API server for the exporter's JSON reads:
real HTTP over real TLS (a test CA made by openssl, the server certificate
for 127.0.0.1), and a bearer token checked as the kubelet and the API
server check a service account's token (401 without the right one, 403
when the test says the token is not allowed).

It serves what those servers answer to the exporter's requests:

- the kubelet's `GET /pods`: a v1 PodList of this node's pods;
- the API server's `GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`
  asked as PartialObjectMetadataList: the pods' metadata only;
- `GET /apis/resource.k8s.io/<version>/resourceslices?fieldSelector=...`:
  a ResourceSliceList of NVIDIA's driver (`type`, `uuid`, `parentUUID`,
  `profile` attributes as cmd/gpu-kubelet-plugin/deviceinfo.go publishes
  them); the versions it lacks answer 404, as an older API server does.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "test-service-account-token"


def tls_server(handler, crt: Path, key: Path) -> tuple[ThreadingHTTPServer, str]:
    """An HTTPS server on a free local port with the PKI's server
    certificate, and its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server, f"https://127.0.0.1:{server.server_address[1]}"


def make_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for 127.0.0.1 and
    localhost: (ca.crt, server.crt, server.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                   "extendedKeyUsage=serverAuth\n")
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "2", "-subj", "/CN=kubernetes-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", "/CN=node-1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return ca_crt, crt, key


@dataclass
class PodMeta:
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    node: str = "node-1"


@dataclass
class SliceDevice:
    name: str
    uuid: str | None
    type: str = "gpu"
    parent_uuid: str | None = None
    profile: str | None = None


class FakeKubernetes:
    """The kubelet's /pods and the API server's lists, on one HTTPS port
    (each test points --kubernetes.kubelet-url and --kubernetes.api-server
    at it)."""

    def __init__(self, work_dir: Path, node: str = "node-1"):
        self.node = node
        self.pods: list[PodMeta] = []
        self.slices: list[SliceDevice] = []
        # API versions of resource.k8s.io this "API server" has.
        self.slice_versions = {"v1"}
        # Paths (without query) that answer 403 Forbidden.
        self.forbidden: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.ca, crt, key = make_pki(work_dir / "pki")
        self.token_file = work_dir / "token"
        self.token_file.write_text(TOKEN + "\n")
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                status, body = fake._answer(self.path, self.headers)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server, self.url = tls_server(Handler, crt, key)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def paths(self) -> list[str]:
        with self._lock:
            return [p for p, _ in self.requests]

    def _answer(self, raw_path: str, headers) -> tuple[int, dict]:
        url = urllib.parse.urlsplit(raw_path)
        query = urllib.parse.parse_qs(url.query)
        with self._lock:
            self.requests.append((url.path, headers.get("Accept", "")))
            pods, slices = list(self.pods), list(self.slices)
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, status_body(401, "Unauthorized")
        if url.path in self.forbidden:
            return 403, status_body(403, "Forbidden")
        if url.path == "/pods":
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
                {"metadata": {"name": p.name, "namespace": p.namespace, "uid": f"uid-{p.name}",
                              "labels": p.labels},
                 "spec": {"nodeName": p.node, "containers": [
                     {"name": "main", "env": [{"name": "SECRET", "value": "never read"}]}]},
                 "status": {"phase": "Running"}}
                for p in pods if p.node == self.node]}
        if url.path == "/api/v1/pods":
            selector = query.get("fieldSelector", [""])[0]
            node = selector.removeprefix("spec.nodeName=")
            assert "as=PartialObjectMetadataList" in headers.get("Accept", ""), headers
            return 200, {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                         "metadata": {}, "items": [
                             {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                              "metadata": {"name": p.name, "namespace": p.namespace,
                                           "uid": f"uid-{p.name}", "labels": p.labels}}
                             for p in pods if p.node == node]}
        parts = url.path.split("/")
        if url.path.startswith("/apis/resource.k8s.io/") and parts[-1] == "resourceslices":
            version = parts[3]
            if version not in self.slice_versions:
                return 404, status_body(404, "NotFound")
            selector = dict(kv.split("=", 1) for kv in query.get("fieldSelector", [""])[0].split(","))
            if selector.get("spec.nodeName") != self.node:
                return 200, {"kind": "ResourceSliceList", "items": []}
            return 200, slice_list(self.node, version, slices)
        return 404, status_body(404, "NotFound")


def status_body(code: int, reason: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}


def slice_list(node: str, version: str, devices: list[SliceDevice]) -> dict:
    def device(d: SliceDevice) -> dict:
        attributes = {"type": {"string": d.type},
                      "productName": {"string": "NVIDIA H100 80GB HBM3"},
                      "cudaComputeCapability": {"version": "9.0.0"}}
        if d.uuid:
            attributes["uuid"] = {"string": d.uuid}
        if d.parent_uuid:
            attributes["parentUUID"] = {"string": d.parent_uuid}
        if d.profile:
            attributes["profile"] = {"string": d.profile}
        if version == "v1beta1":
            return {"name": d.name, "basic": {"attributes": attributes}}
        return {"name": d.name, "attributes": attributes}

    return {"kind": "ResourceSliceList", "apiVersion": f"resource.k8s.io/{version}", "metadata": {},
            "items": [{"metadata": {"name": f"{node}-gpu.nvidia.com-abcde"},
                       "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                                "devices": [device(d) for d in devices]}}]}
