"""Store layout, a setting of every store (``layout:`` in ``configs/backend/*.yaml``):

* ``shared``: one collection for every conversation; a question's search filters on its
  ``conversation_id`` inside the store (a metadata filter, or sqlite-vec's partition key).
* ``per_conversation``: a collection (seekdb, chroma), table (LanceDB), file (sqlite-vec),
  namespace (Pinecone) or matrix (exact) per conversation, as agent-memory apps keep one per user.
  A question's search goes to its conversation's collection only, with the conversation dropped
  from the filter (every row there is that conversation's); the role and time filters still run
  inside the store, so ``bench.visibility``'s rule stays exact. A search without a conversation
  (the contract test's unfiltered queries, readiness probes) asks every collection and merges.

``build_store(node)`` is the one place a store is built from its plain config: it reads ``layout``
and, for ``per_conversation``, returns ``PerConversation``, which builds one store of the same
config per conversation (``collection`` = ``sub_collection(collection, conversation)``, a name
every store accepts unchanged). A new instance on the same place finds the collections an earlier
one wrote through the store's ``list_collections()`` (the names its place holds; it creates nothing).
Creating a collection has a cost per conversation (seekdb ~160 ms): it is part of ingest time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections.abc import Callable, Mapping

import numpy as np

from bench.backends.base import Backend, best_first
from bench.plugins import instantiate
from bench.types import Hits, MemoryBatch, Where

SHARED, PER_CONVERSATION = "shared", "per_conversation"
LAYOUTS = (SHARED, PER_CONVERSATION)


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"backend.layout must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    return layout


def build_store(node: Mapping, **overrides) -> Backend:
    """The store of a plain backend config (``_target_`` + settings + ``layout``), keyword overrides applied."""
    params = {**node, **overrides}
    layout = check_layout(params.pop("layout", SHARED))
    if layout == SHARED:
        backend = instantiate(params)
        backend.layout = SHARED
        return backend
    collection = params.pop("collection", "recallbench")
    return PerConversation(lambda name: instantiate(params, collection=name), collection)


def _h(text: str, n: int) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:n]


def collection_prefix(collection: str) -> str:
    """What every per-conversation collection of ``collection`` starts with: [A-Za-z0-9_] only, starts with a letter."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", collection)[:30]
    if not stem[:1].isalpha():
        stem = "c" + stem[:29]
    return f"{stem}_{_h(collection, 8)}_"


def sub_collection(collection: str, conversation_id: str) -> str:
    """The collection of one conversation: <= 56 characters of [A-Za-z0-9_], a letter first and a hex digit last,
    valid unchanged in every store here (seekdb, chroma 3-63 characters, sqlite-vec and LanceDB file names, Pinecone)."""
    return collection_prefix(collection) + _h(str(conversation_id), 16)


