"""Store-specific tests of bench/backends/seekdb.py against real seekdb (embedded and server), no mocks.

Data: 4 clusters x 30 unit vectors (dim 32), ids "conv-<c>|D1:<i>", so every expected value below
comes from numpy cosine on the same vectors. The embedded instance lives in one directory for the
module (one embedded path per process); tests that need other paths run a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bench.backends import seekdb as seekdb_module
from bench.backends.base import FILTER_KINDS, BackendUnavailable
from bench.backends.seekdb import (
    MAX_K,
    SeekdbBackend,
    _native_filter,
    safe_collection_name,
)
from bench.backends.scores import similarity
from bench.backends.servers import free_port
from bench.types import MemoryBatch, Where

REPO = Path(__file__).resolve().parents[2]
DIM = 32
N = 120


def clustered(seed: int = 0, n: int = N, dim: int = DIM) -> MemoryBatch:
    """4 clusters of n/4 vectors; conversation = cluster; role alternates; timestamp = 10 * i."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, dim))
    rows = np.array([centres[i % 4] + 0.35 * rng.normal(size=dim) for i in range(n)], dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return MemoryBatch(
        ids=tuple(f"conv-{i % 4}|D1:{i}" for i in range(n)),
        vectors=rows,
        conversation_ids=tuple(f"conv-{i % 4}" for i in range(n)),
        roles=tuple("user" if i % 2 == 0 else "assistant" for i in range(n)),
        timestamps=tuple(10.0 * i for i in range(n)),
    )


DATA = clustered()


def expected(q: np.ndarray, keep=lambda i: True) -> list[tuple[str, float]]:
    """numpy reference: (id, cosine) of rows passing ``keep``, best first."""
    sims = DATA.vectors @ q
    rows = [i for i in range(N) if keep(i)]
    rows.sort(key=lambda i: -sims[i])
    return [(DATA.ids[i], float(sims[i])) for i in rows]


def check_store(b, *, filters_exact: bool = True) -> None:
    """Top-1 is the stored vector itself (sim 1 +- 1e-4); scores match numpy; filters honoured."""
    for i in (0, 1, 57, 119):
        hits = b.search(DATA.vectors[i], k=10, where=Where())
        assert hits[0].id == DATA.ids[i]
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        ref = dict(expected(DATA.vectors[i]))
        for h in hits:
            assert h.score == pytest.approx(ref[h.id], abs=1e-4)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # k = every row: all 120 come back (ef_search is raised to k)
    hits = b.search(DATA.vectors[3], k=N, where=Where())
    assert len(hits) == N and len({h.id for h in hits}) == N
    # conversation filter: the 30 rows of conv-2, although the query sits in conv-3's cluster
    q = DATA.vectors[3]
    hits = b.search(q, k=5, where=Where(conversation_id="conv-2"))
    assert [h.id for h in hits] == [i for i, _ in expected(q, lambda i: i % 4 == 2)[:5]]
    hits = b.search(q, k=1000, where=Where(conversation_id="conv-2"))
    assert {h.id for h in hits} == {DATA.ids[i] for i in range(2, N, 4)}
    # conv-1 rows are odd i -> all "assistant"; user filter leaves nothing there
    assert b.search(q, k=50, where=Where(conversation_id="conv-1", roles=("user",))) == []
    # role + before: conv-0 users (i % 4 == 0) with 10*i <= 200 -> i in 0, 4, ..., 20: 6 rows
    hits = b.search(q, k=50, where=Where(conversation_id="conv-0", roles=("user",), before=200.0))
    assert sorted(h.id for h in hits) == sorted(f"conv-0|D1:{i}" for i in range(0, 21, 4))
    # roles in (user, assistant) and before only: 10*i <= 95 -> i = 0..9
    hits = b.search(q, k=50, where=Where(roles=("user", "assistant"), before=95.0))
    assert sorted(h.id for h in hits) == sorted(DATA.ids[:10])
    assert b.search(q, k=5, where=Where(roles=())) == []


# ------------------------------------------------------------------ units (no store)


def test_similarity_is_one_minus_cosine_distance():
    kind = SeekdbBackend.capabilities.native_kind("cosine")
    assert kind == "cosine_distance"
    assert similarity(kind, 0.0) == 1.0
    assert similarity(kind, 0.25) == 0.75
    assert similarity(kind, 1.0) == 0.0
    assert similarity(kind, 2.0) == -1.0


def test_native_filter_shapes():
    assert _native_filter(Where()) is None
    assert _native_filter(Where(conversation_id="c")) == {"conversation_id": {"$eq": "c"}}
    assert _native_filter(Where(conversation_id="c", roles=("user",), before=5)) == {
        "$and": [{"conversation_id": {"$eq": "c"}}, {"role": {"$in": ["user"]}}, {"ts": {"$lte": 5.0}}]
    }
    assert _native_filter(Where(before=float("inf"))) is None
    with pytest.raises(ValueError, match="NaN"):
        _native_filter(Where(before=float("nan")))


def test_collection_names_are_sanitised_without_collisions():
    assert safe_collection_name("recallbench_1") == "recallbench_1"
    a, b = safe_collection_name("run-1"), safe_collection_name("run.1")
    assert a.startswith("run_1_") and b.startswith("run_1_") and a != b
    with pytest.raises(ValueError, match="collection"):
        SeekdbBackend(path="/tmp/x", collection="")._table  # noqa: B018


def test_constructor_rejects_bad_config():
    with pytest.raises(ValueError, match="path"):
        SeekdbBackend()
    with pytest.raises(ValueError, match="ef_search"):
        SeekdbBackend(path="/tmp/x", ef_search=0)


def test_importing_bench_imports_no_store_client():
    code = ("import sys, bench.backends.seekdb, bench.backends.chroma, bench.backends.servers; "
            "bad = [m for m in ('pyseekdb', 'pylibseekdb', 'chromadb', 'pymysql') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# ------------------------------------------------------------------ embedded


@pytest.fixture(scope="module")
def embedded_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("seekdb_embedded"))


@pytest.fixture(scope="module")
def embedded(embedded_dir):
    b = SeekdbBackend(path=embedded_dir, collection="clusters", ef_search=16)
    b.open(dim=DIM)
    b.add(DATA)
    b.wait_ready(timeout_s=120)
    yield b
    b.drop()
    b.close()


def test_embedded_scores_filters_and_capabilities(embedded):
    assert embedded.name == "seekdb"
    caps = embedded.capabilities
    assert (caps.exact, caps.persistent, caps.server, caps.filters, caps.max_k) == (False, True, False, FILTER_KINDS, MAX_K)
    check_store(embedded)


def test_conversation_search_reads_the_indexed_column_exactly(embedded, embedded_dir, caplog):
    """A collection created with conversation_index (the default outside a per-conversation collection) answers a
    search within one conversation through its indexed column: the plan reads the index, the ranking is numpy's
    exactly (every one of conv-2's 30 rows, in order); without the column the same filters go to the HNSW index."""
    assert embedded._conv_table is not None
    cursor = embedded._client._server.get_raw_connection().cursor()
    cursor.execute(f"EXPLAIN SELECT _id FROM `{embedded._conv_table}` WHERE rb_conversation = 'conv-2' "
                   f"ORDER BY cosine_distance(embedding, '[{','.join(['0.1'] * DIM)}]') LIMIT 5")
    plan = " ".join(str(r) for r in cursor.fetchall())
    assert "idx_rb_conversation" in plan and "RANGE SCAN" in plan
    q = DATA.vectors[3]
    hits = embedded.search(q, k=1000, where=Where(conversation_id="conv-2"))
    want = expected(q, lambda i: i % 4 == 2)
    assert [h.id for h in hits] == [i for i, _ in want]
    assert [h.score for h in hits] == pytest.approx([s for _, s in want], abs=1e-5)
    plain = SeekdbBackend(path=embedded_dir, collection="clusters_plain", ef_search=16, conversation_index=False)
    plain.drop()
    plain.open(dim=DIM)
    plain.add(DATA)
    plain.wait_ready(timeout_s=120)
    assert plain._conv_table is None
    check_store(plain)
    plain.close()
    with caplog.at_level("INFO", logger="bench.backends.seekdb"):
        reopened = SeekdbBackend(path=embedded_dir, collection="clusters_plain")  # wants the column, finds none
        reopened.open(dim=DIM)
    assert reopened._conv_table is None
    assert "created without the indexed conversation column" in caplog.text
    check_store(reopened)
    reopened.drop()
    reopened.close()


def test_conversation_id_longer_than_the_column_is_one_line(embedded):
    long = "c" * 513
    with pytest.raises(ValueError, match=r"batch row 0 \(id 'x'\): conversation id of 513 bytes.*<= 512"):
        embedded.add(MemoryBatch(ids=("x",), vectors=np.ones((1, DIM), np.float32) / DIM ** 0.5,
                                 conversation_ids=(long,), roles=("user",), timestamps=(0.0,)))


def test_ef_search_raised_to_k_per_search(embedded):
    def session(var: str) -> int:
        return int(embedded._client._server._execute(f"SHOW VARIABLES LIKE '{var}'")[0][1])

    assert session("ob_query_timeout") == 120_000_000
    assert len(embedded.search(DATA.vectors[0], k=100, where=Where())) == 100
    assert session("ob_hnsw_ef_search") == 100  # ef_search=16 < k=100
    assert len(embedded.search(DATA.vectors[0], k=5, where=Where())) == 5
    assert session("ob_hnsw_ef_search") == 16  # back to the configured value
    with pytest.raises(ValueError, match="16384"):
        embedded.search(DATA.vectors[0], k=MAX_K + 1, where=Where())
    with pytest.raises(ValueError, match="k must be"):
        embedded.search(DATA.vectors[0], k=0, where=Where())


def test_async_index_wait_makes_new_rows_searchable(embedded_dir):
    b = SeekdbBackend(path=embedded_dir, collection="fresh_async")
    b.drop()
    b.open(dim=DIM)
    try:
        first = clustered(seed=1, n=40)
        b.add(first)
        b.wait_ready(timeout_s=120)
        assert b._probes == []
        for i in range(40):
            assert b.search(first.vectors[i], k=1, where=Where())[0].id == first.ids[i]
        # a second write into the now-indexed collection: visible after wait_ready too
        more = clustered(seed=2, n=8)
        more = MemoryBatch(ids=tuple(f"late|{i}" for i in range(8)), vectors=more.vectors,
                           conversation_ids=("late",) * 8, roles=("user",) * 8, timestamps=(0.0,) * 8)
        b.add(more)
        b.wait_ready(timeout_s=120)
        for i in range(8):
            assert b.search(more.vectors[i], k=1, where=Where())[0].id == f"late|{i}"
        # a row that never becomes searchable: bounded wait with a clear error
        b._probes.append(("never|written", more.vectors[0].tolist()))
        with pytest.raises(TimeoutError, match="fresh_async.*never\\|written"):
            b.wait_ready(timeout_s=0.3)
    finally:
        b.drop()
        b.close()


def test_a_stored_row_the_approximate_search_misses_is_not_waited_for(embedded_dir, monkeypatch, caplog):
    """After refresh_index() returned, a probe whose row is stored but which search does not return for its vector (an
    approximate index's miss; here the probe's vector points elsewhere) is let go with one line; a probe whose row
    was never written still times out."""
    monkeypatch.setattr(seekdb_module, "_SETTLE_S", 0.2)
    b = SeekdbBackend(path=embedded_dir, collection="settle_case", refresh_after_s=0.0)
    b.drop()
    b.open(dim=DIM)
    try:
        b.add(DATA)
        b.wait_ready(timeout_s=120)
        far = (-DATA.vectors[0]).tolist()  # conv-0's row 0 is never among the 20 nearest of its opposite
        b._probes = [(DATA.ids[0], far)]
        with caplog.at_level("INFO", logger="bench.backends.seekdb"):
            b.wait_ready(timeout_s=60)
        assert b._probes == [] and "are stored and the index refreshed" in caplog.text and DATA.ids[0] in caplog.text
        b._probes = [("never|written", far)]
        with pytest.raises(TimeoutError, match="never\\|written"):
            b.wait_ready(timeout_s=3)
    finally:
        b.drop()
        b.close()


def test_is_timeout_recognises_both_error_shapes():
    import pylibseekdb
    import pymysql

    assert seekdb_module._is_timeout(pylibseekdb.SeekdbError("Timeout failed: code=4012"))  # embedded
    assert seekdb_module._is_timeout(pymysql.err.OperationalError(4012, "Timeout, query has reached the maximum"))
    assert not seekdb_module._is_timeout(pymysql.err.OperationalError(1064, "syntax error near 4012"))
    assert not seekdb_module._is_timeout(RuntimeError("code=4013"))


def test_wait_ready_survives_refresh_index_timeouts(embedded_dir):
    """Regression: CALL dbms_index_manager.refresh() gives up with 4012 after ~30 s (server-side limit)
    while a large load is still being indexed (14,726 x 1536 under load); wait_ready must keep going.
    The two timeouts are injected (a real one takes 30 s); the row they hide is written by the third call."""
    import pylibseekdb
    import pymysql

    b = SeekdbBackend(path=embedded_dir, collection="refresh_timeouts", refresh_after_s=0.0)
    b.drop()
    b.open(dim=DIM)
    try:
        late = clustered(seed=3, n=4)
        b.add(MemoryBatch(ids=late.ids[:3], vectors=late.vectors[:3], conversation_ids=late.conversation_ids[:3],
                          roles=late.roles[:3], timestamps=late.timestamps[:3]))
        b._probes.append((late.ids[3], late.vectors[3].tolist()))  # not written until the 3rd refresh
        real_refresh, calls = b._col.refresh_index, []

        def flaky_refresh():
            calls.append(1)
            if len(calls) == 1:
                raise pylibseekdb.SeekdbError("Timeout failed: code=4012")
            if len(calls) == 2:
                raise pymysql.err.OperationalError(4012, "Timeout, query has reached the maximum query timeout")
            b._col.add(ids=[late.ids[3]], embeddings=[late.vectors[3].tolist()],
                       metadatas=[{"conversation_id": "x", "role": "user", "ts": 0.0}])
            real_refresh()

        b._col.refresh_index = flaky_refresh
        b.wait_ready(timeout_s=120)
        assert len(calls) == 3 and b._probes == []
        assert b.search(late.vectors[3], k=1, where=Where())[0].id == late.ids[3]
        # any other error from refresh_index is not swallowed
        b._probes.append(("never|written", late.vectors[0].tolist()))
        b._col.refresh_index = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
        with pytest.raises(RuntimeError, match="boom"):
            b.wait_ready(timeout_s=120)
    finally:
        b.drop()
        b.close()


def test_upsert_replaces_a_stored_id(embedded_dir):
    b = SeekdbBackend(path=embedded_dir, collection="upsert_case")
    b.drop()
    b.open(dim=4)
    try:
        x, y = np.array([1, 0, 0, 0], np.float32), np.array([0, 1, 0, 0], np.float32)
        b.add(MemoryBatch(ids=("a", "b"), vectors=np.stack([x, y]), conversation_ids=("c", "c"),
                          roles=("user", "user"), timestamps=(1.0, 2.0)))
        b.add(MemoryBatch(ids=("a",), vectors=y[None, :], conversation_ids=("c",), roles=("assistant",),
                          timestamps=(3.0,)))
        b.wait_ready(timeout_s=120)
        hits = b.search(y, k=10, where=Where())
        assert sorted((h.id, round(h.score, 4)) for h in hits) == [("a", 1.0), ("b", 1.0)]
        assert [h.id for h in b.search(y, k=10, where=Where(roles=("assistant",)))] == ["a"]
        assert b._col.count() == 2
    finally:
        b.drop()
        b.close()


def test_persistence_close_reopen_and_drop(embedded_dir):
    b = SeekdbBackend(path=embedded_dir, collection="persist_case")
    b.drop()
    b.open(dim=DIM)
    b.add(DATA)
    b.wait_ready(timeout_s=120)
    b.close()
    b.close()  # idempotent
    again = SeekdbBackend(path=embedded_dir, collection="persist_case")
    again.open(dim=DIM)
    assert again.search(DATA.vectors[7], k=1, where=Where())[0].id == DATA.ids[7]
    users = seekdb_module._EMBEDDED["users"]
    with pytest.raises(ValueError, match="dimension 32"):
        SeekdbBackend(path=embedded_dir, collection="persist_case").open(dim=8)
    assert seekdb_module._EMBEDDED["users"] == users  # a failed open holds nothing
    forgotten = SeekdbBackend(path=embedded_dir, collection="persist_case")
    forgotten.open(dim=DIM)
    assert seekdb_module._EMBEDDED["users"] == users + 1
    del forgotten  # never closed: garbage collection releases its hold on the instance
    assert seekdb_module._EMBEDDED["users"] == users
    again.close()
    again.drop()  # works after close()
    again.drop()  # idempotent
    fresh = SeekdbBackend(path=embedded_dir, collection="persist_case")
    fresh.open(dim=DIM)
    assert fresh.search(DATA.vectors[7], k=1, where=Where()) == []
    fresh.drop()
    fresh.close()


def test_add_rejects_bad_rows(embedded):
    with pytest.raises(ValueError, match="dim 8 != collection dim 32"):
        embedded.add(MemoryBatch(ids=("x",), vectors=np.ones((1, 8), np.float32), conversation_ids=("c",),
                                 roles=("user",), timestamps=(0.0,)))
    bad = np.full((1, DIM), np.nan, np.float32)
    with pytest.raises(ValueError, match="'x'.*NaN"):
        embedded.add(MemoryBatch(ids=("x",), vectors=bad, conversation_ids=("c",), roles=("user",),
                                 timestamps=(0.0,)))


def _run_py(body: str, timeout: float = 180) -> str:
    """Run PRELUDE + ``body`` in a fresh Python process (its own embedded seekdb instance)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


PRELUDE = f"""
import sys
sys.path.insert(0, {str(REPO / 'tests')!r})
from tests.backends.test_seekdb import DATA, DIM, clustered
from bench.backends.seekdb import SeekdbBackend, EmbeddedInstanceInUse
from bench.types import Where
"""


@pytest.mark.slow
def test_one_embedded_instance_per_process(tmp_path):
    out = _run_py(f"""
    a = SeekdbBackend(path={str(tmp_path / 'A')!r}, collection="guard")
    a.open(dim=DIM); a.add(DATA); a.wait_ready(120)
    b = SeekdbBackend(path={str(tmp_path / 'B')!r}, collection="guard")
    try:
        b.open(dim=DIM)
        print("NO ERROR")
    except EmbeddedInstanceInUse as exc:
        assert "/A" in str(exc) and "/B" in str(exc), exc
        print("GUARDED")
    a.close()
    b.open(dim=DIM)                      # A is closed: the instance switches to B
    print("B_EMPTY", b.search(DATA.vectors[0], k=1, where=Where()) == [])
    b.close()
    """)
    assert out.split() == ["GUARDED", "B_EMPTY", "True"]


@pytest.mark.slow
def test_restart_warm_up_and_persistence_across_processes(tmp_path):
    path = str(tmp_path / "restart")
    _run_py(f"""
    a = SeekdbBackend(path={path!r}, collection="restart")
    a.open(dim=DIM); a.add(DATA); a.wait_ready(120); a.close()
    """)
    out = _run_py(f"""
    import logging, time
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    b = SeekdbBackend(path={path!r}, collection="restart", query_timeout_s=90)
    b.open(dim=DIM)                      # new process on existing data: warm-up query runs here
    t0 = time.monotonic()
    hits = b.search(DATA.vectors[42], k=3, where=Where())
    print("TOP", hits[0].id, round(hits[0].score, 4), "FIRST_QUERY_S", round(time.monotonic() - t0, 3))
    print("TIMEOUT", b._client._server._execute("SHOW VARIABLES LIKE 'ob_query_timeout'")[0][1])
    b.close()
    """)
    assert "warm-up query on restart" in out
    assert f"TOP {DATA.ids[42]} 1.0 " in out
    assert "TIMEOUT 90000000" in out


# ------------------------------------------------------------------ server


def test_server_scores_filters_persistence(server_seekdb_server):
    b = SeekdbBackend(collection="clusters_srv", ef_search=16, **server_seekdb_server)
    b.drop()
    b.open(dim=DIM)
    try:
        assert b.name == "seekdb_server" and b.capabilities.server is True
        b.add(DATA)
        b.wait_ready(timeout_s=120)
        check_store(b)
        b.close()
        again = SeekdbBackend(collection="clusters_srv", **server_seekdb_server)
        again.open(dim=DIM)
        assert again.search(DATA.vectors[5], k=1, where=Where())[0].id == DATA.ids[5]
        again.close()
    finally:
        b.drop()
        b.close()


def test_server_unavailable_is_reported():
    b = SeekdbBackend(host="127.0.0.1", port=free_port())
    with pytest.raises(BackendUnavailable, match="seekdb server 127.0.0.1:"):
        b.open(dim=4)
