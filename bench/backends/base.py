"""The store contract every backend implements, and small helpers shared by adapters.

A backend is one module ``bench/backends/<name>.py`` plus ``configs/backend/<name>.yaml``.
Constructor keyword arguments come from the YAML. Every backend accepts ``collection: str``
(the collection/table/namespace name; the runner passes a unique one per run) and persistent
local stores accept ``path: str`` (a directory). ``open()`` attaches to the collection when it
exists, else creates it. ``Where.before`` keeps rows with ``timestamp <= before``.

It converts its native distance into a similarity (higher is better) in exactly one private
function, and returns ``Hits`` (parallel tuples of ids and similarities) sorted by similarity,
descending, without duplicates; ``best_first`` does that ordering for stores that need it.

Its store client is an optional extra: the adapter imports it lazily with ``import_client``, which
raises ``BackendUnavailable`` with one line naming the store and the fix when it is missing.
Opening, filling, timing and cleaning up a store is done in one place: ``bench.backends.session``.

Store layout (``layout: shared | per_conversation`` in every store YAML) is applied by
``bench.backends.layout.build_store``: ``per_conversation`` builds one store of the same config per
conversation. For that, every store also implements ``list_collections() -> list[str]``: the names of
the collections its place (path, server, index) holds, connecting if needed and creating nothing.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from bench.types import Hits, MemoryBatch, Where

# "metadata": Where.metadata (the corpus's own fields, bench.replay.visibility.parse_filter); a store without it is
# post-filtered by the trace (bench.replay.trace.PostFiltered)
FILTER_KINDS = frozenset({"conversation", "role", "before", "metadata"})
META_PREFIX = "m_"  # a metadata field's key in a store's own metadata (apart from conversation_id, role, ts)
EMBEDDED, LOCAL_SERVER, CLOUD = "embedded", "local server", "cloud"  # Capabilities.kind


@dataclass(frozen=True, slots=True)
class Client:
    """An optional client package a store imports lazily (``import_client``): the module it imports, the PyPI
    package that provides it and the recallbench extra (pyproject ``[project.optional-dependencies]``) that installs it."""

    module: str
    package: str
    extra: str

    def load(self, store: str):
        """The module, imported; BackendUnavailable naming ``store``, the package and the extra when it is missing."""
        return import_client(self.module, store=store, package=self.package, extra=self.extra)


@dataclass(frozen=True, slots=True)
class Capabilities:
    exact: bool  # True: brute force, never misses; False: approximate (ANN)
    filters: frozenset[str]  # subset of FILTER_KINDS the store applies natively
    persistent: bool  # data survives close() + open() on the same path
    server: bool  # talks to a separate server process
    max_k: int = 100_000  # largest k a single search may ask for
    # the server program bench.backends.servers can start on loopback for it ("seekdb", "chroma");
    # None for an embedded store, and for a cloud store (server True: nothing here can start it)
    local_server: str | None = None
    # the client packages it needs, the one open() imports first leading; () for a store on numpy alone. Read by the
    # contract test (a missing client is one line naming the extra), never a list kept beside the stores
    clients: tuple[Client, ...] = ()
    # the metrics it offers (``metric:`` in its YAML), each with the kind of number its search returns for it
    # (bench.backends.scores: the conversions to a similarity, in one place); the first is the default
    scores: tuple[tuple[str, str], ...] = (("cosine", "cosine"),)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.scores)

    def native_kind(self, metric: str) -> str:
        """The kind of number (bench.backends.scores.KINDS) this store's search returns under ``metric``."""
        return dict(self.scores)[metric]

    @property
    def kind(self) -> str:
        """``embedded`` (in this process or its child), ``local server`` (one we can start) or ``cloud``."""
        if not self.server:
            return EMBEDDED
        return LOCAL_SERVER if self.local_server else CLOUD


class BackendUnavailable(RuntimeError):
    """The store cannot run here (no server, no key). Tests skip with this message."""


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        """Create or attach to the collection/table. Raises BackendUnavailable when it cannot."""

    def add(self, batch: MemoryBatch) -> None:
        """Write rows. May return before they are searchable: call wait_ready()."""

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Block until every row written so far is stored and searchable: a search with a row's own
        vector (unfiltered, or filtered to values it matches, k >= the rows tied with it) returns it.

        Checks every written row, not a sample (one probe per chunk misses single rows), and in bulk
        (a 100k-row ingest must not cost 100k searches). Approximate stores too: a row an HNSW graph
        cannot reach (no in-edge) is not an ANN ranking miss but a row no search returns at any k;
        wait_ready re-inserts such rows, and logs those that stay unreachable (the store's recall
        shortfall, not an error) instead of waiting for them. Raises TimeoutError when written rows
        are still not stored/visible after ``timeout_s``."""

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        """Top-k by similarity among rows matching ``where``, best first (``best_first`` orders them)."""

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The same query written by hand, as a user of this store's client would: the same client and
        collection, the same filter and k, the native distance turned into a similarity, no checks and
        no ordering work. (ids, similarities) in the store's own order. ``make bench`` (P4) times
        ``search`` against it: what the adapter costs over its store."""

    def close(self) -> None:
        """Release resources, keep data (a persistent store reopens it). Idempotent."""

    def drop(self) -> None:
        """Delete this collection and its data. Idempotent; works after close()."""


