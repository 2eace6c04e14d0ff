"""sqlite-vec backend specifics (the shared contract is in test_backend_contract.py).

Hand-worked fixture (FACTS.md score table): query q=[2,0,0,0] against a=[1,0,0,0], d=[.5,.5,0,0]
(normalised), b=[0,1,0,0], c=[-1,0,0,0] gives cosines a 1, d 0.70710678, b 0, c -1.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.backends.scores import similarity
from bench.backends.sqlite_vec import MAX_K, SqliteVecBackend, safe_name
from bench.types import MemoryBatch, Where

Q = np.array([2, 0, 0, 0], dtype=np.float32)
INV_SQRT2 = 0.7071067811865476


def unit(*v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def mb(rows) -> MemoryBatch:
    """rows: (id, vector, conversation, role, ts)."""
    return MemoryBatch(
        ids=tuple(r[0] for r in rows),
        vectors=np.stack([r[1] for r in rows]).astype(np.float32),
        conversation_ids=tuple(r[2] for r in rows),
        roles=tuple(r[3] for r in rows),
        timestamps=tuple(r[4] for r in rows),
    )


ROWS = [
    ("conv-1|D1:1", unit(1, 0, 0, 0), "conv-1", "user", 100.0),
    ("conv-1|D1:2", unit(0.5, 0.5, 0, 0), "conv-1", "assistant", 200.0),
    ("conv-2|D1:1", unit(0, 1, 0, 0), "conv-2", "user", 300.0),
    ("conv-2|D1:2", unit(-1, 0, 0, 0), "conv-2", "assistant", 0.0),  # unknown time
]


@pytest.fixture
def store(tmp_path):
    b = SqliteVecBackend(path=str(tmp_path), collection="unit")
    b.open(dim=4)
    b.add(mb(ROWS))
    yield b
    b.drop()


def scores(hits):
    return [(h.id, round(h.score, 6)) for h in hits]


def test_similarity_is_one_minus_cosine_distance():
    kind = SqliteVecBackend.capabilities.native_kind("cosine")
    assert kind == "cosine_distance"
    assert similarity(kind, 0.0) == 1.0
    assert similarity(kind, 2.0) == -1.0
    assert similarity(kind, 0.25) == 0.75


def test_scores_and_order_hand_worked(store):
    assert scores(store.search(Q, k=10, where=Where())) == [
        ("conv-1|D1:1", 1.0),
        ("conv-1|D1:2", round(INV_SQRT2, 6)),
        ("conv-2|D1:1", 0.0),
        ("conv-2|D1:2", -1.0),
    ]
    assert [h.id for h in store.search(Q, k=2, where=Where())] == ["conv-1|D1:1", "conv-1|D1:2"]


def test_filters(store):
    ids = lambda w: [h.id for h in store.search(Q, k=10, where=w)]  # noqa: E731
    assert ids(Where(conversation_id="conv-2")) == ["conv-2|D1:1", "conv-2|D1:2"]
    assert ids(Where(roles=("assistant",))) == ["conv-1|D1:2", "conv-2|D1:2"]
    assert ids(Where(roles=("user", "assistant"))) == [r[0] for r in ROWS]
    assert ids(Where(before=200.0)) == ["conv-1|D1:1", "conv-1|D1:2", "conv-2|D1:2"]  # 0.0 = unknown <= any time
    assert ids(Where(before=99.0)) == ["conv-2|D1:2"]
    assert ids(Where(conversation_id="conv-1", roles=("user",), before=150.0)) == ["conv-1|D1:1"]
    assert ids(Where(conversation_id="nope")) == []
    assert ids(Where(roles=())) == []


def test_file_layout_and_persistence(tmp_path):
    b = SqliteVecBackend(path=str(tmp_path / "stores"), collection="run-1")
    b.open(dim=4)
    b.add(mb(ROWS[:2]))
    b.close()
    b.close()  # idempotent
    assert (tmp_path / "stores" / "run-1.db").is_file()
    again = SqliteVecBackend(path=str(tmp_path / "stores"), collection="run-1")
    again.open(dim=4)
    assert again.count() == 2
    assert [h.id for h in again.search(Q, k=5, where=Where())] == ["conv-1|D1:1", "conv-1|D1:2"]
    again.close()


def test_duplicate_ids_replace(store):
    # re-adding an id replaces vector, conversation, role and time; within one batch the last row wins
    store.add(mb([("conv-1|D1:1", unit(0, 1, 0, 0), "conv-1", "user", 100.0),
                  ("conv-1|D1:1", unit(0, 0, 1, 0), "conv-3", "assistant", 500.0)]))
    assert store.count() == 4
    hits = store.search(unit(0, 0, 1, 0), k=10, where=Where(conversation_id="conv-3"))
    assert scores(hits) == [("conv-1|D1:1", 1.0)]
    assert store.search(Q, k=10, where=Where(conversation_id="conv-1"))[0].id == "conv-1|D1:2"
    assert store.search(Q, k=10, where=Where(roles=("user",), conversation_id="conv-1")) == []


def test_safe_name():
    assert safe_name("recallbench") == "recallbench"
    assert safe_name("run_2024-01-01.x") == "run_2024-01-01.x"
    odd = safe_name("a b/c")
    assert odd.startswith("a_b_c-") and len(odd) == len("a_b_c-") + 10
    assert safe_name("a_b_c") != odd  # no collision with an already-safe name
    assert "/" not in safe_name("../../etc/passwd") and not safe_name("../x").startswith(".")
    with pytest.raises(ValueError, match="collection"):
        safe_name("")


def test_hostile_collection_name_stays_in_path(tmp_path):
    b = SqliteVecBackend(path=str(tmp_path), collection="x'; DROP TABLE memories; --/../../evil")
    assert b.file.parent == tmp_path
    b.open(dim=4)
    b.add(mb(ROWS[:1]))
    assert [h.id for h in b.search(Q, k=1, where=Where())] == ["conv-1|D1:1"]
    b.drop()
    assert list(tmp_path.iterdir()) == []


def test_hostile_values_are_parameters(store):
    evil = "x' OR '1'='1"
    store.add(mb([(evil, unit(0, 0, 0, 1), evil, evil, 1.0)]))
    assert [h.id for h in store.search(unit(0, 0, 0, 1), k=10, where=Where(conversation_id=evil, roles=(evil,)))] == [evil]
    assert store.search(Q, k=10, where=Where(conversation_id=evil + "-not")) == []


def test_reopen_with_other_dim_is_a_clear_error(tmp_path):
    b = SqliteVecBackend(path=str(tmp_path), collection="c")
    b.open(dim=4)
    b.close()
    with pytest.raises(ValueError, match=r"c\.db holds dim=4.*asked for dim=8"):
        b.open(dim=8)


def test_bad_arguments(store):
    with pytest.raises(ValueError, match="k must be"):
        store.search(Q, k=0, where=Where())
    with pytest.raises(ValueError, match="k must be"):
        store.search(Q, k=MAX_K + 1, where=Where())
    assert len(store.search(Q, k=MAX_K, where=Where())) == 4
    with pytest.raises(ValueError, match="query dim 3"):
        store.search(np.ones(3, dtype=np.float32), k=1, where=Where())
    with pytest.raises(ValueError, match="vector dim 3"):
        store.add(mb([("x", np.ones(3, dtype=np.float32), "c", "user", 0.0)]))
    with pytest.raises(ValueError, match="metric"):
        store.open(dim=4, metric="l2")


def test_use_before_open_and_drop_lifecycle(tmp_path):
    b = SqliteVecBackend(path=str(tmp_path), collection="c")
    with pytest.raises(RuntimeError, match="not open"):
        b.search(Q, k=1, where=Where())
    b.drop()  # nothing there: fine
    b.open(dim=4)
    b.add(mb(ROWS))
    b.close()
    b.drop()  # after close
    assert not b.file.exists()
    b.open(dim=4)
    assert b.count() == 0 and b.search(Q, k=3, where=Where()) == []
    b.drop()
