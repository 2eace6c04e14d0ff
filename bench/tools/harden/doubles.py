"""Test doubles on 127.0.0.1: a store that fails on purpose, an embeddings endpoint with bad-reply modes,
and a Pinecone data-plane protocol double. None of them says anything about speed.

* ``FaultBackend``: a real store (``inner``) that fails at search number ``after`` (raise, time out,
  kill a real server, crash the process); built by the CLI through
  ``backend._target_=bench.tools.harden.doubles.FaultBackend``.
* ``EmbeddingServer``: an OpenAI-compatible ``/embeddings`` server with bad-reply modes.
* ``PineconeTestServer``: PROTOCOL TEST DOUBLE of the Pinecone data plane, on 127.0.0.1 only. Not Pinecone.

  It answers the JSON the official SDK sends (REST, API version header ignored) so the Pinecone
  backend's real SDK code path runs in tests without network or a key. Its latency, recall and
  consistency behaviour say NOTHING about Pinecone: ranking is exact numpy cosine, and the only
  "eventual consistency" is an optional fixed visibility delay for writes (to exercise wait_ready).

  Endpoints: ``POST /vectors/upsert``, ``POST /query``, ``GET /vectors/fetch?ids=..&namespace=..``,
  ``POST /vectors/delete`` (ids / deleteAll / filter), ``POST /describe_index_stats``.
  Requests must carry the ``Api-Key`` header. Like the service it rejects an upsert of more than
  1,000 vectors or a body over 2 MB, a wrong dimension, and topK > 10,000; deleting from a namespace
  that does not exist answers 404. Empty namespaces disappear.

  Usage: ``with PineconeTestServer(api_key="k") as srv: Index(host=srv.host, api_key="k")``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- a store that fails on purpose

class FaultBackend:
    """A real store (``inner``, a backend class path) that fails on purpose at search number ``after``.

    fault: ``none`` (pass through), ``raise`` (RuntimeError), ``timeout`` (blocks ``delay_s`` then
    raises TimeoutError, like a client-side timeout), ``kill`` (SIGKILL the process group
    ``kill_pid`` -- a real server started by bench.backends.servers -- then call the real search, which
    fails as it would in production), ``crash`` (SIGKILL this process: power cut / OOM kill).
    """

    def __init__(self, collection: str = "recallbench", fault: str = "none", after: int = 8, delay_s: float = 1.0,
                 kill_pid: int | None = None, inner: str = "bench.backends.exact.ExactBackend",
                 inner_kwargs=None) -> None:
        if fault not in ("none", "raise", "timeout", "kill", "crash"):
            raise ValueError(f"FaultBackend: unknown fault {fault!r}")
        if fault == "kill" and not kill_pid:
            raise ValueError("FaultBackend: fault 'kill' needs kill_pid")
        module, _, cls = inner.rpartition(".")
        self._inner = getattr(importlib.import_module(module), cls)(collection=collection, **dict(inner_kwargs or {}))
        self.fault, self.after, self.delay_s, self.kill_pid = fault, int(after), float(delay_s), kill_pid
        self.name = self._inner.name if fault == "none" else f"{self._inner.name}+{fault}"
        self.capabilities = self._inner.capabilities
        self.path = getattr(self._inner, "path", None)
        self.searches = 0

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        self._inner.open(dim=dim, metric=metric)

    def add(self, batch) -> None:
        self._inner.add(batch)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        self._inner.wait_ready(timeout_s)

    def search(self, vector, *, k: int, where):
        self.searches += 1
        if self.searches == self.after:
            if self.fault == "raise":
                raise RuntimeError(f"injected fault: the store raised on search {self.searches}")
            if self.fault == "timeout":
                log.warning("injected fault: search %d blocks for %.1f s", self.searches, self.delay_s)
                time.sleep(self.delay_s)
                raise TimeoutError(f"injected fault: the store did not answer search {self.searches} "
                                   f"within {self.delay_s:.1f} s")
            if self.fault == "crash":
                log.warning("injected fault: killing this process (pid %d) mid-run", os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "kill":
                log.warning("injected fault: killing the server process group %d mid-run", self.kill_pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(self.kill_pid), signal.SIGKILL)
                time.sleep(0.5)  # the kernel closes its sockets once it is gone
        return self._inner.search(vector, k=k, where=where)

    def reference_query(self, vector, *, k: int, where):
        return self._inner.reference_query(vector, k=k, where=where)

    def close(self) -> None:
        self._inner.close()

    def drop(self) -> None:
        self._inner.drop()


# ----------------------------------------------------------------------------- loopback embeddings server

EMBED_MODES = ("ok", "nan", "inf", "wrong_dim", "wrong_count", "not_json", "zero", "not_numbers", "reject")


def _vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).tolist()


class EmbeddingServer:
    """OpenAI-compatible ``POST /<mode>/v1/embeddings`` on 127.0.0.1 (a test double, not a model).

    ``ok`` answers deterministic vectors (a hash of the text seeds them); the other modes answer what
    a broken endpoint might: NaN/inf values, a wrong dimension or count, an HTML page, a zero vector,
    strings instead of numbers, or 401 with the received key echoed back (as some services do).
    A request whose ``model`` is a mode name gets that mode whatever the path.
    When ``key`` is set, requests must carry ``Authorization: Bearer <key>`` (else 401, key echoed).
    """

    def __init__(self, *, dim: int = 32, key: str | None = None) -> None:
        self.dim, self.key = dim, key
        self.requests = 0
        self.authorised = 0  # requests that carried the expected key
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "EmbeddingServer not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def base_url(self, mode: str = "ok") -> str:
        return f"{self.url}/{mode}/v1"

    def start(self) -> "EmbeddingServer":
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                srv.requests += 1
                mode = self.path.strip("/").split("/")[0]
                payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if payload.get("model") in EMBED_MODES:  # the model name may pick the mode too
                    mode = payload["model"]
                got = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if mode == "reject" or (srv.key and got != srv.key):
                    msg = {"error": {"message": f"Incorrect API key provided: {got}", "code": 401}}
                    return self._send(401, json.dumps(msg).encode())
                if srv.key:
                    srv.authorised += 1
                texts = payload.get("input") or []
                dim = srv.dim + (1 if mode == "wrong_dim" else 0)
                rows = [_vector(t, dim) for t in texts]
                if mode == "nan" and rows:
                    rows[-1][0] = float("nan")
                if mode == "inf" and rows:
                    rows[-1][1] = float("inf")
                if mode == "zero" and rows:
                    rows[-1] = [0.0] * dim
                if mode == "wrong_count":
                    rows = rows[:-1]
                if mode == "not_json":
                    return self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                data = [{"object": "embedding", "index": i, "embedding": r if mode != "not_numbers" else [str(x) for x in r]}
                        for i, r in enumerate(rows)]
                return self._send(200, json.dumps({"object": "list", "data": data, "model": payload.get("model")}).encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="embedding-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "EmbeddingServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- Pinecone data plane


MAX_UPSERT_VECTORS = 1000
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_TOP_K = 10_000


class ApiError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _compare(op: str, value, arg) -> bool:
    if op == "$eq":
        return value == arg
    if op == "$ne":
        return value != arg
    if op == "$in":
        return value in arg
    if op == "$nin":
        return value not in arg
    if op == "$exists":
        return (value is not None) == bool(arg)
    if value is None or isinstance(value, str) or isinstance(arg, str):
        return False  # range operators are numeric only
    return {"$gt": value > arg, "$gte": value >= arg, "$lt": value < arg, "$lte": value <= arg}[op]


_OPS = {"$eq", "$ne", "$in", "$nin", "$exists", "$gt", "$gte", "$lt", "$lte"}


def matches(flt: dict | None, meta: dict) -> bool:
    """Pinecone metadata filter language: field: value | {op: arg}, $and / $or lists."""
    if not flt:
        return True
    if not isinstance(flt, dict):
        raise ApiError(400, 3, f"filter must be an object, got {flt!r}")
    for key, cond in flt.items():
        if key in ("$and", "$or"):
            if not isinstance(cond, list) or not cond:
                raise ApiError(400, 3, f"{key} needs a non-empty list")
            results = [matches(c, meta) for c in cond]
            if not (all(results) if key == "$and" else any(results)):
                return False
            continue
        value = meta.get(key)
        if isinstance(cond, dict):
            for op, arg in cond.items():
                if op not in _OPS:
                    raise ApiError(400, 3, f"unsupported filter operator {op!r}")
                if op in ("$in", "$nin") and not isinstance(arg, list):
                    raise ApiError(400, 3, f"{op} needs a list")
                if not _compare(op, value, arg):
                    return False
        elif value != cond:
            return False
    return True


class _Namespace:
    def __init__(self) -> None:
        self.rows: dict[str, tuple[np.ndarray, dict, float]] = {}  # id -> (unit vector, metadata, visible_at)


class PineconeTestServer:
    """Loopback Pinecone data-plane test double. ``dimension=None``: fixed by the first upsert."""

    def __init__(
        self, api_key: str, *, dimension: int | None = None, metric: str = "cosine", visibility_delay_s: float = 0.0
    ) -> None:
        self.api_key = api_key
        self.dimension = dimension
        self.metric = metric
        self.visibility_delay_s = visibility_delay_s
        self.namespaces: dict[str, _Namespace] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, vectors in an upsert / 0)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    @property
    def host(self) -> str:
        if self._httpd is None:
            raise RuntimeError("PineconeTestServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> str:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="pinecone-test-server", daemon=True)
        self._thread.start()
        log.debug("pinecone test double on %s", self.host)
        return self.host

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "PineconeTestServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- operations (bodies are the camelCase JSON of the REST API)
    def _visible(self, ns: _Namespace, now: float):
        return [(i, v, m) for i, (v, m, t) in ns.rows.items() if t <= now]

    def upsert(self, body: dict) -> dict:
        vectors = body.get("vectors")
        if not isinstance(vectors, list) or not vectors:
            raise ApiError(400, 3, "vectors must be a non-empty list")
        if len(vectors) > MAX_UPSERT_VECTORS:
            raise ApiError(400, 3, f"upsert of {len(vectors)} vectors exceeds the limit of {MAX_UPSERT_VECTORS}")
        visible_at = time.monotonic() + self.visibility_delay_s
        with self._lock:
            parsed = []
            for j, v in enumerate(vectors):
                values = np.asarray(v.get("values", []), dtype=np.float64)
                if self.dimension is None:
                    self.dimension = int(values.shape[0])
                if values.shape != (self.dimension,):
                    raise ApiError(
                        400, 3, f"Vector dimension {values.shape[0]} does not match the dimension of the index {self.dimension}"
                    )
                norm = np.linalg.norm(values)
                if not isinstance(v.get("id"), str) or not v["id"] or norm == 0:
                    raise ApiError(400, 3, f"vectors[{j}]: bad id or zero vector")
                parsed.append((v["id"], values / norm, dict(v.get("metadata") or {})))
            ns = self.namespaces.setdefault(body.get("namespace", ""), _Namespace())
            for vid, unit, meta in parsed:
                ns.rows[vid] = (unit, meta, visible_at)
        return {"upsertedCount": len(parsed)}

    def query(self, body: dict) -> dict:
        top_k = body.get("topK")
        if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise ApiError(400, 3, f"topK must be in 1..{MAX_TOP_K}, got {top_k!r}")
        name = body.get("namespace", "")
        with self._lock:
            ns = self.namespaces.get(name)
            if "vector" in body:
                q = np.asarray(body["vector"], dtype=np.float64)
            elif "id" in body and ns is not None and body["id"] in ns.rows:
                q = ns.rows[body["id"]][0]
            else:
                raise ApiError(400, 3, "query needs a vector or a known id")
            if self.dimension is not None and q.shape != (self.dimension,):
                raise ApiError(400, 3, f"Query vector dimension {q.shape[0]} does not match the dimension of the index {self.dimension}")
            rows = [r for r in self._visible(ns, time.monotonic()) if matches(body.get("filter"), r[2])] if ns else []
        if not rows:
            return {"matches": [], "namespace": name, "usage": {"readUnits": 1}}
        q = q / (np.linalg.norm(q) or 1.0)
        sims = np.stack([r[1] for r in rows]) @ q
        order = sorted(range(len(rows)), key=lambda i: (-sims[i], rows[i][0]))[:top_k]
        out = []
        for i in order:
            m = {"id": rows[i][0], "score": float(sims[i])}
            if body.get("includeValues"):
                m["values"] = rows[i][1].tolist()
            if body.get("includeMetadata"):
                m["metadata"] = rows[i][2]
            out.append(m)
        return {"matches": out, "namespace": name, "usage": {"readUnits": 1}}

    def fetch(self, params: dict) -> dict:
        name = params.get("namespace", [""])[0]
        now = time.monotonic()
        with self._lock:
            ns = self.namespaces.get(name)
            visible = {i: (v, m) for i, v, m in self._visible(ns, now)} if ns else {}
        found = {i: {"id": i, "values": visible[i][0].tolist(), "metadata": visible[i][1]} for i in params.get("ids", []) if i in visible}
        return {"vectors": found, "namespace": name, "usage": {"readUnits": 1}}

    def delete(self, body: dict) -> dict:
        name = body.get("namespace", "")
        with self._lock:
            ns = self.namespaces.get(name)
            if ns is None:
                raise ApiError(404, 5, "Namespace not found")
            if body.get("deleteAll"):
                ns.rows.clear()
            elif body.get("ids"):
                for i in body["ids"]:
                    ns.rows.pop(i, None)
            elif body.get("filter"):
                for i in [i for i, (_, m, _t) in ns.rows.items() if matches(body["filter"], m)]:
                    del ns.rows[i]
            else:
                raise ApiError(400, 3, "delete needs ids, deleteAll or filter")
            if not ns.rows:
                del self.namespaces[name]
        return {}

    def describe_index_stats(self, body: dict) -> dict:
        if body.get("filter"):
            raise ApiError(400, 3, "describe_index_stats does not support a filter")
        now = time.monotonic()
        with self._lock:
            counts = {n or "__default__": len(self._visible(ns, now)) for n, ns in self.namespaces.items()}
        counts = {n: c for n, c in counts.items() if c}
        return {
            "namespaces": {n: {"vectorCount": c} for n, c in counts.items()},
            "dimension": self.dimension,
            "indexFullness": 0.0,
            "totalVectorCount": sum(counts.values()),
            "metric": self.metric,
            "vectorType": "dense",
        }


class _Handler(BaseHTTPRequestHandler):
    owner: PineconeTestServer
    protocol_version = "HTTP/1.1"  # keep-alive, like the SDK's connection pool expects
    disable_nagle_algorithm = True  # TCP_NODELAY: otherwise every request waits ~44 ms

    def log_message(self, fmt: str, *args) -> None:  # quiet; the test log is enough
        log.debug("pinecone test double: " + fmt, *args)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if self.headers.get("Api-Key") != self.owner.api_key:
                raise ApiError(401, 16, "Invalid API Key")
            if length > MAX_BODY_BYTES:
                raise ApiError(413, 3, f"request of {length} bytes exceeds the 2 MB limit")
            body = json.loads(raw or b"{}") if method == "POST" else {}
            srv = self.owner
            n = len(body.get("vectors", [])) if url.path == "/vectors/upsert" else 0
            srv.requests.append((method, url.path, n))
            routes = {
                ("POST", "/vectors/upsert"): lambda: srv.upsert(body),
                ("POST", "/query"): lambda: srv.query(body),
                ("GET", "/vectors/fetch"): lambda: srv.fetch(parse_qs(url.query)),
                ("POST", "/vectors/delete"): lambda: srv.delete(body),
                ("POST", "/describe_index_stats"): lambda: srv.describe_index_stats(body),
            }
            if (method, url.path) not in routes:
                raise ApiError(404, 5, f"no route {method} {url.path}")
            self._send(200, routes[(method, url.path)]())
        except ApiError as e:
            self._send(e.status, {"code": e.code, "message": e.message, "details": []})
        except (ValueError, TypeError, KeyError) as e:
            self._send(400, {"code": 3, "message": f"bad request: {e}", "details": []})

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")
