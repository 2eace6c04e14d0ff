"""Qdrant store: Qdrant's own engine in-process (Qdrant Edge, ``qdrant-edge-py``), or a Qdrant server via ``qdrant-client``.

Owns the Qdrant adapter. Two modes, one contract:
- ``url`` null (default): an Edge shard (the Rust engine of Qdrant, no server) per collection in
  ``path/<collection>``; a shard opens once per process (its WAL is locked), so instances on the same
  collection share the open shard. Updates are applied when ``update`` returns; ``wait_ready`` runs the shard's
  optimizers (``optimize()``: merges segments and builds the HNSW graph once a segment exceeds
  ``indexing_threshold_kb``; below it Qdrant scans the segment: exact, as a Qdrant server would).
- ``url`` set: a Qdrant server (``QdrantClient(url=...)``, API key read from the environment variable named
  by ``api_key_env``), one collection per collection; ``url: ":memory:"`` is qdrant-client's pure-Python
  local mode (slow: 214 s for 10k rows here; tests only, on tiny data).

Points: Qdrant ids are integers or UUIDs, so a memory id becomes ``uuid5(NAMESPACE_URL, id)`` and the id
itself is kept in the payload (``mid``) beside ``conversation_id``, ``role`` (keyword payload indexes) and
``ts`` (float payload index), and a corpus's metadata fields (``m_<name>``, numbers as floats). Filters are Qdrant
filters (``must``: match value, match any, ranges; membership among numbers a nested ``should``),
applied inside the search; with payload indexes Qdrant's planner switches to an exact scan of the
matching points when fewer than ``full_scan_threshold`` (KB of vectors) match. Cosine distance: the score
IS the cosine similarity (Qdrant normalises vectors at insert); ``metric: l2`` (Euclid) and ``ip`` (Dot): ``SCORES``.

Settings: build ``m``, ``ef_construct``, ``full_scan_threshold`` (KB), ``indexing_threshold_kb``; search
``hnsw_ef`` (None: Qdrant's default, the search's limit) and ``exact`` (brute force; capabilities say exact).
Quantisation: build ``quantization: none | int8`` (Qdrant's scalar int8 quantization, kept in RAM, built by the
optimizer with each indexed segment); search ``rescore`` (true: the candidates are re-scored with the original
vectors, the score is the exact metric; false: the score is Qdrant's int8 estimate, its similarity clipped to [-1, 1])
and ``oversampling`` (candidates fetched = limit x oversampling before rescoring; null: Qdrant's default).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import threading
import uuid

import numpy as np

from bench.backends.base import FILTER_KINDS, BackendUnavailable, Capabilities, Client, check_metric, import_client, native_hits
from bench.backends.base import META_PREFIX, best_first, store_metadata
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENT = Client("qdrant_edge", "qdrant-edge-py", "qdrant")  # the engine in-process (url null)
SERVER_CLIENT = Client("qdrant_client", "qdrant-client", "qdrant")  # a Qdrant server (url set)

MAX_K = 100_000
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
UPSERT_BATCH = 1000
QUANTIZATION = ("none", "int8")


# An Edge shard can be opened once per process (its WAL is locked): instances on the same directory share it.
_SHARDS_LOCK = threading.Lock()
_SHARDS: dict[str, list] = {}  # shard directory -> [EdgeShard, instances holding it]


def _acquire_shard(folder: str, make):
    with _SHARDS_LOCK:
        entry = _SHARDS.get(folder)
        if entry is None:
            entry = _SHARDS[folder] = [make(), 0]
        entry[1] += 1
        return entry[0]


def _release_shard(folder: str, *, force: bool = False) -> None:
    with _SHARDS_LOCK:
        entry = _SHARDS.get(folder)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0 or force:
            del _SHARDS[folder]
            entry[0].close()


def point_id(memory_id: str) -> str:
    """The Qdrant point id of a memory id (a UUID derived from it; the memory id itself is in the payload)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, memory_id))


# metric -> Qdrant's Distance and what its score is (bench.backends.scores): Cosine the cosine similarity, Euclid the
# Euclidean distance (not squared, lower is better), Dot the dot product
SCORES = (("cosine", "cosine"), ("l2", "l2"), ("ip", "dot"))
_DISTANCE = {"cosine": ("Cosine", "COSINE"), "l2": ("Euclid", "EUCLID"), "ip": ("Dot", "DOT")}  # (Edge, client) names


