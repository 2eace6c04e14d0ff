"""chromadb store (1.5): persistent local (``path``) or a chroma server (``host``/``port``), one adapter.

Owns: the collection (HNSW, ``space=cosine``, ``embedding_function=None`` on create and get),
metadata keys ``conversation_id``, ``role``, ``ts`` filtered natively (``where`` with ``$eq``,
``$in``, ``$lte``, joined by ``$and``), chunked upserts, and the readiness check.

Facts it is built on (FACTS.md, re-checked with chromadb 1.5.9):
- cosine distance = 1 - cos, ascending; converted in ``_similarity`` only.
- Writes go through ``upsert`` in chunks of ``client.get_max_batch_size()`` (5461): re-adding an
  id replaces it (``add`` would silently keep the old row).
- Reads see writes at once; ``wait_ready`` still checks one probe row per chunk with a real search.
- Filtered HNSW search can miss matching rows (recall 0.40-0.83 at ef 64 for 10-50 % selective
  filters), so ``capabilities.exact`` is False. ``n_results`` above the number of matching rows
  returns what matches (no error).
- ``ef_search`` is fixed when the collection is created (changing it only takes effect in a new
  process); hnswlib searches with max(ef_search, k), so large k is not truncated by ef.
- Collection names: 3-63 characters of [a-zA-Z0-9._-], alphanumeric at both ends (the strictest
  rule of the local and server paths); other names are rewritten with a hash suffix.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import time
import warnings

import numpy as np

from bench.backends.base import BackendUnavailable, Capabilities, FILTER_KINDS, best_first, check_metric, mongo_filter
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)

_PROBE_K = 20
_DIM_KEY = "recallbench_dim"


def _similarity(distance: float) -> float:
    """chroma cosine distance (1 - cos, in [0, 2]) -> cosine similarity (higher is better)."""
    return 1.0 - float(distance)


def safe_collection_name(name: str) -> str:
    """A chroma-valid collection name for ``name``: itself when valid, else a cleaned form plus a hash."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"chroma: collection must be a non-empty string (got {name!r})")
    ok = (3 <= len(name) <= 63 and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]", name)
          and ".." not in name and not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", name))
    if ok:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    clean = re.sub(r"\.{2,}", ".", clean).strip("._-")[:54]
    return f"{clean}-{digest}" if clean else f"c-{digest}"