class PerConversation:
    """A store with one collection per conversation, built from a factory of same-config stores."""

    layout = PER_CONVERSATION

    def __init__(self, make: Callable[[str], Backend], collection: str) -> None:
        self.collection = collection
        self._make = make
        self._proto = make(collection_prefix(collection) + "root")  # never opened: name, capabilities, place
        self.name = self._proto.name
        self.capabilities = self._proto.capabilities
        self.path = getattr(self._proto, "path", None)
        self._subs: dict[str, Backend] = {}  # collection name -> open store
        self._pending: set[str] = set()  # collections written since the last wait_ready
        self._dim = 0
        self.created_seconds = 0.0  # time spent creating/opening per-conversation collections (inside add)

    def __repr__(self) -> str:
        return f"PerConversation({self._proto!r}, {len(self._subs)} collections)"

    @property
    def n_collections(self) -> int:
        return len(self._subs)

    @property
    def unreachable(self) -> set[str]:
        return set().union(*(getattr(s, "unreachable", set()) for s in self._subs.values()))

    def _existing(self) -> list[str]:
        prefix = collection_prefix(self.collection)
        return sorted(n for n in self._proto.list_collections() if n.startswith(prefix) and n != prefix + "root")

    def _open_sub(self, name: str) -> Backend:
        sub = self._subs.get(name)
        if sub is None:
            t0 = time.perf_counter()
            sub = self._make(name)
            try:
                sub.open(dim=self._dim)
            except BaseException:
                sub.close()
                raise
            self._subs[name] = sub
            self.created_seconds += time.perf_counter() - t0
        return sub

    # ---------------------------------------------------------------- contract
    def open(self, *, dim: int, metric: str = "cosine") -> None:
        from bench.backends.base import check_metric

        check_metric(metric)
        self._dim = dim
        for name in self._existing():  # a persistent store: what an earlier instance wrote
            self._open_sub(name)

    def add(self, batch: MemoryBatch) -> None:
        if not self._dim:
            raise RuntimeError(f"{self.name}: collection {self.collection!r} is not open (call open(dim=...) first)")
        groups: dict[str, list[int]] = {}
        for i, c in enumerate(batch.conversation_ids):
            groups.setdefault(str(c), []).append(i)
        for conv, rows in groups.items():
            name = sub_collection(self.collection, conv)
            sub = self._open_sub(name)
            part = batch if len(rows) == len(batch.ids) else _rows(batch, rows)
            sub.add(part)
            self._pending.add(name)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        for name in sorted(self._pending):
            self._subs[name].wait_ready(timeout_s=max(0.0, deadline - time.monotonic()))
        self._pending.clear()

    def _route(self, where: Where) -> tuple[list[Backend], Where]:
        if where.conversation_id is None:
            return list(self._subs.values()), where
        sub = self._subs.get(sub_collection(self.collection, where.conversation_id))
        return ([sub] if sub is not None else []), dataclasses.replace(where, conversation_id=None)

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        subs, inner = self._route(where)
        if len(subs) == 1:
            return subs[0].search(vector, k=k, where=inner)
        ids: list[str] = []
        scores: list[float] = []
        for sub in subs:
            h = sub.search(vector, k=k, where=inner)
            ids += h.ids
            scores += h.scores
        merged = best_first(ids, scores)
        return Hits(merged.ids[:k], merged.scores[:k])

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The conversation's collection queried as its store's user would; without a conversation, every one, merged."""
        subs, inner = self._route(where)
        if len(subs) == 1:
            return subs[0].reference_query(vector, k=k, where=inner)
        pairs = [p for sub in subs for p in zip(*sub.reference_query(vector, k=k, where=inner))]
        pairs.sort(key=lambda p: -p[1])
        return [i for i, _ in pairs[:k]], [s for _, s in pairs[:k]]

    def list_collections(self) -> list[str]:
        """The store's collections, and this instance's open ones (an in-RAM store keeps nothing elsewhere)."""
        return sorted(set(self._proto.list_collections()) | set(self._subs))

    def close(self) -> None:
        subs, self._subs = self._subs, {}
        self._pending.clear()
        for sub in subs.values():
            sub.close()

    def drop(self) -> None:
        """Drop every collection of this layout: the open ones, then any an earlier instance left (idempotent)."""
        subs, self._subs = self._subs, {}
        self._pending.clear()
        for sub in subs.values():
            try:
                sub.drop()
            finally:
                sub.close()
        for name in self._existing():
            sub = self._make(name)
            try:
                sub.drop()
            finally:
                sub.close()


def _rows(batch: MemoryBatch, rows: list[int]) -> MemoryBatch:
    def pick(t):
        return tuple(t[i] for i in rows)

    return MemoryBatch(ids=pick(batch.ids), vectors=np.asarray(batch.vectors)[rows], conversation_ids=pick(batch.conversation_ids),
                       roles=pick(batch.roles), timestamps=pick(batch.timestamps),
                       positions=pick(batch.positions) if batch.positions else ())
