"""The store session: the one place a store is opened, filled, waited on, timed and cleaned up.

    with open_session(backend, dim=384) as s:                 # open (fresh=True: drop leftovers first)
        ingest = s.ingest(batches(turns, vectors, INGEST_BATCH))  # add() per batch, then wait_ready()
        timed = s.search_all(queries, wheres, k=10, warmup=5)    # one timed search per query
    # on leaving: drop() (a failure is logged, never raised over the real error), then close()

Every time is the store call alone: ``time.perf_counter_ns`` around ``backend.add``,
``backend.search`` or ``backend.reference_query``; building batches and filters and handling results
stay outside. Warm-up searches run first and are discarded. The trace, ``make regress``'s latency
pass, ``make bench`` (P4), ``make compare`` and ``make load`` all go through here; nothing else in
the package calls a store's ``open``/``add``/``wait_ready``/``drop``/``close``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from bench.progress import progress as progress_bar

from bench.backends.base import Backend, BackendUnavailable
from bench.output import error_line
from bench.types import Hits, MemoryBatch, Where

log = logging.getLogger(__name__)

INGEST_BATCH = 1000  # rows per MemoryBatch handed to a store's add()
READY_TIMEOUT_S = 1800.0  # bound on wait_ready(): 100k rows into an async index take minutes on 2 busy cores
LAG_PROBE_K = 10  # neighbours asked for when polling that a new row is searchable


@dataclass(frozen=True)
class Ingest:
    """What one ingest cost: time inside ``add`` only, the whole loop's wall time, then ``wait_ready``."""

    rows: int
    batches: int
    add_seconds: float  # summed time inside backend.add
    wall_seconds: float  # the loop: lazy batch building + add
    ready_seconds: float  # backend.wait_ready after the last add


@dataclass(frozen=True)
class Timed:
    """One timed search per query, in query order."""

    hits: list[Hits]
    latency_ns: np.ndarray  # int64: perf_counter_ns around backend.search alone
    loop_ns: int  # wall time of the whole timed loop (store calls + the loop's own work)
    warmup: int  # searches run before the loop and discarded

    @property
    def store_ns(self) -> int:
        return int(self.latency_ns.sum())


