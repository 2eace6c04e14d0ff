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

FILTER_KINDS = frozenset({"conversation", "role", "before"})
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


def best_first(ids: Iterable[str], similarities: Iterable[float]) -> Hits:
    """Hits by similarity descending, ties by id; a repeated id keeps its best similarity."""
    best: dict[str, float] = {}
    for i, s in zip(ids, similarities, strict=True):
        if i not in best or s > best[i]:
            best[i] = s
    order = sorted(best, key=lambda i: (-best[i], i))
    return Hits(tuple(order), tuple(map(best.__getitem__, order)))


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


def check_metric(metric: str) -> None:
    if metric != "cosine":
        raise ValueError(f"only metric='cosine' is supported (got {metric!r}); vectors are L2-normalised")


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
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else {"$and": conds}