def import_client(module: str, *, store: str, package: str, extra: str):
    """``module`` imported; when its package is missing, BackendUnavailable with one line naming the store and the fix."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if missing is not None and (module == missing or module.startswith(missing + ".")):
            raise BackendUnavailable(f"store {store} needs the {package} package: pip install 'recallbench[{extra}]'") from None
        raise BackendUnavailable(f"store {store}: {package} is installed but does not import ({type(exc).__name__}: {exc}); "
                                 f"reinstall it: pip install --force-reinstall 'recallbench[{extra}]'") from None


def best_first(ids: Iterable[str], similarities: Iterable[float], native: Iterable[float] | None = None) -> Hits:
    """Hits by similarity descending, ties by id; a repeated id keeps its best similarity. ``native``: the store's own
    score of each hit (parallel to ``ids``), kept beside the similarity (``Hits.native``)."""
    best: dict[str, float] = {}
    if native is None:
        for i, s in zip(ids, similarities, strict=True):
            if i not in best or s > best[i]:
                best[i] = s
        order = sorted(best, key=lambda i: (-best[i], i))
        return Hits(tuple(order), tuple(map(best.__getitem__, order)))
    own: dict[str, float] = {}
    for i, s, x in zip(ids, similarities, native, strict=True):
        if i not in best or s > best[i]:
            best[i], own[i] = s, x
    order = sorted(best, key=lambda i: (-best[i], i))
    return Hits(tuple(order), tuple(map(best.__getitem__, order)), tuple(map(own.__getitem__, order)))


def native_hits(ids: Iterable[str], native: Iterable[float], kind: str) -> Hits:
    """Hits from a store's own scores of ``kind`` (bench.backends.scores): each converted to a similarity by the one
    conversion table, best first (``best_first``), the native values kept."""
    from bench.backends.scores import similarity

    ids, native = list(ids), [float(x) for x in native]
    return best_first(ids, [similarity(kind, x) for x in native], native)


def client_collections(backend) -> list[str]:
    """Names of the collections a client-based store (chroma, seekdb: ``_client``, ``_connect``, ``_disconnect``) holds;
    connects if needed and disconnects again if it was not connected; creates nothing."""
    was_connected = backend._client is not None
    backend._connect()
    try:
        return [c.name if hasattr(c, "name") else str(c) for c in backend._client.list_collections()]
    finally:
        if not was_connected:
            backend._disconnect()


def check_metric(metric: str | None, backend=None) -> str:
    """The metric a store opens with: its configured ``backend.metric`` (``metric`` None, or equal to it), checked
    against what its capabilities offer (``bench.backends.scores.check_metric``: one line naming what it offers).
    Without ``backend``: cosine only (a store that declares nothing else)."""
    from bench.backends import scores

    if backend is None:
        return scores.check_metric("store", metric or "cosine", (("cosine", "cosine"),))
    configured = getattr(backend, "metric", "cosine")
    if metric is not None and metric != configured:
        raise ValueError(f"{backend.name}: opened with metric {metric!r} but configured with metric {configured!r} (backend.metric)")
    return scores.check_metric(backend.name, configured, backend.capabilities.scores)


def mongo_filter(where: Where, store: str) -> dict | None:
    """Where -> a Mongo-style metadata filter (``$eq``/``$in``/``$lte``, ``$and``), as chroma and
    pyseekdb take it; applied inside the store, before top-k. None when nothing is filtered."""
    conds: list[dict] = []
    if where.conversation_id is not None:
        conds.append({"conversation_id": {"$eq": str(where.conversation_id)}})
    if where.roles is not None:
        conds.append({"role": {"$in": [str(r) for r in where.roles]}})
    if where.before is not None:
        before = float(where.before)
        if math.isnan(before):
            raise ValueError(f"{store}: Where.before is NaN")
        if before != math.inf:
            conds.append({"ts": {"$lte": max(before, -1e300)}})
    _OPS = {"eq": "$eq", "in": "$in", "gte": "$gte", "lte": "$lte", "gt": "$gt", "lt": "$lt"}
    for name, op, value in where.metadata or ():
        if op == "in":
            conds.append({META_PREFIX + name: {"$in": [store_value(v) for v in value]}})
        else:
            conds.append({META_PREFIX + name: {_OPS[op]: store_value(value)}})
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else {"$and": conds}


def store_value(v):
    """A metadata value as stores keep it: every number as a float (an integer field compares with float filters)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def store_metadata(batch: MemoryBatch, i: int) -> dict:
    """Row ``i``'s metadata as a store's own metadata keys (``META_PREFIX`` + name), scalar fields only (a string
    list is post-filtered, bench.replay.trace.pushes_down); {} for a batch without metadata."""
    if not batch.metadata:
        return {}
    return {META_PREFIX + k: store_value(v) for k, v in batch.metadata[i] if not isinstance(v, tuple)}
