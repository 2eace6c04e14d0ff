"""LanceDB adapter specifics on hand-built rows (the shared contract is in test_backend_contract.py)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

pytest.importorskip("lancedb", reason="lancedb not installed (pip install 'recallbench[lancedb]')")

from bench.backends.lancedb import LanceDBBackend, table_name  # noqa: E402
from bench.types import MemoryBatch, Where  # noqa: E402

# FACTS.md's score convention: q = [2,0,0,0]; cosines a 1, d 0.7071, b 0, c -1
ROWS = {"a": [1, 0, 0, 0], "d": [0.5, 0.5, 0, 0], "b": [0, 1, 0, 0], "c": [-1, 0, 0, 0]}
Q = np.array([2, 0, 0, 0], np.float32)


def batch(ids, vectors, convs=None, roles=None, ts=None) -> MemoryBatch:
    n = len(ids)
    return MemoryBatch(ids=tuple(ids), vectors=np.asarray(vectors, np.float32), conversation_ids=tuple(convs or ["c0"] * n),
                       roles=tuple(roles or ["user"] * n), timestamps=tuple(ts or [float(i) for i in range(n)]))


@pytest.fixture
def store(tmp_path):
    b = LanceDBBackend(path=str(tmp_path / "lance"), collection="t")
    b.open(dim=4)
    yield b
    b.drop()
    b.close()


def test_cosine_distance_becomes_similarity_best_first(store):
    store.add(batch(list(ROWS), list(ROWS.values()), convs=["c0", "c0", "c1", "c0"], roles=["user", "assistant", "user", "user"]))
    store.wait_ready(timeout_s=30)
    hits = store.search(Q, k=10, where=Where())
    assert hits.ids == ("a", "d", "b", "c")
    np.testing.assert_allclose(hits.scores, [1.0, math.sqrt(0.5), 0.0, -1.0], atol=1e-6)
    # pre-filters: conversation c0 and user and ts <= 2.0 keep a (ts 0) only; d is the assistant's, b in c1, c at ts 3
    assert store.search(Q, k=10, where=Where(conversation_id="c0", roles=("user",), before=2.0)).ids == ("a",)
    assert store.search(Q, k=2, where=Where(conversation_id="c0")).ids == ("a", "d")


def test_add_is_an_upsert_and_the_last_duplicate_in_a_batch_wins(store):
    store.add(batch(["a", "b"], [ROWS["a"], ROWS["b"]]))
    store.add(batch(["a", "x", "x"], [ROWS["c"], ROWS["b"], ROWS["d"]]))  # a now points away; x twice: the second row
    store.wait_ready(timeout_s=30)
    hits = store.search(Q, k=10, where=Where())
    assert sorted(hits.ids) == ["a", "b", "x"]  # three rows, not five
    got = dict(zip(hits.ids, hits.scores))
    assert got["a"] == pytest.approx(-1.0) and got["x"] == pytest.approx(math.sqrt(0.5), abs=1e-6)


def test_filter_values_full_of_sql_metacharacters_match_exactly(store):
    nasty = ["x' OR '1'='1", 'x"; DROP TABLE t; --', "back\\slash", "y\\' OR 1=1 -- ", "100%", "_", "new\nline", "nul\x00byte",
             "ünï'cödé 名前"]
    rng = np.random.default_rng(1)
    v = rng.standard_normal((2 * len(nasty), 4))
    convs = [c for c in nasty for _ in range(2)]
    store.add(batch([f"{c}|{i}'" for i, c in enumerate(convs)], v, convs=convs, roles=["user", "it's"] * len(nasty)))
    store.wait_ready(timeout_s=30)
    for value in nasty:
        assert {h.id for h in store.search(Q, k=100, where=Where(conversation_id=value))} == {
            f"{c}|{i}'" for i, c in enumerate(convs) if c == value}, value
    assert len(store.search(Q, k=100, where=Where(roles=("it's",)))) == len(nasty)
    assert store.search(Q, k=100, where=Where(conversation_id="x' OR '1'='1' OR conversation_id <> '")) == []


def test_edge_filters(store):
    store.add(batch(["a", "b"], [ROWS["a"], ROWS["b"]]))
    store.wait_ready(timeout_s=30)
    assert store.search(Q, k=5, where=Where(roles=())) == []
    assert store.search(Q, k=5, where=Where(before=-math.inf)) == []
    assert store.search(Q, k=5, where=Where(before=math.inf)).ids == ("a", "b")
    with pytest.raises(ValueError, match="NaN"):
        store.search(Q, k=5, where=Where(before=math.nan))
    with pytest.raises(ValueError, match="query dim 3 != collection dim 4"):
        store.search(np.ones(3, np.float32), k=5, where=Where())


def test_wait_ready_indexes_the_conversation_column(store):
    store.add(batch(["a"], [ROWS["a"]]))
    store.wait_ready(timeout_s=30)
    assert [list(i.columns) for i in store._table.list_indices()] == [["conversation_id"]]


def test_reopen_checks_the_dimension_and_drop_removes_the_files(tmp_path):
    path = tmp_path / "lance"
    first = LanceDBBackend(path=str(path), collection="keep me")
    first.open(dim=4)
    first.add(batch(["a"], [ROWS["a"]]))
    first.wait_ready(timeout_s=30)
    first.close()
    with pytest.raises(ValueError, match="holds dim=4, asked for dim=8"):
        LanceDBBackend(path=str(path), collection="keep me").open(dim=8)
    assert os.listdir(path) == [f"{table_name('keep me')}.lance"]
    first.drop()  # after close
    first.drop()  # idempotent
    assert os.listdir(path) == []


def test_table_names_are_safe_and_distinct():
    assert table_name("rb_abc-1.x") == "rb_abc-1.x"
    odd = table_name("rb'; DROP TABLE x; -- ../../etc")
    assert odd.startswith("rb___DROP_TABLE_x__--_.._.._etc-") and "/" not in odd
    assert table_name("a b") != table_name("a_b")
    with pytest.raises(ValueError, match="non-empty string"):
        table_name("")