class ChromaBackend:
    """chromadb PersistentClient when ``host`` is None (``path`` required), else HttpClient."""

    name = "chroma"
    capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=False)

    def __init__(
        self,
        collection: str = "recallbench",
        path: str | None = None,
        host: str | None = None,
        port: int = 8000,
        ssl: bool = False,
        ef_search: int = 100,
        ef_construction: int = 100,
        max_neighbors: int = 16,
        batch_size: int | None = None,
    ) -> None:
        if host is None and not path:
            raise ValueError("chroma: give `path` (persistent local mode) or `host` (server mode)")
        for field, value in (("ef_search", ef_search), ("ef_construction", ef_construction),
                             ("max_neighbors", max_neighbors), ("port", port)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"chroma: {field} must be a positive integer (got {value!r})")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"chroma: batch_size must be a positive integer or null (got {batch_size!r})")
        if host is not None:
            self.name = "chroma_server"
            self.capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=True)
        self.collection = collection
        self._name = safe_collection_name(collection)
        self.path = os.path.abspath(path) if (path and host is None) else None
        self.host, self.port, self.ssl = host, port, ssl
        self.ef_search, self.ef_construction, self.max_neighbors = ef_search, ef_construction, max_neighbors
        self.batch_size = batch_size
        self._client = None
        self._col = None
        self._dim = 0
        self._probes: list[tuple[str, np.ndarray]] = []

    def _where(self) -> str:
        return f"local {self.path}" if self.host is None else f"server {self.host}:{self.port}"

    def _connect(self) -> None:
        if self._client is not None:
            return
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        if self.host is None:
            os.makedirs(self.path, exist_ok=True)
            self._client = chromadb.PersistentClient(path=self.path, settings=settings)
            return
        try:
            client = chromadb.HttpClient(host=self.host, port=self.port, ssl=self.ssl, settings=settings)
            client.heartbeat()
        except Exception as exc:  # connection refused, DNS, TLS, ...
            raise BackendUnavailable(
                f"chroma server {self.host}:{self.port} is unavailable: {type(exc).__name__}: {exc}"
            ) from exc
        self._client = client

    def _disconnect(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                log.debug("chroma: closing the client failed: %s", exc)
        self._client = self._col = None

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        check_metric(metric)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"chroma: dim must be a positive integer (got {dim!r})")
        was_connected = self._client is not None
        self._connect()
        try:
            self._open_collection(dim)
        except Exception:
            if not was_connected:
                self._disconnect()
            raise

    def _open_collection(self, dim: int) -> None:
        from chromadb.errors import NotFoundError

        try:
            col = self._client.get_collection(self._name, embedding_function=None)
        except NotFoundError:
            col = None
        if col is not None:
            with warnings.catch_warnings():  # chroma 1.5 warns "legacy embedding function config" for None
                warnings.simplefilter("ignore", DeprecationWarning)
                hnsw = (col.configuration or {}).get("hnsw") or {}
            space = hnsw.get("space")
            stored_dim = (col.metadata or {}).get(_DIM_KEY)
            if space != "cosine" or (stored_dim is not None and int(stored_dim) != dim):
                raise ValueError(
                    f"chroma ({self._where()}): collection {self.collection!r} exists with space {space!r} "
                    f"and dimension {stored_dim}; this run needs cosine, dimension {dim} "
                    "(use another collection name or drop it)"
                )
            ef = hnsw.get("ef_search")
            if ef is not None and ef != self.ef_search:
                log.warning("chroma: collection %s was created with ef_search=%s (config asks %d); it keeps %s",
                            self._name, ef, self.ef_search, ef)
        else:
            config = {"hnsw": {"space": "cosine", "ef_construction": self.ef_construction,
                               "max_neighbors": self.max_neighbors, "ef_search": self.ef_search}}
            col = self._client.create_collection(self._name, configuration=config, metadata={_DIM_KEY: dim},
                                                 embedding_function=None, get_or_create=True)
            log.info("chroma (%s): created collection %s (dim %d)", self._where(), self._name, dim)
        self._col, self._dim = col, dim

    def _require_open(self) -> None:
        if self._col is None:
            raise RuntimeError(f"chroma: collection {self.collection!r} is not open (call open(dim=...) first)")

    def add(self, batch: MemoryBatch) -> None:
        self._require_open()
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if vectors.shape[1] != self._dim:
            raise ValueError(f"chroma: vector dim {vectors.shape[1]} != collection dim {self._dim}")
        if len(batch.ids) == 0:
            return
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"chroma: vector of id {batch.ids[bad]!r} has NaN/inf values")
        for i, (mid, ts) in enumerate(zip(batch.ids, batch.timestamps, strict=True)):
            if not isinstance(mid, str) or not mid:
                raise ValueError(f"chroma: batch row {i}: id must be a non-empty string (got {mid!r})")
            if not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ValueError(f"chroma: batch row {i} (id {mid!r}): timestamp must be a finite number (got {ts!r})")
        step = self.batch_size or self._client.get_max_batch_size()
        step = min(step, self._client.get_max_batch_size())
        for start in range(0, len(batch.ids), step):
            end = min(start + step, len(batch.ids))
            metadatas = [
                {"conversation_id": str(c), "role": str(r), "ts": float(t)}
                for c, r, t in zip(batch.conversation_ids[start:end], batch.roles[start:end],
                                   batch.timestamps[start:end], strict=True)
            ]
            self._col.upsert(ids=list(batch.ids[start:end]), embeddings=vectors[start:end], metadatas=metadatas)
            self._probes.append((batch.ids[end - 1], vectors[end - 1]))

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Poll real searches until one probe row per written chunk is found (normally at once)."""
        self._require_open()
        t0 = time.monotonic()
        pause = 0.05
        while self._probes:
            self._probes = [p for p in self._probes if not self._probe_found(*p)]
            if not self._probes:
                break
            if time.monotonic() - t0 >= timeout_s:
                raise TimeoutError(
                    f"chroma ({self._where()}): {len(self._probes)} written chunk(s) of collection "
                    f"{self.collection!r} still not returned by search after {timeout_s:.0f} s "
                    f"(e.g. id {self._probes[0][0]!r})"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        log.debug("chroma: written rows searchable after %.2f s", time.monotonic() - t0)

    def _probe_found(self, mid: str, vector: np.ndarray) -> bool:
        res = self._col.query(query_embeddings=[vector], n_results=_PROBE_K, include=["distances"])
        ids, dists = res["ids"][0], res["distances"][0]
        if mid in ids:
            return True
        return len(ids) == _PROBE_K and float(dists[-1]) <= 1e-6  # crowded out by exact duplicates

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        self._require_open()
        if not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"chroma: k must be a positive integer (got {k!r})")
        if k > self.capabilities.max_k:
            raise ValueError(f"chroma: k={k} exceeds max_k={self.capabilities.max_k}")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"chroma: query dim {q.shape[0]} != collection dim {self._dim}")
        if where.roles is not None and len(where.roles) == 0:
            return Hits()
        res = self._col.query(query_embeddings=[q], n_results=int(k), where=_native_filter(where),
                              include=["distances"])
        return best_first(res["ids"][0], map(_similarity, res["distances"][0]))

    def close(self) -> None:
        self._probes = []
        self._disconnect()

    def drop(self) -> None:
        from chromadb.errors import NotFoundError

        was_open = self._client is not None
        try:
            self._connect()
            try:
                self._client.delete_collection(self._name)
                log.info("chroma (%s): dropped collection %s", self._where(), self._name)
            except NotFoundError:
                pass
        finally:
            self._col = None
            self._probes = []
            if not was_open:
                self._disconnect()


def _native_filter(where: Where) -> dict | None:
    return mongo_filter(where, "chroma")
