"""Qdrant: its engine in-process (Qdrant Edge) and the qdrant-client path (``url``), small data.

A Qdrant server does not run here (no binary on PyPI or Debian), so the client path is exercised against
qdrant-client's own local mode (``url: ":memory:"``, pure Python, slow: tiny data only).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_edge", reason="qdrant needs recallbench[qdrant]")

from bench.backends.catalog import capabilities, load_backend  # noqa: E402
from bench.backends.qdrant import point_id  # noqa: E402
from bench.types import MemoryBatch, Where  # noqa: E402


def _rows(n: int, dim: int, conversations: int, seed: int = 0) -> MemoryBatch:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return MemoryBatch(ids=tuple(f"m{i}" for i in range(n)), vectors=v, conversation_ids=tuple(f"c{i % conversations}" for i in range(n)),
                       roles=tuple("user" if i % 2 == 0 else "assistant" for i in range(n)), timestamps=tuple(float(i) for i in range(n)))


def test_point_ids_are_stable_uuids_of_the_memory_id():
    assert point_id("conv-1/D1:3") == point_id("conv-1/D1:3") != point_id("conv-1/D1:4")
    assert point_id("m1") == "5c07b939-6ed0-5b10-9613-4c8aab7f9cb5"  # uuid5(NAMESPACE_URL, "m1")


def test_the_configured_store_is_the_in_process_engine():
    caps = capabilities("qdrant")
    assert caps.kind == "embedded" and not caps.exact


@pytest.mark.parametrize("url", [None, ":memory:"], ids=["edge", "client-local"])
def test_filters_and_scores(tmp_path, url):
    b = load_backend("qdrant", stores_dir=tmp_path, collection="q1", layout="shared", **({"url": url} if url else {}))
    rows = _rows(60, 8, 3)
    b.open(dim=8)
    try:
        b.add(rows)
        b.wait_ready()
        hits = b.search(rows.vectors[4], k=3, where=Where(conversation_id="c1"))  # m4 is in c1
        assert hits.ids[0] == "m4" and abs(hits.scores[0] - 1.0) < 1e-5
        assert all(int(i[1:]) % 3 == 1 for i in hits.ids)
        exp = rows.vectors @ rows.vectors[4]
        assert all(abs(s - float(exp[int(i[1:])])) < 1e-4 for i, s in zip(hits.ids, hits.scores))  # score = cosine
        got = b.search(rows.vectors[4], k=60, where=Where(roles=("assistant",), before=20.0))
        assert set(got.ids) == {f"m{i}" for i in range(1, 21, 2)}
        assert b.search(rows.vectors[4], k=5, where=Where(roles=())) == []
    finally:
        b.drop()
        b.close()


def test_hnsw_built_past_the_threshold_reopens_and_refuses_another_dimension(tmp_path):
    """indexing_threshold_kb=1 makes the optimizer build the HNSW graph on 400 rows; the shard reopens from disk."""
    kw = dict(stores_dir=tmp_path, collection="q2", layout="shared", indexing_threshold_kb=1, full_scan_threshold=1)
    rows = _rows(400, 16, 4, seed=1)
    b = load_backend("qdrant", **kw)
    b.open(dim=16)
    b.add(rows)
    b.wait_ready()
    assert b._shard.info().indexed_vectors_count >= 400
    top = b.search(rows.vectors[7], k=10, where=Where())
    b.close()
    again = load_backend("qdrant", **kw)
    again.open(dim=16)
    assert again.search(rows.vectors[7], k=10, where=Where()).ids == top.ids and top.ids[0] == "m7"
    again.close()
    other = load_backend("qdrant", **kw)
    with pytest.raises(ValueError, match="holds dim=16, asked for dim=8"):
        other.open(dim=8)
    other.drop()
    assert not (tmp_path / "qdrant" / "q2").exists()


def test_two_instances_on_one_collection_share_the_open_shard(tmp_path):
    """An Edge shard locks its WAL: a second open of the same directory in one process failed ("Can't init WAL:
    WouldBlock", seen in make load's per-thread clients). Instances now share the open shard; the last close closes it."""
    rows = _rows(30, 8, 3)
    first = load_backend("qdrant", stores_dir=tmp_path, collection="q3", layout="shared")
    first.open(dim=8)
    first.add(rows)
    first.wait_ready()
    second = load_backend("qdrant", stores_dir=tmp_path, collection="q3", layout="shared")
    second.open(dim=8)
    assert second.search(rows.vectors[2], k=1, where=Where()).ids == ("m2",)
    second.close()
    assert first.search(rows.vectors[2], k=1, where=Where()).ids == ("m2",)  # still open for the first
    first.drop()
    first.close()


def test_the_store_size_counts_allocated_bytes_not_a_sparse_files_apparent_size(tmp_path):
    """An Edge shard preallocates sparse files (~130 MB apparent for 300 rows); make stores reported 7,820 MB for 50
    small shards. disk_bytes counts allocated blocks."""
    from bench.replay.trace import disk_bytes

    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # 64 MB apparent, nothing written
    (tmp_path / "data.bin").write_bytes(b"x" * 10_000)
    assert disk_bytes(tmp_path) < 1_000_000  # the 10,000 written bytes (in 4 KB blocks), not 64 MB
    assert disk_bytes(tmp_path / "data.bin") == 10_000