class Session:
    """An open store. Built by ``open_session``, which owns opening and cleaning up."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def ingest(self, batches: Iterable[MemoryBatch], *, total: int | None = None, progress: bool = False,
               timeout_s: float = READY_TIMEOUT_S) -> Ingest:
        """``add`` every batch (pulled lazily: one alive at a time), then ``wait_ready``. ``total``: batches, for the bar."""
        add_ns, rows, n = 0, 0, 0
        t0 = time.perf_counter()
        with progress_bar(total or 0, f"ingest {self.backend.name}", unit="batch", enabled=progress) as bar:
            for batch in batches:
                start = time.perf_counter_ns()
                self.backend.add(batch)
                add_ns += time.perf_counter_ns() - start
                rows += len(batch.ids)
                n += 1
                bar.update(1)
        wall = time.perf_counter() - t0
        return Ingest(rows=rows, batches=n, add_seconds=add_ns / 1e9, wall_seconds=wall, ready_seconds=self.ready(timeout_s))

    def timed_add(self, batch: MemoryBatch) -> int:
        """ns inside ``backend.add(batch)`` alone, no ``wait_ready`` after it (live replay: an agent writes, then reads)."""
        start = time.perf_counter_ns()
        self.backend.add(batch)
        return time.perf_counter_ns() - start

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """``wait_ready``; the seconds it took."""
        t0 = time.perf_counter()
        self.backend.wait_ready(timeout_s=timeout_s)
        return time.perf_counter() - t0

    def read_after_write(self, batch: MemoryBatch, *, timeout_s: float = 120.0) -> float:
        """Seconds from ``add(batch)`` returning until the start of the first unfiltered search that returns its
        last row (``wait_ready`` included: a store may need it before rows are searchable)."""
        self.backend.add(batch)
        t0 = time.perf_counter()
        self.backend.wait_ready(timeout_s=timeout_s)
        want, vector = batch.ids[-1], np.asarray(batch.vectors[-1], dtype=np.float32)
        while True:
            asked = time.perf_counter()  # the row was visible when the search that returned it started
            if want in self.backend.search(vector, k=LAG_PROBE_K, where=Where()).ids:
                return asked - t0
            if asked - t0 > timeout_s:
                raise TimeoutError(f"{self.backend.name}: row {want!r} not searchable {timeout_s:.0f} s after add()")
            time.sleep(0.002)

    def warm_up(self, vectors, wheres: Sequence[Where], *, k: int, n: int) -> int:
        """Run the first ``n`` searches untimed (cold caches, index loads); returns how many ran."""
        n = min(n, len(wheres))
        for i in range(n):
            self.backend.search(vectors[i], k=k, where=wheres[i])
        return n

    def timed_search(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[Hits, int]:
        """(hits, ns inside ``backend.search``)."""
        start = time.perf_counter_ns()
        hits = self.backend.search(vector, k=k, where=where)
        return hits, time.perf_counter_ns() - start

    def timed_reference(self, vector: np.ndarray, *, k: int, where: Where) -> tuple[tuple[list[str], list[float]], int]:
        """((ids, similarities), ns inside ``backend.reference_query``): the hand-written query on the same client."""
        start = time.perf_counter_ns()
        out = self.backend.reference_query(vector, k=k, where=where)
        return out, time.perf_counter_ns() - start

    def search_all(self, vectors, wheres: Sequence[Where], *, k: int, warmup: int = 0, progress: bool = False) -> Timed:
        """Search ``vectors[i]`` with ``wheres[i]`` once each, timed; ``warmup`` searches of the first queries before, discarded."""
        ran = self.warm_up(vectors, wheres, k=k, n=warmup)
        n = len(wheres)
        hits: list[Hits] = []
        lat = np.empty(n, dtype=np.int64)
        search, clock = self.backend.search, time.perf_counter_ns
        loop_start = clock()
        with progress_bar(n, f"search {self.backend.name}", unit="q", enabled=progress) as bar:
            for i in range(n):
                start = clock()
                h = search(vectors[i], k=k, where=wheres[i])
                lat[i] = clock() - start
                hits.append(h)
                bar.update(1)
        loop_ns = clock() - loop_start
        for h in hits:
            if not isinstance(h, Hits):
                raise TypeError(f"{self.backend.name}: search() returned {type(h).__name__}, not bench.types.Hits "
                                "(the store contract, bench/backends/base.py)")
        return Timed(hits=hits, latency_ns=lat, loop_ns=loop_ns, warmup=ran)


@contextmanager
def open_session(backend: Backend, *, dim: int, fresh: bool = False, drop: bool = True) -> Iterator[Session]:
    """Open ``backend`` (``fresh``: drop what an earlier run left under its collection first) and yield a Session.

    On leaving, also on an error: ``drop`` (unless ``drop=False``: another client of the same collection,
    or a store kept on purpose), then ``close``. A failing drop or close is logged, never raised: it would
    hide the real error. A store that cannot run here (``BackendUnavailable`` from open) created
    nothing, so it is only closed.
    """
    unavailable = False
    try:
        try:
            if fresh:
                backend.drop()
            backend.open(dim=dim)
        except BackendUnavailable:
            unavailable = True
            raise
        yield Session(backend)
    finally:
        _release(backend, drop=drop and not unavailable)


def _release(backend: Backend, *, drop: bool) -> None:
    try:
        if drop:
            backend.drop()
    except Exception as exc:  # e.g. the server died: the error that brought us here matters more
        log.warning("could not drop the %s collection: %s", backend.name, error_line(exc))
    finally:
        try:
            backend.close()
        except Exception as exc:
            log.warning("could not close %s: %s", backend.name, error_line(exc))
