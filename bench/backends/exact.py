"""Exact reference store: numpy brute-force cosine over L2-normalised float32 vectors, in RAM.

``metric``: cosine (its native score is the cosine), ip (the dot product: the same number) or l2 (the squared
Euclidean distance 2 - 2 q.v, chroma's convention); the order is the same for all three (bench.backends.scores).

Every other store is held against this one. Filters are applied before scoring (pre-filter),
so it never returns fewer than min(k, matching) hits.
"""

from __future__ import annotations

import numpy as np

from bench.backends.base import FILTER_KINDS, Capabilities, check_metric
from bench.backends.scores import native_of, similarity
from bench.types import Hits, MemoryBatch, Where


class ExactBackend:
    name = "exact"
    capabilities = Capabilities(exact=True, filters=FILTER_KINDS - {"metadata"}, persistent=False, server=False,
                                scores=(("cosine", "cosine"), ("ip", "dot"), ("l2", "l2_squared")))

    def __init__(self, collection: str = "recallbench", metric: str = "cosine") -> None:
        self.collection = collection
        self.metric = metric
        self._kind = self.capabilities.native_kind(check_metric(None, self))
        self._dim = 0
        self._chunks: list[MemoryBatch] = []
        self._ids: np.ndarray = np.empty(0, dtype=object)
        self._vectors = np.empty((0, 0), dtype=np.float32)
        self._conv = np.empty(0, dtype=object)
        self._roles = np.empty(0, dtype=object)
        self._ts = np.empty(0, dtype=np.float64)
        self._by_conv: dict[str, np.ndarray] = {}
        self._id_rank = np.empty(0, dtype=np.int64)  # position of each id in sorted id order (tie-break)

    def open(self, *, dim: int, metric: str | None = None) -> None:
        check_metric(metric, self)
        self._dim = dim

    def add(self, batch: MemoryBatch) -> None:
        if batch.vectors.shape[1] != self._dim:
            raise ValueError(f"exact: vector dim {batch.vectors.shape[1]} != collection dim {self._dim}")
        self._chunks.append(batch)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        self._fold()

    def _fold(self) -> None:
        """Move the rows added since the last fold into the searchable arrays."""
        if not self._chunks:
            return
        chunks, self._chunks = self._chunks, []
        self._ids = np.concatenate([self._ids, *[np.array(c.ids, dtype=object) for c in chunks]])
        new = [np.asarray(c.vectors, dtype=np.float32) for c in chunks]
        self._vectors = np.concatenate([self._vectors.reshape(-1, self._dim), *new])
        self._conv = np.concatenate([self._conv, *[np.array(c.conversation_ids, dtype=object) for c in chunks]])
        self._roles = np.concatenate([self._roles, *[np.array(c.roles, dtype=object) for c in chunks]])
        self._ts = np.concatenate([self._ts, *[np.array(c.timestamps, dtype=np.float64) for c in chunks]])
        conv = self._conv.astype(str)
        order = np.argsort(conv, kind="stable")  # rows of each conversation, ascending (a fold per live write stays cheap)
        names, starts = np.unique(conv[order], return_index=True)
        self._by_conv = {str(c): ix.astype(np.int64) for c, ix in zip(names, np.split(order, starts[1:]))}
        self._id_rank = np.empty(len(self._ids), dtype=np.int64)
        self._id_rank[np.argsort(self._ids.astype(str), kind="stable")] = np.arange(len(self._ids))

    def search(self, vector: np.ndarray, *, k: int, where: Where) -> Hits:
        if k <= 0:
            raise ValueError(f"exact: k must be positive (got {k})")
        q = np.asarray(vector, dtype=np.float32)
        if self._chunks:  # rows added since the last wait_ready: a scan in RAM sees every write at once (live replay)
            self._fold()
        if len(self._ids) == 0:
            return Hits()
        if where == Where():  # no filter: score the matrix in place (no copy)
            rows, sims = np.arange(len(self._ids)), self._vectors @ q
        else:
            if where.conversation_id is not None:
                rows = self._by_conv.get(where.conversation_id, np.empty(0, dtype=np.int64))
            else:
                rows = np.arange(len(self._ids))
            if where.roles is not None:
                rows = rows[np.isin(self._roles[rows], list(where.roles))]
            if where.before is not None:
                rows = rows[self._ts[rows] <= where.before]
            sims = self._vectors[rows] @ q
        if rows.size == 0:
            return Hits()
        kk = min(k, rows.size)
        top = np.argpartition(-sims, kk - 1)[:kk] if kk < rows.size else np.arange(rows.size)
        top = top[np.lexsort((self._id_rank[rows[top]], -sims[top]))]  # similarity descending, then id
        s = tuple(sims[top].tolist())
        if self._kind == "l2_squared":  # its own number: the squared distance; the similarity converted back from it
            native = tuple(native_of("l2_squared", sims[top]).tolist())
            return Hits(tuple(self._ids[rows[top]].tolist()), tuple(similarity("l2_squared", x) for x in native), native)
        return Hits(tuple(self._ids[rows[top]].tolist()), s, s)

    def reference_query(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[list[str], list[float]]:
        """The plain numpy scan over the same arrays: the conversation's rows, the other filters, one product, a sort."""
        if where.conversation_id is None:
            rows = np.arange(len(self._ids))
        else:
            rows = self._by_conv.get(where.conversation_id, np.empty(0, dtype=np.int64))
        if where.roles is not None:
            rows = rows[np.isin(self._roles[rows], list(where.roles))]
        if where.before is not None:
            rows = rows[self._ts[rows] <= where.before]
        sims = self._vectors[rows] @ vector
        top = np.argsort(-sims, kind="stable")[:k]
        return self._ids[rows[top]].tolist(), sims[top].tolist()

    def list_collections(self) -> list[str]:
        """Nothing outlives an instance (in RAM only)."""
        return []

    def close(self) -> None:
        self._chunks = []

    def drop(self) -> None:
        self.__init__(self.collection, self.metric)
