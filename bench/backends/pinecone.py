"""Pinecone store through the official SDK (REST): one namespace per collection in an existing cosine index.

Owns the Pinecone adapter. Configure either ``index_name`` (the host is resolved through the control
plane with your key) or ``host`` (any Pinecone-compatible data-plane URL, e.g. the loopback test
double in tests/). The API key is read from the environment variable named by ``api_key_env``
only: never from YAML, never logged, never in repr or error messages.

Writes are upserts (an existing id is overwritten) in batches under Pinecone's request limits.
Pinecone is eventually consistent: ``wait_ready`` polls ``describe_index_stats`` until the
namespace holds every distinct id written since ``open``, then checks with a real query.
Filters are pushed down in Pinecone's filter language. ``drop`` deletes everything in the
namespace (the index itself is yours and is never deleted).
"""

from __future__ import annotations

import logging
import os
import time
from urllib.parse import quote, unquote

import numpy as np

from bench.backends.base import (
    FILTER_KINDS,
    META_PREFIX,
    BackendUnavailable,
    Capabilities,
    Client,
    check_metric,
    import_client,
    native_hits,
    store_metadata,
    store_value,
)
from bench.output import check_env_name
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)
CLIENT = Client("pinecone", "pinecone", "pinecone")  # the client this store imports, and the extra that installs it

MAX_K = 10_000  # Pinecone's topK ceiling
MAX_BATCH_VECTORS = 100  # recommended upsert batch
MAX_BATCH_BYTES = 2 * 1024 * 1024  # hard request-size limit
_BYTES_PER_VALUE = 24  # generous JSON size of one float
_SAFE_ID_CHARS = "".join(chr(c) for c in range(33, 127) if chr(c) != "%") + " "




def _to_pinecone_id(memory_id: str) -> str:
    """Pinecone ids must be ASCII: percent-encode anything else (and '%'); ASCII ids pass unchanged."""
    return quote(memory_id, safe=_SAFE_ID_CHARS)


def _from_pinecone_id(vector_id: str) -> str:
    return unquote(vector_id)


def pinecone_filter(where: Where) -> dict | None:
    """The Pinecone metadata filter for ``where`` (None: no constraint)."""
    flt: dict = {}
    if where.conversation_id is not None:
        flt["conversation_id"] = {"$eq": where.conversation_id}
    if where.roles is not None:
        flt["role"] = {"$in": list(where.roles)}
    if where.before is not None:
        flt["ts"] = {"$lte": float(where.before)}
    for name, op, value in where.metadata or ():  # the corpus's own fields (bench.backends.base.store_metadata)
        flt.setdefault(META_PREFIX + name, {})[f"${op}"] = [store_value(v) for v in value] if op == "in" else store_value(value)
    return flt or None


