"""Store-specific tests of bench/backends/chroma.py against real chroma (persistent local and server).

Same clustered data as the seekdb tests (4 clusters x 30 unit vectors, dim 32): expected values are
numpy cosines of the same vectors. On 120 rows chroma's filtered HNSW is exhaustive, so filter
results are compared exactly here (on large collections it can miss rows: capabilities.exact=False).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from tests.backends.test_seekdb import DATA, DIM, N, check_store, clustered

from bench.backends.base import FILTER_KINDS, BackendUnavailable
from bench.backends.chroma import (
    ChromaBackend,
    _native_filter,
    safe_collection_name,
)
from bench.backends.scores import similarity
from bench.backends.servers import ServerStartError, free_port, run_chroma_server
from bench.types import MemoryBatch, Where


def test_similarity_is_one_minus_cosine_distance():
    kind = ChromaBackend.capabilities.native_kind("cosine")
    assert kind == "cosine_distance"
    assert similarity(kind, 0.0) == 1.0
    assert similarity(kind, 0.5) == 0.5
    assert similarity(kind, 2.0) == -1.0


def test_native_filter_shapes():
    assert _native_filter(Where()) is None
    assert _native_filter(Where(roles=("user", "assistant"))) == {"role": {"$in": ["user", "assistant"]}}
    assert _native_filter(Where(conversation_id="c", before=1.5)) == {
        "$and": [{"conversation_id": {"$eq": "c"}}, {"ts": {"$lte": 1.5}}]
    }


def test_collection_names_are_sanitised():
    assert safe_collection_name("recallbench") == "recallbench"
    assert safe_collection_name("run-1.a_b") == "run-1.a_b"
    for raw in ("ab", "-lead", "a b|c", "x" * 80, "1.2.3.4", "a..b", "__"):
        name = safe_collection_name(raw)
        assert 3 <= len(name) <= 63, name
        assert name[0].isalnum() and name[-1].isalnum() and ".." not in name, name
    assert safe_collection_name("a b") != safe_collection_name("a_b")


def test_constructor_rejects_bad_config():
    with pytest.raises(ValueError, match="path"):
        ChromaBackend()
    with pytest.raises(ValueError, match="max_neighbors"):
        ChromaBackend(path="/tmp/x", max_neighbors=-1)


# ------------------------------------------------------------------ persistent local


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("chroma_local"))


@pytest.fixture(scope="module")
def local(local_dir):
    b = ChromaBackend(path=local_dir, collection="clusters")
    b.open(dim=DIM)
    b.add(DATA)
    b.wait_ready(timeout_s=60)
    yield b
    b.drop()
    b.close()


def test_local_scores_filters_and_capabilities(local):
    assert local.name == "chroma"
    caps = local.capabilities
    assert (caps.exact, caps.persistent, caps.server, caps.filters) == (False, True, False, FILTER_KINDS)
    check_store(local)


def test_k_above_matching_rows_returns_what_matches(local):
    # conv-3 has 30 rows; asking for 500 is not an error
    hits = local.search(DATA.vectors[0], k=500, where=Where(conversation_id="conv-3"))
    assert len(hits) == 30
    assert local.search(DATA.vectors[0], k=5, where=Where(conversation_id="nobody")) == []
    assert len(local.search(DATA.vectors[0], k=10_000, where=Where())) == N


@pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning")
def test_hnsw_configuration_from_yaml_values(local_dir):
    b = ChromaBackend(path=local_dir, collection="cfg_case", ef_search=77, ef_construction=120, max_neighbors=12)
    b.open(dim=DIM)
    try:
        hnsw = b._col.configuration["hnsw"]
        assert (hnsw["space"], hnsw["ef_search"], hnsw["ef_construction"], hnsw["max_neighbors"]) == (
            "cosine", 77, 120, 12)
        assert b._col.metadata["recallbench_dim"] == DIM
    finally:
        b.drop()
        b.close()


def test_batches_split_to_the_store_limit_and_wait_ready(local_dir):
    b = ChromaBackend(path=local_dir, collection="batched", batch_size=7)
    b.open(dim=DIM)
    try:
        b.add(DATA)  # 120 rows in chunks of 7 -> 18 upserts; every row is checked, not one per chunk
        assert b._pending == list(DATA.ids)
        b.wait_ready(timeout_s=60)
        assert b._pending == [] and b._col.count() == N and b.unreachable == set()
        for i in (0, 6, 7, 119):
            assert b.search(DATA.vectors[i], k=1, where=Where())[0].id == DATA.ids[i]
        b._pending.append("never|written")
        with pytest.raises(TimeoutError, match="batched.*never\\|written"):
            b.wait_ready(timeout_s=0.3)
    finally:
        b.drop()
        b.close()


# ------------------------------------------------------------------ wait_ready against a stand-in collection
# chroma's HNSW graph can hold a row no search reaches (a node without in-edges: parallel batch inserts on
# small graphs, neighbour-list pruning on large ones). Real chroma does it at random (~2 % of the contract
# test's collections), so the check and repair logic is pinned here on a collection that strands rows on demand.


class _StrandingCollection:
    """Brute-force stand-in for a chroma collection whose search never returns the ids in ``stranded``.
    Once ``repairing`` is set (after the test's own writes), an upsert re-links them unless in ``sticky``."""

    def __init__(self, stranded=(), sticky=(), stored=True):
        self.rows: dict[str, tuple[np.ndarray, dict]] = {}
        self.stranded, self.sticky, self.store_writes = set(stranded), set(sticky), stored
        self.repairing = False
        self.calls: list[tuple] = []

    def upsert(self, ids, embeddings, metadatas):
        self.calls.append(("upsert", tuple(ids)))
        if self.store_writes:
            for i, e, m in zip(ids, embeddings, metadatas, strict=True):
                self.rows[i] = (np.asarray(e, np.float32) / np.linalg.norm(e), dict(m))
        if self.repairing:
            self.stranded -= set(ids) - self.sticky

    def repairs(self) -> list[tuple]:
        return [c for c in self.calls[self._mark:] if c[0] == "upsert"]

    def start_repairing(self) -> None:
        self.repairing, self._mark = True, len(self.calls)

    def count(self):
        return len(self.rows)

    def get(self, ids, include):
        self.calls.append(("get", len(ids)))
        found = [i for i in ids if i in self.rows]
        return {"ids": found, "embeddings": [self.rows[i][0] for i in found] if "embeddings" in include else None,
                "metadatas": [self.rows[i][1] for i in found] if "metadatas" in include else None}

    def query(self, query_embeddings, n_results, include, where=None):
        assert where is None, "the stand-in does not filter"
        self.calls.append(("query", len(query_embeddings), n_results))
        live = [i for i in self.rows if i not in self.stranded]
        mat = np.stack([self.rows[i][0] for i in live]) if live else np.zeros((0, 1), np.float32)
        ids, dists = [], []
        for q in query_embeddings:
            q = np.asarray(q, np.float32) / np.linalg.norm(q)
            d = 1.0 - mat @ q if live else np.zeros(0)
            order = np.argsort(d, kind="stable")[:n_results]
            ids.append([live[j] for j in order])
            dists.append([float(d[j]) for j in order])
        return {"ids": ids, "distances": dists if "distances" in include else None}


class _Client:
    def get_max_batch_size(self):
        return 50


def _stand_in(col) -> ChromaBackend:
    b = ChromaBackend(path="/nonexistent/unused", collection="stand_in")
    b._client, b._col, b._dim = _Client(), col, DIM
    return b


def _rows(n: int, seed: int = 3) -> MemoryBatch:
    data = clustered(seed=seed, n=n)
    return MemoryBatch(ids=tuple(f"r{i}" for i in range(n)), vectors=data.vectors[:n],
                       conversation_ids=tuple("c" for _ in range(n)), roles=tuple("user" for _ in range(n)),
                       timestamps=tuple(float(i) for i in range(n)))


@pytest.mark.parametrize("n", [6, 150])  # below and above _DIRECT_PROBES: direct own-vector probes / traversal first
def test_wait_ready_finds_and_relinks_a_stranded_row_of_any_chunk(n):
    col = _StrandingCollection(stranded={"r2"})  # chunks of 4: r2 is not a chunk's last row, which one probe per chunk checked
    b = _stand_in(col)
    b.batch_size = 4
    batch = _rows(n)
    b.add(batch)
    col.start_repairing()
    b.wait_ready(timeout_s=5)
    assert col.repairs() == [("upsert", ("r2",))]
    assert b.unreachable == set() and b._pending == []
    assert b.search(batch.vectors[2], k=1, where=Where())[0].id == "r2"
    traversals = [c for c in col.calls if c[0] == "query" and c[2] == n and c[1] == 1]
    assert len(traversals) == (2 if n > 100 else 0)  # one per check round, only for large writes
    assert all(len(c) < 3 or c[1] <= 100 for c in col.calls if c[0] == "query")  # batched own-vector probes


def test_wait_ready_reports_rows_that_stay_unreachable_without_waiting(caplog):
    col = _StrandingCollection(stranded={"r1", "r4"}, sticky={"r4"})
    b = _stand_in(col)
    b.add(_rows(6))
    col.start_repairing()
    t0 = time.monotonic()
    with caplog.at_level("WARNING", logger="bench.backends.chroma"):
        b.wait_ready(timeout_s=60)
    assert time.monotonic() - t0 < 5  # a stranded row is not lag: never waits for it
    assert b.unreachable == {"r4"}
    assert "1 of 6 written row(s)" in caplog.text and "'r4'" in caplog.text
    assert col.repairs() == [("upsert", ("r1", "r4")), ("upsert", ("r4",)), ("upsert", ("r4",))]  # 3 rounds
    b.add(MemoryBatch(ids=("r4",), vectors=_rows(6).vectors[4:5], conversation_ids=("c",), roles=("user",),
                      timestamps=(4.0,)))
    assert b.unreachable == set()  # rewritten: checked again at the next wait_ready


def test_wait_ready_times_out_on_rows_never_stored():
    b = _stand_in(_StrandingCollection(stored=False))
    b.add(_rows(3))
    with pytest.raises(TimeoutError, match="3 written row\\(s\\) of collection 'stand_in' still not stored.*'r0'"):
        b.wait_ready(timeout_s=0.2)


def test_upsert_replaces_a_stored_id(local_dir):
    b = ChromaBackend(path=local_dir, collection="upsert_case")
    b.open(dim=4)
    try:
        x, y = np.array([1, 0, 0, 0], np.float32), np.array([0, 1, 0, 0], np.float32)
        b.add(MemoryBatch(ids=("a", "b"), vectors=np.stack([x, y]), conversation_ids=("c", "c"),
                          roles=("user", "user"), timestamps=(1.0, 2.0)))
        b.add(MemoryBatch(ids=("a",), vectors=y[None, :], conversation_ids=("c",), roles=("assistant",),
                          timestamps=(3.0,)))
        b.wait_ready(timeout_s=60)
        hits = b.search(y, k=10, where=Where())
        assert sorted((h.id, round(h.score, 4)) for h in hits) == [("a", 1.0), ("b", 1.0)]
        assert [h.id for h in b.search(y, k=10, where=Where(roles=("assistant",)))] == ["a"]
        assert [h.id for h in b.search(y, k=10, where=Where(before=2.5))] == ["b"]
    finally:
        b.drop()
        b.close()


def test_persistence_close_reopen_and_drop(tmp_path):
    path = str(tmp_path / "persist")
    b = ChromaBackend(path=path, collection="persist_case")
    b.open(dim=DIM)
    b.add(DATA)
    b.wait_ready(timeout_s=60)
    b.close()
    b.close()  # idempotent
    again = ChromaBackend(path=path, collection="persist_case")
    again.open(dim=DIM)
    assert again.search(DATA.vectors[9], k=1, where=Where())[0].id == DATA.ids[9]
    with pytest.raises(ValueError, match="dimension 8"):
        ChromaBackend(path=path, collection="persist_case").open(dim=8)
    again.close()
    again.drop()  # works after close()
    again.drop()  # idempotent
    fresh = ChromaBackend(path=path, collection="persist_case")
    fresh.open(dim=DIM)
    assert fresh.search(DATA.vectors[9], k=1, where=Where()) == []
    fresh.drop()
    fresh.close()


def test_add_rejects_bad_rows(local):
    with pytest.raises(ValueError, match="dim 8 != collection dim 32"):
        local.add(MemoryBatch(ids=("x",), vectors=np.ones((1, 8), np.float32), conversation_ids=("c",),
                              roles=("user",), timestamps=(0.0,)))
    with pytest.raises(ValueError, match="row 0.*timestamp"):
        local.add(MemoryBatch(ids=("x",), vectors=np.ones((1, DIM), np.float32), conversation_ids=("c",),
                              roles=("user",), timestamps=(float("nan"),)))


# ------------------------------------------------------------------ server


def test_server_scores_filters_persistence(server_chroma_server):
    b = ChromaBackend(collection="clusters_srv", **server_chroma_server)
    b.drop()
    b.open(dim=DIM)
    try:
        assert b.name == "chroma_server" and b.capabilities.server is True
        b.add(DATA)
        b.wait_ready(timeout_s=60)
        check_store(b)
        extra = clustered(seed=5, n=4)
        b.add(MemoryBatch(ids=("srv|0",), vectors=extra.vectors[:1], conversation_ids=("s",), roles=("user",),
                          timestamps=(0.0,)))
        b.wait_ready(timeout_s=60)
        b.close()
        again = ChromaBackend(collection="clusters_srv", **server_chroma_server)
        again.open(dim=DIM)
        assert again.search(extra.vectors[0], k=1, where=Where())[0].id == "srv|0"
        again.close()
    finally:
        b.drop()
        b.close()


def test_server_unavailable_is_reported():
    b = ChromaBackend(host="127.0.0.1", port=free_port())
    with pytest.raises(BackendUnavailable, match="chroma server 127.0.0.1:"):
        b.open(dim=4)


# ------------------------------------------------------------------ server process management (bench.backends.servers)


def test_run_chroma_server_stops_its_process(tmp_path):
    import os
    import urllib.request

    with run_chroma_server(tmp_path / "srv") as info:
        assert info.host == "127.0.0.1" and info.overrides() == {"host": "127.0.0.1", "port": info.port}
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{info.port}/api/v2/heartbeat", timeout=5) as resp:
            assert resp.status == 200
        os.kill(info.pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(info.pid, 0)  # stopped and reaped


def test_run_chroma_server_on_a_taken_port_fails_with_the_log(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError, match=r"(?s)chroma server (exited|not ready).*last lines of"):
            with run_chroma_server(tmp_path / "srv", port, timeout_s=20):
                pass