def shard_name(collection: str) -> str:
    if not isinstance(collection, str) or not collection:
        raise ValueError(f"qdrant: collection must be a non-empty string (got {collection!r})")
    cleaned = _SAFE.sub("_", collection)[:100].lstrip(".")
    return cleaned if cleaned == collection else f"{cleaned or 'c'}-{uuid.uuid5(uuid.NAMESPACE_URL, collection).hex[:10]}"


def _nothing_matches(where: Where) -> bool:
    return (where.roles is not None and len(where.roles) == 0) or where.before == -math.inf


def _conditions(where: Where) -> list[tuple[str, str, object]]:
    """(field, kind, value) per condition: kind ``eq`` (match value), ``any`` (match any), ``lte`` (range)."""
    out = []
    if where.conversation_id is not None:
        out.append(("conversation_id", "eq", str(where.conversation_id)))
    if where.roles is not None:
        out.append(("role", "any", [str(r) for r in where.roles]))
    if where.before is not None and where.before != math.inf:
        if math.isnan(where.before):
            raise ValueError("qdrant: Where.before is NaN")
        out.append(("ts", "lte", max(float(where.before), -1e300)))
    for name, op, value in where.metadata or ():  # the corpus's own fields, payload keys META_PREFIX + name
        key = META_PREFIX + name
        if op in ("gte", "lte", "gt", "lt"):
            out.append((key, "range", {op: float(value)}))
        elif op == "eq" or len(value) == 1:
            out.append(_match(key, value if op == "eq" else value[0]))
        elif all(isinstance(v, str) for v in value):
            out.append((key, "any", list(value)))
        else:  # numbers or booleans: one of several conditions
            out.append((key, "or", [_match(key, v) for v in value]))
    return out


def _match(key: str, value) -> tuple[str, str, object]:
    """Equality on a payload field: a match for a string or boolean, a [v, v] range for a number (stored as a float)."""
    if isinstance(value, (str, bool)):
        return (key, "eq", value)
    return (key, "range", {"gte": float(value), "lte": float(value)})


def _qdrant_filter(conds, mod, edge: bool):
    """The Qdrant filter (``must`` of the conditions) in the Edge (``edge``) or qdrant-client (``mod``: models) classes."""
    if not conds:
        return None

    def one(f, kind, x):
        if kind == "eq":
            return mod.FieldCondition(key=f, match=mod.MatchValue(x) if edge else mod.MatchValue(value=x))
        if kind == "any":
            return mod.FieldCondition(key=f, match=mod.MatchAny(x) if edge else mod.MatchAny(any=x))
        if kind == "or":
            return mod.Filter(should=[one(*c) for c in x])
        rng = {"lte": x} if kind == "lte" else x
        return mod.FieldCondition(key=f, range=mod.RangeFloat(**rng) if edge else mod.Range(**rng))

    return mod.Filter(must=[one(*c) for c in conds])