class PineconeBackend:
    name = "pinecone"
    capabilities = Capabilities(exact=False, filters=FILTER_KINDS, persistent=True, server=True, max_k=MAX_K, clients=(CLIENT,))

    def __init__(
        self,
        collection: str = "recallbench",
        index_name: str | None = None,
        host: str | None = None,
        api_key_env: str = "PINECONE_API_KEY",
        timeout_s: float = 30.0,
        poll_interval_s: float = 0.2,
        metric: str = "cosine",
    ) -> None:
        if not isinstance(collection, str) or not collection or len(collection) > 512 or not collection.isascii():
            raise ValueError(f"pinecone: collection (namespace) must be 1-512 ASCII characters (got {collection!r})")
        self.metric = metric  # a cosine index only: its score is the cosine similarity (bench.backends.scores)
        check_metric(None, self)
        self.collection = collection
        self.index_name = index_name or None
        self.host = host or None
        check_env_name("pinecone: api_key_env", api_key_env)  # a key typed here is refused without echo
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.poll_interval_s = float(poll_interval_s)
        self._index = None
        self._dim = 0
        self._key = ""
        self._base_count = 0
        self._written: set[str] = set()
        self._last_written: tuple[str, np.ndarray, str] | None = None  # (pinecone id, vector, conversation)

    def __repr__(self) -> str:  # never the key
        target = f"host={self.host!r}" if self.host else f"index_name={self.index_name!r}"
        return f"PineconeBackend({target}, namespace={self.collection!r}, api_key_env={self.api_key_env!r})"

    def _scrub(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return text.replace(self._key, "***") if self._key else text

    # ---- lifecycle
    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        Pinecone = _client("pinecone").Pinecone  # noqa: N806
        errors = _client("pinecone.errors.exceptions")
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise BackendUnavailable(f"{self.api_key_env} not set; see README")
        if not self.host and not self.index_name:
            raise BackendUnavailable(
                "pinecone: no index configured; pass backend.index_name=<your cosine index> (or backend.host=<data-plane URL>)"
            )
        self._key = key
        where = self.host or f"index {self.index_name!r}"
        try:
            pc = Pinecone(api_key=key, timeout=self.timeout_s)
            if self.host:
                index = pc.index(host=self.host)
            else:
                index = pc.index(name=self.index_name)
            stats = index.describe_index_stats()
        except (errors.UnauthorizedError, errors.ForbiddenError) as e:
            raise BackendUnavailable(f"pinecone: the key in {self.api_key_env} was rejected by {where} ({self._scrub(e)})") from None
        except errors.NotFoundError as e:
            raise BackendUnavailable(
                f"pinecone: {where} not found ({self._scrub(e)}); create a cosine index of dimension {dim} first"
            ) from None
        except (errors.PineconeConnectionError, errors.PineconeTimeoutError) as e:
            raise BackendUnavailable(f"pinecone: cannot reach {where} ({self._scrub(e)})") from None
        except errors.PineconeValueError as e:  # e.g. a key that is not a valid header value, a malformed host
            raise BackendUnavailable(f"pinecone: bad key in {self.api_key_env} or bad host ({self._scrub(e)})") from None
        if stats.dimension is not None and stats.dimension != dim:
            raise ValueError(f"pinecone: {where} has dimension {stats.dimension}, the embedder needs {dim}")
        index_metric = stats.metric or self._describe_metric(pc)
        if index_metric is not None and index_metric != "cosine":
            raise ValueError(f"pinecone: {where} uses metric {index_metric!r}; recallbench needs a cosine index")
        summary = stats.namespaces.get(self.collection)
        self._base_count = summary.vector_count if summary is not None else 0
        self._index, self._dim = index, dim
        self._written, self._last_written = set(), None
        log.info("pinecone: opened %s namespace %r (%d vectors)", where, self.collection, self._base_count)

    def _describe_metric(self, pc) -> str | None:
        if not self.index_name:
            return None
        try:
            return pc.describe_index(self.index_name).metric
        except Exception:  # noqa: BLE001  (the SDK raises AttributeError when the schema is ambiguous)
            return None

    def _require_open(self):
        if self._index is None:
            raise RuntimeError("pinecone: not open; call open(dim=...) first")
        return self._index

    def add(self, batch: MemoryBatch) -> None:
        index = self._require_open()
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if vectors.shape[1] != self._dim:
            raise ValueError(f"pinecone: vector dim {vectors.shape[1]} != index dim {self._dim}")
        per_batch = max(1, min(MAX_BATCH_VECTORS, int(0.8 * MAX_BATCH_BYTES) // (self._dim * _BYTES_PER_VALUE + 1024)))
        items = []
        for i, memory_id in enumerate(batch.ids):
            if not isinstance(memory_id, str) or not memory_id:
                raise ValueError(f"pinecone: batch row {i}: field id must be a non-empty string (got {memory_id!r})")
            vid = _to_pinecone_id(memory_id)
            if len(vid) > 512:
                raise ValueError(f"pinecone: batch row {i}: field id {memory_id[:60]!r}... is longer than 512 encoded chars")
            meta = {"conversation_id": str(batch.conversation_ids[i]), "role": str(batch.roles[i]), "ts": float(batch.timestamps[i]),
                    **store_metadata(batch, i)}
            items.append({"id": vid, "values": vectors[i].tolist(), "metadata": meta})
        for start in range(0, len(items), per_batch):
            chunk = items[start : start + per_batch]
            index.upsert(vectors=chunk, namespace=self.collection, show_progress=False)
            self._written.update(v["id"] for v in chunk)
        if items:
            last = items[-1]
            self._last_written = (last["id"], vectors[-1], last["metadata"]["conversation_id"])

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Poll the namespace count up to every distinct id written since open, then a real query."""
        index = self._require_open()
        if self._last_written is None:
            return
        target = max(self._base_count, len(self._written))
        deadline = time.monotonic() + timeout_s
        count = -1
        while True:
            summary = index.describe_index_stats().namespaces.get(self.collection)
            count = summary.vector_count if summary is not None else 0
            if count >= target and self._found(*self._last_written):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"pinecone: namespace {self.collection!r} not ready after {timeout_s:.0f} s "
                    f"({count} of {target} vectors visible)"
                )
            time.sleep(self.poll_interval_s)

    def _found(self, vid: str, vector: np.ndarray, conversation_id: str) -> bool:
        res = self._require_open().query(
            top_k=10,
            vector=vector.tolist(),
            namespace=self.collection,
            filter={"conversation_id": {"$eq": conversation_id}},
        )
        return any(m.id == vid for m in res.matches)

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        index = self._require_open()
        if not 0 < k <= MAX_K:
            raise ValueError(f"pinecone: k must be in 1..{MAX_K} (got {k})")
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"pinecone: query dim {q.shape[0]} != index dim {self._dim}")
        if where.roles is not None and len(where.roles) == 0:
            return Hits()
        res = index.query(
            top_k=int(k),
            vector=q.tolist(),
            namespace=self.collection,
            filter=pinecone_filter(where),
            include_values=False,
            include_metadata=False,
        )
        return native_hits([_from_pinecone_id(m.id) for m in res.matches], [m.score for m in res.matches], "cosine")

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        res = self._index.query(top_k=k, vector=vector.tolist(), namespace=self.collection, filter=pinecone_filter(where))
        return [unquote(m.id) for m in res.matches], [m.score for m in res.matches]

    def close(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            index.close()

    def list_collections(self) -> list[str]:
        """The index's namespaces that hold vectors ([] when no key or index is configured)."""
        index = self._index
        if index is not None:
            return [n for n, s in index.describe_index_stats().namespaces.items() if s.vector_count]
        key = os.environ.get(self.api_key_env, "")
        if not key or not (self.host or self.index_name):
            return []
        self._key = key
        pc = _client("pinecone").Pinecone(api_key=key, timeout=self.timeout_s)
        index = pc.index(host=self.host) if self.host else pc.index(name=self.index_name)
        try:
            return [n for n, s in index.describe_index_stats().namespaces.items() if s.vector_count]
        finally:
            index.close()

    def drop(self, timeout_s: float = 60.0) -> None:
        """Delete every vector in the namespace and wait until the namespace reads empty. Idempotent."""
        index = self._index
        opened_here = index is None
        if opened_here:
            key = os.environ.get(self.api_key_env, "")
            if not key or not (self.host or self.index_name):
                log.warning("pinecone: drop() of %r skipped: no key or index configured", self.collection)
                return
            self._key = key
            pc = _client("pinecone").Pinecone(api_key=key, timeout=self.timeout_s)
            index = pc.index(host=self.host) if self.host else pc.index(name=self.index_name)
        errors = _client("pinecone.errors.exceptions")
        try:
            try:
                index.delete(delete_all=True, namespace=self.collection)
            except errors.NotFoundError:
                pass  # namespace does not exist: nothing to drop
            deadline = time.monotonic() + timeout_s
            while (summary := index.describe_index_stats().namespaces.get(self.collection)) and summary.vector_count:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"pinecone: namespace {self.collection!r} still holds vectors {timeout_s:.0f} s after drop")
                time.sleep(self.poll_interval_s)
        finally:
            if opened_here:
                index.close()
        self._written, self._last_written, self._base_count = set(), None, 0
        log.info("pinecone: dropped namespace %r", self.collection)


def _client(module: str):
    return import_client(module, store="pinecone", package=CLIENT.package, extra=CLIENT.extra)
