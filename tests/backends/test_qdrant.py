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


@pytest.mark.parametrize("url", [None, ":memory:"], ids=["edge", "client-local"])
def test_the_hand_written_query_of_an_l2_collection_gives_similarities(tmp_path, url):
    # Qdrant's score in an l2 collection is the Euclidean distance; the reference query turns it into a similarity like
    # search does (m4's own distance 0 -> similarity 1), so the per-conversation layout merges it best first
    b = load_backend("qdrant", stores_dir=tmp_path, collection="q2", layout="shared", metric="l2", **({"url": url} if url else {}))
    rows = _rows(30, 8, 3)
    b.open(dim=8)
    try:
        b.add(rows)
        b.wait_ready()
        hits = b.search(rows.vectors[4], k=5, where=Where())
        ids, sims = b.reference_query(rows.vectors[4], k=5, where=Where())
        assert ids[0] == "m4" and abs(sims[0] - 1.0) < 1e-5
        assert list(ids) == list(hits.ids) and np.allclose(sims, hits.scores, atol=1e-5)
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


def test_int8_quantization_is_built_and_rescore_restores_the_exact_scores(tmp_path):
    """quantization=int8: the shard's config holds scalar int8 (in RAM) and the optimizer writes the quantized vectors of
    the indexed segment. rescore=false scores are the int8 estimates (not the cosine: that is how we know the codes
    were searched), still within [-1, 1], best first, no repeat; rescore=true (same shard, a search-time setting) gives
    the full-precision cosine. 300 random 8-d unit rows, hnsw_ef 300 (the whole graph): rescore with oversampling 4
    returns exactly the exact top 5 of each of 20 queries; without rescore >= 4 of the 5."""
    import json

    kw = dict(stores_dir=tmp_path, collection="q5", layout="shared", indexing_threshold_kb=1, full_scan_threshold=1,
              quantization="int8", hnsw_ef=300)
    raw = load_backend("qdrant", rescore=False, **kw)
    rows = _rows(300, 8, 3, seed=7)
    raw.open(dim=8)
    try:
        raw.add(rows)
        raw.wait_ready()
        folder = tmp_path / "qdrant" / "q5"
        assert json.loads((folder / "edge_config.json").read_text())["quantization_config"] == {"scalar": {"type": "int8", "always_ram": True}}
        assert list(folder.glob("segments/*/vector_storage/quantized.data")), "no quantized vectors were built"
        rescored = load_backend("qdrant", rescore=True, oversampling=4.0, **kw)
        rescored.open(dim=8)
        exact = np.argsort(-(rows.vectors @ rows.vectors[:20].T), axis=0, kind="stable")[:5].T
        found, off = {"raw": [], "rescored": []}, 0.0
        for i in range(20):
            for name, b in (("raw", raw), ("rescored", rescored)):
                hits = b.search(rows.vectors[i], k=5, where=Where())
                assert list(hits.scores) == sorted(hits.scores, reverse=True) and len(set(hits.ids)) == len(hits.ids) == 5
                assert all(-1.0 <= s <= 1.0 + 1e-6 for s in hits.scores)  # float32 rounding of a cosine of 1
                cos = rows.vectors[[int(x[1:]) for x in hits.ids]] @ rows.vectors[i]
                if name == "rescored":
                    assert np.allclose(hits.scores, cos, atol=1e-5)
                else:
                    off = max(off, float(np.abs(np.asarray(hits.scores) - cos).max()))
                found[name].append(len(set(hits.ids) & {f"m{j}" for j in exact[i]}))
        assert off > 1e-4, off  # the int8 estimate, not the cosine
        assert found["rescored"] == [5] * 20 and min(found["raw"]) >= 4, found
        rescored.close()
    finally:
        raw.drop()
        raw.close()