class QdrantBackend:
    name = "qdrant"

    def __init__(self, collection: str = "recallbench", path: str | None = None, url: str | None = None,
                 api_key_env: str | None = None, m: int = 16, ef_construct: int = 100, full_scan_threshold: int = 10_000,
                 indexing_threshold_kb: int = 10_000, hnsw_ef: int | None = None, exact: bool = False,
                 timeout_s: float = 60.0, metric: str = "cosine", quantization: str = "none", rescore: bool = True,
                 oversampling: float | None = None) -> None:
        if url is None and not path:
            raise ValueError("qdrant: give `path` (Qdrant Edge, in-process) or `url` (a Qdrant server)")
        for field, value in (("m", m), ("ef_construct", ef_construct), ("full_scan_threshold", full_scan_threshold),
                             ("indexing_threshold_kb", indexing_threshold_kb)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"qdrant: {field} must be a positive integer (got {value!r})")
        if hnsw_ef is not None and (not isinstance(hnsw_ef, int) or hnsw_ef <= 0):
            raise ValueError(f"qdrant: hnsw_ef must be a positive integer or null (got {hnsw_ef!r})")
        if quantization not in QUANTIZATION:
            raise ValueError(f"qdrant: quantization must be one of {', '.join(QUANTIZATION)} (got {quantization!r})")
        if oversampling is not None and (isinstance(oversampling, bool) or not isinstance(oversampling, (int, float))
                                         or not oversampling >= 1):
            raise ValueError(f"qdrant: oversampling must be a number >= 1 or null (got {oversampling!r})")
        if api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(api_key_env)):
            raise ValueError("qdrant: api_key_env must be the NAME of an environment variable (the value was not shown)")
        self.collection = collection
        self._name = shard_name(collection)
        self.url, self.api_key_env = url, api_key_env
        self.path = os.path.abspath(path) if (path and url is None) else None
        self.m, self.ef_construct, self.full_scan_threshold = m, ef_construct, full_scan_threshold
        self.indexing_threshold_kb, self.hnsw_ef, self.exact, self.timeout_s = indexing_threshold_kb, hnsw_ef, bool(exact), timeout_s
        self.quantization, self.rescore = quantization, bool(rescore)
        self.oversampling = None if oversampling is None else float(oversampling)
        # a server url is a store nothing here starts (kind "cloud"); ":memory:" is the client's in-process local mode
        remote = url is not None and url != ":memory:"
        self.capabilities = Capabilities(exact=self.exact, filters=FILTER_KINDS, persistent=url is None or remote,
                                         server=remote, max_k=MAX_K, clients=(CLIENT, SERVER_CLIENT) if url is None else (SERVER_CLIENT,),
                                         scores=SCORES)
        self.metric = metric  # cosine | l2 | ip: the collection's Distance (fixed when it is created)
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        self._shard = None  # Edge mode
        self._client = None  # client mode
        self._dim = 0
        self._dirty = False

    def __repr__(self) -> str:
        return f"QdrantBackend({'edge ' + str(self.path) if self.url is None else self.url}, collection={self._name!r})"

    # ---------------------------------------------------------------- modes
    def _edge(self):
        return CLIENT.load("qdrant")

    def _models(self):
        return import_client("qdrant_client.models", store="qdrant", package=SERVER_CLIENT.package, extra=SERVER_CLIENT.extra)

    def _connect_client(self):
        if self._client is None:
            qc = SERVER_CLIENT.load("qdrant")
            if self.url == ":memory:":
                self._client = qc.QdrantClient(location=":memory:")
            else:
                key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
                self._client = qc.QdrantClient(url=self.url, api_key=key or None, timeout=int(self.timeout_s))
                try:
                    self._client.get_collections()
                except Exception as exc:
                    self._client = None
                    raise BackendUnavailable(f"store qdrant: server {self.url} is unavailable: {type(exc).__name__}: "
                                             f"{(str(exc).splitlines() or [''])[0]}") from None
        return self._client

    def _shard_dir(self) -> str:
        return os.path.join(self.path, self._name)

    # ---------------------------------------------------------------- contract
    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"qdrant: dim must be a positive integer (got {dim!r})")
        if self.url is None:
            self._open_edge(dim)
        else:
            self._open_client(dim)
        self._dim = dim

    def _open_edge(self, dim: int) -> None:
        q = self._edge()
        if self._shard is not None:
            return
        folder = self._shard_dir()
        shard = _acquire_shard(folder, lambda: self._load_or_create(q, folder, dim))
        size = _edge_dim(shard, q)
        if size is not None and size != dim:
            _release_shard(folder)
            raise ValueError(f"qdrant: shard {folder} holds dim={size}, asked for dim={dim}; use another collection or drop it")
        self._shard = shard

    def _load_or_create(self, q, folder: str, dim: int):
        if os.path.isdir(folder) and os.listdir(folder):
            return q.EdgeShard.load(folder)
        cfg = q.EdgeConfig(vectors=q.EdgeVectorParams(size=dim, distance=getattr(q.Distance, _DISTANCE[self.metric][0])),
                           hnsw_config=q.HnswIndexConfig(m=self.m, ef_construct=self.ef_construct,
                                                         full_scan_threshold=self.full_scan_threshold),
                           optimizers=q.EdgeOptimizersConfig(indexing_threshold=self.indexing_threshold_kb),
                           quantization_config=self._quantization_config(q, edge=True))
        shard = q.EdgeShard.create(folder, cfg)
        for field, kind in (("conversation_id", q.PayloadSchemaType.Keyword), ("role", q.PayloadSchemaType.Keyword),
                            ("ts", q.PayloadSchemaType.Float)):
            shard.update(q.UpdateOperation.create_field_index(field, kind))
        log.info("qdrant: created Edge shard %s (dim %d)", folder, dim)
        return shard

    def _open_client(self, dim: int) -> None:
        client, m = self._connect_client(), self._models()
        if client.collection_exists(self._name):
            size = client.get_collection(self._name).config.params.vectors.size
            if size != dim:
                raise ValueError(f"qdrant: collection {self._name!r} holds dim={size}, asked for dim={dim}")
            return
        client.create_collection(self._name, vectors_config=m.VectorParams(size=dim, distance=getattr(m.Distance, _DISTANCE[self.metric][1])),
                                 hnsw_config=m.HnswConfigDiff(m=self.m, ef_construct=self.ef_construct,
                                                              full_scan_threshold=self.full_scan_threshold),
                                 optimizers_config=m.OptimizersConfigDiff(indexing_threshold=self.indexing_threshold_kb),
                                 quantization_config=self._quantization_config(m, edge=False))
        if self.url == ":memory:":
            return  # the client's local mode ignores payload indexes (and warns)
        for field, kind in (("conversation_id", m.PayloadSchemaType.KEYWORD), ("role", m.PayloadSchemaType.KEYWORD),
                            ("ts", m.PayloadSchemaType.FLOAT)):
            client.create_payload_index(self._name, field, field_schema=kind)

    def _quantization_config(self, mod, *, edge: bool):
        """Scalar int8 quantization in RAM (None: none), in the Edge or qdrant-client (``mod``: models) classes."""
        if self.quantization == "none":
            return None
        if edge:
            return mod.ScalarQuantizationConfig(type=mod.ScalarType.Int8, always_ram=True)
        return mod.ScalarQuantization(scalar=mod.ScalarQuantizationConfig(type=mod.ScalarType.INT8, always_ram=True))

    def _search_params(self, mod):
        """SearchParams of this store's search settings (the same class names in Edge and qdrant-client models)."""
        quant = None
        if self.quantization != "none":
            quant = mod.QuantizationSearchParams(rescore=self.rescore, oversampling=self.oversampling)
        return mod.SearchParams(hnsw_ef=self.hnsw_ef, exact=self.exact, quantization=quant)

    def _require_open(self):
        if not self._dim:
            raise RuntimeError(f"qdrant: collection {self.collection!r} is not open (call open(dim=...) first)")

    def add(self, batch: MemoryBatch) -> None:
        self._require_open()
        if len(batch.ids) == 0:
            return
        vectors = np.ascontiguousarray(batch.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self._dim:
            raise ValueError(f"qdrant: vector dim {vectors.shape[-1]} != collection dim {self._dim}")
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"qdrant: vector of id {batch.ids[bad]!r} has NaN/inf values")
        last = {mid: i for i, mid in enumerate(batch.ids)}
        rows = sorted(last.values())
        payloads = []
        for i in rows:
            if not isinstance(batch.ids[i], str) or not batch.ids[i]:
                raise ValueError(f"qdrant: batch row {i}: field id must be a non-empty string (got {batch.ids[i]!r})")
            ts = batch.timestamps[i]
            if not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ValueError(f"qdrant: batch row {i} (id {batch.ids[i]!r}): field timestamp must be a finite number")
            payloads.append({"mid": batch.ids[i], "conversation_id": str(batch.conversation_ids[i]),
                             "role": str(batch.roles[i]), "ts": float(ts), **store_metadata(batch, i)})
        for s in range(0, len(rows), UPSERT_BATCH):
            part = list(zip(rows[s:s + UPSERT_BATCH], payloads[s:s + UPSERT_BATCH]))
            if self.url is None:
                q = self._edge()
                self._shard.update(q.UpdateOperation.upsert_points(
                    [q.Point(point_id(p["mid"]), vectors[i].tolist(), p) for i, p in part]))
            else:
                m = self._models()
                self._client.upsert(self._name, points=[m.PointStruct(id=point_id(p["mid"]), vector=vectors[i].tolist(), payload=p)
                                                        for i, p in part], wait=True)
        self._dirty = True

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Edge: run the optimizers (segments merged, HNSW built past ``indexing_threshold_kb``) and flush. Writes are
        searchable when ``add`` returns (Edge applies updates synchronously; the client upserts with ``wait=True``)."""
        self._require_open()
        if self._dirty and self.url is None:
            self._shard.optimize()
            self._shard.flush()
        self._dirty = False

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        self._require_open()
        if not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"qdrant: k must be a positive integer (got {k!r})")
        if k > self.capabilities.max_k:
            raise ValueError(f"qdrant: k={k} exceeds max_k={self.capabilities.max_k}")
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if v.shape[0] != self._dim:
            raise ValueError(f"qdrant: query dim {v.shape[0]} != collection dim {self._dim}")
        if _nothing_matches(where):
            return Hits()
        ids, scores = self._query(v.tolist(), int(k), where)
        if self.quantization != "none" and not self.rescore:  # int8 estimates may stray past the ends of the range
            from bench.backends.scores import similarity

            return best_first(ids, [min(1.0, max(-1.0, similarity(self._kind, x))) for x in scores], [float(x) for x in scores])
        return native_hits(ids, scores, self._kind)

    def _query(self, v: list[float], k: int, where: Where) -> tuple[list[str], list[float]]:
        conds = _conditions(where)
        if self.url is None:
            q = self._edge()
            flt = _qdrant_filter(conds, q, edge=True)
            res = self._shard.query(q.QueryRequest(limit=k, query=q.Query.Nearest(v), filter=flt, with_payload=["mid"],
                                                   params=self._search_params(q)))
        else:
            m = self._models()
            flt = _qdrant_filter(conds, m, edge=False)
            res = self._client.query_points(self._name, query=v, query_filter=flt, limit=k, with_payload=["mid"],
                                            search_params=self._search_params(m)).points
        return [p.payload["mid"] for p in res], [p.score for p in res]

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The query as a Qdrant Edge user writes it: one QueryRequest with a must-filter, the native score turned into a
        similarity (the contract of ``Backend.reference_query``; Qdrant's score is a distance in an l2 collection)."""
        from bench.backends.scores import similarity

        if self.url is not None:
            ids, scores = self._query(np.asarray(vector, dtype=np.float32).tolist(), k, where)
            return ids, [similarity(self._kind, x) for x in scores]
        q = self._edge()
        must = []
        if where.conversation_id is not None:
            must.append(q.FieldCondition(key="conversation_id", match=q.MatchValue(where.conversation_id)))
        if where.roles is not None:
            must.append(q.FieldCondition(key="role", match=q.MatchAny(list(where.roles))))
        if where.before is not None and where.before != math.inf:
            must.append(q.FieldCondition(key="ts", range=q.RangeFloat(lte=where.before)))
        if where.metadata:  # the corpus's own fields, as search builds them
            must.extend(_qdrant_filter([c for c in _conditions(where) if c[0].startswith(META_PREFIX)], q, edge=True).must)
        res = self._shard.query(q.QueryRequest(limit=k, query=q.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()),
                                               filter=q.Filter(must=must) if must else None, with_payload=["mid"],
                                               params=self._search_params(q)))
        return [p.payload["mid"] for p in res], [similarity(self._kind, p.score) for p in res]

    def list_collections(self) -> list[str]:
        if self.url is None:
            return sorted(os.listdir(self.path)) if os.path.isdir(self.path) else []
        return [c.name for c in self._connect_client().get_collections().collections]

    def close(self) -> None:
        if self._shard is not None:
            self._shard = None
            _release_shard(self._shard_dir())
        self._dim, self._dirty = 0, False

    def drop(self) -> None:
        """Delete the shard directory / the collection. Idempotent; works after close()."""
        if self.url is None:
            held = self._shard is not None
            self._shard, self._dim, self._dirty = None, 0, False
            if held:
                _release_shard(self._shard_dir(), force=True)  # the data goes: no instance may keep using it
            shutil.rmtree(self._shard_dir(), ignore_errors=True)
            return
        self._dim = 0
        client = self._connect_client()
        if client.collection_exists(self._name):
            client.delete_collection(self._name)


def _edge_dim(shard, q) -> int | None:
    """The dense vector size a loaded Edge shard holds: the length of one stored vector (None when it is empty)."""
    points, _ = shard.scroll(q.ScrollRequest(limit=1, with_vector=True, with_payload=False))
    return len(points[0].vector) if points else None
