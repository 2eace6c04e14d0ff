"""bench.backends.session on a fake store that records every call and a fake clock that only moves when told.

The clock moves by hand-picked amounts: building a batch costs 1 us, add() 10 us, wait_ready() 500 us,
search number i (0-based, warm-up included) 1 us * (i + 1). Nothing else moves it, so every timing
the session reports can be worked out by hand: if a timing included anything but the store call, it
would differ from the figures written beside the assertions.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from bench.backends import session as S
from bench.backends.base import BackendUnavailable, Capabilities
from bench.types import Hits, MemoryBatch, Where

US = 1_000  # ns


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def perf_counter_ns(self) -> int:
        return self.ns

    def perf_counter(self) -> float:
        return self.ns / 1e9

    def sleep(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(S, "time", SimpleNamespace(perf_counter_ns=c.perf_counter_ns, perf_counter=c.perf_counter, sleep=c.sleep))
    return c


class Fake:
    """Records calls; costs clock time as the module docstring says; ``fail`` names a method that raises."""

    name = "fake"
    capabilities = Capabilities(exact=True, filters=frozenset(), persistent=False, server=False)

    def __init__(self, clock: Clock, fail: dict | None = None, visible_after: int = 0) -> None:
        self.clock, self.fail, self.calls = clock, fail or {}, []
        self.searches = 0
        self.rows: list[str] = []
        self.visible_after = visible_after  # searches after wait_ready before a new row shows up

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if what in self.fail:
            raise self.fail[what]

    def open(self, *, dim: int, metric: str = "cosine") -> None:
        self._call(f"open({dim})")

    def add(self, batch: MemoryBatch) -> None:
        self._call(f"add({len(batch.ids)})")
        self.clock.ns += 10 * US
        self.rows += batch.ids

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        self._call("wait_ready")
        self.clock.ns += 500 * US

    def search(self, vector, *, k: int, where: Where):
        self._call(f"search({where.conversation_id})")
        self.searches += 1
        self.clock.ns += self.searches * US
        if self.visible_after:
            self.visible_after -= 1
            return Hits()
        return Hits(tuple(self.rows[-k:]), tuple(1.0 for _ in self.rows[-k:]))

    def reference_query(self, vector, *, k: int, where: Where):
        self._call("reference_query")
        self.clock.ns += 7 * US
        return list(self.rows[-k:]), [1.0] * len(self.rows[-k:])

    def close(self) -> None:
        self._call("close")

    def drop(self) -> None:
        self._call("drop")


def lazy_batches(clock: Clock, sizes):
    """Batches built on demand; building one costs 1 us (outside add: counted in the wall time only)."""
    row = 0
    for n in sizes:
        clock.ns += 1 * US
        ids = tuple(f"m{row + j}" for j in range(n))
        row += n
        yield MemoryBatch(ids=ids, vectors=np.zeros((n, 2), np.float32), conversation_ids=("c",) * n, roles=("user",) * n,
                          timestamps=(0.0,) * n)


def test_order_open_add_wait_search_drop_close_and_hand_worked_timings(clock):
    fake = Fake(clock)
    wheres = [Where(conversation_id=c) for c in ("c1", "c2", "c3")]
    with S.open_session(fake, dim=2) as s:
        ingest = s.ingest(lazy_batches(clock, [2, 2, 1]), total=3)
        timed = s.search_all(np.zeros((3, 2), np.float32), wheres, k=2, warmup=2)
    assert fake.calls == ["open(2)", "add(2)", "add(2)", "add(1)", "wait_ready",
                          "search(c1)", "search(c2)",  # warm-up: the first two queries, discarded
                          "search(c1)", "search(c2)", "search(c3)", "drop", "close"]
    assert ingest == S.Ingest(rows=5, batches=3,
                              add_seconds=30e-6,  # 3 adds x 10 us: batch building is not in it
                              wall_seconds=33e-6,  # + 3 batches built x 1 us
                              ready_seconds=500e-6)
    # searches 3, 4, 5 (after two warm-up searches) cost 3, 4 and 5 us; the loop adds nothing on this clock
    assert timed.latency_ns.tolist() == [3 * US, 4 * US, 5 * US] and timed.warmup == 2
    assert timed.store_ns == timed.loop_ns == 12 * US
    assert [h.ids for h in timed.hits] == [("m3", "m4")] * 3


def test_timed_search_and_reference_time_the_store_call_alone(clock):
    fake = Fake(clock)
    with S.open_session(fake, dim=2) as s:
        s.ingest(lazy_batches(clock, [3]))
        hits, ns = s.timed_search(np.zeros(2, np.float32), k=2, where=Where())
        (ids, sims), ref_ns = s.timed_reference(np.zeros(2, np.float32), k=2, where=Where())
    assert (hits.ids, ns) == (("m1", "m2"), 1 * US)  # the first search costs 1 us
    assert (ids, sims, ref_ns) == (["m1", "m2"], [1.0, 1.0], 7 * US)


def test_fresh_drops_first_and_drop_false_only_closes(clock):
    fake = Fake(clock)
    with S.open_session(fake, dim=4, fresh=True):
        pass
    assert fake.calls == ["drop", "open(4)", "drop", "close"]
    other = Fake(clock)
    with S.open_session(other, dim=4, drop=False):  # another client of a collection someone else owns
        pass
    assert other.calls == ["open(4)", "close"]


def test_a_failure_inside_still_drops_and_closes_and_the_real_error_wins(clock, caplog):
    fake = Fake(clock, fail={"search(c1)": RuntimeError("search broke"), "drop": OSError("disk gone")})
    with caplog.at_level(logging.WARNING, logger="bench.backends.session"):
        with pytest.raises(RuntimeError, match="search broke"):  # not the drop's OSError
            with S.open_session(fake, dim=2) as s:
                s.ingest(lazy_batches(clock, [1]))
                s.search_all(np.zeros((1, 2), np.float32), [Where(conversation_id="c1")], k=1)
    assert fake.calls[-2:] == ["drop", "close"]
    assert "could not drop the fake collection: OSError: disk gone" in caplog.text


def test_a_failing_drop_without_another_error_is_logged_not_raised(clock, caplog):
    fake = Fake(clock, fail={"drop": OSError("disk gone"), "close": RuntimeError("already closed")})
    with S.open_session(fake, dim=2):
        pass
    assert fake.calls == ["open(2)", "drop", "close"]
    assert "could not drop the fake collection: OSError: disk gone" in caplog.text
    assert "could not close fake: RuntimeError: already closed" in caplog.text


def test_a_store_that_cannot_run_here_is_closed_not_dropped(clock):
    fake = Fake(clock, fail={"open(2)": BackendUnavailable("store fake needs the fakedb package: pip install 'recallbench[fake]'")})
    with pytest.raises(BackendUnavailable, match="needs the fakedb package"):
        with S.open_session(fake, dim=2):
            pytest.fail("the body must not run")
    assert fake.calls == ["open(2)", "close"]


def test_a_search_that_does_not_return_hits_is_a_clear_error(clock):
    class Old(Fake):
        def search(self, vector, *, k, where):
            return list(super().search(vector, k=k, where=where))

    with pytest.raises(TypeError, match=r"fake: search\(\) returned list, not bench.types.Hits"):
        with S.open_session(Old(clock), dim=2) as s:
            s.search_all(np.zeros((1, 2), np.float32), [Where()], k=1)


def test_read_after_write_counts_from_add_through_wait_ready_to_the_search_that_finds_the_row(clock):
    fake = Fake(clock, visible_after=2)  # the first two searches after the write miss the row
    with S.open_session(fake, dim=2) as s:
        lag = s.read_after_write(next(lazy_batches(clock, [1])))
    # after add: wait_ready 500 us; search 1 (1 us) misses, sleep 2 ms; search 2 (2 us) misses, sleep 2 ms;
    # search 3 starts at 500 + 1 + 2000 + 2 + 2000 = 4503 us and finds it
    assert lag == pytest.approx(4503e-6)
    assert fake.calls == ["open(2)", "add(1)", "wait_ready", "search(None)", "search(None)", "search(None)", "drop", "close"]
