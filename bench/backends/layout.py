"""Store layout, a setting of every store (``layout:`` in ``configs/backend/*.yaml``):

* ``shared``: one collection for every conversation; a question's search filters on its
  ``conversation_id`` inside the store (a metadata filter, sqlite-vec's partition key, LanceDB's and
  seekdb's indexed conversation column: ``conversation_index``).
* ``per_conversation``: a collection (seekdb, chroma), table (LanceDB), file (sqlite-vec),
  namespace (Pinecone) or matrix (exact) per conversation, as agent-memory apps keep one per user.
  A question's search goes to its conversation's collection only, with the conversation dropped
  from the filter (every row there is that conversation's); the role and time filters still run
  inside the store, so ``bench.replay.visibility``'s rule stays exact. A search without a conversation
  (the contract test's unfiltered queries, readiness probes) asks every collection and merges.

``build_store(node)`` is the one place a store is built from its plain config: it reads ``layout``
and, for ``per_conversation``, returns ``PerConversation``, which builds one store of the same
config per conversation (``collection`` = ``sub_collection(collection, conversation)``, a name
every store accepts unchanged). A new instance on the same place finds the collections an earlier
one wrote through the store's ``list_collections()`` (the names its place holds; it creates nothing).
Creating a collection has a cost per conversation (seekdb ~160 ms): it is part of ingest time.

Bounded open collections. A store whose collections reopen cheaply from disk (``reopens_cheaply``) keeps at most
``max_open`` of them open (``backend.max_open``; by default ``MAX_OPEN``, or a quarter of the open-file limit when
that is lower): the least recently used one is closed before another opens (after its pending writes are searchable),
and reopened when it is asked again, so thousands of users cost a bounded number of open files and memory. Measured
with ``python -m bench.tools.layout_scale`` (40 users, max_open 4 against unbounded; a reopen is part of the next
search): sqlite-vec, a file each; LanceDB, a table handle each (a reopen costs nothing measurable: 6.1 ms per first
search either way; it holds no file open between calls, ~15 fds at any size). Other stores keep every collection open:
exact (in RAM, a closed one would be lost); seekdb, whose per-user collections share one client connection
(``share_client``, its ``per_conversation_settings``): a collection is then a handle in this process and a table in
the server, so users cost no file descriptors (a connection each cost one here and one in the server per user: 500
users, ~510 + ~500; closing and reopening them cost 18-45 ms a search), and their rows and indexes live in the
server's memory, which seekdb manages; and chroma, whose collections share one client system per path that holds each
collection's HNSW files (4 fds) whether or not its Python collection is closed; chroma bounds that itself, keeping at
most (open-file limit) / 5 HNSW indexes loaded (its Rust core's cache), so its open files stay under the limit while
its memory grows with the users loaded (~3 MB each at 500 two-turn users, 5.6 GB and 8,023 fds at 2,000); past that
cache, a collection whose index it dropped before ever writing it to disk cannot be read back: per-user chroma
collections write theirs every 100 rows (``sync_threshold``), so only users with fewer rows than that can hit it, with
one line naming the cache, the layout and the limit (``bench.backends.chroma.evicted_line``). When opening or writing
a collection fails on a limit (open files, ``ulimit -n``; the store's memory: seekdb's error 4013, measured with 2,000
two-turn users embedded, its server at 1.4 GB), the error is one line naming the layout, the store, how many
collections were open and the limit. A store's ``per_conversation_settings`` (settings its config leaves unset) apply
to its per-conversation collections: sqlite-vec allocates vectors 64 rows at a time there, not 1024.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np

from bench.backends.base import Backend, best_first
from bench.plugins import instantiate
from bench.types import Hits, MemoryBatch, Where

SHARED, PER_CONVERSATION = "shared", "per_conversation"
LAYOUTS = (SHARED, PER_CONVERSATION)
MAX_OPEN = 64  # collections a per-conversation store keeps open at once when they reopen cheaply (see the module docstring)


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"backend.layout must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    return layout


def build_store(node: Mapping, **overrides) -> Backend:
    """The store of a plain backend config (``_target_`` + settings + ``layout``), keyword overrides applied."""
    params = {**node, **overrides}
    layout = check_layout(params.pop("layout", SHARED))
    max_open = params.pop("max_open", None)
    if layout == SHARED:
        backend = instantiate(params)
        backend.layout = SHARED
        return backend
    collection = params.pop("collection", "recallbench")
    return PerConversation(lambda name: instantiate(params, collection=name), collection, max_open=max_open)


def default_max_open() -> int:
    """``MAX_OPEN``, or a quarter of the process's open-file limit when that is lower (at least 4)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_OPEN
    return MAX_OPEN if soft < 0 or soft == resource.RLIM_INFINITY else max(4, min(MAX_OPEN, soft // 4))


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

    def __init__(self, make: Callable[[str], Backend], collection: str, *, max_open: int | None = None) -> None:
        self.collection = collection
        self._make = make
        self._proto = make(collection_prefix(collection) + "root")  # never opened: name, capabilities, place
        self.name = self._proto.name
        self.capabilities = self._proto.capabilities
        self.metric = getattr(self._proto, "metric", "cosine")  # bench.backends.scores: every collection's metric
        self.path = getattr(self._proto, "path", None)
        if max_open is not None and (type(max_open) is not int or max_open < 1):
            raise ValueError(f"backend.max_open must be a positive integer (got {max_open!r})")
        evictable = bool(getattr(self._proto, "reopens_cheaply", False)) and self.capabilities.persistent
        self.max_open = (max_open or default_max_open()) if evictable else None  # None: every collection stays open
        self._subs: OrderedDict[str, Backend] = OrderedDict()  # open collections, least recently used first
        self._known: dict[str, None] = {}  # every collection of this layout, open or closed (insertion order)
        self._pending: set[str] = set()  # collections written since the last wait_ready
        self._dim = 0
        self.created_seconds = 0.0  # time spent creating/opening per-conversation collections (inside add)
        self.reopened = 0  # collections opened again after being closed to stay within max_open

    def __repr__(self) -> str:
        return f"PerConversation({self._proto!r}, {len(self._known)} collections, {len(self._subs)} open)"

    @property
    def n_collections(self) -> int:
        return len(self._known)

    @property
    def unreachable(self) -> set[str]:
        return set().union(*(getattr(s, "unreachable", set()) for s in self._subs.values()))

    def _existing(self) -> list[str]:
        prefix = collection_prefix(self.collection)
        return sorted(n for n in self._proto.list_collections() if n.startswith(prefix) and n != prefix + "root")

    def _open_sub(self, name: str) -> Backend:
        sub = self._subs.get(name)
        if sub is not None:
            self._subs.move_to_end(name)
            return sub
        if self.max_open is not None:
            while len(self._subs) >= self.max_open:  # close the least recently used: its data stays on disk
                gone, old = self._subs.popitem(last=False)
                if gone in self._pending and not getattr(old, "ready_when_added", False):
                    old.wait_ready()  # its writes must be searchable before it closes (seekdb's async index)
                    self._pending.discard(gone)
                old.close()
        t0 = time.perf_counter()
        sub = self._make(name)
        sub.layout = PER_CONVERSATION  # a store's own error lines name its layout
        for key, value in getattr(sub, "per_conversation_settings", {}).items():  # what a store prefers for one user's rows
            if getattr(sub, key, None) is None:  # unless its config set it
                setattr(sub, key, value)
        try:
            sub.open(dim=self._dim)
        except BaseException as exc:
            sub.close()
            err = self._limit_error(name, exc, "open")
            if err is not None:
                raise err from exc
            raise
        if name in self._known:
            self.reopened += 1
        self._subs[name] = sub
        self._known[name] = None
        self.created_seconds += time.perf_counter() - t0
        return sub

    def _limit_line(self, name: str, exc: BaseException, doing: str = "open") -> str:
        """One line naming the layout, the store and the limit when ``exc`` looks like a system limit was hit: the
        open-file limit (``ulimit -n``) or the store's memory (seekdb's error 4013); "" otherwise."""
        text = str(exc).lower()
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, OSError, ValueError):
            soft = -1
        try:
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            fds = -1
        files = getattr(exc, "errno", None) in (errno.EMFILE, errno.ENFILE) or "too many open files" in text or \
            ("unable to open database file" in text) or (soft > 0 and fds >= soft - 8)
        memory = isinstance(exc, MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM or "memory limit" in text or \
            "code=4013" in text or "code=-4013" in text
        if not (files or memory):
            return ""
        bound = f"max_open={self.max_open}" if self.max_open is not None else "every collection kept open (this store cannot close one)"
        head = (f"{self.name} per_conversation layout: could not {doing} collection {name!r} ({len(self._known):,} collections, "
                f"{len(self._subs):,} open, {bound})")
        if files:
            return (f"{head}: the process has {fds} files open and its open-file limit (ulimit -n) is {soft}; raise the limit, "
                    f"lower backend.max_open, or use backend.layout=shared ({type(exc).__name__}: {exc})")
        return (f"{head}: the store reached its memory limit; give it more memory, fewer users per store, or use "
                f"backend.layout=shared ({type(exc).__name__}: {exc})")

    def _limit_error(self, name: str, exc: BaseException, doing: str) -> OSError | None:
        line = self._limit_line(name, exc, doing)
        if not line:
            return None
        memory = "reached its memory limit" in line
        return OSError(errno.ENOMEM if memory else errno.EMFILE, line)

    # ---------------------------------------------------------------- contract
    def open(self, *, dim: int, metric: str | None = None) -> None:
        from bench.backends.base import check_metric

        check_metric(metric, self)
        self._dim = dim
        for name in self._existing():  # a persistent store: what an earlier instance wrote
            if self.max_open is None:
                self._open_sub(name)
            else:  # opened when first asked
                self._known[name] = None

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
            try:
                sub.add(part)
            except Exception as exc:
                err = self._limit_error(name, exc, "write to")
                if err is not None:
                    raise err from exc
                raise
            self._pending.add(name)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        ready_on_add = bool(getattr(self._proto, "ready_when_added", False))
        for name in sorted(self._pending):
            if name not in self._subs and ready_on_add:
                continue  # closed since its writes, which were searchable when add() returned (sqlite-vec)
            self._open_sub(name).wait_ready(timeout_s=max(0.0, deadline - time.monotonic()))
        self._pending.clear()

    def _route(self, where: Where) -> tuple[list[str], Where]:
        """The names of the collections a search asks (opened one at a time by the caller), and the filter they get."""
        if where.conversation_id is None:
            return list(self._known), where
        name = sub_collection(self.collection, where.conversation_id)
        return ([name] if name in self._known else []), dataclasses.replace(where, conversation_id=None)

    def sub(self, name: str) -> Backend:
        """The open store of collection ``name`` (opened again when it was closed to stay within ``max_open``)."""
        if name not in self._known:
            raise KeyError(name)
        return self._open_sub(name)

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        names, inner = self._route(where)
        if len(names) == 1:
            return self._open_sub(names[0]).search(vector, k=k, where=inner)
        ids: list[str] = []
        scores: list[float] = []
        native: list[float] = []
        for name in names:
            h = self._open_sub(name).search(vector, k=k, where=inner)
            ids += h.ids
            scores += h.scores
            native += h.native if len(h.native) == len(h.ids) else [float("nan")] * len(h.ids)
        merged = best_first(ids, scores, native)
        return merged[:k]

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The conversation's collection queried as its store's user would; without a conversation, every one, merged."""
        names, inner = self._route(where)
        if len(names) == 1:
            return self._open_sub(names[0]).reference_query(vector, k=k, where=inner)
        pairs = [p for name in names for p in zip(*self._open_sub(name).reference_query(vector, k=k, where=inner))]
        pairs.sort(key=lambda p: -p[1])
        return [i for i, _ in pairs[:k]], [s for _, s in pairs[:k]]

    def list_collections(self) -> list[str]:
        """The store's collections, and this instance's (an in-RAM store keeps nothing elsewhere)."""
        return sorted(set(self._proto.list_collections()) | set(self._known))

    def close(self) -> None:
        subs, self._subs = self._subs, OrderedDict()
        self._known = {}
        self._pending.clear()
        for sub in subs.values():
            sub.close()

    def drop(self) -> None:
        """Drop every collection of this layout: the open ones, then the closed ones and any an earlier instance left
        (idempotent)."""
        subs, self._subs = self._subs, OrderedDict()
        known, self._known = self._known, {}
        self._pending.clear()
        for sub in subs.values():
            try:
                sub.drop()
            finally:
                sub.close()
        for name in sorted(set(known) - set(subs) | set(self._existing())):
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
                       positions=pick(batch.positions) if batch.positions else (),
                       metadata=pick(batch.metadata) if batch.metadata else ())
