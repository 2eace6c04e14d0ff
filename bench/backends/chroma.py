"""chromadb store (1.5): persistent local (``path``) or a chroma server (``host``/``port``), one adapter.

Owns: the collection (HNSW, ``space=cosine``, ``embedding_function=None`` on create and get),
metadata keys ``conversation_id``, ``role``, ``ts`` filtered natively (``where`` with ``$eq``,
``$in``, ``$lte``, joined by ``$and``), chunked upserts, and the readiness check.

Facts it is built on (FACTS.md, re-checked with chromadb 1.5.9):
- cosine distance = 1 - cos, ascending (``metric: cosine``, hnsw space cosine); ``metric: l2`` is space l2, the SQUARED
  Euclidean distance 2 - 2 cos (chroma's default space); ``metric: ip`` is space ip, 1 - q.v. Converted to a similarity
  by ``bench.backends.scores`` only (``native_hits``); the distance is kept as the hit's native score.
- Writes go through ``upsert`` in chunks of ``client.get_max_batch_size()`` (5461): re-adding an
  id replaces it (``add`` would silently keep the old row).
- Reads see writes at once (``get``/``count``), but a stored row can be one that NO search returns, ever:
  chroma inserts a batch into hnswlib in parallel (rayon), and a node can end up with no in-edge in
  the graph (measured with 1.5.9 on the contract test's 40 + 6 rows: 8 of 400 collections on a chroma
  server had one of the 6 new rows unreachable, 0 of 400 with RAYON_NUM_THREADS=1; its embedding is
  in ``get``, an unfiltered query with ``n_results=count`` and its own vector does not return it, and
  it stays so). Large graphs also strand rows when neighbour lists are pruned: 12-16 of 20k and 145
  of 100k rows after ingest, with or without parallelism. Re-upserting a stranded row re-links it
  (all of the small cases; 145 -> 14 at 100k); the rest stay unreachable (chroma issue #7758 shows
  the same symptom). So ``wait_ready`` checks EVERY written row in bulk: ``get`` (stored), one
  exhaustive graph traversal (an unfiltered query with ``n_results=count``: 0.6 s at 100k), and an
  own-vector search for each row the traversal did not reach (for up to ``_DIRECT_PROBES`` rows it
  searches each directly); it re-upserts stranded rows up to ``_REPAIR_ROUNDS`` times and logs the
  ones that stay unreachable in ``unreachable`` (an ANN shortfall, not an error).
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

from bench.backends.base import (
    FILTER_KINDS,
    BackendUnavailable,
    Capabilities,
    Client,
    check_metric,
    client_collections,
    import_client,
    mongo_filter,
    native_hits,
    store_metadata,
)
from bench.backends.scores import similarity
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENT = Client("chromadb", "chromadb", "chroma")  # the client this store imports, and the extra that installs it

_PROBE_K = 20  # neighbours fetched when checking that a row is found by a search with its own vector
_DIRECT_PROBES = 100  # up to this many rows to check: one own-vector search each; more: a traversal first
_QUERY_BATCH = 100  # query vectors per request when probing rows
_REPAIR_ROUNDS = 3  # re-upserts of stranded rows (rounds after the first rarely re-link more)
_TRAVERSAL_SEED = 20_241_201  # the traversal's query vector (any vector reaches the same graph)
_DIM_KEY = "recallbench_dim"


SCORES = (("cosine", "cosine_distance"), ("l2", "l2_squared"), ("ip", "one_minus_dot"))  # hnsw space -> what it returns


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

    # a per-conversation collection writes its index to disk every 100 rows, so one chroma drops from its cache of
    # loaded indexes reads back once it holds 100 rows (``sync_threshold``; bench.backends.layout)
    per_conversation_settings = {"sync_threshold": 100}

    name = "chroma"
    capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=False, clients=(CLIENT,), scores=SCORES)

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
        metric: str = "cosine",
        sync_threshold: int | None = None,
    ) -> None:
        """sync_threshold: rows after which a new collection's HNSW index is written to disk (chroma's
        ``hnsw.sync_threshold``, also its ``hnsw.batch_size`` when lower; None: chroma's 1000). A per-conversation
        collection takes ``per_conversation_settings``' 100: chroma keeps at most ``hnsw_cache_size()`` indexes loaded
        and cannot read back one it dropped before it was ever written to disk (``evicted_line``); once written, the
        rows after it are replayed from chroma's log. Measured with 1.5.9 under ``ulimit -n 200`` (a cache of 40), 60
        collections each searched after its write (``wait_ready``), then each searched for its first and last row: 150
        rows each at 100, all 120 found; 10 rows each (never written at 100), 40 of them fail; at 10, all found."""
        if sync_threshold is not None and (not isinstance(sync_threshold, int) or sync_threshold < 2):
            raise ValueError(f"chroma: sync_threshold must be an integer >= 2 or null (got {sync_threshold!r})")
        self.sync_threshold = sync_threshold
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
            self.capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=True,
                                             local_server="chroma", clients=(CLIENT,), scores=SCORES)
        self.metric = metric  # the hnsw space (cosine | l2 | ip), fixed when the collection is created
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        self.collection = collection
        self._name = safe_collection_name(collection)
        self.path = os.path.abspath(path) if (path and host is None) else None
        self.host, self.port, self.ssl = host, port, ssl
        self.ef_search, self.ef_construction, self.max_neighbors = ef_search, ef_construction, max_neighbors
        self.batch_size = batch_size
        self._client = None
        self._col = None
        self._dim = 0
        self._pending: list[str] = []  # ids written since the last wait_ready()
        self.unreachable: set[str] = set()  # written rows no search returns even after re-upserts (logged)

    def _where(self) -> str:
        return f"local {self.path}" if self.host is None else f"server {self.host}:{self.port}"

    def _connect(self) -> None:
        if self._client is not None:
            return
        chromadb = _client("chromadb")
        settings = _client("chromadb.config").Settings(anonymized_telemetry=False)
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

    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
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
        NotFoundError = _client("chromadb.errors").NotFoundError  # noqa: N806

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
            if space != self.metric or (stored_dim is not None and int(stored_dim) != dim):
                raise ValueError(
                    f"chroma ({self._where()}): collection {self.collection!r} exists with space {space!r} "
                    f"and dimension {stored_dim}; this run needs {self.metric}, dimension {dim} "
                    "(use another collection name or drop it)"
                )
            ef = hnsw.get("ef_search")
            if ef is not None and ef != self.ef_search:
                log.warning("chroma: collection %s was created with ef_search=%s (config asks %d); it keeps %s",
                            self._name, ef, self.ef_search, ef)
        else:
            config = {"hnsw": {"space": self.metric, "ef_construction": self.ef_construction,
                               "max_neighbors": self.max_neighbors, "ef_search": self.ef_search}}
            if self.sync_threshold is not None:
                config["hnsw"].update(sync_threshold=self.sync_threshold, batch_size=min(100, self.sync_threshold))
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
            if batch.metadata:  # the corpus's own fields (bench.backends.base.store_metadata)
                metadatas = [{**m, **store_metadata(batch, start + j)} for j, m in enumerate(metadatas)]
            ids = list(batch.ids[start:end])
            self._col.upsert(ids=ids, embeddings=vectors[start:end], metadatas=metadatas)
            self._pending.extend(ids)
            self.unreachable.difference_update(ids)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Check every row written since the last call: stored (bulk ``get``, polled until ``timeout_s``),
        then found by a search with its own vector; re-upsert the rows chroma's HNSW graph cannot reach
        (up to ``_REPAIR_ROUNDS`` times) and log the ones that stay unreachable (kept in ``unreachable``)."""
        self._require_open()
        pending = list(dict.fromkeys(self._pending))
        if not pending:
            return
        t0 = time.monotonic()
        self._wait_stored(pending, t0, timeout_s)
        repaired = 0
        for round_ in range(_REPAIR_ROUNDS + 1):
            unfound, records = self._unfound(pending)
            if not unfound or round_ == _REPAIR_ROUNDS:
                break
            log.info("chroma (%s): %d of %d written row(s) of collection %s are stored but no search reaches "
                     "them (HNSW graph); re-upserting them (round %d), e.g. %r", self._where(), len(unfound),
                     len(pending), self._name, round_ + 1, unfound[0])
            self._col.upsert(ids=unfound, embeddings=[records[i][0] for i in unfound],
                             metadatas=[records[i][1] for i in unfound])
            repaired += 1
        self._pending = []
        if unfound:
            self.unreachable.update(unfound)
            log.warning("chroma (%s): %d of %d written row(s) of collection %s are stored but no search returns "
                        "them, even after %d re-upsert(s) (HNSW graph; counted as recall shortfall), e.g. %r",
                        self._where(), len(unfound), len(pending), self._name, repaired, unfound[0])
        log.debug("chroma: %d written row(s) checked in %.2f s", len(pending), time.monotonic() - t0)

    def _get_chunks(self, ids: list[str], include: list[str]):
        step = self._client.get_max_batch_size()  # a get with ~100k ids fails: "too many SQL variables"
        for start in range(0, len(ids), step):
            yield self._col.get(ids=ids[start:start + step], include=include)

    def _wait_stored(self, ids: list[str], t0: float, timeout_s: float) -> None:
        pause = 0.05
        missing = ids
        while True:
            stored = {i for res in self._get_chunks(missing, []) for i in res["ids"]}
            missing = [i for i in missing if i not in stored]
            if not missing:
                return
            if time.monotonic() - t0 >= timeout_s:
                raise TimeoutError(
                    f"chroma ({self._where()}): {len(missing)} written row(s) of collection {self.collection!r} "
                    f"still not stored after {timeout_s:.0f} s (e.g. id {missing[0]!r})"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _unfound(self, ids: list[str]) -> tuple[list[str], dict[str, tuple]]:
        """The rows of ``ids`` that a search with their own vector does not return, with their stored
        (embedding, metadata). Many rows: one exhaustive traversal first, so only the rows it missed are searched."""
        if len(ids) > _DIRECT_PROBES:
            reached = self._traversal()
            ids = [i for i in ids if i not in reached]
        if not ids:
            return [], {}
        records = {}
        for res in self._get_chunks(ids, ["embeddings", "metadatas"]):
            for i, emb, meta in zip(res["ids"], res["embeddings"], res["metadatas"], strict=True):
                records[i] = (np.asarray(emb, dtype=np.float32), meta)
        ids = [i for i in ids if i in records]
        unfound = []
        for start in range(0, len(ids), _QUERY_BATCH):
            chunk = ids[start:start + _QUERY_BATCH]
            res = self._col.query(query_embeddings=[records[i][0] for i in chunk], n_results=_PROBE_K,
                                  include=["distances"])
            for mid, got, dists in zip(chunk, res["ids"], res["distances"], strict=True):
                # crowded out by >= _PROBE_K exact duplicates of its vector: those rows are found
                if mid not in got and not (len(got) == _PROBE_K and float(dists[-1]) <= 1e-6):
                    unfound.append(mid)
        return unfound, records

    def _traversal(self) -> set[str]:
        """Every row the HNSW graph reaches: with ``n_results`` = the row count, hnswlib's beam never fills
        (ef = max(ef_search, k)), so the search visits the whole graph reachable from its entry point."""
        n = self._col.count()
        if n == 0:
            return set()
        q = np.random.default_rng(_TRAVERSAL_SEED).standard_normal(self._dim).astype(np.float32)
        q /= np.linalg.norm(q)
        return set(self._col.query(query_embeddings=[q], n_results=n, include=[])["ids"][0])

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
        try:
            res = self._col.query(query_embeddings=[q], n_results=int(k), where=_native_filter(where), include=["distances"])
        except Exception as exc:
            line = evicted_line(self, exc)
            if line:
                raise RuntimeError(line) from None
            raise
        return native_hits(res["ids"][0], res["distances"][0], self._kind)

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        res = self._col.query(query_embeddings=[vector], n_results=k, where=_native_filter(where), include=["distances"])
        return res["ids"][0], [similarity(self._kind, d) for d in res["distances"][0]]

    def close(self) -> None:
        self._pending = []
        self._disconnect()

    def list_collections(self) -> list[str]:
        """Names of the collections this client (path or server) holds (connects if needed; creates nothing)."""
        return client_collections(self)

    def drop(self) -> None:
        NotFoundError = _client("chromadb.errors").NotFoundError  # noqa: N806

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
            self._pending = []
            self.unreachable = set()
            if not was_open:
                self._disconnect()


def hnsw_cache_size() -> int:
    """How many HNSW indexes a local chroma (its Rust core) keeps loaded: the open-file limit // 5 (4 data files and
    a metadata file each), read when its client system starts (chromadb.api.rust.RustBindingsAPI)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 5


def evicted_line(backend, exc: BaseException) -> str:
    """One line for chroma's "Error creating hnsw segment reader: Nothing found on disk": a collection whose index
    chroma dropped from its cache of loaded indexes (more collections than ``hnsw_cache_size``) and could not read
    back (measured with 1.5.9: 60 ten-row collections under ``ulimit -n 200``, a cache of 40). "" for other errors."""
    text = str(exc)
    if "Nothing found on disk" not in text and "hnsw segment reader" not in text:
        return ""
    return (f"chroma {getattr(backend, 'layout', 'shared')} layout: collection {backend._name!r} could not be read back after chroma "
            f"dropped its HNSW index from its cache of {hnsw_cache_size():,} loaded indexes (the open-file limit (ulimit -n) // 5): "
            f"more collections than that in one process; raise ulimit -n, or use backend.layout=shared ({text[:160]})")


def _native_filter(where: Where) -> dict | None:
    return mongo_filter(where, "chroma")


def _client(module: str):
    return import_client(module, store="chroma", package=CLIENT.package, extra=CLIENT.extra)
