"""A stand-in Kubernetes API server for the real `kubectl`: the REST API
over HTTPS (the test CA of fake_https.make_pki, a bearer token), small and
honest, for the resources `nvml-gpu-verdict device-taints` uses:
resource.k8s.io/v1 ResourceSlices and DeviceTaintRules (cluster-scoped).

What it speaks, as kube-apiserver does:

- discovery: `/version`, `/api`, `/apis` (an APIGroupList; kubectl falls
  back to it from aggregated discovery when the answer is plain JSON),
  `/api/v1` and `/apis/resource.k8s.io/v1` (APIResourceLists);
- list (`labelSelector` with `k=v`, `k!=v`, `k`, `!k`; `fieldSelector` with
  the fields the real server indexes for the kind, others refused with
  400), get, create (POST; 409 AlreadyExists), patch (merge and strategic
  merge, which for these kinds' maps are the same; a `resourceVersion`
  in the patch is a precondition, 409 Conflict), update (PUT, same
  precondition), delete (404 NotFound);
- every object it stores gets `uid`, `resourceVersion` (one counter for
  all, as etcd's revision), `creationTimestamp`, and a DeviceTaintRule's
  taint its `timeAdded`; create, patch and update bodies are validated
  against the Kubernetes 1.37 schema (kubernetes-validate, strict: an
  unknown or misspelt field is refused with 422 Invalid, as the server's
  strict field validation does);
- errors are `Status` objects with the code, reason and message.

`fail` makes chosen requests answer 500 InternalError (an API server or
etcd in trouble), `requests` records every request for the tests.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
import uuid as uuidlib
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import kubernetes_validate

from fake_https import TOKEN, make_pki, tls_server

GROUP, VERSION = "resource.k8s.io", "v1"
# plural -> (kind, field selectors the real server accepts for it:
# pkg/registry/resource/resourceslice/strategy.go indexes spec.nodeName
# and spec.driver; every kind has metadata.name).
KINDS = {
    "resourceslices": ("ResourceSlice", {"metadata.name", "spec.nodeName", "spec.driver"}),
    "devicetaintrules": ("DeviceTaintRule", {"metadata.name"}),
}


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def field_value(obj: dict, path: str):
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def label_match(labels: dict, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class FakeApiServer:
    def __init__(self, work_dir: Path):
        self.objects: dict[str, dict[str, dict]] = {plural: {} for plural in KINDS}
        self.requests: list[tuple[str, str]] = []
        # (method, plural) -> how many of the next such requests fail.
        self.fail: dict[tuple[str, str], int] = {}
        self.revision = 100
        self._lock = threading.Lock()
        self.ca, crt, key = make_pki(work_dir / "pki")
        self.kubeconfig = work_dir / "kubeconfig"
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, answer = server._answer(self.command, self.path, self.headers, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

            def log_message(self, *args):
                pass

        self._server, self.url = tls_server(Handler, crt, key)
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority": str(self.ca)}}],
            "users": [{"name": "node", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "node"}}],
        }))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    # What tests put in and read out, under the lock.
    def put(self, plural: str, obj: dict) -> dict:
        with self._lock:
            return self._store(plural, copy.deepcopy(obj), new=True)

    def get(self, plural: str, name: str) -> dict | None:
        with self._lock:
            return copy.deepcopy(self.objects[plural].get(name))

    def items(self, plural: str) -> dict[str, dict]:
        with self._lock:
            return copy.deepcopy(self.objects[plural])

    def remove(self, plural: str, name: str):
        with self._lock:
            self.objects[plural].pop(name, None)

    def writes(self) -> list[tuple[str, str]]:
        with self._lock:
            return [r for r in self.requests if r[0] not in ("GET",)]

    def _store(self, plural: str, obj: dict, new: bool) -> dict:
        self.revision += 1
        meta = obj.setdefault("metadata", {})
        if new:
            meta["uid"] = str(uuidlib.uuid4())
            meta["creationTimestamp"] = now()
        meta["resourceVersion"] = str(self.revision)
        obj["apiVersion"], obj["kind"] = f"{GROUP}/{VERSION}", KINDS[plural][0]
        taint = obj.get("spec", {}).get("taint")
        if isinstance(taint, dict):
            taint.setdefault("timeAdded", now())
        self.objects[plural][meta["name"]] = obj
        return copy.deepcopy(obj)

    def _answer(self, method: str, raw_path: str, headers, body: bytes) -> tuple[int, dict]:
        url = urllib.parse.urlsplit(raw_path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        with self._lock:
            self.requests.append((method, url.path))
            if headers.get("Authorization") != f"Bearer {TOKEN}":
                return 401, status(401, "Unauthorized", "Unauthorized")
            return self._route(method, url.path, query, headers, body)

    def _route(self, method, path, query, headers, body) -> tuple[int, dict]:
        if path == "/version":
            return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0", "platform": "linux/amd64"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.url.removeprefix("https://")}]}
        if path == "/apis":
            gv = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": GROUP, "versions": [gv], "preferredVersion": gv}]}
        if path == "/openapi/v3":
            return 200, {"paths": {f"apis/{GROUP}/{VERSION}": {
                "serverRelativeURL": f"/openapi/v3/apis/{GROUP}/{VERSION}?hash=0123456789ABCDEF"}}}
        if path == f"/openapi/v3/apis/{GROUP}/{VERSION}":
            return 200, self._openapi()
        if path == "/api/v1":
            return 200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": []}
        prefix = f"/apis/{GROUP}/{VERSION}"
        if path == prefix:
            verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
                         "resources": [{"name": plural, "singularName": kind.lower(), "namespaced": False,
                                        "kind": kind, "verbs": verbs}
                                       for plural, (kind, _) in KINDS.items()]}
        parts = path.removeprefix(prefix + "/").split("/") if path.startswith(prefix + "/") else []
        if not parts or parts[0] not in KINDS or len(parts) > 2:
            return 404, status(404, "NotFound", f"the server could not find the requested resource ({path})")
        plural, name = parts[0], (parts[1] if len(parts) == 2 else None)
        for key in ((method, plural), (method, "*")):
            if self.fail.get(key, 0) > 0:
                self.fail[key] -= 1
                return 500, status(500, "InternalError", "etcdserver: request timed out")
        kind = KINDS[plural][0]
        store = self.objects[plural]
        if method == "GET" and name is None:
            return self._list(plural, query)
        if method == "GET":
            if name not in store:
                return 404, status(404, "NotFound", f'{plural}.{GROUP} "{name}" not found')
            return 200, copy.deepcopy(store[name])
        if method == "POST" and name is None:
            obj = json.loads(body)
            name = obj.get("metadata", {}).get("name", "")
            if query.get("fieldValidation") != "Ignore" and (error := self._invalid(kind, obj)):
                return 422, error
            if name in store:
                return 409, status(409, "AlreadyExists", f'{plural}.{GROUP} "{name}" already exists')
            return 201, self._store(plural, obj, new=True)
        if method in ("PATCH", "PUT") and name is not None:
            if name not in store:
                return 404, status(404, "NotFound", f'{plural}.{GROUP} "{name}" not found')
            change = json.loads(body)
            if method == "PATCH":
                kinds = ("application/merge-patch+json", "application/strategic-merge-patch+json")
                if headers.get("Content-Type") not in kinds:
                    return 415, status(415, "UnsupportedMediaType",
                                       f"the body of the request was in an unknown format: {headers.get('Content-Type')}")
                obj = merge_patch(store[name], change)
            else:
                obj = change
            wanted = change.get("metadata", {}).get("resourceVersion")
            if wanted and wanted != store[name]["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {plural}.{GROUP} "{name}": '
                                   "the object has been modified; please apply your changes to the latest version and try again")
            obj.setdefault("metadata", {})["name"] = name
            for kept in ("uid", "creationTimestamp"):
                obj["metadata"][kept] = store[name]["metadata"][kept]
            if query.get("fieldValidation") != "Ignore" and (error := self._invalid(kind, obj)):
                return 422, error
            return 200, self._store(plural, obj, new=False)
        if method == "DELETE" and name is not None:
            if name not in store:
                return 404, status(404, "NotFound", f'{plural}.{GROUP} "{name}" not found')
            return 200, store.pop(name)
        return 405, status(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    @staticmethod
    def _openapi() -> dict:
        """The part of the group-version's OpenAPI v3 document kubectl reads
        before a create or patch (cli-runtime's query_param_verifier_v3.go):
        the collection's POST and the object's PATCH, tagged with their
        kind, take the fieldValidation parameter, so kubectl asks the server
        to validate (fieldValidation=Strict) instead of downloading schemas."""
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        paths = {}
        for plural, (kind, _) in KINDS.items():
            gvk = {"group": GROUP, "version": VERSION, "kind": kind}
            base = f"/apis/{GROUP}/{VERSION}/{plural}"
            paths[base] = {"post": {"operationId": f"create{kind}", "parameters": [param],
                                    "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk,
                                    "responses": {}}}
            paths[base + "/{name}"] = {"patch": {"operationId": f"patch{kind}", "parameters": [param],
                                                 "x-kubernetes-action": "patch",
                                                 "x-kubernetes-group-version-kind": gvk, "responses": {}}}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"},
                "paths": paths, "components": {"schemas": {}}}

    def _list(self, plural: str, query: dict) -> tuple[int, dict]:
        kind, fields = KINDS[plural]
        selectors = []
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            key, _, value = term.partition("=")
            key = key.rstrip("=")
            if key not in fields:
                return 400, status(400, "BadRequest", f'"{key}" is not a known field selector: only "'
                                   + '", "'.join(sorted(fields)) + '"')
            selectors.append((key, value.lstrip("=")))
        labels = query.get("labelSelector", "")
        items = [copy.deepcopy(o) for o in self.objects[plural].values()
                 if all(str(field_value(o, k)) == v for k, v in selectors)
                 and label_match(o.get("metadata", {}).get("labels", {}), labels)]
        return 200, {"kind": f"{kind}List", "apiVersion": f"{GROUP}/{VERSION}",
                     "metadata": {"resourceVersion": str(self.revision)}, "items": items}

    @staticmethod
    def _invalid(kind: str, obj: dict) -> dict | None:
        try:
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
        except kubernetes_validate.ValidationError as e:
            return status(422, "Invalid", f"{kind} is invalid: {e.message} at {list(e.path)}")
        return None


def nvidia_slice(node: str, devices: list[dict], name: str | None = None) -> dict:
    """A ResourceSlice of NVIDIA's DRA driver (gpu.nvidia.com) for `node`:
    devices as cmd/gpu-kubelet-plugin/deviceinfo.go publishes them, each
    `{"name": "gpu-0", "uuid": "GPU-...", "parent": "GPU-..."|None}`."""
    def device(d: dict) -> dict:
        attributes = {"type": {"string": "mig" if d.get("parent") else "gpu"},
                      "uuid": {"string": d["uuid"]},
                      "productName": {"string": "NVIDIA H100 80GB HBM3"}}
        if d.get("parent"):
            attributes["parentUUID"] = {"string": d["parent"]}
        return {"name": d["name"], "attributes": attributes}

    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-gpu.nvidia.com-x7k2p"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [device(d) for d in devices]}}
