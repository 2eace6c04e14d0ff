"""The metadata filter (``filter``, issue 27 part 4) through the trace, over EVERY configs/backend/*.yaml (found by
glob; servers from tests/server_fixtures.py, Pinecone from its loopback double), on the hand-worked corpus
datasets/demo_meta (12 turns, 2 conversations, 4 questions; fields in its metadata.json).

Depth 12 >= every conversation, so a store must return exactly the memories a question may see under the filter
(bench.replay.visibility): the sets below, worked out by hand from turns.jsonl. A store with ``metadata`` in its
filters gets a scalar filter pushed down; every other case is post-filtered by recallbench (trace meta says which).
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest

from bench.backends import catalog
from bench.backends.base import LOCAL_SERVER, BackendUnavailable
from bench.data.own import load_own
from bench.embedders.hashing import HashingEmbedder
from bench.replay.trace import build_trace, exact_top, embed_corpus
from bench.replay.visibility import parse_filter
from bench.resources import plugin_names
from server_fixtures import server_unavailable

REPO = Path(__file__).resolve().parents[2]
CORPUS = load_own(path=REPO / "datasets" / "demo_meta")

SCALAR = {"memory_type": ["fact", "preference"], "priority": {"gte": 2}}
SCALAR_WANT = {
    "q1": {"c1|t1", "c1|t3"},  # asked 2025-03-01 12:00: t1-t3 said; t2 is an ack (priority 1)
    "q2": {"c1|t1", "c1|t3", "c1|t4", "c1|t6"},  # whole c1: t2, t5 acks; t7 chitchat, priority 0
    "q3": {"c2|t1", "c2|t2"},  # asked 2025-04-02: t1-t3 said; t3 an ack
    "q4": {"c2|t1", "c2|t2", "c2|t4"},  # whole c2: t3 ack, t5 chitchat
}
LIST = {"tags": "work", "project": {"in": ["alpha", "beta"]}}  # a string-list field: post-filtered by every store
NUMBERS = {"memory_type": "fact", "priority": [0, 3]}  # membership among numbers (qdrant: a nested should)
NUMBERS_WANT = {"q1": {"c1|t1"}, "q2": {"c1|t1", "c1|t4"}, "q3": {"c2|t1"}, "q4": {"c2|t1"}}  # facts of priority 3 (c2 t4: 2)
DIM = 384  # the dimension the contract test's stores use (the Pinecone double is one index of one dimension per session)
LIST_WANT = {"q1": {"c1|t1"}, "q2": {"c1|t1", "c1|t4"}, "q3": set(), "q4": set()}  # tags holding "work": c1 t1, t4


def _store(request, name: str, tmp: Path, **extra):
    caps = catalog.capabilities(name)
    missing = [c for c in caps.clients if importlib.util.find_spec(c.module) is None]
    if missing:
        pytest.skip(f"{name}: its client package {missing[0].package} is not installed")
    if caps.kind == LOCAL_SERVER:
        overrides = request.getfixturevalue("local_servers")(name).overrides()
    else:
        try:
            overrides = dict(request.getfixturevalue(f"server_{name}"))
        except pytest.FixtureLookupError:
            overrides = {}
    if "path" in catalog.backend_config(name):
        overrides.setdefault("path", str(tmp / name))
    return catalog.load_backend(name, stores_dir=tmp, collection=f"rbmf_{uuid.uuid4().hex[:10]}", **overrides, **extra)


@pytest.mark.parametrize("name", plugin_names("backend"))
def test_metadata_filter_on_every_store(request, tmp_path, name):
    emb = HashingEmbedder(dim=DIM)
    tv, qv, _ = embed_corpus(CORPUS, emb)
    for spec, want in ((SCALAR, SCALAR_WANT), (NUMBERS, NUMBERS_WANT), (LIST, LIST_WANT)):
        conds = parse_filter(spec)
        backend = _store(request, name, tmp_path)
        try:
            trace = build_trace(CORPUS, emb, backend, depth=12, warmup=0, progress=False, metadata=conds)
        except BackendUnavailable as e:
            server_unavailable(f"{name} unavailable here: {e}")
        got = dict(zip(trace.table["question_id"], map(list, trace.table["hit_ids"])))
        assert {q: set(ids) for q, ids in got.items()} == want, (name, spec)
        pushed = "metadata" in backend.capabilities.filters and spec is not LIST
        assert trace.meta["metadata_filtered_by"] == ("store" if pushed else "post-filtered by recallbench"), name
        assert trace.meta["metadata_filter"] == {k: v if isinstance(v, dict) else {"in" if isinstance(v, list) else "eq": v}
                                                 for k, v in spec.items()}
        ranks = dict(zip(trace.table["question_id"], map(list, trace.table["gold_exact_ranks"])))
        assert all(r[0] > 0 for q, r in ranks.items() if spec is SCALAR), ranks  # every gold passes the scalar filter
        assert [ranks[q] for q in ("q1", "q2", "q3", "q4")] == [[0], [1], [0], [1]] if spec is NUMBERS else True  # t3, t2: not facts
        assert ranks["q3"] == [0] and ranks["q4"] == [0] if spec is LIST else True  # gold filtered out: unreachable
        if backend.capabilities.exact:  # the exact order of the visibility rule (similarity, then key)
            exact = exact_top(CORPUS, tv, qv, roles=None, k=12, metadata=conds)
            assert [got[q.question_id] for q in CORPUS.questions] == exact, name


def test_metadata_reaches_each_collection_of_the_per_conversation_layout(request, tmp_path):
    """bench.backends.layout splits a batch by conversation: every part keeps its rows' metadata (chroma pushes down)."""
    backend = _store(request, "chroma", tmp_path, layout="per_conversation")
    trace = build_trace(CORPUS, HashingEmbedder(dim=DIM), backend, depth=12, warmup=0, progress=False, metadata=parse_filter(SCALAR))
    assert trace.meta["metadata_filtered_by"] == "store" and trace.meta["collections"] == 2
    assert {q: set(ids) for q, ids in zip(trace.table["question_id"], trace.table["hit_ids"])} == SCALAR_WANT
