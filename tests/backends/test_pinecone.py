"""Pinecone backend specifics, through the real SDK against the loopback PROTOCOL TEST DOUBLE.

The double (bench/tools/harden/doubles.py) says nothing about Pinecone's latency or recall; these tests
check what the adapter sends and how it handles keys, limits, ids, consistency and errors.
Hand-worked fixture: q=[2,0,0,0] vs a=[1,0,0,0], d=[.5,.5,0,0], b=[0,1,0,0], c=[-1,0,0,0]
gives cosines 1, 0.70710678, 0, -1.
"""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

from bench.backends.base import BackendUnavailable
from bench.backends.pinecone import (
    MAX_K,
    PineconeBackend,
    _from_pinecone_id,
    _to_pinecone_id,
    pinecone_filter,
)
from bench.backends.scores import similarity
from bench.tools.harden.doubles import PineconeTestServer, matches
from bench.types import MemoryBatch, Where

pytest.importorskip("pinecone", reason="pinecone SDK not installed")

KEY_ENV = "RECALLBENCH_TEST_PC_UNIT_KEY"
KEY = "pc-unit-key-7f3a9c"  # distinctive, so a leak into logs/messages is caught
Q = np.array([2, 0, 0, 0], dtype=np.float32)


def unit(*v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def mb(rows) -> MemoryBatch:
    return MemoryBatch(
        ids=tuple(r[0] for r in rows),
        vectors=np.stack([r[1] for r in rows]).astype(np.float32),
        conversation_ids=tuple(r[2] for r in rows),
        roles=tuple(r[3] for r in rows),
        timestamps=tuple(r[4] for r in rows),
    )


ROWS = [
    ("a", unit(1, 0, 0, 0), "conv-1", "user", 100.0),
    ("d", unit(0.5, 0.5, 0, 0), "conv-1", "assistant", 200.0),
    ("b", unit(0, 1, 0, 0), "conv-2", "user", 300.0),
    ("c", unit(-1, 0, 0, 0), "conv-2", "assistant", 0.0),
]


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture
def server(key):
    with PineconeTestServer(key) as srv:
        yield srv


def backend(srv, collection="ns-1", **kw) -> PineconeBackend:
    return PineconeBackend(collection=collection, host=srv.host, api_key_env=KEY_ENV, poll_interval_s=0.02, **kw)


def test_similarity_and_ids():
    assert similarity(PineconeBackend.capabilities.native_kind("cosine"), 0.25) == 0.25  # a cosine index's score
    assert _to_pinecone_id("conv-26|D1:3") == "conv-26|D1:3"  # ASCII ids pass unchanged
    assert _to_pinecone_id("café|D1:1") == "caf%C3%A9|D1:1"
    assert _to_pinecone_id("50%") == "50%25"
    for raw in ("café|D1:1", "50%", "a b|c:d", "%C3%A9"):
        assert _from_pinecone_id(_to_pinecone_id(raw)) == raw


def test_filter_translation():
    assert pinecone_filter(Where()) is None
    assert pinecone_filter(Where(conversation_id="conv-1", roles=("user", "assistant"), before=5)) == {
        "conversation_id": {"$eq": "conv-1"},
        "role": {"$in": ["user", "assistant"]},
        "ts": {"$lte": 5.0},
    }


def test_double_filter_language():
    meta = {"conversation_id": "c1", "role": "user", "ts": 10.0}
    assert matches({"ts": {"$lte": 10}}, meta) and not matches({"ts": {"$lt": 10}}, meta)
    assert matches({"$and": [{"role": {"$in": ["user"]}}, {"conversation_id": "c1"}]}, meta)
    assert matches({"$or": [{"role": "assistant"}, {"ts": {"$gte": 10}}]}, meta)
    assert not matches({"role": {"$nin": ["user"]}}, meta)
    assert not matches({"role": {"$lte": "z"}}, meta)  # range operators are numeric only


def test_end_to_end_scores_and_filters(server):
    b = backend(server)
    b.open(dim=4)
    b.add(mb(ROWS))
    b.wait_ready(timeout_s=10)
    hits = b.search(Q, k=10, where=Where())
    assert [h.id for h in hits] == ["a", "d", "b", "c"]
    np.testing.assert_allclose([h.score for h in hits], [1.0, 0.70710678, 0.0, -1.0], atol=1e-6)
    ids = lambda w: [h.id for h in b.search(Q, k=10, where=w)]  # noqa: E731
    assert ids(Where(conversation_id="conv-2")) == ["b", "c"]
    assert ids(Where(roles=("assistant",))) == ["d", "c"]
    assert ids(Where(before=200.0)) == ["a", "d", "c"]
    assert ids(Where(conversation_id="conv-1", roles=("user",), before=150.0)) == ["a"]
    assert ids(Where(roles=())) == []
    # the filter really went to the server (pushed down, not post-filtered): topK 1 still gets a match
    assert ids(Where(conversation_id="conv-2", roles=("assistant",))) == ["c"]
    assert [h.id for h in b.search(Q, k=1, where=Where(conversation_id="conv-2", roles=("assistant",)))] == ["c"]
    b.close()


def test_non_ascii_ids_round_trip(server):
    b = backend(server)
    b.open(dim=4)
    b.add(mb([("café|D1:1", unit(1, 0, 0, 0), "café", "user", 1.0), ("100%|x", unit(0, 1, 0, 0), "c", "user", 1.0)]))
    b.wait_ready(timeout_s=10)
    assert [h.id for h in b.search(Q, k=1, where=Where(conversation_id="café"))] == ["café|D1:1"]
    assert b.search(unit(0, 1, 0, 0), k=1, where=Where())[0].id == "100%|x"
    assert set(server.namespaces["ns-1"].rows) == {"caf%C3%A9|D1:1", "100%25|x"}


@pytest.mark.parametrize("dim,expected_batch", [(8, 100), (1536, 44)])
def test_upsert_batches_under_limits(key, dim, expected_batch):
    # 1536-d: 0.8 * 2 MiB // (1536 * 24 + 1024) = 44 vectors per request
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(250, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    batch = MemoryBatch(ids=tuple(f"c|{i}" for i in range(250)), vectors=vecs,
                        conversation_ids=("c",) * 250, roles=("user",) * 250, timestamps=(0.0,) * 250)
    with PineconeTestServer(key) as srv:
        b = backend(srv)
        b.open(dim=dim)
        b.add(batch)
        sizes = [n for method, path, n in srv.requests if path == "/vectors/upsert"]
        assert sizes == [expected_batch] * (250 // expected_batch) + ([250 % expected_batch] if 250 % expected_batch else [])
        b.wait_ready(timeout_s=10)
        assert len(b.search(vecs[0], k=300, where=Where())) == 250


def test_wait_ready_waits_for_visibility(key):
    with PineconeTestServer(key, visibility_delay_s=1.0) as srv:
        b = backend(srv)
        b.open(dim=4)
        b.add(mb(ROWS))
        assert b.search(Q, k=10, where=Where()) == []  # not visible yet: the delay is real
        b.wait_ready(timeout_s=10)
        assert len(b.search(Q, k=10, where=Where())) == 4
        polls = [p for _m, p, _n in srv.requests if p == "/describe_index_stats"]
        assert len(polls) >= 3  # open + at least two polls


def test_wait_ready_times_out(key):
    with PineconeTestServer(key, visibility_delay_s=30) as srv:
        b = backend(srv)
        b.open(dim=4)
        b.add(mb(ROWS))
        with pytest.raises(TimeoutError, match=r"0 of 4 vectors visible"):
            b.wait_ready(timeout_s=0.2)


def test_reopen_and_overwrite_do_not_hang_wait_ready(server):
    b = backend(server)
    b.open(dim=4)
    b.add(mb(ROWS))
    b.wait_ready(timeout_s=10)
    b.close()
    again = backend(server)
    again.open(dim=4)
    again.wait_ready(timeout_s=1)  # nothing written since open
    again.add(mb(ROWS[:1]))  # overwrite an existing id: the count stays 4
    again.wait_ready(timeout_s=2)
    assert len(again.search(Q, k=10, where=Where())) == 4


def test_drop_is_idempotent_and_scoped(server):
    keep = backend(server, collection="keep")
    keep.open(dim=4)
    keep.add(mb(ROWS))
    gone = backend(server, collection="gone")
    gone.drop()  # never opened, namespace absent (server answers 404): fine
    gone.open(dim=4)
    gone.add(mb(ROWS))
    gone.wait_ready(timeout_s=10)
    gone.drop()
    gone.close()
    gone.drop()  # after close: opens its own client
    gone.open(dim=4)
    assert gone.search(Q, k=10, where=Where()) == []
    keep.wait_ready(timeout_s=10)
    assert len(keep.search(Q, k=10, where=Where())) == 4


def test_no_key_is_unavailable(monkeypatch):
    monkeypatch.delenv("PINECONE_API_KEY", raising=False)
    with pytest.raises(BackendUnavailable, match=r"^PINECONE_API_KEY not set; see README$"):
        PineconeBackend(index_name="my-index").open(dim=4)


def test_key_but_no_index_is_unavailable(key):
    with pytest.raises(BackendUnavailable, match="backend.index_name"):
        PineconeBackend(api_key_env=KEY_ENV).open(dim=4)


def test_rejected_key_never_leaks(key, caplog):
    caplog.set_level(logging.DEBUG)
    with PineconeTestServer("another-key") as srv:
        b = backend(srv)
        with pytest.raises(BackendUnavailable, match="rejected") as err:
            b.open(dim=4)
    assert KEY not in str(err.value) and KEY not in repr(b)
    assert KEY not in caplog.text


def test_key_never_in_logs_on_success(server, caplog):
    caplog.set_level(logging.DEBUG)
    b = backend(server)
    b.open(dim=4)
    b.add(mb(ROWS))
    b.wait_ready(timeout_s=10)
    b.search(Q, k=2, where=Where(conversation_id="conv-1"))
    b.drop()
    assert caplog.text  # something was logged, and ...
    assert KEY not in caplog.text and KEY not in repr(b)


def test_unreachable_host_is_unavailable(key):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = PineconeBackend(host=f"http://127.0.0.1:{port}", api_key_env=KEY_ENV)
    with pytest.raises(BackendUnavailable, match="cannot reach"):
        b.open(dim=4)


def test_wrong_index_shape_is_a_clear_error(key):
    with PineconeTestServer(key, dimension=8) as srv:
        with pytest.raises(ValueError, match="dimension 8, the embedder needs 4"):
            backend(srv).open(dim=4)
    with PineconeTestServer(key, dimension=4, metric="dotproduct") as srv:
        with pytest.raises(ValueError, match="metric 'dotproduct'.*cosine"):
            backend(srv).open(dim=4)


def test_bad_arguments(server):
    b = backend(server)
    with pytest.raises(RuntimeError, match="not open"):
        b.search(Q, k=1, where=Where())
    b.open(dim=4)
    with pytest.raises(ValueError, match="k must be"):
        b.search(Q, k=MAX_K + 1, where=Where())
    with pytest.raises(ValueError, match="query dim 3"):
        b.search(np.ones(3, dtype=np.float32), k=1, where=Where())
    with pytest.raises(ValueError, match="metric"):
        b.open(dim=4, metric="l2")
    with pytest.raises(ValueError, match="namespace"):
        PineconeBackend(collection="")


def test_a_key_typed_into_api_key_env_is_refused_without_echo():
    from bench.backends.pinecone import PineconeBackend

    typed = "pcsk_5xK9Zq_Ab3dEfGh1JkLmNoPqRsTuV"
    with pytest.raises(ValueError, match="pinecone: api_key_env must name an environment variable") as e:
        PineconeBackend(host="http://127.0.0.1:9", api_key_env=typed)
    assert typed not in str(e.value)
